// latent_attention.cu: the one-query form of MAP pooling on CUDA (timm's AttentionPoolLatent):
// one latent query per head against every token's keys and values, forward and backward; twin
// of the CPU op in src/cpu/attention.c. C-style CUDA, no STL. Must not depend on MPI, NCCL or
// the model.
#include "attention_tiles.cuh"

// ---- one latent query per head (MAP pooling) ---------------------------------------------------
// One block of VT_TREE_THREADS threads per (sample, head); the scores (forward) or ds (backward)
// of its N tokens in dynamic shared memory. A warp takes a token's dot products over D (its
// lanes' partial sums added by vt_warp_sum), the block the max and sum over the tokens (fixed
// trees), one thread per column of D the sums over the tokens in token order. The backward
// writes each sample's query gradient to a row of op scratch; the rows are summed in sample order
// afterwards. No atomics.

template <typename T>
static __device__ __forceinline__ float as_stored(float v) {  // v as a T stores it
  return widen(narrow<T>(v));
}

template <typename T>
static __global__ void latent_fwd_kernel(T *out, float *lse, const T *q, const T *kv, int N, int H,
                                         int D, float scale) {
  extern __shared__ float la_s[];  // (N) scores, then probabilities
  __shared__ float red[VT_TREE_THREADS];
  const int b = blockIdx.x / H, h = blockIdx.x % H, lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t C = (int64_t)H * D, ld = 2 * C;
  const T *qh = q + (int64_t)h * D, *kb = kv + (int64_t)b * N * ld + (int64_t)h * D;
  for (int t = warp; t < N; t += nwarps) {
    float acc = 0.0f;
    for (int d = lane; d < D; d += 32) acc += widen(qh[d]) * widen(kb[(int64_t)t * ld + d]);
    acc = vt_warp_sum(acc);
    if (lane == 0) la_s[t] = scale * acc;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < N; t += blockDim.x) mx = fmaxf(mx, la_s[t]);
  mx = vt_block_max(mx, red);
  float sum = 0.0f;
  for (int t = threadIdx.x; t < N; t += blockDim.x) {  // e = exp(s - max) as T stores it
    const float e = expf(la_s[t] - mx);
    sum += e;
    la_s[t] = as_stored<T>(e);
  }
  sum = vt_block_sum(sum, red);  // (its barriers also publish la_s)
  if (threadIdx.x == 0) lse[blockIdx.x] = mx + logf(sum);
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const T *v = kb + C + d;
    float o = 0.0f;
    for (int t = 0; t < N; t++) o += la_s[t] * widen(v[(int64_t)t * ld]);
    out[(int64_t)b * C + (int64_t)h * D + d] = narrow<T>(o * inv);
  }
}

// dkv32: the fp32 dkv when the bias gradient needs it before a bf16 dkv is stored (else NULL and
// dkv takes the values as T).
template <typename T>
static __global__ void latent_bwd_kernel(float *dq_part, T *dkv, float *dkv32, const T *dout,
                                         const T *q, const T *kv, const T *out, const float *lse,
                                         int N, int H, int D, float scale) {
  extern __shared__ float la_s[];  // (N) ds
  __shared__ float red[VT_TREE_THREADS];
  const int b = blockIdx.x / H, h = blockIdx.x % H, lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t C = (int64_t)H * D, ld = 2 * C, o_at = (int64_t)b * C + (int64_t)h * D;
  const T *qh = q + (int64_t)h * D, *kb = kv + (int64_t)b * N * ld + (int64_t)h * D;
  const T *dy = dout + o_at;
  float part = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) part += widen(dy[d]) * widen(out[o_at + d]);
  const float delta = vt_block_sum(part, red), l = lse[blockIdx.x];
  for (int t = warp; t < N; t += nwarps) {
    const T *k = kb + (int64_t)t * ld;
    float s = 0.0f, dp = 0.0f;
    for (int d = lane; d < D; d += 32) {
      s += widen(qh[d]) * widen(k[d]);
      dp += widen(dy[d]) * widen(k[C + d]);
    }
    s = vt_warp_sum(s), dp = vt_warp_sum(dp);
    const float p = expf(scale * s - l), g = as_stored<T>(p * (dp - delta)), pr = as_stored<T>(p);
    if (lane == 0) la_s[t] = g;
    const int64_t at = ((int64_t)b * N + t) * ld + (int64_t)h * D;
    for (int d = lane; d < D; d += 32) {
      const float dk = scale * g * widen(qh[d]), dv = pr * widen(dy[d]);
      if (dkv32) dkv32[at + d] = dk, dkv32[at + C + d] = dv;
      else dkv[at + d] = narrow<T>(dk), dkv[at + C + d] = narrow<T>(dv);
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < N; t++) acc += la_s[t] * widen(kb[(int64_t)t * ld + d]);
    dq_part[o_at + d] = scale * acc;
  }
}

// dq (C) = the per-sample rows of dq_part (B, C) summed in sample order 0..B-1 (vt_ops.h), a
// thread per column.
static __global__ void latent_dq_sum_kernel(float *dq, const float *dq_part, int64_t B, int64_t C) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int64_t b = 0; b < B; b++) acc += dq_part[b * C + c];
  dq[c] = acc;
}

