// bench_gemm.cu: the Linear GEMMs of a ViT preset at a batch (qkv, proj, fc1, fc2: the forward,
// the input gradient and the weight gradient, laid out as src/cuda/gemm.cu lays them out), bf16
// operands with fp32 accumulation and fp32 outputs, each timed in one run through
// cublasGemmEx (the trainer's backward and its cuBLAS path) and through each of cuBLASLt's first
// --algos heuristic algorithms (its first is the trainer's forward plan, without the bias; C is
// bf16 where the trainer's is: qkv's and fc1's outputs, proj's and fc2's input gradients, and
// beta 1 where it adds: the residual forwards, the weight gradients); then a
// square GEMM for the machine's ceiling. Prints TFLOP/s per path and the fastest algorithm's
// ratio to cublasGemmEx, and checks every algorithm's result against cublasGemmEx's (normwise
// over the first 1M elements). For tests/gpu/run.sh: where the Linears lose against the ceiling,
// and whether an algorithm choice would win it back. Host code only; built by nvcc, and by the
// CPU emulation (tests/cuda_emu) for the test bench_gemm_emulated on a tiny model.
// Usage: bench_gemm [--model vit-b16] [--batch 128] [--algos 8] [--reps 10] [--square 8192]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "config.h"  // vit/: the presets (C)
}

