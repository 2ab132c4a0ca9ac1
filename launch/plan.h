// plan.h: memory plans. Every rank prints its own at start-up (vt_plan_print) and, on a GPU,
// what the device holds after the first step against it (vt_plan_report_memory); `vit3d plan`
// prints every pipeline stage's plan for a mesh of any size from one process, allocating
// nothing, so a job can be sized before it is queued. Knows no MPI.
#ifndef VT_PLAN_H
#define VT_PLAN_H

#include <stddef.h>

#include "model.h"
#include "optim.h"
#include "train.h"

// One rank's plan: its blocks, parameters, gradients, optimizer state and activations. base:
// device memory in use before the model was allocated (CUDA context, cuBLAS, NCCL).
void vt_plan_print(const vt_model *m, const vt_optimizer *opt, int n_micro, size_t base,
                   const vt_train_options *o);

// Host memory a rank keeps for its input batches (pinned on CUDA; not in the device plan): the
// first stage's training loader, (prefetch + 1) micro-batches of B images (synthetic data: one),
// and its evaluation loader with --val-data (while it runs; with --eval-hflip one more batch
// for the mirror images). 0 for other stages (their labels are a few bytes).
double vt_plan_input_mib(const vt_train_options *o, int has_embed, int eval);

// After the first step on a GPU: what the device reports against the plan (issue: within 10%).
void vt_plan_report_memory(const vt_model *m, const vt_optimizer *opt, vt_device device,
                           size_t base);

// vit3d plan: the options of vit3d train, validated for the world tp x pp x dp (dp 1 when not
// given); prints each stage's plan (tensor-parallel ranks of a stage hold the same amounts) and
// returns 0.
int vt_plan_run(const vt_train_options *o);

// vit3d plan --gpus N: every tp x pp x dp mesh of N ranks (TP at most --node-gpus) for the
// flags' model and global batch: whether it is possible (vt_train_validate's reasons), its
// largest stage's plan against 90% of --gpu-mem, the pipeline's ideal idle fraction and the
// bytes on the wire per step; suggests the fitting mesh with the fewest GPUs per model copy
// (TP before PP). Returns 0, or 1 when none fits.
int vt_plan_search(const vt_train_options *o);

#endif
