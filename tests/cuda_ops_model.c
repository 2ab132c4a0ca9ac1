// cuda_ops_model.c: test_cuda_ops's runners for the other ops: element-wise ops, dropout and drop
// path, patches and embeddings, pooling, QK-norm, LayerScale, the losses and the optimizers.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops_test.h"
#include "vt_rng.h"

void t_to_act(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  float *x = hrand(t, n, -3, 3), *ref = hnew(t, n), *g[2];
  vt_to_act(t->cpu, ref, x, n);
  float *gx = dnew(t, x, n);
  for (int r = 0; r < 2; r++) g[r] = dpoison(t, n), vt_to_act(t->gpu, g[r], gx, n);
  check_act(t, "dst", g, ref, n);
}

// Run 0 writes a fresh buffer; run 1 writes in place over a copy of a (out aliases a).
void t_add(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  float *a = hrand(t, n, -1, 1), *b = hrand(t, n, -1, 1), *ref = hnew(t, n), *g[2];
  vt_add(t->cpu, ref, a, b, n);
  float *ga = dnew(t, a, n), *gb = dnew(t, b, n);
  g[0] = dpoison(t, n);
  vt_add(t->gpu, g[0], ga, gb, n);
  g[1] = dnew(t, a, n);
  vt_add(t->gpu, g[1], g[1], gb, n);
  check(t, "out", g, ref, n);
}

// Drop path on rows row0 .. row0 + rows - 1 of samples of N rows, every third sample dropped;
// with res the forward, without it the backward. Run 0 writes a fresh buffer; run 1 in place
// over a copy of x (out aliases x, as the block uses it).
void t_drop_path(tc *t, const int64_t *d) {
  const int64_t rows = d[0], cols = d[1], n = rows * cols;
  vt_drop_mask mask = {.scale = 1.0f / 0.8f, .row0 = d[2], .rows_per_sample = d[3]};
  for (int b = 0; b < VT_DROP_PATH_MAX_SAMPLES; b++)
    if (b % 3 != 1) mask.keep[b >> 5] |= 1u << (b & 31);
  float *x = hrand(t, n, -1, 1), *res = d[4] ? hrand(t, n, -1, 1) : NULL, *ref = hnew(t, n), *g[2];
  vt_drop_path(t->cpu, ref, x, res, rows, cols, &mask);
  float *gx = dnew(t, x, n), *gres = res ? dnew(t, res, n) : NULL;
  g[0] = dpoison(t, n);
  vt_drop_path(t->gpu, g[0], gx, gres, rows, cols, &mask);
  g[1] = dnew(t, x, n);
  vt_drop_path(t->gpu, g[1], g[1], gres, rows, cols, &mask);
  check(t, "out", g, ref, n);
}

// Dropout (p 0.3) of a part of a tensor whose element (0, 0) is number `first` of rows `width`
// long; act: x and out are bf16 activations in bf16 precision. Run 0 writes a fresh buffer, run
// 1 in place over a copy of x.
void t_dropout(tc *t, const int64_t *d) {
  const int64_t rows = d[0], cols = d[1], n = rows * cols;
  const int act = (int)d[4];
  const vt_dropout_mask mask = {
      .seed = 21, .site = 4, .p = 0.3f, .scale = 1.0f / 0.7f, .first = d[2], .width = d[3]};
  float *x = hrand(t, n, -1, 1), *ref = hnew(t, n), *g[2];
  if (act) x = act_in(t, x, n);
  vt_dropout(t->cpu, ref, x, rows, cols, &mask, act);
  g[0] = dpoison(t, n);
  float *gx = dnew(t, x, n);
  vt_dropout(t->gpu, g[0], gx, rows, cols, &mask, act);
  g[1] = dnew(t, x, n);
  vt_dropout(t->gpu, g[1], g[1], rows, cols, &mask, act);
  if (act) check_act(t, "out", g, ref, n);
  else check(t, "out", g, ref, n);
}

