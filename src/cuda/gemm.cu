// gemm.cu: the Linear op on CUDA, twin of src/cpu/gemm.c: cuBLAS GEMMs on the backend's stream,
// fp32 or (vt_backend.h's bf16 precision) bf16 operands with fp32 accumulation on the tensor
// cores and fp32 outputs (bf16 ones for the bf16 activations of vt_ops.h), plus small kernels
// (bias broadcast, deterministic two-stage column sum).
// C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include <cublasLt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colsum.cuh"
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

// out (M, O) row r = bias (as the CPU twin starts), or with res (linear_residual_fwd) res's row
// r + bias (bias may then be NULL): the GEMM then adds into it with beta = 1. A bf16 out
// (linear_act_fwd) holds the bias rounded to bf16, which vt_ops.h's rounding makes exact.
template <typename T>
static __global__ void bias_broadcast_kernel(T *out, const float *bias, const float *res,
                                             int64_t M, int64_t O) {
  const int64_t count = M * O;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = (res ? res[i] : 0.0f) + (bias ? bias[i % O] : 0.0f);
    if (sizeof(T) == 2) ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(v);
    else ((float *)out)[i] = v;
  }
}

// One column-major GEMM C = A op B: fp32 operands as they are, or bf16 copies made by the
// caller (vt_cuda_to_bf16) read with fp32 accumulation (CUBLAS_COMPUTE_32F), into an fp32 C or,
// with c_bf16 (bf16 operands only), a bf16 C: the fp32 result rounded once.
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                 const float *alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                 const float *beta, void *C, int64_t ldc, int bf16, int c_bf16) {
  if (!bf16) {
    VT_CUBLAS_CHECK(cublasSgemm(vt_cuda_cublas(), ta, tb, (int)m, (int)n, (int)k, alpha,
                                (const float *)A, (int)lda, (const float *)B, (int)ldb, beta,
                                (float *)C, (int)ldc));
    return;
  }
  VT_CUBLAS_CHECK(cublasGemmEx(vt_cuda_cublas(), ta, tb, (int)m, (int)n, (int)k, alpha, A,
                               CUDA_R_16BF, (int)lda, B, CUDA_R_16BF, (int)ldb, beta, C,
                               c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

// ---- cuBLASLt: the bf16 forward GEMM with the bias added in its epilogue ---------------------
// out^T (O, M) = W^T (read from W (O, I) column-major) @ inp^T (I, M) + bias broadcast along M,
// in one kernel (CUBLASLT_EPILOGUE_BIAS, bias of length O = the rows of D): no broadcast pass and
// no read of C; or, for linear_residual_fwd, + res as C with beta = 1 (D = A B + C, then the
// bias). The bias has D's type, as cuBLASLt's header asks (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE):
// fp32, or bf16 for a bf16 D (linear_act_fwd's, whose bias vt_ops.h rounds to bf16). One plan
// per shape and operand alignment (descriptors and the heuristic's first algorithm, chosen for
// the alignments the pointers really have), made on first use. fp32, a shape or alignment
// cuBLASLt has no algorithm for, a bias not 16-byte aligned, a failed call (the plan is then
// dropped, said once on stderr) or VT_CUBLASLT=0 take the cuBLAS path (broadcast, then beta =
// 1). The workspace is carved from the op scratch. VT_CUBLASLT_TUNE=n (2 .. 16; a diagnosis for
// benchmarks, tests/gpu/run.sh): the plan takes the heuristic's first n algorithms and its first
// call times each on its own operands (the host waits for it there) and keeps the fastest; which
// one wins depends on timings, so two processes may then differ in the last bits.
#define LT_PLANS 64
#define LT_WORKSPACE ((size_t)32 << 20)
#define LT_TUNE_MAX 16
typedef struct {
  int64_t M, I, O;
  unsigned align_w, align_x, align_out;  // bytes: the largest power of two up to 256 dividing
                                         // the address (the weight's: the held copy's or 256)
  unsigned align_res;           // res's (C's), or 0 without one (C is then D, beta 0)
  int out_bf16, ok;             // D fp32, or bf16 (linear_act_fwd)
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  size_t workspace;             // the algorithm's; while candidates wait, the largest of theirs
  int ncand;                    // > 1: candidates to time at the first call (VT_CUBLASLT_TUNE)
  cublasLtMatmulAlgo_t cand[LT_TUNE_MAX];
  size_t cand_ws[LT_TUNE_MAX];
} lt_plan;
static lt_plan g_plans[LT_PLANS];
static int g_nplans = 0;
static cublasLtHandle_t g_lt = NULL;

static int lt_enabled(void) {
  static int on = -1;
  if (on < 0) {
    on = vt_cuda_switch_on("VT_CUBLASLT");
    if (on && cublasLtCreate(&g_lt) != CUBLAS_STATUS_SUCCESS) on = 0;
  }
  return on;
}

// VT_CUBLASLT_TUNE: how many of the heuristic's algorithms a plan times (1: its first, untimed).
static int lt_tune_count(void) {
  static int n = -1;
  if (n < 0) {
    const char *e = getenv("VT_CUBLASLT_TUNE");
    n = e ? atoi(e) : 1;
    if (n < 1) n = 1;
    if (n > LT_TUNE_MAX) n = LT_TUNE_MAX;
  }
  return n;
}

static int lt_report(void) {
  const char *e = getenv("VT_CUBLASLT_REPORT");  // tests/gpu/run.sh's diagnosis
  return e && strcmp(e, "1") == 0;
}

static unsigned alignment(const void *p) {
  unsigned a = 256;
  while (a > 1 && (uintptr_t)p % a) a /= 2;
  return a;
}

// Builds the plan's descriptors and asks for an algorithm; ok 0 when any step fails.
static void lt_make(lt_plan *p) {
  const cudaDataType t = CUDA_R_16BF, bias_t = p->out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  const uint32_t al_w = p->align_w, al_x = p->align_x, al_out = p->align_out;
  const uint32_t al_c = p->align_res ? p->align_res : al_out;
  const size_t ws = LT_WORKSPACE;
  const uint64_t M = (uint64_t)p->M, I = (uint64_t)p->I, O = (uint64_t)p->O;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res[LT_TUNE_MAX];
  int found = 0;
  cublasLtMatmulDesc_t d = NULL;
  p->ok = cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0;
  p->desc = d;
#define LT_OK(call) (p->ok = p->ok && (call) == CUBLAS_STATUS_SUCCESS)
  LT_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LT_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LT_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                       sizeof bias_t));
  LT_OK(cublasLtMatrixLayoutCreate(&p->a, t, I, O, (int64_t)I));  // W^T stored (I, O)
  LT_OK(cublasLtMatrixLayoutCreate(&p->b, t, I, M, (int64_t)I));  // inp^T stored (I, M)
  LT_OK(cublasLtMatrixLayoutCreate(&p->d, p->out_bf16 ? t : CUDA_R_32F, O, M, (int64_t)O));
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_w, sizeof al_w));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_x, sizeof al_x));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_out, sizeof al_out));
  LT_OK(cublasLtMatmulAlgoGetHeuristic(g_lt, d, p->a, p->b, p->d, p->d, pref, lt_tune_count(),
                                       res, &found));
