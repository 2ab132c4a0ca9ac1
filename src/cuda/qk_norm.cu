// qk_norm.cu: QK-norm on CUDA (timm's qk_norm, ViT-22B): a LayerNorm over each head's D values
// of q and of k inside qkv (M, 3HD), the weights (D) shared by the heads, v passed through;
// twin of vt_cpu_qk_norm_fwd/_bwd in src/cpu/layernorm.c. A warp per row, as layernorm.cu's row
// kernels; the parameter gradients and qkv's bias gradient are column sums in two fixed-order
// stages (colsum.cuh), so every run gives the same bits.
// C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include "colsum.cuh"
#include "cuda_common.h"
#include "cuda_ops.h"

#include "../vt_ops.h"

#define QK_WARPS 8  // rows (warps) per block of the row kernels

// ---- QK-norm: rows of D values inside qkv (M, 3HD); row r = m * 2H + j (j < H: q head j, else
// k head j - H) starts at m * 3HD + j * D. A warp per row, as layernorm_fwd_kernel. ----
static __global__ void qk_norm_fwd_kernel(float *out, float *mean, float *rstd, const float *qkv,
                                          const float *qw, const float *qb, const float *kw,
                                          const float *kb, int64_t M, int64_t H, int64_t D,
                                          int bf16, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
  if (row >= M * 2 * H) return;  // the same for the whole warp
  const int64_t j = row % (2 * H), at = (row / (2 * H)) * 3 * H * D + j * D;
  const float *w = j < H ? qw : kw, *b = j < H ? qb : kb;
  float s = 0.0f;
  for (int64_t d = lane; d < D; d += 32) s += vt_get(qkv, at + d, bf16);
  const float mu = vt_warp_sum(s) / (float)D;
  float var = 0.0f;
  for (int64_t d = lane; d < D; d += 32) {
    const float x = vt_get(qkv, at + d, bf16) - mu;
    var += x * x;
  }
  var = vt_warp_sum(var);
  const float r = 1.0f / sqrtf(var / (float)D + eps);
  for (int64_t d = lane; d < D; d += 32)
    vt_put(out, at + d, (vt_get(qkv, at + d, bf16) - mu) * r * w[d] + b[d], bf16);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// v passes through: columns 2HD.. of every token.
static __global__ void qk_norm_copy_v_kernel(float *out, const float *qkv, int64_t M, int64_t HD,
                                             int bf16) {
  const int64_t count = M * HD;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t at = (i / HD) * 3 * HD + 2 * HD + i % HD;
    vt_put(out, at, vt_get(qkv, at, bf16), bf16);
  }
}

// The backward's per-row sums, mean(g) and mean(g * xhat) with g = dout * weight, into
// c[2 * row] and c[2 * row + 1].
static __global__ void qk_norm_rowsum_kernel(float *c, const float *dout, const float *qkv,
                                             const float *qw, const float *kw, const float *mean,
                                             const float *rstd, int64_t M, int64_t H, int64_t D,
                                             int bf16) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
  if (row >= M * 2 * H) return;
  const int64_t j = row % (2 * H), at = (row / (2 * H)) * 3 * H * D + j * D;
  const float *w = j < H ? qw : kw;
  const float mu = mean[row], r = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t d = lane; d < D; d += 32) {
    const float g = __fmul_rn(vt_get(dout, at + d, bf16), w[d]);  // unfused, as dx's
    sg += g;
    sgx += g * (vt_get(qkv, at + d, bf16) - mu) * r;
  }
  sg = vt_warp_sum(sg) / (float)D;
  sgx = vt_warp_sum(sgx) / (float)D;
  if (lane == 0) c[2 * row] = sg, c[2 * row + 1] = sgx;
}

// Element i of the fp32 dqkv: the LayerNorm backward on the q and k columns, dout on v's.
struct qk_norm_dx_src {
  const float *dout, *qkv, *qw, *kw, *mean, *rstd, *c;
  int64_t H, D;
  int bf16;
  __device__ __forceinline__ float operator()(int64_t i) const {
    const int64_t W = 3 * H * D, col = i % W;
    const float dy = vt_get(dout, i, bf16);
    if (col >= 2 * H * D) return dy;
    const int64_t j = col / D, row = (i / W) * 2 * H + j;
    const float w = (j < H ? qw : kw)[col % D], r = rstd[row];
    // g = dy w rounded on its own, as the row sums had it: with D = 1, g - mean(g) is then 0,
    // where an FMA's unrounded product would leave its rounding error times rstd (up to 1000).
    const float g = __fmul_rn(dy, w);
    return r * (g - c[2 * row] - (vt_get(qkv, i, bf16) - mean[row]) * r * c[2 * row + 1]);
  }
};

