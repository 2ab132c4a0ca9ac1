// schedule_internal.h: what the pipeline schedule files (schedule.c, schedule_zbv.c) share: the
// list builder and its helpers, and ZB-V's list and timed choice. Not a public header: nothing
// outside these files includes it.
// Must not depend on MPI, NCCL, CUDA or the model, as schedule.h.
#ifndef VT_SCHEDULE_INTERNAL_H
#define VT_SCHEDULE_INTERNAL_H

#include "schedule.h"

// A list being built into out[0..capacity).
typedef struct {
  vt_schedule_action *out;
  int count, capacity;
  int weights;  // ZB-H1: weight passes placed so far (micro-batches 0..weights-1)
} vt_sched_builder;

static inline vt_schedule_action vt_sched_compute(vt_schedule_op op, int mb, int chunk) {
  return (vt_schedule_action){op, mb, chunk, 0, 0, {{0}}, {{0}}};
}

static inline vt_schedule_action vt_sched_transfer(void) {
  return vt_sched_compute(VT_SCHEDULE_TRANSFER, -1, -1);
}

// schedule.c: the rank that holds virtual stage vs; appending an action (fatal when full); a
// send or receive added to a transfer action; a unit's compute with its transfers in plain order.
int vt_sched_vstage_rank(const vt_schedule_spec *s, int vs);
void vt_sched_push(vt_sched_builder *b, vt_schedule_action a);
void vt_sched_add_xfer(vt_schedule_action *a, int is_send, vt_schedule_xfer_kind kind, int mb,
                       int chunk);
void vt_sched_unit(vt_sched_builder *b, const vt_schedule_spec *s, int r, int backward, int mb,
                   int chunk);

// schedule_zbv.c: rank r's ZB-V list appended to b (kinds: a timed order's, NULL: the equal-pass
// order), returning b->count; and the choice of order for s->costs (1: kinds holds the timed
// order to build, 0: the equal-pass order).
int vt_sched_build_zbv(const vt_schedule_spec *s, int r, vt_sched_builder *b,
                       const int (*kinds)[2]);
int vt_sched_zbv_timed_choice(const vt_schedule_spec *s, int kinds[6][2]);

#endif