#undef LT_OK
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  p->ncand = 0;
  for (int i = 0; p->ok && i < found && i < LT_TUNE_MAX; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) {
      p->cand[p->ncand] = res[i].algo, p->cand_ws[p->ncand] = res[i].workspaceSize;
      if (!p->ncand || res[i].workspaceSize > p->workspace) p->workspace = res[i].workspaceSize;
      p->ncand++;
    }
  p->ok = p->ok && p->ncand > 0;
  if (p->ok) p->algo = p->cand[0];
}

// The plan for this call, or NULL when cuBLASLt is off or has no algorithm for it.
static lt_plan *lt_plan_for(const void *w, const void *inp, const float *out, const void *bias,
                            const float *res, int64_t M, int64_t I, int64_t O, int out_bf16) {
  if (!lt_enabled() || alignment(bias) < 16) return NULL;
  const unsigned aw = alignment(w), ax = alignment(inp), ao = alignment(out);
  const unsigned ac = res ? alignment(res) : 0;
  for (int i = 0; i < g_nplans; i++) {
    lt_plan *p = &g_plans[i];
    if (p->M == M && p->I == I && p->O == O && p->align_w == aw && p->align_x == ax &&
        p->align_out == ao && p->align_res == ac && p->out_bf16 == out_bf16)
      return p->ok ? p : NULL;
  }
  if (g_nplans == LT_PLANS) return NULL;
  lt_plan *p = &g_plans[g_nplans++];
  memset(p, 0, sizeof *p);
  p->M = M, p->I = I, p->O = O, p->align_w = aw, p->align_x = ax, p->align_out = ao;
  p->align_res = ac;
  p->out_bf16 = out_bf16;
  lt_make(p);
  if (lt_report())
    fprintf(stderr, "vit3d: cuBLASLt bias epilogue M=%lld I=%lld O=%lld D %s%s: %s\n",
            (long long)M, (long long)I, (long long)O, out_bf16 ? "bf16" : "fp32",
            res ? " C=res" : "", p->ok ? "algorithm found" : "no algorithm");
  return p->ok ? p : NULL;
}

