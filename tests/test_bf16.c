// test_bf16.c: the CPU backend's bf16 precision (vt_backend.h), the reference for the CUDA
// backend's bf16 GEMMs.
//  1. vt_bf16_round against an independent rounding: the nearer of the two bfloat16 neighbours
//     of x, ties to the even one, on special values and 2^22 random bit patterns.
//  2. linear forward and backward in bf16 against float64 sums of the rounded operands (so only
//     the fp32 accumulation differs), and far enough from the fp32 op to show rounding happened.
//  3. the MLP backward fused (act_bwd with fc1's bias gradient, linear_act_bwd) gives the very
//     bits of the unfused ops; linear_bwd_act's dinp is linear_bwd's rounded once.
//  4. attention forward and backward in bf16 against float64 with the same rounding points: q,
//     k, v, the probabilities of the P v and P^T dout products, and dout (a bf16 activation,
//     also in delta); dS rounded (a value near a rounding boundary may round the other way: the
//     bias gradient check allows one bf16 step for each); dqkv stored as the bf16 rounding of
//     the reference (an unrounded dS makes 40% of the elements round otherwise), its fp32 values
//     seen through the bias gradient.
//  5. latent attention (the MAP head's) likewise: dq summed in fp32 over the samples with dS
//     rounded, dkv as attention's dqkv.
// Exit 0 = pass. Must not depend on MPI, CUDA or the model.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "vt_backend.h"
#include "vt_ops.h"
#include "vt_rng.h"

static int g_checks, g_fail;

