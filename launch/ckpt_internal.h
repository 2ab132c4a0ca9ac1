// ckpt_internal.h: what ckpt.c (saving) and ckpt_resume.c (resuming) share; private to the two.
#ifndef VT_CKPT_INTERNAL_H
#define VT_CKPT_INTERNAL_H

#include "ckpt.h"

// The optimizer's state tensors per parameter in optim.safetensors, torch.optim's names:
// AdamW's (and LAMB's) two moments, SGD's (and LARS's) one momentum buffer.
extern const char *const vt_ckpt_adam_state[2];
extern const char *const vt_ckpt_sgd_state[1];

// The manifest's optimizer settings and schedule for this run's c (has_optim set): what a save
// records and what vt_ckpt_check_optim compares a saved one with.
void vt_ckpt_manifest_optim(vt_ckpt_manifest *man, const vt_optim_config *c,
                            const vt_vit_config *model);

#endif
