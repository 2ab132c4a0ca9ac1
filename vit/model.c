// model.c: ViT forward and backward through the op API (src/vt_ops.h).
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_ops.h"

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

static void carve_acts(vt_model *m, arena *ar) {
  const vt_vit_config *c = &m->cfg;
  const int64_t B = m->max_batch, N = vt_cfg_tokens(c), C = c->width, H = c->heads;
  const int64_t F = vt_cfg_mlp_hidden(c), K = c->num_classes, S = c->img_size;
  const int64_t P = c->patch_size, Np = N - 1, M = B * N;
  vt_model_acts *a = &m->a;
  a->img = take(ar, B * 3 * S * S);
  a->labels = (int32_t *)take(ar, B);
  a->patches = take(ar, B * Np * 3 * P * P);
  a->patch_out = take(ar, B * Np * C);
  for (int l = 0; l <= c->depth; l++) a->res[l] = take(ar, M * C);
  for (int l = 0; l < c->depth; l++) {
    vt_block_acts *b = &a->blocks[l];
    b->ln1 = take(ar, M * C), b->ln1_mean = take(ar, M), b->ln1_rstd = take(ar, M);
    b->qkv = take(ar, M * 3 * C);
    b->att = take(ar, B * H * N * N);
    b->attn = take(ar, M * C);
    b->mid = take(ar, M * C);
    b->ln2 = take(ar, M * C), b->ln2_mean = take(ar, M), b->ln2_rstd = take(ar, M);
    b->fc1 = take(ar, M * F);
    b->gelu = take(ar, M * F);
  }
  a->pooled = take(ar, B * C);
  a->lnf = take(ar, B * C), a->lnf_mean = take(ar, B), a->lnf_rstd = take(ar, B);
  a->logits = take(ar, B * K), a->probs = take(ar, B * K), a->losses = take(ar, B);
  a->dres = take(ar, M * C), a->dbranch = take(ar, M * C), a->dln = take(ar, M * C);
  a->dqkv = take(ar, M * 3 * C);
  a->dgelu = take(ar, M * F), a->dfc1 = take(ar, M * F);
  a->dpatch_out = take(ar, B * Np * C);
  a->dpooled = take(ar, B * C), a->dlnf = take(ar, B * C), a->dlogits = take(ar, B * K);
}

static float *find(const vt_model *m, float *flat, const char *fmt, int l, const char *suffix) {
  char name[64];
  snprintf(name, sizeof name, fmt, l);
  strncat(name, suffix, sizeof name - strlen(name) - 1);
  const vt_param *p = vt_params_find(&m->table, name);
  VT_CHECK(p != NULL, "parameter %s missing from the table", name);
  return flat + p->offset;
}

static void bind(vt_model *m, float *flat, vt_model_tensors *t) {
  t->cls = find(m, flat, "cls_token", 0, "");
  t->pos = find(m, flat, "pos_embed", 0, "");
  t->patch_w = find(m, flat, "patch_embed.proj", 0, ".weight");
  t->patch_b = find(m, flat, "patch_embed.proj", 0, ".bias");
  for (int l = 0; l < m->cfg.depth; l++) {
    vt_block_tensors *b = &t->blocks[l];
    b->norm1_w = find(m, flat, "blocks.%d.norm1", l, ".weight");
    b->norm1_b = find(m, flat, "blocks.%d.norm1", l, ".bias");
    b->qkv_w = find(m, flat, "blocks.%d.attn.qkv", l, ".weight");
    b->qkv_b = find(m, flat, "blocks.%d.attn.qkv", l, ".bias");
    b->proj_w = find(m, flat, "blocks.%d.attn.proj", l, ".weight");
    b->proj_b = find(m, flat, "blocks.%d.attn.proj", l, ".bias");
    b->norm2_w = find(m, flat, "blocks.%d.norm2", l, ".weight");
    b->norm2_b = find(m, flat, "blocks.%d.norm2", l, ".bias");
    b->fc1_w = find(m, flat, "blocks.%d.mlp.fc1", l, ".weight");
    b->fc1_b = find(m, flat, "blocks.%d.mlp.fc1", l, ".bias");
    b->fc2_w = find(m, flat, "blocks.%d.mlp.fc2", l, ".weight");
    b->fc2_b = find(m, flat, "blocks.%d.mlp.fc2", l, ".bias");
  }
  t->norm_w = find(m, flat, "norm", 0, ".weight");
  t->norm_b = find(m, flat, "norm", 0, ".bias");
  t->head_w = find(m, flat, "head", 0, ".weight");
  t->head_b = find(m, flat, "head", 0, ".bias");
}