#define CHECK(call, what)                                                      \
  do {                                                                         \
    if ((call) != 0) {                                                         \
      fprintf(stderr, "bench_gemm: %s failed (%s:%d)\n", what, __FILE__, __LINE__); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define MAX_ALGOS 16
#define CHECK_COUNT ((int64_t)1 << 20)  // elements compared per result

typedef struct {
  const char *name;
  cublasOperation_t ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float beta;
  int c_bf16;  // C (and D) bf16, else fp32
} gemm_case;

static cublasHandle_t g_blas;
static cublasLtHandle_t g_lt;
static cudaEvent_t g_e0, g_e1;
static void *g_ws;
static const size_t WS_BYTES = (size_t)32 << 20;  // gemm.cu's LT_WORKSPACE

// Random bf16 values in [-1, 1) from a fixed LCG, made on the host.
static void fill_bf16(__nv_bfloat16 *dev, int64_t count, uint32_t seed) {
  __nv_bfloat16 *h = (__nv_bfloat16 *)malloc((size_t)count * sizeof *h);
  CHECK(h == NULL, "malloc");
  uint32_t s = seed;
  for (int64_t i = 0; i < count; i++) {
    s = s * 1664525u + 1013904223u;
    h[i] = __float2bfloat16_rn((float)(s >> 8) / 8388608.0f - 1.0f);
  }
  CHECK(cudaMemcpyAsync(dev, h, (size_t)count * sizeof *h, cudaMemcpyHostToDevice, 0),
        "cudaMemcpyAsync");
  CHECK(cudaStreamSynchronize(0), "cudaStreamSynchronize");
  free(h);
}

static cublasStatus_t run_gemmex(const gemm_case *g, const void *A, const void *B, float *C) {
  const float one = 1.0f;
  return cublasGemmEx(g_blas, g->ta, g->tb, (int)g->m, (int)g->n, (int)g->k, &one, A,
                      CUDA_R_16BF, (int)g->lda, B, CUDA_R_16BF, (int)g->ldb, &g->beta, C,
                      g->c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)g->ldc, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

typedef struct {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
} lt_case;

static cublasStatus_t run_lt(const gemm_case *g, const lt_case *l, const cublasLtMatmulAlgo_t *algo,
                             size_t ws, const void *A, const void *B, float *C) {
  const float one = 1.0f;
  return cublasLtMatmul(g_lt, l->desc, &one, A, l->a, B, l->b, &g->beta, C, l->c, C, l->c, algo,
                        g_ws, ws, 0);
}

// Milliseconds per call of one path: 2 calls to warm up, then reps between two events; negative
// when a call fails. algo NULL: cublasGemmEx, else cuBLASLt with that algorithm.
static float time_path(const gemm_case *g, const lt_case *l, const cublasLtMatmulAlgo_t *algo,
                       size_t ws, const void *A, const void *B, float *C, int reps) {
  int ok = 1;
  for (int r = 0; ok && r < 2 + reps; r++) {
    if (r == 2) CHECK(cudaEventRecord(g_e0, 0), "cudaEventRecord");
    ok = (algo ? run_lt(g, l, algo, ws, A, B, C) : run_gemmex(g, A, B, C)) ==
         CUBLAS_STATUS_SUCCESS;
  }
  if (!ok) {  // (perhaps before the first event: no time to read)
    CHECK(cudaStreamSynchronize(0), "cudaStreamSynchronize");
    return -1.0f;
  }
  CHECK(cudaEventRecord(g_e1, 0), "cudaEventRecord");
  CHECK(cudaEventSynchronize(g_e1), "cudaEventSynchronize");
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, g_e0, g_e1), "cudaEventElapsedTime");
  return ms / (float)reps;
}

// The first count elements of C (as floats) after one call from zeros (beta 1 then adds to
// zeros).
static void result_head(float *host, int64_t count, const gemm_case *g, const lt_case *l,
                        const cublasLtMatmulAlgo_t *algo, size_t ws, const void *A,
                        const void *B, float *C, int64_t c_count) {
  const size_t es = g->c_bf16 ? 2 : 4;
  CHECK(cudaMemsetAsync(C, 0, (size_t)c_count * es, 0), "cudaMemsetAsync");
  CHECK(algo ? run_lt(g, l, algo, ws, A, B, C) : run_gemmex(g, A, B, C), "the checked GEMM");
  CHECK(cudaMemcpyAsync(host, C, (size_t)count * es, cudaMemcpyDeviceToHost, 0),
        "cudaMemcpyAsync");
  CHECK(cudaStreamSynchronize(0), "cudaStreamSynchronize");
  if (g->c_bf16)  // widen in place, from the end (the bf16 values fill the first half)
    for (int64_t i = count - 1; i >= 0; i--) host[i] = __bfloat162float(((__nv_bfloat16 *)host)[i]);
}

static void bench_case(const gemm_case *g, const void *A, const void *B, float *C, int algos,
                       int reps, float *ref, float *got) {
  const double flop = 2.0 * (double)g->m * (double)g->n * (double)g->k;
  const int64_t c_count = g->ldc * g->n, count = c_count < CHECK_COUNT ? c_count : CHECK_COUNT;
  const float t_ex = time_path(g, NULL, NULL, 0, A, B, C, reps);
  result_head(ref, count, g, NULL, NULL, 0, A, B, C, c_count);
  double ref_max = 0.0;
  for (int64_t i = 0; i < count; i++) ref_max = fmax(ref_max, fabs((double)ref[i]));

  lt_case l;
  const cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  CHECK(cublasLtMatmulDescCreate(&l.desc, ct, CUDA_R_32F), "cublasLtMatmulDescCreate");
  CHECK(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta),
        "TRANSA");
  CHECK(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb),
        "TRANSB");
  // Stored shapes: op(A) is m x k, op(B) k x n, column-major.
  const int64_t ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
  const int64_t br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
  CHECK(cublasLtMatrixLayoutCreate(&l.a, CUDA_R_16BF, (uint64_t)ar, (uint64_t)ac, g->lda),
        "layout A");
  CHECK(cublasLtMatrixLayoutCreate(&l.b, CUDA_R_16BF, (uint64_t)br, (uint64_t)bc, g->ldb),
        "layout B");
  CHECK(cublasLtMatrixLayoutCreate(&l.c, g->c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (uint64_t)g->m,
                                   (uint64_t)g->n, g->ldc), "layout C");
  cublasLtMatmulPreference_t pref;
  CHECK(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &WS_BYTES, sizeof WS_BYTES), "workspace");
  cublasLtMatmulHeuristicResult_t res[MAX_ALGOS];
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(g_lt, l.desc, l.a, l.b, l.c, l.c, pref, algos, res, &found) !=
      CUBLAS_STATUS_SUCCESS)
    found = 0;
  float t_first = -1.0f, t_best = -1.0f, worst_diff = 0.0f;
  int best = -1, timed = 0;
  for (int i = 0; i < found; i++) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const float t = time_path(g, &l, &res[i].algo, res[i].workspaceSize, A, B, C, reps);
    if (t < 0.0f) continue;
    timed++;
    if (i == 0) t_first = t;
    if (t_best < 0.0f || t < t_best) t_best = t, best = i;
    result_head(got, count, g, &l, &res[i].algo, res[i].workspaceSize, A, B, C, c_count);
    double d = 0.0;
    for (int64_t j = 0; j < count; j++) d = fmax(d, fabs((double)got[j] - (double)ref[j]));
    const float rel = ref_max > 0.0 ? (float)(d / ref_max) : (float)d;
    if (rel > worst_diff) worst_diff = rel;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(l.a);
  cublasLtMatrixLayoutDestroy(l.b);
  cublasLtMatrixLayoutDestroy(l.c);
  cublasLtMatmulDescDestroy(l.desc);
