// elementwise.c: the activations (GELU in its erf, tanh and quick forms, tanh), the activation cast
// (to_act), the residual add, drop path, dropout, sum of squares and scaling.
// GELU uses a branch-free exp (cpu.h) and erf so the compiler vectorises the loops: libm's erff
// and expf are scalar calls, and made GELU 17% of a ViT-Ti step (tests/bench_cpu.sh); so does
// a loop per activation kind (ACT_FWD_LOOPS).
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "vt_rng.h"

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

// Phi(x) = (1 + erf(x / sqrt 2)) / 2 with erf from Abramowitz & Stegun 7.1.26 (absolute error
// < 1.5e-7), and phi(x) = exp(-x^2 / 2) / sqrt(2 pi) from the same exponential.
static inline void normal_cdf_pdf(float x, float *cdf, float *pdf) {
  const float z = fabsf(x) * INV_SQRT2, e = vt_cpu_exp_nonpos(-z * z);
  const float t = 1.0f / (1.0f + 0.3275911f * z);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float erf_abs = 1.0f - q * t * e;
  *cdf = 0.5f + 0.5f * copysignf(erf_abs, x);
  *pdf = INV_SQRT_2PI * e;
}

// The activation (vt_act) and its derivative at x. GELU's erf form: x Phi(x) and
// Phi(x) + x phi(x). Its tanh form: y = x (1 + t) / 2 with t = tanh(u),
// u = sqrt(2/pi) (x + 0.044715 x^3), and y' = (1 + t) / 2 + x (1 - t^2) sqrt(2/pi)
// (1 + 3 * 0.044715 x^2) / 2 (PyTorch's formulas), with 1 + t and 1 - t^2 from e = exp(-2|u|)
// without cancellation: 1 + t = 2 / (1 + e) for u >= 0, 2e / (1 + e) below, and
// 1 - t^2 = 4e / (1 + e)^2. tanh: t = (1 - e) / (1 + e) with the sign of x, e = exp(-2|x|), and
// 1 - t^2 as above. Quick GELU (CLIP's): x s with s = sigmoid(1.702 x) and y' = s + 1.702 x
// s (1 - s), from e = exp(-|1.702 x|): s = 1 / (1 + e) for x >= 0, e / (1 + e) below, and
// s (1 - s) = e / (1 + e)^2. Unused results cost nothing once inlined; the loops below branch on
// a loop-invariant kind.
#define GELU_K0 0.79788456080286535588f  // sqrt(2/pi)
#define GELU_K1 0.044715f
#define QUICK_GELU_K 1.702f
static inline void act_eval(float x, int kind, float *y, float *dy) {
  if (kind == 3) {
    const float e = vt_cpu_exp_nonpos(-QUICK_GELU_K * fabsf(x)), inv = 1.0f / (1.0f + e);
    const float s = x >= 0.0f ? inv : e * inv;
    *y = x * s;
    *dy = s + QUICK_GELU_K * x * e * inv * inv;
    return;
  }
  if (kind == 2) {
    const float e = vt_cpu_exp_nonpos(-2.0f * fabsf(x)), inv = 1.0f / (1.0f + e);
    *y = copysignf((1.0f - e) * inv, x);
    *dy = 4.0f * e * inv * inv;
    return;
  }
  if (kind == 1) {
    const float u = GELU_K0 * (x + GELU_K1 * x * x * x), e = vt_cpu_exp_nonpos(-2.0f * fabsf(u));
    const float inv = 1.0f / (1.0f + e), one_plus_t = 2.0f * (u >= 0.0f ? inv : e * inv);
    const float sech2 = 4.0f * e * inv * inv;
    *y = 0.5f * x * one_plus_t;
    *dy = 0.5f * one_plus_t + 0.5f * x * sech2 * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
    return;
  }
  float cdf, pdf;
  normal_cdf_pdf(x, &cdf, &pdf);
  *y = x * cdf;
  *dy = cdf + x * pdf;
}

