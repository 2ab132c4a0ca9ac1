// gemm.cu: the Linear op on CUDA, twin of src/cpu/gemm.c: cuBLAS GEMMs on the backend's stream,
// fp32 or (vt_backend.h's bf16 precision) bf16 operands with fp32 accumulation and fp32 outputs
// on the tensor cores, plus small kernels (bias broadcast, deterministic two-stage column sum).
// C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include <limits.h>

#include "cuda_common.h"
#include "cuda_ops.h"

// cuBLAS is column-major. A row-major (R, C) matrix with leading dimension C is, read column-major,
// its transpose (C, R) with the same leading dimension, so every row-major product X = A @ B is
// computed as the column-major X^T = B^T @ A^T with operands swapped and no data moved.

static void check_dims(const char *op, int64_t M, int64_t I, int64_t O) {
  // The classic cuBLAS API takes int sizes and leading dimensions.
  VT_CHECK(M <= INT_MAX && I <= INT_MAX && O <= INT_MAX,
           "%s: M=%lld I=%lld O=%lld exceed cuBLAS's int sizes", op, (long long)M, (long long)I,
           (long long)O);
}

// out (M, O) row r = bias: the GEMM then adds into it with beta = 1, as the CPU twin does.
static __global__ void bias_broadcast_kernel(float *out, const float *bias, int64_t M, int64_t O) {
  const int64_t count = M * O;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = bias[i % O];
}

// Column sums without atomics, so the result is the same bit for bit on every run, in two
// stages with enough blocks to fill the GPU: a block owns COLSUM_X adjacent columns of a chunk of
// COLSUM_ROWS rows (a constant, never derived from the GPU); its COLSUM_Y lanes per column walk
// the chunk's rows y, y+COLSUM_Y, ... in order, one thread adds the lane partials in lane order
// into the chunk's partial sums; then each column adds its chunks in order. In bf16 the first
// stage also writes the bf16 copy of x that the GEMMs read, so x is read once.
#define COLSUM_X 32
#define COLSUM_Y 16
#define COLSUM_ROWS 512
static __global__ void colsum_partial_kernel(float *part, __nv_bfloat16 *xb, const float *x,
                                             int64_t M, int64_t C) {
  __shared__ float lanes[COLSUM_Y][COLSUM_X + 1];  // +1: no bank conflicts on the column read
  const int64_t c = (int64_t)blockIdx.x * COLSUM_X + threadIdx.x;
  const int64_t m0 = (int64_t)blockIdx.y * COLSUM_ROWS;
  const int64_t m1 = m0 + COLSUM_ROWS < M ? m0 + COLSUM_ROWS : M;
  float acc = 0.0f;
  if (c < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += COLSUM_Y) {
      const float v = x[m * C + c];
      acc += v;
      if (xb) xb[m * C + c] = __float2bfloat16_rn(v);
    }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int y = 0; y < COLSUM_Y; y++) s += lanes[y][threadIdx.x];
    part[blockIdx.y * C + c] = s;
  }
}

static __global__ void colsum_final_kernel(float *out, const float *part, int64_t nchunk,
                                           int64_t C) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t k = 0; k < nchunk; k++) s += part[k * C + c];
  out[c] += s;
}

static int64_t colsum_chunks(int64_t M) { return (M + COLSUM_ROWS - 1) / COLSUM_ROWS; }

// out (C) += the column sums of x (M, C); with xb set, also xb = x in bf16. part: scratch of
// colsum_chunks(M) * C floats.
static void colsum_acc(float *out, __nv_bfloat16 *xb, const float *x, float *part, int64_t M,
                       int64_t C) {
  const int64_t nchunk = colsum_chunks(M), bx = (C + COLSUM_X - 1) / COLSUM_X;
  VT_CHECK(bx <= INT_MAX && nchunk <= 65535,
           "column sum: (%lld, %lld) is too large for one grid", (long long)M, (long long)C);
  if (nchunk == 0) return;
  colsum_partial_kernel<<<dim3((unsigned)bx, (unsigned)nchunk), dim3(COLSUM_X, COLSUM_Y), 0,
                          vt_cuda_stream()>>>(part, xb, x, M, C);
  VT_CUDA_CHECK_LAUNCH();
  colsum_final_kernel<<<vt_cuda_blocks(C, 256), 256, 0, vt_cuda_stream()>>>(out, part, nchunk, C);
  VT_CUDA_CHECK_LAUNCH();
}

