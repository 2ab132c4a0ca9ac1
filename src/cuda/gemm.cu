// gemm.cu: the Linear op on CUDA, twin of src/cpu/gemm.c: fp32 cuBLAS GEMMs on the backend's
// stream plus two small kernels (bias broadcast, deterministic column sum). C-style CUDA, no STL.
// Must not depend on MPI, NCCL or the model.
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

// Column sums without atomics, so the result is the same bit for bit on every run: a block owns
// COLSUM_X adjacent columns (coalesced row reads); its COLSUM_Y lanes per column each walk the
// rows y, y+COLSUM_Y, ... in order, then one thread adds the lane partials in lane order.
#define COLSUM_X 32
#define COLSUM_Y 16
static __global__ void colsum_acc_kernel(float *out, const float *x, int64_t M, int64_t C) {
  __shared__ float part[COLSUM_Y][COLSUM_X + 1];  // +1: no bank conflicts on the column read
  const int64_t c = (int64_t)blockIdx.x * COLSUM_X + threadIdx.x;
  float acc = 0.0f;
  if (c < C)
    for (int64_t m = threadIdx.y; m < M; m += COLSUM_Y) acc += x[m * C + c];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int y = 0; y < COLSUM_Y; y++) s += part[y][threadIdx.x];
    out[c] += s;
  }
}

extern "C" void vt_cuda_colsum_acc(float *out, const float *x, int64_t M, int64_t C) {
  const int64_t blocks = (C + COLSUM_X - 1) / COLSUM_X;
  VT_CHECK(blocks <= INT_MAX, "colsum: C=%lld is too wide for one grid", (long long)C);
  colsum_acc_kernel<<<(unsigned)blocks, dim3(COLSUM_X, COLSUM_Y), 0, vt_cuda_stream()>>>(out, x, M,
                                                                                        C);
  VT_CUDA_CHECK_LAUNCH();
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
  // out^T (O, M) = W (O, I) @ inp^T (I, M); W read column-major is W^T, hence OP_T.
  VT_CUBLAS_CHECK(cublasSgemm(vt_cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, (int)O, (int)M, (int)I,
                              &one, weight, (int)I, inp, (int)I, bias ? &one : &zero, out,
                              (int)O));
}

extern "C" void vt_cuda_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, int64_t M, int64_t I,
                                   int64_t O) {
  check_dims("linear_bwd", M, I, O);
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t h = vt_cuda_cublas();
  // dinp = dout @ W, i.e. dinp^T (I, M) = W^T (I, O) @ dout^T (O, M); beta 0 overwrites.
  if (dinp)
    VT_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)I, (int)M, (int)O, &one, weight,
                                (int)I, dout, (int)O, &zero, dinp, (int)I));
  // dweight += dout^T @ inp, i.e. dweight^T (I, O) += inp^T (I, M) @ dout (M, O); beta 1 keeps
  // the gradient of earlier microbatches.
  VT_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)I, (int)O, (int)M, &one, inp,
                              (int)I, dout, (int)O, &one, dweight, (int)I));
  if (dbias) vt_cuda_colsum_acc(dbias, dout, M, O);
}