static void *must_alloc(const vt_backend *be, size_t nbytes, const char *what) {
  void *p = be->alloc(nbytes);
  VT_CHECK(p != NULL, "out of %s memory: %zu MiB for %s; try a smaller --micro-batch-size or model",
           be->name, nbytes >> 20, what);
  return p;
}

void vt_model_init(vt_model *m, const vt_vit_config *cfg, int max_batch, const vt_backend *be,
                   uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  m->max_batch = max_batch;
  m->be = be;
  vt_params_build(&m->table, cfg);
  const size_t pbytes = (size_t)m->table.total * sizeof(float);
  m->params = must_alloc(be, pbytes, "parameters");
  m->grads = must_alloc(be, pbytes, "gradients");
  float *host = malloc(pbytes);
  VT_CHECK(host != NULL, "out of host memory for the initial parameters");
  vt_params_init(&m->table, host, seed);
  be->to_device(m->params, host, pbytes);
  free(host);

  m->p.blocks = calloc((size_t)cfg->depth, sizeof(vt_block_tensors));
  m->g.blocks = calloc((size_t)cfg->depth, sizeof(vt_block_tensors));
  m->a.blocks = calloc((size_t)cfg->depth, sizeof(vt_block_acts));
  m->a.res = calloc((size_t)cfg->depth + 1, sizeof(float *));
  m->host_losses = calloc((size_t)max_batch, sizeof(float));
  VT_CHECK(m->p.blocks && m->g.blocks && m->a.blocks && m->a.res && m->host_losses,
           "out of host memory for the model");
  bind(m, m->params, &m->p);
  bind(m, m->grads, &m->g);
  arena sizing = {NULL, 0};
  carve_acts(m, &sizing);
  m->act_nbytes = sizing.off;
  m->act_block = must_alloc(be, m->act_nbytes, "activations");
  arena ar = {m->act_block, 0};
  carve_acts(m, &ar);
}

void vt_model_free(vt_model *m) {
  if (m->be) {
    m->be->free(m->params);
    m->be->free(m->grads);
    m->be->free(m->act_block);
  }
  free(m->p.blocks);
  free(m->g.blocks);
  free(m->a.blocks);
  free(m->a.res);
  free(m->host_losses);
  vt_params_free(&m->table);
  memset(m, 0, sizeof *m);
}

double vt_model_forward(vt_model *m, int B, float smoothing) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  VT_CHECK(B > 0 && B <= m->max_batch, "micro-batch %d outside 1..%d", B, m->max_batch);
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads, D = vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c), K = c->num_classes, S = c->img_size;
  const int64_t P = c->patch_size, M = (int64_t)B * N;
  vt_model_acts *a = &m->a;

  vt_patchify_fwd(be, a->patches, a->img, B, S, P);
  vt_linear_fwd(be, a->patch_out, a->patches, m->p.patch_w, m->p.patch_b, B * (N - 1), 3 * P * P,
                C);
  vt_embed_fwd(be, a->res[0], a->patch_out, m->p.cls, m->p.pos, B, N, C);
  for (int l = 0; l < c->depth; l++) {
    const vt_block_tensors *w = &m->p.blocks[l];
    vt_block_acts *s = &a->blocks[l];
    vt_layernorm_fwd(be, s->ln1, s->ln1_mean, s->ln1_rstd, a->res[l], w->norm1_w, w->norm1_b, M,
                     C);
    vt_linear_fwd(be, s->qkv, s->ln1, w->qkv_w, w->qkv_b, M, C, 3 * C);
    vt_attention_fwd(be, s->attn, s->att, s->qkv, B, N, H, D);
    vt_linear_fwd(be, s->mid, s->attn, w->proj_w, w->proj_b, M, C, C);
    vt_add(be, s->mid, s->mid, a->res[l], M * C);
    vt_layernorm_fwd(be, s->ln2, s->ln2_mean, s->ln2_rstd, s->mid, w->norm2_w, w->norm2_b, M, C);
    vt_linear_fwd(be, s->fc1, s->ln2, w->fc1_w, w->fc1_b, M, C, F);
    vt_gelu_fwd(be, s->gelu, s->fc1, M * F);
    vt_linear_fwd(be, a->res[l + 1], s->gelu, w->fc2_w, w->fc2_b, M, F, C);
    vt_add(be, a->res[l + 1], a->res[l + 1], s->mid, M * C);
  }
  // timm normalises every token, then pools the class token; LayerNorm is per token, so
  // normalising only the pooled tokens gives the same logits and gradients for less work.
  vt_cls_pool_fwd(be, a->pooled, a->res[c->depth], B, N, C);
  vt_layernorm_fwd(be, a->lnf, a->lnf_mean, a->lnf_rstd, a->pooled, m->p.norm_w, m->p.norm_b, B,
                   C);
  vt_linear_fwd(be, a->logits, a->lnf, m->p.head_w, m->p.head_b, B, C, K);
  vt_cross_entropy_fwd(be, a->losses, a->probs, a->logits, a->labels, smoothing, B, K);
  be->to_host(m->host_losses, a->losses, (size_t)B * sizeof(float));
  double sum = 0.0;
  for (int b = 0; b < B; b++) sum += m->host_losses[b];
  return sum;
}