static cublasStatus_t lt_call(lt_plan *p, const cublasLtMatmulAlgo_t *algo, size_t wsn,
                              float *out, const void *inp, const void *w, const float *res,
                              void *ws) {
  const float one = 1.0f, zero = 0.0f;
  // C has D's layout (fp32 (O, M)); with res it is read (beta 1), else it is D, unread.
  return cublasLtMatmul(g_lt, p->desc, &one, w, p->a, inp, p->b, res ? &one : &zero,
                        res ? (const void *)res : out, p->d, out, p->d, algo, ws, wsn,
                        vt_cuda_stream());
}

// VT_CUBLASLT_TUNE: times each candidate (a call to warm it, then 3 between two events) on this
// call's operands, which it may do over and over (res never aliases out: vt_ops.h), and keeps
// the fastest; a candidate whose call fails is passed over. The host waits here, once per plan.
static void lt_tune(lt_plan *p, float *out, const void *inp, const void *w, const float *res,
                    void *ws) {
  enum { REPS = 3 };
  cudaEvent_t e0, e1;
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&e0, cudaEventDefault));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDefault));
  float best = -1.0f, first = -1.0f;
  int pick = 0;
  for (int i = 0; i < p->ncand; i++) {
    const cublasLtMatmulAlgo_t *a = &p->cand[i];
    const size_t wsn = p->cand_ws[i];
    int ok = lt_call(p, a, wsn, out, inp, w, res, ws) == CUBLAS_STATUS_SUCCESS;
    VT_CUDA_CHECK(cudaEventRecord(e0, vt_cuda_stream()));
    for (int r = 0; ok && r < REPS; r++)
      ok = lt_call(p, a, wsn, out, inp, w, res, ws) == CUBLAS_STATUS_SUCCESS;
    VT_CUDA_CHECK(cudaEventRecord(e1, vt_cuda_stream()));
    VT_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    VT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (!ok) continue;
    if (i == 0) first = ms / REPS;
    if (best < 0.0f || ms / REPS < best) best = ms / REPS, pick = i;
  }
  VT_CUDA_CHECK(cudaEventDestroy(e0));
  VT_CUDA_CHECK(cudaEventDestroy(e1));
  if (lt_report() && best >= 0.0f)
    fprintf(stderr, "vit3d: cuBLASLt tuned M=%lld I=%lld O=%lld D %s%s: algorithm %d of %d, "
            "%.1f us (the heuristic's first: %.1f us)\n", (long long)p->M, (long long)p->I,
            (long long)p->O, p->out_bf16 ? "bf16" : "fp32", res ? " C=res" : "", pick + 1,
            p->ncand, 1e3 * best, 1e3 * first);
  p->algo = p->cand[pick], p->workspace = p->cand_ws[pick];
  p->ncand = 1;
}

