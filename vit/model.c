// model.c: one rank's part of the ViT: allocation, the embeddings and the head around the
// blocks of vit/block.c, forward and backward of one micro-batch slot.
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp.h"
#include "vt_ops.h"
#include "vt_rng.h"

// Carving one allocation: with base NULL it only measures, so sizing and carving share code.
typedef struct {
  char *base;
  size_t off;
} arena;

static float *take(arena *a, int64_t count) {
  float *p = a->base ? (float *)(a->base + a->off) : NULL;
  a->off += ((size_t)count * sizeof(float) + 63) / 64 * 64;
  return p;
}

// An activation that bf16 precision stores as bfloat16 (vt_ops.h).
static float *take_act(vt_model *m, arena *a, int64_t count) {
  return take(a, vt_act_floats(m->be, count));
}

static void carve_block(vt_model *m, vt_block_acts *b, arena *ar) {
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t B = m->max_batch, N = vt_cfg_tokens(c), C = c->width, H = c->heads / tp;
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, M = B * N;
  const int64_t Ml = vt_model_local_rows(m, m->max_batch), Mp = Ml * tp;
  b->ln1 = take_act(m, ar, Ml * C), b->ln1_mean = take(ar, Ml), b->ln1_rstd = take(ar, Ml);
  b->qkv = take_act(m, ar, M * 3 * C / tp);
  if (c->qk_norm)
    b->qkn = take_act(m, ar, M * 3 * C / tp), b->qk_mean = take(ar, M * 2 * H),
    b->qk_rstd = take(ar, M * 2 * H);
  b->lse = take(ar, B * H * N);
  b->attn = take_act(m, ar, M * C / tp);
  if (!c->parallel) {  // a parallel block has no second LayerNorm and no mid-block stream
    b->mid = take(ar, Ml * C);
    b->ln2 = take_act(m, ar, Ml * C), b->ln2_mean = take(ar, Ml), b->ln2_rstd = take(ar, Ml);
    if (c->layer_scale > 0) b->ls1 = take(ar, Ml * C);
    if (m->sp) b->ln2_full = take_act(m, ar, Mp * C);
  }
  b->fc1 = take_act(m, ar, M * F);
  b->gelu = take_act(m, ar, M * F);
  if (c->layer_scale > 0) b->ls2 = take(ar, Ml * C);
  if (m->sp) b->ln1_full = take_act(m, ar, Mp * C);
}

static void carve_map(vt_model *m, vt_map_acts *a, arena *ar) {
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;  // the attention holds this rank's heads
  const int64_t B = m->max_batch, N = vt_cfg_tokens(c), C = c->width, F = vt_cfg_mlp_hidden(c);
  a->latent = take_act(m, ar, C), a->q = take_act(m, ar, C / tp);
  a->kv = take_act(m, ar, B * N * 2 * C / tp);
  a->attn = take_act(m, ar, B * C / tp), a->lse = take(ar, B * c->heads / tp);
  a->y = take(ar, B * C);
  a->ln = take_act(m, ar, B * C), a->ln_mean = take(ar, B), a->ln_rstd = take(ar, B);
  a->fc1 = take_act(m, ar, B * F), a->gelu = take_act(m, ar, B * F);
  a->out = take_act(m, ar, B * C);
}

// Local block l lies in the frozen prefix (vt_model.frozen_layers; block i is layer i + 1):
// nothing below it trains, so its backward and weight passes are skipped.
static int in_frozen_prefix(const vt_model *m, int l) {
  return m->block_id[l] + 1 < m->frozen_layers;
}

// Slot block j is in the frozen prefix in every chunk that has it: no backward reads its
// activations, so all slots share one set (as the recomputed blocks').
static int slot_block_frozen(const vt_model *m, int j) {
  for (int c = 0; c < m->nchunks; c++) {
    const int b0 = m->chunk_start[c];
    if (j < m->chunk_start[c + 1] - b0 && !in_frozen_prefix(m, b0 + j)) return 0;
  }
  return 1;
}

static int any_slot_block_frozen(const vt_model *m) {
  return m->slot_blocks > 0 && slot_block_frozen(m, 0);  // the prefix starts at block 0
}

static void carve_slot(vt_model *m, vt_model_slot *sl, arena *ar) {
  const vt_vit_config *c = &m->cfg;
  const int64_t B = m->max_batch, C = c->width;
  const int64_t K = c->num_classes, S = c->img_size, P = c->patch_size, Np = vt_cfg_patches(c);
  const int64_t Ml = vt_model_local_rows(m, m->max_batch);
  if (m->has_embed) {
    sl->img = take(ar, B * 3 * S * S);
    sl->patches = take_act(m, ar, B * Np * 3 * P * P);
    sl->patch_out = take(ar, B * Np * C);
    if (c->pre_norm)
      sl->emb = take(ar, Ml * C), sl->emb_mean = take(ar, Ml), sl->emb_rstd = take(ar, Ml);
  }
  for (int l = 0; l <= m->slot_blocks; l++) sl->res[l] = take(ar, Ml * C);
  // The recomputed and frozen blocks share the scratch's one set (carve); only their inputs
  // stay here.
  for (int l = 0; l < m->slot_blocks; l++)
    if (l < m->recompute || slot_block_frozen(m, l)) sl->blocks[l] = m->s.recompute;
    else carve_block(m, &sl->blocks[l], ar);
  if (m->has_head) {
    sl->labels = (int32_t *)take(ar, B);
    sl->mix = (vt_mix_target *)take(ar, 2 * B);
    // `norm`'s rows: one per sample, every patch token under gap, every token under map (whose
    // normalised tokens are kept, without a pooled mean).
    const int64_t rows = c->global_pool == 2 ? B * vt_cfg_patches(c)
                         : c->global_pool == 3 ? B * vt_cfg_tokens(c) : B;
    if (c->global_pool != 3) sl->pooled = take(ar, B * C);
    sl->lnf = take_act(m, ar, (c->global_pool == 3 ? rows : B) * C);
    sl->lnf_mean = take(ar, rows), sl->lnf_rstd = take(ar, rows);
    if (c->global_pool == 3) carve_map(m, &sl->map, ar);
    if (c->pre_logits > 0)
      sl->pre_fc = take_act(m, ar, B * c->pre_logits), sl->pre = take_act(m, ar, B * c->pre_logits);
    sl->logits = take(ar, B * K), sl->probs = take(ar, B * K), sl->losses = take(ar, B);
  }
  // A chunk other than the head's receives its output's gradient; one other than the
  // embedding's sends its input's.
  if (!m->has_head || m->nchunks > 1) sl->dout = take(ar, Ml * C);
  if (!m->has_embed || m->nchunks > 1) sl->dinput = take(ar, Ml * C);
}

