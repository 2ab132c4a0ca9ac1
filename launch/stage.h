// stage.h: the executor of a pipeline stage's schedule: one rank runs its list of actions
// (parallel/schedule.h) for one step, the forward, backward and weight passes of its model
// chunks on its micro-batches (loading each micro-batch's data where it is needed) and the
// transfers of activations and gradients to its pipeline neighbours. Used by train.c.
#ifndef VT_STAGE_H
#define VT_STAGE_H

#include <stdint.h>

#include "comm.h"
#include "data.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "train.h"

// What one rank needs to run its stage's schedule.
typedef struct {
  const vt_train_options *o;
  vt_model *m;
  vt_comm *pp;
  int pp_rank, B;
  vt_schedule_spec spec;
  // Each unit's slot for the whole step, unit_slot[chunk * n_micro + mb]
  // (vt_schedule_assign_slots), and under ZB-H1 its weight set (vt_schedule_assign_weight_sets;
  // else all -1): the same every step.
  int *unit_slot, *unit_wset;
  // The chunk whose forward takes the micro-batch's data: the head's on the last stage (its
  // labels), else chunk 0 (the first stage's images; other stages load nothing). ZB-V's rank 0
  // holds both: its chunk 0 loads the images, and the labels (label_chunk 1, the head's) wait in
  // stash_labels (n_micro x B) and stash_mix (n_micro x B, when Mixup or CutMix makes targets)
  // for the head's forward. Elsewhere label_chunk == data_chunk.
  int data_chunk, label_chunk;
  int32_t *stash_labels;
  vt_mix_target *stash_mix;
  int stash_has_mix;
  vt_data *data;
  vt_optimizer *opt;  // starts each layer's DP reduction during the step's last backward
  int n_micro;
  // Last stage: every micro-batch's per-sample losses, (n_micro, B) in device memory, brought
  // to the host once per step (not once per micro-batch, which would make the host wait for
  // the device after every forward), and their host copy.
  float *step_losses, *host_step_losses;
  // Milliseconds each kind of pass (forward, backward, weight) took on the device and the passes
  // run, steps after the first, for the pipeline idle report: the backend's intervals, taken
  // after each step's synchronize (vt_backend.h).
  double pass_ms[VT_INTERVAL_KINDS], passes[VT_INTERVAL_KINDS];
  // The next step's first micro-batch is loaded at the end of this step (the loop sets
  // prefetch_next when nothing uses the slots in between), so that its images upload during
  // the step's last backward and the optimizer instead of after them; ahead_step/ahead_mb name
  // the micro-batch already in its slot (ahead_step -1: none).
  int prefetch_next;
  int64_t ahead_step;
  int ahead_mb;
  // The loader's count of bad images (vt_data's bad) when this step's own loads ended, before
  // a micro-batch of the next step was loaded ahead: they count in the step whose images they
  // are (a wait for the decoders counts in the step whose time it took: train_step.c).
  int64_t loaded_bad;
} vt_stage_ctx;

// Runs one step's actions in order; returns the sum of this rank's per-sample losses (last
// stage) or 0. A transfer action posts its sends and receives together (vt_comm_exchange).
double vt_stage_run(vt_stage_ctx *x, const vt_schedule_action *acts, int nacts, int64_t step);

// ZB-V under --pp-pass-times auto, after a step whose pass times x holds (x->pass_ms, x->passes:
// the run's second step): the ranks agree on the mean forward, input-gradient and weight pass
// times per unit (relative to the forward's, rounded to 0.01; collective over world), and where
// the order built for them (vt_schedule_spec.costs) fits every rank's activation and weight
// sets, and the micro-batch already loaded ahead keeps its slot, every rank takes it: acts,
// *nacts, x->spec, x->unit_slot and x->unit_wset. Rank 0 logs the times and the simulated idle of
// both orders. Returns 1 when the lists changed. The bits of the steps do not: every order runs
// each chunk's micro-batches in order.
int vt_stage_retime(vt_stage_ctx *x, vt_comm *world, vt_schedule_action *acts, int *nacts,
                    int cap, int nslots, int nwsets);

#endif