// out = inp W^T + bias [+ res] with the plan (ws: p->workspace bytes of device memory; bias of
// D's type); 0 when the call failed (nothing written), which drops the plan.
static int lt_linear_fwd(lt_plan *p, float *out, const void *inp, const void *w, const void *bias,
                         const float *res, void *ws) {
  cublasStatus_t st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof bias);
  if (st == CUBLAS_STATUS_SUCCESS && p->ncand > 1) lt_tune(p, out, inp, w, res, ws);
  if (st == CUBLAS_STATUS_SUCCESS) st = lt_call(p, &p->algo, p->workspace, out, inp, w, res, ws);
  if (st == CUBLAS_STATUS_SUCCESS) return 1;
  fprintf(stderr, "vit3d: cublasLtMatmul (M=%lld I=%lld O=%lld) failed with status %d; this "
          "shape uses cuBLAS from now on\n", (long long)p->M, (long long)p->I, (long long)p->O,
          (int)st);
  p->ok = 0;
  return 0;
}

// In bf16 precision inp is a bf16 activation (vt_ops.h), read by the GEMMs as it is; the weight
// is the held copy (hold_weights) or cast into the op scratch, as dout is. out_act
// (linear_act_fwd): in bf16 out is a bf16 activation too, the fp32 result with its bias (rounded
// to bf16, vt_ops.h) rounded once: cuBLASLt's bf16 D with a bf16 copy of the bias, or without a
// plan cuBLAS's bf16 C holding the bias (exact in bf16), read with beta 1 and overwritten by the
// result (the products summed in fp32, the bias added, rounded once), as PyTorch's bf16 addmm
// does: 6 bytes an element moved where an fp32 C and a cast moved 18. res (linear_residual_fwd,
// fp32 out only): added as cuBLASLt's C, or the GEMM adds into res + bias.
static void linear_fwd(float *out, const float *inp, const float *weight, const float *bias,
                       const float *res, int64_t M, int64_t I, int64_t O, int out_act) {
  check_dims("linear_fwd", M, I, O);
  const float one = 1.0f, zero = 0.0f;
  const int bf16 = vt_cuda_bf16(), out_bf16 = bf16 && out_act, bias16 = out_bf16 && bias;
  // bf16: the weight's bf16 copy unless it is held, the bias's for a bf16 out, then cuBLASLt's
  // workspace or the fp32 result, in the scratch (its copies 256-byte aligned: alignment(NULL)).
  const void *held = bf16 ? vt_cuda_held_weights(weight, O * I) : NULL;
  lt_plan *lt = bias && bf16 ? lt_plan_for(held, inp, out, bias16 ? NULL : bias, res, M, I, O,
                                           out_bf16)
                             : NULL;
  size_t end = 0;
  const size_t h2 = sizeof(__nv_bfloat16);
  const size_t at_w = vt_cuda_carve(&end, bf16 && !held ? (size_t)(O * I) * h2 : 0);
  const size_t at_b = vt_cuda_carve(&end, lt && bias16 ? (size_t)O * h2 : 0);
  const size_t at_ws = vt_cuda_carve(&end, lt ? lt->workspace : 0);
  const void *w = weight;
  if (bf16) {
    char *base = (char *)vt_cuda_scratch(end);
    if (!held) vt_cuda_to_bf16((__nv_bfloat16 *)(base + at_w), weight, O * I);
    w = held ? held : base + at_w;
    if (lt) {
      if (bias16) vt_cuda_to_bf16((__nv_bfloat16 *)(base + at_b), bias, O);
      if (lt_linear_fwd(lt, out, inp, w, bias16 ? (const void *)(base + at_b) : bias, res,
                        base + at_ws))
        return;
      linear_fwd(out, inp, weight, bias, res, M, I, O, out_act);  // the plan is dropped now
      return;
    }
  }
  if (bias || res) {
    const unsigned blocks = vt_cuda_blocks(M * O, 256);
    if (out_bf16)
      bias_broadcast_kernel<__nv_bfloat16><<<blocks, 256, 0, vt_cuda_stream()>>>(
          (__nv_bfloat16 *)out, bias, res, M, O);
    else
      bias_broadcast_kernel<float><<<blocks, 256, 0, vt_cuda_stream()>>>(out, bias, res, M, O);
    VT_CUDA_CHECK_LAUNCH();
  }
  // out^T (O, M) = W (O, I) @ inp^T (I, M); W read column-major is W^T, hence OP_T.
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, O, M, I, &one, w, I, inp, I, bias || res ? &one : &zero, out, O,
       bf16, out_bf16);
}