static void carve_wgrad(vt_model *m, vt_block_wgrad *w, arena *ar) {
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t M = (int64_t)m->max_batch * vt_cfg_tokens(c), C = c->width;
  w->dfc2 = take(ar, M * C);
  if (!c->parallel) w->dproj = take(ar, M * C);  // a parallel block's is dfc2
  w->dfc1 = take_act(m, ar, M * (vt_cfg_mlp_hidden(c) / tp));
  w->dqkv = take_act(m, ar, M * 3 * C / tp);
}

static void carve(vt_model *m, arena *ar) {
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t B = m->max_batch, N = vt_cfg_tokens(c), C = c->width, M = B * N;
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, K = c->num_classes;
  const int64_t Ml = vt_model_local_rows(m, m->max_batch), Mp = m->sp ? Ml * tp : M;
  vt_model_scratch *s = &m->s;
  if (m->recompute > 0 || any_slot_block_frozen(m)) carve_block(m, &s->recompute, ar);
  if (m->recompute > 0) s->recompute_out = take(ar, Ml * C);
  for (int i = 0; i < m->nslots; i++) carve_slot(m, &m->slots[i], ar);
  for (int i = 0; i < m->nwsets; i++)  // (a frozen block has no weight pass)
    for (int l = 0; l < m->slot_blocks; l++)
      if (!slot_block_frozen(m, l)) carve_wgrad(m, &m->wsets[i][l], ar);
  s->dres = take(ar, Ml * C), s->dln = take(ar, Mp * C);
  if (m->sp) s->dln_local = take(ar, Ml * C), s->full = take(ar, Mp * C), s->partial = take(ar, Mp * C);
  s->dqkv = take_act(m, ar, M * 3 * C / tp);
  if (c->qk_norm) s->dqkn = take_act(m, ar, M * 3 * C / tp);
  if (c->parallel) s->branch = take(ar, M * C), s->dln2 = take(ar, M * C);
  s->dact = take_act(m, ar, M * F), s->dfc1 = take_act(m, ar, M * F);
  if (m->has_embed) s->dpatch_out = take(ar, B * vt_cfg_patches(c) * C);
  if (m->has_head && c->global_pool == 3) {
    const int64_t Fh = vt_cfg_mlp_hidden(c);  // the MAP head's MLP is whole on every TP rank,
                                              // its attention this rank's heads
    s->dlnf = take(ar, M * C), s->dlogits = take(ar, B * K);
    s->map_z = take(ar, B * C), s->map_dy = take(ar, B * C);
    s->map_dgelu = take_act(m, ar, B * Fh), s->map_dfc1 = take_act(m, ar, B * Fh);
    s->map_dln = take(ar, B * C), s->map_dattn = take_act(m, ar, B * C / tp);
    s->map_dq = take(ar, C / tp), s->map_dlatent = take(ar, C);
    s->map_dkv = take_act(m, ar, M * 2 * C / tp);
  } else if (m->has_head) {
    s->dpooled = take(ar, B * C), s->dlnf = take(ar, B * C), s->dlogits = take(ar, B * K);
  }
  if (m->has_head && c->pre_logits > 0)
    s->dpre = take_act(m, ar, B * c->pre_logits), s->dpre_fc = take_act(m, ar, B * c->pre_logits);
}

// The tensor of a name in flat, which holds the table's elements from `first` on (NULL for a
// tensor before it).
static float *find(const vt_model *m, float *flat, int64_t first, const char *fmt, int l,
                   const char *suffix) {
  char name[64];
  snprintf(name, sizeof name, fmt, l);
  strncat(name, suffix, sizeof name - strlen(name) - 1);
  const vt_param *p = vt_params_find(&m->table, name);
  VT_CHECK(p != NULL, "parameter %s missing from the table", name);
  return p->offset < first ? NULL : flat + (p->offset - first);
}