void vt_model_backward(vt_model *m, int B, float smoothing, float loss_scale) {
  const vt_backend *be = m->be;
  const vt_vit_config *c = &m->cfg;
  const int64_t N = vt_cfg_tokens(c), C = c->width, H = c->heads, D = vt_cfg_head_dim(c);
  const int64_t F = vt_cfg_mlp_hidden(c), K = c->num_classes, P = c->patch_size;
  const int64_t M = (int64_t)B * N;
  vt_model_acts *a = &m->a;
  vt_model_tensors *g = &m->g;

  vt_cross_entropy_bwd(be, a->dlogits, a->probs, a->labels, smoothing, loss_scale, B, K);
  vt_linear_bwd(be, a->dlnf, g->head_w, g->head_b, a->dlogits, a->lnf, m->p.head_w, B, C, K);
  vt_layernorm_bwd(be, a->dpooled, g->norm_w, g->norm_b, a->dlnf, a->pooled, m->p.norm_w,
                   a->lnf_mean, a->lnf_rstd, B, C);
  vt_cls_pool_bwd(be, a->dres, a->dpooled, B, N, C);
  for (int l = c->depth - 1; l >= 0; l--) {
    const vt_block_tensors *w = &m->p.blocks[l];
    vt_block_tensors *gw = &g->blocks[l];
    vt_block_acts *s = &a->blocks[l];
    // MLP branch; dres holds d(stream after the block).
    vt_linear_bwd(be, a->dgelu, gw->fc2_w, gw->fc2_b, a->dres, s->gelu, w->fc2_w, M, F, C);
    vt_gelu_bwd(be, a->dfc1, s->fc1, a->dgelu, M * F);
    vt_linear_bwd(be, a->dln, gw->fc1_w, gw->fc1_b, a->dfc1, s->ln2, w->fc1_w, M, C, F);
    vt_layernorm_bwd(be, a->dbranch, gw->norm2_w, gw->norm2_b, a->dln, s->mid, w->norm2_w,
                     s->ln2_mean, s->ln2_rstd, M, C);
    vt_add(be, a->dres, a->dres, a->dbranch, M * C);  // now d(stream after attention)
    // Attention branch.
    vt_linear_bwd(be, a->dln, gw->proj_w, gw->proj_b, a->dres, s->attn, w->proj_w, M, C, C);
    vt_attention_bwd(be, a->dqkv, a->dln, s->qkv, s->att, B, N, H, D);
    vt_linear_bwd(be, a->dln, gw->qkv_w, gw->qkv_b, a->dqkv, s->ln1, w->qkv_w, M, C, 3 * C);
    vt_layernorm_bwd(be, a->dbranch, gw->norm1_w, gw->norm1_b, a->dln, a->res[l], w->norm1_w,
                     s->ln1_mean, s->ln1_rstd, M, C);
    vt_add(be, a->dres, a->dres, a->dbranch, M * C);  // now d(stream entering the block)
  }
  vt_embed_bwd(be, a->dpatch_out, g->cls, g->pos, a->dres, B, N, C);
  vt_linear_bwd(be, NULL, g->patch_w, g->patch_b, a->dpatch_out, a->patches, m->p.patch_w,
                B * (N - 1), 3 * P * P, C);
}
