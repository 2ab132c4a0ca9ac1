// test_grad.c: every backward op of the CPU backend against central finite differences, at odd
// sizes (C = 3 and 77, token counts that are no multiple of any block size). Loss of an op is
// L = sum(out * R) with a fixed random R, accumulated in double; each input element is nudged
// by +-EPS. A negative control proves the checker catches a 5% error in one element.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_ops.h"
#include "vt_rng.h"

#define EPS 1e-2f
#define RTOL 1e-2
#define ATOL 2e-3

static const vt_backend *be;
static int failures = 0;

static float *randn(int64_t n, uint32_t stream, float scale) {
  float *x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = scale * vt_rng_normal(42, stream, 0, (uint64_t)i);
  return x;
}

// The op under test: fills out from the current inputs.
typedef void (*fwd_fn)(void *ctx, float *out);

static double loss(fwd_fn f, void *ctx, float *out, const float *r, int64_t n) {
  f(ctx, out);
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)out[i] * r[i];
  return s;
}

// Compares the analytic gradient of x with finite differences; returns the worst error ratio
// (error / allowed), > 1 means failure.
static double check(const char *what, fwd_fn f, void *ctx, float *out, const float *r,
                    int64_t nout, float *x, int64_t nx, const float *grad) {
  double worst = 0.0;
  int64_t worst_i = 0;
  for (int64_t i = 0; i < nx; i++) {
    float keep = x[i];
    x[i] = keep + EPS;
    double lp = loss(f, ctx, out, r, nout);
    x[i] = keep - EPS;
    double lm = loss(f, ctx, out, r, nout);
    x[i] = keep;
    double fd = (lp - lm) / (2.0 * EPS), a = grad[i];
    double ratio = fabs(a - fd) / (ATOL + RTOL * fmax(fabs(a), fabs(fd)));
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  printf("  %-34s n=%-6lld worst err/tol %.3f at %lld\n", what, (long long)nx, worst,
         (long long)worst_i);
  return worst;
}

static void expect_pass(const char *what, double ratio) {
  if (ratio > 1.0) {
    printf("FAIL: %s: the analytic gradient disagrees with finite differences\n", what);
    failures++;
  }
}

// ---- linear ----
typedef struct { float *inp, *w, *b; int64_t M, I, O; } lin_ctx;
static void lin_fwd(void *c, float *out) {
  lin_ctx *k = c;
  vt_linear_fwd(be, out, k->inp, k->w, k->b, k->M, k->I, k->O);
}
static void test_linear(int64_t M, int64_t I, int64_t O) {
  lin_ctx k = {randn(M * I, 1, 1), randn(O * I, 2, 0.5f), randn(O, 3, 1), M, I, O};
  float *out = calloc((size_t)(M * O), 4), *r = randn(M * O, 4, 1);
  float *dinp = calloc((size_t)(M * I), 4), *dw = calloc((size_t)(O * I), 4);
  float *db = calloc((size_t)O, 4);
  vt_linear_bwd(be, dinp, dw, db, r, k.inp, k.w, M, I, O);
  char name[64];
  snprintf(name, sizeof name, "linear %lldx%lld->%lld dinp", (long long)M, (long long)I, (long long)O);
  expect_pass(name, check(name, lin_fwd, &k, out, r, M * O, k.inp, M * I, dinp));
  expect_pass("linear dweight", check("linear dweight", lin_fwd, &k, out, r, M * O, k.w, O * I, dw));
  expect_pass("linear dbias", check("linear dbias", lin_fwd, &k, out, r, M * O, k.b, O, db));
  // Negative control: a 5% error in one element of dweight must be caught.
  dw[O * I / 2] = dw[O * I / 2] * 1.05f + 0.05f;
  double bad = check("linear dweight (corrupted, must fail)", lin_fwd, &k, out, r, M * O, k.w,
                     O * I, dw);
  if (bad <= 1.0) {
    printf("FAIL: the checker did not notice a corrupted gradient\n");
    failures++;
  }
  free(k.inp), free(k.w), free(k.b), free(out), free(r), free(dinp), free(dw), free(db);
}

// ---- layernorm ----
typedef struct { float *inp, *w, *b, *mean, *rstd; int64_t M, C; } ln_ctx;
static void ln_fwd(void *c, float *out) {
  ln_ctx *k = c;
  vt_layernorm_fwd(be, out, k->mean, k->rstd, k->inp, k->w, k->b, k->M, k->C, 1e-5f, 0);
}
static void test_layernorm(int64_t M, int64_t C) {
  ln_ctx k = {randn(M * C, 5, 1), randn(C, 6, 1), randn(C, 7, 1), calloc((size_t)M, 4),
              calloc((size_t)M, 4), M, C};
  for (int64_t i = 0; i < M * C; i++) k.inp[i] += 0.3f * (float)(i % 5);  // nonzero means
  float *out = calloc((size_t)(M * C), 4), *r = randn(M * C, 8, 1);
  float *dinp = calloc((size_t)(M * C), 4), *dw = calloc((size_t)C, 4), *db = calloc((size_t)C, 4);
  ln_fwd(&k, out);
  vt_layernorm_bwd(be, dinp, dw, db, r, k.inp, k.w, k.mean, k.rstd, M, C);
  char name[64];
  snprintf(name, sizeof name, "layernorm %lldx%lld dinp", (long long)M, (long long)C);
  expect_pass(name, check(name, ln_fwd, &k, out, r, M * C, k.inp, M * C, dinp));
  expect_pass("layernorm dweight", check("layernorm dweight", ln_fwd, &k, out, r, M * C, k.w, C, dw));
  expect_pass("layernorm dbias", check("layernorm dbias", ln_fwd, &k, out, r, M * C, k.b, C, db));
  free(k.inp), free(k.w), free(k.b), free(k.mean), free(k.rstd), free(out), free(r);
  free(dinp), free(dw), free(db);
}

// ---- activations ----
typedef struct { float *inp; int64_t n; vt_act kind; } act_ctx;
static void act_fwd(void *c, float *out) {
  act_ctx *k = c;
  vt_act_fwd(be, out, k->inp, k->n, k->kind);
}
static void test_act(int64_t n, vt_act kind) {
  act_ctx k = {randn(n, 9, 2), n, kind};
  float *out = calloc((size_t)n, 4), *r = randn(n, 10, 1), *dinp = calloc((size_t)n, 4);
  vt_act_bwd(be, dinp, NULL, k.inp, r, 1, n, kind);
  const char *what = kind == VT_ACT_GELU_TANH    ? "gelu (tanh form) dinp"
                     : kind == VT_ACT_TANH       ? "tanh dinp"
                     : kind == VT_ACT_QUICK_GELU ? "quick gelu dinp" : "gelu dinp";
  expect_pass(what, check(what, act_fwd, &k, out, r, n, k.inp, n, dinp));
  free(k.inp), free(out), free(r), free(dinp);
}

// act_bwd's fused bias gradient: out = gelu(inp + bias) with bias (F) broadcast over M rows,
// the fc1 bias whose gradient the MLP's GELU backward accumulates.
typedef struct { float *inp, *bias, *sum; int64_t M, F; } gelu_bias_ctx;
static void gelu_bias_fwd(void *c, float *out) {
  gelu_bias_ctx *k = c;
  for (int64_t i = 0; i < k->M * k->F; i++) k->sum[i] = k->inp[i] + k->bias[i % k->F];
  vt_act_fwd(be, out, k->sum, k->M * k->F, VT_ACT_GELU);
}
static void test_gelu_bias(int64_t M, int64_t F) {
  const int64_t n = M * F;
  gelu_bias_ctx k = {randn(n, 16, 2), randn(F, 17, 1), calloc((size_t)n, 4), M, F};
  float *out = calloc((size_t)n, 4), *r = randn(n, 18, 1), *dinp = calloc((size_t)n, 4);
  float *dbias = calloc((size_t)F, 4);
  gelu_bias_fwd(&k, out);
  vt_act_bwd(be, dinp, dbias, k.sum, r, M, F, VT_ACT_GELU);
  expect_pass("gelu dbias", check("gelu dbias (fused)", gelu_bias_fwd, &k, out, r, n, k.bias, F,
                                  dbias));
  free(k.inp), free(k.bias), free(k.sum), free(out), free(r), free(dinp), free(dbias);
}

// ---- add ----
typedef struct { float *a, *b; int64_t n; } add_ctx;
static void add_fwd(void *c, float *out) {
  add_ctx *k = c;
  vt_add(be, out, k->a, k->b, k->n);
}
static void test_add(int64_t n) {
  // The backward of out = a + b hands dout to both inputs unchanged.
  add_ctx k = {randn(n, 11, 1), randn(n, 12, 1), n};
  float *out = calloc((size_t)n, 4), *r = randn(n, 13, 1);
  expect_pass("add da", check("add da (= dout)", add_fwd, &k, out, r, n, k.a, n, r));
  expect_pass("add db", check("add db (= dout)", add_fwd, &k, out, r, n, k.b, n, r));
  free(k.a), free(k.b), free(out), free(r);
}

// ---- drop path ----
typedef struct { float *x, *res; int64_t rows, cols; vt_drop_mask mask; } drop_ctx;
static void drop_fwd(void *c, float *out) {
  drop_ctx *k = c;
  vt_drop_path(be, out, k->x, k->res, k->rows, k->cols, &k->mask);
}
static void test_drop_path(int64_t rows, int64_t cols, int64_t row0, int64_t N) {
  // out = res + x * scale for the kept samples' rows; the backward is the same op on dout
  // without res (dx), and dout itself for res. Samples 0, 2, 3 of the rows' 5 are kept.
  drop_ctx k = {randn(rows * cols, 14, 1), randn(rows * cols, 15, 1), rows, cols,
                {.scale = 1.0f / 0.7f, .row0 = row0, .rows_per_sample = N, .keep = {0x0d}}};
  const int64_t n = rows * cols;
  float *out = calloc((size_t)n, 4), *r = randn(n, 16, 1), *dx = calloc((size_t)n, 4);
  vt_drop_path(be, dx, r, NULL, rows, cols, &k.mask);
  expect_pass("drop_path dx", check("drop_path dx", drop_fwd, &k, out, r, n, k.x, n, dx));
  expect_pass("drop_path dres", check("drop_path dres (= dout)", drop_fwd, &k, out, r, n, k.res, n, r));
  free(k.x), free(k.res), free(out), free(r), free(dx);
}

// ---- dropout ----
typedef struct { float *x; int64_t rows, cols; vt_dropout_mask mask; } dropout_ctx;
static void dropout_fwd(void *c, float *out) {
  dropout_ctx *k = c;
  vt_dropout(be, out, k->x, k->rows, k->cols, &k->mask, 0);
}
static void test_dropout(int64_t rows, int64_t cols, int64_t first, int64_t width) {
  // out = x * scale where kept, else 0; the backward is the same op on dout.
  dropout_ctx k = {randn(rows * cols, 14, 1), rows, cols,
                   {.seed = 5, .site = 3, .p = 0.3f, .scale = 1.0f / 0.7f, .first = first,
                    .width = width}};
  const int64_t n = rows * cols;
  float *out = calloc((size_t)n, 4), *r = randn(n, 16, 1), *dx = calloc((size_t)n, 4);
  vt_dropout(be, dx, r, rows, cols, &k.mask, 0);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; i++) dropped += dx[i] == 0.0f;
  expect_pass("dropout dx", check("dropout dx", dropout_fwd, &k, out, r, n, k.x, n, dx));
  if (dropped == 0 || dropped == n) {
    printf("FAIL: dropout p 0.3 dropped %lld of %lld elements\n", (long long)dropped, (long long)n);
    failures++;
  }
  free(k.x), free(out), free(r), free(dx);
}

