// elementwise.cu: the activations (GELU in its erf, tanh and quick forms, tanh), the residual add,
// drop path, dropout, LayerScale, sum of squares and scaling on CUDA, twin of
// src/cpu/elementwise.c, and the bf16 rounding of GEMM operands (also the activation cast,
// to_act). The sum of squares is a two-stage reduction over chunks of a fixed size, in double,
// with no atomics: the same bits on every run and every GPU.
// C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include "colsum.cuh"
#include "cuda_common.h"
#include "cuda_ops.h"
#include "vt_rng.h"

#define THREADS 256
#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

// GELU and its derivative at x, the erf or the tanh form (the CPU twin's formulas: 1 + tanh u and
// 1 - tanh^2 u from e = exp(-2|u|), without cancellation). The CPU uses its own vectorisable erf
// (absolute error < 1.5e-7) and exp; the GPU has full-precision erff and expf (a few ulp), so the
// two agree to about 1e-7 absolute.
#define GELU_K0 0.79788456080286535588f  // sqrt(2/pi)
#define GELU_K1 0.044715f
static __device__ __forceinline__ float gelu_one_plus_tanh(float u, float *sech2) {
  const float e = expf(-2.0f * fabsf(u)), inv = 1.0f / (1.0f + e);
  *sech2 = 4.0f * e * inv * inv;
  return 2.0f * (u >= 0.0f ? inv : e * inv);
}
// tanh (vt_act 2) from e = exp(-2|x|) as the CPU's.
static __device__ __forceinline__ float tanh_value(float x, float *sech2) {
  const float e = expf(-2.0f * fabsf(x)), inv = 1.0f / (1.0f + e);
  *sech2 = 4.0f * e * inv * inv;
  return copysignf((1.0f - e) * inv, x);
}
// Quick GELU (CLIP's, vt_act 3): s = sigmoid(1.702 x) from e = exp(-|1.702 x|) as the CPU's;
// also s (1 - s) = e / (1 + e)^2 for the derivative.
#define QUICK_GELU_K 1.702f
static __device__ __forceinline__ float quick_gelu_sigmoid(float x, float *s1ms) {
  const float e = expf(-QUICK_GELU_K * fabsf(x)), inv = 1.0f / (1.0f + e);
  *s1ms = e * inv * inv;
  return x >= 0.0f ? inv : e * inv;
}
static __device__ __forceinline__ float act_value(float x, int kind) {
  float sech2;
  if (kind == 3) return x * quick_gelu_sigmoid(x, &sech2);
  if (kind == 2) return tanh_value(x, &sech2);
  if (kind == 1) return 0.5f * x * gelu_one_plus_tanh(GELU_K0 * (x + GELU_K1 * x * x * x), &sech2);
  return x * (0.5f + 0.5f * erff(x * INV_SQRT2));
}
static __device__ __forceinline__ float act_grad(float x, int kind) {
  if (kind == 3) {
    float s1ms;
    const float s = quick_gelu_sigmoid(x, &s1ms);
    return s + QUICK_GELU_K * x * s1ms;
  }
  if (kind == 2) {
    float sech2;
    tanh_value(x, &sech2);
    return sech2;
  }
  if (kind == 1) {
    float sech2;
    const float opt = gelu_one_plus_tanh(GELU_K0 * (x + GELU_K1 * x * x * x), &sech2);
    return 0.5f * opt + 0.5f * x * sech2 * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
  }
  const float cdf = 0.5f + 0.5f * erff(x * INV_SQRT2);
  const float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

// inp, out: bf16 activations in bf16 precision (vt_ops.h). With chunks (vt_chunks16, bf16 only),
// a thread takes 8 values per 16-byte load and store: one 2-byte element per load could not be
// loaded ahead of the store before it (which may alias it), so each load's latency was exposed.
static __global__ void act_fwd_kernel(float *out, const float *inp, int64_t count, int bf16,
                                      int kind, int chunks) {
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                stride = (int64_t)gridDim.x * blockDim.x;
  if (chunks) {
    for (int64_t i = first; i < count / 8; i += stride) {
      float f[8];
      vt_bf16x8_widen(((const uint4 *)inp)[i], f);
#pragma unroll
      for (int k = 0; k < 8; k++) f[k] = act_value(f[k], kind);
      ((uint4 *)out)[i] = vt_bf16x8_narrow(f);
    }
    return;
  }
  for (int64_t i = first; i < count; i += stride)
    vt_put(out, i, act_value(vt_get(inp, i, bf16), kind), bf16);
}

// The activation backward's values: dout * act'(x), x and dout bf16 activations with bf16.
struct act_grad_src {
  const float *x, *dout;
  int bf16, kind;
  __device__ __forceinline__ float operator()(int64_t i) const {
    return vt_get(dout, i, bf16) * act_grad(vt_get(x, i, bf16), kind);
  }
  __device__ __forceinline__ void vec8(int64_t i, float v[8]) const {  // colsum.cuh
    float xs[8], dy[8];
    if (bf16) {
      vt_bf16x8_widen(*(const uint4 *)((const __nv_bfloat16 *)x + i), xs);
      vt_bf16x8_widen(*(const uint4 *)((const __nv_bfloat16 *)dout + i), dy);
    } else {
      vt_src_plain{x}.vec8(i, xs);
      vt_src_plain{dout}.vec8(i, dy);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = dy[k] * act_grad(xs[k], kind);
  }
  bool aligned16() const { return (uintptr_t)x % 16 == 0 && (uintptr_t)dout % 16 == 0; }
};

// dinp: a bf16 activation in bf16 precision (vt_ops.h).
static __global__ void act_bwd_kernel(float *dinp, act_grad_src src, int64_t count, int bf16) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    vt_put(dinp, i, src(i), bf16);
}

// out may alias a or b: each element is read before it is written, by the same thread.
static __global__ void add_kernel(float *out, const float *a, const float *b, int64_t count) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}

