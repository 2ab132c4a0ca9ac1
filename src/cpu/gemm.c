// gemm.c: the CPU GEMM (OpenBLAS sgemm, or plain loops when VT_BLAS is off) and the Linear op.
// One thread pool: OpenBLAS runs single-threaded and vt_cpu_sgemm splits the output into bands
// the OpenMP threads share. Two pools (OpenMP's and OpenBLAS's own pthreads) on the same cores spin
// against each other after every call; measured 3x slower on 2 cores (tests/bench_cpu.sh).
#include <string.h>

#include "cpu.h"
#ifdef VT_HAVE_BLAS
#include <cblas.h>
#undef I  // OpenBLAS pulls in complex.h, whose I would clash with dimension names
#endif

void vt_cpu_sgemm_serial(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
#ifdef VT_HAVE_BLAS
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N, (blasint)K, alpha, A,
              (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
#else
  // Plain loops, correct for every transpose; i-p-j order keeps the inner loop contiguous in C.
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * ldc;
    for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    for (int64_t p = 0; p < K; p++) {
      float a = alpha * (trans_a ? A[p * lda + i] : A[i * lda + p]);
      if (trans_b)
        for (int64_t j = 0; j < N; j++) c[j] += a * B[j * ldb + p];
      else
        for (int64_t j = 0; j < N; j++) c[j] += a * B[p * ldb + j];
    }
  }
#endif
}

// The bands vt_cpu_sgemm splits a GEMM's output into: a function of the shape alone, never of
// the thread count, so the sgemm calls (and OpenBLAS's choice of kernel for each: its
// small-matrix kernels round otherwise) and hence the bits are the same on any number of
// threads. At least 2^20 multiply-adds and 16 rows (or columns) a band, at most 8 bands (each
// sgemm call packs the whole other operand again: 16 bands made a ViT-Ti/16 step on 2 threads 9%
// slower than a band per thread, 8 bands 4%); a power of two, so 2, 4 and 8 threads share them
// evenly.
static int64_t gemm_bands(int64_t len, int64_t M, int64_t N, int64_t K) {
  int64_t n = M * N * K >> 20;
  n = n < len / 16 ? n : len / 16;
  return n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
}

void vt_cpu_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
  // Bands of the longer side of C (rows of op(A) or columns of op(B)), run by the OpenMP threads.
  const int by_rows = M >= N;
  const int64_t len = by_rows ? M : N, nbands = gemm_bands(len, M, N, K);
  if (nbands > 1) {
    const int64_t band = (len + nbands - 1) / nbands;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < nbands; t++) {
      const int64_t lo = t * band, n = lo + band < len ? band : len - lo;
      if (n <= 0) continue;
      if (by_rows)
        vt_cpu_sgemm_serial(trans_a, trans_b, n, N, K, alpha, trans_a ? A + lo : A + lo * lda, lda,
                            B, ldb, beta, C + lo * ldc, ldc);
      else
        vt_cpu_sgemm_serial(trans_a, trans_b, M, n, K, alpha, A, lda,
                            trans_b ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
    }
    return;
  }
  vt_cpu_sgemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// out_act: out is a bf16 activation in bf16 precision (vt_ops.h), made in fp32 in the scratch
// from the bias rounded to bf16, and rounded once.
static void linear_fwd(float *out, const float *inp, const float *weight, const float *bias,
                       int64_t M, int64_t In, int64_t O, int out_act) {
  float *final = NULL;
  if (vt_cpu_bf16()) {  // the GEMM on fp32 copies of the bf16 operands (vt_backend.h, vt_ops.h)
    const int64_t nb = out_act && bias ? O : 0;
    float *x = vt_cpu_scratch((size_t)((M + O) * In + (out_act ? M * O : 0) + nb));
    float *w = x + M * In;
    vt_cpu_widen_bf16(x, inp, M * In);
    vt_cpu_round_bf16(w, weight, O * In);
    inp = x, weight = w;
    if (out_act) final = out, out = w + O * In;
    if (nb) {
      float *b = w + O * In + M * O;
      for (int64_t o = 0; o < O; o++) b[o] = vt_bf16_round(bias[o]);
      bias = b;
    }
  }
  // Start from the bias so the GEMM adds into it (beta = 1) instead of a second pass.
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) memcpy(out + m * O, bias, (size_t)O * sizeof(float));
  }
  vt_cpu_sgemm(0, 1, M, O, In, 1.0f, inp, In, weight, In, bias ? 1.0f : 0.0f, out, O);
  if (!final) return;
  uint16_t *o = (uint16_t *)final;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M * O; i++) o[i] = vt_bf16_bits(out[i]);
}