// ---- attention ----
// With drop set, dropout of the probabilities at p 0.3 (a fixed mask: the function stays
// deterministic), this call's heads the upper half of 2H heads over TP.
typedef struct { float *qkv, *lse; int64_t B, N, H, D; const vt_dropout_mask *drop; } att_ctx;
static void att_fwd(void *c, float *out) {
  att_ctx *k = c;
  vt_attention_fwd(be, out, k->lse, k->qkv, k->B, k->N, k->H, k->D, k->drop);
}
static void test_attention(int64_t B, int64_t N, int64_t H, int64_t D, int drop) {
  int64_t C = H * D, nq = B * N * 3 * C, no = B * N * C;
  const vt_dropout_mask mask = {.seed = 3, .site = 7, .p = 0.3f, .scale = 1.0f / 0.7f,
                                .first = (5 * 2 * H + H) * N * N, .width = 2 * H};
  att_ctx k = {randn(nq, 14, 1), calloc((size_t)(B * H * N), 4), B, N, H, D,
               drop ? &mask : NULL};
  float *out = calloc((size_t)no, 4), *r = randn(no, 15, 1), *dqkv = calloc((size_t)nq, 4);
  att_fwd(&k, out);
  vt_attention_bwd(be, dqkv, NULL, r, k.qkv, out, k.lse, B, N, H, D, k.drop);
  char name[80];
  snprintf(name, sizeof name, "attention B%lld N%lld H%lld D%lld%s", (long long)B, (long long)N,
           (long long)H, (long long)D, drop ? " dropout 0.3" : "");
  expect_pass(name, check(name, att_fwd, &k, out, r, no, k.qkv, nq, dqkv));
  free(k.qkv), free(k.lse), free(out), free(r), free(dqkv);
}

