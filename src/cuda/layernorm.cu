// layernorm.cu: LayerNorm forward and backward over the last dimension on CUDA, and their forms
// fused with the residual add, twin of src/cpu/layernorm.c (fp32, eps VT_LAYERNORM_EPS, mean and
// rstd saved for the backward).
// Rows are independent, so a warp owns a row; the parameter gradients are column sums over all
// rows, done in two fixed-order stages (no float atomics) so they are the same bits every run.
// C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include <limits.h>

#include "cuda_common.h"
#include "cuda_ops.h"

#include "../vt_ops.h"

#define LN_WARPS 8  // rows (warps) per block of the row kernels

static unsigned row_blocks(int64_t M) {
  const int64_t b = (M + LN_WARPS - 1) / LN_WARPS;
  VT_CHECK(b <= INT_MAX, "layernorm: M=%lld rows are too many for one grid", (long long)M);
  return (unsigned)b;
}

// out is a bf16 activation in bf16 precision (vt_ops.h).
// Two passes over the row (mean, then the centred variance) as the CPU twin does: the one-pass
// E[x^2] - E[x]^2 loses digits when the mean is large against the spread. With add (the fused
// residual add), the row is inp + add, written to sum during the first pass (each lane reads
// back only what it wrote) and normalised from there; sum may alias inp.
static __global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd,
                                            const float *inp, const float *add, float *sum,
                                            const float *weight, const float *bias, int64_t M,
                                            int64_t C, int bf16) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= M) return;  // row is the same for the whole warp: the shuffles below stay full
  const float *x = inp + row * C;
  float s = 0.0f;
  if (add) {
    float *xs = sum + row * C;
    const float *b = add + row * C;
    for (int64_t c = lane; c < C; c += 32) {
      const float v = x[c] + b[c];
      xs[c] = v;
      s += v;
    }
    x = xs;
  } else {
    for (int64_t c = lane; c < C; c += 32) s += x[c];
  }
  const float mu = vt_warp_sum(s) / (float)C;
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = x[c] - mu;
    var += d * d;
  }
  var = vt_warp_sum(var);
  const float r = 1.0f / sqrtf(var / (float)C + VT_LAYERNORM_EPS);
  for (int64_t c = lane; c < C; c += 32)
    vt_put(out, row * C + c, (x[c] - mu) * r * weight[c] + bias[c], bf16);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, per row; written,
// or with add added to what dinp holds (the fused residual gradient).
static __global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *weight, const float *mean,
                                             const float *rstd, int64_t M, int64_t C, int add) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  const float *x = inp + row * C, *dy = dout + row * C;
  const float mu = mean[row], r = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = dy[c] * weight[c];
    sg += g;
    sgx += g * (x[c] - mu) * r;
  }
  sg = vt_warp_sum(sg) / (float)C;
  sgx = vt_warp_sum(sgx) / (float)C;
  float *dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = r * (dy[c] * weight[c] - sg - (x[c] - mu) * r * sgx);
    dx[c] = add ? dx[c] + v : v;
  }
}

// Parameter gradients, stage 1: the rows are cut into chunks of LN_CHUNK (a constant, so the
// summation order depends on M alone, never on the GPU or the launch). Block (x, chunk) owns 32
// adjacent columns (coalesced reads) of one chunk; its LN_Y lanes per column walk the chunk's
// rows y, y + LN_Y, ... in order, then lane 0 adds the lane partials in lane order.
#define LN_CHUNK 256
#define LN_Y 8
static __global__ void layernorm_param_partial_kernel(float *pw, float *pb, const float *dout,
                                                      const float *inp, const float *mean,
                                                      const float *rstd, int64_t M, int64_t C) {
  __shared__ float sw[LN_Y][33], sb[LN_Y][33];  // 33: no bank conflicts on the column read
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  const int64_t m0 = chunk * LN_CHUNK, m1 = m0 + LN_CHUNK < M ? m0 + LN_CHUNK : M;
  float aw = 0.0f, ab = 0.0f;
  if (c < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += LN_Y) {
      const float dy = dout[m * C + c];
      aw += dy * (inp[m * C + c] - mean[m]) * rstd[m];
      ab += dy;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float w = 0.0f, b = 0.0f;
    for (int y = 0; y < LN_Y; y++) w += sw[y][threadIdx.x], b += sb[y][threadIdx.x];
    pw[chunk * C + c] = w;
    pb[chunk * C + c] = b;
  }
}

// Stage 2: each column adds its chunk partials in chunk order into the accumulated gradients.
static __global__ void layernorm_param_final_kernel(float *dweight, float *dbias, const float *pw,
                                                    const float *pb, int64_t nchunk, int64_t C) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float w = 0.0f, b = 0.0f;
  for (int64_t k = 0; k < nchunk; k++) w += pw[k * C + c], b += pb[k * C + c];
  dweight[c] += w;
  dbias[c] += b;
}

extern "C" void vt_cuda_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int64_t M,
                                      int64_t C) {
  layernorm_fwd_kernel<<<row_blocks(M), 32 * LN_WARPS, 0, vt_cuda_stream()>>>(
      out, mean, rstd, inp, NULL, NULL, weight, bias, M, C, vt_cuda_bf16());
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_add_layernorm_fwd(float *sum, float *out, float *mean, float *rstd,
                                          const float *a, const float *b, const float *weight,
                                          const float *bias, int64_t M, int64_t C) {
  layernorm_fwd_kernel<<<row_blocks(M), 32 * LN_WARPS, 0, vt_cuda_stream()>>>(
      out, mean, rstd, a, b, sum, weight, bias, M, C, vt_cuda_bf16());
  VT_CUDA_CHECK_LAUNCH();
}

static void layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int64_t M, int64_t C, int add) {
  cudaStream_t st = vt_cuda_stream();
  layernorm_dinp_kernel<<<row_blocks(M), 32 * LN_WARPS, 0, st>>>(dinp, dout, inp, weight, mean,
                                                                  rstd, M, C, add);
  VT_CUDA_CHECK_LAUNCH();
  const int64_t nchunk = (M + LN_CHUNK - 1) / LN_CHUNK, xblocks = (C + 31) / 32;
  VT_CHECK(nchunk <= 65535 && xblocks <= INT_MAX,
           "layernorm_bwd: M=%lld C=%lld exceed the parameter-gradient grid", (long long)M,
           (long long)C);
  float *pw = (float *)vt_cuda_scratch((size_t)(2 * nchunk * C) * sizeof(float));
  float *pb = pw + nchunk * C;
  layernorm_param_partial_kernel<<<dim3((unsigned)xblocks, (unsigned)nchunk), dim3(32, LN_Y), 0,
                                   st>>>(pw, pb, dout, inp, mean, rstd, M, C);
  VT_CUDA_CHECK_LAUNCH();
  layernorm_param_final_kernel<<<(unsigned)((C + 255) / 256), 256, 0, st>>>(dweight, dbias, pw,
                                                                           pb, nchunk, C);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_layernorm_bwd(float *dinp, float *dweight, float *dbias,
                                      const float *dout, const float *inp, const float *weight,
                                      const float *mean, const float *rstd, int64_t M,
                                      int64_t C) {
  layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C, 0);
}

extern "C" void vt_cuda_layernorm_bwd_add(float *dinp, float *dweight, float *dbias,
                                          const float *dout, const float *inp,
                                          const float *weight, const float *mean,
                                          const float *rstd, int64_t M, int64_t C) {
  layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C, 1);
}
