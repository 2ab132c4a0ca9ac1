// synthetic.c: the synthetic image task.
#include "synthetic.h"

#include <math.h>

#include "vt_rng.h"

#define TWO_PI 6.28318530717958647692f

int32_t vt_synthetic_label(uint64_t seed, int64_t index, int K) {
  return (int32_t)(vt_rng_u32(seed, vt_hash_name("synthetic.label"), 0, (uint64_t)index) %
                   (uint32_t)K);
}

void vt_synthetic_sample(uint64_t seed, int64_t index, int S, int K, float *image,
                         int32_t *label) {
  const uint32_t s_label = vt_hash_name("synthetic.label");
  const uint32_t s_class = vt_hash_name("synthetic.class");
  const uint32_t s_noise = vt_hash_name("synthetic.noise");
  const int32_t y = vt_synthetic_label(seed, index, K);
  *label = y;
  float gain = 0.75f + 0.5f * vt_rng_uniform(seed, s_label, 1, (uint64_t)index);
  for (int ch = 0; ch < 3; ch++) {
    // Two waves per channel: frequencies 1..4 cycles per image, random direction and phase.
    float fx[2], fy[2], ph[2];
    for (int w = 0; w < 2; w++) {
      uint64_t base = (uint64_t)(ch * 2 + w) * 4;
      float ang = TWO_PI * vt_rng_uniform(seed, s_class, (uint32_t)y, base);
      float freq = 1.0f + 3.0f * vt_rng_uniform(seed, s_class, (uint32_t)y, base + 1);
      fx[w] = TWO_PI * freq * cosf(ang) / (float)S;
      fy[w] = TWO_PI * freq * sinf(ang) / (float)S;
      ph[w] = TWO_PI * vt_rng_uniform(seed, s_class, (uint32_t)y, base + 2);
    }
    float *img = image + (int64_t)ch * S * S;
    for (int yy = 0; yy < S; yy++)
      for (int xx = 0; xx < S; xx++) {
        uint64_t e = ((uint64_t)index * 3 + (uint64_t)ch) * (uint64_t)S * (uint64_t)S +
                     (uint64_t)yy * (uint64_t)S + (uint64_t)xx;
        float noise = 2.0f * vt_rng_uniform(seed, s_noise, 0, e) - 1.0f;
        float v = sinf(fx[0] * xx + fy[0] * yy + ph[0]) + sinf(fx[1] * xx + fy[1] * yy + ph[1]);
        img[yy * S + xx] = gain * 0.7f * v + 0.5f * noise;
      }
  }
}