// The activation loops, one per kind and storage (fp32, or bf16 activations: vt_ops.h), so that
// no branch is left inside any of them: GCC does not vectorise a loop with control flow in it
// (a branch on the kind, or on the storage, which picks between two arrays' loads), and a
// vectorised loop computes each element with the very operations of the scalar one (the build's
// -fno-trapping-math lets it turn the float selects into blends; no FMA contraction under
// -std=c11), so the bits stay the same; on AVX2 the forward took 5.3x less time, the backward
// 3.4x (ViT-Ti/16, tests/bench_cpu).
// ACT_LOOP: one such loop, element i's activation at X with its value y and derivative dy, then
// STORE; ACT_BY_KIND: LOOPS expanded for the kind at hand (a literal inside each loop).
#define ACT_LOOP(KIND, X, STORE)                                               \
  _Pragma("omp parallel for simd schedule(static)")                            \
  for (int64_t i = 0; i < count; i++) {                                        \
    float y, dy;                                                               \
    act_eval(X, KIND, &y, &dy);                                                \
    STORE;                                                                     \
  }
#define ACT_BY_KIND(LOOPS)                                                     \
  switch (kind) {                                                              \
    case 1: LOOPS(1); break;                                                   \
    case 2: LOOPS(2); break;                                                   \
    case 3: LOOPS(3); break;                                                   \
    default: LOOPS(0);                                                         \
  }

void vt_cpu_act_fwd(float *out, const float *inp, int64_t count, int kind) {
  const int bf16 = vt_cpu_bf16();  // inp and out are then bf16 activations (vt_ops.h)
  const uint16_t *xb = (const uint16_t *)inp;
  uint16_t *ob = (uint16_t *)out;
#define ACT_FWD_LOOPS(KIND)                                                    \
  if (bf16) {                                                                  \
    ACT_LOOP(KIND, vt_bf16_widen(xb[i]), ob[i] = vt_bf16_bits(y))              \
  } else {                                                                     \
    ACT_LOOP(KIND, inp[i], out[i] = y)                                         \
  }
  ACT_BY_KIND(ACT_FWD_LOOPS)
}

void vt_cpu_act_bwd(float *dinp, float *dbias, const float *inp, const float *dout, int64_t M,
                    int64_t F, int kind) {
  // dout * act'(x). In bf16 inp, dout and dinp are bf16 activations (vt_ops.h): the fp32
  // values go to the scratch first, for the bias gradient.
  const int64_t count = M * F;
  const int bf16 = vt_cpu_bf16();
  float *d = bf16 ? vt_cpu_scratch((size_t)count) : dinp;
  const uint16_t *xb = (const uint16_t *)inp, *gb = (const uint16_t *)dout;
#define ACT_BWD_LOOPS(KIND)                                                    \
  if (bf16) {                                                                  \
    ACT_LOOP(KIND, vt_bf16_widen(xb[i]), d[i] = vt_bf16_widen(gb[i]) * dy)     \
  } else {                                                                     \
    ACT_LOOP(KIND, inp[i], d[i] = dout[i] * dy)                                \
  }
  ACT_BY_KIND(ACT_BWD_LOOPS)
  if (dbias) vt_cpu_colsum_acc(dbias, d, M, F);
  if (!bf16) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) vt_cpu_put(dinp, i, d[i], 1);
}

void vt_cpu_to_act(float *dst, const float *src, int64_t count) {
  const int bf16 = vt_cpu_bf16();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) vt_cpu_put(dst, i, src[i], bf16);
}

void vt_cpu_add(float *out, const float *a, const float *b, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}

void vt_cpu_drop_path(float *out, const float *x, const float *res, int64_t rows, int64_t cols,
                      const vt_drop_mask *mask) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t b = (mask->row0 + r) / mask->rows_per_sample;
    const int kept = b < VT_DROP_PATH_MAX_SAMPLES && (mask->keep[b >> 5] >> (b & 31) & 1u);
    const float s = mask->scale;
    float *o = out + r * cols;
    const float *xr = x + r * cols, *rr = res ? res + r * cols : NULL;
    for (int64_t c = 0; c < cols; c++) {
      const float branch = kept ? xr[c] * s : 0.0f;
      o[c] = rr ? (kept ? rr[c] + branch : rr[c]) : branch;
    }
  }
}