static void bind(vt_model *m, float *flat, int64_t first, vt_model_tensors *t) {
  if (m->has_embed) {
    // The prefix tokens as one block: cls_token then reg_token, either absent.
    t->prefix = m->cfg.no_class_token ? NULL : find(m, flat, first, "cls_token", 0, "");
    if (m->cfg.reg_tokens > 0) {
      float *reg = find(m, flat, first, "reg_token", 0, "");
      VT_CHECK(!t->prefix || reg == t->prefix + m->cfg.width,
               "reg_token must follow cls_token in the parameter table");
      if (!t->prefix) t->prefix = reg;
    }
    t->pos = find(m, flat, first, "pos_embed", 0, "");
    t->patch_w = find(m, flat, first, "patch_embed.proj", 0, ".weight");
    t->patch_b = m->cfg.pre_norm ? NULL : find(m, flat, first, "patch_embed.proj", 0, ".bias");
    if (m->cfg.pre_norm) {
      t->pre_norm_w = find(m, flat, first, "norm_pre", 0, ".weight");
      t->pre_norm_b = find(m, flat, first, "norm_pre", 0, ".bias");
    }
  }
  for (int i = 0; i < m->nblocks; i++) {
    vt_block_tensors *b = &t->blocks[i];
    const int l = m->block_id[i];
    b->norm1_w = find(m, flat, first, "blocks.%d.norm1", l, ".weight");
    b->norm1_b = find(m, flat, first, "blocks.%d.norm1", l, ".bias");
    b->qkv_w = find(m, flat, first, "blocks.%d.attn.qkv", l, ".weight");
    b->qkv_b = m->cfg.no_qkv_bias ? NULL : find(m, flat, first, "blocks.%d.attn.qkv", l, ".bias");
    if (m->cfg.qk_norm) {
      b->qn_w = find(m, flat, first, "blocks.%d.attn.q_norm", l, ".weight");
      b->qn_b = find(m, flat, first, "blocks.%d.attn.q_norm", l, ".bias");
      b->kn_w = find(m, flat, first, "blocks.%d.attn.k_norm", l, ".weight");
      b->kn_b = find(m, flat, first, "blocks.%d.attn.k_norm", l, ".bias");
    }
    b->proj_w = find(m, flat, first, "blocks.%d.attn.proj", l, ".weight");
    b->proj_b = find(m, flat, first, "blocks.%d.attn.proj", l, ".bias");
    if (!m->cfg.parallel) {
      b->norm2_w = find(m, flat, first, "blocks.%d.norm2", l, ".weight");
      b->norm2_b = find(m, flat, first, "blocks.%d.norm2", l, ".bias");
    }
    b->fc1_w = find(m, flat, first, "blocks.%d.mlp.fc1", l, ".weight");
    b->fc1_b = find(m, flat, first, "blocks.%d.mlp.fc1", l, ".bias");
    b->fc2_w = find(m, flat, first, "blocks.%d.mlp.fc2", l, ".weight");
    b->fc2_b = find(m, flat, first, "blocks.%d.mlp.fc2", l, ".bias");
    if (m->cfg.layer_scale > 0 && m->cfg.parallel) {
      b->ls2 = find(m, flat, first, "blocks.%d.ls", l, ".gamma");  // the one gamma of the sum
    } else if (m->cfg.layer_scale > 0) {
      b->ls1 = find(m, flat, first, "blocks.%d.ls1", l, ".gamma");
      b->ls2 = find(m, flat, first, "blocks.%d.ls2", l, ".gamma");
    }
  }
  if (m->has_head) {
    const char *norm = m->cfg.global_pool == 1 ? "fc_norm" : "norm";
    t->norm_w = find(m, flat, first, norm, 0, ".weight");
    t->norm_b = find(m, flat, first, norm, 0, ".bias");
    if (m->cfg.pre_logits > 0) {
      t->pre_w = find(m, flat, first, "pre_logits.fc", 0, ".weight");
      t->pre_b = find(m, flat, first, "pre_logits.fc", 0, ".bias");
    }
    t->head_w = find(m, flat, first, "head", 0, ".weight");
    t->head_b = find(m, flat, first, "head", 0, ".bias");
  }
  if (m->has_head && m->cfg.global_pool == 3) {
    vt_map_tensors *a = &t->map;
    a->latent = find(m, flat, first, "attn_pool.latent", 0, "");
    static const char *const parts[] = {"q", "kv", "proj", "norm", "mlp.fc1", "mlp.fc2"};
    float **const at[][2] = {{&a->q_w, &a->q_b},         {&a->kv_w, &a->kv_b},
                             {&a->proj_w, &a->proj_b},   {&a->norm_w, &a->norm_b},
                             {&a->fc1_w, &a->fc1_b},     {&a->fc2_w, &a->fc2_b}};
    for (int i = 0; i < 6; i++) {
      char pre[32];
      snprintf(pre, sizeof pre, "attn_pool.%s", parts[i]);
      *at[i][0] = find(m, flat, first, pre, 0, ".weight");
      *at[i][1] = find(m, flat, first, pre, 0, ".bias");
    }
  }
}

static void *must_alloc(const vt_backend *be, size_t nbytes, const char *what) {
  void *p = be->alloc(nbytes);
  VT_CHECK(p != NULL, "out of %s memory: %zu MiB for %s; try a smaller --micro-batch-size or model",
           be->name, nbytes >> 20, what);
  return p;
}

static void *must_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  VT_CHECK(p != NULL, "out of host memory for the model's bookkeeping");
  return p;
}

