// test_cuda_ops.c: every op of the backend table, forward and backward, on the CUDA backend
// against the CPU backend (the numerical truth) on the same random inputs, over several shapes
// including odd ones. For each op, shape and output tensor it prints the normwise relative error
// max|cuda - cpu| / max|cpu| and the op's tolerance, and checks that two runs of the CUDA op give
// the same bits (design.md's determinism contract). Outputs start poisoned with NaN, so an
// element the op forgets to write fails; accumulated gradients start from random values, so
// overwriting instead of adding fails too.
//
// Table-driven: one row per op of vt_backend (its tolerance per precision and its shapes), one
// small runner per row. Each precision (vt_backend.h) is a column of `tol`: both backends run in
// that precision; ops that do not depend on it have no bf16 column (-1) and run once.
//
// Usage: test_cuda_ops [--cpu] [--shapes=N] [--shape=A,B,...] [--prec=fp32|bf16] [OP...]: N,
// the first N shapes of each op only (the sanitizers' runs); --shape, only that shape (in the
// op's dims; missing ones 0) for every op named (tests/fuzz_cuda_ops.sh); --prec, that
// precision only (tests/test_attention_variants.sh: the variants are bf16 kernels). Exits 77
// (CTest's skip) when no CUDA backend is usable.
// --cpu compares the CPU backend with itself, so the harness itself is exercised on machines
// without a GPU (every error is then 0). Only the public op API (vt_ops.h, vt_backend.h); must
// not depend on CUDA headers, MPI or the model.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_backend.h"
#include "vt_ops.h"
#include "vt_rng.h"

enum { FP32, BF16, NPREC };
static const char *const kPrecName[NPREC] = {"fp32", "bf16"};
static const vt_precision kPrec[NPREC] = {VT_PRECISION_FP32, VT_PRECISION_BF16};

typedef struct {
  const vt_backend *cpu, *gpu;
  int prec;
  const char *op;
  char shape[96];
  double tol;
  uint32_t stream;  // next random stream
  int checks, failures;
  void *host[64], *dev[64];  // this shape's allocations, freed after it
  int nhost, ndev;
} tc;

// ---- helpers: memory, random inputs, comparisons -----------------------------------------

static void *track_host(tc *t, size_t nbytes) {
  void *p = malloc(nbytes ? nbytes : 1);
  if (!p || t->nhost == 64) {
    fprintf(stderr, "test_cuda_ops: out of host memory or slots\n");
    exit(1);
  }
  return t->host[t->nhost++] = p;
}

static float *hnew(tc *t, int64_t n) { return track_host(t, (size_t)n * sizeof(float)); }

static float *hrand(tc *t, int64_t n, float lo, float hi) {
  float *p = hnew(t, n);
  const uint32_t s = t->stream++;
  for (int64_t i = 0; i < n; i++)
    p[i] = lo + (hi - lo) * vt_rng_uniform(20240607, 7, s, (uint64_t)i);
  return p;
}

static float *hcopy(tc *t, const float *src, int64_t n) {
  return memcpy(hnew(t, n), src, (size_t)n * sizeof(float));
}

static void *dnew_bytes(tc *t, const void *host, size_t nbytes) {
  void *d = t->gpu->alloc(nbytes);
  if (!d || t->ndev == 64) {
    fprintf(stderr, "test_cuda_ops: %s alloc of %zu bytes failed\n", t->gpu->name, nbytes);
    exit(1);
  }
  if (host) t->gpu->to_device(d, host, nbytes);
  return t->dev[t->ndev++] = d;
}

static float *dnew(tc *t, const float *host, int64_t n) {
  return dnew_bytes(t, host, (size_t)n * sizeof(float));
}

// A device buffer full of NaN: an output element the op does not write stays NaN and fails.
static float *dpoison(tc *t, int64_t n) {
  // 0x7fc07fc0: a NaN read as one float and as two bf16 halves (bf16 outputs use the buffer too)
  const uint32_t nan2 = 0x7fc07fc0u;
  float *h = hnew(t, n);
  for (int64_t i = 0; i < n; i++) memcpy(&h[i], &nan2, sizeof nan2);
  return dnew(t, h, n);
}

static void release(tc *t) {
  t->gpu->synchronize();
  for (int i = 0; i < t->ndev; i++) t->gpu->free(t->dev[i]);
  for (int i = 0; i < t->nhost; i++) free(t->host[i]);
  t->ndev = t->nhost = 0;
}

// FNV-1a of an output's bytes: printed, so that two runs (kernel variants, GPUs) that print the
// same lines made the same bits.
static uint32_t bits_hash(const void *p, size_t nbytes) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < nbytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 16777619u;
  return h;
}

// a: the output's bytes (the first run's).
static void report(tc *t, const char *what, double err, double tol, int same, const void *a,
                   size_t nbytes) {
  const int ok = err <= tol && same;  // also fails a NaN error
  t->checks++;
  t->failures += !ok;
  printf("  %-4s %-17s %-30s %-8s err %.2e tol %.0e  repeat %s  %s  bits %08x\n",
         kPrecName[t->prec], t->op, t->shape, what, err, tol, same ? "same bits" : "DIFFERS",
         ok ? "ok" : "FAIL", bits_hash(a, nbytes));
}