void t_patchify_fwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], S = d[1], P = d[2], np = B * (S / P) * (S / P) * 3 * P * P;
  float *img = hrand(t, B * 3 * S * S, -1, 1), *ref = hnew(t, np), *g[2];
  vt_patchify_fwd(t->cpu, ref, img, B, S, P);
  float *gi = dnew(t, img, B * 3 * S * S);
  for (int r = 0; r < 2; r++) g[r] = dpoison(t, np), vt_patchify_fwd(t->gpu, g[r], gi, B, S, P);
  check_act(t, "patches", g, ref, np);
}

void t_patchify_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], S = d[1], P = d[2], np = B * (S / P) * (S / P) * 3 * P * P;
  float *dp = hrand(t, np, -1, 1), *ref = hnew(t, B * 3 * S * S), *g[2];
  vt_patchify_bwd(t->cpu, ref, dp, B, S, P);
  float *gdp = dnew(t, dp, np);
  for (int r = 0; r < 2; r++)
    g[r] = dpoison(t, B * 3 * S * S), vt_patchify_bwd(t->gpu, g[r], gdp, B, S, P);
  check(t, "dimg", g, ref, B * 3 * S * S);
}

// T prefix tokens; d[4] bit 1: positions only on the patch tokens (pos0 = T, no_embed_class).
void t_embed_fwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], C = d[2], T = d[3], pos0 = d[4] & 2 ? T : 0;
  float *po = hrand(t, B * (N - T) * C, -1, 1), *pre = hrand(t, T * C, -1, 1);
  float *pos = hrand(t, (N - pos0) * C, -1, 1), *ref = hnew(t, B * N * C), *g[2];
  vt_embed_fwd(t->cpu, ref, po, pre, pos, B, N, T, pos0, C);
  float *gpo = dnew(t, po, B * (N - T) * C), *gc = dnew(t, pre, T * C);
  float *gp = dnew(t, pos, (N - pos0) * C);
  for (int r = 0; r < 2; r++)
    g[r] = dpoison(t, B * N * C), vt_embed_fwd(t->gpu, g[r], gpo, gc, gp, B, N, T, pos0, C);
  check(t, "x", g, ref, B * N * C);
}

// d[4] bit 0: dpatch_out asked for (the API allows NULL); bit 1 as above.
// d[4] bit 1: dpatch wanted; bit 2: positions on the patch tokens only; bit 4: no dpos (fixed
// positions).
void t_embed_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], C = d[2], T = d[3], want = d[4] & 1, fixed = d[4] & 4;
  const int64_t pos0 = d[4] & 2 ? T : 0, np = B * (N - T) * C, npos = (N - pos0) * C;
  float *dx = hrand(t, B * N * C, -1, 1), *dc0 = hrand(t, T * C, -1, 1);
  float *dp0 = hrand(t, npos, -1, 1);
  float *rpo = hnew(t, np), *rc = hcopy(t, dc0, T * C), *rp = hcopy(t, dp0, npos);
  vt_embed_bwd(t->cpu, want ? rpo : NULL, rc, fixed ? NULL : rp, dx, B, N, T, pos0, C);
  float *gdx = dnew(t, dx, B * N * C), *gpo[2], *gc[2], *gp[2];
  for (int r = 0; r < 2; r++) {
    gpo[r] = dpoison(t, np), gc[r] = dnew(t, dc0, T * C), gp[r] = dnew(t, dp0, npos);
    vt_embed_bwd(t->gpu, want ? gpo[r] : NULL, gc[r], fixed ? NULL : gp[r], gdx, B, N, T, pos0,
                 C);
  }
  if (want) check(t, "dpatch", gpo, rpo, np);
  check(t, "dprefix", gc, rc, T * C);
  if (!fixed) check(t, "dpos", gp, rp, npos);
}