// What sizes a rank's part, without backend memory: the fields and the slots' host arrays that
// carve() fills in (vt_model_init and vt_model_act_nbytes).
static void describe(vt_model *m, const vt_vit_config *cfg, vt_shard shard, int max_batch,
                     int nslots, int nwsets, int recompute, int frozen_layers,
                     const vt_backend *be) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  m->shard = shard;
  m->sp = shard.sequence_parallel && shard.tp_size > 1;
  m->nchunks = shard.pp_chunks;
  m->chunk_start = must_calloc((size_t)m->nchunks + 1, sizeof(int));
  m->block_id = must_calloc((size_t)cfg->depth, sizeof(int));
  for (int c = 0; c < m->nchunks; c++) {
    int first, end;
    vt_chunk_blocks(cfg->depth, &shard, c, &first, &end);
    for (int l = first; l < end; l++) m->block_id[m->nblocks++] = l;
    m->chunk_start[c + 1] = m->nblocks;
    if (end - first > m->slot_blocks) m->slot_blocks = end - first;
  }
  m->recompute = recompute < m->slot_blocks ? (recompute > 0 ? recompute : 0) : m->slot_blocks;
  m->frozen_layers = frozen_layers > 0 ? frozen_layers : 0;
  m->has_embed = vt_shard_has_embed(&shard);
  m->has_head = vt_shard_has_head(&shard);
  m->max_batch = max_batch;
  m->nslots = nslots;
  m->be = be;
  m->precision = be->precision();
  m->slots = must_calloc((size_t)nslots, sizeof(vt_model_slot));
  for (int i = 0; i < nslots; i++) {
    m->slots[i].blocks = must_calloc((size_t)m->slot_blocks, sizeof(vt_block_acts));
    m->slots[i].res = must_calloc((size_t)m->slot_blocks + 1, sizeof(float *));
  }
  m->nwsets = nwsets > 0 ? nwsets : 0;
  m->wsets = must_calloc((size_t)m->nwsets, sizeof(vt_block_wgrad *));
  for (int i = 0; i < m->nwsets; i++)
    m->wsets[i] = must_calloc((size_t)m->slot_blocks, sizeof(vt_block_wgrad));
}

// What describe() allocated on the host.
static void free_description(vt_model *m) {
  for (int i = 0; m->slots && i < m->nslots; i++) {
    free(m->slots[i].blocks);
    free(m->slots[i].res);
  }
  free(m->slots);
  for (int i = 0; m->wsets && i < m->nwsets; i++) free(m->wsets[i]);
  free(m->wsets);
  m->wsets = NULL;
  free(m->chunk_start);
  free(m->block_id);
  m->slots = NULL, m->chunk_start = m->block_id = NULL;
}

size_t vt_model_act_nbytes(const vt_vit_config *cfg, vt_shard shard, int max_batch, int nslots,
                           int nwsets, int recompute, int frozen_layers, const vt_backend *be) {
  vt_model m;
  describe(&m, cfg, shard, max_batch, nslots, nwsets, recompute, frozen_layers, be);
  arena sizing = {NULL, 0};
  carve(&m, &sizing);
  free_description(&m);
  return sizing.off;
}

void vt_model_init(vt_model *m, const vt_vit_config *cfg, vt_shard shard, vt_comm *tp,
                   int max_batch, int nslots, int nwsets, int recompute, int frozen_layers,
                   const vt_backend *be, uint64_t seed) {
  VT_CHECK(shard.tp_size == 1 || tp != NULL, "tensor parallelism needs a TP communicator");
  VT_CHECK(nwsets == 0 || recompute == 0,
           "activation recompute and a split backward do not go together: the weight pass "
           "reads the activations the recompute shares between blocks");
  describe(m, cfg, shard, max_batch, nslots, nwsets, recompute, frozen_layers, be);
  m->tp = shard.tp_size > 1 ? tp : NULL;
  m->seed = seed;
  m->bce_thresh = -1.0f;
  VT_CHECK(!m->sp || m->precision != VT_PRECISION_BF16 || cfg->width % 2 == 0,
           "sequence parallelism in bf16 gathers bf16 rows as floats: it needs an even width "
           "(have %d)", cfg->width);
  vt_params_build(&m->table, cfg, shard);
  const size_t pbytes = (size_t)m->table.total * sizeof(float);
  m->params = must_alloc(be, pbytes, "parameters");
  m->grad_first = vt_params_grad_first(&m->table, m->frozen_layers);
  const size_t gbytes = vt_model_grad_nbytes(m);  // 0 where every layer is frozen (vit3d eval)
  m->grads = gbytes ? must_alloc(be, gbytes, "gradients") : NULL;
  float *host = must_calloc((size_t)m->table.total, sizeof(float));
  vt_params_init(&m->table, host, seed);
  be->to_device(m->params, host, pbytes);
  be->synchronize();
  free(host);

  m->p.blocks = must_calloc((size_t)m->nblocks, sizeof(vt_block_tensors));
  m->g.blocks = must_calloc((size_t)m->nblocks, sizeof(vt_block_tensors));
  m->host_losses = must_calloc((size_t)max_batch, sizeof(float));
  bind(m, m->params, 0, &m->p);
  bind(m, m->grads, m->grad_first, &m->g);
  arena sizing = {NULL, 0};
  carve(m, &sizing);
  m->act_nbytes = sizing.off;
  m->act_block = must_alloc(be, m->act_nbytes, "activations");
  arena ar = {m->act_block, 0};
  carve(m, &ar);
}

size_t vt_model_weight_copy_nbytes(const vt_model *m) {
  return vt_weight_copy_nbytes(m->table.total, m->be->hold_weights != NULL,
                               m->be->precision());
}
void vt_model_hold_weights(const vt_model *m) {
  if (m->be->hold_weights) m->be->hold_weights(m->params, m->table.total);
}
void vt_model_release_weights(const vt_model *m) {
  if (m->be->release_weights) m->be->release_weights();
}

