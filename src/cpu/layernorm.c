// layernorm.c: LayerNorm forward and backward over the last dimension, their forms fused with
// the residual add, and the column-sum helper shared with the Linear bias gradient.
#include <math.h>

#include "../vt_ops.h"
#include "cpu.h"

void vt_cpu_colsum_acc(float *out, const float *x, int64_t M, int64_t C) {
  // Threads own blocks of 16 columns (one cache line) and walk all rows in order, so the sum
  // does not depend on the thread count.
  const int64_t blk = 16, nblk = (C + blk - 1) / blk;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t c0 = b * blk, c1 = c0 + blk < C ? c0 + blk : C;
    float acc[16] = {0};
    for (int64_t m = 0; m < M; m++)
      for (int64_t c = c0; c < c1; c++) acc[c - c0] += x[m * C + c];
    for (int64_t c = c0; c < c1; c++) out[c] += acc[c - c0];
  }
}

// Row m: y = (x - mean) * rstd * weight + bias (bf16 storage in bf16 precision), mean and rstd
// saved.
static void ln_row(float *out, int64_t m, float *mean, float *rstd, const float *x,
                   const float *weight, const float *bias, int64_t C, int bf16) {
  float s = 0.0f;
  for (int64_t c = 0; c < C; c++) s += x[c];
  float mu = s / (float)C, var = 0.0f;
  for (int64_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
  float r = 1.0f / sqrtf(var / (float)C + VT_LAYERNORM_EPS);
  for (int64_t c = 0; c < C; c++)
    vt_cpu_put(out, m * C + c, (x[c] - mu) * r * weight[c] + bias[c], bf16);
  mean[m] = mu;
  rstd[m] = r;
}

void vt_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t M, int64_t C) {
  const int bf16 = vt_cpu_bf16();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) ln_row(out, m, mean, rstd, inp + m * C, weight, bias, C, bf16);
}

void vt_cpu_add_layernorm_fwd(float *sum, float *out, float *mean, float *rstd, const float *a,
                              const float *b, const float *weight, const float *bias, int64_t M,
                              int64_t C) {
  const int bf16 = vt_cpu_bf16();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float *x = sum + m * C;
    for (int64_t c = 0; c < C; c++) x[c] = a[m * C + c] + b[m * C + c];
    ln_row(out, m, mean, rstd, x, weight, bias, C, bf16);
  }
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, written or (add)
// added; then the parameter gradients.
static void ln_bwd(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                   const float *weight, const float *mean, const float *rstd, int64_t M,
                   int64_t C, int add) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float *x = inp + m * C, *dy = dout + m * C;
    float mu = mean[m], r = rstd[m], sg = 0.0f, sgx = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float g = dy[c] * weight[c];
      sg += g;
      sgx += g * (x[c] - mu) * r;
    }
    sg /= (float)C;
    sgx /= (float)C;
    float *dx = dinp + m * C;
    for (int64_t c = 0; c < C; c++) {
      const float v = r * (dy[c] * weight[c] - sg - (x[c] - mu) * r * sgx);
      dx[c] = add ? dx[c] + v : v;
    }
  }
  // Parameter gradients: column sums of dout * xhat and dout, in fixed order (see colsum).
  const int64_t blk = 16, nblk = (C + blk - 1) / blk;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t c0 = b * blk, c1 = c0 + blk < C ? c0 + blk : C;
    float aw[16] = {0}, ab[16] = {0};
    for (int64_t m = 0; m < M; m++) {
      float mu = mean[m], r = rstd[m];
      for (int64_t c = c0; c < c1; c++) {
        float dy = dout[m * C + c];
        aw[c - c0] += dy * (inp[m * C + c] - mu) * r;
        ab[c - c0] += dy;
      }
    }
    for (int64_t c = c0; c < c1; c++) {
      dweight[c] += aw[c - c0];
      dbias[c] += ab[c - c0];
    }
  }
}

void vt_cpu_layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int64_t M, int64_t C) {
  ln_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C, 0);
}

void vt_cpu_layernorm_bwd_add(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean,
                              const float *rstd, int64_t M, int64_t C) {
  ln_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C, 1);
}
