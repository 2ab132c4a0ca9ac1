// block.c: one transformer block, forward and backward, tensor-parallel in Megatron's way:
// qkv and fc1 are column-parallel (this rank's heads / hidden units), proj and fc2 row-parallel,
// so each branch needs one TP all-reduce forward (mapping g) and one backward (mapping f).
// The row-parallel biases are added by TP rank 0 only, before the all-reduce, so they count once.
#include "model.h"
#include "tp.h"
#include "vt_ops.h"

void vt_block_fwd(const vt_model *m, const vt_block_tensors *w, vt_block_acts *a,
                  const float *in, float *out, int B) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int tp = m->shard.tp_size;
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads / tp, D = vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, M = (int64_t)B * N;
  const int bias_here = m->shard.tp_rank == 0;
  // Attention branch: in (M, C) -> mid (M, C)
  vt_layernorm_fwd(be, a->ln1, a->ln1_mean, a->ln1_rstd, in, w->norm1_w, w->norm1_b, M, C);
  vt_linear_fwd(be, a->qkv, a->ln1, w->qkv_w, w->qkv_b, M, C, 3 * H * D);
  vt_attention_fwd(be, a->attn, a->att, a->qkv, B, N, H, D);
  vt_linear_fwd(be, a->mid, a->attn, w->proj_w, bias_here ? w->proj_b : NULL, M, H * D, C);
  vt_tp_g_fwd(m->tp, a->mid, M * C);
  vt_add(be, a->mid, a->mid, in, M * C);
  // MLP branch: mid -> out
  vt_layernorm_fwd(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, w->norm2_w, w->norm2_b, M, C);
  vt_linear_fwd(be, a->fc1, a->ln2, w->fc1_w, w->fc1_b, M, C, F);
  vt_gelu_fwd(be, a->gelu, a->fc1, M * F);
  vt_linear_fwd(be, out, a->gelu, w->fc2_w, bias_here ? w->fc2_b : NULL, M, F, C);
  vt_tp_g_fwd(m->tp, out, M * C);
  vt_add(be, out, out, a->mid, M * C);
}

void vt_block_bwd(const vt_model *m, const vt_block_tensors *w, vt_block_tensors *gw,
                  const vt_block_acts *a, const float *in, float *dres, int B) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const vt_model_scratch *s = &m->s;
  const int tp = m->shard.tp_size;
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads / tp, D = vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c) / tp, M = (int64_t)B * N;
  // MLP branch; dres holds d(block output) and becomes d(mid), then d(in).
  vt_linear_bwd(be, s->dgelu, gw->fc2_w, gw->fc2_b, dres, a->gelu, w->fc2_w, M, F, C);
  vt_gelu_bwd(be, s->dfc1, a->fc1, s->dgelu, M * F);
  vt_linear_bwd(be, s->dln, gw->fc1_w, gw->fc1_b, s->dfc1, a->ln2, w->fc1_w, M, C, F);
  vt_tp_f_bwd(m->tp, s->dln, M * C);
  vt_layernorm_bwd(be, s->dbranch, gw->norm2_w, gw->norm2_b, s->dln, a->mid, w->norm2_w,
                   a->ln2_mean, a->ln2_rstd, M, C);
  vt_add(be, dres, dres, s->dbranch, M * C);
  // Attention branch.
  vt_linear_bwd(be, s->dln, gw->proj_w, gw->proj_b, dres, a->attn, w->proj_w, M, H * D, C);
  vt_attention_bwd(be, s->dqkv, s->dln, a->qkv, a->att, B, N, H, D);
  vt_linear_bwd(be, s->dln, gw->qkv_w, gw->qkv_b, s->dqkv, a->ln1, w->qkv_w, M, C, 3 * H * D);
  vt_tp_f_bwd(m->tp, s->dln, M * C);
  vt_layernorm_bwd(be, s->dbranch, gw->norm1_w, gw->norm1_b, s->dln, in, w->norm1_w,
                   a->ln1_mean, a->ln1_rstd, M, C);
  vt_add(be, dres, dres, s->dbranch, M * C);
}