void vt_model_free(vt_model *m) {
  if (m->be) {
    m->be->free(m->params);
    m->be->free(m->grads);
    m->be->free(m->act_block);
  }
  free_description(m);
  free(m->p.blocks);
  free(m->g.blocks);
  free(m->host_losses);
  vt_params_free(&m->table);
  memset(m, 0, sizeof *m);
}

// The first of this rank's rows of the (B*N, C) stream: its block under sequence parallelism,
// else 0.
static int64_t first_row(const vt_model *m, int B) {
  return m->sp ? m->shard.tp_rank * vt_model_local_rows(m, B) : 0;
}

// How many of this rank's rows of the stream hold tokens (under sequence parallelism the last
// ranks' blocks end in padding rows past B*N).
static int64_t real_rows(const vt_model *m, int B) {
  const int64_t M = (int64_t)B * vt_cfg_tokens(&m->cfg), Ml = vt_model_local_rows(m, B);
  const int64_t first = first_row(m, B);
  return first >= M ? 0 : (M - first < Ml ? M - first : Ml);
}

// Zeroes the padding rows of this rank's rows of the stream, so they stay inert (zero rows give
// zero gradients).
static void zero_padding(const vt_model *m, float *local, int B) {
  const int64_t C = m->cfg.width, Ml = vt_model_local_rows(m, B), real = real_rows(m, B);
  if (real < Ml) m->be->zero(local + real * C, (size_t)((Ml - real) * C) * sizeof(float));
}

// Sequence parallel: this rank's block of rows of a full (B*N, C) tensor into local, with the
// padding rows past B*N zeroed.
static void take_rows(const vt_model *m, float *local, const float *full, int B) {
  const int64_t C = m->cfg.width, first = first_row(m, B), real = real_rows(m, B);
  if (real > 0) m->be->copy(local, full + first * C, (size_t)(real * C) * sizeof(float));
  zero_padding(m, local, B);
}

double vt_drop_path_keep(float rate, int layer, int depth) {
  return depth > 1 ? 1.0 - (double)rate * layer / (depth - 1) : 1.0;
}

void vt_drop_path_mask(vt_drop_mask *mask, uint64_t seed, int layer, int branch, double keep,
                       int64_t sample0, int B, int64_t N) {
  VT_CHECK(B <= VT_DROP_PATH_MAX_SAMPLES && keep > 0.0,
           "drop path: micro-batch %d (at most %d), keep probability %g", B,
           VT_DROP_PATH_MAX_SAMPLES, keep);
  memset(mask, 0, sizeof *mask);
  mask->scale = 1.0f / (float)keep;
  mask->rows_per_sample = N;
  const uint32_t stream = vt_hash_name("drop_path");
  for (int b = 0; b < B; b++)
    if (vt_rng_uniform(seed, stream, (uint32_t)(2 * layer + branch), (uint64_t)(sample0 + b)) < keep)
      mask->keep[b >> 5] |= 1u << (b & 31);
}

void vt_dropout_mask_make(vt_dropout_mask *mask, uint64_t seed, uint32_t site, float p,
                          int64_t sample0, int64_t N, int64_t row0, int64_t width, int64_t col0) {
  VT_CHECK(p > 0.0f && p < 1.0f && sample0 >= 0, "dropout: probability %g, stream position %lld",
           (double)p, (long long)sample0);
  mask->seed = seed;
  mask->site = site;
  mask->p = p;
  mask->scale = 1.0f / (1.0f - p);
  mask->first = (sample0 * N + row0) * width + col0;
  mask->width = width;
}

// What block l of this rank (local index) drops for a slot's micro-batch, in masks that the
// caller keeps (path[2]; drop[4], dropout's three places then the attention's probabilities);
// members NULL where nothing drops (rate 0, the first block's drop path, evaluation).
static vt_block_noise block_noise(const vt_model *m, int l, const vt_model_slot *sl, int B,
                                  vt_drop_mask path[2], vt_dropout_mask drop[4]) {
  vt_block_noise noise = {NULL, NULL, NULL};
  if (sl->sample0 < 0) return noise;
  const int layer = m->block_id[l];
  const int64_t N = vt_cfg_tokens(&m->cfg), C = m->cfg.width;
  const int64_t row0 = first_row(m, B);
  const double keep = vt_drop_path_keep(m->drop_path, layer, m->cfg.depth);
  if (keep < 1.0) {
    for (int branch = 0; branch < 2; branch++) {
      vt_drop_path_mask(&path[branch], m->seed, layer, branch, keep, sl->sample0, B, N);
      path[branch].row0 = row0;
    }
    noise.path = path;
  }
  if (m->proj_drop > 0.0f) {
    // The branch outputs: this rank's rows of all C columns; the hidden units: all rows of this
    // rank's F / tp columns.
    const int64_t F = vt_cfg_mlp_hidden(&m->cfg), Fl = F / m->shard.tp_size;
    vt_dropout_mask_make(&drop[VT_DROPOUT_ATTN], m->seed, vt_dropout_site(layer, VT_DROPOUT_ATTN),
                         m->proj_drop, sl->sample0, N, row0, C, 0);
    vt_dropout_mask_make(&drop[VT_DROPOUT_HIDDEN], m->seed,
                         vt_dropout_site(layer, VT_DROPOUT_HIDDEN), m->proj_drop, sl->sample0, N,
                         0, F, m->shard.tp_rank * Fl);
    vt_dropout_mask_make(&drop[VT_DROPOUT_MLP], m->seed, vt_dropout_site(layer, VT_DROPOUT_MLP),
                         m->proj_drop, sl->sample0, N, row0, C, 0);
    noise.drop = drop;
  }
  if (m->attn_drop > 0.0f) {
    // Every image's (heads, N, N) probabilities, of which this rank holds its heads' (all rows:
    // attention reads the gathered sequence).
    const int64_t H = m->cfg.heads, Hl = H / m->shard.tp_size;
    vt_dropout_mask_make(&drop[3], m->seed, vt_attn_dropout_site(layer, m->cfg.depth),
                         m->attn_drop, sl->sample0, H, m->shard.tp_rank * Hl, N * N, 0);
    drop[3].width = H;  // vt_attention_fwd's numbering: first + (b * H + h) N^2 + i N + j
    noise.attn = &drop[3];
  }
  return noise;
}