#define TF(ms) ((ms) > 0.0f ? flop / ((double)(ms) * 1e-3) / 1e12 : 0.0)
  printf("vit3d-gemm gemm=%s m=%lld n=%lld k=%lld c=%s beta=%g gemmex_tflops=%.1f "
         "lt_first_tflops=%.1f lt_best_tflops=%.1f best=%d/%d best_vs_gemmex=%.3f "
         "max_rel_diff=%.2e\n",
         g->name, (long long)g->m, (long long)g->n, (long long)g->k, g->c_bf16 ? "bf16" : "fp32",
         (double)g->beta, TF(t_ex), TF(t_first),
         TF(t_best), best + 1, timed, t_ex > 0.0f && t_best > 0.0f ? t_ex / t_best : 0.0,
         worst_diff);
#undef TF
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *model = "vit-b16";
  int B = 128, algos = 8, reps = 10;
  int64_t square = 8192;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && !strcmp(a, "--model")) model = v, i++;
    else if (v && !strcmp(a, "--batch")) B = atoi(v), i++;
    else if (v && !strcmp(a, "--algos")) algos = atoi(v), i++;
    else if (v && !strcmp(a, "--reps")) reps = atoi(v), i++;
    else if (v && !strcmp(a, "--square")) square = atoll(v), i++;
    else {
      fprintf(stderr, "usage: %s [--model NAME] [--batch B] [--algos 1..%d] [--reps N] "
                      "[--square N (0: none)]\n", argv[0], MAX_ALGOS);
      return 2;
    }
  }
  if (B < 1 || algos < 1 || algos > MAX_ALGOS || reps < 1 || square < 0) {
    fprintf(stderr, "bench_gemm: batch >= 1, 1 <= algos <= %d, reps >= 1, square >= 0\n",
            MAX_ALGOS);
    return 2;
  }
  vt_vit_config cfg;
  char err[256];
  if (vt_config_preset(model, &cfg, err, sizeof err) != VT_OK) {
    fprintf(stderr, "bench_gemm: %s\n", err);
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  const int64_t M = (int64_t)B * vt_cfg_tokens(&cfg), C = cfg.width, F = vt_cfg_mlp_hidden(&cfg);
  const int64_t wide = F > 3 * C ? F : 3 * C, sq = square;
  // Buffers for the largest of each role: inp (M, max(C, F)), W (max(3C, F), max(C, F)), dout
  // (M, max(3C, F)), C (fp32: every output, the weight gradients' and the square's too).
  int64_t nA = M * (F > C ? F : C), nW = wide * (F > C ? F : C), nD = M * wide, nC = M * wide;
  if (nW > nC) nC = nW;
  if (sq * sq > nA) nA = sq * sq;
  if (sq * sq > nW) nW = sq * sq;
  if (sq * sq > nC) nC = sq * sq;
  __nv_bfloat16 *X, *W, *DY;
  float *Cbuf;
  CHECK(cudaMalloc((void **)&X, (size_t)nA * 2), "cudaMalloc");
  CHECK(cudaMalloc((void **)&W, (size_t)nW * 2), "cudaMalloc");
  CHECK(cudaMalloc((void **)&DY, (size_t)nD * 2), "cudaMalloc");
  CHECK(cudaMalloc((void **)&Cbuf, (size_t)nC * 4), "cudaMalloc");
  CHECK(cudaMalloc(&g_ws, WS_BYTES), "cudaMalloc");
  fill_bf16(X, nA, 1u);
  fill_bf16(W, nW, 2u);
  fill_bf16(DY, nD, 3u);
  CHECK(cublasCreate(&g_blas), "cublasCreate");
  CHECK(cublasLtCreate(&g_lt), "cublasLtCreate");
  CHECK(cudaEventCreateWithFlags(&g_e0, cudaEventDefault), "cudaEventCreate");
  CHECK(cudaEventCreateWithFlags(&g_e1, cudaEventDefault), "cudaEventCreate");
  float *ref = (float *)malloc(CHECK_COUNT * sizeof(float));
  float *got = (float *)malloc(CHECK_COUNT * sizeof(float));
  CHECK(!ref || !got, "malloc");
  printf("vit3d-gemm config model=%s batch=%d M=%lld C=%lld F=%lld algos=%d reps=%d\n", model, B,
         (long long)M, (long long)C, (long long)F, algos, reps);

  // Each Linear (in I, out O) as gemm.cu runs it, column-major: forward out^T (O, M) = W^T-op
  // (W (O, I) stored row-major) inp^T; input gradient dinp^T (I, M) = W^T (I, O) dout^T; weight
  // gradient dW^T (I, O) += inp^T (I, M) dout (M, O).
  // out16: the forward's out is a bf16 activation (linear_act_fwd), else it adds the residual
  // (linear_residual_fwd, beta 1); din16: the input gradient is one (linear_bwd_act).
  const struct {
    const char *name;
    int64_t I, O;
    int out16, din16;
  } lin[4] = {{"qkv", C, 3 * C, 1, 0}, {"proj", C, C, 0, 1}, {"fc1", C, F, 1, 0},
              {"fc2", F, C, 0, 1}};
  char name[64];
  for (int i = 0; i < 4; i++) {
    const int64_t I = lin[i].I, O = lin[i].O;
    snprintf(name, sizeof name, "%s.fwd", lin[i].name);
    const gemm_case fwd = {name, CUBLAS_OP_T, CUBLAS_OP_N, O, M, I, I, I, O,
                           lin[i].out16 ? 0.0f : 1.0f, lin[i].out16};
    bench_case(&fwd, W, X, Cbuf, algos, reps, ref, got);
    snprintf(name, sizeof name, "%s.dinp", lin[i].name);
    const gemm_case dinp = {name, CUBLAS_OP_N, CUBLAS_OP_N, I, M, O, I, O, I, 0.0f, lin[i].din16};
    bench_case(&dinp, W, DY, Cbuf, algos, reps, ref, got);
    snprintf(name, sizeof name, "%s.dweight", lin[i].name);
    const gemm_case dw = {name, CUBLAS_OP_N, CUBLAS_OP_T, I, O, M, I, O, I, 1.0f, 0};
    bench_case(&dw, X, DY, Cbuf, algos, reps, ref, got);
  }
  if (sq > 0) {
    snprintf(name, sizeof name, "square%lld", (long long)sq);
    const gemm_case s = {name, CUBLAS_OP_T, CUBLAS_OP_N, sq, sq, sq, sq, sq, sq, 0.0f, 1};
    bench_case(&s, W, X, Cbuf, algos, reps, ref, got);
  }
  free(ref);
  free(got);
  cudaFree(X);
  cudaFree(W);
  cudaFree(DY);
  cudaFree(Cbuf);
  cudaFree(g_ws);
  return 0;
}
