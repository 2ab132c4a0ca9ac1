// optim.c: schedule, clipping and AdamW over the parameter table.
#include "optim.h"

#include <math.h>

#include "vt_ops.h"

float vt_lr_at(const vt_optim_config *oc, int64_t step) {
  if (step < oc->warmup_steps) return oc->lr * (float)(step + 1) / (float)oc->warmup_steps;
  int64_t span = oc->total_steps - oc->warmup_steps;
  if (span <= 0) return oc->lr;
  double progress = (double)(step - oc->warmup_steps) / (double)span;
  if (progress > 1.0) progress = 1.0;
  return (float)(oc->min_lr + 0.5 * (oc->lr - oc->min_lr) * (1.0 + cos(3.14159265358979323846 * progress)));
}

void vt_adamw_state_init(vt_adamw_state *s, const vt_backend *be, int64_t count) {
  s->m = be->alloc((size_t)count * sizeof(float));
  s->v = be->alloc((size_t)count * sizeof(float));
  VT_CHECK(s->m && s->v, "out of %s memory for %lld MiB of AdamW state", be->name,
           (long long)(2 * count * 4) >> 20);
  s->t = 0;
}

void vt_adamw_state_free(vt_adamw_state *s, const vt_backend *be) {
  be->free(s->m);
  be->free(s->v);
  s->m = s->v = NULL;
}

double vt_grad_norm(const vt_backend *be, const vt_param_table *t, const float *grads) {
  double ss = vt_sumsq(be, grads, t->total);
  return sqrt(ss);
}

void vt_optim_step(const vt_backend *be, const vt_param_table *t, float *params, float *grads,
                   vt_adamw_state *s, const vt_optim_config *oc, float lr, double grad_norm) {
  if (oc->clip_grad > 0.0f) {
    double coef = oc->clip_grad / (grad_norm + 1e-6);
    if (coef < 1.0) vt_scale(be, grads, (float)coef, t->total);
  }
  s->t++;
  for (int i = 0; i < t->count; i++) {
    const vt_param *p = &t->p[i];
    vt_adamw(be, params + p->offset, grads + p->offset, s->m + p->offset, s->v + p->offset,
             p->count, lr, oc->beta1, oc->beta2, oc->eps, p->decay ? oc->weight_decay : 0.0f,
             s->t);
  }
}