// The poolings (class token, mean of the patch tokens after T prefix tokens): (B, N, C) ->
// (B, C) and back. The class token's ops take no T (d[3], 1 in their rows).
static void pool_op(const vt_backend *be, int avg, int bwd, float *out, const float *in,
                    const int64_t *d) {
  const int64_t B = d[0], N = d[1], C = d[2], T = d[3];
  if (avg) (bwd ? vt_mean_pool_bwd : vt_mean_pool_fwd)(be, out, in, B, N, T, C);
  else (bwd ? vt_cls_pool_bwd : vt_cls_pool_fwd)(be, out, in, B, N, C);
}

static void pool_case(tc *t, const int64_t *d, int avg, int bwd) {
  const int64_t B = d[0], N = d[1], C = d[2], nin = bwd ? B * C : B * N * C;
  const int64_t nout = bwd ? B * N * C : B * C;
  float *x = hrand(t, nin, -1, 1), *ref = hnew(t, nout), *g[2];
  pool_op(t->cpu, avg, bwd, ref, x, d);
  float *gx = dnew(t, x, nin);
  for (int r = 0; r < 2; r++) g[r] = dpoison(t, nout), pool_op(t->gpu, avg, bwd, g[r], gx, d);
  check(t, bwd ? "dx" : "out", g, ref, nout);
}

void t_cls_pool_fwd(tc *t, const int64_t *d) { pool_case(t, d, 0, 0); }
void t_cls_pool_bwd(tc *t, const int64_t *d) { pool_case(t, d, 0, 1); }
void t_mean_pool_fwd(tc *t, const int64_t *d) { pool_case(t, d, 1, 0); }
void t_mean_pool_bwd(tc *t, const int64_t *d) { pool_case(t, d, 1, 1); }

// LayerNorm of each patch token, then their mean (the gap head): out (an activation), pooled,
// the statistics; the backward (dx from poison, dweight and dbias added to random values) with
// the CPU's statistics, dx apart and in place (dx = x).
void t_norm_mean_pool_fwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], C = d[2], T = d[3], Np = N - T;
  float *x = hrand(t, B * N * C, -1, 2), *w = hrand(t, C, 0.5f, 1.5f), *b = hrand(t, C, -1, 1);
  float *ro = hnew(t, B * C), *rp = hnew(t, B * C), *rm = hnew(t, B * Np), *rr = hnew(t, B * Np);
  vt_norm_mean_pool_fwd(t->cpu, ro, rp, rm, rr, x, w, b, B, N, T, C, LN_EPS);
  float *gx = dnew(t, x, B * N * C), *gw = dnew(t, w, C), *gb = dnew(t, b, C);
  float *go[2], *gp[2], *gm[2], *gr[2];
  for (int r = 0; r < 2; r++) {
    go[r] = dpoison(t, B * C), gp[r] = dpoison(t, B * C);
    gm[r] = dpoison(t, B * Np), gr[r] = dpoison(t, B * Np);
    vt_norm_mean_pool_fwd(t->gpu, go[r], gp[r], gm[r], gr[r], gx, gw, gb, B, N, T, C, LN_EPS);
  }
  check_act(t, "out", go, ro, B * C);
  check(t, "pooled", gp, rp, B * C);
  check(t, "mean", gm, rm, B * Np);
  check(t, "rstd", gr, rr, B * Np);
}

