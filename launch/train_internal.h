// train_internal.h: what train.c's run, train_step.c's steps and train_check.c's checks share;
// private to the three.
#ifndef VT_TRAIN_INTERNAL_H
#define VT_TRAIN_INTERNAL_H

#include <stdio.h>

#include "checklog.h"
#include "checkpoint.h"
#include "comm.h"
#include "data.h"
#include "mesh.h"
#include "metrics_log.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "stage.h"
#include "tfevents.h"
#include "train.h"

// Collective: whether every rank can make files in the folders of the output files written at
// the run's end (every rank writes its part of --final-weights), checked at its start, where a
// missing or read-only folder costs nothing; the lowest rank that cannot says why.
int vt_train_outputs_writable(const vt_train_options *o, vt_comm *world);
// After the device is picked: whether its kernels take the model's attention head dim and the
// MAP head's tokens in this precision (the GPU's shared memory per block); 0 with what to do
// in err otherwise.
int vt_train_device_fits(const vt_train_options *o, char *err, size_t errlen);
// The lengths given in epochs made steps of this training set's n images (every rank holds the
// index, so every rank reaches the same verdict), into the options and the optimizer's
// schedule; rank 0 logs them. 0 (logged) when they make no valid run.
int vt_train_epochs_to_steps(vt_train_options *o, vt_optimizer *opt, int64_t n, int world_rank);
// Rank 0 of a resumed run: whether the checkpoint in dir (its manifest saved) was made
// with this run's learning-rate schedule and optimizer settings (cfg), or --resume-override 1
// lets this run's replace them (warned); 0 (logged, with what to do) otherwise.
int vt_train_resume_ok(const vt_train_options *o, const vt_ckpt_manifest *saved,
                       const vt_optim_config *cfg, const char *dir);

// One run from start-up to the end: what its phases (train.c) and its steps (train_step.c)
// share. x, the stage's context, points into it (o, m, opt, data), so a train_run stays where
// it was made.
typedef struct {
  vt_train_options o;  // a copy, so that --epochs can become steps once the dataset is open
  vt_comm *world, *tp, *pp, *dp;
  int world_rank, world_size;
  const vt_backend *be;
  vt_mesh mesh;
  vt_mesh_coord me;
  size_t mem_base;    // device memory held before the model: the CUDA context, cuBLAS, NCCL's
  double slow_limit;  // startup, checkpoint saves and the end: ten times the limit of a step
  vt_schedule_kind kind;
  int pass_times;  // vt_train_pass_times of --pp-pass-times
  vt_schedule_action *acts;
  int nacts, cap, nslots, nwsets, n_micro;
  int *unit_slot, *unit_wset;
  vt_model m;
  vt_optimizer opt;
  vt_data data;
  vt_stage_ctx x;
  vt_ckpt_manifest saved;  // world rank 0: the manifest of the checkpoint resumed from
  char resumed_from[1100];  // that checkpoint's directory ("" for a fresh start)
  vt_checklog check;
  vt_metrics_log metrics;  // rank 0 with --log-dir (metrics.open)
  vt_tfevents *tb;  // TensorBoard's event file beside metrics.jsonl; not needed to train
  int64_t start_step, end_step;
  int64_t saved_step;  // the step of this run's last save that did not fail at once (0: none)
  int last_save_failed;  // the save after the run's last step failed (rc VT_EXIT_FAILED)
  double t_start, timed_s, busy_s;  // timed_s: the steps after the first, for the idle report;
                                    // busy_s: since the last rank report
  int64_t report_first, skipped, nonfinite_run;
  int64_t bad_images;  // world rank 0: training images found bad since the run began
  char *ranks_json;
  size_t json_len;
  int rc;
} train_run;

// Step step (numbered from 0) of the run: the stage's passes, the global loss and the
// optimizer, then evaluation, checkpoint and reports where due (train_step.c). 1 when the run
// stops after it (r->rc says why), else 0.
int vt_train_step(train_run *r, int64_t step);

#endif
