// params.c: building and initialising the parameter table.
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_rng.h"

typedef struct {
  vt_param_table *t;
  int cap;
} builder;

static void add(builder *b, int layer, vt_init_kind init, float scale, int decay,
                vt_tp_split split, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));

static void add(builder *b, int layer, vt_init_kind init, float scale, int decay,
                vt_tp_split split, int ndim, const int64_t *shape, const char *fmt, ...) {
  vt_param_table *t = b->t;
  if (t->count == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 64;
    t->p = realloc(t->p, (size_t)b->cap * sizeof *t->p);
    VT_CHECK(t->p != NULL, "out of memory for the parameter table");
  }
  vt_param *p = &t->p[t->count++];
  memset(p, 0, sizeof *p);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->name, sizeof p->name, fmt, ap);
  va_end(ap);
  p->ndim = ndim;
  p->count = 1;
  for (int i = 0; i < ndim; i++) p->count *= (p->shape[i] = shape[i]);
  p->local_count = split == VT_TP_REPLICATED ? p->count : p->count / t->shard.tp_size;
  p->offset = t->total;
  t->total += p->local_count;
  p->decay = decay;
  p->init = init;
  p->init_scale = scale;
  p->layer = p->lr_layer = layer;
  p->tp_split = split;
  p->tp_groups = 1;
}

// A Linear's weight (out, in) and bias (out, unless no_bias), timm-initialised:
// trunc_normal(0.02), zeros. Returns the weight's row index (pointers move when the table grows).
static int linear_bias(builder *b, int layer, vt_tp_split split, int64_t out, int64_t in,
                       const char *prefix, int no_bias) {
  add(b, layer, VT_INIT_TRUNC_NORMAL, 0.02f, 1, split, 2, (int64_t[]){out, in}, "%s.weight",
      prefix);
  const int row = b->t->count - 1;
  if (!no_bias)
    add(b, layer, VT_INIT_ZEROS, 0.0f, 0, split == VT_TP_ROWS ? VT_TP_ROWS : VT_TP_REPLICATED, 1,
        (int64_t[]){out}, "%s.bias", prefix);
  return row;
}

static int linear(builder *b, int layer, vt_tp_split split, int64_t out, int64_t in,
                  const char *prefix) {
  return linear_bias(b, layer, split, out, in, prefix, 0);
}

// A LayerNorm's weight and bias. Inside blocks under sequence parallelism each TP rank
// normalises only its rows, so its gradients are partial sums.
static void norm(builder *b, int layer, int64_t C, const char *prefix, int partial) {
  add(b, layer, VT_INIT_ONES, 0.0f, 0, VT_TP_REPLICATED, 1, (int64_t[]){C}, "%s.weight", prefix);
  add(b, layer, VT_INIT_ZEROS, 0.0f, 0, VT_TP_REPLICATED, 1, (int64_t[]){C}, "%s.bias", prefix);
  b->t->p[b->t->count - 1].tp_partial = b->t->p[b->t->count - 2].tp_partial = partial;
}

// Whether virtual stage vs of nvs is one of the `extra` that get a block more (params.h).
static int gets_extra(int nvs, int vshape, int extra, int vs) {
  if (!vshape) return vs >= nvs - extra;
  const int p = nvs / 2, first_round = extra < p ? extra : p;  // chunk 0 of ranks p-1, p-2, ...
  return vs < p ? vs >= p - first_round : vs < extra;  // then chunk 1 (stages p, p+1, ...)
}

void vt_stage_blocks(int depth, int nvs, int vshape, int vs, int *first, int *end) {
  const int base = depth / nvs, extra = depth % nvs;
  *first = vs * base;
  for (int v = 0; v < vs; v++) *first += gets_extra(nvs, vshape, extra, v);
  *end = *first + base + gets_extra(nvs, vshape, extra, vs);
}

// LayerScale's gamma (C): replicated; under sequence parallelism each TP rank scales only its
// rows, so its gradient is a partial sum, as a LayerNorm's.
static void layer_scale(builder *b, int layer, int64_t C, float init, const char *prefix, int sp) {
  add(b, layer, VT_INIT_CONST, init, 0, VT_TP_REPLICATED, 1, (int64_t[]){C}, "%s.gamma", prefix);
  b->t->p[b->t->count - 1].tp_partial = sp;
}