static void expect(int ok, const char *what, double err, double tol) {
  g_checks++;
  g_fail += !ok;
  printf("  %-44s err %.2e tol %.1e  %s\n", what, err, tol, ok ? "ok" : "FAIL");
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// The bf16 value nearest to x, ties to even, computed from its two neighbours in double: lo (x
// cut toward zero) and hi (one bf16 step further out; past the largest bf16 that step is
// infinity, which "sits" at 2^128 for the distance, as IEEE overflow rounding has it).
static float ref_round(float x) {
  if (isnan(x) || isinf(x)) return x;
  const uint32_t lo = bits(x) & 0xffff0000u, hi = lo + 0x10000u;
  const int hi_inf = (hi & 0x7f800000u) == 0x7f800000u;
  const double ax = fabs((double)x), dl = ax - fabs((double)from_bits(lo));
  const double dh = (hi_inf ? ldexp(1.0, 128) : fabs((double)from_bits(hi))) - ax;
  if (dl != dh) return from_bits(dl < dh ? lo : hi);
  return from_bits(((lo >> 16) & 1) ? hi : lo);  // a tie: the even one
}

static void test_rounding(void) {
  printf("rounding:\n");
  // (input bits, expected bits)
  static const uint32_t cases[][2] = {
      {0x00000000u, 0x00000000u}, {0x80000000u, 0x80000000u},  // +-0
      {0x3f800000u, 0x3f800000u}, {0xbf800000u, 0xbf800000u},  // +-1
      {0x3f808000u, 0x3f800000u},  // 1 + 2^-8: a tie, to the even 1
      {0x3f818000u, 0x3f820000u},  // 1 + 3 2^-8: a tie, to the even 1 + 2^-6
      {0x3f808001u, 0x3f810000u},  // just above the tie: up
      {0xbf808000u, 0xbf800000u},  // negative tie
      {0x00800000u, 0x00800000u},  // FLT_MIN
      {0x00000001u, 0x00000000u},  // smallest denormal: to 0
      {0x00008000u, 0x00000000u},  // denormal tie: to the even 0
      {0x00018000u, 0x00020000u},  // denormal tie: to the even neighbour above
      {0x7f7f0000u, 0x7f7f0000u},  // the largest bf16
      {0x7f7f7fffu, 0x7f7f0000u},  // below half a step over it: stays
      {0x7f7f8000u, 0x7f800000u},  // half a step over it: a tie, to the "even" infinity
      {0x7f7fffffu, 0x7f800000u},  // FLT_MAX: infinity
      {0xff7fffffu, 0xff800000u},  // -FLT_MAX
      {0x7f800000u, 0x7f800000u}, {0xff800000u, 0xff800000u},  // +-inf
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const float x = from_bits(cases[i][0]), r = vt_bf16_round(x), w = ref_round(x);
    if (bits(r) != cases[i][1] || bits(w) != cases[i][1]) {
      printf("  %08x: vt_bf16_round %08x, reference %08x, want %08x\n", cases[i][0], bits(r),
             bits(w), cases[i][1]);
      bad++;
    }
  }
  bad += !isnan(vt_bf16_round(NAN)) + !isnan(vt_bf16_round(from_bits(0x7f800001u))) +
         !isnan(vt_bf16_round(from_bits(0xffc00001u)));
  expect(bad == 0, "special values (ties, overflow, NaN, denormal)", bad, 0);
  int64_t mismatch = 0;
  for (uint64_t i = 0; i < (1u << 22); i++) {
    const uint32_t u = (uint32_t)(vt_rng_uniform(99, 1, 0, i) * 4294967296.0);
    const float x = from_bits(u);
    if (isnan(x)) continue;
    const float r = vt_bf16_round(x), w = ref_round(x);
    if (bits(r) != bits(w)) {
      if (mismatch < 5) printf("  vt_bf16_round(%a) = %a, want %a\n", x, r, w);
      mismatch++;
    }
  }
  expect(mismatch == 0, "2^22 random bit patterns", (double)mismatch, 0);
}

// ---- helpers ----------------------------------------------------------------------------

static float *rnd(int64_t n, uint32_t stream) {
  float *p = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = 2.0f * vt_rng_uniform(7, 3, stream, (uint64_t)i) - 1.0f;
  return p;
}
static float *rounded(const float *x, int64_t n) {
  float *p = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = vt_bf16_round(x[i]);
  return p;
}
// x as a bf16 tensor (vt_bf16_bits of each element), and a bf16 tensor's values.
static void *bits_of(const float *x, int64_t n) {
  uint16_t *b = malloc((size_t)n * sizeof(uint16_t));
  for (int64_t i = 0; i < n; i++) b[i] = vt_bf16_bits(x[i]);
  return b;
}
static float *widened(const void *b, int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = vt_bf16_widen(((const uint16_t *)b)[i]);
  return x;
}
// max|a - b| / max|b|
static double nerr(const float *a, const double *b, int64_t n) {
  double md = 0, mb = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs(a[i] - b[i]);
    if (!(d <= md)) md = d;
    if (fabs(b[i]) > mb) mb = fabs(b[i]);
  }
  return mb > 0 ? md / mb : md;
}
static double nerr_f(const float *a, const float *b, int64_t n) {
  double *d = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) d[i] = b[i];
  const double e = nerr(a, d, n);
  free(d);
  return e;
}

// ---- linear --------------------------------------------------------------------------------