// attention_bwd's fused qkv bias gradient: out = attention(qkv + bias), bias (3HD) broadcast
// over the B*N rows (timm's qkv Linear bias).
typedef struct { float *qkv, *bias, *sum, *lse; int64_t B, N, H, D; } att_bias_ctx;
static void att_bias_fwd(void *c, float *out) {
  att_bias_ctx *k = c;
  const int64_t ld = 3 * k->H * k->D;
  for (int64_t i = 0; i < k->B * k->N * ld; i++) k->sum[i] = k->qkv[i] + k->bias[i % ld];
  vt_attention_fwd(be, out, k->lse, k->sum, k->B, k->N, k->H, k->D, NULL);
}
static void test_attention_bias(int64_t B, int64_t N, int64_t H, int64_t D) {
  const int64_t ld = 3 * H * D, nq = B * N * ld, no = B * N * H * D;
  att_bias_ctx k = {randn(nq, 19, 1), randn(ld, 20, 1), calloc((size_t)nq, 4),
                    calloc((size_t)(B * H * N), 4), B, N, H, D};
  float *out = calloc((size_t)no, 4), *r = randn(no, 21, 1), *dqkv = calloc((size_t)nq, 4);
  float *dbias = calloc((size_t)ld, 4);
  att_bias_fwd(&k, out);
  vt_attention_bwd(be, dqkv, dbias, r, k.sum, out, k.lse, B, N, H, D, NULL);
  expect_pass("attention dbias", check("attention dbias (fused)", att_bias_fwd, &k, out, r, no,
                                       k.bias, ld, dbias));
  free(k.qkv), free(k.bias), free(k.sum), free(k.lse), free(out), free(r), free(dqkv), free(dbias);
}

