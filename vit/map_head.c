// map_head.c: the MAP head (timm's global_pool='map', AttentionPoolLatent as attn_pool;
// big_vision's MAPHead), between the last block and the head's Linear on the last stage:
//   xn = norm(x) over every token; q = attn_pool.q(latent); k, v = attn_pool.kv(xn);
//   y = attn_pool.proj(softmax(q k^T / sqrt(D)) v)  (one query per head and sample);
//   out = y + mlp(attn_pool.norm(y)),
// the head then reads out. Every TP rank normalises all tokens (under sequence parallelism the
// model gathers them first) and pools them by its heads, as a block's attention: q and kv are
// column-parallel, proj row-parallel (its partial outputs summed over TP, its bias added by TP
// rank 0); y and the MLP behind are whole on every TP rank. Backward, kv's input gradient and so
// x's are each rank's heads' part (the model sums them over TP), as are the latent's and
// `norm`'s gradients (partial in the parameter table). The heads are the model's, D its head
// dim.
#include "model.h"
#include "tp.h"
#include "vt_ops.h"

void vt_map_head_fwd(const vt_model *m, vt_model_slot *sl, const float *x, int B) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const vt_map_tensors *w = &m->p.map;
  vt_map_acts *a = &sl->map;
  const int64_t N = vt_cfg_tokens(c), C = c->width, F = vt_cfg_mlp_hidden(c), D = C / c->heads;
  const int64_t H = c->heads / m->shard.tp_size, Cl = H * D;  // this rank's heads
  vt_layernorm_fwd(be, sl->lnf, sl->lnf_mean, sl->lnf_rstd, x, m->p.norm_w, m->p.norm_b, B * N,
                   C, vt_cfg_norm_eps(c), 1);
  vt_to_act(be, a->latent, w->latent, C);
  vt_linear_act_fwd(be, a->q, a->latent, w->q_w, w->q_b, 1, C, Cl);
  vt_linear_act_fwd(be, a->kv, sl->lnf, w->kv_w, w->kv_b, B * N, C, 2 * Cl);
  vt_latent_attention_fwd(be, a->attn, a->lse, a->q, a->kv, B, N, H, D);
  vt_linear_fwd(be, a->y, a->attn, w->proj_w, m->shard.tp_rank == 0 ? w->proj_b : NULL, B, Cl,
                C);
  vt_tp_g_fwd(m->tp, a->y, B * C);
  vt_layernorm_fwd(be, a->ln, a->ln_mean, a->ln_rstd, a->y, w->norm_w, w->norm_b, B, C,
                   vt_cfg_norm_eps(c), 1);
  vt_linear_act_fwd(be, a->fc1, a->ln, w->fc1_w, w->fc1_b, B, C, F);
  vt_act_fwd(be, a->gelu, a->fc1, B * F, vt_model_gelu(m));
  vt_linear_residual_fwd(be, m->s.map_z, a->gelu, w->fc2_w, w->fc2_b, a->y, B, F, C);
  vt_to_act(be, a->out, m->s.map_z, B * C);
}

void vt_map_head_bwd(vt_model *m, const vt_model_slot *sl, float *dx, const float *x, int B) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const vt_map_tensors *w = &m->p.map;
  vt_map_tensors *g = &m->g.map;
  const vt_map_acts *a = &sl->map;
  const vt_model_scratch *s = &m->s;
  const int64_t N = vt_cfg_tokens(c), C = c->width, F = vt_cfg_mlp_hidden(c), D = C / c->heads;
  const int64_t H = c->heads / m->shard.tp_size, Cl = H * D;  // this rank's heads
  // The MLP branch; its LayerNorm's input gradient adds onto the residual's, dy.
  vt_linear_bwd_act(be, s->map_dgelu, g->fc2_w, g->fc2_b, s->map_dy, a->gelu, w->fc2_w, B, F, C);
  vt_act_bwd(be, s->map_dfc1, g->fc1_b, a->fc1, s->map_dgelu, B, F, vt_model_gelu(m));
  vt_linear_act_bwd(be, s->map_dln, g->fc1_w, s->map_dfc1, a->ln, w->fc1_w, B, C, F);
  vt_layernorm_bwd_add(be, s->map_dy, g->norm_w, g->norm_b, s->map_dln, a->y, w->norm_w,
                       a->ln_mean, a->ln_rstd, B, C);
  // The pooling: proj, the attention (dq summed over the samples, kv's bias gradient fused),
  // the latent's q Linear and the kv Linear.
  vt_linear_bwd_act(be, s->map_dattn, g->proj_w, g->proj_b, s->map_dy, a->attn, w->proj_w, B,
                    Cl, C);
  vt_latent_attention_bwd(be, s->map_dq, s->map_dkv, g->kv_b, s->map_dattn, a->q, a->kv, a->attn,
                          a->lse, B, N, H, D);
  vt_linear_bwd(be, s->map_dlatent, g->q_w, g->q_b, s->map_dq, a->latent, w->q_w, 1, C, Cl);
  vt_add(be, g->latent, g->latent, s->map_dlatent, C);
  vt_linear_act_bwd(be, s->dlnf, g->kv_w, s->map_dkv, sl->lnf, w->kv_w, B * N, C, 2 * Cl);
  vt_layernorm_bwd(be, dx, m->g.norm_w, m->g.norm_b, s->dlnf, x, m->p.norm_w, sl->lnf_mean,
                   sl->lnf_rstd, B * N, C);
}
