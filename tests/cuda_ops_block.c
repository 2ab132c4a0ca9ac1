// cuda_ops_block.c: test_cuda_ops's runners for the ops of a transformer block: the Linears,
// LayerNorm, the activation, attention and the MAP head's latent attention.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops_test.h"
#include "vt_rng.h"

// The forward Linears: linear_fwd; linear_act_fwd, whose out is a bf16 activation in bf16
// precision; linear_residual_fwd, out = res + linear, res random, so an op that ignores it (or
// adds it twice) fails.
enum { LIN_PLAIN, LIN_ACT, LIN_RESIDUAL };
static void linear_fwd_run(const vt_backend *be, int kind, float *out, const float *x,
                           const float *w, const float *b, const float *res, int64_t M, int64_t I,
                           int64_t O) {
  if (kind == LIN_ACT) vt_linear_act_fwd(be, out, x, w, b, M, I, O);
  else if (kind == LIN_RESIDUAL) vt_linear_residual_fwd(be, out, x, w, b, res, M, I, O);
  else vt_linear_fwd(be, out, x, w, b, M, I, O);
}
static void linear_fwd_case(tc *t, const int64_t *d, int kind) {
  const int64_t M = d[0], I = d[1], O = d[2], bias = d[3];
  float *x = act_in(t, hrand(t, M * I, -1, 1), M * I), *w = hrand(t, O * I, -1, 1);
  float *b = hrand(t, O, -1, 1), *ref = hnew(t, M * O), *g[2];
  float *res = kind == LIN_RESIDUAL ? hrand(t, M * O, -2, 2) : NULL;
  linear_fwd_run(t->cpu, kind, ref, x, w, bias ? b : NULL, res, M, I, O);
  float *dx = dnew(t, x, M * I), *dw = dnew(t, w, O * I), *db = dnew(t, b, O);
  float *dres = res ? dnew(t, res, M * O) : NULL;
  for (int r = 0; r < 2; r++) {
    g[r] = dpoison(t, M * O);
    linear_fwd_run(t->gpu, kind, g[r], dx, dw, bias ? db : NULL, dres, M, I, O);
  }
  if (kind == LIN_ACT) check_act(t, "out", g, ref, M * O);
  else check(t, "out", g, ref, M * O);
}
void t_linear_fwd(tc *t, const int64_t *d) { linear_fwd_case(t, d, LIN_PLAIN); }
void t_linear_act_fwd(tc *t, const int64_t *d) { linear_fwd_case(t, d, LIN_ACT); }
void t_linear_residual_fwd(tc *t, const int64_t *d) {
  linear_fwd_case(t, d, LIN_RESIDUAL);
}

// d[3] bits: 1 computes dinp, 2 dbias (both optional in linear_bwd), 4 leaves dweight out (the
// input-gradient half of a split backward). act: linear_bwd_act, whose dinp (always computed) is
// a bf16 activation in bf16 precision.
static void linear_bwd_case(tc *t, const int64_t *d, int act) {
  const int64_t M = d[0], I = d[1], O = d[2], want_dinp = act || (d[3] & 1);
  const int64_t want_dbias = d[3] & 2, want_dw = !(d[3] & 4);
  void (*op)(const vt_backend *, float *, float *, float *, const float *, const float *,
             const float *, int64_t, int64_t, int64_t) = act ? vt_linear_bwd_act : vt_linear_bwd;
  float *x = act_in(t, hrand(t, M * I, -1, 1), M * I), *w = hrand(t, O * I, -1, 1);
  float *dy = hrand(t, M * O, -1, 1), *dw0 = hrand(t, O * I, -1, 1), *db0 = hrand(t, O, -1, 1);
  float *rdx = hnew(t, M * I), *rdw = hcopy(t, dw0, O * I), *rdb = hcopy(t, db0, O);
  op(t->cpu, want_dinp ? rdx : NULL, want_dw ? rdw : NULL, want_dbias ? rdb : NULL, dy, x, w, M,
     I, O);
  float *gx = dnew(t, x, M * I), *gw = dnew(t, w, O * I), *gdy = dnew(t, dy, M * O);
  float *gdx[2], *gdw[2], *gdb[2];
  for (int r = 0; r < 2; r++) {
    gdx[r] = dpoison(t, M * I), gdw[r] = dnew(t, dw0, O * I), gdb[r] = dnew(t, db0, O);
    op(t->gpu, want_dinp ? gdx[r] : NULL, want_dw ? gdw[r] : NULL, want_dbias ? gdb[r] : NULL,
       gdy, gx, gw, M, I, O);
  }
  if (act) check_act(t, "dinp", gdx, rdx, M * I);
  else if (want_dinp) check(t, "dinp", gdx, rdx, M * I);
  check(t, "dweight", gdw, rdw, O * I);  // untouched without want_dw: dw0 on both sides
  check(t, "dbias", gdb, rdb, O);  // untouched without want_dbias: still db0 on both sides
}
void t_linear_bwd(tc *t, const int64_t *d) { linear_bwd_case(t, d, 0); }
void t_linear_bwd_act(tc *t, const int64_t *d) { linear_bwd_case(t, d, 1); }