// ---- latent attention (MAP pooling) ----
// out = latent_attention(q, kv + bias), bias (2HD) broadcast over the B*N rows (timm's kv Linear
// bias), so one forward serves the q, kv and fused bias checks.
typedef struct { float *q, *kv, *bias, *sum, *lse; int64_t B, N, H, D; } lat_ctx;
static void lat_fwd(void *c, float *out) {
  lat_ctx *k = c;
  const int64_t ld = 2 * k->H * k->D;
  for (int64_t i = 0; i < k->B * k->N * ld; i++) k->sum[i] = k->kv[i] + k->bias[i % ld];
  vt_latent_attention_fwd(be, out, k->lse, k->q, k->sum, k->B, k->N, k->H, k->D);
}
static void test_latent_attention(int64_t B, int64_t N, int64_t H, int64_t D) {
  const int64_t C = H * D, ld = 2 * C, nkv = B * N * ld, no = B * C;
  lat_ctx k = {randn(C, 22, 1), randn(nkv, 23, 1), randn(ld, 24, 0.5f), calloc((size_t)nkv, 4),
               calloc((size_t)(B * H), 4), B, N, H, D};
  float *out = calloc((size_t)no, 4), *r = randn(no, 25, 1), *dkv = calloc((size_t)nkv, 4);
  float *dq = calloc((size_t)C, 4), *dbias = calloc((size_t)ld, 4);
  lat_fwd(&k, out);
  vt_latent_attention_bwd(be, dq, dkv, dbias, r, k.q, k.sum, out, k.lse, B, N, H, D);
  char what[3][64];
  snprintf(what[0], 64, "latent_attention B%lld N%lld H%lld D%lld dq", (long long)B, (long long)N,
           (long long)H, (long long)D);
  snprintf(what[1], 64, "latent_attention N%lld dkv", (long long)N);
  snprintf(what[2], 64, "latent_attention N%lld dbias (fused)", (long long)N);
  expect_pass(what[0], check(what[0], lat_fwd, &k, out, r, no, k.q, C, dq));
  expect_pass(what[1], check(what[1], lat_fwd, &k, out, r, no, k.kv, nkv, dkv));
  expect_pass(what[2], check(what[2], lat_fwd, &k, out, r, no, k.bias, ld, dbias));
  free(k.q), free(k.kv), free(k.bias), free(k.sum), free(k.lse), free(out), free(r), free(dkv);
  free(dq), free(dbias);
}

