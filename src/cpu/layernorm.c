// layernorm.c: LayerNorm forward and backward over the last dimension, and the column-sum
// helper shared with the Linear bias gradient.
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

void vt_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t M, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float *x = inp + m * C;
    float s = 0.0f;
    for (int64_t c = 0; c < C; c++) s += x[c];
    float mu = s / (float)C, var = 0.0f;
    for (int64_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    float r = 1.0f / sqrtf(var / (float)C + VT_LAYERNORM_EPS);
    float *y = out + m * C;
    for (int64_t c = 0; c < C; c++) y[c] = (x[c] - mu) * r * weight[c] + bias[c];
    mean[m] = mu;
    rstd[m] = r;
  }
}

void vt_cpu_layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int64_t M, int64_t C) {
  // dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight.
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
    for (int64_t c = 0; c < C; c++) dx[c] = r * (dy[c] * weight[c] - sg - (x[c] - mu) * r * sgx);
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