void t_norm_mean_pool_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], N = d[1], C = d[2], T = d[3], Np = N - T;
  float *x = hrand(t, B * N * C, -1, 2), *w = hrand(t, C, 0.5f, 1.5f), *b = hrand(t, C, -1, 1);
  float *dy = hrand(t, B * C, -1, 1), *dw0 = hrand(t, C, -1, 1), *db0 = hrand(t, C, -1, 1);
  float *out = hnew(t, B * C), *p = hnew(t, B * C), *mean = hnew(t, B * Np);
  float *rstd = hnew(t, B * Np);
  vt_norm_mean_pool_fwd(t->cpu, out, p, mean, rstd, x, w, b, B, N, T, C, LN_EPS);  // saved
  float *rdx = hnew(t, B * N * C), *rdw = hcopy(t, dw0, C), *rdb = hcopy(t, db0, C);
  vt_norm_mean_pool_bwd(t->cpu, rdx, rdw, rdb, dy, x, p, w, mean, rstd, B, N, T, C);
  float *gx = dnew(t, x, B * N * C), *gw = dnew(t, w, C), *gdy = dnew(t, dy, B * C);
  float *gp = dnew(t, p, B * C), *gm = dnew(t, mean, B * Np), *gr = dnew(t, rstd, B * Np);
  float *gdx[2], *gdw[2], *gdb[2];
  for (int r = 0; r < 2; r++) {
    gdx[r] = r ? dnew(t, x, B * N * C) : dpoison(t, B * N * C);  // r 1: in place
    gdw[r] = dnew(t, dw0, C), gdb[r] = dnew(t, db0, C);
    vt_norm_mean_pool_bwd(t->gpu, gdx[r], gdw[r], gdb[r], gdy, r ? gdx[r] : gx, gp, gw, gm, gr,
                          B, N, T, C);
  }
  check(t, "dx", gdx, rdx, B * N * C);
  check(t, "dweight", gdw, rdw, C);
  check(t, "dbias", gdb, rdb, C);
}

// QK-norm on (M, 3HD); the backward adds onto random old parameter gradients, with and
// without qkv's bias gradient (d[3]).
void t_qk_norm_fwd(tc *t, const int64_t *d) {
  const int64_t M = d[0], H = d[1], D = d[2], n = M * 3 * H * D, ns = 2 * M * H;
  float *x = act_in(t, hrand(t, n, -1, 2), n), *w[4], *gw[4], *ref = hnew(t, n), *rm = hnew(t, ns);
  float *rr = hnew(t, ns), *g[2], *gm[2], *gr[2];
  for (int i = 0; i < 4; i++) w[i] = hrand(t, D, -1, 1);
  vt_qk_norm_fwd(t->cpu, ref, rm, rr, x, w[0], w[1], w[2], w[3], M, H, D, LN_EPS);
  float *gx = dnew(t, x, n);
  for (int i = 0; i < 4; i++) gw[i] = dnew(t, w[i], D);
  for (int r = 0; r < 2; r++) {
    g[r] = dpoison(t, n), gm[r] = dpoison(t, ns), gr[r] = dpoison(t, ns);
    vt_qk_norm_fwd(t->gpu, g[r], gm[r], gr[r], gx, gw[0], gw[1], gw[2], gw[3], M, H, D, LN_EPS);
  }
  check_act(t, "out", g, ref, n);
  check(t, "mean", gm, rm, ns);
  check(t, "rstd", gr, rr, ns);
}

void t_qk_norm_bwd(tc *t, const int64_t *d) {
  const int64_t M = d[0], H = d[1], D = d[2], W = 3 * H * D, n = M * W, ns = 2 * M * H;
  float *x = act_in(t, hrand(t, n, -1, 2), n), *dy = act_in(t, hrand(t, n, -1, 1), n);
  float *w[4], *g0[5], *rg[5];
  for (int i = 0; i < 4; i++) w[i] = hrand(t, D, -1, 1);
  for (int i = 0; i < 5; i++) g0[i] = hrand(t, i < 4 ? D : W, -1, 1);
  // the statistics the forward saves
  float *junk = hnew(t, n), *mean = hnew(t, ns), *rstd = hnew(t, ns), *rdx = hnew(t, n);
  vt_qk_norm_fwd(t->cpu, junk, mean, rstd, x, w[0], w[1], w[2], w[3], M, H, D, LN_EPS);
  for (int i = 0; i < 5; i++) rg[i] = hcopy(t, g0[i], i < 4 ? D : W);
  vt_qk_norm_bwd(t->cpu, rdx, rg[0], rg[1], rg[2], rg[3], d[3] ? rg[4] : NULL, dy, x, w[0],
                 w[2], mean, rstd, M, H, D);
  float *gx = dnew(t, x, n), *gdy = dnew(t, dy, n);
  float *gqw = dnew(t, w[0], D), *gkw = dnew(t, w[2], D), *gm = dnew(t, mean, ns);
  float *gr = dnew(t, rstd, ns), *gdx[2], *gg[5][2];
  for (int r = 0; r < 2; r++) {
    gdx[r] = dpoison(t, n);
    for (int i = 0; i < 5; i++) gg[i][r] = dnew(t, g0[i], i < 4 ? D : W);
    vt_qk_norm_bwd(t->gpu, gdx[r], gg[0][r], gg[1][r], gg[2][r], gg[3][r], d[3] ? gg[4][r] : NULL,
                   gdy, gx, gqw, gkw, gm, gr, M, H, D);
  }
  check_act(t, "dqkv", gdx, rdx, n);
  const char *names[5] = {"dqw", "dqb", "dkw", "dkb", "dbias"};
  for (int i = 0; i < (d[3] ? 5 : 4); i++) check(t, names[i], gg[i], rg[i], i < 4 ? D : W);
}

