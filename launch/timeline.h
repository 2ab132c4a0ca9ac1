// timeline.h: --trace-steps: a timeline of a few training steps on every rank (the named ranges
// of vt_range_push: each step, each pipeline action, the optimizer, evaluation, checkpoint
// saves), written by world rank 0 as one Chrome trace file (LOG_DIR/trace.json) that Perfetto
// (ui.perfetto.dev) and chrome://tracing open: a row per rank, ordered by pipeline stage, on one
// clock (the times from the end of a barrier before the first traced step, as each host's
// lowest rank read it: exact between the ranks of a host, which share its clock).
#ifndef VT_TIMELINE_H
#define VT_TIMELINE_H

#include <stdint.h>

#include "comm.h"
#include "mesh.h"
#include "vt_backend.h"

typedef struct {
  int64_t first, end;  // the traced steps [first, end), numbered from 0; first < 0: none
  double t_sync;       // the time 0 of the trace on this rank's clock
  int on;
} vt_timeline;

// The window of n steps (--trace-steps) of a run of the steps [start, end): from the second
// step (the first has one-time costs: variant timing, allocations), or the first where the
// run has only one; none where n is 0 or the run has no steps.
vt_timeline vt_timeline_window(int n, int64_t start, int64_t end);
// Collective over world, at every step: starts the recording before the window's first step
// (a barrier, then the clocks read; on a GPU also the device's origin, be's interval_origin), and
// after its last step (done: the run stops after step, which ends the window early) gathers
// every rank's ranges to rank 0, which writes path. On a GPU a rank's row has two tracks: the
// host's ranges, and the device's work per pipeline pass (the backend's timed intervals).
void vt_timeline_before(vt_timeline *t, vt_comm *world, const vt_backend *be, int64_t step);
void vt_timeline_after(vt_timeline *t, vt_comm *world, const vt_mesh *mesh, int64_t step,
                       int done, const char *path);

#endif