// Block l's tensors, of layer l + 1, in timm's order.
static void block(builder *b, int l, const vt_vit_config *cfg, int sp, int tp_size) {
  const int64_t C = cfg->width, F = vt_cfg_mlp_hidden(cfg), D = vt_cfg_head_dim(cfg);
  const float ls = cfg->layer_scale;
  vt_param_table *t = b->t;
  char pre[48];
  snprintf(pre, sizeof pre, "blocks.%d.norm1", l);
  norm(b, l + 1, C, pre, sp);
  snprintf(pre, sizeof pre, "blocks.%d.attn.qkv", l);
  const int qkv = linear_bias(b, l + 1, VT_TP_ROWS, 3 * C, C, pre, cfg->no_qkv_bias);
  t->p[qkv].tp_groups = 3;  // weight and bias rows: [q | k | v]
  if (!cfg->no_qkv_bias) t->p[qkv + 1].tp_groups = 3;
  // QK-norm's weights are shared by the heads, which TP splits: each TP rank's gradient covers
  // its heads only.
  snprintf(pre, sizeof pre, "blocks.%d.attn.q_norm", l);
  if (cfg->qk_norm) norm(b, l + 1, D, pre, tp_size > 1);
  snprintf(pre, sizeof pre, "blocks.%d.attn.k_norm", l);
  if (cfg->qk_norm) norm(b, l + 1, D, pre, tp_size > 1);
  snprintf(pre, sizeof pre, "blocks.%d.attn.proj", l);
  linear(b, l + 1, VT_TP_COLS, C, C, pre);
  if (!cfg->parallel) {  // a parallel block's branches share norm1 and one LayerScale (below)
    snprintf(pre, sizeof pre, "blocks.%d.ls1", l);
    if (ls > 0) layer_scale(b, l + 1, C, ls, pre, sp);
    snprintf(pre, sizeof pre, "blocks.%d.norm2", l);
    norm(b, l + 1, C, pre, sp);
  }
  snprintf(pre, sizeof pre, "blocks.%d.mlp.fc1", l);
  linear(b, l + 1, VT_TP_ROWS, F, C, pre);
  snprintf(pre, sizeof pre, "blocks.%d.mlp.fc2", l);
  linear(b, l + 1, VT_TP_COLS, C, F, pre);
  snprintf(pre, sizeof pre, cfg->parallel ? "blocks.%d.ls" : "blocks.%d.ls2", l);
  if (ls > 0) layer_scale(b, l + 1, C, ls, pre, sp);
}

// The MAP head's tensors (timm's attn_pool, AttentionPoolLatent), of the head's layer. Tensor
// parallelism splits its attention by heads as a block's: q and kv column-parallel (kv's rows
// [k | v], each split), proj row-parallel; the latent is whole, its gradient each TP rank's
// heads' part (partial); the MLP behind is whole on every TP rank (its rows are the B pooled
// vectors). The latent is decayed as timm's param groups decay it (3 dims, not in
// no_weight_decay).
static void map_head(builder *b, const vt_vit_config *cfg, int tp_size) {
  const int64_t C = cfg->width, F = vt_cfg_mlp_hidden(cfg);
  const int layer = cfg->depth + 1;
  vt_param_table *t = b->t;
  add(b, layer, VT_INIT_TRUNC_NORMAL_2STD, 1.0f / sqrtf((float)C), 1, VT_TP_REPLICATED, 3,
      (int64_t[]){1, 1, C}, "attn_pool.latent");
  t->p[t->count - 1].tp_partial = tp_size > 1;
  linear(b, layer, VT_TP_ROWS, C, C, "attn_pool.q");
  const int kv = linear(b, layer, VT_TP_ROWS, 2 * C, C, "attn_pool.kv");
  t->p[kv].tp_groups = t->p[kv + 1].tp_groups = 2;  // weight and bias rows: [k | v]
  linear(b, layer, VT_TP_COLS, C, C, "attn_pool.proj");
  norm(b, layer, C, "attn_pool.norm", 0);
  linear(b, layer, VT_TP_REPLICATED, F, C, "attn_pool.mlp.fc1");
  linear(b, layer, VT_TP_REPLICATED, C, F, "attn_pool.mlp.fc2");
}

