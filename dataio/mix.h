// mix.h: Mixup and CutMix (timm's Mixup in its "pair" mode) for the training stream. The images
// at stream positions 2k and 2k+1 form pair k and are mixed with each other: Mixup blends the
// two whole images, x' = lam x + (1 - lam) partner; CutMix pastes a box of the partner (the
// same box into both), lam then being the part of the image left. Each image's target is
// lam (its label) + (1 - lam) (its partner's), with label smoothing applied to both. A pair's
// parameters are a pure function of (seed, k), so any split of the stream into micro-batches
// and ranks, and any pipeline stage (the first mixes the pixels, the last the targets), sees
// the same; a micro-batch must start at an even position and hold an even number of images.
// No MPI, backend or model.
#ifndef VT_MIX_H
#define VT_MIX_H

#include <stdint.h>

#include "vt_backend.h"

typedef struct {
  float mixup_alpha;   // Beta(alpha, alpha) for Mixup's lam; 0: no Mixup
  float cutmix_alpha;  // Beta(alpha, alpha) for CutMix's box; 0: no CutMix
  float prob;          // probability that a pair is mixed at all
  float switch_prob;   // with both on: probability of CutMix rather than Mixup
} vt_mix_config;

static inline int vt_mix_enabled(const vt_mix_config *c) {
  return c->prob > 0 && (c->mixup_alpha > 0 || c->cutmix_alpha > 0);
}

typedef struct {
  float lam;       // the weight of an image's own content and label (1: not mixed)
  int cutmix;      // 1: the box [y0, y1) x [x0, x1) comes from the partner; 0: a blend
  int y0, y1, x0, x1;
} vt_mix_pair;

// Pair k's parameters for S x S images. Its random numbers are Philox (seed, "mix", 0 or 1,
// 64 k + j): uniforms on stream 0 (j = 0: mix or not, 1: CutMix or Mixup, 2 and 3: the box
// centre, 4 and on: the Gamma draws' uniforms), normals on stream 1. Beta(a, a) = X / (X + Y)
// with X, Y ~ Gamma(a) (Marsaglia and Tsang, with U^(1/a) for a < 1). The box as timm's
// rand_bbox: sides int(S sqrt(1 - lam)), centre uniform over the pixels, clipped to the image;
// lam is then corrected to the box's exact area (timm's correct_lam).
void vt_mix_pair_params(const vt_mix_config *c, uint64_t seed, int64_t pair, int S,
                        vt_mix_pair *out);

// Mixes a micro-batch that starts at stream position first (even) in place: images (B, 3, S, S)
// or NULL, and the targets of labels (B) into mix (B) or NULL. B even.
void vt_mix_batch(const vt_mix_config *c, uint64_t seed, int64_t first, int B, int S,
                  float *images, const int32_t *labels, vt_mix_target *mix);

#endif