// ---- patchify ----
typedef struct { float *img; int64_t B, S, P; } pat_ctx;
static void pat_fwd(void *c, float *out) {
  pat_ctx *k = c;
  vt_patchify_fwd(be, out, k->img, k->B, k->S, k->P);
}
static void test_patchify(int64_t B, int64_t S, int64_t P) {
  int64_t n = B * 3 * S * S;
  pat_ctx k = {randn(n, 16, 1), B, S, P};
  float *out = calloc((size_t)n, 4), *r = randn(n, 17, 1), *dimg = calloc((size_t)n, 4);
  vt_patchify_bwd(be, dimg, r, B, S, P);
  expect_pass("patchify", check("patchify dimg", pat_fwd, &k, out, r, n, k.img, n, dimg));
  free(k.img), free(out), free(r), free(dimg);
}

// ---- QK-norm: LayerNorm per head of q and k inside qkv (M, 3HD), v passed through ----
typedef struct { float *qkv, *qw, *qb, *kw, *kb, *mean, *rstd; int64_t M, H, D; } qkn_ctx;
static void qkn_fwd(void *c, float *out) {
  qkn_ctx *k = c;
  vt_qk_norm_fwd(be, out, k->mean, k->rstd, k->qkv, k->qw, k->qb, k->kw, k->kb, k->M, k->H, k->D,
                 1e-6f);
}
static void test_qk_norm(int64_t M, int64_t H, int64_t D) {
  const int64_t W = 3 * H * D, n = M * W;
  qkn_ctx k = {randn(n, 50, 2), randn(D, 51, 1), randn(D, 52, 1), randn(D, 53, 1),
               randn(D, 54, 1), calloc((size_t)(2 * M * H), 4), calloc((size_t)(2 * M * H), 4),
               M, H, D};
  for (int64_t i = 0; i < n; i++) k.qkv[i] += 0.5f;  // a mean to take out
  float *out = calloc((size_t)n, 4), *r = randn(n, 55, 1), *dx = calloc((size_t)n, 4);
  float *g[4], *dbias = calloc((size_t)W, 4);
  for (int i = 0; i < 4; i++) g[i] = calloc((size_t)D, 4);
  qkn_fwd(&k, out);
  vt_qk_norm_bwd(be, dx, g[0], g[1], g[2], g[3], dbias, r, k.qkv, k.qw, k.kw, k.mean, k.rstd, M,
                 H, D);
  char what[5][64];
  const char *names[5] = {"dqkv", "dq_norm.weight", "dq_norm.bias", "dk_norm.weight",
                          "dk_norm.bias"};
  for (int i = 0; i < 5; i++)
    snprintf(what[i], 64, "qk_norm M%lld H%lld D%lld %s", (long long)M, (long long)H,
             (long long)D, names[i]);
  expect_pass(what[0], check(what[0], qkn_fwd, &k, out, r, n, k.qkv, n, dx));
  float *p[4] = {k.qw, k.qb, k.kw, k.kb};
  for (int i = 0; i < 4; i++)
    expect_pass(what[i + 1], check(what[i + 1], qkn_fwd, &k, out, r, n, p[i], D, g[i]));
  double worst = 0.0;  // dbias: the column sums of dqkv
  for (int64_t c = 0; c < W; c++) {
    double s = 0.0;
    for (int64_t m = 0; m < M; m++) s += dx[m * W + c];
    worst = fmax(worst, fabs(s - dbias[c]) / (1e-5 + 1e-5 * fabs(s)));
  }
  printf("  %-34s n=%-6lld worst err/tol %.3f\n", "qk_norm dbias = colsum(dqkv)", (long long)W,
         worst);
  expect_pass("qk_norm dbias", worst);
  free(k.qkv), free(k.qw), free(k.qb), free(k.kw), free(k.kb), free(k.mean), free(k.rstd);
  free(out), free(r), free(dx), free(dbias);
  for (int i = 0; i < 4; i++) free(g[i]);
}