// A dropout mask of probability p at `site` for a slot's micro-batch (N rows per image, from row
// row0, width columns), or NULL where nothing drops (p 0, evaluation).
static const vt_dropout_mask *slot_dropout(const vt_model *m, const vt_model_slot *sl, float p,
                                           uint32_t site, int64_t N, int64_t row0, int64_t width,
                                           vt_dropout_mask *mask) {
  if (sl->sample0 < 0 || p <= 0.0f) return NULL;
  vt_dropout_mask_make(mask, m->seed, site, p, sl->sample0, N, row0, width, 0);
  return mask;
}

// The embedding's dropout mask over this rank's rows of the stream, or NULL.
static const vt_dropout_mask *pos_dropout(const vt_model *m, const vt_model_slot *sl, int B,
                                          vt_dropout_mask *mask) {
  return slot_dropout(m, sl, m->pos_drop, vt_dropout_site(-1, 0), vt_cfg_tokens(&m->cfg),
                      first_row(m, B), m->cfg.width, mask);
}

// The head input's dropout mask (B rows, whole on every TP rank), or NULL.
static const vt_dropout_mask *head_dropout(const vt_model *m, const vt_model_slot *sl,
                                           vt_dropout_mask *mask) {
  return slot_dropout(m, sl, m->head_drop, vt_dropout_site(m->cfg.depth, 0), 1, 0,
                      vt_cfg_head_in(&m->cfg), mask);
}

// The slot's Mixup/CutMix targets, or NULL (none, or an evaluation forward).
static const vt_mix_target *slot_mix(const vt_model *m, const vt_model_slot *sl) {
  return m->mix && sl->sample0 >= 0 ? sl->mix : NULL;
}

float *vt_model_chunk_output(const vt_model *m, int chunk, int slot) {
  return m->slots[slot].res[m->chunk_start[chunk + 1] - m->chunk_start[chunk]];
}

void vt_model_forward(vt_model *m, int chunk, int slot, int B, float smoothing, int64_t sample0) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  VT_CHECK(B > 0 && B <= m->max_batch, "micro-batch %d outside 1..%d", B, m->max_batch);
  VT_CHECK(slot >= 0 && slot < m->nslots, "slot %d outside 0..%d", slot, m->nslots - 1);
  VT_CHECK(chunk >= 0 && chunk < m->nchunks, "chunk %d outside 0..%d", chunk, m->nchunks - 1);
  VT_CHECK(be->precision() == m->precision,
           "the backend's precision changed after the model was allocated (its activations are "
           "sized for the precision at vt_model_init)");
  const int64_t N = vt_cfg_tokens(c), C = c->width, K = c->num_classes, S = c->img_size;
  const int64_t P = c->patch_size, T = vt_cfg_prefix_tokens(c);
  vt_model_slot *sl = &m->slots[slot];
  sl->sample0 = sample0;
  const int b0 = m->chunk_start[chunk], nb = m->chunk_start[chunk + 1] - b0;
  if (m->has_embed && chunk == 0) {
    vt_patchify_fwd(be, sl->patches, sl->img, B, S, P);
    vt_linear_fwd(be, sl->patch_out, sl->patches, m->p.patch_w, m->p.patch_b, B * (N - T),
                  3 * P * P, C);
    // The embedding's output: the stream, or with norm_pre (timm's pre_norm) its input.
    float *emb = c->pre_norm ? sl->emb : sl->res[0];
    const int64_t Ml = vt_model_local_rows(m, B);
    vt_embed_fwd(be, m->sp ? m->s.full : emb, sl->patch_out, m->p.prefix, m->p.pos, B, N, T,
                 vt_cfg_pos_first(c), C);
    if (m->sp) take_rows(m, emb, m->s.full, B);
    vt_dropout_mask pos;
    if (pos_dropout(m, sl, B, &pos)) vt_dropout(be, emb, emb, Ml, C, &pos, 0);
    if (c->pre_norm) {  // fp32 out: the stream, whose padding rows under SP stay zero
      vt_layernorm_fwd(be, sl->res[0], sl->emb_mean, sl->emb_rstd, emb, m->p.pre_norm_w,
                       m->p.pre_norm_b, Ml, C, vt_cfg_norm_eps(c), 0);
      zero_padding(m, sl->res[0], B);
    }
  }
  for (int j = 0; j < nb; j++) {  // local block b0 + j, slot block j
    vt_drop_mask path[2];
    vt_dropout_mask drop[4];
    const vt_block_noise noise = block_noise(m, b0 + j, sl, B, path, drop);
    vt_block_fwd(m, &m->p.blocks[b0 + j], &sl->blocks[j], sl->res[j], sl->res[j + 1], B, &noise);
  }
  if (!(m->has_head && chunk == m->nchunks - 1)) return;
  // Class token: timm normalises every token, then pools the class token; LayerNorm is per
  // token, so normalising only the pooled tokens gives the same logits and gradients for less
  // work. Average: timm pools the patch tokens, then normalises (fc_norm). Gap: every patch
  // token normalised, then their mean (sl->pooled keeps the mean of the normalised tokens).
  // Map: every token normalised, then attention pooling (map_head.c).
  const float *x = sl->res[nb];
  if (m->sp) {  // the tokens are spread over the TP group's rows
    vt_tp_sp_gather(m->tp, m->s.full, x, vt_model_local_rows(m, B) * C);
    x = m->s.full;
  }
  float *head_in = sl->lnf;
  if (c->global_pool == 3) {
    vt_map_head_fwd(m, sl, x, B);
    head_in = sl->map.out;
  } else if (c->global_pool == 2) {
    vt_norm_mean_pool_fwd(be, sl->lnf, sl->pooled, sl->lnf_mean, sl->lnf_rstd, x, m->p.norm_w,
                          m->p.norm_b, B, N, T, C, vt_cfg_norm_eps(c));
  } else {
    if (c->global_pool) vt_mean_pool_fwd(be, sl->pooled, x, B, N, T, C);
    else vt_cls_pool_fwd(be, sl->pooled, x, B, N, C);
    vt_layernorm_fwd(be, sl->lnf, sl->lnf_mean, sl->lnf_rstd, sl->pooled, m->p.norm_w,
                     m->p.norm_b, B, C, vt_cfg_norm_eps(c), 1);
  }
  const int64_t R = c->pre_logits, Kin = vt_cfg_head_in(c);
  if (R > 0) {  // big_vision's pre-logits: tanh(Linear(C, R)), the head's input
    vt_linear_act_fwd(be, sl->pre_fc, head_in, m->p.pre_w, m->p.pre_b, B, C, R);
    vt_act_fwd(be, sl->pre, sl->pre_fc, B * R, VT_ACT_TANH);
    head_in = sl->pre;
  }
  vt_dropout_mask hd;  // the head's input is a bf16 activation
  if (head_dropout(m, sl, &hd)) vt_dropout(be, head_in, head_in, B, Kin, &hd, 1);
  vt_linear_fwd(be, sl->logits, head_in, m->p.head_w, m->p.head_b, B, Kin, K);
  if (m->bce && sample0 >= 0)
    vt_bce_fwd(be, sl->losses, sl->probs, sl->logits, sl->labels, slot_mix(m, sl), smoothing,
               m->bce_thresh, B, K);
  else
    vt_cross_entropy_fwd(be, sl->losses, sl->probs, sl->logits, sl->labels, slot_mix(m, sl),
                         smoothing, B, K);
}

