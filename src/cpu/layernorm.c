// layernorm.c: LayerNorm forward and backward over the last dimension, their forms fused with
// the residual add, the LayerNorm-then-mean pooling of a gap head, QK-norm (a LayerNorm per head
// of q and k inside qkv), and the column-sum helper shared with the Linear bias gradient.
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../vt_ops.h"
#include "cpu.h"

// Column sums that do not depend on the thread count: each column is summed over all rows in
// order. Inside a parallel region, the calling thread's columns [*c0, *c1): a run of whole
// 16-column blocks. The callers walk the rows across up to COL_SPAN of their columns at a time
// (contiguous reads that vectorise; a block at a time read one cache line per row, C floats
// apart).
#define COL_SPAN 1024
static void thread_cols(int64_t C, int64_t *c0, int64_t *c1) {
#ifdef _OPENMP
  const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
  const int64_t nt = 1, t = 0;
#endif
  const int64_t blk = 16, nblk = (C + blk - 1) / blk, end = nblk * (t + 1) / nt * blk;
  *c0 = nblk * t / nt * blk;
  *c1 = end < C ? end : C;
}

void vt_cpu_colsum_acc(float *out, const float *x, int64_t M, int64_t C) {
#pragma omp parallel
  {
    int64_t c_beg, c_end;
    thread_cols(C, &c_beg, &c_end);
    float acc[COL_SPAN];
    for (int64_t c0 = c_beg; c0 < c_end; c0 += COL_SPAN) {
      const int64_t w = c_end - c0 < COL_SPAN ? c_end - c0 : COL_SPAN;
      for (int64_t c = 0; c < w; c++) acc[c] = 0.0f;
      for (int64_t m = 0; m < M; m++) {
        const float *row = x + m * C + c0;
        for (int64_t c = 0; c < w; c++) acc[c] += row[c];
      }
      for (int64_t c = 0; c < w; c++) out[c0 + c] += acc[c];
    }
  }
}

// Row m: y = (x - mean) * rstd * weight + bias (bf16 storage in bf16 precision), mean and rstd
// saved.
static void ln_row(float *out, int64_t m, float *mean, float *rstd, const float *x,
                   const float *weight, const float *bias, int64_t C, int bf16, float eps) {
  float s = 0.0f;
  for (int64_t c = 0; c < C; c++) s += x[c];
  float mu = s / (float)C, var = 0.0f;
  for (int64_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
  float r = 1.0f / sqrtf(var / (float)C + eps);
  for (int64_t c = 0; c < C; c++)
    vt_cpu_put(out, m * C + c, (x[c] - mu) * r * weight[c] + bias[c], bf16);
  mean[m] = mu;
  rstd[m] = r;
}

void vt_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t M, int64_t C,
                          float eps, int act) {
  const int bf16 = act && vt_cpu_bf16();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++)
    ln_row(out, m, mean, rstd, inp + m * C, weight, bias, C, bf16, eps);
}