// What a block may hold beside the kernels' static red[] (1 KiB): the GPU's opt-in limit, which
// each kernel opts in to (la_smem) past the default 48 KiB.
static size_t la_limit(void) { return smem_optin() - VT_TREE_THREADS * sizeof(float); }

// The most tokens the kernels take on this GPU, for the start-up check (vt_backend.h).
extern "C" int64_t vt_cuda_latent_max_tokens(void) { return (int64_t)(la_limit() / 16 * 4); }

// N floats, rounded up to whole 16-byte groups: the compiler reads the scores 4 at a time and
// may read a partial last group whole (compute-sanitizer's memcheck on an H200 caught a 12-byte
// read past N = 197 in latent_fwd_kernel<float>). Allows the kernel that much once it needs
// more than *allowed (past 48 KiB a launch fails without it).
static size_t la_smem(const char *op, const void *kernel, int *allowed, int64_t B, int64_t N,
                      int64_t H, int64_t D) {
  const size_t need = (size_t)(N + 3) / 4 * 4 * sizeof(float);
  VT_CHECK(B * H <= INT_MAX && 2 * H * D <= INT_MAX && N <= INT_MAX,
           "%s: B=%lld N=%lld H=%lld D=%lld are too large for one grid", op, (long long)B,
           (long long)N, (long long)H, (long long)D);
  VT_CHECK(need <= la_limit(), "%s: %lld tokens need %zu bytes of shared memory per block, more "
           "than the %zu this GPU allows beside the kernel's own (at most %lld tokens): use a "
           "larger --patch-size or another --global-pool", op, (long long)N, need, la_limit(),
           (long long)vt_cuda_latent_max_tokens());
  if ((size_t)*allowed < need) {
    VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)need));
    *allowed = (int)need;
  }
  return need;
}

template <typename T>
static void latent_fwd(float *out, float *lse, const float *q, const float *kv, int64_t B,
                       int64_t N, int64_t H, int64_t D) {
  static int allowed;
  const size_t smem = la_smem("latent_attention_fwd", (const void *)latent_fwd_kernel<T>,
                              &allowed, B, N, H, D);
  latent_fwd_kernel<T><<<(unsigned)(B * H), VT_TREE_THREADS, smem, vt_cuda_stream()>>>(
      (T *)out, lse, (const T *)q, (const T *)kv, (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D));
  VT_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void latent_bwd(float *dq, float *dkv, float *dbias, const float *dout, const float *q,
                       const float *kv, const float *out, const float *lse, int64_t B, int64_t N,
                       int64_t H, int64_t D) {
  static int allowed;
  const size_t smem = la_smem("latent_attention_bwd", (const void *)latent_bwd_kernel<T>,
                              &allowed, B, N, H, D);
  const int64_t C = H * D, ld = 2 * C, rows = B * N;
  const bool bf16_bias = dbias && sizeof(T) == 2;
  // Op scratch: each sample's query gradient (B, C); with a bf16 dkv and dbias the fp32 dkv;
  // with dbias the column sums' partials.
  size_t end = 0;
  const size_t at_dq = vt_cuda_carve(&end, (size_t)(B * C) * sizeof(float));
  const size_t at_32 = vt_cuda_carve(&end, bf16_bias ? (size_t)(rows * ld) * sizeof(float) : 0);
  const size_t at_part =
      vt_cuda_carve(&end, dbias ? (size_t)(colsum_chunks(rows) * ld) * sizeof(float) : 0);
  char *base = (char *)vt_cuda_scratch(end);
  float *dq_part = (float *)(base + at_dq), *dkv32 = bf16_bias ? (float *)(base + at_32) : NULL;
  latent_bwd_kernel<T><<<(unsigned)(B * H), VT_TREE_THREADS, smem, vt_cuda_stream()>>>(
      dq_part, (T *)dkv, dkv32, (const T *)dout, (const T *)q, (const T *)kv, (const T *)out, lse,
      (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D));
  VT_CUDA_CHECK_LAUNCH();
  latent_dq_sum_kernel<<<(unsigned)((C + 255) / 256), 256, 0, vt_cuda_stream()>>>(dq, dq_part,
                                                                                  B, C);
  VT_CUDA_CHECK_LAUNCH();
  if (!dbias) return;
  float *part = (float *)(base + at_part);
  if (bf16_bias) colsum_acc(dbias, dkv, 1, vt_src_plain{dkv32}, part, rows, ld);
  else colsum_acc(dbias, (float *)NULL, 0, vt_src_plain{dkv}, part, rows, ld);
}

extern "C" void vt_cuda_latent_attention_fwd(float *out, float *lse, const float *q,
                                             const float *kv, int64_t B, int64_t N, int64_t H,
                                             int64_t D) {
  if (vt_cuda_bf16()) latent_fwd<__nv_bfloat16>(out, lse, q, kv, B, N, H, D);
  else latent_fwd<float>(out, lse, q, kv, B, N, H, D);
}

extern "C" void vt_cuda_latent_attention_bwd(float *dq, float *dkv, float *dbias,
                                             const float *dout, const float *q, const float *kv,
                                             const float *out, const float *lse, int64_t B,
                                             int64_t N, int64_t H, int64_t D) {
  if (vt_cuda_bf16()) latent_bwd<__nv_bfloat16>(dq, dkv, dbias, dout, q, kv, out, lse, B, N, H, D);
  else latent_bwd<float>(dq, dkv, dbias, dout, q, kv, out, lse, B, N, H, D);
}