double vt_model_loss_sum(vt_model *m, int slot, int B) {
  if (!m->has_head) return 0.0;
  m->be->to_host(m->host_losses, m->slots[slot].losses, (size_t)B * sizeof(float));
  double sum = 0.0;
  for (int b = 0; b < B; b++) sum += m->host_losses[b];
  return sum;
}

void vt_model_backward(vt_model *m, int chunk, int slot, int wset, int B, float smoothing,
                       float loss_scale) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int64_t N = vt_cfg_tokens(c), C = c->width, K = c->num_classes, P = c->patch_size;
  const int64_t T = vt_cfg_prefix_tokens(c);
  vt_model_slot *sl = &m->slots[slot];
  const vt_model_scratch *s = &m->s;
  vt_model_tensors *g = &m->g;
  const int64_t Ml = vt_model_local_rows(m, B);
  VT_CHECK(chunk >= 0 && chunk < m->nchunks, "chunk %d outside 0..%d", chunk, m->nchunks - 1);
  VT_CHECK(wset >= -1 && wset < m->nwsets, "weight set %d outside -1..%d", wset, m->nwsets - 1);
  const int b0 = m->chunk_start[chunk], nb = m->chunk_start[chunk + 1] - b0;
  vt_block_wgrad *wg = wset >= 0 ? m->wsets[wset] : NULL;
  if (m->has_head && chunk == m->nchunks - 1) {
    // Binary cross-entropy averages over the classes too: the same backward with scale / K.
    vt_cross_entropy_bwd(be, s->dlogits, sl->probs, sl->labels, slot_mix(m, sl), smoothing,
                         m->bce ? m->bce_thresh : -1.0f,
                         m->bce ? loss_scale / (float)K : loss_scale, B, K);
    const int map = c->global_pool == 3;
    const int64_t R = c->pre_logits;
    float *dpooled_in = map ? s->map_dy : s->dlnf;  // the gradient of the pooled features
    const float *pooled_in = map ? sl->map.out : sl->lnf;
    vt_dropout_mask hd;
    if (R > 0) {
      // The head's input gradient goes only to tanh's backward: a bf16 activation, as is its
      // dropout; tanh's backward also makes the pre-logits bias gradient.
      vt_linear_bwd_act(be, s->dpre, g->head_w, g->head_b, s->dlogits, sl->pre, m->p.head_w, B,
                        R, K);
      if (head_dropout(m, sl, &hd)) vt_dropout(be, s->dpre, s->dpre, B, R, &hd, 1);
      vt_act_bwd(be, s->dpre_fc, g->pre_b, sl->pre_fc, s->dpre, B, R, VT_ACT_TANH);
      vt_linear_act_bwd(be, dpooled_in, g->pre_w, s->dpre_fc, pooled_in, m->p.pre_w, B, C, R);
    } else {
      vt_linear_bwd(be, dpooled_in, g->head_w, g->head_b, s->dlogits, pooled_in, m->p.head_w, B,
                    C, K);
      if (head_dropout(m, sl, &hd)) vt_dropout(be, dpooled_in, dpooled_in, B, C, &hd, 0);
    }
    float *dx = m->sp ? s->full : s->dres;
    if (map) {
      // The backward reads the last block's output again (under sequence parallelism gathered
      // once more); the tokens' gradient goes to a buffer of its own. Each TP rank's is its
      // heads' part, summed over the group as a column-parallel layer's input gradient (f's
      // backward: reduce-scattered to this rank's rows under sequence parallelism).
      const float *x = sl->res[nb];
      if (m->sp) vt_tp_sp_gather(m->tp, s->full, x, Ml * C), x = s->full, dx = s->partial;
      vt_map_head_bwd(m, sl, dx, x, B);
      if (m->sp) vt_tp_sp_reduce_scatter(m->tp, s->dres, dx, Ml * C);
      else vt_tp_f_bwd(m->tp, dx, (int64_t)B * N * C);
    } else if (c->global_pool == 2) {
      // The backward reads the last block's output again: under sequence parallelism gathered
      // once more into the buffer that then takes its gradient in place.
      const float *x = sl->res[nb];
      if (m->sp) vt_tp_sp_gather(m->tp, s->full, x, Ml * C), x = s->full;
      vt_norm_mean_pool_bwd(be, dx, g->norm_w, g->norm_b, s->dlnf, x, sl->pooled, m->p.norm_w,
                            sl->lnf_mean, sl->lnf_rstd, B, N, T, C);
    } else {
      vt_layernorm_bwd(be, s->dpooled, g->norm_w, g->norm_b, s->dlnf, sl->pooled, m->p.norm_w,
                       sl->lnf_mean, sl->lnf_rstd, B, C);
      if (c->global_pool) vt_mean_pool_bwd(be, dx, s->dpooled, B, N, T, C);
      else vt_cls_pool_bwd(be, dx, s->dpooled, B, N, C);
    }
    if (m->sp && !map) take_rows(m, s->dres, dx, B);
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, c->depth + 1);
  } else {
    be->copy(s->dres, sl->dout, (size_t)Ml * C * sizeof(float));
  }
  for (int j = nb - 1; j >= 0; j--) {  // local block b0 + j, slot block j
    const int l = b0 + j;
    if (in_frozen_prefix(m, l)) {
      if (m->grads_ready && !wg) m->grads_ready(m->grads_ready_ctx, m->block_id[l] + 1);
      continue;
    }
    vt_drop_mask path[2];
    vt_dropout_mask drop[4];
    const vt_block_noise noise = block_noise(m, l, sl, B, path, drop);
    if (j < m->recompute)  // the same forward again (deterministic: the same bits), its output aside
      vt_block_fwd(m, &m->p.blocks[l], &sl->blocks[j], sl->res[j], s->recompute_out, B, &noise);
    vt_block_bwd(m, &m->p.blocks[l], &g->blocks[l], &sl->blocks[j], sl->res[j], s->dres, B,
                 &noise, wg ? &wg[j] : NULL);
    if (m->grads_ready && !wg) m->grads_ready(m->grads_ready_ctx, m->block_id[l] + 1);
  }
  if (!(m->has_embed && chunk == 0)) {
    be->copy(sl->dinput, s->dres, (size_t)Ml * C * sizeof(float));
    return;
  }
  if (m->frozen_layers > 0) {  // frozen embeddings
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, 0);
    return;
  }
  // The embedding's output gradient: the stream's, or with norm_pre its input's (in dln).
  float *demb = s->dres;
  if (c->pre_norm) {
    demb = s->dln;
    vt_layernorm_bwd(be, demb, g->pre_norm_w, g->pre_norm_b, s->dres, sl->emb, m->p.pre_norm_w,
                     sl->emb_mean, sl->emb_rstd, Ml, C);
  }
  vt_dropout_mask pos;
  if (pos_dropout(m, sl, B, &pos)) vt_dropout(be, demb, demb, Ml, C, &pos, 0);
  const float *dx = demb;
  if (m->sp) {
    vt_tp_sp_gather(m->tp, s->full, demb, Ml * C);
    dx = s->full;
  }
  // Fixed sin-cos positions take no gradient (theirs stays zero: AdamW and LAMB leave them).
  vt_embed_bwd(be, s->dpatch_out, g->prefix, c->pos_sincos ? NULL : g->pos, dx, B, N, T,
               vt_cfg_pos_first(c), C);
  vt_linear_bwd(be, NULL, g->patch_w, g->patch_b, s->dpatch_out, sl->patches, m->p.patch_w,
                B * (N - T), 3 * P * P, C);
  if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, 0);
}

void vt_model_backward_weight(vt_model *m, int chunk, int slot, int wset, int B) {
  VT_CHECK(chunk >= 0 && chunk < m->nchunks, "chunk %d outside 0..%d", chunk, m->nchunks - 1);
  VT_CHECK(wset >= 0 && wset < m->nwsets, "weight set %d outside 0..%d", wset, m->nwsets - 1);
  const int b0 = m->chunk_start[chunk], nb = m->chunk_start[chunk + 1] - b0;
  for (int j = nb - 1; j >= 0; j--) {  // the whole backward's order
    const int l = b0 + j;
    if (!in_frozen_prefix(m, l))
      vt_block_bwd_weight(m, &m->g.blocks[l], &m->slots[slot].blocks[j], &m->wsets[wset][j], B);
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, m->block_id[l] + 1);
  }
}