// dout is a bf16 activation in bf16 (act_bwd's dinp), like x. d[3] bits: 1 dinp, 2 leaves
// dweight out.
void t_linear_act_bwd(tc *t, const int64_t *d) {
  const int64_t M = d[0], I = d[1], O = d[2], want_dinp = d[3] & 1, want_dw = !(d[3] & 2);
  float *x = act_in(t, hrand(t, M * I, -1, 1), M * I), *w = hrand(t, O * I, -1, 1);
  float *dy = act_in(t, hrand(t, M * O, -1, 1), M * O), *dw0 = hrand(t, O * I, -1, 1);
  float *rdx = hnew(t, M * I), *rdw = hcopy(t, dw0, O * I);
  vt_linear_act_bwd(t->cpu, want_dinp ? rdx : NULL, want_dw ? rdw : NULL, dy, x, w, M, I, O);
  float *gx = dnew(t, x, M * I), *gw = dnew(t, w, O * I), *gdy = dnew(t, dy, M * O);
  float *gdx[2], *gdw[2];
  for (int r = 0; r < 2; r++) {
    gdx[r] = dpoison(t, M * I), gdw[r] = dnew(t, dw0, O * I);
    vt_linear_act_bwd(t->gpu, want_dinp ? gdx[r] : NULL, want_dw ? gdw[r] : NULL, gdy, gx, gw, M,
                      I, O);
  }
  if (want_dinp) check(t, "dinp", gdx, rdx, M * I);
  check(t, "dweight", gdw, rdw, O * I);
}

// The inputs sit around 0.5 with spread 1.5, so the centring matters. d[2]: 1 eps 1e-5 (CLIP's
// nn.LayerNorm), + 2 an fp32 output (norm_pre's: act 0).
void t_layernorm_fwd(tc *t, const int64_t *d) {
  const int64_t M = d[0], C = d[1];
  const float eps = d[2] & 1 ? 1e-5f : LN_EPS;
  const int act = !(d[2] & 2);
  float *x = hrand(t, M * C, -1, 2), *w = hrand(t, C, 0.5f, 1.5f), *b = hrand(t, C, -1, 1);
  float *ro = hnew(t, M * C), *rm = hnew(t, M), *rr = hnew(t, M);
  vt_layernorm_fwd(t->cpu, ro, rm, rr, x, w, b, M, C, eps, act);
  float *gx = dnew(t, x, M * C), *gw = dnew(t, w, C), *gb = dnew(t, b, C);
  float *go[2], *gm[2], *gr[2];
  for (int r = 0; r < 2; r++) {
    go[r] = dpoison(t, M * C), gm[r] = dpoison(t, M), gr[r] = dpoison(t, M);
    vt_layernorm_fwd(t->gpu, go[r], gm[r], gr[r], gx, gw, gb, M, C, eps, act);
  }
  if (act) check_act(t, "out", go, ro, M * C);
  else check(t, "out", go, ro, M * C);
  check(t, "mean", gm, rm, M);
  check(t, "rstd", gr, rr, M);
}