static void test_linear(const vt_backend *be, int64_t M, int64_t I, int64_t O) {
  char what[96];
  float *x = rnd(M * I, 1), *w = rnd(O * I, 2), *b = rnd(O, 3), *dy = rnd(M * O, 4);
  float *rx = rounded(x, M * I), *rw = rounded(w, O * I), *rdy = rounded(dy, M * O);
  float *y = malloc((size_t)(M * O) * 4), *y32 = malloc((size_t)(M * O) * 4);
  float *dx = malloc((size_t)(M * I) * 4), *dw = calloc((size_t)(O * I), 4);
  float *db = calloc((size_t)O, 4);
  double *ry = malloc((size_t)(M * O) * 8), *rdx = calloc((size_t)(M * I), 8);
  double *rdw = calloc((size_t)(O * I), 8), *rdb = calloc((size_t)O, 8);
  be->set_precision(VT_PRECISION_FP32);
  vt_linear_fwd(be, y32, x, w, b, M, I, O);
  be->set_precision(VT_PRECISION_BF16);  // inp is a bf16 activation (vt_ops.h)
  float *xb = bits_of(x, M * I);
  vt_linear_fwd(be, y, xb, w, b, M, I, O);
  vt_linear_bwd(be, dx, dw, db, dy, xb, w, M, I, O);
  // linear_act_fwd: the result from the bias rounded to bf16 (autocast's), rounded once to a
  // bf16 activation
  uint16_t *yb = malloc((size_t)(M * O) * sizeof(uint16_t));
  float *rb = rounded(b, O), *yr = malloc((size_t)(M * O) * 4);
  vt_linear_fwd(be, yr, xb, w, rb, M, I, O);
  vt_linear_act_fwd(be, (float *)yb, xb, w, b, M, I, O);
  int64_t differ = 0;
  for (int64_t i = 0; i < M * O; i++) differ += yb[i] != vt_bf16_bits(yr[i]);
  expect(differ == 0, "  ... linear_act_fwd = out of the rounded bias, rounded (differing)",
         (double)differ, 0);
  free(rb), free(yr);
  // linear_bwd_act: dinp rounded once to a bf16 activation, the same weight gradient
  uint16_t *dxb = malloc((size_t)(M * I) * sizeof(uint16_t));
  float *dw2 = calloc((size_t)(O * I), 4);
  vt_linear_bwd_act(be, (float *)dxb, dw2, NULL, dy, xb, w, M, I, O);
  differ = 0;
  for (int64_t i = 0; i < M * I; i++) differ += dxb[i] != vt_bf16_bits(dx[i]);
  for (int64_t i = 0; i < O * I; i++) differ += bits(dw2[i]) != bits(dw[i]);
  expect(differ == 0, "  ... linear_bwd_act = dinp rounded (differing)", (double)differ, 0);
  free(xb), free(yb), free(dxb), free(dw2);
  for (int64_t m = 0; m < M; m++)
    for (int64_t o = 0; o < O; o++) {
      double s = b[o];
      for (int64_t i = 0; i < I; i++) s += (double)rx[m * I + i] * rw[o * I + i];
      ry[m * O + o] = s;
      rdb[o] += dy[m * O + o];  // the bias gradient sums the fp32 dout
      for (int64_t i = 0; i < I; i++) {
        rdx[m * I + i] += (double)rdy[m * O + o] * rw[o * I + i];
        rdw[o * I + i] += (double)rdy[m * O + o] * rx[m * I + i];
      }
    }
  snprintf(what, sizeof what, "linear M,I,O=%lld,%lld,%lld out", (long long)M, (long long)I,
           (long long)O);
  double e = nerr(y, ry, M * O);
  expect(e <= 1e-5, what, e, 1e-5);
  e = nerr_f(y32, y, M * O);
  snprintf(what, sizeof what, "  ... differs from fp32 (rounding happened)");
  expect(e >= 3e-4, what, e, 3e-4);
  e = nerr(dx, rdx, M * I);
  expect(e <= 1e-5, "  ... dinp", e, 1e-5);
  e = nerr(dw, rdw, O * I);
  expect(e <= 1e-5, "  ... dweight", e, 1e-5);
  e = nerr(db, rdb, O);
  expect(e <= 1e-5, "  ... dbias (fp32 dout)", e, 1e-5);
  be->set_precision(VT_PRECISION_FP32);
  free(x), free(w), free(b), free(dy), free(rx), free(rw), free(rdy), free(y), free(y32);
  free(dx), free(dw), free(db), free(ry), free(rdx), free(rdw), free(rdb);
}