// a and b: two runs of the op (host copies); ref the CPU's result.
static void compare(tc *t, const char *what, const float *a, const float *b, const float *ref,
                    int64_t n) {
  double maxdiff = 0.0, maxref = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)ref[i]);
    if (!(d <= maxdiff)) maxdiff = d;  // a NaN sticks
    if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
  }
  const double err = maxref > 0 ? maxdiff / maxref : maxdiff;
  report(t, what, err, t->tol, memcmp(a, b, (size_t)n * sizeof(float)) == 0, a,
         (size_t)n * sizeof(float));
}

// g[0] and g[1] hold two runs of the op on the device; ref the CPU's result.
static void check(tc *t, const char *what, float *const g[2], const float *ref, int64_t n) {
  float *a = hnew(t, n), *b = hnew(t, n);
  t->gpu->to_host(a, g[0], (size_t)n * sizeof(float));
  t->gpu->to_host(b, g[1], (size_t)n * sizeof(float));
  compare(t, what, a, b, ref, n);
}

// bf16 activations (vt_ops.h) are the fp32 results rounded to bf16 on each side. The fp32
// values differ by the few ulp the fp32 column allows, and one that sits next to a bf16 rounding
// boundary rounds the other way: one bf16 ulp, 2^-8 to 2^-7 of that element. So a bf16 output may
// differ normwise by up to 2^-7 (7.8e-3), and in at most 1% of the elements that are not tiny
// (|x| >= 1% of the largest; on tiny ones fp32 differences are relatively large: GELU's far left
// tail, near-zero sums): an op that skips its rounding, rounds another way or writes fp32 fails.
// Its fp32 accuracy is the fp32 column's business.
static float bf16_value(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static void check_bf16(tc *t, const char *what, float *const g[2], const float *ref_bits,
                       int64_t n) {
  uint16_t *a = (uint16_t *)hnew(t, n), *b = (uint16_t *)hnew(t, n);
  const uint16_t *rb = (const uint16_t *)ref_bits;
  t->gpu->to_host(a, g[0], (size_t)n * sizeof(uint16_t));
  t->gpu->to_host(b, g[1], (size_t)n * sizeof(uint16_t));
  double maxdiff = 0.0, maxref = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double r = bf16_value(rb[i]), d = fabs((double)bf16_value(a[i]) - r);
    if (!(d <= maxdiff)) maxdiff = d;  // a NaN sticks
    if (fabs(r) > maxref) maxref = fabs(r);
  }
  int64_t apart = 0, large = 0;
  for (int64_t i = 0; i < n; i++)
    if (fabs((double)bf16_value(rb[i])) >= 1e-2 * maxref) large++, apart += a[i] != rb[i];
  const double err = maxref > 0 ? maxdiff / maxref : maxdiff;
  const double frac = large ? (double)apart / (double)large : 0.0;
  char label[32];
  snprintf(label, sizeof label, "%s/bf16", what);
  // Reported: the normwise error, or the share of differing elements when that is too high.
  report(t, label, frac > 1e-2 ? INFINITY : err, 7.9e-3,
         memcmp(a, b, (size_t)n * sizeof(uint16_t)) == 0, a, (size_t)n * sizeof(uint16_t));
}

static int bf16_run(const tc *t) { return kPrec[t->prec] == VT_PRECISION_BF16; }

// An op output that is a bf16 activation in bf16 precision (vt_ops.h).
static void check_act(tc *t, const char *what, float *const g[2], const float *ref, int64_t n) {
  if (bf16_run(t)) check_bf16(t, what, g, ref, n);
  else check(t, what, g, ref, n);
}

// An op input that is a bf16 activation in bf16 precision: x as bf16 bits (a new buffer), else x.
static float *act_in(tc *t, const float *x, int64_t n) {
  if (!bf16_run(t)) return (float *)x;
  uint16_t *b = (uint16_t *)hnew(t, n);
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);  // nearest even (the inputs are finite)
    b[i] = (uint16_t)(u >> 16);
  }
  return (float *)b;
}

