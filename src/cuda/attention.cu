// attention.cu: softmax(q k^T / sqrt(D)) v per (batch, head) on CUDA, forward and backward, twin of
// src/cpu/attention.c (same qkv layout, same saved probabilities att (B, H, N, N); qkv, out and att
// fp32 or bf16 as vt_ops.h says). cuBLAS strided-batched GEMMs (fp32, or bf16 operands with fp32
// accumulation in vt_backend.h's bf16 precision) read the heads straight out of the timm qkv layout
// (no per-head copies): one call per head, batched over the B images, whose q/k/v sit a fixed
// stride N*3C apart. The softmax and its backward are warp-per-row kernels; in bf16 they write the
// GEMM operands P and dS as bf16 directly. C-style CUDA, no STL. Must not depend on MPI, NCCL or
// the model. A fused (flash) attention that never stores P is not written yet.
#include <limits.h>
#include <math.h>

#include "cuda_common.h"
#include "cuda_ops.h"

// cuBLAS is column-major: a row-major (R, K) matrix with leading dimension ld is, read
// column-major, its transpose (K, R) with the same ld. Below, for one head of one image,
//   Q, K, V (N, D) row-major with ld 3C  ->  Qc = Q^T, Kc = K^T, Vc = V^T (D, N), ld 3C
//   P, dP, dS (N, N) row-major with ld N ->  Pc = P^T etc. (N, N), ld N
//   out, dout (N, D) row-major with ld C ->  (D, N), ld C
// and every row-major product is written as the column-major product of the transposes.

#define SM_WARPS 8  // rows (warps) per block of the softmax kernels

static void check_dims(const char *op, int64_t B, int64_t N, int64_t H, int64_t D) {
  // The classic cuBLAS API takes int sizes, leading dimensions and batch counts.
  VT_CHECK(B <= INT_MAX && N <= INT_MAX && 3 * H * D <= INT_MAX,
           "%s: B=%lld N=%lld H=%lld D=%lld exceed cuBLAS's int sizes", op, (long long)B,
           (long long)N, (long long)H, (long long)D);
  VT_CHECK((B * H * N + SM_WARPS - 1) / SM_WARPS <= INT_MAX,
           "%s: B*H*N=%lld softmax rows are too many for one grid", op, (long long)(B * H * N));
}

// Softmax of each row of length N (the scores are already scaled by the GEMM): in place, or with
// pb set written to pb as bf16 instead (s is then only read: the exponentials are recomputed,
// the same values, rather than stored and read back).
static __global__ void softmax_rows_kernel(float *s, __nv_bfloat16 *pb, int64_t rows, int64_t N) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform: the shuffles stay full
  float *r = s + row * N;
  float mx = -INFINITY;
  for (int64_t j = lane; j < N; j += 32) mx = fmaxf(mx, r[j]);
  mx = vt_warp_max(mx);
  float sum = 0.0f;
  for (int64_t j = lane; j < N; j += 32) {
    const float e = expf(r[j] - mx);
    if (!pb) r[j] = e;
    sum += e;
  }
  const float inv = 1.0f / vt_warp_sum(sum);
  if (!pb) {
    for (int64_t j = lane; j < N; j += 32) r[j] *= inv;  // each lane rescales what it wrote
    return;
  }
  __nv_bfloat16 *o = pb + row * N;
  for (int64_t j = lane; j < N; j += 32) o[j] = __float2bfloat16_rn(expf(r[j] - mx) * inv);
}

// Softmax backward: ds = p * (dp - rowsum(p * dp)), with p fp32 (p) or stored bf16 (pb); ds in
// place over dp, or with dsb set written to dsb as bf16 (the GEMM operand) instead.
static __global__ void softmax_bwd_kernel(float *dp, const float *p, const __nv_bfloat16 *pb,
                                          __nv_bfloat16 *dsb, int64_t rows, int64_t N) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;
  float *d = dp + row * N;
  float dot = 0.0f;
  for (int64_t j = lane; j < N; j += 32)
    dot += (pb ? __bfloat162float(pb[row * N + j]) : p[row * N + j]) * d[j];
  dot = vt_warp_sum(dot);
  for (int64_t j = lane; j < N; j += 32) {
    const float pj = pb ? __bfloat162float(pb[row * N + j]) : p[row * N + j];
    const float ds = pj * (d[j] - dot);
    if (dsb) dsb[row * N + j] = __float2bfloat16_rn(ds);
    else d[j] = ds;
  }
}