extern "C" void vt_cuda_linear_fwd(float *out, const float *inp, const float *weight,
                                   const float *bias, int64_t M, int64_t I, int64_t O) {
  linear_fwd(out, inp, weight, bias, NULL, M, I, O, 0);
}

extern "C" void vt_cuda_linear_residual_fwd(float *out, const float *inp, const float *weight,
                                            const float *bias, const float *res, int64_t M,
                                            int64_t I, int64_t O) {
  linear_fwd(out, inp, weight, bias, res, M, I, O, 0);
}

extern "C" void vt_cuda_linear_act_fwd(float *out, const float *inp, const float *weight,
                                       const float *bias, int64_t M, int64_t I, int64_t O) {
  linear_fwd(out, inp, weight, bias, NULL, M, I, O, 1);
}

// linear_bwd; with dout_act linear_act_bwd (dout a bf16 activation in bf16 precision, no dbias),
// with dinp_act linear_bwd_act (dinp a bf16 activation in bf16 precision: the dinp GEMM's C is
// bf16); vt_ops.h.
static void linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, int64_t M, int64_t I, int64_t O,
                       int dout_act, int dinp_act) {
  check_dims("linear_bwd", M, I, O);
  const float one = 1.0f, zero = 0.0f;
  const int bf16 = vt_cuda_bf16();
  // The op scratch: the bias gradient's chunk partials, then in bf16 the copies of dout (unless
  // it is one already) and of the weight (unless it is held). The bias gradient sums the fp32
  // dout in both precisions; in bf16 the same pass writes dout's copy.
  const size_t h2 = sizeof(__nv_bfloat16);
  const void *held = bf16 && dinp ? vt_cuda_held_weights(weight, O * I) : NULL;
  size_t end = 0;
  const size_t at_part = vt_cuda_carve(&end, dbias ? (size_t)(colsum_chunks(M) * O) * 4 : 0);
  const size_t at_dy = vt_cuda_carve(&end, bf16 && !dout_act ? (size_t)(M * O) * h2 : 0);
  const size_t at_w = vt_cuda_carve(&end, bf16 && dinp && !held ? (size_t)(O * I) * h2 : 0);
  char *base = (char *)vt_cuda_scratch(end);
  const void *dy = dout, *w = weight;
  if (bf16) {
    if (!dout_act) dy = base + at_dy;
    if (!dout_act && !dbias) vt_cuda_to_bf16((__nv_bfloat16 *)(base + at_dy), dout, M * O);
    if (dinp && !held) vt_cuda_to_bf16((__nv_bfloat16 *)(base + at_w), weight, O * I);
    if (dinp) w = held ? held : base + at_w;
  }
  if (dbias)
    colsum_acc(dbias, bf16 ? (float *)(base + at_dy) : NULL, 1, vt_src_plain{dout},
               (float *)(base + at_part), M, O);
  // dinp = dout @ W, i.e. dinp^T (I, M) = W^T (I, O) @ dout^T (O, M); beta 0 overwrites.
  if (dinp)
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, I, M, O, &one, w, I, dy, O, &zero, dinp, I, bf16,
         bf16 && dinp_act);
  // dweight += dout^T @ inp, i.e. dweight^T (I, O) += inp^T (I, M) @ dout (M, O); beta 1 keeps
  // the gradient of earlier microbatches.
  if (dweight)
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, I, O, M, &one, inp, I, dy, O, &one, dweight, I, bf16, 0);
}

extern "C" void vt_cuda_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, int64_t M, int64_t I,
                                   int64_t O) {
  linear_bwd(dinp, dweight, dbias, dout, inp, weight, M, I, O, 0, 0);
}

extern "C" void vt_cuda_linear_bwd_act(float *dinp, float *dweight, float *dbias,
                                       const float *dout, const float *inp, const float *weight,
                                       int64_t M, int64_t I, int64_t O) {
  linear_bwd(dinp, dweight, dbias, dout, inp, weight, M, I, O, 0, 1);
}

extern "C" void vt_cuda_linear_act_bwd(float *dinp, float *dweight, const float *dout,
                                       const float *inp, const float *weight, int64_t M,
                                       int64_t I, int64_t O) {
  linear_bwd(dinp, dweight, NULL, dout, inp, weight, M, I, O, 1, 0);
}
