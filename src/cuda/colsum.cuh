// colsum.cuh: deterministic column sums on CUDA for the bias gradients (gemm.cu's linear_bwd,
// elementwise.cu's GELU backward fused with fc1's bias gradient). The summed values come from a
// source functor, so the pass that makes them (a bf16 copy, the GELU derivative) can store them
// too and nothing is read twice. CUDA-only; included by .cu files. Must not depend on MPI or the
// model.
#ifndef VT_COLSUM_CUH
#define VT_COLSUM_CUH

#include <limits.h>

#include "cuda_common.h"

// Sources: element i of the (M, C) matrix being summed. A source may also have vec8(i, v), the 8
// elements from i (a multiple of 8) in 16-byte loads, and aligned16(), whether its data allows
// those; colsum_acc then moves 8 columns per thread where C is a multiple of 8.
struct vt_src_plain {  // x as it is
  const float *x;
  __device__ __forceinline__ float operator()(int64_t i) const { return x[i]; }
  __device__ __forceinline__ void vec8(int64_t i, float v[8]) const {
    vt_f4_get(v, ((const float4 *)(x + i))[0]);
    vt_f4_get(v + 4, ((const float4 *)(x + i))[1]);
  }
  bool aligned16() const { return (uintptr_t)x % 16 == 0; }
};

// Whether Src has vec8 (the first overload is viable only then).
template <class Src>
static constexpr bool colsum_has_vec8(decltype(&Src::vec8)) {
  return true;
}
template <class Src>
static constexpr bool colsum_has_vec8(...) {
  return false;
}

// Column sums without atomics, so the result is the same bit for bit on every run, in two
// stages with enough blocks to fill the GPU: a block owns COLSUM_X adjacent columns of a chunk of
// COLSUM_ROWS rows (a constant, never derived from the GPU); its COLSUM_Y lanes per column walk
// the chunk's rows y, y+COLSUM_Y, ... in order, one thread adds the lane partials in lane order
// into the chunk's partial sums; then each column adds its chunks (colsum_final). With y set, the first
// stage also stores each value in y (as bf16 with y_bf16: vt_put), so the source is read once;
// a lane reads COLSUM_BATCH of its rows before it adds or stores any (the stores may alias the
// source, so the compiler could not load ahead of them: one load's latency per row). At most 64
// registers a thread, so that two blocks fit on an SM (80 left one: 16 warps).
#define COLSUM_X 32
#define COLSUM_Y 16
#define COLSUM_ROWS 512
#define COLSUM_BATCH 4
template <class Src>
static __global__ void __launch_bounds__(COLSUM_X * COLSUM_Y, 2)
    colsum_partial_kernel(float *part, float *y, int y_bf16, Src src, int64_t M, int64_t C) {
  __shared__ float lanes[COLSUM_Y][COLSUM_X + 1];  // +1: no bank conflicts on the column read
  const int64_t c = (int64_t)blockIdx.x * COLSUM_X + threadIdx.x;
  const int64_t m0 = (int64_t)blockIdx.y * COLSUM_ROWS;
  const int64_t m1 = m0 + COLSUM_ROWS < M ? m0 + COLSUM_ROWS : M;
  float acc = 0.0f;
  if (c < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += COLSUM_BATCH * COLSUM_Y) {
      float v[COLSUM_BATCH];  // loaded before any is stored: the loads are in flight together
#pragma unroll
      for (int k = 0; k < COLSUM_BATCH; k++) {
        const int64_t r = m + k * COLSUM_Y;
        v[k] = r < m1 ? src(r * C + c) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < COLSUM_BATCH; k++) {
        const int64_t r = m + k * COLSUM_Y;
        if (r < m1) {
          acc += v[k];
          if (y) vt_put(y, r * C + c, v[k], y_bf16);
        }
      }
    }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int k = 0; k < COLSUM_Y; k++) s += lanes[k][threadIdx.x];
    part[blockIdx.y * C + c] = s;
  }
}

