// block.c: one transformer block, forward and backward, tensor-parallel in Megatron's way:
// qkv and fc1 are column-parallel (this rank's heads / hidden units), proj and fc2 row-parallel,
// so each branch crosses the TP group once forward (mapping g) and once backward (mapping f).
// Under sequence parallelism the stream and the LayerNorms hold only this rank's rows, f
// gathers the rows and g reduce-scatters them (parallel/tp.h). The row-parallel biases are
// added by TP rank 0 only, before the reduction, so they count once. Under drop path (noise->path,
// the masks of the attention and the MLP branch) a branch's output reaches the stream only for
// the samples that keep it, scaled (vt_drop_path). With LayerScale each branch's output is
// multiplied by its gamma per channel before that (timm: x + drop_path(ls(branch))). Dropout
// (noise->drop, timm's proj_drop) drops elements of the attention's output and of the MLP's
// hidden units and output: x + drop_path(ls(dropout(branch))); attention dropout (noise->attn,
// timm's attn_drop) drops probabilities inside the attention ops.
// Parallel blocks (cfg.parallel) run both branches from one LayerNorm and add their outputs
// before one reduction: one f and one g per block; their dropout, as timm's
// ParallelScalingBlock's (mlp_drop), drops the MLP's hidden units only.
#include "model.h"
#include "tp.h"
#include "vt_ops.h"

// f forward: the rows a column-parallel layer reads (all of them). They are a LayerNorm's output,
// a bf16 activation in bf16 precision (vt_ops.h): gathered as the floats of their storage, which
// vt_model_init keeps whole (C even).
static const float *f_fwd(const vt_model *m, float *full, const float *local, int64_t count) {
  if (!m->sp) return local;
  vt_tp_sp_gather(m->tp, full, local, vt_act_floats(m->be, count));
  return full;
}

// g forward: this rank's rows of the sum over TP of a row-parallel layer's partial output.
static void g_fwd(const vt_model *m, float *out, float *partial, int64_t count) {
  if (m->sp) vt_tp_sp_reduce_scatter(m->tp, out, partial, count);
  else vt_tp_g_fwd(m->tp, out, count);  // partial is out
}

// g backward: the gradient of all rows of a row-parallel layer's output.
static const float *g_bwd(const vt_model *m, float *full, const float *local, int64_t count) {
  if (!m->sp) return local;
  vt_tp_sp_gather(m->tp, full, local, count);
  return full;
}

// f backward: this rank's rows of the summed input gradient of a column-parallel layer.
static const float *f_bwd(const vt_model *m, float *local, float *partial, int64_t count) {
  if (!m->sp) {
    vt_tp_f_bwd(m->tp, partial, count);
    return partial;
  }
  vt_tp_sp_reduce_scatter(m->tp, local, partial, count);
  return local;
}

// out = res + the branch output y (Ml rows, reduced over TP; dropout applied in place) times
// LayerScale's gamma, where its sample keeps the branch under drop path. y is out itself unless
// gamma is set (LayerScale keeps y for its backward).
static void branch_add(const vt_model *m, float *out, float *y, const float *gamma,
                       const float *res, const vt_drop_mask *mask, const vt_dropout_mask *drop,
                       int64_t Ml) {
  const int64_t C = m->cfg.width;
  if (drop) vt_dropout(m->be, y, y, Ml, C, drop, 0);
  if (gamma) vt_layer_scale_fwd(m->be, out, y, gamma, Ml, C);
  if (mask) vt_drop_path(m->be, out, out, res, Ml, C, mask);
  else vt_add(m->be, out, out, res, Ml * C);
}

// qkv (QK-norm) and attention of the rows x1 (all M of them): a->attn. drop: the
// probabilities' dropout mask, or NULL.
static void attention_fwd(const vt_model *m, const vt_block_tensors *w, vt_block_acts *a,
                          const float *x1, int B, const vt_dropout_mask *drop) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads / m->shard.tp_size;
  const int64_t D = vt_cfg_head_dim(c), M = (int64_t)B * N;
  vt_linear_act_fwd(be, a->qkv, x1, w->qkv_w, w->qkv_b, M, C, 3 * H * D);
  if (w->qn_w)
    vt_qk_norm_fwd(be, a->qkn, a->qk_mean, a->qk_rstd, a->qkv, w->qn_w, w->qn_b, w->kn_w,
                   w->kn_b, M, H, D, vt_cfg_norm_eps(c));
  vt_attention_fwd(be, a->attn, a->lse, w->qn_w ? a->qkn : a->qkv, B, N, H, D, drop);
}

