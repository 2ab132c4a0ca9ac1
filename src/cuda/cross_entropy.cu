// cross_entropy.cu: softmax cross-entropy with label smoothing (and Mixup/CutMix targets) on
// CUDA, forward and backward, and binary cross-entropy's forward (soft or binary targets), twin
// of src/cpu/cross_entropy.c (PyTorch's definition: target 1 - s on the label plus s/K on every
// class; probabilities saved for the backward). The forward's sums are in double, as on the
// CPU, through a fixed block tree: the same bits every run. C-style CUDA, no STL. Must not
// depend on MPI, NCCL or the model.
#include <limits.h>
#include <math.h>

#include "cuda_common.h"
#include "cuda_ops.h"

// Class k's soft target in float, as the CPU twin's soft_target (binary targets compare it).
static __device__ inline float soft_target(int32_t label, const vt_mix_target *mix,
                                           float smoothing, float off, int64_t k) {
  const float lam = mix ? mix->lam : 1.0f;
  float t = off;
  if (k == label) t += __fmul_rn(1.0f - smoothing, lam);
  if (mix && k == mix->partner) t += __fmul_rn(1.0f - smoothing, 1.0f - lam);
  return t;
}

// One block per sample: K is at most a million classes and B a micro-batch, so a row is the
// natural unit of work and the block's tree gives a fixed summation order.
static __global__ void cross_entropy_fwd_kernel(float *losses, float *probs, const float *logits,
                                                const int32_t *labels, const vt_mix_target *mix,
                                                float smoothing, int64_t K) {
  __shared__ float shf[VT_TREE_THREADS];
  __shared__ double shd[VT_TREE_THREADS];
  const int64_t b = blockIdx.x;
  const float *z = logits + b * K;
  float *p = probs + b * K;
  float mx = -INFINITY;
  for (int64_t k = threadIdx.x; k < K; k += VT_TREE_THREADS) mx = fmaxf(mx, z[k]);
  mx = vt_block_max(mx, shf);
  double sum = 0.0, sumz = 0.0;
  for (int64_t k = threadIdx.x; k < K; k += VT_TREE_THREADS) {
    const float e = expf(z[k] - mx);
    p[k] = e;
    sum += e;
    sumz += z[k];
  }
  sum = vt_block_sum(sum, shd);
  sumz = vt_block_sum(sumz, shd);
  // Each thread rescales the elements it wrote itself, so no barrier is needed before this.
  for (int64_t k = threadIdx.x; k < K; k += VT_TREE_THREADS) p[k] = (float)(p[k] / sum);
  if (threadIdx.x == 0) {
    // -log p_y and the mean over classes of -log p_k, mixed by the smoothing.
    const double lse = mx + log(sum);
    double nll = lse - z[labels[b]];
    const double smooth = lse - sumz / (double)K;
    if (mix) nll = mix[b].lam * nll + (1.0 - mix[b].lam) * (lse - z[mix[b].partner]);
    losses[b] = (float)((1.0 - smoothing) * nll + smoothing * smooth);
  }
}

// Binary cross-entropy: one block per sample, sigmoids saved, softplus and z summed in double
// through the block tree.
static __global__ void bce_fwd_kernel(float *losses, float *probs, const float *logits,
                                      const int32_t *labels, const vt_mix_target *mix,
                                      float smoothing, float thresh, int64_t K) {
  __shared__ double shd[VT_TREE_THREADS];
  const int64_t b = blockIdx.x;
  const float *z = logits + b * K;
  float *p = probs + b * K;
  const vt_mix_target *mb = mix ? &mix[b] : NULL;
  const float off = smoothing / (float)K;
  double soft = 0.0, sumz = 0.0, tz = 0.0;  // tz: sum_k z_k t_k of the binary targets
  for (int64_t k = threadIdx.x; k < K; k += VT_TREE_THREADS) {
    const float e = expf(-fabsf(z[k]));
    p[k] = z[k] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    soft += (double)fmaxf(z[k], 0.0f) + (double)log1pf(e);
    sumz += z[k];
    if (thresh >= 0.0f && soft_target(labels[b], mb, smoothing, off, k) > thresh) tz += z[k];
  }
  soft = vt_block_sum(soft, shd);
  sumz = vt_block_sum(sumz, shd);
  if (thresh >= 0.0f) {
    tz = vt_block_sum(tz, shd);
    if (threadIdx.x == 0) losses[b] = (float)((soft - tz) / (double)K);
    return;
  }
  if (threadIdx.x == 0) {
    double zy = z[labels[b]];
    if (mix) zy = mix[b].lam * zy + (1.0 - mix[b].lam) * z[mix[b].partner];
    losses[b] = (float)((soft - smoothing / (double)K * sumz - (1.0 - smoothing) * zy) / (double)K);
  }
}

// dlogits = scale * (probs - target), in the CPU twin's order of float operations.
static __global__ void cross_entropy_bwd_kernel(float *dlogits, const float *probs,
                                                const int32_t *labels, const vt_mix_target *mix,
                                                float smoothing, float thresh, float scale,
                                                int64_t B, int64_t K) {
  const float off = smoothing / (float)K;
  const int64_t count = B * K;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = i / K, k = i - b * K;
    if (thresh >= 0.0f) {  // binary targets
      const float t = soft_target(labels[b], mix ? &mix[b] : NULL, smoothing, off, k);
      dlogits[i] = scale * (probs[i] - (t > thresh ? 1.0f : 0.0f));
      continue;
    }
    float d = scale * (probs[i] - off);
    if (!mix) {
      if (k == labels[b]) d -= scale * (1.0f - smoothing);
    } else {
      const float on = scale * (1.0f - smoothing);
      if (k == labels[b]) d -= on * mix[b].lam;
      if (k == mix[b].partner) d -= on * (1.0f - mix[b].lam);
    }
    dlogits[i] = d;
  }
}

extern "C" void vt_cuda_cross_entropy_fwd(float *losses, float *probs, const float *logits,
                                          const int32_t *labels, const vt_mix_target *mix,
                                          float smoothing, int64_t B, int64_t K) {
  VT_CHECK(B <= INT_MAX, "cross_entropy_fwd: B=%lld is too many rows for one grid",
           (long long)B);
  cross_entropy_fwd_kernel<<<(unsigned)B, VT_TREE_THREADS, 0, vt_cuda_stream()>>>(
      losses, probs, logits, labels, mix, smoothing, K);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_cross_entropy_bwd(float *dlogits, const float *probs,
                                          const int32_t *labels, const vt_mix_target *mix,
                                          float smoothing, float thresh, float scale, int64_t B,
                                          int64_t K) {
  cross_entropy_bwd_kernel<<<vt_cuda_blocks(B * K, 256), 256, 0, vt_cuda_stream()>>>(
      dlogits, probs, labels, mix, smoothing, thresh, scale, B, K);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_bce_fwd(float *losses, float *probs, const float *logits,
                                const int32_t *labels, const vt_mix_target *mix, float smoothing,
                                float thresh, int64_t B, int64_t K) {
  VT_CHECK(B <= INT_MAX, "bce_fwd: B=%lld is too many rows for one grid", (long long)B);
  bce_fwd_kernel<<<(unsigned)B, VT_TREE_THREADS, 0, vt_cuda_stream()>>>(
      losses, probs, logits, labels, mix, smoothing, thresh, K);
  VT_CUDA_CHECK_LAUNCH();
}
