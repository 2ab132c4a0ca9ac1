// emu_blas.cpp: cuBLAS and cuBLASLt of the CUDA emulation (emu.cpp says what it is for): the
// calls src/cuda/gemm.cu and the attention's fallbacks make, on one plain GEMM that runs on the
// host when called, after the copies queued on the handle's stream.
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "cuda_bf16.h"

// ---- cuBLAS: one column-major GEMM, fp32 sums in k order, bf16 operands widened exactly, a bf16
// C rounded to nearest even ----
const char *cublasGetStatusName(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char *cublasGetStatusString(cublasStatus_t) { return "emulated cuBLAS status"; }
cublasStatus_t cublasCreate(cublasHandle_t *h) {
  static int obj;
  *h = (cublasHandle_t)&obj;
  return CUBLAS_STATUS_SUCCESS;
}
static cudaStream_t g_cublas_stream = nullptr;  // one handle in vit3d
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t st) {
  g_cublas_stream = st;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

static float load(const void *p, cudaDataType t, size_t i) {
  return t == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (m < 0 || n < 0 || k < 0 || batch < 0 || ldc < m ||
      lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n))
    return CUBLAS_STATUS_INVALID_VALUE;
  vt_emu::flush_stream(g_cublas_stream);
  const float al = *(const float *)alpha, be = *(const float *)beta;
  // The operands widened to fp32 once per matrix, A by rows (a[i][p]) and B by rows of op(B)
  // (b[p][j]), so that a block of C's row sums its products in k order, each element in its own
  // accumulator (the compiler keeps them apart: no FMA without -march, no reassociation).
  // B's rows padded with zeros to whole blocks of kBlock columns (the compiler then vectorises
  // the fixed-length loop over a block).
  enum { kBlock = 64 };
  const size_t nb = ((size_t)n + kBlock - 1) / kBlock * kBlock;
  static std::vector<float> a, bm;
  a.resize((size_t)m * k), bm.assign((size_t)k * nb, 0.0f);
  for (long long b = 0; b < batch; b++) {
    for (int i = 0; i < m; i++)
      for (int p = 0; p < k; p++)
        a[(size_t)i * k + p] =
            load(A, at, b * sa + (ta == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda));
    for (int p = 0; p < k; p++)
      for (int j = 0; j < n; j++)
        bm[(size_t)p * nb + j] =
            load(B, bt, b * sb + (tb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb));
    for (int i = 0; i < m; i++)
      for (int j0 = 0; j0 < n; j0 += kBlock) {
        const int nj = n - j0 < kBlock ? n - j0 : kBlock;
        float s[kBlock] = {0};
        const float *ar = &a[(size_t)i * k];
        for (int p = 0; p < k; p++) {
          const float *br = &bm[(size_t)p * nb + j0], ap = ar[p];
          for (int t = 0; t < kBlock; t++) s[t] += ap * br[t];
        }
        for (int t = 0; t < nj; t++) {
          const size_t ic = b * sc + i + (size_t)(j0 + t) * ldc;
          // beta 0: C unread
          const float r = be == 0.0f ? al * s[t] : al * s[t] + be * load(C, ct, ic);
          if (ct == CUDA_R_16BF) ((__nv_bfloat16 *)C)[ic] = __float2bfloat16_rn(r);
          else ((float *)C)[ic] = r;
        }
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t c32,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta,
                                    C, ct, ldc, 0, 1, c32, algo);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc,
                                         int batch) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B,
                                    CUDA_R_32F, ldb, sb, beta, C, CUDA_R_32F, ldc, sc, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
                                   0, 1);
}

