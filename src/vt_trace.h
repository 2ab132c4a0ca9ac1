// vt_trace.h: a recorder of the named ranges (vt_range_push / vt_range_pop, vt_backend.h) with
// their begin and end on the host's monotonic clock, for a timeline of the run (launch/timeline.c
// writes every rank's as one Chrome trace file). Nothing is recorded until vt_trace_start; the
// ranges are the main thread's (the trainer pushes and pops them nowhere else).
// Must not depend on MPI, CUDA or the model.
#ifndef VT_TRACE_H
#define VT_TRACE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char name[64];  // the range's name, cut at 63 characters
  double t0, t1;  // vt_seconds() at its push and its pop; t1 < t0 while it is open
  int device;     // 1: a stretch of the device's work (vt_trace_device_spans), not the host's
} vt_trace_event;

// Records the ranges opened from now on, until vt_trace_stop (a range open at the stop still
// gets its end). Events of earlier recordings stay until vt_trace_clear.
void vt_trace_start(void);
void vt_trace_stop(void);
// The events recorded so far: the host's ranges in the order they opened, the device's
// stretches as vt_trace_device_spans took them.
const vt_trace_event *vt_trace_events(int *count);
void vt_trace_clear(void);  // drops the events and frees their memory

// vt_range_push / vt_range_pop's part (backend.c): a range opened and closed, recorded while
// recording is on. Every push has its pop; depths past 64 are not recorded.
void vt_trace_push(const char *name);
void vt_trace_pop(void);

// The device's side (a GPU's, whose work runs after the host queued it): while recording,
// vt_trace_device_name names the next stretch of device work closed (the backend's
// interval_end), and vt_trace_device_spans records the stretches' times in the order closed
// (interval_take's spans, each its begin and end on the host clock) under those names, as
// device events. Stretches without a name, or names without a stretch, are dropped (counted).
void vt_trace_device_name(const char *name);
int vt_trace_device_named(void);  // the names waiting for their stretches
void vt_trace_device_spans(const double *spans, int n);
int vt_trace_device_dropped(void);

#ifdef __cplusplus
}
#endif

#endif