void vt_cpu_add_layernorm_fwd(float *sum, float *out, float *mean, float *rstd, const float *a,
                              const float *b, const float *weight, const float *bias, int64_t M,
                              int64_t C, float eps) {
  const int bf16 = vt_cpu_bf16();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float *x = sum + m * C;
    for (int64_t c = 0; c < C; c++) x[c] = a[m * C + c] + b[m * C + c];
    ln_row(out, m, mean, rstd, x, weight, bias, C, bf16, eps);
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
#pragma omp parallel
  {
    int64_t c_beg, c_end;
    thread_cols(C, &c_beg, &c_end);
    float aw[COL_SPAN], ab[COL_SPAN];
    for (int64_t c0 = c_beg; c0 < c_end; c0 += COL_SPAN) {
      const int64_t w = c_end - c0 < COL_SPAN ? c_end - c0 : COL_SPAN;
      for (int64_t c = 0; c < w; c++) aw[c] = ab[c] = 0.0f;
      for (int64_t m = 0; m < M; m++) {
        const float mu = mean[m], r = rstd[m], *dy = dout + m * C + c0, *x = inp + m * C + c0;
        for (int64_t c = 0; c < w; c++) {
          aw[c] += dy[c] * (x[c] - mu) * r;
          ab[c] += dy[c];
        }
      }
      for (int64_t c = 0; c < w; c++) {
        dweight[c0 + c] += aw[c];
        dbias[c0 + c] += ab[c];
      }
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

// QK-norm: rows of D values inside qkv (M, 3HD): row j of token m (j < H: q head j, else k head
// j - H) starts at m * 3HD + j * D. The same two passes and rounding points as ln_row.
// A row's mean and rstd as ln_row computes them (two passes, float sums in column order).
static void ln_stats(const float *x, int64_t C, float eps, float *mean, float *rstd) {
  float s = 0.0f;
  for (int64_t c = 0; c < C; c++) s += x[c];
  const float mu = s / (float)C;
  float var = 0.0f;
  for (int64_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
  *mean = mu;
  *rstd = 1.0f / sqrtf(var / (float)C + eps);
}

// Per sample: every patch token's statistics, then each column's sum of xhat over the tokens in
// order, divided by their count.
void vt_cpu_norm_mean_pool_fwd(float *out, float *pooled, float *mean, float *rstd,
                               const float *x, const float *weight, const float *bias, int64_t B,
                               int64_t N, int64_t T, int64_t C, float eps) {
  const int bf16 = vt_cpu_bf16();
  const int64_t Np = N - T;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; b++) {
    const float *xb = x + (b * N + T) * C;
    float *mu = mean + b * Np, *r = rstd + b * Np;
    for (int64_t n = 0; n < Np; n++) ln_stats(xb + n * C, C, eps, &mu[n], &r[n]);
    for (int64_t c = 0; c < C; c++) {
      float acc = 0.0f;
      for (int64_t n = 0; n < Np; n++) acc += (xb[n * C + c] - mu[n]) * r[n];
      const float p = acc / (float)Np;
      pooled[b * C + c] = p;
      vt_cpu_put(out, b * C + c, p * weight[c] + bias[c], bf16);
    }
  }
}

// ln_bwd's input gradient with the same g = dout[b] * weight / (N - T) on every patch token.
// Each row is read whole (its sum) before it is written, so dx may alias x.
void vt_cpu_norm_mean_pool_bwd(float *dx, float *dweight, float *dbias, const float *dout,
                               const float *x, const float *pooled, const float *weight,
                               const float *mean, const float *rstd, int64_t B, int64_t N,
                               int64_t T, int64_t C) {
  const int64_t Np = N - T;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; b++) {
    const float *dy = dout + b * C;
    float sg = 0.0f;
    for (int64_t c = 0; c < C; c++) sg += dy[c] * weight[c] / (float)Np;
    sg /= (float)C;
    for (int64_t n = 0; n < N; n++) {
      float *d = dx + (b * N + n) * C;
      if (n < T) {
        memset(d, 0, (size_t)C * sizeof(float));
        continue;
      }
      const float *xr = x + (b * N + n) * C;
      const float mu = mean[b * Np + n - T], r = rstd[b * Np + n - T];
      float sgx = 0.0f;
      for (int64_t c = 0; c < C; c++) sgx += dy[c] * weight[c] / (float)Np * (xr[c] - mu) * r;
      sgx /= (float)C;
      for (int64_t c = 0; c < C; c++) {
        const float xh = (xr[c] - mu) * r;
        d[c] = r * (dy[c] * weight[c] / (float)Np - sg - xh * sgx);
      }
    }
  }
  for (int64_t c = 0; c < C; c++) {  // in b order
    float aw = 0.0f, ab = 0.0f;
    for (int64_t b = 0; b < B; b++) {
      aw += dout[b * C + c] * pooled[b * C + c];
      ab += dout[b * C + c];
    }
    dweight[c] += aw;
    dbias[c] += ab;
  }
}

void vt_cpu_qk_norm_fwd(float *out, float *mean, float *rstd, const float *qkv, const float *qw,
                        const float *qb, const float *kw, const float *kb, int64_t M, int64_t H,
                        int64_t D, float eps) {
  const int bf16 = vt_cpu_bf16();
  const int64_t W = 3 * H * D;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    for (int64_t j = 0; j < 2 * H; j++) {
      const int64_t at = m * W + j * D, row = m * 2 * H + j;
      const float *w = j < H ? qw : kw, *b = j < H ? qb : kb;
      float s = 0.0f;
      for (int64_t d = 0; d < D; d++) s += vt_cpu_get(qkv, at + d, bf16);
      float mu = s / (float)D, var = 0.0f;
      for (int64_t d = 0; d < D; d++) {
        const float x = vt_cpu_get(qkv, at + d, bf16);
        var += (x - mu) * (x - mu);
      }
      const float r = 1.0f / sqrtf(var / (float)D + eps);
      for (int64_t d = 0; d < D; d++)
        vt_cpu_put(out, at + d, (vt_cpu_get(qkv, at + d, bf16) - mu) * r * w[d] + b[d], bf16);
      mean[row] = mu;
      rstd[row] = r;
    }
    for (int64_t c = 2 * H * D; c < W; c++)  // v as it is
      vt_cpu_put(out, m * W + c, vt_cpu_get(qkv, m * W + c, bf16), bf16);
  }
}

void vt_cpu_qk_norm_bwd(float *dqkv, float *dqw, float *dqb, float *dkw, float *dkb, float *dbias,
                        const float *dout, const float *qkv, const float *qw, const float *kw,
                        const float *mean, const float *rstd, int64_t M, int64_t H, int64_t D) {
  const int bf16 = vt_cpu_bf16();
  const int64_t W = 3 * H * D;
  // The fp32 input gradient goes to the scratch first in bf16 (for qkv's bias gradient).
  float *dx = bf16 ? vt_cpu_scratch((size_t)(M * W)) : dqkv;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    for (int64_t j = 0; j < 2 * H; j++) {
      const int64_t at = m * W + j * D, row = m * 2 * H + j;
      const float *w = j < H ? qw : kw;
      const float mu = mean[row], r = rstd[row];
      float sg = 0.0f, sgx = 0.0f;
      for (int64_t d = 0; d < D; d++) {
        const float g = vt_cpu_get(dout, at + d, bf16) * w[d];
        sg += g;
        sgx += g * (vt_cpu_get(qkv, at + d, bf16) - mu) * r;
      }
      sg /= (float)D;
      sgx /= (float)D;
      for (int64_t d = 0; d < D; d++)
        dx[at + d] = r * (vt_cpu_get(dout, at + d, bf16) * w[d] - sg -
                          (vt_cpu_get(qkv, at + d, bf16) - mu) * r * sgx);
    }
    for (int64_t c = 2 * H * D; c < W; c++) dx[m * W + c] = vt_cpu_get(dout, m * W + c, bf16);
  }
  if (dbias) vt_cpu_colsum_acc(dbias, dx, M, W);
  if (bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M * W; i++) vt_cpu_put(dqkv, i, dx[i], 1);
  }
  // Parameter gradients: per column d, the rows (m, h) in order (independent of the threads).
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < 2 * D; t++) {
    const int64_t part = t / D, d = t % D;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t m = 0; m < M; m++)
      for (int64_t h = 0; h < H; h++) {
        const int64_t j = part * H + h, i = m * W + j * D + d, row = m * 2 * H + j;
        const float dy = vt_cpu_get(dout, i, bf16);
        aw += dy * (vt_cpu_get(qkv, i, bf16) - mean[row]) * rstd[row];
        ab += dy;
      }
    (part ? dkw : dqw)[d] += aw;
    (part ? dkb : dqb)[d] += ab;
  }
}
