// model.c: one rank's part of the ViT: its parameters, gradients and activations carved from
// one allocation each (per micro-batch slot, weight set and chunk), bound to the parameter
// table's names; model_pass.c runs the passes over them.
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

int vt_model_block_frozen(const vt_model *m, int l) {
  return m->block_id[l] + 1 < m->frozen_layers;
}

// Slot block j is in the frozen prefix in every chunk that has it: no backward reads its
// activations, so all slots share one set (as the recomputed blocks').
static int slot_block_frozen(const vt_model *m, int j) {
  for (int c = 0; c < m->nchunks; c++) {
    const int b0 = m->chunk_start[c];
    if (j < m->chunk_start[c + 1] - b0 && !vt_model_block_frozen(m, b0 + j)) return 0;
  }
  return 1;
}

// (Any slot block: a chunk shorter than another has no block j there, so with chunks of
// unequal length slot block 1 may be frozen in every chunk that has it while block 0 is not.)
static int any_slot_block_frozen(const vt_model *m) {
  for (int j = 0; j < m->slot_blocks; j++)
    if (slot_block_frozen(m, j)) return 1;
  return 0;
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
  // (none where the frozen prefix, which runs no backward, holds every recomputed block)
  if (vt_recomputed_blocks(c->depth, &m->shard, m->recompute, m->frozen_layers) > 0)
    s->recompute_out = take(ar, Ml * C);
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
