// erase.c: random erasing of training images (erase.h).
#include "erase.h"

#include <math.h>

#include "vt_rng.h"

int vt_erase_box(const vt_erase_config *c, uint64_t seed, int64_t pos, int S, int *y0, int *y1,
                 int *x0, int *x1) {
  const uint32_t stream = vt_hash_name("erase");
  const uint64_t base = 64 * (uint64_t)pos;
  if (c->prob <= 0 || vt_rng_uniform(seed, stream, 0, base) >= c->prob) return 0;
  const double area = (double)S * S, log_lo = log(0.3), log_hi = log(1 / 0.3);
  for (int t = 0; t < 10; t++) {
    const uint64_t j = base + 1 + 4 * (uint64_t)t;
    const double target = (0.02 + (1.0 / 3 - 0.02) * vt_rng_uniform(seed, stream, 0, j)) * area;
    const double aspect = exp(log_lo + (log_hi - log_lo) * vt_rng_uniform(seed, stream, 0, j + 1));
    const int h = (int)lround(sqrt(target * aspect)), w = (int)lround(sqrt(target / aspect));
    if (w >= S || h >= S) continue;
    // timm's randint(0, S - h) includes both ends: S - h + 1 choices.
    const int top = (int)(vt_rng_uniform(seed, stream, 0, j + 2) * (S - h + 1));
    const int left = (int)(vt_rng_uniform(seed, stream, 0, j + 3) * (S - w + 1));
    *y0 = top, *y1 = top + h, *x0 = left, *x1 = left + w;
    return 1;
  }
  return 0;
}

void vt_erase_batch(const vt_erase_config *c, uint64_t seed, int64_t first, int B, int S,
                    float *images) {
  const int64_t n = 3 * (int64_t)S * S;
  const uint32_t fill = vt_hash_name("erase.fill");
#pragma omp parallel for schedule(dynamic, 1) if (B > 1)
  for (int b = 0; b < B; b++) {
    const int64_t pos = first + b;
    int y0, y1, x0, x1;
    if (!vt_erase_box(c, seed, pos, S, &y0, &y1, &x0, &x1)) continue;
    float *img = images + b * n;
    for (int ch = 0; ch < 3; ch++) {
      const float channel_value =
          c->mode == VT_ERASE_RAND ? vt_rng_normal(seed, fill, 1, 3 * (uint64_t)pos + ch) : 0.0f;
      for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
          const int64_t e = ((int64_t)ch * S + y) * S + x;
          img[e] = c->mode == VT_ERASE_PIXEL
                       ? vt_rng_normal(seed, fill, 0, (uint64_t)pos * (uint64_t)n + (uint64_t)e)
                       : channel_value;
        }
    }
  }
}