// A parallel block (ViT-22B, timm's ParallelScalingBlock): x + drop_path(ls(attn(n) + mlp(n)))
// with n = norm1(x). Both branches read the one gathered n (f once) and their row-parallel
// outputs are added before the one reduction (g once): one TP collective each way per block
// instead of two.
static void parallel_fwd(const vt_model *m, const vt_block_tensors *w, vt_block_acts *a,
                         const float *in, float *out, int B, const vt_drop_mask *drop,
                         const vt_dropout_mask *dropout, const vt_dropout_mask *attn_drop) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t N = vt_cfg_tokens(c), C = c->width, HD = c->heads / tp * vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, M = (int64_t)B * N;
  const int64_t Ml = vt_model_local_rows(m, B);
  const int first = m->shard.tp_rank == 0;  // row-parallel biases once
  vt_layernorm_fwd(be, a->ln1, a->ln1_mean, a->ln1_rstd, in, w->norm1_w, w->norm1_b, Ml, C,
                   vt_cfg_norm_eps(c), 1);
  const float *x1 = f_fwd(m, a->ln1_full, a->ln1, Ml * C);
  attention_fwd(m, w, a, x1, B, attn_drop);
  vt_linear_act_fwd(be, a->fc1, x1, w->fc1_w, w->fc1_b, M, C, F);
  vt_act_fwd(be, a->gelu, a->fc1, M * F, vt_model_gelu(m));
  if (dropout) vt_dropout(be, a->gelu, a->gelu, M, F, &dropout[VT_DROPOUT_HIDDEN], 1);
  // y: the reduced sum of the branches (kept for LayerScale's backward, else made in out)
  float *y = w->ls2 ? a->ls2 : out, *sum = m->sp ? m->s.partial : y;
  vt_linear_fwd(be, m->s.branch, a->attn, w->proj_w, first ? w->proj_b : NULL, M, HD, C);
  vt_linear_residual_fwd(be, sum, a->gelu, w->fc2_w, first ? w->fc2_b : NULL, m->s.branch, M, F,
                         C);
  g_fwd(m, y, sum, Ml * C);
  branch_add(m, out, y, w->ls2, in, drop ? &drop[0] : NULL, NULL, Ml);
}