// ---- one runner per op: CPU once, CUDA twice (r = 0, 1) from the same inputs -------------
// d[] holds the shape; its meaning is the `dims` column of the table.

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
static void t_linear_fwd(tc *t, const int64_t *d) { linear_fwd_case(t, d, LIN_PLAIN); }
static void t_linear_act_fwd(tc *t, const int64_t *d) { linear_fwd_case(t, d, LIN_ACT); }
static void t_linear_residual_fwd(tc *t, const int64_t *d) {
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
static void t_linear_bwd(tc *t, const int64_t *d) { linear_bwd_case(t, d, 0); }
static void t_linear_bwd_act(tc *t, const int64_t *d) { linear_bwd_case(t, d, 1); }

// dout is a bf16 activation in bf16 (act_bwd's dinp), like x. d[3] bits: 1 dinp, 2 leaves
// dweight out.
static void t_linear_act_bwd(tc *t, const int64_t *d) {
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

// timm's ViT's LayerNorm eps, that of every op test but layernorm_fwd's flagged rows.
#define LN_EPS 1e-6f

// The inputs sit around 0.5 with spread 1.5, so the centring matters. d[2]: 1 eps 1e-5 (CLIP's
// nn.LayerNorm), + 2 an fp32 output (norm_pre's: act 0).
static void t_layernorm_fwd(tc *t, const int64_t *d) {
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
static void t_layernorm_bwd(tc *t, const int64_t *d) { layernorm_bwd_case(t, d, 0); }
static void t_layernorm_bwd_add(tc *t, const int64_t *d) { layernorm_bwd_case(t, d, 1); }

// The fused residual add + LayerNorm in place (sum aliases a, as the block uses it) against
// the CPU's unfused vt_add then vt_layernorm_fwd.
static void t_add_layernorm_fwd(tc *t, const int64_t *d) {
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
static void t_act_fwd(tc *t, const int64_t *d) {
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
static void t_act_bwd(tc *t, const int64_t *d) {
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
static void t_attention_fwd(tc *t, const int64_t *d) {
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
static void t_attention_bwd(tc *t, const int64_t *d) {
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
static void t_latent_attention_fwd(tc *t, const int64_t *d) {
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
static void t_latent_attention_bwd(tc *t, const int64_t *d) {
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

// fp32 in, an activation out: a copy in fp32, the rounding to bf16 in bf16.
static void t_to_act(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  float *x = hrand(t, n, -3, 3), *ref = hnew(t, n), *g[2];
  vt_to_act(t->cpu, ref, x, n);
  float *gx = dnew(t, x, n);
  for (int r = 0; r < 2; r++) g[r] = dpoison(t, n), vt_to_act(t->gpu, g[r], gx, n);
  check_act(t, "dst", g, ref, n);
}

// Run 0 writes a fresh buffer; run 1 writes in place over a copy of a (out aliases a).
static void t_add(tc *t, const int64_t *d) {
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
static void t_drop_path(tc *t, const int64_t *d) {
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
static void t_dropout(tc *t, const int64_t *d) {
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

static void t_patchify_fwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], S = d[1], P = d[2], np = B * (S / P) * (S / P) * 3 * P * P;
  float *img = hrand(t, B * 3 * S * S, -1, 1), *ref = hnew(t, np), *g[2];
  vt_patchify_fwd(t->cpu, ref, img, B, S, P);
  float *gi = dnew(t, img, B * 3 * S * S);
  for (int r = 0; r < 2; r++) g[r] = dpoison(t, np), vt_patchify_fwd(t->gpu, g[r], gi, B, S, P);
  check_act(t, "patches", g, ref, np);
}

static void t_patchify_bwd(tc *t, const int64_t *d) {
  const int64_t B = d[0], S = d[1], P = d[2], np = B * (S / P) * (S / P) * 3 * P * P;
  float *dp = hrand(t, np, -1, 1), *ref = hnew(t, B * 3 * S * S), *g[2];
  vt_patchify_bwd(t->cpu, ref, dp, B, S, P);
  float *gdp = dnew(t, dp, np);
  for (int r = 0; r < 2; r++)
    g[r] = dpoison(t, B * 3 * S * S), vt_patchify_bwd(t->gpu, g[r], gdp, B, S, P);
  check(t, "dimg", g, ref, B * 3 * S * S);
}

// T prefix tokens; d[4] bit 1: positions only on the patch tokens (pos0 = T, no_embed_class).
static void t_embed_fwd(tc *t, const int64_t *d) {
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
static void t_embed_bwd(tc *t, const int64_t *d) {
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

static void t_cls_pool_fwd(tc *t, const int64_t *d) { pool_case(t, d, 0, 0); }
static void t_cls_pool_bwd(tc *t, const int64_t *d) { pool_case(t, d, 0, 1); }
static void t_mean_pool_fwd(tc *t, const int64_t *d) { pool_case(t, d, 1, 0); }
static void t_mean_pool_bwd(tc *t, const int64_t *d) { pool_case(t, d, 1, 1); }

// LayerNorm of each patch token, then their mean (the gap head): out (an activation), pooled,
// the statistics; the backward (dx from poison, dweight and dbias added to random values) with
// the CPU's statistics, dx apart and in place (dx = x).
static void t_norm_mean_pool_fwd(tc *t, const int64_t *d) {
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

static void t_norm_mean_pool_bwd(tc *t, const int64_t *d) {
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
static void t_qk_norm_fwd(tc *t, const int64_t *d) {
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

static void t_qk_norm_bwd(tc *t, const int64_t *d) {
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
static void t_layer_scale_fwd(tc *t, const int64_t *d) {
  const int64_t rows = d[0], cols = d[1], n = rows * cols;
  float *x = hrand(t, n, -1, 1), *gamma = hrand(t, cols, -1, 1), *ref = hnew(t, n), *g[2];
  vt_layer_scale_fwd(t->cpu, ref, x, gamma, rows, cols);
  float *gx = dnew(t, x, n), *gg = dnew(t, gamma, cols);
  g[0] = dpoison(t, n), vt_layer_scale_fwd(t->gpu, g[0], gx, gg, rows, cols);
  g[1] = dnew(t, x, n), vt_layer_scale_fwd(t->gpu, g[1], g[1], gg, rows, cols);
  check(t, "out", g, ref, n);
}

static void t_layer_scale_bwd(tc *t, const int64_t *d) {
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

static void t_cross_entropy_fwd(tc *t, const int64_t *d) { loss_fwd_case(t, d, 0); }
// Binary cross-entropy: sigmoids saved, softplus summed in double (its backward is
// cross_entropy_bwd's).
static void t_bce_fwd(tc *t, const int64_t *d) { loss_fwd_case(t, d, 1); }

// d[4]: the binary targets' threshold in thousandths, -1 for soft targets.
static void t_cross_entropy_bwd(tc *t, const int64_t *d) {
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
static void t_adamw(tc *t, const int64_t *d) {
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
static void t_lamb_moments(tc *t, const int64_t *d) {
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
static void t_lamb_apply(tc *t, const int64_t *d) {
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
static void t_sgd(tc *t, const int64_t *d) {
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
static void t_sumsq(tc *t, const int64_t *d) {
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
static void t_ema(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const float decay = 1.0f - (float)d[1] * 1e-6f;
  float *e = hrand(t, n, -1, 1), *p = hrand(t, n, -1, 1), *ref = hcopy(t, e, n), *g[2];
  vt_ema(t->cpu, ref, p, decay, n);
  float *gp = dnew(t, p, n);
  for (int r = 0; r < 2; r++) g[r] = dnew(t, e, n), vt_ema(t->gpu, g[r], gp, decay, n);
  check(t, "ema", g, ref, n);
}

static void t_scale(tc *t, const int64_t *d) {
  const int64_t n = d[0];
  const float alpha = 0.37f;
  float *x = hrand(t, n, -1, 1), *ref = hcopy(t, x, n), *g[2];
  vt_scale(t->cpu, ref, alpha, n);
  for (int r = 0; r < 2; r++) g[r] = dnew(t, x, n), vt_scale(t->gpu, g[r], alpha, n);
  check(t, "x", g, ref, n);
}

// ---- the table -----------------------------------------------------------------------------
// Tolerances are normwise: max|cuda - cpu| / max|cpu| (fp32 unit roundoff u = 6e-8). Both sides
// are fp32 but sum in different orders (warp butterflies, chunked trees and cuBLAS's blocking
// against the CPU's sequential loops and OpenBLAS), and nvcc contracts a*b+c into FMAs where gcc
// in ISO C mode does not. An L-term sum then differs by about sqrt(L) u typically, L u at worst,
// relative to the sum of magnitudes; each tolerance leaves about 10x over that for the longest
// reduction of its shapes:
//   0      pure data movement, or the same roundings in the same order on both sides (patchify,
//          cls_pool, mean_pool: its token sum in order and one division,
//          add, drop_path, dropout, scale, ema, embed: one add or product, and dprefix/dpos add
//          the batch in the CPU's order; layer_scale_fwd: one product).
//   1e-6   element-wise with FMA contraction or library functions: AdamW, cross-entropy bwd
//          (a few ulp).
//   2e-6   GELU: the CPU uses its own erf (abs. error 1.5e-7) and exp, CUDA erff and expf.
//   1e-5   LayerNorm forward (C <= 768 terms; norm_mean_pool's too, then up to 197 tokens'
//          xhat summed in order on both sides), cross-entropy forward (sums in double; exp and
//          log of up to 1000 classes), GELU backward (its fused bias gradient sums up to 1100
//          rows of GELU derivatives, each a few 1e-7 apart), LayerScale backward (dgamma sums
//          up to 1100 rows of products, in chunks on CUDA).
//   5e-5   LayerNorm backward (dweight sums over up to 1000 rows; norm_mean_pool's mean(g) a
//          256-thread tree on CUDA), attention forward (D = 64
//          scores, then N = 197 products; exp turns absolute score errors into relative ones;
//          lse's row sums run in tiles of 64 on CUDA, in one pass on the CPU).
//   1e-4   linear (sums of up to 1152 products), attention backward (recomputed scores, three
//          chained products and the cancelling dP - delta).
//   1e-12  sumsq: squares are exact in double; only the order of the double additions differs.
// bf16 (the GEMMs of linear and attention): both sides round the same operands to bf16 and sum
// exact products in fp32, so linear keeps its fp32 tolerance. Attention rounds values it
// computed (the probabilities, dS), which differ between the sides by a few ulp of fp32; one
// that sits next to a bf16 rounding boundary then rounds the other way, an error of 2^-8 of that
// element, a few 1e-6 normwise in tests/test_bf16.c; 5e-4 allows for that and still fails an
// operand left unrounded (1.5e-3 to 2.8e-3 measured there). Outputs that bf16 precision stores
// as bf16 (vt_ops.h: layernorm, gelu, patchify, attention's out) have their own rule
// (check_bf16); the column then applies to the op's fp32 outputs (mean, rstd, sum).
typedef struct {
  const char *op, *dims;
  void (*run)(tc *, const int64_t *);
  double tol[NPREC];
  int64_t shapes[16][5];  // a row of zeros ends the list
} op_test;

static const op_test kTests[] = {
    {"linear_fwd", "M,I,O,bias", t_linear_fwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 192, 576, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 384, 1152, 1},
      {5, 1000, 2, 0}}},
    {"linear_residual_fwd", "M,I,O,bias", t_linear_residual_fwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 768, 192, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 3072, 768, 1}}},
    {"linear_act_fwd", "M,I,O,bias", t_linear_act_fwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 192, 576, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 384, 1152, 1}}},
    {"linear_bwd", "M,I,O,dinp+2dbias+4nodw", t_linear_bwd, {1e-4, 1e-4},
     {{7, 3, 77, 3}, {197, 192, 576, 3}, {1, 1, 1, 3}, {33, 65, 17, 0}, {394, 384, 1152, 3},
      {5, 1000, 2, 2}, {1000, 7, 5, 1}, {1100, 9, 40, 3},  // 1100: three column-sum chunks
      {197, 192, 576, 7}, {33, 65, 17, 5}}},
    {"linear_bwd_act", "M,I,O,2dbias+4nodw", t_linear_bwd_act, {1e-4, 1e-4},
     {{7, 3, 77, 2}, {197, 768, 192, 2}, {1, 1, 1, 2}, {33, 65, 17, 0}, {1100, 9, 40, 2},
      {197, 768, 192, 6}, {33, 65, 17, 4}}},
    {"linear_act_bwd", "M,I,O,dinp+2nodw", t_linear_act_bwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 192, 576, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 384, 1152, 1},
      {197, 192, 576, 3}}},
    {"layernorm_fwd", "M,C,eps5+2fp32out", t_layernorm_fwd, {1e-5, 1e-5},
     {{197, 192}, {5, 7}, {1, 1}, {1, 3}, {394, 768}, {300, 33}, {1000, 64}, {197, 192, 1},
      {394, 768, 3}, {5, 7, 2}, {9, 1024}, {9, 1280}}},  // the register kernels' widest; past it
    {"layernorm_bwd", "M,C", t_layernorm_bwd, {5e-5, -1},
     {{197, 192}, {5, 7}, {1, 1}, {1, 3}, {394, 768}, {300, 33}, {1000, 64}, {9, 1024}, {9, 1280}}},
    {"add_layernorm_fwd", "M,C", t_add_layernorm_fwd, {1e-5, 1e-5},
     {{197, 192}, {5, 7}, {1, 1}, {394, 768}, {300, 33}, {9, 1024}, {9, 1280}}},
    {"layernorm_bwd_add", "M,C", t_layernorm_bwd_add, {5e-5, -1},
     {{197, 192}, {5, 7}, {1, 1}, {394, 768}, {300, 33}, {9, 1024}, {9, 1280}}},
    {"act_fwd", "count,kind", t_act_fwd, {2e-6, 2e-6},
     {{1, 0}, {7, 0}, {1000, 0}, {197 * 768 + 5, 0}, {7, 1}, {197 * 768 + 5, 1}, {7, 2},
      {1000 * 384 + 3, 2}, {7, 3}, {197 * 768 + 5, 3}}},
    {"act_bwd", "M,F,dbias,kind", t_act_bwd, {1e-5, 1e-5},
     {{1, 1, 1, 0}, {1, 7, 0, 0}, {1000, 3, 1, 0}, {197, 768, 1, 0}, {1100, 9, 1, 0},
      {5, 1000, 0, 0}, {197, 768, 1, 1}, {1, 7, 0, 1}, {256, 384, 1, 2}, {3, 5, 0, 2},
      {197, 768, 1, 3}, {1, 7, 0, 3}}},
    {"attention_fwd", "B,N,H,D,drop", t_attention_fwd, {5e-5, 5e-4},
     {{2, 197, 3, 64}, {1, 5, 1, 7}, {3, 300, 2, 8}, {1, 65, 4, 16}, {1, 1, 2, 3},
      {2, 50, 12, 64}, {1, 70, 2, 80}, {1, 40, 1, 96},  // 80: ViT-H/14; 96: fp32's largest
      {2, 197, 3, 64, 1}, {1, 5, 1, 7, 2}, {3, 130, 2, 8, 2},
      // the mma.sync kernels' other widths (NK 2, 3, 5; D 40 and 72 leave a zero chunk), N = 1
      {1, 100, 2, 32}, {2, 129, 1, 48}, {1, 77, 2, 40, 1}, {1, 1, 2, 16}, {1, 66, 2, 72, 1}}},
    {"attention_bwd", "B,N,H,D,dbias+2drop", t_attention_bwd, {1e-4, 5e-4},
     {{2, 197, 3, 64, 1}, {1, 5, 1, 7, 0}, {3, 300, 2, 8, 1}, {1, 65, 4, 16, 1}, {1, 1, 2, 3, 1},
      {2, 50, 12, 64, 0}, {1, 70, 2, 80, 1}, {1, 40, 1, 96, 1},  // 80: ViT-H/14; 96: fp32's largest
      {2, 197, 3, 64, 3}, {1, 5, 1, 7, 4}, {3, 130, 2, 8, 5},
      {1, 100, 2, 32, 1}, {2, 129, 1, 48, 0}, {1, 77, 2, 40, 3}, {1, 1, 2, 16, 1},
      {1, 66, 2, 72, 3}}},
    {"latent_attention_fwd", "B,N,H,D", t_latent_attention_fwd, {5e-5, 5e-4},
     {{2, 197, 3, 64}, {1, 5, 1, 7}, {3, 300, 2, 8}, {1, 1, 2, 3}, {4, 196, 12, 64},
      {1, 70, 2, 80}, {2, 1025, 1, 33}}},  // 1025: more tokens than the block's 256 threads x 4
    {"latent_attention_bwd", "B,N,H,D,dbias", t_latent_attention_bwd, {1e-4, 5e-4},
     {{2, 197, 3, 64, 1}, {1, 5, 1, 7, 0}, {3, 300, 2, 8, 1}, {1, 1, 2, 3, 1}, {4, 196, 12, 64, 0},
      {1, 70, 2, 80, 1}, {2, 1025, 1, 33, 1}, {64, 17, 2, 16, 1}}},  // 64 x 17: 3 colsum chunks
    {"to_act", "count", t_to_act, {0, 0}, {{1}, {7}, {1000}, {197 * 768 + 5}}},
    {"add", "count", t_add, {0, -1}, {{1}, {1000}, {197 * 192 + 3}}},
    {"drop_path", "rows,cols,row0,N,res", t_drop_path, {0, -1},
     {{1, 1, 0, 1, 1}, {394, 192, 0, 197, 1}, {394, 192, 0, 197, 0}, {99, 77, 197, 50, 1},
      {4000, 3, 200, 1, 0}}},  // samples 200..4199 of one row: past 4095 they count as dropped
    {"dropout", "rows,cols,first,width,act", t_dropout, {0, 0},
     {{1, 1, 0, 1, 0}, {394, 192, 0, 192, 0}, {394, 768, 5, 1536, 1}, {99, 77, 1ll << 33, 80, 0},
      {7, 3, 3, 5, 1}}},  // numbers past 2^32 (a long run's stream positions)
    {"patchify_fwd", "B,S,P", t_patchify_fwd, {0, 0},
     {{2, 32, 16}, {1, 12, 4}, {3, 30, 5}, {1, 224, 16}, {2, 8, 8}}},
    {"patchify_bwd", "B,S,P", t_patchify_bwd, {0, -1},
     {{2, 32, 16}, {1, 12, 4}, {3, 30, 5}, {1, 224, 16}, {2, 8, 8}}},
    {"embed_fwd", "B,N,C,T,2pos_patches", t_embed_fwd, {0, -1},
     {{2, 197, 192, 1, 0}, {1, 5, 7, 1, 0}, {3, 2, 1, 1, 0}, {4, 17, 33, 1, 0},
      {2, 201, 192, 5, 2}, {2, 201, 192, 5, 0}, {3, 6, 7, 5, 2}, {2, 197, 192, 1, 2},
      {2, 196, 192, 0, 0}, {2, 200, 192, 4, 2}}},  // no class token: no prefix, or 4 registers
    {"embed_bwd", "B,N,C,T,dpatch+2pos_patches+4fixed", t_embed_bwd, {0, -1},
     {{2, 197, 192, 1, 1}, {1, 5, 7, 1, 1}, {3, 2, 1, 1, 0}, {4, 17, 33, 1, 1}, {64, 5, 3, 1, 0},
      {2, 201, 192, 5, 3}, {2, 201, 192, 5, 1}, {3, 6, 7, 5, 2}, {2, 197, 192, 1, 3},
      {2, 196, 192, 0, 1}, {2, 200, 192, 4, 3}, {2, 196, 192, 0, 5}, {2, 197, 64, 1, 7}}},
    {"cls_pool_fwd", "B,N,C", t_cls_pool_fwd, {0, -1}, {{2, 197, 192}, {1, 5, 7}, {3, 1, 4}}},
    {"cls_pool_bwd", "B,N,C", t_cls_pool_bwd, {0, -1}, {{2, 197, 192}, {1, 5, 7}, {3, 1, 4}}},
    {"mean_pool_fwd", "B,N,C,T", t_mean_pool_fwd, {0, -1},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 201, 192, 5}, {3, 6, 4, 5},
      {2, 196, 192, 0}}},
    {"mean_pool_bwd", "B,N,C,T", t_mean_pool_bwd, {0, -1},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 201, 192, 5}, {3, 6, 4, 5},
      {2, 196, 192, 0}}},
    {"norm_mean_pool_fwd", "B,N,C,T", t_norm_mean_pool_fwd, {1e-5, 1e-5},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 196, 768, 0}, {3, 6, 33, 5}, {1, 1, 1, 0}}},
    {"norm_mean_pool_bwd", "B,N,C,T", t_norm_mean_pool_bwd, {5e-5, -1},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 196, 768, 0}, {3, 6, 33, 5}, {1, 1, 1, 0},
      {64, 17, 40, 0}}},
    {"qk_norm_fwd", "M,H,D", t_qk_norm_fwd, {1e-5, 1e-5},
     {{197, 3, 64}, {5, 1, 7}, {1, 1, 1}, {300, 2, 33}, {50, 12, 64}}},
    {"qk_norm_bwd", "M,H,D,dbias", t_qk_norm_bwd, {5e-5, 5e-5},
     {{197, 3, 64, 1}, {5, 1, 7, 0}, {1, 1, 1, 1}, {300, 2, 33, 1}, {50, 12, 64, 0},
      {1100, 1, 9, 1}}},
    {"layer_scale_fwd", "rows,cols", t_layer_scale_fwd, {0, -1},
     {{1, 1}, {394, 192}, {99, 77}, {1100, 9}}},
    {"layer_scale_bwd", "rows,cols", t_layer_scale_bwd, {1e-5, -1},
     {{1, 1}, {394, 192}, {99, 77}, {1100, 9}, {1000, 64}}},
    {"cross_entropy_fwd", "B,K,smooth/1000,mix", t_cross_entropy_fwd, {1e-5, -1},
     {{4, 1000, 100, 0}, {1, 10, 0, 0}, {7, 3, 500, 0}, {64, 1000, 100, 0}, {2, 1, 0, 0},
      {64, 1000, 100, 1}, {7, 3, 0, 1}}},
    {"bce_fwd", "B,K,smooth/1000,mix,thresh/1000", t_bce_fwd, {1e-5, -1},
     {{4, 1000, 100, 0, -1}, {1, 10, 0, 0, -1}, {7, 3, 500, 0, -1}, {64, 1000, 100, 1, -1},
      {2, 1, 0, 0, -1}, {64, 1000, 0, 1, 0}, {64, 1000, 100, 1, 300}, {7, 3, 500, 0, 100}}},
    {"cross_entropy_bwd", "B,K,smooth/1000,mix,thresh/1000", t_cross_entropy_bwd, {1e-6, -1},
     {{4, 1000, 100, 0, -1}, {1, 10, 0, 0, -1}, {7, 3, 500, 0, -1}, {64, 1000, 100, 0, -1},
      {2, 1, 0, 0, -1}, {64, 1000, 100, 1, -1}, {7, 3, 0, 1, -1}, {64, 1000, 0, 1, 0},
      {64, 1000, 100, 1, 300}, {7, 3, 500, 0, 100}}},
    {"adamw", "count,t,wd/1000,mask,gscale/1000", t_adamw, {1e-6, -1},
     {{1000, 1, 50, 0}, {7, 10, 0, 0}, {100003, 1000, 50, 0}, {100003, 3, 100, 1},
      {1000, 2, 50, 1, 337}}},
    {"lamb_moments", "count,t,wd/1000,mask,in_place", t_lamb_moments, {0, -1},
     {{1000, 1, 50, 0, 0}, {7, 10, 0, 0, 1}, {100003, 1000, 50, 0, 1}, {100003, 3, 100, 1, 1}}},
    {"lamb_apply", "count,trust*1000", t_lamb_apply, {0, -1},
     {{1, 1000}, {1000, 2345}, {1000003, 17}}},
    {"sgd", "count,momentum/1000,wd/1000,mask,nesterov", t_sgd, {0, -1},
     {{1, 900, 0, 0, 1}, {1000, 900, 50, 0, 0}, {100003, 800, 100, 1, 1}, {7, 0, 0, 0, 0}}},
    {"sumsq", "count", t_sumsq, {1e-12, -1},
     {{1}, {7}, {16384}, {16385}, {1000003}, {5000000}}},
    {"scale", "count", t_scale, {0, -1}, {{1}, {1000}, {1000003}}},
    {"ema", "count,(1-decay)*1e6", t_ema, {0, -1}, {{1, 100}, {1000, 1000}, {1000003, 200}}},
};
#define NTESTS (int)(sizeof kTests / sizeof kTests[0])

// Every op of the table must exist on the backend under test: one NULL would make training
// stop at its first use, so say which here instead.
static int check_table(const vt_backend *be) {
  const struct {
    const char *name;
    const void *fn;
  } ops[] = {
#define OP(f) {#f, (const void *)be->f}
      OP(linear_fwd),        OP(linear_act_fwd),    OP(linear_bwd),    OP(linear_act_bwd),
      OP(linear_bwd_act),    OP(linear_residual_fwd),
      OP(layernorm_fwd),     OP(layernorm_bwd),     OP(add_layernorm_fwd), OP(layernorm_bwd_add),
      OP(act_fwd),          OP(act_bwd),          OP(attention_fwd), OP(attention_bwd),
      OP(latent_attention_fwd), OP(latent_attention_bwd), OP(to_act),
      OP(add),               OP(drop_path),         OP(dropout),       OP(patchify_fwd),
      OP(patchify_bwd),
      OP(embed_fwd),         OP(embed_bwd),         OP(cls_pool_fwd),  OP(cls_pool_bwd),
      OP(mean_pool_fwd),     OP(mean_pool_bwd),     OP(layer_scale_fwd), OP(layer_scale_bwd),
      OP(norm_mean_pool_fwd), OP(norm_mean_pool_bwd),
      OP(qk_norm_fwd),       OP(qk_norm_bwd),
      OP(cross_entropy_fwd), OP(cross_entropy_bwd), OP(bce_fwd),       OP(adamw),
      OP(lamb_moments),      OP(lamb_apply),        OP(sgd),           OP(sumsq),
      OP(scale),             OP(ema),
#undef OP
  };
  int missing = 0;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!ops[i].fn) printf("FAIL: backend %s lacks op %s\n", be->name, ops[i].name), missing++;
  return missing;
}

// FNV-1a: the random inputs of a row depend on its op and shape only, not on which ops ran
// before (a run of one op sees the inputs of the full run).
static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static int wanted(const char *op, int argc, char **argv) {
  int any = 0;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') continue;
    any = 1;
    if (strcmp(argv[i], op) == 0) return 1;
  }
  return !any;
}

int main(int argc, char **argv) {
  int self = 0, max_shapes = 1 << 30, given = 0, only = -1;
  int64_t shape[5] = {0};  // --shape's
  for (int i = 1; i < argc; i++) {
    self |= strcmp(argv[i], "--cpu") == 0;
    if (strncmp(argv[i], "--shapes=", 9) == 0) max_shapes = atoi(argv[i] + 9);
    if (strncmp(argv[i], "--prec=", 7) == 0) {
      for (int p = 0; p < NPREC; p++)
        if (strcmp(argv[i] + 7, kPrecName[p]) == 0) only = p;
      if (only < 0)
        return fprintf(stderr, "test_cuda_ops: --prec wants fp32 or bf16 (have '%s')\n",
                       argv[i] + 7), 2;
    }
    if (strncmp(argv[i], "--shape=", 8) == 0) {
      char *c = argv[i] + 8, *end;
      for (given = 0; given < 5 && *c; given++, c = *end ? end + 1 : end)
        if ((shape[given] = strtoll(c, &end, 10)) < 0 || end == c || (*end && *end != ',')) {
          fprintf(stderr, "test_cuda_ops: --shape wants whole numbers >= 0 separated by commas "
                          "(have '%s')\n", argv[i] + 8);
          return 2;
        }
      if (shape[0] < 1) return fprintf(stderr, "test_cuda_ops: --shape's first value is 0\n"), 2;
    }
  }
  const char *why = NULL;
  const vt_backend *cpu = vt_backend_get(VT_DEVICE_CPU, NULL);
  const vt_backend *gpu = self ? cpu : vt_backend_get(VT_DEVICE_CUDA, &why);
  if (!gpu) {
    printf("SKIP: %s\n", why ? why : "no CUDA backend");
    return 77;
  }
  printf("test_cuda_ops: %s against %s; error = max|%s - %s| / max|%s| per tensor\n", gpu->name,
         cpu->name, gpu->name, cpu->name, cpu->name);
  tc t = {.cpu = cpu, .gpu = gpu};
  int missing = check_table(gpu);
  for (t.prec = 0; t.prec < NPREC; t.prec++) {
    if (only >= 0 && t.prec != only) continue;
    cpu->set_precision(kPrec[t.prec]);
    gpu->set_precision(kPrec[t.prec]);
    for (int i = 0; i < NTESTS; i++) {
      const op_test *o = &kTests[i];
      if (!wanted(o->op, argc, argv) || o->tol[t.prec] < 0) continue;
      t.op = o->op;
      t.tol = o->tol[t.prec];
      const int nshapes = given ? 1 : (int)(sizeof o->shapes / sizeof o->shapes[0]);
      for (int s = 0; s < nshapes && s < max_shapes && (given || o->shapes[s][0] > 0); s++) {
        const int64_t *d = given ? shape : o->shapes[s];
        int ndims = 1, k = snprintf(t.shape, sizeof t.shape, "%s=", o->dims);
        for (const char *c = o->dims; *c; c++) ndims += *c == ',';
        for (int j = 0; j < ndims && j < 5 && k < (int)sizeof t.shape; j++)
          k += snprintf(t.shape + k, sizeof t.shape - (size_t)k, "%s%lld", j ? "," : "",
                        (long long)d[j]);
        // the inputs: this op and shape's own (a given shape's from its values)
        t.stream = given ? name_hash(t.shape) ^ name_hash(o->op)
                         : name_hash(o->op) + 1000u * (uint32_t)s;
        o->run(&t, d);
        release(&t);
      }
    }
  }
  printf("%d checks, %d failed%s; %s\n", t.checks, t.failures,
         missing ? ", ops missing from the table" : "", t.failures || missing ? "FAIL" : "PASS");
  return t.failures || missing ? 1 : 0;
}
