// config.c: presets (timm's ViT sizes) and validation of a ViT configuration.
#include "config.h"

#include <stdio.h>
#include <string.h>

typedef struct {
  const char *name;
  int img, patch, width, depth, heads, classes;
} preset;

static const preset PRESETS[] = {
    {"vit-ti16", 224, 16, 192, 12, 3, 1000},  {"vit-s16", 224, 16, 384, 12, 6, 1000},
    {"vit-b16", 224, 16, 768, 12, 12, 1000},  {"vit-l16", 224, 16, 1024, 24, 16, 1000},
    {"vit-h14", 224, 14, 1280, 32, 16, 1000}, {"tiny", 32, 8, 64, 4, 4, 10},
};
#define NPRESETS (int)(sizeof PRESETS / sizeof PRESETS[0])

const char *vt_config_preset_names(void) {
  return "vit-ti16, vit-s16, vit-b16, vit-l16, vit-h14, tiny";
}

vt_status vt_config_preset(const char *name, vt_vit_config *cfg, char *err, size_t errlen) {
  for (int i = 0; i < NPRESETS; i++) {
    if (strcmp(PRESETS[i].name, name) != 0) continue;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->name, sizeof cfg->name, "%s", name);
    cfg->img_size = PRESETS[i].img;
    cfg->patch_size = PRESETS[i].patch;
    cfg->width = PRESETS[i].width;
    cfg->depth = PRESETS[i].depth;
    cfg->heads = PRESETS[i].heads;
    cfg->mlp_ratio = 4.0;
    cfg->num_classes = PRESETS[i].classes;
    cfg->norm_eps = 1e-6f;  // timm's ViT
    return VT_OK;
  }
  snprintf(err, errlen, "unknown model '%s'; known models: %s", name, vt_config_preset_names());
  return VT_ERR_INPUT;
}

vt_status vt_config_validate(const vt_vit_config *c, char *err, size_t errlen) {
  const char *why = NULL;
  char buf[256];
  if (c->img_size <= 0 || c->patch_size <= 0 || c->width <= 0 || c->depth <= 0 ||
      c->heads <= 0 || c->num_classes <= 0 || !(c->mlp_ratio > 0.0))
    why = "every size must be positive (img-size, patch-size, width, depth, heads, mlp-ratio, "
          "num-classes)";
  else if (c->img_size % c->patch_size != 0) {
    snprintf(buf, sizeof buf, "img-size %d is not a multiple of patch-size %d", c->img_size,
             c->patch_size);
    why = buf;
  } else if (c->width % c->heads != 0) {
    snprintf(buf, sizeof buf, "width %d is not a multiple of heads %d", c->width, c->heads);
    why = buf;
  } else if (c->mlp_dim < 0)
    why = "mlp-dim must be 0 (from mlp-ratio) or the MLP's hidden width";
  else if (c->mlp_dim == 0 && (vt_cfg_mlp_hidden(c) <= 0 ||
                               vt_cfg_mlp_hidden(c) != c->width * c->mlp_ratio)) {
    snprintf(buf, sizeof buf, "width %d x mlp-ratio %g is not a whole number: give the MLP's "
             "hidden width with --mlp-dim", c->width, c->mlp_ratio);
    why = buf;
  } else if (!(c->layer_scale >= 0.0f && c->layer_scale <= 1e6f))
    why = "layer-scale must be 0 (off) or a positive initial gamma";
  else if (c->reg_tokens < 0 || c->reg_tokens > 256)
    why = "reg-tokens must be 0 to 256";
  else if (c->no_embed_class != 0 && c->no_embed_class != 1)
    why = "no-embed-class must be 0 or 1";
  else if (c->global_pool < 0 || c->global_pool > 3)
    why = "global-pool must be token, avg, gap or map";
  else if (c->no_class_token != 0 && c->no_class_token != 1)
    why = "class-token must be 0 or 1";
  else if (c->no_class_token && c->global_pool == 0)
    why = "--class-token 0 leaves no class token for --global-pool token to read: give "
          "--global-pool avg, gap or map";
  else if ((c->qk_norm != 0 && c->qk_norm != 1) || (c->no_qkv_bias != 0 && c->no_qkv_bias != 1) ||
           (c->parallel != 0 && c->parallel != 1) || (c->gelu_tanh != 0 && c->gelu_tanh != 1) ||
           (c->quick_gelu != 0 && c->quick_gelu != 1) || (c->gelu_tanh && c->quick_gelu))
    why = "qk-norm, qkv-bias, parallel-blocks, gelu_tanh and quick_gelu must be 0 or 1 (one "
          "activation)";
  else if (c->pos_sincos != 0 && c->pos_sincos != 1)
    why = "pos-embed must be learn or sincos2d";
  else if (c->pos_sincos && (c->width % 4 != 0 || c->width < 8))
    why = "--pos-embed sincos2d splits the width into 4 quarters (sin and cos of x and of y) of "
          "at least 2 channels: give a width divisible by 4, at least 8";
  else if (c->pos_sincos && vt_cfg_pos_first(c) != vt_cfg_prefix_tokens(c))
    why = "--pos-embed sincos2d gives positions to the patch tokens only: add --no-embed-class 1 "
          "(or --class-token 0 without registers)";
  else if (c->pre_logits < 0 || c->pre_logits > 65536)
    why = "pre-logits must be 0 (none) or the layer's width, at most 65536";
  else if (c->pre_norm != 0 && c->pre_norm != 1)
    why = "pre-norm must be 0 or 1";
  else if (!(c->norm_eps >= 0.0f && c->norm_eps <= 0.1f))
    why = "norm-eps must be a LayerNorm eps in (0, 0.1] (timm's ViT 1e-6, CLIP's 1e-5)";
  else if (c->img_size > 8192 || c->width > 16384 || c->depth > 1024 || c->num_classes > 1000000)
    why = "a size is implausibly large (limits: img-size 8192, width 16384, depth 1024, "
          "num-classes 1000000)";
  if (!why) return VT_OK;
  snprintf(err, errlen, "bad model configuration: %s", why);
  return VT_ERR_INPUT;
}