// LayerNorm backward; with add, the fused form that adds into dinp (which then starts from
// random values) against the CPU's unfused vt_layernorm_bwd then vt_add.
static void layernorm_bwd_case(tc *t, const int64_t *d, int add) {
  const int64_t M = d[0], C = d[1];
  float *x = hrand(t, M * C, -1, 2), *w = hrand(t, C, 0.5f, 1.5f), *b = hrand(t, C, -1, 1);
  float *dy = hrand(t, M * C, -1, 1), *dw0 = hrand(t, C, -1, 1), *db0 = hrand(t, C, -1, 1);
  float *dx0 = hrand(t, M * C, -1, 1);
  float *out = hnew(t, M * C), *mean = hnew(t, M), *rstd = hnew(t, M);
  vt_layernorm_fwd(t->cpu, out, mean, rstd, x, w, b, M, C, LN_EPS, 1);  // the saved statistics
  float *rdx = hnew(t, M * C), *rdw = hcopy(t, dw0, C), *rdb = hcopy(t, db0, C);
  vt_layernorm_bwd(t->cpu, rdx, rdw, rdb, dy, x, w, mean, rstd, M, C);
  if (add) vt_add(t->cpu, rdx, dx0, rdx, M * C);
  float *gx = dnew(t, x, M * C), *gw = dnew(t, w, C), *gdy = dnew(t, dy, M * C);
  float *gm = dnew(t, mean, M), *gr = dnew(t, rstd, M), *gdx[2], *gdw[2], *gdb[2];
  for (int r = 0; r < 2; r++) {
    gdx[r] = add ? dnew(t, dx0, M * C) : dpoison(t, M * C);
    gdw[r] = dnew(t, dw0, C), gdb[r] = dnew(t, db0, C);
    if (add)
      vt_layernorm_bwd_add(t->gpu, gdx[r], gdw[r], gdb[r], gdy, gx, gw, gm, gr, M, C);
    else
      vt_layernorm_bwd(t->gpu, gdx[r], gdw[r], gdb[r], gdy, gx, gw, gm, gr, M, C);
  }
  check(t, "dinp", gdx, rdx, M * C);
  check(t, "dweight", gdw, rdw, C);
  check(t, "dbias", gdb, rdb, C);
}
void t_layernorm_bwd(tc *t, const int64_t *d) { layernorm_bwd_case(t, d, 0); }
void t_layernorm_bwd_add(tc *t, const int64_t *d) { layernorm_bwd_case(t, d, 1); }

// The fused residual add + LayerNorm in place (sum aliases a, as the block uses it) against
// the CPU's unfused vt_add then vt_layernorm_fwd.
void t_add_layernorm_fwd(tc *t, const int64_t *d) {
  const int64_t M = d[0], C = d[1];
  float *a = hrand(t, M * C, -1, 2), *b = hrand(t, M * C, -1, 1);
  float *w = hrand(t, C, 0.5f, 1.5f), *bias = hrand(t, C, -1, 1);
  float *rs = hnew(t, M * C), *ro = hnew(t, M * C), *rm = hnew(t, M), *rr = hnew(t, M);
  vt_add(t->cpu, rs, a, b, M * C);
  vt_layernorm_fwd(t->cpu, ro, rm, rr, rs, w, bias, M, C, LN_EPS, 1);
  float *gb = dnew(t, b, M * C), *gw = dnew(t, w, C), *gbias = dnew(t, bias, C);
  float *gs[2], *go[2], *gm[2], *gr[2];
  for (int r = 0; r < 2; r++) {
    gs[r] = dnew(t, a, M * C);
    go[r] = dpoison(t, M * C), gm[r] = dpoison(t, M), gr[r] = dpoison(t, M);
    vt_add_layernorm_fwd(t->gpu, gs[r], go[r], gm[r], gr[r], gs[r], gb, gw, gbias, M, C, LN_EPS);
  }
  check(t, "sum", gs, rs, M * C);
  check_act(t, "out", go, ro, M * C);
  check(t, "mean", gm, rm, M);
  check(t, "rstd", gr, rr, M);
}