void vt_cpu_linear_fwd(float *out, const float *inp, const float *weight, const float *bias,
                       int64_t M, int64_t In, int64_t O) {
  linear_fwd(out, inp, weight, bias, M, In, O, 0);
}

// The unfused order (linear, then out + res), so a model that fuses computes the bits it did
// before on the CPU.
void vt_cpu_linear_residual_fwd(float *out, const float *inp, const float *weight,
                                const float *bias, const float *res, int64_t M, int64_t In,
                                int64_t O) {
  linear_fwd(out, inp, weight, bias, M, In, O, 0);
  vt_cpu_add(out, out, res, M * O);
}

void vt_cpu_linear_act_fwd(float *out, const float *inp, const float *weight, const float *bias,
                           int64_t M, int64_t In, int64_t O) {
  linear_fwd(out, inp, weight, bias, M, In, O, 1);
}

// linear_bwd; with dout_act linear_act_bwd (dout a bf16 activation in bf16 precision, no dbias),
// with dinp_act linear_bwd_act (dinp a bf16 activation in bf16 precision); vt_ops.h.
static void linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, int64_t M, int64_t In, int64_t O,
                       int dout_act, int dinp_act) {
  float *final = NULL;
  if (vt_cpu_bf16()) {  // bias gradient from the fp32 dout; the GEMMs on rounded copies
    if (dbias) vt_cpu_colsum_acc(dbias, dout, M, O);
    dbias = NULL;
    float *dy = vt_cpu_scratch((size_t)(M * O + (M + O) * In + (dinp_act ? M * In : 0)));
    float *x = dy + M * O, *w = x + M * In;
    if (dout_act) vt_cpu_widen_bf16(dy, dout, M * O);
    else vt_cpu_round_bf16(dy, dout, M * O);
    if (dweight) vt_cpu_widen_bf16(x, inp, M * In);
    if (dinp) vt_cpu_round_bf16(w, weight, O * In);
    dout = dy, inp = x, weight = w;
    if (dinp_act) final = dinp, dinp = w + O * In;  // the fp32 result, rounded at the end
  }
  if (dinp) vt_cpu_sgemm(0, 0, M, In, O, 1.0f, dout, O, weight, In, 0.0f, dinp, In);  // dout @ W
  if (dweight) vt_cpu_sgemm(1, 0, O, In, M, 1.0f, dout, O, inp, In, 1.0f, dweight, In);  // dout^T @ inp
  if (dbias) vt_cpu_colsum_acc(dbias, dout, M, O);
  if (!final) return;
  uint16_t *o = (uint16_t *)final;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M * In; i++) o[i] = vt_bf16_bits(dinp[i]);
}

void vt_cpu_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, int64_t M, int64_t In, int64_t O) {
  linear_bwd(dinp, dweight, dbias, dout, inp, weight, M, In, O, 0, 0);
}

void vt_cpu_linear_bwd_act(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, int64_t M, int64_t In,
                           int64_t O) {
  linear_bwd(dinp, dweight, dbias, dout, inp, weight, M, In, O, 0, 1);
}

void vt_cpu_linear_act_bwd(float *dinp, float *dweight, const float *dout, const float *inp,
                           const float *weight, int64_t M, int64_t In, int64_t O) {
  linear_bwd(dinp, dweight, NULL, dout, inp, weight, M, In, O, 1, 0);
}