void vt_chunk_blocks(int depth, const vt_shard *s, int chunk, int *first, int *end) {
  const int v = s->pp_chunks;
  VT_CHECK(v >= 1 && chunk >= 0 && chunk < v, "chunk %d of %d", chunk, v);
  vt_stage_blocks(depth, s->pp_size * v, s->pp_vshape, vt_shard_vstage(s, chunk), first, end);
}

int vt_recomputed_blocks(int depth, const vt_shard *s, int recompute, int frozen_layers) {
  int n = 0;
  for (int ch = 0; ch < s->pp_chunks; ch++) {
    int first, end;
    vt_chunk_blocks(depth, s, ch, &first, &end);
    for (int b = first; b < end; b++) n += b - first < recompute && b + 1 >= frozen_layers;
  }
  return n;
}

int64_t vt_params_grad_first(const vt_param_table *t, int frozen_layers) {
  int64_t first = t->total;
  for (int i = 0; i < t->count; i++)
    if (t->p[i].layer >= frozen_layers && t->p[i].offset < first) first = t->p[i].offset;
  for (int i = 0; i < t->count; i++)
    VT_CHECK(t->p[i].layer >= frozen_layers || t->p[i].offset + t->p[i].local_count <= first,
             "%s (layer %d) lies after the first tensor of layer %d on in the parameter table",
             t->p[i].name, t->p[i].layer, frozen_layers);
  return first;
}

int vt_frozen_vstages(int depth, int nvstages, int vshape, int frozen_layers) {
  int vs = 0, first, end;
  for (; vs < nvstages - 1; vs++) {
    vt_stage_blocks(depth, nvstages, vshape, vs, &first, &end);
    if (end + 1 > frozen_layers) break;  // block end - 1 is layer end
  }
  return vs;
}