// inp and out are bf16 activations in bf16 (vt_ops.h). d[last]: the vt_act kind (0 GELU, 1 its
// tanh form, 2 tanh, 3 quick GELU).
void t_act_fwd(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const vt_act form = (vt_act)d[1];
  float *x = act_in(t, hrand(t, n, -6, 6), n), *ref = hnew(t, n), *g[2];
  vt_act_fwd(t->cpu, ref, x, n, form);
  float *gx = dnew(t, x, n);
  for (int r = 0; r < 2; r++) g[r] = dpoison(t, n), vt_act_fwd(t->gpu, g[r], gx, n, form);
  check_act(t, "out", g, ref, n);
}

// inp, dout and dinp are bf16 activations in bf16 (vt_ops.h); dbias starts from random values
// (accumulated).
void t_act_bwd(tc *t, const int64_t *d) {
  const int64_t M = d[0], F = d[1], n = M * F, want_dbias = d[2];
  const vt_act form = (vt_act)d[3];
  float *x = act_in(t, hrand(t, n, -6, 6), n), *dy = act_in(t, hrand(t, n, -1, 1), n);
  float *ref = hnew(t, n), *g[2];
  float *db0 = hrand(t, F, -1, 1), *rdb = hcopy(t, db0, F), *gdb[2];
  vt_act_bwd(t->cpu, ref, want_dbias ? rdb : NULL, x, dy, M, F, form);
  float *gx = dnew(t, x, n), *gdy = dnew(t, dy, n);
  for (int r = 0; r < 2; r++) {
    g[r] = dpoison(t, n), gdb[r] = dnew(t, db0, F);
    vt_act_bwd(t->gpu, g[r], want_dbias ? gdb[r] : NULL, gx, gdy, M, F, form);
  }
  check_act(t, "dinp", g, ref, n);
  check(t, "dbias", gdb, rdb, F);  // untouched without want_dbias: still db0 on both sides
}

// Dropout of the probabilities for a row's flag (0: none): p 0.3, this call's H heads the upper
// half of 2H over TP, the micro-batch's first image at stream position 5, or with flag 2 at
// 3,000,000 (numbers past 2^32, a long run's).
static const vt_dropout_mask *att_drop(vt_dropout_mask *m, int64_t flag, int64_t N, int64_t H) {
  if (!flag) return NULL;
  const int64_t sample0 = flag == 2 ? 3000000 : 5;
  *m = (vt_dropout_mask){.seed = 21, .site = 9, .p = 0.3f, .scale = 1.0f / 0.7f,
                         .first = (sample0 * 2 * H + H) * N * N, .width = 2 * H};
  return m;
}

// Scores of q, k in [-2, 2] spread the softmax from flat to peaked.
void t_attention_fwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], H = d[2], D = d[3], C = H * D;
  vt_dropout_mask mask;
  const vt_dropout_mask *drop = att_drop(&mask, d[4], N, H);
  float *qkv = act_in(t, hrand(t, B * N * 3 * C, -2, 2), B * N * 3 * C), *ro = hnew(t, B * N * C);
  float *rl = hnew(t, B * H * N);
  vt_attention_fwd(t->cpu, ro, rl, qkv, B, N, H, D, drop);
  float *gq = dnew(t, qkv, B * N * 3 * C), *go[2], *gl[2];
  for (int r = 0; r < 2; r++) {
    go[r] = dpoison(t, B * N * C), gl[r] = dpoison(t, B * H * N);
    vt_attention_fwd(t->gpu, go[r], gl[r], gq, B, N, H, D, drop);
  }
  check_act(t, "out", go, ro, B * N * C);
  check(t, "lse", gl, rl, B * H * N);
}