// ---- cuBLASLt: descriptors as structs; the matmul is the GEMM above plus the bias epilogue ----
struct emu_lt_desc {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int bias_t = -1;  // cudaDataType; -1: D's (cuBLASLt's default)
};
struct emu_lt_layout {
  cudaDataType t;
  uint64_t rows, cols;
  int64_t ld;
};
struct emu_lt_pref {
  size_t ws = 0;
};
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  static int obj;
  *h = (cublasLtHandle_t)&obj;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t,
                                        cudaDataType) {
  *d = new emu_lt_desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: memcpy(&d->ta, buf, n); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: memcpy(&d->tb, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: memcpy(&d->epi, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&d->bias, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: memcpy(&d->bias_t, buf, n); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new emu_lt_layout{t, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new emu_lt_pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n) {
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == sizeof p->ws) {
    memcpy(&p->ws, buf, n);
    return CUBLAS_STATUS_SUCCESS;
  }
  const bool align = a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES &&
                     a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES;
  return align && n == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
// cuBLASLt's documentation (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) wants the bias in D's type
// outside int8 and fp8 kernels: a bias of another type finds no algorithm here.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int want,
                                              cublasLtMatmulHeuristicResult_t *res, int *found) {
  if (want < 1) return CUBLAS_STATUS_INVALID_VALUE;
  memset(res, 0, sizeof *res * (size_t)want);
  if (d->epi == CUBLASLT_EPILOGUE_BIAS && d->bias_t != -1 && d->bias_t != (int)dl->t) {
    *found = 0;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Up to three "algorithms" (all compute the same here) with different workspaces within the
  // limit, the largest not first: a caller that gives another one the first one's workspace is
  // refused (cublasLtMatmul checks its algorithm's need, then scribbles on what it was given).
  const size_t sizes[3] = {2048, 0, 4096};
  *found = want < 3 ? want : 3;
  for (int i = 0; i < *found; i++) {
    res[i].workspaceSize = p->ws < sizes[i] ? p->ws : sizes[i];
    res[i].algo.data[0] = (uint64_t)res[i].workspaceSize;  // what its call needs
    res[i].state = CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t a, const void *B,
                              cublasLtMatrixLayout_t b, const void *beta, const void *C,
                              cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn,
                              cudaStream_t stream) {
  vt_emu::flush_stream(stream);
  if (!algo || wsn < algo->data[0]) return CUBLAS_STATUS_NOT_SUPPORTED;  // too little workspace
  // op(A) is m x k and op(B) k x n as stored; D and C m x n, of one type and leading dimension
  // (C may be D; with beta 0 it is not read).
  const uint64_t m = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
  const uint64_t k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols;
  const uint64_t n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
  if (k != kb || dl->rows != m || dl->cols != n || c->t != dl->t || c->ld != dl->ld ||
      (wsn && !ws) || (d->epi == CUBLASLT_EPILOGUE_BIAS &&
       (!d->bias || (d->bias_t != (int)CUDA_R_32F && d->bias_t != (int)CUDA_R_16BF))))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (wsn) memset(ws, 0x5a, wsn);  // the workspace is scribbled on, as a real kernel may
  // The fp32 result (plus beta C, plus the bias) into a temporary, then stored as D's type.
  float *acc = (float *)malloc(m * n * sizeof(float));
  const float zero = 0.0f;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      nullptr, d->ta, d->tb, (int)m, (int)n, (int)k, alpha, A, a->t, (int)a->ld, 0, B, b->t,
      (int)b->ld, 0, &zero, acc, CUDA_R_32F, (int)m, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  const float be = *(const float *)beta;
  for (uint64_t j = 0; st == CUBLAS_STATUS_SUCCESS && j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      float r = acc[i + j * m];
      if (be != 0.0f) r += be * load(C, c->t, i + j * c->ld);
      if (d->epi == CUBLASLT_EPILOGUE_BIAS) r += load(d->bias, (cudaDataType)d->bias_t, i);
      if (dl->t == CUDA_R_16BF) ((__nv_bfloat16 *)D)[i + j * dl->ld] = __float2bfloat16_rn(r);
      else ((float *)D)[i + j * dl->ld] = r;
    }
  free(acc);
  (void)h;
  return st;
}
