// cuda_common.h: what every src/cuda/*.cu shares: the fatal-error macros for CUDA and cuBLAS
// calls, the backend's one stream, cuBLAS handle and scratch, deterministic warp and block
// reductions, and launch-size helpers. CUDA-only (C++ as compiled by nvcc); C code includes
// cuda_ops.h instead. Must not depend on MPI or the model.
#ifndef VT_CUDA_COMMON_H
#define VT_CUDA_COMMON_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../vt_error.h"

// The fatal messages of the two checks below (cuda_backend.cu): the function called (the
// expression up to its first parenthesis), the error's name and text, and what to do: for an
// error that a kernel leaves behind for whatever call comes next (an illegal address, a failed
// launch), that it may come from an earlier kernel; for cuBLAS out of memory, what to shrink.
VT_NORETURN void vt_cuda_fail(const char *file, int line, const char *call, cudaError_t err);
VT_NORETURN void vt_cublas_fail(const char *file, int line, const char *call,
                                cublasStatus_t st);

#define VT_CUDA_CHECK(call)                                       \
  do {                                                            \
    cudaError_t vt_err_ = (call);                                 \
    if (vt_err_ != cudaSuccess) vt_cuda_fail(__FILE__, __LINE__, #call, vt_err_); \
  } while (0)

#define VT_CUBLAS_CHECK(call)                                                              \
  do {                                                                                     \
    cublasStatus_t vt_st_ = (call);                                                        \
    if (vt_st_ != CUBLAS_STATUS_SUCCESS) vt_cublas_fail(__FILE__, __LINE__, #call, vt_st_); \
  } while (0)

// A launch reports bad configurations only through the next error query; ask right away so the
// message names the kernel that failed rather than a later, innocent call.
#define VT_CUDA_CHECK_LAUNCH() VT_CUDA_CHECK(cudaGetLastError())

// Every op runs on this one stream, so ops are ordered among themselves without host syncs.
// Valid once vt_cuda_backend_get has returned non-NULL.
cudaStream_t vt_cuda_stream(void);
cublasHandle_t vt_cuda_cublas(void);

// Grow-only device scratch shared by the ops (attention's score gradients, the partial sums of
// the two-stage reductions). One stream orders the ops, so an op's use of it ends before the
// next op's begins; growing it waits for nothing (the outgrown buffer is freed at the next
// synchronize: cuda_backend.cu). Fatal when the GPU is out of memory.
void *vt_cuda_scratch(size_t nbytes);
// The same, but NULL (the scratch as it was, the error cleared) when the GPU is out of memory:
// for room an op can do without (attention's stored dS).
void *vt_cuda_scratch_try(size_t nbytes);
// Lets the scratch go (freed at the next synchronize; pointers into it stay valid for work
// already queued or queued before then): the next vt_cuda_scratch allocates what it asks, where
// the scratch grew for room no longer wanted.
void vt_cuda_scratch_shed(void);

// The bf16 copy of the n weights at w that hold_weights made (vt_backend.h), or NULL when they
// are not all in the span held (or no span is held: the caller rounds them itself).
const __nv_bfloat16 *vt_cuda_held_weights(const float *w, int64_t n);

// Whether the backend switch NAME (tests/gpu/run.sh's A/Bs, workarounds: VT_ATTN_MMA,
// VT_CUBLASLT, VT_LN_FUSED, VT_WEIGHT_COPY) is on: unset or anything but "0". Callers read it
// once and keep it.
static inline int vt_cuda_switch_on(const char *name) {
  const char *e = getenv(name);
  return !(e && strcmp(e, "0") == 0);
}

// Byte offsets of consecutive regions in the op scratch: each region starts 256-byte aligned
// (what cuBLAS wants of its operands). Returns the offset of a region of nbytes placed at *end,
// and moves *end past it.
static inline size_t vt_cuda_carve(size_t *end, size_t nbytes) {
  const size_t at = (*end + 255) / 256 * 256;
  *end = at + nbytes;
  return at;
}

// 1 when the GEMMs run in bf16 (vt_backend.h, vt_precision), set through the backend table.
int vt_cuda_bf16(void);

// dst[i] = src[i] rounded to bfloat16 (round to nearest even: the CPU's vt_bf16_round).
void vt_cuda_to_bf16(__nv_bfloat16 *dst, const float *src, int64_t n);

// Stores v as element i of an activation that is bfloat16 when bf16 is set (vt_ops.h: the bf16
// activations of bf16 precision), else fp32.
static __device__ __forceinline__ void vt_put(float *out, int64_t i, float v, int bf16) {
  if (bf16) ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(v);
  else out[i] = v;
}

// Element i of an activation that is bfloat16 when bf16 is set, else fp32, as a float.
static __device__ __forceinline__ float vt_get(const float *x, int64_t i, int bf16) {
  return bf16 ? __bfloat162float(((const __nv_bfloat16 *)x)[i]) : x[i];
}

// d (16 x 8, fp32) += a (16 x 16, bf16) b (16 x 8, bf16): one mma.sync.aligned.m16n8k16 of the
// warp (every lane calls it), fragments in the PTX ISA's layout (g = lane / 4, t = lane % 4; A:
// register r holds row g + 8 (r & 1), columns 2t + 8 (r >> 1) and the next; B: register r holds
// rows 2t + 8r and the next of column g; d[i]: row g + 8 (i >> 1), column 2t + (i & 1); the first
// of two bf16 in the low half). The CPU emulation (tests/cuda_emu) has its own.
#ifdef VT_CUDA_EMULATION
#define vt_mma16816 vt_emu::mma16816
#else
static __device__ __forceinline__ void vt_mma16816(float d[4], const unsigned a[4],
                                                   const unsigned b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// Shared-memory staging for the tensor-core kernels (PTX, sm_80+): cp.async copies 16 bytes (or
// 4, vt_cp_async4) from global to shared memory without passing through registers, zeros in
// their place when valid is false (nothing is read then); the copies a thread issued since its
// last commit form a group, and vt_cp_async_wait<n> returns once at most n of its newest groups
// are still in flight; other threads see the data after a __syncthreads that follows the wait.
// ldmatrix (x4) loads four 8 x 8 bf16 matrices, lane 8i + r giving the address of row r of
// matrix i (16 bytes, 16-byte aligned): register i of lane 4r + c holds row r, columns 2c and
// 2c + 1 of matrix i, or with _trans rows 2c and 2c + 1 of column r (the first element in the
// low half), the fragment layouts of vt_mma16816. The CPU emulation (tests/cuda_emu) has its
// own, which runs a group's copies at the latest moment the wait allows.
#ifdef VT_CUDA_EMULATION
#define vt_cp_async16 vt_emu::cp_async16
#define vt_cp_async4 vt_emu::cp_async4
#define vt_cp_async_commit vt_emu::cp_async_commit
#define vt_cp_async_wait vt_emu::cp_async_wait
#define vt_ldsm_x4 vt_emu::ldsm_x4
#define vt_ldsm_x4_trans vt_emu::ldsm_x4_trans
#else
static __device__ __forceinline__ void vt_cp_async16(void *smem, const void *gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(smem)),
               "l"(gmem), "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void vt_cp_async4(void *smem, const void *gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(smem)),
               "l"(gmem), "r"(valid ? 4 : 0));
}
static __device__ __forceinline__ void vt_cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
static __device__ __forceinline__ void vt_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void vt_ldsm_x4(unsigned r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((unsigned)__cvta_generic_to_shared(row)));
}
static __device__ __forceinline__ void vt_ldsm_x4_trans(unsigned r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((unsigned)__cvta_generic_to_shared(row)));
}
#endif

