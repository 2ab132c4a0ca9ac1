// config.h: the ViT configuration, timm's size presets and the derived sizes.
// Must not depend on MPI, CUDA or any backend.
#ifndef VT_CONFIG_H
#define VT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

typedef struct {
  char name[32];    // preset it started from, "custom" when built by hand
  int img_size;     // S: square images S x S, 3 channels
  int patch_size;   // P
  int width;        // C
  int depth;        // transformer blocks
  int heads;        // H
  float mlp_ratio;  // F = C * mlp_ratio
  int num_classes;  // K
  int global_pool;  // 0: the class token, normalised by `norm` (timm's 'token'); 1: the mean of
                    // the patch tokens, normalised by `fc_norm` (timm's 'avg', MAE's
                    // fine-tuning head; timm then has no `norm`)
  float head_init_std;  // std of the head weight's truncated normal initialisation; 0: timm's
                        // 0.02 (MAE's fine-tuning: 2e-5)
} vt_vit_config;

// Derived sizes.
static inline int vt_cfg_patches(const vt_vit_config *c) {
  return (c->img_size / c->patch_size) * (c->img_size / c->patch_size);
}
static inline int vt_cfg_tokens(const vt_vit_config *c) { return vt_cfg_patches(c) + 1; }
static inline int vt_cfg_head_dim(const vt_vit_config *c) { return c->width / c->heads; }
static inline int vt_cfg_mlp_hidden(const vt_vit_config *c) {
  return (int)((float)c->width * c->mlp_ratio);
}

// Fills cfg from a preset name (vit-ti16, vit-s16, vit-b16, vit-l16, vit-h14; also "tiny", a
// small model for tests and the quick start). Unknown names: VT_ERR_INPUT and a message listing
// the known ones.
vt_status vt_config_preset(const char *name, vt_vit_config *cfg, char *err, size_t errlen);

// Checks that the sizes fit together (image divisible by patch, width by heads, ...).
vt_status vt_config_validate(const vt_vit_config *cfg, char *err, size_t errlen);

// Names of the presets, for --help.
const char *vt_config_preset_names(void);

// Model FLOPs of one training image (forward + backward = 3x forward, matmuls only).
double vt_config_train_flops(const vt_vit_config *cfg);

#endif
