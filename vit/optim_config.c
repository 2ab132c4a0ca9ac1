// optim_config.c: what the optimizer's settings make of a step, a layer or a tensor name, as
// pure functions of vt_optim_config: the learning rate at a step (warmup, then cosine, linear
// or constant; per step or timm's per epoch), the layer-wise lr scale, the EMA's decay at a step
// (timm's ModelEmaV3 warmup) and the frozen tensors (--freeze, --trainable). optim.c's updates
// use them; so do the plans and the checkpoints' manifests. Must not depend on a backend or MPI.
#include <math.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

// The decay after the warmup at t of T: from lr at 0 to min_lr at T, where range is lr - min_lr
// (the per-step schedule subtracts in float, timm's per-epoch one in double: each keeps its
// bits).
static double decay(const vt_optim_config *oc, double range, double t, double T) {
  if (oc->sched == VT_SCHED_CONSTANT) return oc->lr;
  if (oc->sched == VT_SCHED_LINEAR) return oc->min_lr + range * (1.0 - t / T);
  return oc->min_lr + 0.5 * range * (1.0 + cos(3.14159265358979323846 * t / T));
}

// timm's CosineLRScheduler (or PolyLRScheduler with power 1) at epoch e (t_in_epochs,
// cycle_limit 1), in its double arithmetic. A warmup from --warmup-lr 0 (vit3d's default; timm's
// is 1e-5) goes as the per-step one, epoch e of W at lr (e + 1) / W (at most lr: W may be a
// fraction), where timm's formula would train the whole first epoch at lr 0.
static float lr_of_epoch(const vt_optim_config *oc, double e) {
  const double lr = oc->lr, min_lr = oc->min_lr, warm = oc->warmup_lr;
  if (e < oc->warmup_epochs && warm == 0.0)
    return (float)(lr * fmin(1.0, (e + 1.0) / oc->warmup_epochs));
  if (e < oc->warmup_epochs) return (float)(warm + e * ((lr - warm) / oc->warmup_epochs));
  if (e >= oc->cycle_epochs) return (float)decay(oc, lr - min_lr, 1.0, 1.0);
  return (float)decay(oc, lr - min_lr, e, oc->cycle_epochs);
}

float vt_lr_at(const vt_optim_config *oc, int64_t step) {
  if (oc->epoch_images > 0)
    return lr_of_epoch(oc, (double)(step * oc->step_images / oc->epoch_images));
  if (step < oc->warmup_steps && oc->warmup_lr > 0)
    return oc->warmup_lr + (oc->lr - oc->warmup_lr) * (float)step / (float)oc->warmup_steps;
  if (step < oc->warmup_steps) return oc->lr * (float)(step + 1) / (float)oc->warmup_steps;
  int64_t span = oc->total_steps - oc->warmup_steps;
  if (span <= 0) return oc->lr;
  double progress = (double)(step - oc->warmup_steps) / (double)span;
  if (progress > 1.0) progress = 1.0;
  return (float)decay(oc, oc->lr - oc->min_lr, progress, 1.0);
}

vt_status vt_freeze_mark(const vt_optim_config *cfg, const vt_param_table *t,
                         unsigned char *frozen, int *count, char *err, size_t errlen) {
  const char *pat[2] = {cfg->freeze, cfg->trainable}, *flag[2] = {"--freeze", "--trainable"};
  regex_t re[2];
  for (int k = 0; k < 2; k++) {
    if (!pat[k][0]) continue;
    const int rc = regcomp(&re[k], pat[k], REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char why[128];
      regerror(rc, &re[k], why, sizeof why);
      if (k == 1 && pat[0][0]) regfree(&re[0]);
      snprintf(err, errlen, "%s '%s' is not a regular expression (%s); it is POSIX extended, "
               "matched against timm's names such as blocks.0.attn.qkv.weight", flag[k], pat[k],
               why);
      return VT_ERR_INPUT;
    }
  }
  *count = 0;
  for (int i = 0; i < t->count; i++) {
    const char *name = t->p[i].name;
    frozen[i] = (pat[0][0] && regexec(&re[0], name, 0, NULL, 0) == 0) ||
                (pat[1][0] && regexec(&re[1], name, 0, NULL, 0) != 0);
    *count += frozen[i];
  }
  for (int k = 0; k < 2; k++)
    if (pat[k][0]) regfree(&re[k]);
  return VT_OK;
}

int vt_freeze_leading_layers(const vt_optim_config *cfg, const vt_vit_config *model) {
  if (!cfg->freeze[0] && !cfg->trainable[0]) return 0;
  vt_freeze_summary fz;
  char err[320];
  VT_CHECK(vt_freeze_summarize(cfg, model, &fz, err, sizeof err) == VT_OK, "%s", err);
  return fz.leading_layers;
}

const char *vt_freeze_flags(const vt_optim_config *cfg, char *buf, size_t size) {
  const int f = cfg->freeze[0] != '\0', t = cfg->trainable[0] != '\0';
  snprintf(buf, size, "%s%s%s%s%s%s%s", f ? "--freeze '" : "", cfg->freeze, f ? "'" : "",
           f && t ? " " : "", t ? "--trainable '" : "", cfg->trainable, t ? "'" : "");
  return buf;
}

vt_status vt_freeze_summarize(const vt_optim_config *cfg, const vt_vit_config *model,
                              vt_freeze_summary *s, char *err, size_t errlen) {
  vt_param_table t;
  vt_params_build(&t, model, vt_shard_whole());
  unsigned char *frozen = calloc((size_t)t.count + 1, 1);
  VT_CHECK(frozen != NULL, "out of host memory");
  *s = (vt_freeze_summary){.all_tensors = t.count, .all_elements = t.total};
  const vt_status st = vt_freeze_mark(cfg, &t, frozen, &s->tensors, err, errlen);
  uint32_t h = 2166136261u;
  s->leading_layers = model->depth + 2;  // the first layer with a trained tensor
  for (int i = 0; st == VT_OK && i < t.count; i++) {
    if (!frozen[i] && t.p[i].layer < s->leading_layers) s->leading_layers = t.p[i].layer;
    if (!frozen[i]) continue;
    s->elements += t.p[i].count;
    for (const char *c = t.p[i].name;; c++) {
      h = (h ^ (unsigned char)(*c ? *c : '\n')) * 16777619u;
      if (!*c) break;
    }
  }
  s->names_hash = s->tensors ? h : 0;
  free(frozen);
  vt_params_free(&t);
  return st;
}

double vt_layer_lr_scale(const vt_optim_config *cfg, int layer) {
  if (!(cfg->layer_decay > 0.0f && cfg->layer_decay < 1.0f)) return 1.0;
  return pow(cfg->layer_decay, cfg->depth + 1 - layer);
}

float vt_ema_decay_at(const vt_optim_config *cfg, int64_t t) {
  if (!cfg->ema_warmup) return cfg->ema_decay;
  const int64_t s = t - 1;  // ModelEmaV3.get_decay(step = t): max(0, step - 1)
  if (s <= 0) return 0.0f;
  const double d = 1.0 - pow(1.0 + (double)s, -2.0 / 3.0);
  return (float)(d < cfg->ema_decay ? d : cfg->ema_decay);
}