// LayerScale: run 0 writes fresh buffers; run 1 in place (out over x; dx over dout), as the block
// uses them. The backward adds dgamma onto random old values.
void t_layer_scale_fwd(tc *t, const int64_t *d) {
  const int64_t rows = d[0], cols = d[1], n = rows * cols;
  float *x = hrand(t, n, -1, 1), *gamma = hrand(t, cols, -1, 1), *ref = hnew(t, n), *g[2];
  vt_layer_scale_fwd(t->cpu, ref, x, gamma, rows, cols);
  float *gx = dnew(t, x, n), *gg = dnew(t, gamma, cols);
  g[0] = dpoison(t, n), vt_layer_scale_fwd(t->gpu, g[0], gx, gg, rows, cols);
  g[1] = dnew(t, x, n), vt_layer_scale_fwd(t->gpu, g[1], g[1], gg, rows, cols);
  check(t, "out", g, ref, n);
}

void t_layer_scale_bwd(tc *t, const int64_t *d) {
  const int64_t rows = d[0], cols = d[1], n = rows * cols;
  float *dy = hrand(t, n, -1, 1), *x = hrand(t, n, -1, 1), *gamma = hrand(t, cols, -1, 1);
  float *dg0 = hrand(t, cols, -1, 1), *rdx = hnew(t, n), *rdg = hcopy(t, dg0, cols);
  vt_layer_scale_bwd(t->cpu, rdx, rdg, dy, x, gamma, rows, cols);
  float *gx = dnew(t, x, n), *gg = dnew(t, gamma, cols), *gdy = dnew(t, dy, n), *gdx[2], *gdg[2];
  gdx[0] = dpoison(t, n), gdg[0] = dnew(t, dg0, cols);
  vt_layer_scale_bwd(t->gpu, gdx[0], gdg[0], gdy, gx, gg, rows, cols);
  gdx[1] = dnew(t, dy, n), gdg[1] = dnew(t, dg0, cols);
  vt_layer_scale_bwd(t->gpu, gdx[1], gdg[1], gdx[1], gx, gg, rows, cols);
  check(t, "dx", gdx, rdx, n);
  check(t, "dgamma", gdg, rdg, cols);
}

static int32_t *labels(tc *t, int64_t B, int64_t K) {
  int32_t *y = track_host(t, (size_t)B * sizeof(int32_t));
  const uint32_t s = t->stream++;
  for (int64_t b = 0; b < B; b++) y[b] = (int32_t)(vt_rng_u32(20240607, 8, s, (uint64_t)b) % K);
  return y;
}