void vt_config_extras(const vt_vit_config *c, char *buf, size_t nbytes) {
  int k = snprintf(buf, nbytes, "%s",
                   c->global_pool == 1   ? ", mean-pooled patch tokens (fc_norm)"
                   : c->global_pool == 2 ? ", mean of the normalised patch tokens (gap)"
                   : c->global_pool == 3 ? ", attention pooling by a latent query (map)"
                                         : "");
  if (c->no_class_token && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", no class token");
  if (c->layer_scale > 0 && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", LayerScale %g", (double)c->layer_scale);
  if (c->reg_tokens > 0 && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", %d register tokens", c->reg_tokens);
  if (c->no_embed_class && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", positions on the patch tokens only");
  if (c->qk_norm && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", QK-norm");
  if (c->no_qkv_bias && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", no qkv bias");
  if (c->parallel && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", parallel blocks");
  if (c->gelu_tanh && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", tanh GELU");
  if (c->quick_gelu && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", quick GELU");
  if (c->pos_sincos && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", fixed 2D sin-cos positions");
  if (c->pre_norm && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", norm_pre");
  if (vt_cfg_norm_eps(c) != 1e-6f && k >= 0 && (size_t)k < nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, ", LayerNorm eps %g", (double)vt_cfg_norm_eps(c));
  if (c->pre_logits > 0 && k >= 0 && (size_t)k < nbytes)
    snprintf(buf + k, nbytes - (size_t)k, ", pre-logits %d (tanh)", c->pre_logits);
}

const char *vt_config_pool_name(int global_pool) {
  static const char *const names[] = {"token", "avg", "gap", "map"};
  return global_pool >= 0 && global_pool <= 3 ? names[global_pool] : "token";
}

double vt_config_train_flops(const vt_vit_config *c, int frozen_layers) {
  double N = vt_cfg_tokens(c), C = c->width, F = vt_cfg_mlp_hidden(c), Np = vt_cfg_patches(c);
  double P = c->patch_size;
  // Forward per layer (vt_param.layer: 0 the embeddings, i + 1 block i, depth + 1 the head).
  // Per block: qkv 3C^2, proj C^2, fc1+fc2 2CF per token; attention 2 N^2 C (scores and mix).
  const double embed = 2.0 * Np * 3.0 * P * P * C;
  const double block = 2.0 * (N * (4.0 * C * C + 2.0 * C * F) + 2.0 * N * N * C);
  double head = 2.0 * (double)vt_cfg_head_in(c) * c->num_classes;
  if (c->pre_logits > 0) head += 2.0 * C * c->pre_logits;  // the pre-logits Linear
  // The MAP head: kv 2C^2 per token, the query's scores and mix 2NC, proj C^2 and the MLP 2CF
  // (the latent's q, once per micro-batch, left out).
  if (c->global_pool == 3) head += 2.0 * (N * 2.0 * C * C + 2.0 * N * C + C * C + 2.0 * C * F);
  // The backward, twice a layer's forward, runs for the layers past the frozen prefix.
  const int blocks_frozen = frozen_layers - 1 < 0 ? 0
                            : frozen_layers - 1 > c->depth ? c->depth : frozen_layers - 1;
  const double fwd = embed + c->depth * block + head;
  const double bwd = (frozen_layers > 0 ? 0.0 : embed) + (c->depth - blocks_frozen) * block +
                     (frozen_layers > c->depth + 1 ? 0.0 : head);
  return fwd + 2.0 * bwd;
}
