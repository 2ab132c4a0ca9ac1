// report.h: what a training run tells its user: the recipe's extra options at start-up, where
// each rank runs, the progress line and metrics.jsonl per step, the first step's traffic per
// axis, the pipeline's idle fractions. Knows no MPI (the comm API only).
#ifndef VT_REPORT_H
#define VT_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "eval.h"
#include "metrics_log.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "tfevents.h"
#include "train.h"

// The progress line and the metrics.jsonl line of one step (rank 0).
typedef struct {
  int64_t step;  // 1-based
  double loss, gnorm, img_s, step_ms;
  double image_flops;  // model FLOPs of a training image (vt_config_train_flops)
  float lr;
  int64_t bad_images, skipped;
  double data_wait_ms;  // mean over the decoding ranks of their waits for the loader; -1: none
  int eval_now, eval_ema;
  vt_eval_result ev, ev_ema;  // the weights, and their EMA (eval_ema)
  const char *ranks_json;  // per-rank arrays, or ""
} vt_step_log;

// Rank 0: the optimizer and the loss, then the recipe's options that are off by default, when
// on, one line each.
void vt_report_recipe(const vt_train_options *o, const vt_optim_config *oc);
// Rank 0: the learning rate's schedule in steps (a per-epoch one is said with the epochs).
void vt_report_schedule(const vt_optim_config *oc);
// Every rank: host, world and local rank, mesh coordinates and device, one line each.
void vt_report_placement(vt_comm *world, vt_mesh_coord me, const char *device, int threads);
// Rank 0: the progress line every --log-interval steps, the step's metrics.jsonl line and its
// TensorBoard scalars (tb may be NULL; a failed write is said once and ends the event file).
void vt_report_step(const vt_train_options *o, vt_metrics_log *metrics, vt_tfevents **tb,
                    const vt_step_log *l, double t_elapsed, int64_t steps_done, int world_size);
// This rank's first-step traffic per axis and op to LOG_DIR/comm.rank<R>.json, with what the
// formulas need to predict it (tests/test_traffic.py).
void vt_report_comm_stats(const vt_train_options *o, const vt_model *m, const vt_optimizer *opt,
                          vt_mesh_coord me, int world_rank, int n_micro);
// Rank 0 prints each pipeline stage's idle fraction (1 - compute / step time) beside the ideal
// bubble (vt_schedule_bubble_formula) and the idle the schedule simulator predicts from this
// run's pass times: pass_ms, this rank's mean forward, backward and weight pass (ZB-H1; else 0)
// per unit, averaged over the stages that ran them (the backend's intervals: host clocks on the
// CPU, timing events on a GPU; a wait for a slot's sends is idle). The other schedules are
// simulated with the virtual stages that the model's frozen_layers leading layers (of depth
// blocks) leave wholly frozen under each. Collective over world.
void vt_report_pipeline_idle(vt_comm *world, const vt_mesh *mesh, vt_mesh_coord me,
                             double idle, const double pass_ms[3], const vt_schedule_spec *spec,
                             int depth, int frozen_layers);

#endif
