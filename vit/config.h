// config.h: the ViT configuration, timm's size presets and the derived sizes.
// Must not depend on MPI, CUDA or any backend.
#ifndef VT_CONFIG_H
#define VT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

typedef struct {
  char name[32];    // preset it started from; "custom" where the flags changed its shape
  int img_size;     // S: square images S x S, 3 channels
  int patch_size;   // P
  int width;        // C
  int depth;        // transformer blocks
  int heads;        // H
  double mlp_ratio;  // F = C * mlp_ratio, whole (in double, as timm's int(C * mlp_ratio)),
                     // unless mlp_dim is set
  int mlp_dim;      // F when > 0, whatever mlp_ratio says (big_vision's mlp_dim: SigLIP So400m's
                    // 4304 over width 1152, a ratio no float writes exactly); 0: from mlp_ratio
  int num_classes;  // K
  int global_pool;  // 0: the class token, normalised by `norm` (timm's 'token'); 1: the mean of
                    // the patch tokens, normalised by `fc_norm` (timm's 'avg', MAE's
                    // fine-tuning head; timm then has no `norm`); 2: the mean of the patch
                    // tokens each normalised by `norm` (timm's 'avg' with fc_norm=False,
                    // big_vision's 'gap': SigLIP, the *_gap_* ViTs); 3: attention pooling by a
                    // learned latent query over every token normalised by `norm`, then an MLP
                    // (timm's 'map', AttentionPoolLatent as attn_pool; big_vision's MAP head:
                    // SigLIP)
  float head_init_std;  // std of the head weight's truncated normal initialisation; 0: timm's
                        // 0.02 (MAE's fine-tuning: 2e-5)
  int init_jax;         // 1: timm's weight_init='jax' (Flax's initialisers, big_vision's): Linear
                        // weights Xavier-uniform, `mlp` biases normal(1e-6), other biases 0, the
                        // head all 0, the patch embedding and pre-logits LeCun-normal; 0: timm's
                        // default (truncated normal 0.02, PyTorch's Conv2d default)
  float layer_scale;    // LayerScale's initial gamma (timm's init_values: CaiT, DeiT III 1e-6,
                        // DINOv2 1e-5): each branch's output is scaled per channel by a learned
                        // gamma (blocks.i.ls1.gamma, ls2.gamma); 0: no LayerScale
  int no_embed_class;   // 1: pos_embed covers the patch tokens only (timm's no_embed_class: DeiT
                        // III, DINOv2); 0: every token, the class token's row first
  int reg_tokens;       // register tokens after the class token (timm's reg_tokens, "Vision
                        // Transformers Need Registers"): reg_token (1, R, C)
  int qk_norm;          // 1: LayerNorm over each head's q and k (timm's qk_norm, ViT-22B):
                        // blocks.i.attn.q_norm and k_norm, weights (D) shared by the heads
  int no_qkv_bias;      // 1: the qkv Linear has no bias (timm's qkv_bias=False, ViT-22B)
  int no_class_token;   // 1: no class token (timm's class_token=False): the registers, if any,
                        // are the only prefix tokens; needs global_pool 1, 2 or 3
  int parallel;         // 1: parallel blocks (ViT-22B, timm's ParallelScalingBlock):
                        // x + attn(norm1(x)) + mlp(norm1(x)), one LayerNorm, one LayerScale
                        // (blocks.i.ls.gamma) and one drop path on the sum; no norm2
  int gelu_tanh;        // 1: the MLPs' GELU is the tanh approximation (timm's act_layer
                        // 'gelu_tanh'; Flax's default, so big_vision's ViTs and SigLIP); 0: erf
  int quick_gelu;       // 1: the MLPs' activation is x sigmoid(1.702 x) (timm's act_layer
                        // 'quick_gelu': OpenAI's CLIP towers); not with gelu_tanh
  int pre_logits;       // R > 0: a pre-logits layer between the pooled features and the head,
                        // Linear(C, R) then tanh (big_vision's rep_size, the original ViT's
                        // "representation layer"; timm's old pre_logits.fc); head (K, R). 0: none
  int pos_sincos;       // 1: pos_embed is big_vision's fixed 2D sin-cos table (posemb
                        // 'sincos2d': "Better plain ViT baselines"), set at init and never
                        // trained (no gradient); needs positions on the patch tokens only and a
                        // width divisible by 4. 0: learned (timm's)
  int pre_norm;         // 1: a LayerNorm of the embedding's output before the first block
                        // (timm's pre_norm, norm_pre: the CLIP image towers), and no patch
                        // embedding bias (timm: bias=not pre_norm); 0: none
  float norm_eps;       // every LayerNorm's eps (vt_cfg_norm_eps); 0: timm's ViT 1e-6 (the CLIP
                        // towers' nn.LayerNorm: 1e-5)
} vt_vit_config;