// 2^x on the SFU, one instruction (PTX ex2.approx.ftz.f32: within about 2 ulp, results below
// 2^-126 flushed to zero), where expf takes several: the attention kernels' probabilities,
// exp(y) = 2^(y log2 e) with the scale and log2 e folded into one multiply-add. The emulation
// gives 2^x off by up to 2 ulp, as the ISA allows (tests/cuda_emu/include/cuda_runtime.h).
#ifdef VT_CUDA_EMULATION
#define vt_ex2 ex2_approx
#else
static __device__ __forceinline__ float vt_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif

// Two floats rounded to bf16 (nearest even) in one register, the first in the low half.
static __device__ __forceinline__ unsigned vt_pack_bf16x2(float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}

// The 8 bf16 values of a 16-byte chunk (element 2k in the low half of word k), widened exactly to
// float, and 8 floats rounded to bf16 (nearest even) into a chunk: element-wise kernels move
// bf16 activations 16 bytes per load and store (vt_chunks16).
static __device__ __forceinline__ void vt_bf16x8_widen(uint4 v, float f[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    f[2 * k] = __uint_as_float(w[k] << 16);
    f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
static __device__ __forceinline__ uint4 vt_bf16x8_narrow(const float f[8]) {
  unsigned w[4];
#pragma unroll
  for (int k = 0; k < 4; k++)
    w[k] = (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k])) |
           (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k + 1])) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// A float4 as an array of 4 and back (register moves only): the fp32 form of the 16-byte moves.
static __device__ __forceinline__ void vt_f4_get(float e[4], float4 v) {
  e[0] = v.x, e[1] = v.y, e[2] = v.z, e[3] = v.w;
}
static __device__ __forceinline__ float4 vt_f4_make(const float e[4]) {
  return make_float4(e[0], e[1], e[2], e[3]);
}

// 1 when count elements of esize bytes at a and at b are whole 16-byte chunks, 16-byte aligned:
// the chunked path of an element-wise kernel.
static inline int vt_chunks16(int64_t count, size_t esize, const void *a, const void *b) {
  return count * (int64_t)esize % 16 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0;
}

// Warp-wide sums and maxima by a butterfly of shuffles: every lane ends with the same value, and
// the order of additions depends only on the lane numbers, so the result is the same bit for bit
// on every run (design.md's determinism contract; no atomics). All 32 lanes must take part.
static __device__ __forceinline__ float vt_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of VT_TREE_THREADS threads through shared memory in a fixed tree order (the
// same bits every run); every thread gets the total. sh holds VT_TREE_THREADS elements and may
// be reused after the call returns.
#define VT_TREE_THREADS 256
template <typename T>
static __device__ __forceinline__ T vt_block_sum(T v, T *sh) {
  const int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int s = VT_TREE_THREADS / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  const T total = sh[0];
  __syncthreads();  // sh may be written again right after
  return total;
}
static __device__ __forceinline__ float vt_block_max(float v, float *sh) {
  const int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int s = VT_TREE_THREADS / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);
    __syncthreads();
  }
  const float m = sh[0];
  __syncthreads();
  return m;
}

// Blocks of per_block rows (a warp each) for `rows` rows; `op` names the caller where they
// exceed one grid.
static inline unsigned vt_cuda_row_blocks(int64_t rows, int per_block, const char *op) {
  const int64_t b = (rows + per_block - 1) / per_block;
  VT_CHECK(b <= INT_MAX, "%s: %lld rows are too many for one grid", op, (long long)rows);
  return (unsigned)b;
}

// Blocks for a grid-stride loop over count elements: enough to fill the GPU, never more than
// the work needs (count > 0).
static inline unsigned vt_cuda_blocks(int64_t count, int threads) {
  int64_t b = (count + threads - 1) / threads;
  return (unsigned)(b < 65535 ? b : 65535);
}

#endif