// colsum_partial_kernel with 8 adjacent columns per thread (Src::vec8; C a multiple of 8, the
// data 16-byte aligned): a block owns COLSUM_X * 8 columns, each column's rows summed in the
// same order as there (the same bits), its values stored 16 bytes at a time.
template <class Src>
static __global__ void __launch_bounds__(COLSUM_X * COLSUM_Y, 2)
    colsum_partial8_kernel(float *part, float *y, int y_bf16, Src src, int64_t M, int64_t C) {
  __shared__ float lanes[COLSUM_Y][8 * COLSUM_X + 4];
  const int64_t c0 = ((int64_t)blockIdx.x * COLSUM_X + threadIdx.x) * 8;
  const int64_t m0 = (int64_t)blockIdx.y * COLSUM_ROWS;
  const int64_t m1 = m0 + COLSUM_ROWS < M ? m0 + COLSUM_ROWS : M;
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (c0 < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += COLSUM_BATCH * COLSUM_Y) {
      float v[COLSUM_BATCH][8];
#pragma unroll
      for (int k = 0; k < COLSUM_BATCH; k++) {
        const int64_t r = m + k * COLSUM_Y;
        if (r < m1) src.vec8(r * C + c0, v[k]);
      }
#pragma unroll
      for (int k = 0; k < COLSUM_BATCH; k++) {
        const int64_t r = m + k * COLSUM_Y;
        if (r >= m1) continue;
#pragma unroll
        for (int j = 0; j < 8; j++) acc[j] += v[k][j];
        if (y && y_bf16) {
          *(uint4 *)((__nv_bfloat16 *)y + r * C + c0) = vt_bf16x8_narrow(v[k]);
        } else if (y) {
          float4 *d = (float4 *)(y + r * C + c0);
          d[0] = vt_f4_make(v[k]), d[1] = vt_f4_make(v[k] + 4);
        }
      }
    }
#pragma unroll
  for (int j = 0; j < 8; j++) lanes[threadIdx.y][8 * threadIdx.x + j] = acc[j];
  __syncthreads();
  const int t = threadIdx.y * COLSUM_X + threadIdx.x;  // 512 threads, 256 columns
  const int64_t c = (int64_t)blockIdx.x * COLSUM_X * 8 + t;
  if (t < 8 * COLSUM_X && c < C) {
    float s = 0.0f;
    for (int k = 0; k < COLSUM_Y; k++) s += lanes[k][t];
    part[blockIdx.y * C + c] = s;
  }
}

// Stage 2: out (C) += the column sums of part (nchunk, C), and out2 of part2 alike when given
// (LayerNorm's weight and bias). A block owns 32 columns; its COLSUM_FIN_Y lanes per column take
// chunks y, y + COLSUM_FIN_Y, ... in order, then one thread adds the lanes in lane order: a fixed
// order, and no column's sum is one thread's chain of nchunk loads (99 for LayerNorm's chunks of
// ViT-B/16 at micro-batch 128).
#define COLSUM_FIN_Y 8
static __global__ void colsum_final_kernel(float *out, const float *part, float *out2,
                                           const float *part2, int64_t nchunk, int64_t C) {
  __shared__ float lanes[2][COLSUM_FIN_Y][33];
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t c = (int64_t)blockIdx.x * 32 + x;
  float s = 0.0f, s2 = 0.0f;
  if (c < C)
    for (int64_t k = y; k < nchunk; k += COLSUM_FIN_Y) {
      s += part[k * C + c];
      if (part2) s2 += part2[k * C + c];
    }
  lanes[0][y][x] = s, lanes[1][y][x] = s2;
  __syncthreads();
  if (y == 0 && c < C) {
    float t = 0.0f, t2 = 0.0f;
    for (int k = 0; k < COLSUM_FIN_Y; k++) t += lanes[0][k][x], t2 += lanes[1][k][x];
    out[c] += t;
    if (out2) out2[c] += t2;
  }
}
static void colsum_final(float *out, const float *part, float *out2, const float *part2,
                         int64_t nchunk, int64_t C) {
  const int64_t blocks = (C + 31) / 32;
  VT_CHECK(blocks <= INT_MAX, "column sum: C=%lld is too large for one grid", (long long)C);
  colsum_final_kernel<<<(unsigned)blocks, dim3(32, COLSUM_FIN_Y), 0, vt_cuda_stream()>>>(
      out, part, out2, part2, nchunk, C);
  VT_CUDA_CHECK_LAUNCH();
}

static inline int64_t colsum_chunks(int64_t M) { return (M + COLSUM_ROWS - 1) / COLSUM_ROWS; }

// out (C) += the column sums of src over (M, C); with y set, also y = the values (bf16 with
// y_bf16). part: scratch of colsum_chunks(M) * C floats.
template <class Src>
static void colsum_acc(float *out, float *y, int y_bf16, Src src, float *part, int64_t M,
                       int64_t C) {
  const int64_t nchunk = colsum_chunks(M), bx = (C + COLSUM_X - 1) / COLSUM_X;
  VT_CHECK(bx <= INT_MAX && nchunk <= 65535,
           "column sum: (%lld, %lld) is too large for one grid", (long long)M, (long long)C);
  if (nchunk == 0) return;
  bool vec = false;
  if constexpr (colsum_has_vec8<Src>(nullptr)) {
    vec = C % 8 == 0 && src.aligned16() && (uintptr_t)y % 16 == 0;
    if (vec)
      colsum_partial8_kernel<Src><<<dim3((unsigned)((C / 8 + COLSUM_X - 1) / COLSUM_X),
                                         (unsigned)nchunk),
                                    dim3(COLSUM_X, COLSUM_Y), 0, vt_cuda_stream()>>>(
          part, y, y_bf16, src, M, C);
  }
  if (!vec)
    colsum_partial_kernel<Src><<<dim3((unsigned)bx, (unsigned)nchunk), dim3(COLSUM_X, COLSUM_Y),
                                 0, vt_cuda_stream()>>>(part, y, y_bf16, src, M, C);
  VT_CUDA_CHECK_LAUNCH();
  colsum_final(out, part, NULL, NULL, nchunk, C);
}

#endif