void vt_block_fwd(const vt_model *m, const vt_block_tensors *w, vt_block_acts *a,
                  const float *in, float *out, int B, const vt_block_noise *noise) {
  const vt_drop_mask *drop = noise->path;
  const vt_dropout_mask *dropout = noise->drop;
  if (m->cfg.parallel) {
    parallel_fwd(m, w, a, in, out, B, drop, dropout, noise->attn);
    return;
  }
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads / tp, D = vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, M = (int64_t)B * N;
  const int64_t Ml = vt_model_local_rows(m, B);
  const float *proj_b = m->shard.tp_rank == 0 ? w->proj_b : NULL;
  const float *fc2_b = m->shard.tp_rank == 0 ? w->fc2_b : NULL;
  // Without TP, drop path, dropout and LayerScale nothing comes between a branch's last GEMM and
  // its residual add, so the GEMM adds it (linear_residual_fwd: the same bits on the CPU, less
  // traffic on a GPU).
  const int fused = tp == 1 && !drop && !dropout && !w->ls1;
  // Attention branch: in -> mid (Ml rows). Its output y (kept for LayerScale's backward, else
  // made in mid) becomes y * gamma in mid.
  float *y = w->ls1 ? a->ls1 : a->mid;
  float *partial = m->sp ? m->s.partial : y;
  const float eps = vt_cfg_norm_eps(c);
  vt_layernorm_fwd(be, a->ln1, a->ln1_mean, a->ln1_rstd, in, w->norm1_w, w->norm1_b, Ml, C, eps,
                   1);
  const float *x1 = f_fwd(m, a->ln1_full, a->ln1, Ml * C);
  attention_fwd(m, w, a, x1, B, noise->attn);
  if (fused) {
    vt_linear_residual_fwd(be, a->mid, a->attn, w->proj_w, proj_b, in, M, H * D, C);
    vt_layernorm_fwd(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, w->norm2_w, w->norm2_b, M, C,
                     eps, 1);
  } else {
    vt_linear_fwd(be, partial, a->attn, w->proj_w, proj_b, M, H * D, C);
    g_fwd(m, y, partial, Ml * C);
    if (dropout) vt_dropout(be, y, y, Ml, C, &dropout[VT_DROPOUT_ATTN], 0);
    if (w->ls1) vt_layer_scale_fwd(be, a->mid, y, w->ls1, Ml, C);
    if (drop) {  // mid = in + the attention branch where its sample keeps it
      vt_drop_path(be, a->mid, a->mid, in, Ml, C, &drop[0]);
      vt_layernorm_fwd(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, w->norm2_w, w->norm2_b, Ml,
                       C, eps, 1);
    } else {  // mid = in + attention branch, its LayerNorm in the same pass
      vt_add_layernorm_fwd(be, a->mid, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, in, w->norm2_w,
                           w->norm2_b, Ml, C, eps);
    }
  }
  // MLP branch: mid -> out, its output y in out or, with LayerScale, in ls2
  y = w->ls2 ? a->ls2 : out;
  partial = m->sp ? m->s.partial : y;
  const float *x2 = f_fwd(m, a->ln2_full, a->ln2, Ml * C);
  vt_linear_act_fwd(be, a->fc1, x2, w->fc1_w, w->fc1_b, M, C, F);
  vt_act_fwd(be, a->gelu, a->fc1, M * F, vt_model_gelu(m));
  if (fused) {
    vt_linear_residual_fwd(be, out, a->gelu, w->fc2_w, fc2_b, a->mid, M, F, C);
    return;
  }
  if (dropout) vt_dropout(be, a->gelu, a->gelu, M, F, &dropout[VT_DROPOUT_HIDDEN], 1);
  vt_linear_fwd(be, partial, a->gelu, w->fc2_w, fc2_b, M, F, C);
  g_fwd(m, y, partial, Ml * C);
  branch_add(m, out, y, w->ls2, a->mid, drop ? &drop[1] : NULL,
             dropout ? &dropout[VT_DROPOUT_MLP] : NULL, Ml);
}

// The gradient of a residual branch's output y: the stream's, dres, or under drop path dres *
// scale where the branch's sample kept it and 0 where it was dropped, times LayerScale's gamma
// (whose gradient, the column sums of that times y, goes to dgamma), through dropout's mask;
// made in dln when it is not dres itself (dln is free until the branch's first input gradient;
// its rows past M, which must stay zero, lie beyond these Ml).
static const float *branch_dout(const vt_model *m, const float *dres, const vt_drop_mask *mask,
                                const vt_dropout_mask *drop, const float *gamma, float *dgamma,
                                const float *y, int64_t Ml) {
  const int64_t C = m->cfg.width;
  const float *d = dres;
  if (mask) {
    vt_drop_path(m->be, m->s.dln, dres, NULL, Ml, C, mask);
    d = m->s.dln;
  }
  if (gamma) {
    vt_layer_scale_bwd(m->be, m->s.dln, dgamma, d, y, gamma, Ml, C);
    d = m->s.dln;
  }
  if (drop) {
    vt_dropout(m->be, m->s.dln, d, Ml, C, drop, 0);
    d = m->s.dln;
  }
  return d;
}

// The gradient of a branch's output over all M rows (gathered under sequence parallelism) from
// the stream's, dres (branch_dout), kept in `kept` for the split backward's weight pass when set
// (the gathered rows are scratch that later steps overwrite).
static const float *branch_dy(const vt_model *m, const float *dres, const vt_drop_mask *mask,
                              const vt_dropout_mask *drop, const float *gamma, float *dgamma,
                              const float *y, float *kept, int B) {
  const int64_t Ml = vt_model_local_rows(m, B), C = m->cfg.width;
  const float *dy =
      g_bwd(m, m->s.full, branch_dout(m, dres, mask, drop, gamma, dgamma, y, Ml), Ml * C);
  if (!kept) return dy;
  m->be->copy(kept, dy, (size_t)((int64_t)B * vt_cfg_tokens(&m->cfg) * C) * sizeof(float));
  return kept;
}