// Mixup/CutMix targets (d[3] 1) for B samples of K classes: random partners and lam, on the host.
static vt_mix_target *mix_targets(tc *t, int64_t B, int64_t K) {
  vt_mix_target *m = track_host(t, (size_t)B * sizeof *m);
  const int32_t *partner = labels(t, B, K);
  const float *lam = hrand(t, B, 0, 1);
  for (int64_t b = 0; b < B; b++) m[b] = (vt_mix_target){partner[b], lam[b]};
  return m;
}

// The loss forward of one backend: binary cross-entropy (binary targets where thresh >= 0) or
// the softmax one.
static void loss_fwd(const vt_backend *be, int bce, float thresh, float *losses, float *probs,
                     const float *z, const int32_t *y, const vt_mix_target *mix, float s,
                     int64_t B, int64_t K) {
  if (bce) vt_bce_fwd(be, losses, probs, z, y, mix, s, thresh, B, K);
  else vt_cross_entropy_fwd(be, losses, probs, z, y, mix, s, B, K);
}

// d[2] is the label smoothing in thousandths, d[3] 1 for Mixup/CutMix targets, d[4] (bce only)
// the binary targets' threshold in thousandths, -1 for soft targets.
static void loss_fwd_case(tc *t, const int64_t *d, int bce) {
  const int64_t B = d[0], K = d[1];
  const float s = (float)d[2] / 1000.0f, thresh = bce ? (float)d[4] / 1000.0f : -1.0f;
  float *z = hrand(t, B * K, -8, 8), *rl = hnew(t, B), *rp = hnew(t, B * K);
  int32_t *y = labels(t, B, K);
  vt_mix_target *mix = d[3] ? mix_targets(t, B, K) : NULL;
  loss_fwd(t->cpu, bce, thresh, rl, rp, z, y, mix, s, B, K);
  float *gz = dnew(t, z, B * K), *gl[2], *gp[2];
  int32_t *gy = dnew_bytes(t, y, (size_t)B * sizeof(int32_t));
  vt_mix_target *gm = mix ? dnew_bytes(t, mix, (size_t)B * sizeof *mix) : NULL;
  for (int r = 0; r < 2; r++) {
    gl[r] = dpoison(t, B), gp[r] = dpoison(t, B * K);
    loss_fwd(t->gpu, bce, thresh, gl[r], gp[r], gz, gy, gm, s, B, K);
  }
  check(t, "losses", gl, rl, B);
  check(t, "probs", gp, rp, B * K);
}

void t_cross_entropy_fwd(tc *t, const int64_t *d) { loss_fwd_case(t, d, 0); }
// Binary cross-entropy: sigmoids saved, softplus summed in double (its backward is
// cross_entropy_bwd's).
void t_bce_fwd(tc *t, const int64_t *d) { loss_fwd_case(t, d, 1); }

// d[4]: the binary targets' threshold in thousandths, -1 for soft targets.
void t_cross_entropy_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], K = d[1];
  const float s = (float)d[2] / 1000.0f, scale = 1.0f / (float)(3 * B);
  const float thresh = (float)d[4] / 1000.0f;
  float *z = hrand(t, B * K, -8, 8), *loss = hnew(t, B), *p = hnew(t, B * K);
  int32_t *y = labels(t, B, K);
  vt_mix_target *mix = d[3] ? mix_targets(t, B, K) : NULL;
  vt_cross_entropy_fwd(t->cpu, loss, p, z, y, mix, s, B, K);
  float *ref = hnew(t, B * K), *g[2];
  vt_cross_entropy_bwd(t->cpu, ref, p, y, mix, s, thresh, scale, B, K);
  float *gp = dnew(t, p, B * K);
  int32_t *gy = dnew_bytes(t, y, (size_t)B * sizeof(int32_t));
  vt_mix_target *gm = mix ? dnew_bytes(t, mix, (size_t)B * sizeof *mix) : NULL;
  for (int r = 0; r < 2; r++)
    g[r] = dpoison(t, B * K),
    vt_cross_entropy_bwd(t->gpu, g[r], gp, gy, gm, s, thresh, scale, B, K);
  check(t, "dlogits", g, ref, B * K);
}

