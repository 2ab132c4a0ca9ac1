// optim.h: the learning-rate schedule (linear warmup, then cosine decay to min_lr), gradient
// clipping by global norm and AdamW over the parameter table. Must not depend on MPI.
#ifndef VT_OPTIM_H
#define VT_OPTIM_H

#include <stdint.h>

#include "params.h"
#include "vt_backend.h"

typedef struct {
  float lr, min_lr;
  int64_t warmup_steps, total_steps;
  float beta1, beta2, eps, weight_decay;
  float clip_grad;  // max global gradient norm; 0 turns clipping off
} vt_optim_config;

// Learning rate of step s (0-based): lr * (s+1)/warmup during warmup, then a half cosine from
// lr at the end of warmup down to min_lr at total_steps.
float vt_lr_at(const vt_optim_config *oc, int64_t step);

typedef struct {
  float *m, *v;  // backend memory, table.total elements each
  int64_t t;     // AdamW steps taken
} vt_adamw_state;

void vt_adamw_state_init(vt_adamw_state *s, const vt_backend *be, int64_t count);
void vt_adamw_state_free(vt_adamw_state *s, const vt_backend *be);

// The global L2 norm of all gradients.
double vt_grad_norm(const vt_backend *be, const vt_param_table *t, const float *grads);

// One optimizer step: clips the gradients to oc->clip_grad (PyTorch's clip_grad_norm_ rule:
// scale by clip / (norm + 1e-6) when that is below 1), then AdamW on every tensor, weight decay
// only where the table says so. grad_norm is the norm before clipping.
void vt_optim_step(const vt_backend *be, const vt_param_table *t, float *params, float *grads,
                   vt_adamw_state *s, const vt_optim_config *oc, float lr, double grad_norm);

#endif