static __global__ void qk_norm_dx_kernel(float *dqkv, qk_norm_dx_src src, int64_t count) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    vt_put(dqkv, i, src(i), src.bf16);
}

// The weight (bias: with_x 0) gradient's terms of q (part 0) or k (part 1) as an (M*H, D)
// matrix: row m * H + h is that head's dout (times xhat for the weight).
struct qk_norm_param_src {
  const float *dout, *qkv, *mean, *rstd;
  int64_t H, D, part;
  int with_x, bf16;
  __device__ __forceinline__ float operator()(int64_t i) const {
    const int64_t d = i % D, mh = i / D, m = mh / H, j = part * H + mh % H;
    const int64_t at = m * 3 * H * D + j * D + d, row = m * 2 * H + j;
    const float dy = vt_get(dout, at, bf16);
    return with_x ? dy * (vt_get(qkv, at, bf16) - mean[row]) * rstd[row] : dy;
  }
};

extern "C" void vt_cuda_qk_norm_fwd(float *out, float *mean, float *rstd, const float *qkv,
                                    const float *qw, const float *qb, const float *kw,
                                    const float *kb, int64_t M, int64_t H, int64_t D, float eps) {
  const int bf16 = vt_cuda_bf16();
  cudaStream_t st = vt_cuda_stream();
  qk_norm_fwd_kernel<<<vt_cuda_row_blocks(M * 2 * H, QK_WARPS, "qk_norm"), 32 * QK_WARPS, 0, st>>>(
      out, mean, rstd, qkv, qw, qb, kw, kb, M, H, D, bf16, eps);
  VT_CUDA_CHECK_LAUNCH();
  qk_norm_copy_v_kernel<<<vt_cuda_blocks(M * H * D, 256), 256, 0, st>>>(out, qkv, M, H * D, bf16);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_qk_norm_bwd(float *dqkv, float *dqw, float *dqb, float *dkw, float *dkb,
                                    float *dbias, const float *dout, const float *qkv,
                                    const float *qw, const float *kw, const float *mean,
                                    const float *rstd, int64_t M, int64_t H, int64_t D) {
  const int bf16 = vt_cuda_bf16();
  cudaStream_t st = vt_cuda_stream();
  const int64_t rows = M * 2 * H, W = 3 * H * D;
  // Scratch: the row sums (2 per row), then the column sums' chunk partials (the larger of the
  // qkv bias's and the norm weights').
  const int64_t ncs = colsum_chunks(M) * W, npar = colsum_chunks(M * H) * D;
  const size_t nc = (size_t)(2 * rows + (ncs > npar ? ncs : npar));
  float *c = (float *)vt_cuda_scratch(nc * sizeof(float));
  float *part = c + 2 * rows;
  qk_norm_rowsum_kernel<<<vt_cuda_row_blocks(rows, QK_WARPS, "qk_norm"), 32 * QK_WARPS, 0, st>>>(
      c, dout, qkv, qw, kw, mean, rstd, M, H, D, bf16);
  VT_CUDA_CHECK_LAUNCH();
  const qk_norm_dx_src dx = {dout, qkv, qw, kw, mean, rstd, c, H, D, bf16};
  if (dbias) {  // qkv's bias gradient sums the fp32 values in the pass that stores them
    colsum_acc(dbias, dqkv, bf16, dx, part, M, W);
  } else {
    qk_norm_dx_kernel<<<vt_cuda_blocks(M * W, 256), 256, 0, st>>>(dqkv, dx, M * W);
    VT_CUDA_CHECK_LAUNCH();
  }
  float *grads[4] = {dqw, dqb, dkw, dkb};
  for (int k = 0; k < 4; k++) {
    const qk_norm_param_src src = {dout, qkv, mean, rstd, H, D, k / 2, k % 2 == 0, bf16};
    colsum_acc(grads[k], (float *)NULL, 0, src, part, M * H, D);
  }
}
