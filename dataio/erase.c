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

// Four standard normals from one Philox block (two Box-Muller pairs, in float): the pixel
// fill's numbers e .. e+3 of an image come from block e / 4 of its stream.
static void normals4(uint64_t seed, uint32_t stream, uint32_t lo, uint64_t block, float out[4]) {
  const vt_philox_ctr r = vt_rng_block(seed, stream, lo, block);
  for (int k = 0; k < 2; k++) {
    const float u1 = ((float)(r.v[2 * k] >> 8) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
    const float u2 = (float)(r.v[2 * k + 1] >> 8) * (1.0f / 16777216.0f);
    const float rad = sqrtf(-2.0f * logf(u1)), ang = 6.28318530717958648f * u2;
    out[2 * k] = rad * cosf(ang), out[2 * k + 1] = rad * sinf(ang);
  }
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
    const int w = x1 - x0;
    for (int ch = 0; ch < 3; ch++) {
      const float channel_value =
          c->mode == VT_ERASE_RAND ? vt_rng_normal(seed, fill, 1, 3 * (uint64_t)pos + ch) : 0.0f;
      for (int y = y0; y < y1; y++) {
        float *row = img + ((int64_t)ch * S + y) * S + x0;
        if (c->mode != VT_ERASE_PIXEL) {
          for (int x = 0; x < w; x++) row[x] = channel_value;
          continue;
        }
        // The box row's values, four per Philox block, from blocks of its own: the row
        // (image, channel, y) owns ceil(S / 4) of them.
        const uint64_t row_id = ((uint64_t)pos * 3 + (uint64_t)ch) * (uint64_t)S + (uint64_t)y;
        const uint64_t block0 = row_id * (uint64_t)((S + 3) / 4);
        for (int x = 0; x < w; x += 4) {
          float v[4];
          normals4(seed, fill, 0, block0 + (uint64_t)x / 4, v);
          for (int k = 0; k < 4 && x + k < w; k++) row[x + k] = v[k];
        }
      }
    }
  }
}