// ---- embed (T prefix tokens, positions from token pos0) ----
typedef struct { float *patch, *prefix, *pos; int64_t B, N, T, pos0, C; } emb_ctx;
static void emb_fwd(void *c, float *out) {
  emb_ctx *k = c;
  vt_embed_fwd(be, out, k->patch, k->prefix, k->pos, k->B, k->N, k->T, k->pos0, k->C);
}
static void test_embed(int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C) {
  const int64_t np = B * (N - T) * C, npos = (N - pos0) * C, no = B * N * C;
  emb_ctx k = {randn(np, 18, 1), randn(T * C, 19, 1), randn(npos, 20, 1), B, N, T, pos0, C};
  float *out = calloc((size_t)no, 4), *r = randn(no, 21, 1);
  float *dp = calloc((size_t)np, 4), *dc = calloc((size_t)(T * C), 4);
  float *dpos = calloc((size_t)npos, 4);
  vt_embed_bwd(be, dp, dc, dpos, r, B, N, T, pos0, C);
  char what[3][64];
  snprintf(what[0], 64, "embed T%lld pos0 %lld dpatch_out", (long long)T, (long long)pos0);
  snprintf(what[1], 64, "embed T%lld pos0 %lld dprefix", (long long)T, (long long)pos0);
  snprintf(what[2], 64, "embed T%lld pos0 %lld dpos", (long long)T, (long long)pos0);
  expect_pass(what[0], check(what[0], emb_fwd, &k, out, r, no, k.patch, np, dp));
  expect_pass(what[1], check(what[1], emb_fwd, &k, out, r, no, k.prefix, T * C, dc));
  expect_pass(what[2], check(what[2], emb_fwd, &k, out, r, no, k.pos, npos, dpos));
  free(k.patch), free(k.prefix), free(k.pos), free(out), free(r), free(dp), free(dc), free(dpos);
}

// ---- class-token and mean pooling (the mean over the tokens after T prefix tokens) ----
typedef struct { float *x; int64_t B, N, T, C; int avg; } pool_ctx;
static void pool_fwd(void *c, float *out) {
  pool_ctx *k = c;
  if (k->avg) vt_mean_pool_fwd(be, out, k->x, k->B, k->N, k->T, k->C);
  else vt_cls_pool_fwd(be, out, k->x, k->B, k->N, k->C);
}
static void test_pool(int64_t B, int64_t N, int64_t C, int avg, int64_t T) {
  pool_ctx k = {randn(B * N * C, 22, 1), B, N, T, C, avg};
  float *out = calloc((size_t)(B * C), 4), *r = randn(B * C, 23, 1);
  float *dx = randn(B * N * C, 24, 1);  // garbage: the backward must overwrite all of it
  if (avg) vt_mean_pool_bwd(be, dx, r, B, N, T, C);
  else vt_cls_pool_bwd(be, dx, r, B, N, C);
  char name[64];
  snprintf(name, sizeof name, avg ? "mean_pool T%lld dx" : "cls_pool dx", (long long)T);
  expect_pass(name, check(name, pool_fwd, &k, out, r, B * C, k.x, B * N * C, dx));
  free(k.x), free(out), free(r), free(dx);
}

// ---- LayerNorm of each patch token, then their mean (the gap head) ----
typedef struct { float *x, *w, *b, *pooled, *mean, *rstd; int64_t B, N, T, C; } nmp_ctx;
static void nmp_fwd(void *c, float *out) {
  nmp_ctx *k = c;
  vt_norm_mean_pool_fwd(be, out, k->pooled, k->mean, k->rstd, k->x, k->w, k->b, k->B, k->N, k->T,
                        k->C, 1e-6f);
}
static void test_norm_mean_pool(int64_t B, int64_t N, int64_t T, int64_t C) {
  const int64_t Np = N - T;
  nmp_ctx k = {randn(B * N * C, 60, 1), randn(C, 61, 1), randn(C, 62, 1),
               calloc((size_t)(B * C), 4), calloc((size_t)(B * Np), 4),
               calloc((size_t)(B * Np), 4), B, N, T, C};
  for (int64_t i = 0; i < B * N * C; i++) k.x[i] += 0.3f * (float)(i % 7);  // nonzero means
  float *out = calloc((size_t)(B * C), 4), *r = randn(B * C, 63, 1);
  float *dx = randn(B * N * C, 64, 1);  // garbage: the backward must overwrite all of it
  float *dw = calloc((size_t)C, 4), *db = calloc((size_t)C, 4);
  float *dw2 = calloc((size_t)C, 4), *db2 = calloc((size_t)C, 4);
  nmp_fwd(&k, out);
  vt_norm_mean_pool_bwd(be, dx, dw, db, r, k.x, k.pooled, k.w, k.mean, k.rstd, B, N, T, C);
  char what[3][64];
  snprintf(what[0], 64, "norm_mean_pool T%lld %lldx%lldx%lld dx", (long long)T, (long long)B,
           (long long)N, (long long)C);
  snprintf(what[1], 64, "norm_mean_pool T%lld dweight", (long long)T);
  snprintf(what[2], 64, "norm_mean_pool T%lld dbias", (long long)T);
  expect_pass(what[0], check(what[0], nmp_fwd, &k, out, r, B * C, k.x, B * N * C, dx));
  expect_pass(what[1], check(what[1], nmp_fwd, &k, out, r, B * C, k.w, C, dw));
  expect_pass(what[2], check(what[2], nmp_fwd, &k, out, r, B * C, k.b, C, db));
  // In place (dx = x, as the model's sequence-parallel head runs it): the same bits.
  nmp_fwd(&k, out);
  float *inplace = malloc((size_t)(B * N * C) * 4);
  memcpy(inplace, k.x, (size_t)(B * N * C) * 4);
  vt_norm_mean_pool_bwd(be, dx, dw2, db2, r, k.x, k.pooled, k.w, k.mean, k.rstd, B, N, T, C);
  vt_norm_mean_pool_bwd(be, inplace, dw2, db2, r, inplace, k.pooled, k.w, k.mean, k.rstd, B, N, T,
                        C);
  if (memcmp(inplace, dx, (size_t)(B * N * C) * 4) != 0) {
    printf("FAIL: norm_mean_pool_bwd in place (dx = x) differs from dx apart\n");
    failures++;
  }
  free(k.x), free(k.w), free(k.b), free(k.pooled), free(k.mean), free(k.rstd), free(out), free(r);
  free(dx), free(dw), free(db), free(dw2), free(db2), free(inplace);
}

