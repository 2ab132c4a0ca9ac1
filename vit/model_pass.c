// model_pass.c: one rank's part of the ViT run on one micro-batch slot: the embeddings and the
// head around the blocks of vit/block.c (and map_head.c), forward, backward (input gradients,
// and weight gradients unless split off), the weight pass of a split backward; the drop-path,
// dropout and Mixup draws of each. Works on what model.c allocated; must not depend on MPI or
// the pipeline's schedule.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "tp.h"
#include "vt_ops.h"
#include "vt_rng.h"

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

double vt_drop_path_keep(float rate, int uniform, int layer, int depth) {
  if (uniform) return 1.0 - (double)rate;
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
  const double keep =
      vt_drop_path_keep(m->drop_path, m->drop_path_uniform, layer, m->cfg.depth);
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
    if (vt_model_block_frozen(m, l)) {
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
    if (!vt_model_block_frozen(m, l))
      vt_block_bwd_weight(m, &m->g.blocks[l], &m->slots[slot].blocks[j], &m->wsets[wset][j], B);
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, m->block_id[l] + 1);
  }
}