// The attention branch's backward from proj's output gradient dy (all M rows) to the gradient
// of its input rows x1, dx1 (M rows): proj, attention (and QK-norm), qkv. Uses dact. drop: the
// probabilities' dropout mask (the forward's), or NULL.
static void attention_bwd(const vt_model *m, const vt_block_tensors *w, vt_block_tensors *gw,
                          const vt_block_acts *a, const float *dy, const float *x1, float *dqkv,
                          float *dx1, int weights, int B, const vt_dropout_mask *drop) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads / m->shard.tp_size;
  const int64_t D = vt_cfg_head_dim(c), M = (int64_t)B * N;
  float *dact = m->s.dact;
  vt_linear_bwd_act(be, dact, weights ? gw->proj_w : NULL, gw->proj_b, dy, a->attn, w->proj_w, M,
                    H * D, C);
  if (w->qn_w) {  // attention's gradient is that of the normalised q and k; QK-norm's backward
                  // makes qkv's (and its bias gradient)
    vt_attention_bwd(be, m->s.dqkn, NULL, dact, a->qkn, a->attn, a->lse, B, N, H, D, drop);
    vt_qk_norm_bwd(be, dqkv, gw->qn_w, gw->qn_b, gw->kn_w, gw->kn_b, gw->qkv_b, m->s.dqkn, a->qkv,
                   w->qn_w, w->kn_w, a->qk_mean, a->qk_rstd, M, H, D);
  } else {
    vt_attention_bwd(be, dqkv, gw->qkv_b, dact, a->qkv, a->attn, a->lse, B, N, H, D, drop);
  }
  vt_linear_act_bwd(be, dx1, weights ? gw->qkv_w : NULL, dqkv, x1, w->qkv_w, M, C, 3 * H * D);
}

// The MLP branch's backward from fc2's output gradient dy (all M rows) to the gradient of its
// input rows x2, dx2 (M rows). The row-parallel Linear's input gradient (dact) is a bf16
// activation in bf16 precision, as autocast makes it; act_bwd also makes fc1's bias gradient.
// drop: the hidden units' dropout mask, or NULL.
static void mlp_bwd(const vt_model *m, const vt_block_tensors *w, vt_block_tensors *gw,
                    const vt_block_acts *a, const float *dy, const float *x2, float *dfc1,
                    float *dx2, int weights, int B, const vt_dropout_mask *drop) {
  const vt_backend *be = m->be;
  const int64_t C = m->cfg.width, F = vt_cfg_mlp_hidden(&m->cfg) / m->shard.tp_size;
  const int64_t M = (int64_t)B * vt_cfg_tokens(&m->cfg);
  vt_linear_bwd_act(be, m->s.dact, weights ? gw->fc2_w : NULL, gw->fc2_b, dy, a->gelu, w->fc2_w,
                    M, F, C);
  if (drop) vt_dropout(be, m->s.dact, m->s.dact, M, F, drop, 1);
  vt_act_bwd(be, dfc1, gw->fc1_b, a->fc1, m->s.dact, M, F, vt_model_gelu(m));
  vt_linear_act_bwd(be, dx2, weights ? gw->fc1_w : NULL, dfc1, x2, w->fc1_w, M, C, F);
}

// The parallel block's backward: one gradient dY of the branches' sum feeds both (kept once
// for a split backward, in dfc2), their input gradients are added (dln += dln2) and cross the
// TP group once.
static void parallel_bwd(const vt_model *m, const vt_block_tensors *w, vt_block_tensors *gw,
                         const vt_block_acts *a, const float *in, float *dres, int B,
                         const vt_drop_mask *drop, const vt_dropout_mask *dropout,
                         const vt_dropout_mask *attn_drop, vt_block_wgrad *wg) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const vt_model_scratch *s = &m->s;
  const int64_t C = c->width;
  const int64_t M = (int64_t)B * vt_cfg_tokens(c), Ml = vt_model_local_rows(m, B);
  const float *x1 = m->sp ? a->ln1_full : a->ln1;
  float *dfc1 = wg ? wg->dfc1 : s->dfc1, *dqkv = wg ? wg->dqkv : s->dqkv;
  const float *dy = branch_dy(m, dres, drop ? &drop[0] : NULL, NULL, w->ls2, gw->ls2, a->ls2,
                              wg ? wg->dfc2 : NULL, B);
  mlp_bwd(m, w, gw, a, dy, x1, dfc1, s->dln2, !wg, B,
          dropout ? &dropout[VT_DROPOUT_HIDDEN] : NULL);
  attention_bwd(m, w, gw, a, dy, x1, dqkv, s->dln, !wg, B, attn_drop);
  vt_add(be, s->dln, s->dln, s->dln2, M * C);  // dln's rows past M stay untouched (zero)
  const float *dx = f_bwd(m, s->dln_local, s->dln, Ml * C);
  vt_layernorm_bwd_add(be, dres, gw->norm1_w, gw->norm1_b, dx, in, w->norm1_w, a->ln1_mean,
                       a->ln1_rstd, Ml, C);
}

