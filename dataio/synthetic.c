// synthetic.c: the synthetic image task.
#include "synthetic.h"

#include <math.h>

#include "vt_rng.h"

#define TWO_PI 6.28318530717958647692f

int32_t vt_synthetic_label(uint64_t seed, int64_t index, int K) {
  return (int32_t)(vt_rng_u32(seed, vt_hash_name("synthetic.label"), 0, (uint64_t)index) %
                   (uint32_t)K);
}

// sin(x) for |x| < 2^20 within 1.3e-7 of the true sine (libm's sinf: 3e-8), in plain float
// arithmetic that the compiler vectorises (libm's sinf, a call per element, took half of a
// 224 px image's 2.4 ms).
// x - k pi with k the nearest integer (Cody-Waite: pi in three parts, the first two exact in
// float's bits so that k times them is exact), then sin's odd Taylor-like polynomial on
// [-pi/2, pi/2] (coefficients fitted for that range), negated for odd k.
static inline float wave_sin(float x) {
  const float round_magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (x * 0.318309886183790672f + round_magic) - round_magic;
  float r = x - k * 3.140625f;
  r = r - k * 9.67502593994140625e-4f;
  r = r - k * 1.509957990978376432e-7f;
  const float r2 = r * r;
  float p = -2.39e-8f;
  p = p * r2 + 2.7526372e-6f;
  p = p * r2 - 1.9840874e-4f;
  p = p * r2 + 8.3333310e-3f;
  p = p * r2 - 1.6666667e-1f;
  const float s = r + r * r2 * p;
  return ((int32_t)k & 1) ? -s : s;
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
    const uint64_t e0 = ((uint64_t)index * 3 + (uint64_t)ch) * (uint64_t)S * (uint64_t)S;
    for (int yy = 0; yy < S; yy++) {
      float *row = img + (int64_t)yy * S;
      // The noise: uniform number e of the stream for element e, four to a Philox block (as
      // vt_rng_uniform would give them one call each).
      const uint64_t r0 = e0 + (uint64_t)yy * (uint64_t)S;
      for (int xx = 0; xx < S;) {
        const uint64_t e = r0 + (uint64_t)xx;
        const vt_philox_ctr c = vt_rng_block_inline(seed, s_noise, 0, e >> 2);
        for (unsigned lane = (unsigned)(e & 3); lane < 4 && xx < S; lane++, xx++)
          row[xx] = 0.5f * (2.0f * vt_rng_unit(c.v[lane]) - 1.0f);
      }
      const float a0 = fy[0] * (float)yy + ph[0], a1 = fy[1] * (float)yy + ph[1];
      for (int xx = 0; xx < S; xx++) {
        const float v = wave_sin(fx[0] * (float)xx + a0) + wave_sin(fx[1] * (float)xx + a1);
        row[xx] += gain * 0.7f * v;
      }
    }
  }
}