// ---- the MLP backward: act_bwd (with fc1's bias gradient) + linear_act_bwd -----------------
// Fused, the GELU backward stores bf16 values and sums the bias gradient itself; unfused, it
// stores fp32 values and linear_bwd sums them and rounds them for its GEMMs. The same bits.

static void test_mlp_fusion(const vt_backend *be, int64_t M, int64_t I, int64_t F) {
  float *fc1 = rnd(M * F, 7), *dy = rnd(M * F, 8), *x = rnd(M * I, 9), *w = rnd(F * I, 10);
  float *g32 = malloc((size_t)(M * F) * 4), *gb = malloc((size_t)(M * F) * 4);
  float *dx[2], *dw[2], *db[2];
  for (int k = 0; k < 2; k++) {
    dx[k] = malloc((size_t)(M * I) * 4), dw[k] = calloc((size_t)(F * I), 4);
    db[k] = calloc((size_t)F, 4);
  }
  for (int64_t i = 0; i < M * F; i++) fc1[i] *= 3.0f;
  void *xb = bits_of(x, M * I), *fb = bits_of(fc1, M * F);  // bf16 activations
  void *gyb = bits_of(dy, M * F);  // act_bwd's dout, as linear_bwd_act makes it
  float *fr = rounded(fc1, M * F), *gyr = rounded(dy, M * F);  // their values, for the fp32 op
  be->set_precision(VT_PRECISION_FP32);
  vt_act_bwd(be, g32, NULL, fr, gyr, M, F, VT_ACT_GELU);
  be->set_precision(VT_PRECISION_BF16);
  vt_linear_bwd(be, dx[0], dw[0], db[0], g32, xb, w, M, I, F);
  vt_act_bwd(be, gb, db[1], fb, gyb, M, F, VT_ACT_GELU);
  vt_linear_act_bwd(be, dx[1], dw[1], gb, xb, w, M, I, F);
  be->set_precision(VT_PRECISION_FP32);
  int64_t differ = 0;
  for (int64_t i = 0; i < M * F; i++) differ += ((uint16_t *)gb)[i] != vt_bf16_bits(g32[i]);
  for (int64_t i = 0; i < M * I; i++) differ += bits(dx[0][i]) != bits(dx[1][i]);
  for (int64_t i = 0; i < F * I; i++) differ += bits(dw[0][i]) != bits(dw[1][i]);
  for (int64_t i = 0; i < F; i++) differ += bits(db[0][i]) != bits(db[1][i]);
  char what[96];
  snprintf(what, sizeof what, "MLP bwd M,I,F=%lld,%lld,%lld fused = unfused (differing)",
           (long long)M, (long long)I, (long long)F);
  expect(differ == 0, what, (double)differ, 0);
  free(xb), free(fb), free(fr), free(fc1), free(dy), free(x), free(w), free(g32), free(gb);
  free(gyb), free(gyr);
  for (int k = 0; k < 2; k++) free(dx[k]), free(dw[k]), free(db[k]);
}

// ---- attention -----------------------------------------------------------------------------

// Whether x lies within 2e-6 (relative) of a point where rounding to bf16 changes direction, and
// the distance between neighbouring bf16 values at x.
static int near_boundary(double x) {
  return vt_bf16_round((float)(x * (1 - 2e-6))) != vt_bf16_round((float)(x * (1 + 2e-6)));
}
static double bf16_step(double x) { return x == 0 ? 0 : ldexp(1.0, ilogb(x) - 7); }