// d[1] the step t (bias corrections), d[2] the weight decay in thousandths, d[3] 1 for a
// weight-decay mask (runs of decaying and non-decaying elements, as a model's tensors), 0 none;
// d[4] the gradient scale (clipping's coefficient) in thousandths, 0 for 1.
void t_adamw(tc *t, const int64_t *d) {
  const int64_t n = d[0], step = d[1];
  const float wd = (float)d[2] / 1000.0f, lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const float gs = d[4] ? (float)d[4] / 1000.0f : 1.0f;
  float *p0 = hrand(t, n, -1, 1), *gr = hrand(t, n, -1, 1), *m0 = hrand(t, n, -0.1f, 0.1f);
  float *v0 = hrand(t, n, 0, 0.01f), *u = hrand(t, n / 97 + 1, 0, 1);
  uint8_t *mask = d[3] ? (uint8_t *)hnew(t, n / 4 + 1) : NULL;
  for (int64_t i = 0; mask && i < n; i++) mask[i] = u[i / 97] < 0.7f;
  float *rp = hcopy(t, p0, n), *rm = hcopy(t, m0, n), *rv = hcopy(t, v0, n);
  vt_adamw(t->cpu, rp, gr, rm, rv, mask, n, lr, b1, b2, eps, wd, step, gs);
  const uint8_t *gmask = mask ? dnew_bytes(t, mask, (size_t)n) : NULL;
  float *gg = dnew(t, gr, n), *gp[2], *gm[2], *gv[2];
  for (int r = 0; r < 2; r++) {
    gp[r] = dnew(t, p0, n), gm[r] = dnew(t, m0, n), gv[r] = dnew(t, v0, n);
    vt_adamw(t->gpu, gp[r], gg, gm[r], gv[r], gmask, n, lr, b1, b2, eps, wd, step, gs);
  }
  check(t, "param", gp, rp, n);
  check(t, "m", gm, rm, n);
  check(t, "v", gv, rv, n);
}

// d[1] the step t, d[2] the weight decay in thousandths, d[3] 1 for a weight-decay mask as
// t_adamw's, d[4] 1 to write the direction over the gradient (as the optimizer does).
void t_lamb_moments(tc *t, const int64_t *d) {
  const int64_t n = d[0], step = d[1];
  const float wd = (float)d[2] / 1000.0f, b1 = 0.9f, b2 = 0.999f, eps = 1e-6f;
  float *p = hrand(t, n, -1, 1), *gr = hrand(t, n, -1, 1), *m0 = hrand(t, n, -0.1f, 0.1f);
  float *v0 = hrand(t, n, 0, 0.01f), *u = hrand(t, n / 97 + 1, 0, 1);
  uint8_t *mask = d[3] ? (uint8_t *)hnew(t, n / 4 + 1) : NULL;
  for (int64_t i = 0; mask && i < n; i++) mask[i] = u[i / 97] < 0.7f;
  float *rm = hcopy(t, m0, n), *rv = hcopy(t, v0, n), *rg = hcopy(t, gr, n);
  float *ru = d[4] ? rg : hcopy(t, gr, n);
  vt_lamb_moments(t->cpu, ru, p, rg, rm, rv, mask, n, b1, b2, eps, wd, step);
  const uint8_t *gmask = mask ? dnew_bytes(t, mask, (size_t)n) : NULL;
  float *gp = dnew(t, p, n), *gu[2], *gm[2], *gv[2];
  for (int r = 0; r < 2; r++) {
    float *gg = dnew(t, gr, n);
    gu[r] = d[4] ? gg : dpoison(t, n), gm[r] = dnew(t, m0, n), gv[r] = dnew(t, v0, n);
    vt_lamb_moments(t->gpu, gu[r], gp, gg, gm[r], gv[r], gmask, n, b1, b2, eps, wd, step);
  }
  check(t, "update", gu, ru, n);
  check(t, "m", gm, rm, n);
  check(t, "v", gv, rv, n);
}