// The mask travels by value (about 0.5 KiB of kernel arguments). __fmul_rn keeps the product
// its own rounding, as on the CPU, instead of letting nvcc fuse it into the add (an FMA).
static __global__ void drop_path_kernel(float *out, const float *x, const float *res,
                                        int64_t rows, int64_t cols, const vt_drop_mask mask) {
  const int64_t count = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = (mask.row0 + i / cols) / mask.rows_per_sample;
    const bool kept = b < VT_DROP_PATH_MAX_SAMPLES && (mask.keep[b >> 5] >> (b & 31) & 1u);
    const float branch = kept ? __fmul_rn(x[i], mask.scale) : 0.0f;
    out[i] = res ? (kept ? res[i] + branch : res[i]) : branch;
  }
}

// Dropout: element (r, c) keeps x * scale or becomes 0 by its own Philox number (vt_rng.h's
// inline rounds, the CPU's bits). A thread takes one Philox block of a row's numbers, the up to
// four elements whose numbers it holds (one call for four numbers, where a thread per element
// made a block for each); groups is the most blocks a row's cols numbers can touch. out may alias
// x (each element read, then written, by one thread).
static __global__ void dropout_kernel(float *out, const float *x, int64_t rows, int64_t cols,
                                      int64_t groups, const vt_dropout_mask mask, uint32_t stream,
                                      int bf16) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < rows * groups;
       j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = j / groups, n0 = mask.first + r * mask.width;
    const int64_t q = (n0 >> 2) + (j - r * groups), c0 = 4 * q - n0;  // numbers 4q .. 4q + 3
    if (c0 >= cols) continue;
    const vt_philox_ctr u = vt_rng_block_inline(mask.seed, stream, mask.site, (uint64_t)q);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const int64_t c = c0 + k, i = r * cols + c;
      if (c < 0 || c >= cols) continue;
      const bool kept = vt_rng_unit(vt_philox_lane(u, (uint64_t)k)) >= mask.p;
      vt_put(out, i, kept ? __fmul_rn(vt_get(x, i, bf16), mask.scale) : 0.0f, bf16);
    }
  }
}

// out = x * gamma per column; out may alias x (each element read, then written, by one thread).
static __global__ void layer_scale_kernel(float *out, const float *x, const float *gamma,
                                          int64_t count, int64_t cols) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = x[i] * gamma[i % cols];
}

// LayerScale's gamma gradient: the products dout * x, summed by colsum_acc; __fmul_rn rounds
// each product on its own, as the CPU does, where nvcc would fuse it into the sum (an FMA).
struct layer_scale_grad_src {
  const float *dout, *x;
  __device__ __forceinline__ float operator()(int64_t i) const { return __fmul_rn(dout[i], x[i]); }
};

static __global__ void scale_kernel(float *x, float alpha, int64_t count) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= alpha;
}

// Sum of squares, stage 1: block k sums elements [k*SUMSQ_CHUNK, (k+1)*SUMSQ_CHUNK) in double
// (each thread a fixed strided subset, then a fixed tree). The chunk is a constant, not derived
// from the GPU, so the result does not depend on the machine either. Squares of floats are exact
// in double (48 significant bits), so only the additions round.
#define SUMSQ_CHUNK 16384
static __global__ void sumsq_partial_kernel(double *part, const float *x, int64_t count) {
  __shared__ double sh[VT_TREE_THREADS];
  const int64_t i0 = (int64_t)blockIdx.x * SUMSQ_CHUNK;
  const int64_t i1 = i0 + SUMSQ_CHUNK < count ? i0 + SUMSQ_CHUNK : count;
  double s = 0.0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += VT_TREE_THREADS) s += (double)x[i] * x[i];
  s = vt_block_sum(s, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// Stage 2: one block adds the chunk partials (strided per thread, then the tree) into *total.
static __global__ void sumsq_final_kernel(double *total, const double *part, int64_t nchunk) {
  __shared__ double sh[VT_TREE_THREADS];
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < nchunk; k += VT_TREE_THREADS) s += part[k];
  s = vt_block_sum(s, sh);
  if (threadIdx.x == 0) *total = s;
}

