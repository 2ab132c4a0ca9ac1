// ckpt_internal.h: what ckpt.c (saving) and ckpt_resume.c (resuming) share; private to the two.
#ifndef VT_CKPT_INTERNAL_H
#define VT_CKPT_INTERNAL_H

#include "ckpt.h"

// The optimizer's state tensors per parameter in optim.safetensors, torch.optim's names:
// AdamW's (and LAMB's) two moments, SGD's (and LARS's) one momentum buffer.
extern const char *const vt_ckpt_adam_state[2];
extern const char *const vt_ckpt_sgd_state[1];

// The manifest's optimizer settings and schedule for this run's c (has_optim set), with the
// EMA's decay and the freeze patterns: what a save records and what vt_ckpt_check_optim
// compares a saved one with.
void vt_ckpt_manifest_optim(vt_ckpt_manifest *man, const vt_optim_config *c,
                            const vt_vit_config *model);
// The manifest's regularisation and loss settings (checkpoint.h) for this run's o: what a save
// records and what a resume compares a saved one with (a warning). A setting that does nothing
// here (--remode without --reprob, --mix-prob without Mixup or CutMix) is left at its default,
// so that it neither differs on a resume nor needs a flag in vit3d inspect's line.
void vt_ckpt_manifest_settings(vt_ckpt_manifest *man, const vt_train_options *o);
// The manifest's model configuration (sizes, head, layout) of c: what a save records and what
// an --init-from file's model flags are compared with (vt_inspect_model_flags spells it out).
void vt_ckpt_manifest_model(vt_ckpt_manifest *man, const vt_vit_config *c);

#endif