// The uniforms of numbers 4 * blk0 .. 4 * (blk0 + nblk) - 1 of stream (key, hi, lo) into u:
// one call of vt_rng.h's inline rounds per four numbers.
#define DROPOUT_BLOCKS 64
static void dropout_uniforms(float *u, uint64_t key, uint32_t hi, uint32_t lo, uint64_t blk0,
                             int nblk) {
  for (int b = 0; b < nblk; b++) {
    const vt_philox_ctr c = vt_rng_block_inline(key, hi, lo, blk0 + (uint64_t)b);
    for (int k = 0; k < 4; k++) u[4 * b + k] = vt_rng_unit(c.v[k]);
  }
}

// Elements at .. at + len - 1 of x into out, x * scale where numbers n0 .. n0 + len - 1 of the
// mask's stream keep them, else 0, in pieces of whole Philox blocks; bf16: x and out bf16
// activations. One thread.
static void dropout_span(float *out, const float *x, int64_t at, int64_t len, uint64_t n0,
                         const vt_dropout_mask *mask, int bf16) {
  const uint32_t stream = vt_hash_name("dropout");
  const float p = mask->p, s = mask->scale;
  const uint64_t end = n0 + (uint64_t)len;
  float u[4 * DROPOUT_BLOCKS];
  for (uint64_t blk = n0 >> 2; blk << 2 < end; blk += DROPOUT_BLOCKS) {
    const uint64_t left = ((end + 3) >> 2) - blk;
    const int nblk = left < DROPOUT_BLOCKS ? (int)left : DROPOUT_BLOCKS;
    dropout_uniforms(u, mask->seed, stream, mask->site, blk, nblk);
    const uint64_t lo = blk << 2 > n0 ? blk << 2 : n0;
    const uint64_t hi = (blk + (uint64_t)nblk) << 2 < end ? (blk + (uint64_t)nblk) << 2 : end;
    const float *ul = u + (lo - (blk << 2));  // the uniform of number lo
    const int64_t i0 = at + (int64_t)(lo - n0), n = (int64_t)(hi - lo);
    if (bf16) {
      for (int64_t j = 0; j < n; j++)
        vt_cpu_put(out, i0 + j, ul[j] >= p ? vt_cpu_get(x, i0 + j, 1) * s : 0.0f, 1);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; j++) out[i0 + j] = ul[j] >= p ? x[i0 + j] * s : 0.0f;
    }
  }
}

void vt_cpu_dropout(float *out, const float *x, int64_t rows, int64_t cols,
                    const vt_dropout_mask *mask, int act) {
  const int bf16 = act && vt_cpu_bf16();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++)
    dropout_span(out, x, r * cols, cols, (uint64_t)(mask->first + r * mask->width), mask, bf16);
}

void vt_cpu_dropout_fp32(float *x, int64_t len, uint64_t n0, const vt_dropout_mask *mask) {
  dropout_span(x, x, 0, len, n0, mask, 0);
}

void vt_cpu_layer_scale_fwd(float *out, const float *x, const float *gamma, int64_t rows,
                            int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[r * cols + c] = x[r * cols + c] * gamma[c];
}

void vt_cpu_layer_scale_bwd(float *dx, float *dgamma, const float *dout, const float *x,
                            const float *gamma, int64_t rows, int64_t cols) {
  // dgamma first: dx may alias dout.
  const int64_t count = rows * cols;
  float *prod = vt_cpu_scratch((size_t)count);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) prod[i] = dout[i] * x[i];
  vt_cpu_colsum_acc(dgamma, prod, rows, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dx[r * cols + c] = dout[r * cols + c] * gamma[c];
}

void vt_cpu_sumsq(double *out, const float *x, int64_t count) {
  // Fixed chunks summed in order: the same result for any thread count.
  const int64_t chunk = 1 << 16, nchunk = (count + chunk - 1) / chunk;
  double total = 0.0;
  for (int64_t c0 = 0; c0 < nchunk; c0 += 64) {
    double part[64] = {0};
    int64_t c1 = c0 + 64 < nchunk ? c0 + 64 : nchunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = c0; c < c1; c++) {
      int64_t i0 = c * chunk, i1 = i0 + chunk < count ? i0 + chunk : count;
      double s = 0.0;
      for (int64_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
      part[c - c0] = s;
    }
    for (int64_t c = c0; c < c1; c++) total += part[c - c0];
  }
  *out = total;
}

void vt_cpu_scale(float *x, float alpha, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) x[i] *= alpha;
}