extern "C" void vt_cuda_act_fwd(float *out, const float *inp, int64_t count, int kind) {
  const int bf16 = vt_cuda_bf16(), chunks = bf16 && vt_chunks16(count, 2, out, inp);
  act_fwd_kernel<<<vt_cuda_blocks(chunks ? count / 8 : count, THREADS), THREADS, 0,
                   vt_cuda_stream()>>>(out, inp, count, bf16, kind, chunks);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_act_bwd(float *dinp, float *dbias, const float *inp, const float *dout,
                                int64_t M, int64_t F, int kind) {
  const int bf16 = vt_cuda_bf16();
  const act_grad_src src = {inp, dout, bf16, kind};
  if (dbias) {  // the bias gradient sums the fp32 values in the pass that stores them
    float *part = (float *)vt_cuda_scratch((size_t)(colsum_chunks(M) * F) * sizeof(float));
    colsum_acc(dbias, dinp, bf16, src, part, M, F);
    return;
  }
  const int64_t count = M * F;
  act_bwd_kernel<<<vt_cuda_blocks(count, THREADS), THREADS, 0, vt_cuda_stream()>>>(dinp, src,
                                                                                   count, bf16);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_add(float *out, const float *a, const float *b, int64_t count) {
  add_kernel<<<vt_cuda_blocks(count, THREADS), THREADS, 0, vt_cuda_stream()>>>(out, a, b, count);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_drop_path(float *out, const float *x, const float *res, int64_t rows,
                                  int64_t cols, const vt_drop_mask *mask) {
  const int64_t count = rows * cols;
  drop_path_kernel<<<vt_cuda_blocks(count, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      out, x, res, rows, cols, *mask);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_dropout(float *out, const float *x, int64_t rows, int64_t cols,
                                const vt_dropout_mask *mask, int act) {
  const int64_t groups = (cols + 2) / 4 + 1;  // a row's numbers span at most this many blocks
  dropout_kernel<<<vt_cuda_blocks(rows * groups, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      out, x, rows, cols, groups, *mask, vt_hash_name("dropout"), act && vt_cuda_bf16());
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_layer_scale_fwd(float *out, const float *x, const float *gamma,
                                        int64_t rows, int64_t cols) {
  const int64_t count = rows * cols;
  layer_scale_kernel<<<vt_cuda_blocks(count, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      out, x, gamma, count, cols);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_layer_scale_bwd(float *dx, float *dgamma, const float *dout,
                                        const float *x, const float *gamma, int64_t rows,
                                        int64_t cols) {
  // dgamma first: dx may alias dout.
  const layer_scale_grad_src src = {dout, x};
  float *part = (float *)vt_cuda_scratch((size_t)(colsum_chunks(rows) * cols) * sizeof(float));
  colsum_acc(dgamma, (float *)NULL, 0, src, part, rows, cols);
  vt_cuda_layer_scale_fwd(dx, dout, gamma, rows, cols);
}

extern "C" void vt_cuda_scale(float *x, float alpha, int64_t count) {
  scale_kernel<<<vt_cuda_blocks(count, THREADS), THREADS, 0, vt_cuda_stream()>>>(x, alpha, count);
  VT_CUDA_CHECK_LAUNCH();
}

// Queued on the stream with the result left in device memory: the optimizer brings all of a
// step's sums to the host with one copy (one wait).
extern "C" void vt_cuda_sumsq(double *out, const float *x, int64_t count) {
  const int64_t nchunk = (count + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  VT_CHECK(nchunk <= 0x7fffffff, "sumsq: %lld elements are too many for one grid",
           (long long)count);
  cudaStream_t st = vt_cuda_stream();
  double *part = (double *)vt_cuda_scratch((size_t)nchunk * sizeof(double));
  sumsq_partial_kernel<<<(unsigned)nchunk, VT_TREE_THREADS, 0, st>>>(part, x, count);
  VT_CUDA_CHECK_LAUNCH();
  sumsq_final_kernel<<<1, VT_TREE_THREADS, 0, st>>>(out, part, nchunk);
  VT_CUDA_CHECK_LAUNCH();
}

static __global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

void vt_cuda_to_bf16(__nv_bfloat16 *dst, const float *src, int64_t n) {
  if (n <= 0) return;
  to_bf16_kernel<<<vt_cuda_blocks(n, 256), 256, 0, vt_cuda_stream()>>>(dst, src, n);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_to_act(float *dst, const float *src, int64_t count) {
  if (vt_cuda_bf16()) vt_cuda_to_bf16((__nv_bfloat16 *)dst, src, count);
  else VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)count * sizeof(float),
                                     cudaMemcpyDeviceToDevice, vt_cuda_stream()));
}