// The backward reads the CPU's out and lse on both sides, so only this op is measured. dout and
// dqkv are bf16 activations in bf16; the qkv bias gradient (d[4] bit 1) starts from random
// values; d[4] / 2: att_drop's flag.
void t_attention_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], H = d[2], D = d[3], C = H * D, want_dbias = d[4] & 1;
  vt_dropout_mask mask;
  const vt_dropout_mask *drop = att_drop(&mask, d[4] / 2, N, H);
  float *qkv = act_in(t, hrand(t, B * N * 3 * C, -2, 2), B * N * 3 * C);
  float *dy = act_in(t, hrand(t, B * N * C, -1, 1), B * N * C), *db0 = hrand(t, 3 * C, -1, 1);
  float *out = hnew(t, B * N * C), *lse = hnew(t, B * H * N), *ref = hnew(t, B * N * 3 * C);
  float *rdb = hcopy(t, db0, 3 * C), *gdb[2];
  vt_attention_fwd(t->cpu, out, lse, qkv, B, N, H, D, drop);
  vt_attention_bwd(t->cpu, ref, want_dbias ? rdb : NULL, dy, qkv, out, lse, B, N, H, D, drop);
  float *gq = dnew(t, qkv, B * N * 3 * C), *gdy = dnew(t, dy, B * N * C);
  float *gout = dnew(t, out, B * N * C), *gl = dnew(t, lse, B * H * N), *g[2];
  for (int r = 0; r < 2; r++) {
    g[r] = dpoison(t, B * N * 3 * C), gdb[r] = dnew(t, db0, 3 * C);
    vt_attention_bwd(t->gpu, g[r], want_dbias ? gdb[r] : NULL, gdy, gq, gout, gl, B, N, H, D,
                     drop);
  }
  check_act(t, "dqkv", g, ref, B * N * 3 * C);
  check(t, "dbias", gdb, rdb, 3 * C);  // untouched without want_dbias: still db0 on both sides
}

// The latent query of MAP pooling: q (H*D) shared by the samples, kv (B, N, 2HD), both
// activations; scores in [-2, 2] as attention's.
void t_latent_attention_fwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], H = d[2], D = d[3], C = H * D, nkv = B * N * 2 * C;
  float *q = act_in(t, hrand(t, C, -1, 1), C), *kv = act_in(t, hrand(t, nkv, -2, 2), nkv);
  float *ro = hnew(t, B * C), *rl = hnew(t, B * H);
  vt_latent_attention_fwd(t->cpu, ro, rl, q, kv, B, N, H, D);
  float *gq = dnew(t, q, C), *gkv = dnew(t, kv, nkv), *go[2], *gl[2];
  for (int r = 0; r < 2; r++) {
    go[r] = dpoison(t, B * C), gl[r] = dpoison(t, B * H);
    vt_latent_attention_fwd(t->gpu, go[r], gl[r], gq, gkv, B, N, H, D);
  }
  check_act(t, "out", go, ro, B * C);
  check(t, "lse", gl, rl, B * H);
}

// The backward reads the CPU's out and lse on both sides; dq from poison (overwritten), the kv
// bias gradient (d[4] set) added to random values.
void t_latent_attention_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], H = d[2], D = d[3], C = H * D, nkv = B * N * 2 * C;
  const int64_t want_dbias = d[4];
  float *q = act_in(t, hrand(t, C, -1, 1), C), *kv = act_in(t, hrand(t, nkv, -2, 2), nkv);
  float *dy = act_in(t, hrand(t, B * C, -1, 1), B * C), *db0 = hrand(t, 2 * C, -1, 1);
  float *out = hnew(t, B * C), *lse = hnew(t, B * H), *rdq = hnew(t, C), *rdkv = hnew(t, nkv);
  float *rdb = hcopy(t, db0, 2 * C);
  vt_latent_attention_fwd(t->cpu, out, lse, q, kv, B, N, H, D);
  vt_latent_attention_bwd(t->cpu, rdq, rdkv, want_dbias ? rdb : NULL, dy, q, kv, out, lse, B, N,
                          H, D);
  float *gq = dnew(t, q, C), *gkv = dnew(t, kv, nkv), *gdy = dnew(t, dy, B * C);
  float *gout = dnew(t, out, B * C), *gl = dnew(t, lse, B * H), *gdq[2], *gdkv[2], *gdb[2];
  for (int r = 0; r < 2; r++) {
    gdq[r] = dpoison(t, C), gdkv[r] = dpoison(t, nkv), gdb[r] = dnew(t, db0, 2 * C);
    vt_latent_attention_bwd(t->gpu, gdq[r], gdkv[r], want_dbias ? gdb[r] : NULL, gdy, gq, gkv,
                            gout, gl, B, N, H, D);
  }
  check(t, "dq", gdq, rdq, C);
  check_act(t, "dkv", gdkv, rdkv, nkv);
  check(t, "dbias", gdb, rdb, 2 * C);  // untouched without want_dbias: still db0 on both sides
}