// The LayerNorms' eps.
static inline float vt_cfg_norm_eps(const vt_vit_config *c) {
  return c->norm_eps > 0.0f ? c->norm_eps : 1e-6f;
}

// Derived sizes.
static inline int vt_cfg_patches(const vt_vit_config *c) {
  return (c->img_size / c->patch_size) * (c->img_size / c->patch_size);
}
// Prefix tokens: the class token and the registers, ahead of the patch tokens.
static inline int vt_cfg_prefix_tokens(const vt_vit_config *c) {
  return (c->no_class_token ? 0 : 1) + c->reg_tokens;
}
static inline int vt_cfg_tokens(const vt_vit_config *c) {
  return vt_cfg_patches(c) + vt_cfg_prefix_tokens(c);
}
// The first token with a position embedding (0, or the first patch token with no_embed_class)
// and pos_embed's rows.
static inline int vt_cfg_pos_first(const vt_vit_config *c) {
  return c->no_embed_class ? vt_cfg_prefix_tokens(c) : 0;
}
static inline int vt_cfg_pos_tokens(const vt_vit_config *c) {
  return vt_cfg_tokens(c) - vt_cfg_pos_first(c);
}
static inline int vt_cfg_head_dim(const vt_vit_config *c) { return c->width / c->heads; }
// The head's input width: the pre-logits layer's, or the stream's.
static inline int vt_cfg_head_in(const vt_vit_config *c) {
  return c->pre_logits > 0 ? c->pre_logits : c->width;
}
static inline int vt_cfg_mlp_hidden(const vt_vit_config *c) {
  return c->mlp_dim > 0 ? c->mlp_dim : (int)(c->width * c->mlp_ratio);
}

// Fills cfg from a preset name (vit-ti16, vit-s16, vit-b16, vit-l16, vit-h14; also "tiny", a
// small model for tests and the quick start). Unknown names: VT_ERR_INPUT and a message listing
// the known ones.
vt_status vt_config_preset(const char *name, vt_vit_config *cfg, char *err, size_t errlen);

// Checks that the sizes fit together (image divisible by patch, width by heads, ...).
vt_status vt_config_validate(const vt_vit_config *cfg, char *err, size_t errlen);

// The options that change timm's default ViT, for logs: ", mean-pooled patch tokens (fc_norm),
// no class token, LayerScale 1e-06, 4 register tokens, positions on the patch tokens only,
// QK-norm, no qkv bias, parallel blocks, tanh GELU, fixed 2D sin-cos positions, pre-logits 384
// (tanh)" (empty when none).
void vt_config_extras(const vt_vit_config *cfg, char *buf, size_t nbytes);

// --global-pool's word for vt_vit_config.global_pool: "token", "avg", "gap" or "map".
const char *vt_config_pool_name(int global_pool);

// Names of the presets, for --help.
const char *vt_config_preset_names(void);

// Model FLOPs of one training image, matmuls only: the forward, and the backward (twice a
// layer's forward) of the layers past the first frozen_layers (vt_model.frozen_layers: 0 for
// all, 3x the forward; a linear probe's backward is its head's alone).
double vt_config_train_flops(const vt_vit_config *cfg, int frozen_layers);

#endif