static void test_attention(const vt_backend *be, int64_t B, int64_t N, int64_t H, int64_t D) {
  const int64_t C = H * D, ld = 3 * C, nq = B * N * ld, no = B * N * C, nl = B * H * N;
  const double scale = 1.0 / sqrt((double)D);
  char what[96];
  float *qkv = rnd(nq, 5), *dy = rnd(no, 6);
  for (int64_t i = 0; i < nq; i++) qkv[i] *= 3.0f;  // sharper softmax rows
  float *outb = malloc((size_t)no * 4), *out32 = malloc((size_t)no * 4);  // bf16 out: half used
  float *lse = malloc((size_t)nl * 4), *lse32 = malloc((size_t)nl * 4);
  float *dqkv = malloc((size_t)nq * 4), *db = calloc((size_t)ld, 4);  // dqkv: bf16, half used
  be->set_precision(VT_PRECISION_FP32);
  vt_attention_fwd(be, out32, lse32, qkv, B, N, H, D, NULL);
  be->set_precision(VT_PRECISION_BF16);
  void *qb = bits_of(qkv, nq), *dyb = bits_of(dy, no);  // bf16 activations (vt_ops.h)
  vt_attention_fwd(be, outb, lse, qb, B, N, H, D, NULL);
  vt_attention_bwd(be, dqkv, db, dyb, qb, outb, lse, B, N, H, D, NULL);
  free(qb), free(dyb);
  be->set_precision(VT_PRECISION_FP32);
  float *out = widened(outb, no);
  float *rq = rounded(qkv, nq), *rdy = rounded(dy, no);
  double *rlse = malloc((size_t)nl * 8), *rout = calloc((size_t)no, 8);
  double *rdq = calloc((size_t)nq, 8), *p = malloc((size_t)(N * N) * 8);
  double *slack = calloc((size_t)ld, 8);  // per bias column: what near-boundary roundings allow
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *q = rq + b * N * ld + h * D, *k = q + C, *v = q + 2 * C;
      const float *y = rdy + b * N * C + h * D;
      const float *ob = out + b * N * C + h * D;
      double *l = rlse + (b * H + h) * N, *o = rout + b * N * C + h * D;
      double *gq = rdq + b * N * ld + h * D, *gk = gq + C, *gv = gq + 2 * C;
      for (int64_t i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += (double)q[i * ld + d] * k[j * ld + d];
          p[i * N + j] = s * scale;
          mx = fmax(mx, p[i * N + j]);
        }
        mx = ceil(mx / log(2.0)) * log(2.0);  // up to a power of two of e's scale (vt_ops.h)
        for (int64_t j = 0; j < N; j++) sum += exp(p[i * N + j] - mx);
        l[i] = mx + log(sum);
        // out from the unnormalised probabilities rounded to bf16, as the op rounds them, over
        // their sum; the backward's normalised ones into p
        for (int64_t j = 0; j < N; j++) {
          const double e = vt_bf16_round((float)exp(p[i * N + j] - mx));
          for (int64_t d = 0; d < D; d++) o[i * C + d] += e * v[j * ld + d] / sum;
          p[i * N + j] = exp(p[i * N + j] - l[i]);
        }
      }
      // backward with the bf16 rounding points; delta from dout and the op's stored out
      for (int64_t i = 0; i < N; i++) {
        double delta = 0;
        for (int64_t d = 0; d < D; d++) delta += (double)y[i * C + d] * ob[i * C + d];
        for (int64_t j = 0; j < N; j++) {
          double dp = 0;
          for (int64_t d = 0; d < D; d++) dp += (double)y[i * C + d] * v[j * ld + d];
          const double ds0 = p[i * N + j] * (dp - delta);
          const double ds = vt_bf16_round((float)ds0);
          const double pb = vt_bf16_round((float)p[i * N + j]);
          // A value this close to a bf16 rounding boundary may round the other way in the op
          // (its fp32 value differs by a few ulp): one bf16 step moves the bias gradients by
          // that step times the other GEMM operand.
          const double fq = near_boundary(ds0) ? scale * bf16_step(ds) : 0;
          const double fv = near_boundary(p[i * N + j]) ? bf16_step(pb) : 0;
          for (int64_t d = 0; d < D; d++) {
            slack[h * D + d] += fq * fabs(k[j * ld + d]);
            slack[C + h * D + d] += fq * fabs(q[i * ld + d]);
            slack[2 * C + h * D + d] += fv * fabs(y[i * C + d]);
          }
          for (int64_t d = 0; d < D; d++) {
            gq[i * ld + d] += scale * ds * k[j * ld + d];
            gk[j * ld + d] += scale * ds * q[i * ld + d];
            gv[j * ld + d] += pb * y[i * C + d];
          }
        }
      }
    }
  snprintf(what, sizeof what, "attention B,N,H,D=%lld,%lld,%lld,%lld lse", (long long)B,
           (long long)N, (long long)H, (long long)D);
  double e = nerr(lse, rlse, nl);  // fp32 from exact bf16 operands
  expect(e <= 1e-5, what, e, 1e-5);
  e = nerr(out, rout, no);  // stored in bf16: half a bf16 step, at most 2^-8 relative
  expect(e <= 4e-3, "  ... out (bf16)", e, 4e-3);
  e = nerr_f(out32, out, no);
  expect(e >= 3e-4, "  ... out differs from fp32 (rounding happened)", e, 3e-4);
  // dq, dk and dv separately: p and dS are rounded from values the reference computes in
  // double. dqkv is stored as bf16: each element must be the reference rounded to bf16, except
  // where an fp32 difference of a few ulp meets a rounding boundary (at most 1% of the elements
  // that are not tiny; an operand left unrounded moves the fp32 values by ~1.5e-3 and flips far
  // more). The fp32 values before that rounding show in the bias gradient, their column sums,
  // measured against the column sums of magnitudes (k's bias gradient is zero in exact
  // arithmetic: a shift of all of a query's scores leaves its softmax unchanged).
  double *part = malloc((size_t)nq * 8), *rdb = calloc((size_t)C, 8), *rab = calloc((size_t)C, 8);
  float *pf = malloc((size_t)nq * 4);
  static const char *const names[3] = {"dq", "dk", "dv"};
  for (int w = 0; w < 3; w++) {
    int64_t n = 0, large = 0, apart = 0;
    double mx = 0;
    for (int64_t c = 0; c < C; c++) rdb[c] = rab[c] = 0;
    for (int64_t r = 0; r < B * N; r++)
      for (int64_t c = w * C; c < (w + 1) * C; c++, n++) {
        part[n] = rdq[r * ld + c], pf[n] = vt_bf16_widen(((const uint16_t *)dqkv)[r * ld + c]);
        rdb[c - w * C] += rdq[r * ld + c], rab[c - w * C] += fabs(rdq[r * ld + c]);
        mx = fmax(mx, fabs(part[n]));
      }
    for (int64_t i = 0; i < n; i++)
      if (fabs(part[i]) >= 1e-2 * mx) large++, apart += bits(pf[i]) != bits(vt_bf16_round((float)part[i]));
    snprintf(what, sizeof what, "  ... %s (bf16): elements rounded otherwise", names[w]);
    const double frac = large ? (double)apart / (double)large : 0;
    expect(frac <= 1e-2, what, frac, 1e-2);
    const double tol = 1e-5;
    double ed = 0, ea = 0;
    for (int64_t c = 0; c < C; c++)
      ed = fmax(ed, fabs(db[w * C + c] - rdb[c]) - slack[w * C + c]), ea = fmax(ea, rab[c]);
    e = ea > 0 ? ed / ea : ed;
    snprintf(what, sizeof what, "  ... %s bias gradient (fp32 sums)", names[w]);
    expect(e <= tol, what, e, tol);
  }
  free(part), free(pf), free(rdb), free(rab), free(qkv), free(dy), free(out), free(outb), free(out32);
  free(lse), free(lse32), free(dqkv), free(db), free(rq), free(rdy), free(rlse), free(rout);
  free(rdq), free(p), free(slack);
}