// ---- LayerScale ----
typedef struct { float *x, *gamma; int64_t rows, cols; } ls_ctx;
static void ls_fwd(void *c, float *out) {
  ls_ctx *k = c;
  vt_layer_scale_fwd(be, out, k->x, k->gamma, k->rows, k->cols);
}
static void test_layer_scale(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  ls_ctx k = {randn(n, 40, 1), randn(cols, 41, 1), rows, cols};
  float *out = calloc((size_t)n, 4), *r = randn(n, 42, 1), *dx = calloc((size_t)n, 4);
  float *dg = calloc((size_t)cols, 4);
  vt_layer_scale_bwd(be, dx, dg, r, k.x, k.gamma, rows, cols);
  expect_pass("layer_scale dx", check("layer_scale dx", ls_fwd, &k, out, r, n, k.x, n, dx));
  expect_pass("layer_scale dgamma",
              check("layer_scale dgamma", ls_fwd, &k, out, r, n, k.gamma, cols, dg));
  free(k.x), free(k.gamma), free(out), free(r), free(dx), free(dg);
}

// ---- cross-entropy ----
typedef struct {
  float *logits, *probs;
  int32_t *labels;
  vt_mix_target *mix;
  float smoothing;
  int64_t B, K;
  int bce;      // binary cross-entropy (vt_bce_fwd; its backward: scale / K)
  float thresh;  // its binary targets' threshold; negative: soft targets
} ce_ctx;
static void ce_fwd(void *c, float *out) {
  ce_ctx *k = c;
  if (k->bce)
    vt_bce_fwd(be, out, k->probs, k->logits, k->labels, k->mix, k->smoothing, k->thresh, k->B,
               k->K);
  else
    vt_cross_entropy_fwd(be, out, k->probs, k->logits, k->labels, k->mix, k->smoothing, k->B,
                         k->K);
}
// With mixed targets: sample b's partner label (b * 5 + 1) % K (sometimes its own label) and
// lam from 0.1 to 0.9. thresh >= 0 (bce only): binary targets.
static void test_cross_entropy(int64_t B, int64_t K, float smoothing, int mixed, int bce,
                               float thresh) {
  ce_ctx k = {randn(B * K, 25, 2), calloc((size_t)(B * K), 4), malloc((size_t)B * 4), NULL,
              smoothing, B, K, bce, thresh};
  for (int64_t b = 0; b < B; b++) k.labels[b] = (int32_t)((b * 7 + 3) % K);
  if (mixed) {
    k.mix = malloc((size_t)B * sizeof *k.mix);
    for (int64_t b = 0; b < B; b++)
      k.mix[b] = (vt_mix_target){(int32_t)((b * 5 + 1) % K), 0.1f + 0.8f * (float)b / (float)B};
  }
  float *out = calloc((size_t)B, 4), *r = malloc((size_t)B * 4), *d = calloc((size_t)(B * K), 4);
  const float scale = 0.37f;  // the bwd takes a uniform weight: L = scale * sum(losses)
  for (int64_t b = 0; b < B; b++) r[b] = scale;
  ce_fwd(&k, out);
  vt_cross_entropy_bwd(be, d, k.probs, k.labels, k.mix, smoothing, thresh,
                       bce ? scale / (float)K : scale, B, K);
  char name[80];
  snprintf(name, sizeof name, "%s B%lld K%lld s%.2f%s%s", bce ? "bce" : "cross_entropy",
           (long long)B, (long long)K, smoothing, mixed ? " mixed" : "",
           thresh >= 0 ? " binary targets" : "");
  expect_pass(name, check(name, ce_fwd, &k, out, r, B, k.logits, B * K, d));
  free(k.logits), free(k.probs), free(k.labels), free(k.mix), free(out), free(r), free(d);
}