static int ends_with(const char *s, const char *tail) {
  const size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

// timm's init_weights_vit_jax over the table (the initialisers of Flax, and so of big_vision):
// every Linear's weight Xavier-uniform, bound sqrt(6 / (in + out)) over its whole (out, in)
// shape (qkv's (3C, C) as one matrix, as timm's), and its bias 0 or, inside an MLP (a name
// with "mlp"), normal(1e-6); the head's weight and bias 0; the patch embedding's weight and the
// pre-logits' LeCun-normal (a normal of std sqrt(1 / fan_in) / 0.8796 truncated at 2 std,
// timm's lecun_normal_), their biases 0. The tokens, positions, norms, LayerScale and the MAP
// latent keep their initialisers (timm's init_weights sets them so in every mode).
static void init_jax(vt_param_table *t) {
  for (int i = 0; i < t->count; i++) {
    vt_param *w = &t->p[i];
    if (!ends_with(w->name, ".weight") || w->ndim < 2) continue;
    const size_t plen = strlen(w->name) - strlen(".weight");
    vt_param *bias = i + 1 < t->count && strncmp(t->p[i + 1].name, w->name, plen) == 0 &&
                             strcmp(t->p[i + 1].name + plen, ".bias") == 0
                         ? &t->p[i + 1] : NULL;
    const int64_t out = w->shape[0], in = w->count / out;
    if (strncmp(w->name, "head.", 5) == 0) {
      w->init = VT_INIT_ZEROS;
    } else if (w->ndim == 4 || strncmp(w->name, "pre_logits.", 11) == 0) {
      w->init = VT_INIT_TRUNC_NORMAL_2STD;
      w->init_scale = (float)(sqrt(1.0 / (double)in) / 0.87962566103423978);
    } else {
      w->init = VT_INIT_UNIFORM;
      w->init_scale = (float)sqrt(6.0 / (double)(in + out));
    }
    if (!bias) continue;
    const int mlp = strstr(w->name, "mlp") != NULL;
    bias->init = mlp ? VT_INIT_NORMAL : VT_INIT_ZEROS;
    bias->init_scale = mlp ? 1e-6f : 0.0f;
  }
}

void vt_params_build(vt_param_table *t, const vt_vit_config *cfg, vt_shard shard) {
  VT_CHECK(shard.pp_chunks >= 1, "a shard needs at least one model chunk (have %d)",
           shard.pp_chunks);
  memset(t, 0, sizeof *t);
  t->shard = shard;
  builder b = {t, 0};
  const int first_stage = vt_shard_has_embed(&shard), last_stage = vt_shard_has_head(&shard);
  const int sp = shard.sequence_parallel && shard.tp_size > 1;
  const int64_t C = cfg->width, P = cfg->patch_size, R = cfg->reg_tokens;
  const int64_t K = cfg->num_classes;
  const float conv_bound = 1.0f / sqrtf((float)(3 * P * P));  // PyTorch's Conv2d default
  if (first_stage) {
    // cls_token and reg_token stay adjacent: the embedding reads them as one (1 + R, C) block
    // (R, C without the class token).
    // reg_token is initialised as timm does (normal, std 1e-6) and, like the class token, not
    // decayed; layer-wise lr decay puts it in layer 0 with the embeddings, as DINOv2's own
    // get_vit_lr_decay_rate does with its register_tokens. timm 0.9.16 decays it and puts it in
    // the last group with the head (a review found newer timm doing as here): a run matching a
    // fine-tuning with that timm differs in this tensor.
    if (!cfg->no_class_token)
      add(&b, 0, VT_INIT_NORMAL, 1e-6f, 0, VT_TP_REPLICATED, 3, (int64_t[]){1, 1, C}, "cls_token");
    if (R > 0)
      add(&b, 0, VT_INIT_NORMAL, 1e-6f, 0, VT_TP_REPLICATED, 3, (int64_t[]){1, R, C},
          "reg_token");
    add(&b, 0, cfg->pos_sincos ? VT_INIT_SINCOS2D : VT_INIT_TRUNC_NORMAL, 0.02f, 0,
        VT_TP_REPLICATED, 3, (int64_t[]){1, vt_cfg_pos_tokens(cfg), C}, "pos_embed");
    add(&b, 0, VT_INIT_UNIFORM, conv_bound, 1, VT_TP_REPLICATED, 4, (int64_t[]){C, 3, P, P},
        "patch_embed.proj.weight");
    if (!cfg->pre_norm)  // timm's CLIP towers have none (bias=not pre_norm)
      add(&b, 0, VT_INIT_UNIFORM, conv_bound, 0, VT_TP_REPLICATED, 1, (int64_t[]){C},
          "patch_embed.proj.bias");
    // timm's norm_pre (pre_norm: the CLIP towers): on each rank's rows of the stream, so a
    // partial sum over TP under sequence parallelism, as the blocks' norms. Its gradient is
    // ready with the embedding's (layer 0), but layer-wise lr decay scales it as the final
    // norm's (lr_layer depth + 1), as MAE's param_groups_lrd does (every name outside the stem
    // and the blocks; timm 0.9's group_matcher puts '^norm' with the last block, lr x D).
    if (cfg->pre_norm) {
      norm(&b, 0, C, "norm_pre", sp);
      t->p[t->count - 1].lr_layer = t->p[t->count - 2].lr_layer = cfg->depth + 1;
    }
  }
  for (int c = 0; c < shard.pp_chunks; c++) {
    int first, end;
    vt_chunk_blocks(cfg->depth, &shard, c, &first, &end);
    for (int l = first; l < end; l++) block(&b, l, cfg, sp, shard.tp_size);
  }
  if (last_stage) {
    // Before the MAP head, `norm`'s gradient comes from the kv Linear's partial input gradients.
    const int map = cfg->global_pool == 3;
    norm(&b, cfg->depth + 1, C, cfg->global_pool == 1 ? "fc_norm" : "norm",
         map && shard.tp_size > 1);
    if (map) map_head(&b, cfg, shard.tp_size);
    // big_vision's pre-logits (rep_size): whole on every TP rank, as the head behind it.
    if (cfg->pre_logits > 0)
      linear(&b, cfg->depth + 1, VT_TP_REPLICATED, cfg->pre_logits, C, "pre_logits.fc");
    const int head = linear(&b, cfg->depth + 1, VT_TP_REPLICATED, K, vt_cfg_head_in(cfg), "head");
    if (cfg->head_init_std > 0) t->p[head].init_scale = cfg->head_init_std;
  }
  if (cfg->init_jax) init_jax(t);
}

int64_t vt_param_global_index(const vt_param *p, const vt_shard *s, int64_t i) {
  if (p->tp_split == VT_TP_REPLICATED || s->tp_size == 1) return i;
  const int64_t rows = p->shape[0], rest = p->count / rows;
  if (p->tp_split == VT_TP_COLS) {  // (rows, cols): this rank holds a band of columns
    int64_t lcols = rest / s->tp_size, r = i / lcols, col = i % lcols;
    return r * rest + s->tp_rank * lcols + col;
  }
  // VT_TP_ROWS: each of the tp_groups stripes of rows is split into tp_size parts.
  int64_t grows = rows / p->tp_groups, lrows = grows / s->tp_size;
  int64_t lr = i / rest, col = i % rest, group = lr / lrows, within = lr % lrows;
  return (group * grows + s->tp_rank * lrows + within) * rest + col;
}

int64_t vt_param_run(const vt_param *p, const vt_shard *s) {
  if (p->tp_split == VT_TP_REPLICATED || s->tp_size == 1) return p->local_count;
  const int64_t rest = p->count / p->shape[0];
  return p->tp_split == VT_TP_COLS ? rest / s->tp_size : rest;
}

void vt_params_free(vt_param_table *t) {
  free(t->p);
  memset(t, 0, sizeof *t);
}

const vt_param *vt_params_find(const vt_param_table *t, const char *name) {
  for (int i = 0; i < t->count; i++)
    if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
  return NULL;
}

// Element j of a (1, g*g, C) sin-cos table (VT_INIT_SINCOS2D).
static float sincos2d(const vt_param *p, int64_t j) {
  const int64_t C = p->shape[2], Q = C / 4, n = j / C, c = j % C;
  const int64_t g = (int64_t)llround(sqrt((double)p->shape[1]));
  VT_CHECK(g * g == p->shape[1] && Q >= 2 && C % 4 == 0,
           "a 2D sin-cos table needs a square grid of patches and a width divisible by 4 (have "
           "%lld rows of %lld)", (long long)p->shape[1], (long long)C);
  const int64_t part = c / Q, d = c % Q;
  const double w = pow(10000.0, -(double)d / (double)(Q - 1));
  const double pos = part < 2 ? (double)(n % g) : (double)(n / g);  // x, then y
  return (float)(part % 2 == 0 ? sin(pos * w) : cos(pos * w));
}

void vt_params_init(const vt_param_table *t, float *host, uint64_t seed) {
  for (int i = 0; i < t->count; i++) {
    const vt_param *p = &t->p[i];
    float *x = host + p->offset;
    uint32_t stream = vt_hash_name(p->name);
    for (int64_t i = 0; i < p->local_count; i++) {
      // Values are keyed by the global element, so every layout initialises the same model.
      int64_t j = vt_param_global_index(p, &t->shard, i);
      float v = 0.0f;
      switch (p->init) {
        case VT_INIT_ZEROS: v = 0.0f; break;
        case VT_INIT_ONES: v = 1.0f; break;
        case VT_INIT_CONST: v = p->init_scale; break;
        case VT_INIT_NORMAL: v = p->init_scale * vt_rng_normal(seed, stream, 0, (uint64_t)j); break;
        case VT_INIT_TRUNC_NORMAL:
          // timm truncates at the absolute values -2 and 2, i.e. 100 std at std 0.02: clamping
          // a draw there is the same distribution up to an event of probability ~0.
          v = p->init_scale * vt_rng_normal(seed, stream, 0, (uint64_t)j);
          v = v < -2.0f ? -2.0f : v > 2.0f ? 2.0f : v;
          break;
        case VT_INIT_TRUNC_NORMAL_2STD: {
          // Redraws from further streams until inside 2 std (each draw keeps with p = 0.954).
          uint32_t k = 0;
          do v = vt_rng_normal(seed, stream, k++, (uint64_t)j);
          while (fabsf(v) > 2.0f && k < 64);
          v = p->init_scale * (fabsf(v) > 2.0f ? 0.0f : v);
          break;
        }
        case VT_INIT_UNIFORM:
          v = p->init_scale * (2.0f * vt_rng_uniform(seed, stream, 0, (uint64_t)j) - 1.0f);
          break;
        case VT_INIT_SINCOS2D:
          v = sincos2d(p, j);
          break;
      }
      x[i] = v;
    }
  }
}
