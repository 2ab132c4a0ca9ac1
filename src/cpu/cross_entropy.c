// cross_entropy.c: softmax cross-entropy with label smoothing (and Mixup/CutMix targets), forward
// and backward; binary cross-entropy's forward with the same targets or binary ones made of them
// (its backward is the softmax one's with sigmoids for probabilities).
#include <math.h>

#include "cpu.h"

// Class k's soft target for a sample with this label and mix (NULL: none), in float: s/K plus
// (1 - s) lam on the label and (1 - s) (1 - lam) on the partner. Binary targets compare it.
static inline float soft_target(int32_t label, const vt_mix_target *mix, float smoothing,
                                float off, int64_t k) {
  const float lam = mix ? mix->lam : 1.0f;
  float t = off;
  if (k == label) t += (1.0f - smoothing) * lam;
  if (mix && k == mix->partner) t += (1.0f - smoothing) * (1.0f - lam);
  return t;
}

void vt_cpu_cross_entropy_fwd(float *losses, float *probs, const float *logits,
                              const int32_t *labels, const vt_mix_target *mix, float smoothing,
                              int64_t B, int64_t K) {
  for (int64_t b = 0; b < B; b++) {
    const float *z = logits + b * K;
    float *p = probs + b * K;
    float mx = z[0];
    for (int64_t k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
    double sum = 0.0, sumz = 0.0;
    for (int64_t k = 0; k < K; k++) {
      p[k] = expf(z[k] - mx);
      sum += p[k];
      sumz += z[k];
    }
    double lse = mx + log(sum);
    for (int64_t k = 0; k < K; k++) p[k] = (float)(p[k] / sum);
    // -log p_y and the mean over classes of -log p_k, mixed by the smoothing.
    double nll = lse - z[labels[b]], smooth = lse - sumz / (double)K;
    if (mix) nll = mix[b].lam * nll + (1.0 - mix[b].lam) * (lse - z[mix[b].partner]);
    losses[b] = (float)((1.0 - smoothing) * nll + smoothing * smooth);
  }
}

void vt_cpu_cross_entropy_bwd(float *dlogits, const float *probs, const int32_t *labels,
                              const vt_mix_target *mix, float smoothing, float thresh,
                              float scale, int64_t B, int64_t K) {
  const float off = smoothing / (float)K;
  for (int64_t b = 0; b < B; b++) {
    const float *p = probs + b * K;
    float *d = dlogits + b * K;
    if (thresh >= 0.0f) {  // binary targets
      const vt_mix_target *mb = mix ? &mix[b] : NULL;
      for (int64_t k = 0; k < K; k++)
        d[k] = scale * (p[k] - (soft_target(labels[b], mb, smoothing, off, k) > thresh));
      continue;
    }
    for (int64_t k = 0; k < K; k++) d[k] = scale * (p[k] - off);
    if (!mix) {
      d[labels[b]] -= scale * (1.0f - smoothing);
      continue;
    }
    const float on = scale * (1.0f - smoothing);
    d[labels[b]] -= on * mix[b].lam;
    d[mix[b].partner] -= on * (1.0f - mix[b].lam);
  }
}

void vt_cpu_bce_fwd(float *losses, float *probs, const float *logits, const int32_t *labels,
                    const vt_mix_target *mix, float smoothing, float thresh, int64_t B,
                    int64_t K) {
  const double off = smoothing / (double)K;
  const float offf = smoothing / (float)K;  // as the backward's binary targets compare it
  for (int64_t b = 0; b < B; b++) {
    const float *z = logits + b * K;
    float *p = probs + b * K;
    const vt_mix_target *mb = mix ? &mix[b] : NULL;
    double soft = 0.0, sumz = 0.0, tz = 0.0;  // tz: sum_k z_k t_k of the binary targets
    for (int64_t k = 0; k < K; k++) {
      const float e = expf(-fabsf(z[k]));  // stable for either sign
      p[k] = z[k] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      soft += (double)fmaxf(z[k], 0.0f) + (double)log1pf(e);
      sumz += z[k];
      if (thresh >= 0.0f && soft_target(labels[b], mb, smoothing, offf, k) > thresh) tz += z[k];
    }
    if (thresh >= 0.0f) {
      losses[b] = (float)((soft - tz) / (double)K);
      continue;
    }
    // sum_k z_k t_k: s/K on every class plus 1 - s on the label (lam and 1 - lam when mixed)
    double zy = z[labels[b]];
    if (mix) zy = mix[b].lam * zy + (1.0 - mix[b].lam) * z[mix[b].partner];
    losses[b] = (float)((soft - off * sumz - (1.0 - smoothing) * zy) / (double)K);
  }
}