int main(void) {
  const char *why = NULL;
  be = vt_backend_get(VT_DEVICE_CPU, &why);
  vt_backend_set_threads(2);
  printf("finite differences: eps %g, |analytic - fd| <= %g + %g * max(|analytic|, |fd|)\n",
         (double)EPS, ATOL, RTOL);
  test_linear(5, 3, 77);
  test_linear(13, 77, 3);
  test_linear(1, 1, 1);
  test_layernorm(13, 3);
  test_layernorm(5, 77);
  test_act(1001, VT_ACT_GELU);
  test_act(1001, VT_ACT_GELU_TANH);
  test_act(1001, VT_ACT_TANH);
  test_act(1001, VT_ACT_QUICK_GELU);
  test_gelu_bias(37, 11);
  test_add(77);
  test_drop_path(31, 3, 4, 7);  // rows 4..34: samples 0..4, the first and last in part
  test_dropout(9, 7, 1001, 13);  // a part of a wider tensor, numbers not a multiple of 4
  test_attention(2, 13, 3, 5, 0);
  test_attention(1, 5, 1, 3, 0);
  test_attention(2, 7, 7, 11, 0);
  test_attention(2, 13, 3, 5, 1);
  test_attention(1, 6, 2, 4, 1);
  test_attention_bias(2, 9, 2, 4);
  test_latent_attention(3, 5, 2, 3);
  test_latent_attention(2, 13, 1, 77);  // more than a warp's lanes per dot product on CUDA
  test_latent_attention(1, 1, 3, 4);    // one token: p = 1
  test_patchify(2, 6, 3);
  test_embed(2, 13, 1, 0, 3);
  test_embed(3, 5, 1, 0, 77);
  test_embed(2, 9, 3, 0, 5);  // class token and 2 registers, each with a position
  test_embed(2, 9, 3, 3, 5);  // positions on the patch tokens only (no_embed_class)
  test_embed(2, 4, 1, 1, 3);
  test_embed(2, 5, 0, 0, 3);  // no class token, no registers
  test_pool(3, 5, 7, 0, 1);
  test_pool(3, 5, 7, 1, 1);
  test_pool(2, 2, 3, 1, 1);
  test_pool(2, 9, 3, 1, 4);  // 3 registers, 5 patch tokens
  test_pool(2, 4, 3, 1, 0);  // no class token: every token a patch
  test_norm_mean_pool(3, 5, 1, 7);
  test_norm_mean_pool(2, 6, 0, 77);  // no class token; more than a warp's lanes per row on CUDA
  test_norm_mean_pool(2, 9, 4, 3);   // class token and 3 registers
  test_qk_norm(5, 2, 3);
  test_qk_norm(3, 1, 33);  // more than a warp's 32 lanes per row on CUDA
  test_layer_scale(13, 3);
  test_layer_scale(5, 77);
  for (int bce = 0; bce < 2; bce++) {
    test_cross_entropy(5, 3, 0.0f, 0, bce, -1.0f);
    test_cross_entropy(4, 77, 0.1f, 0, bce, -1.0f);
    test_cross_entropy(6, 3, 0.1f, 1, bce, -1.0f);
    test_cross_entropy(5, 77, 0.0f, 1, bce, -1.0f);
  }
  // Binary targets: DeiT III's (label and partner 1), some lam on either side of 0.3, and a
  // smoothing whose s/K exceeds the threshold (every class 1).
  test_cross_entropy(6, 3, 0.0f, 1, 1, 0.0f);
  test_cross_entropy(6, 77, 0.1f, 1, 1, 0.3f);
  test_cross_entropy(4, 5, 0.3f, 0, 1, 0.05f);
  if (failures) printf("%d gradient check(s) FAILED\n", failures);
  else printf("all gradient checks passed\n");
  return failures ? 1 : 0;
}