static unsigned softmax_blocks(int64_t rows) {
  return (unsigned)((rows + SM_WARPS - 1) / SM_WARPS);
}

// One strided-batched GEMM over the B images of one head: C_b = alpha op(A_b) op(B_b) + beta C_b,
// column-major, with A_b = A + b * sa and so on (strides and offsets in elements). A and B fp32,
// or bf16 (vt_backend.h's bf16 precision) read with fp32 accumulation; C fp32, or with c_bf16
// the fp32 result rounded to bf16.
static void gemm_b(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                   float alpha, const void *A, int64_t lda, int64_t sa, const void *Bm,
                   int64_t ldb, int64_t sb, float beta, void *C, int64_t ldc, int64_t sc,
                   int64_t batch, int bf16, int c_bf16) {
  if (!bf16) {
    VT_CUBLAS_CHECK(cublasSgemmStridedBatched(
        vt_cuda_cublas(), ta, tb, (int)m, (int)n, (int)k, &alpha, (const float *)A, (int)lda,
        (long long)sa, (const float *)Bm, (int)ldb, (long long)sb, &beta, (float *)C, (int)ldc,
        (long long)sc, (int)batch));
    return;
  }
  VT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      vt_cuda_cublas(), ta, tb, (int)m, (int)n, (int)k, &alpha, A, CUDA_R_16BF, (int)lda,
      (long long)sa, Bm, CUDA_R_16BF, (int)ldb, (long long)sb, &beta, C,
      c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc, (long long)sc, (int)batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

// The element at offset `at` of a tensor of fp32 (bf16 = 0) or bf16 elements.
static const void *elem(const void *base, int64_t at, int bf16) {
  return (const char *)base + at * (bf16 ? (int64_t)sizeof(__nv_bfloat16) : (int64_t)sizeof(float));
}

extern "C" void vt_cuda_attention_fwd(float *out, float *att, const float *qkv, int64_t B,
                                      int64_t N, int64_t H, int64_t D) {
  check_dims("attention_fwd", B, N, H, D);
  const int64_t C = H * D, ld = 3 * C, sqkv = N * ld, satt = H * N * N, sout = N * C;
  const float scale = 1.0f / sqrtf((float)D);
  const cublasOperation_t T = CUBLAS_OP_T, O = CUBLAS_OP_N;
  // bf16 (vt_ops.h): qkv is a bf16 activation, read by the GEMMs as it is; the scores go to an
  // fp32 scratch and the softmax writes the probabilities straight to att as bf16, the operand of
  // P v, whose bf16 result is out (the CPU twin's rounding points exactly). fp32: scores and
  // probabilities in place in att.
  const int bf16 = vt_cuda_bf16();
  float *sc = att;
  if (bf16) sc = (float *)vt_cuda_scratch((size_t)(B * satt) * sizeof(float));
  for (int64_t h = 0; h < H; h++) {
    // S = scale q k^T, i.e. S^T (N, N) = Kc^T Qc.
    gemm_b(T, O, N, N, D, scale, elem(qkv, h * D + C, bf16), ld, sqkv, elem(qkv, h * D, bf16),
           ld, sqkv, 0.0f, sc + h * N * N, N, satt, B, bf16, 0);
  }
  const int64_t rows = B * H * N;
  softmax_rows_kernel<<<softmax_blocks(rows), 32 * SM_WARPS, 0, vt_cuda_stream()>>>(
      sc, bf16 ? (__nv_bfloat16 *)att : NULL, rows, N);
  VT_CUDA_CHECK_LAUNCH();
  for (int64_t h = 0; h < H; h++) {
    // out = P v, i.e. out^T (D, N) = Vc Pc.
    gemm_b(O, O, D, N, N, 1.0f, elem(qkv, h * D + 2 * C, bf16), ld, sqkv,
           elem(att, h * N * N, bf16), N, satt, 0.0f, (void *)elem(out, h * D, bf16), C, sout, B,
           bf16, bf16);
  }
}

extern "C" void vt_cuda_attention_bwd(float *dqkv, const float *dout, const float *qkv,
                                      const float *att, int64_t B, int64_t N, int64_t H,
                                      int64_t D) {
  check_dims("attention_bwd", B, N, H, D);
  const int64_t C = H * D, ld = 3 * C, sqkv = N * ld, satt = H * N * N, sout = N * C;
  const float scale = 1.0f / sqrtf((float)D);
  const cublasOperation_t T = CUBLAS_OP_T, O = CUBLAS_OP_N;
  const int bf16 = vt_cuda_bf16();
  // dP for every (image, head) at once, laid out like att so one softmax backward launch covers
  // them all; dS in place over it (fp32) or, in bf16, written as bf16 next to the bf16 copy of
  // dout (qkv and att's P are bf16 activations already). Grow-only scratch: allocated on the
  // first step.
  const size_t h2 = sizeof(__nv_bfloat16);
  size_t end = 0;
  const size_t at_dp = vt_cuda_carve(&end, (size_t)(B * satt) * sizeof(float));
  const size_t at_dy = bf16 ? vt_cuda_carve(&end, (size_t)(B * sout) * h2) : 0;
  const size_t at_ds = bf16 ? vt_cuda_carve(&end, (size_t)(B * satt) * h2) : 0;
  char *base = (char *)vt_cuda_scratch(end);
  float *dp = (float *)(base + at_dp);
  const void *dyv = dout, *dsv = dp;
  if (bf16) {
    vt_cuda_to_bf16((__nv_bfloat16 *)(base + at_dy), dout, B * sout);
    dyv = base + at_dy, dsv = base + at_ds;
  }
  for (int64_t h = 0; h < H; h++) {
    const void *v = elem(qkv, h * D + 2 * C, bf16), *dy = elem(dyv, h * D, bf16);
    float *dv = dqkv + h * D + 2 * C;
    // dv = P^T dy, i.e. dv^T (D, N) = dYc Pc^T; beta 0 overwrites.
    gemm_b(O, T, D, N, N, 1.0f, dy, C, sout, elem(att, h * N * N, bf16), N, satt, 0.0f, dv, ld,
           sqkv, B, bf16, 0);
    // dP = dy v^T, i.e. dP^T (N, N) = Vc^T dYc.
    gemm_b(T, O, N, N, D, 1.0f, v, ld, sqkv, dy, C, sout, 0.0f, dp + h * N * N, N, satt, B, bf16,
           0);
  }
  const int64_t rows = B * H * N;
  softmax_bwd_kernel<<<softmax_blocks(rows), 32 * SM_WARPS, 0, vt_cuda_stream()>>>(
      dp, bf16 ? NULL : att, bf16 ? (const __nv_bfloat16 *)att : NULL,
      bf16 ? (__nv_bfloat16 *)(base + at_ds) : NULL, rows, N);
  VT_CUDA_CHECK_LAUNCH();
  for (int64_t h = 0; h < H; h++) {
    const void *q = elem(qkv, h * D, bf16), *k = elem(qkv, h * D + C, bf16);
    const void *dsh = elem(dsv, h * N * N, bf16);
    float *dq = dqkv + h * D, *dk = dq + C;
    // dq = scale dS k, i.e. dq^T (D, N) = Kc dSc.
    gemm_b(O, O, D, N, N, scale, k, ld, sqkv, dsh, N, satt, 0.0f, dq, ld, sqkv, B, bf16, 0);
    // dk = scale dS^T q, i.e. dk^T (D, N) = Qc dSc^T.
    gemm_b(O, T, D, N, N, scale, q, ld, sqkv, dsh, N, satt, 0.0f, dk, ld, sqkv, B, bf16, 0);
  }
}
