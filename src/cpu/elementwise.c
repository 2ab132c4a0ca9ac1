// elementwise.c: GELU (exact erf form), the residual add, sum of squares and scaling.
#include <math.h>

#include "cpu.h"

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

void vt_cpu_gelu_fwd(float *out, const float *inp, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + erff(x * INV_SQRT2));
  }
}

void vt_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t count) {
  // d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    float x = inp[i];
    float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
    float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
    dinp[i] = dout[i] * (cdf + x * pdf);
  }
}

void vt_cpu_add(float *out, const float *a, const float *b, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}

double vt_cpu_sumsq(const float *x, int64_t count) {
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
  return total;
}

void vt_cpu_scale(float *x, float alpha, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) x[i] *= alpha;
}