// One column-major GEMM C = A op B with fp32 C: fp32 operands as they are, or bf16 copies made
// by the caller (vt_cuda_to_bf16) read with fp32 accumulation (CUBLAS_COMPUTE_32F).
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                 const float *alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                 const float *beta, float *C, int64_t ldc, int bf16) {
  if (!bf16) {
    VT_CUBLAS_CHECK(cublasSgemm(vt_cuda_cublas(), ta, tb, (int)m, (int)n, (int)k, alpha,
                                (const float *)A, (int)lda, (const float *)B, (int)ldb, beta, C,
                                (int)ldc));
    return;
  }
  VT_CUBLAS_CHECK(cublasGemmEx(vt_cuda_cublas(), ta, tb, (int)m, (int)n, (int)k, alpha, A,
                               CUDA_R_16BF, (int)lda, B, CUDA_R_16BF, (int)ldb, beta, C,
                               CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// bf16 copies of up to three fp32 tensors in the op scratch (NULL sources skipped), placed from
// *end on; the copies go to out[0..2]. In fp32 the sources themselves. With cast_first 0 the
// first copy's place is only reserved (its caller fills it).
static void operands(int bf16, const float *a, int64_t na, const float *b, int64_t nb,
                     const float *c, int64_t nc, int cast_first, size_t *end, char **base,
                     const void *out[3]) {
  out[0] = a, out[1] = b, out[2] = c;
  if (!bf16) return;
  const int64_t n[3] = {a ? na : 0, b ? nb : 0, c ? nc : 0};
  size_t at[3];
  for (int i = 0; i < 3; i++) at[i] = vt_cuda_carve(end, (size_t)n[i] * sizeof(__nv_bfloat16));
  *base = (char *)vt_cuda_scratch(*end);
  for (int i = 0; i < 3; i++) {
    if (!n[i]) continue;
    if (i || cast_first)
      vt_cuda_to_bf16((__nv_bfloat16 *)(*base + at[i]), (const float *)out[i], n[i]);
    out[i] = *base + at[i];
  }
}

extern "C" void vt_cuda_linear_fwd(float *out, const float *inp, const float *weight,
                                   const float *bias, int64_t M, int64_t I, int64_t O) {
  check_dims("linear_fwd", M, I, O);
  const float one = 1.0f, zero = 0.0f;
  if (bias) {
    bias_broadcast_kernel<<<vt_cuda_blocks(M * O, 256), 256, 0, vt_cuda_stream()>>>(out, bias, M,
                                                                                    O);
    VT_CUDA_CHECK_LAUNCH();
  }
  const int bf16 = vt_cuda_bf16();
  const void *op[3];
  size_t end = 0;
  char *base = NULL;
  operands(bf16, inp, M * I, weight, O * I, NULL, 0, 1, &end, &base, op);
  // out^T (O, M) = W (O, I) @ inp^T (I, M); W read column-major is W^T, hence OP_T.
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, O, M, I, &one, op[1], I, op[0], I, bias ? &one : &zero, out, O,
       bf16);
}

extern "C" void vt_cuda_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, int64_t M, int64_t I,
                                   int64_t O) {
  check_dims("linear_bwd", M, I, O);
  const float one = 1.0f, zero = 0.0f;
  const int bf16 = vt_cuda_bf16();
  // The bias gradient sums the fp32 dout in both precisions; in bf16 the same pass writes the
  // bf16 copy of dout (the scratch: the column sum's partials, then the bf16 operands).
  size_t end = 0;
  const size_t at_part = dbias ? vt_cuda_carve(&end, (size_t)(colsum_chunks(M) * O) * 4) : 0;
  char *base = (char *)vt_cuda_scratch(end);
  const void *op[3];  // dout, inp, weight
  operands(bf16, dout, M * O, inp, M * I, dinp ? weight : NULL, O * I, !dbias, &end, &base, op);
  if (dbias)
    colsum_acc(dbias, bf16 ? (__nv_bfloat16 *)op[0] : NULL, dout, (float *)(base + at_part), M, O);
  // dinp = dout @ W, i.e. dinp^T (I, M) = W^T (I, O) @ dout^T (O, M); beta 0 overwrites.
  if (dinp) gemm(CUBLAS_OP_N, CUBLAS_OP_N, I, M, O, &one, op[2], I, op[0], O, &zero, dinp, I, bf16);
  // dweight += dout^T @ inp, i.e. dweight^T (I, O) += inp^T (I, M) @ dout (M, O); beta 1 keeps
  // the gradient of earlier microbatches.
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, I, O, M, &one, op[1], I, op[0], O, &one, dweight, I, bf16);
}