// d[1]: the trust ratio in thousandths.
void t_lamb_apply(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const float lr = 3e-3f, trust = (float)d[1] / 1000.0f;
  float *p = hrand(t, n, -1, 1), *u = hrand(t, n, -2, 2), *ref = hcopy(t, p, n), *g[2];
  vt_lamb_apply(t->cpu, ref, u, n, lr, trust);
  float *gu = dnew(t, u, n);
  for (int r = 0; r < 2; r++) g[r] = dnew(t, p, n), vt_lamb_apply(t->gpu, g[r], gu, n, lr, trust);
  check(t, "param", g, ref, n);
}

// d[1] the momentum in thousandths, d[2] the weight decay in thousandths, d[3] 1 for a
// weight-decay mask as t_adamw's, d[4] 1 for Nesterov's momentum.
void t_sgd(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const float lr = 3e-2f, mom = (float)d[1] / 1000.0f, wd = (float)d[2] / 1000.0f;
  float *p0 = hrand(t, n, -1, 1), *gr = hrand(t, n, -1, 1), *b0 = hrand(t, n, -0.1f, 0.1f);
  float *u = hrand(t, n / 97 + 1, 0, 1);
  uint8_t *mask = d[3] ? (uint8_t *)hnew(t, n / 4 + 1) : NULL;
  for (int64_t i = 0; mask && i < n; i++) mask[i] = u[i / 97] < 0.7f;
  float *rp = hcopy(t, p0, n), *rb = hcopy(t, b0, n);
  vt_sgd(t->cpu, rp, gr, rb, mask, n, lr, mom, wd, (int)d[4]);
  const uint8_t *gmask = mask ? dnew_bytes(t, mask, (size_t)n) : NULL;
  float *gg = dnew(t, gr, n), *gp[2], *gb[2];
  for (int r = 0; r < 2; r++) {
    gp[r] = dnew(t, p0, n), gb[r] = dnew(t, b0, n);
    vt_sgd(t->gpu, gp[r], gg, gb[r], gmask, n, lr, mom, wd, (int)d[4]);
  }
  check(t, "param", gp, rp, n);
  check(t, "buf", gb, rb, n);
}

// A double result: relative error of the value, and the two runs' bits.
void t_sumsq(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  float *x = hrand(t, n, -3, 3);
  double ref, a, b;
  vt_sumsq(t->cpu, &ref, x, n);
  float *gx = dnew(t, x, n);
  double *gs = dnew_bytes(t, NULL, 2 * sizeof(double));
  vt_sumsq(t->gpu, gs, gx, n);
  vt_sumsq(t->gpu, gs + 1, gx, n);
  t->gpu->to_host(&a, gs, sizeof a);
  t->gpu->to_host(&b, gs + 1, sizeof b);
  report(t, "sum", fabs(a - ref) / ref, t->tol, memcmp(&a, &b, sizeof a) == 0, &a, sizeof a);
}

// d[1]: 1 - decay in millionths.
void t_ema(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const float decay = 1.0f - (float)d[1] * 1e-6f;
  float *e = hrand(t, n, -1, 1), *p = hrand(t, n, -1, 1), *ref = hcopy(t, e, n), *g[2];
  vt_ema(t->cpu, ref, p, decay, n);
  float *gp = dnew(t, p, n);
  for (int r = 0; r < 2; r++) g[r] = dnew(t, e, n), vt_ema(t->gpu, g[r], gp, decay, n);
  check(t, "ema", g, ref, n);
}

void t_scale(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const float alpha = 0.37f;
  float *x = hrand(t, n, -1, 1), *ref = hcopy(t, x, n), *g[2];
  vt_scale(t->cpu, ref, alpha, n);
  for (int r = 0; r < 2; r++) g[r] = dnew(t, x, n), vt_scale(t->gpu, g[r], alpha, n);
  check(t, "x", g, ref, n);
}