// ---- latent attention (MAP pooling): one query per head, the same rounding points -----------

static void test_latent_attention(const vt_backend *be, int64_t B, int64_t N, int64_t H,
                                  int64_t D) {
  const int64_t C = H * D, ld = 2 * C, nkv = B * N * ld, no = B * C, nl = B * H;
  const double scale = 1.0 / sqrt((double)D);
  char what[96];
  float *q = rnd(C, 7), *kv = rnd(nkv, 8), *dy = rnd(no, 9);
  for (int64_t i = 0; i < C; i++) q[i] *= 3.0f;  // sharper softmax rows
  float *outb = malloc((size_t)no * 4), *out32 = malloc((size_t)no * 4);
  float *lse = malloc((size_t)nl * 4), *lse32 = malloc((size_t)nl * 4);
  float *dq = malloc((size_t)C * 4), *dkv = malloc((size_t)nkv * 4), *db = calloc((size_t)ld, 4);
  be->set_precision(VT_PRECISION_FP32);
  vt_latent_attention_fwd(be, out32, lse32, q, kv, B, N, H, D);
  be->set_precision(VT_PRECISION_BF16);
  void *qb = bits_of(q, C), *kvb = bits_of(kv, nkv), *dyb = bits_of(dy, no);
  vt_latent_attention_fwd(be, outb, lse, qb, kvb, B, N, H, D);
  vt_latent_attention_bwd(be, dq, dkv, db, dyb, qb, kvb, outb, lse, B, N, H, D);
  free(qb), free(kvb), free(dyb);
  be->set_precision(VT_PRECISION_FP32);
  float *out = widened(outb, no), *rq = rounded(q, C), *rkv = rounded(kv, nkv);
  float *rdy = rounded(dy, no);
  double *rlse = malloc((size_t)nl * 8), *rout = calloc((size_t)no, 8), *p = malloc((size_t)N * 8);
  double *rdq = calloc((size_t)C, 8), *rdkv = calloc((size_t)nkv, 8);
  double *slack = calloc((size_t)(ld + C), 8);  // bias columns, then dq's: near-boundary room
  double *magq = calloc((size_t)C, 8);  // dq's sums of magnitudes
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *qh = rq + h * D, *y = rdy + b * C + h * D, *ob = out + b * C + h * D;
      double mx = -INFINITY, sum = 0, delta = 0, *l = rlse + b * H + h;
      for (int64_t t = 0; t < N; t++) {
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += (double)qh[d] * rkv[(b * N + t) * ld + h * D + d];
        p[t] = s * scale, mx = fmax(mx, p[t]);
      }
      for (int64_t t = 0; t < N; t++) sum += exp(p[t] - mx);
      *l = mx + log(sum);
      for (int64_t t = 0; t < N; t++) {  // out as attention's; p normalised for the backward
        const double e = vt_bf16_round((float)exp(p[t] - mx));
        for (int64_t d = 0; d < D; d++)
          rout[b * C + h * D + d] += e * rkv[(b * N + t) * ld + C + h * D + d] / sum;
        p[t] = exp(p[t] - *l);
      }
      for (int64_t d = 0; d < D; d++) delta += (double)y[d] * ob[d];
      for (int64_t t = 0; t < N; t++) {
        const float *k = rkv + (b * N + t) * ld + h * D, *v = k + C;
        double dp = 0;
        for (int64_t d = 0; d < D; d++) dp += (double)y[d] * v[d];
        const double ds0 = p[t] * (dp - delta), ds = vt_bf16_round((float)ds0);
        const double pb = vt_bf16_round((float)p[t]);
        const double fq = near_boundary(ds0) ? scale * bf16_step(ds) : 0;
        const double fv = near_boundary(p[t]) ? bf16_step(pb) : 0;
        double *gk = rdkv + (b * N + t) * ld + h * D, *gv = gk + C;
        for (int64_t d = 0; d < D; d++) {
          gk[d] = scale * ds * qh[d], gv[d] = pb * y[d];
          rdq[h * D + d] += scale * ds * k[d], magq[h * D + d] += fabs(scale * ds * k[d]);
          slack[h * D + d] += fq * fabs(qh[d]), slack[C + h * D + d] += fv * fabs(y[d]);
          slack[ld + h * D + d] += fq * fabs(k[d]);
        }
      }
    }
  snprintf(what, sizeof what, "latent attention B,N,H,D=%lld,%lld,%lld,%lld lse", (long long)B,
           (long long)N, (long long)H, (long long)D);
  double e = nerr(lse, rlse, nl);
  expect(e <= 1e-5, what, e, 1e-5);
  e = nerr(out, rout, no);  // stored in bf16: half a bf16 step, at most 2^-8 relative
  expect(e <= 4e-3, "  ... out (bf16)", e, 4e-3);
  e = nerr_f(out32, out, no);
  expect(e >= 3e-4, "  ... out differs from fp32 (rounding happened)", e, 3e-4);
  // dq (fp32, summed over the samples) against the reference with dS rounded, with room for
  // the dS values next to a rounding boundary, relative to the sums of magnitudes.
  double ed = 0, ea = 0;
  for (int64_t c = 0; c < C; c++)
    ed = fmax(ed, fabs(dq[c] - rdq[c]) - slack[ld + c]), ea = fmax(ea, magq[c]);
  e = ea > 0 ? ed / ea : ed;
  expect(e <= 1e-5, "  ... dq (fp32 sums, dS rounded)", e, 1e-5);
  // dkv stored as bf16: the reference rounded, but for at most 1% of the elements that are not
  // tiny; its fp32 values through the kv bias gradient (column sums), as attention's test does.
  int64_t large = 0, apart = 0;
  double mx = 0;
  for (int64_t i = 0; i < nkv; i++) mx = fmax(mx, fabs(rdkv[i]));
  for (int64_t i = 0; i < nkv; i++)
    if (fabs(rdkv[i]) >= 1e-2 * mx)
      large++, apart += ((const uint16_t *)dkv)[i] != vt_bf16_bits((float)rdkv[i]);
  const double frac = large ? (double)apart / (double)large : 0;
  expect(frac <= 1e-2, "  ... dkv (bf16): elements rounded otherwise", frac, 1e-2);
  ed = 0, ea = 0;
  for (int64_t c = 0; c < ld; c++) {
    double sum = 0, mag = 0;
    for (int64_t r = 0; r < B * N; r++) sum += rdkv[r * ld + c], mag += fabs(rdkv[r * ld + c]);
    ed = fmax(ed, fabs(db[c] - sum) - slack[c]), ea = fmax(ea, mag);
  }
  e = ea > 0 ? ed / ea : ed;
  expect(e <= 1e-5, "  ... kv bias gradient (fp32 sums)", e, 1e-5);
  free(q), free(kv), free(dy), free(outb), free(out32), free(lse), free(lse32), free(dq);
  free(dkv), free(db), free(out), free(rq), free(rkv), free(rdy), free(rlse), free(rout), free(p);
  free(rdq), free(rdkv), free(slack), free(magq);
}

int main(void) {
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  test_rounding();
  printf("ops in bf16 against float64 on the rounded operands:\n");
  test_linear(be, 7, 3, 5);
  test_linear(be, 197, 192, 576);
  test_linear(be, 33, 1000, 17);
  test_mlp_fusion(be, 7, 5, 12);
  test_mlp_fusion(be, 197, 64, 256);
  test_attention(be, 2, 17, 3, 8);
  test_attention(be, 1, 65, 2, 32);
  test_attention(be, 2, 5, 1, 7);
  test_latent_attention(be, 3, 17, 3, 8);
  test_latent_attention(be, 2, 197, 2, 32);
  printf("%d checks, %d failed: %s\n", g_checks, g_fail, g_fail ? "FAIL" : "PASS");
  return g_fail != 0;
}