void vt_block_bwd(const vt_model *m, const vt_block_tensors *w, vt_block_tensors *gw,
                  const vt_block_acts *a, const float *in, float *dres, int B,
                  const vt_block_noise *noise, vt_block_wgrad *wg) {
  const vt_drop_mask *drop = noise->path;
  const vt_dropout_mask *dropout = noise->drop;
  if (m->cfg.parallel) {
    parallel_bwd(m, w, gw, a, in, dres, B, drop, dropout, noise->attn, wg);
    return;
  }
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const vt_model_scratch *s = &m->s;
  const int64_t C = c->width, Ml = vt_model_local_rows(m, B);
  const float *x1 = m->sp ? a->ln1_full : a->ln1, *x2 = m->sp ? a->ln2_full : a->ln2;
  // MLP branch; dres holds d(block output) and becomes d(mid), then d(in). Split: the
  // weight-matrix GEMMs wait for vt_block_bwd_weight, their output gradients in wg.
  float *dfc1 = wg ? wg->dfc1 : s->dfc1, *dqkv = wg ? wg->dqkv : s->dqkv;
  const float *dy = branch_dy(m, dres, drop ? &drop[1] : NULL,
                              dropout ? &dropout[VT_DROPOUT_MLP] : NULL, w->ls2, gw->ls2, a->ls2,
                              wg ? wg->dfc2 : NULL, B);
  mlp_bwd(m, w, gw, a, dy, x2, dfc1, s->dln, !wg, B,
          dropout ? &dropout[VT_DROPOUT_HIDDEN] : NULL);
  const float *dx = f_bwd(m, s->dln_local, s->dln, Ml * C);
  vt_layernorm_bwd_add(be, dres, gw->norm2_w, gw->norm2_b, dx, a->mid, w->norm2_w, a->ln2_mean,
                       a->ln2_rstd, Ml, C);  // dres += the MLP branch's input gradient
  // Attention branch. The attention output's gradient takes dact's place (fc2's input gradient
  // is used up); dln's rows past M stay untouched (zero).
  dy = branch_dy(m, dres, drop ? &drop[0] : NULL, dropout ? &dropout[VT_DROPOUT_ATTN] : NULL,
                 w->ls1, gw->ls1, a->ls1, wg ? wg->dproj : NULL, B);
  attention_bwd(m, w, gw, a, dy, x1, dqkv, s->dln, !wg, B, noise->attn);
  dx = f_bwd(m, s->dln_local, s->dln, Ml * C);
  vt_layernorm_bwd_add(be, dres, gw->norm1_w, gw->norm1_b, dx, in, w->norm1_w, a->ln1_mean,
                       a->ln1_rstd, Ml, C);
}

void vt_block_bwd_weight(const vt_model *m, vt_block_tensors *gw, const vt_block_acts *a,
                         const vt_block_wgrad *wg, int B) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t N = vt_cfg_tokens(c), C = c->width, HD = c->heads / tp * vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, M = (int64_t)B * N;
  const float *x1 = m->sp ? a->ln1_full : a->ln1;
  const float *x2 = c->parallel ? x1 : m->sp ? a->ln2_full : a->ln2;  // fc1's input
  vt_linear_bwd(be, NULL, gw->fc2_w, NULL, wg->dfc2, a->gelu, NULL, M, F, C);
  vt_linear_act_bwd(be, NULL, gw->fc1_w, wg->dfc1, x2, NULL, M, C, F);
  vt_linear_bwd(be, NULL, gw->proj_w, NULL, c->parallel ? wg->dfc2 : wg->dproj, a->attn, NULL, M,
                HD, C);
  vt_linear_act_bwd(be, NULL, gw->qkv_w, wg->dqkv, x1, NULL, M, C, 3 * HD);
}
