// threeaug.c: 3-Augment on 8-bit RGB images (threeaug.h). The Gaussian blur follows Pillow's
// definition (an extended box blur, Gwosdek et al. 2011, three passes per direction): the box
// radius l + a from the Gaussian's variance in float as Pillow computes it, each output the
// window's sum weighted 1 inside and a at both far ends, in 8.24 fixed point, rounded. Solarize
// and the colour jitter's enhancements are RandAugment's (randaug.c).
#include "threeaug.h"

#include <math.h>
#include <string.h>

#include "vt_rng.h"

#define SLOTS 8

void vt_threeaug_draw(float color_jitter, uint64_t seed, int64_t epoch, int64_t key,
                      vt_threeaug_plan *p) {
  const uint32_t stream = vt_hash_name("threeaug");
  const uint64_t base = (uint64_t)key * SLOTS;
  float u[7];
  for (int k = 0; k < 7; k++) u[k] = vt_rng_uniform(seed, stream, (uint32_t)epoch, base + k);
  memset(p, 0, sizeof *p);
  const int pick = (int)(u[0] * VT_3A_NUM);
  p->pick = (vt_threeaug_pick)(pick < VT_3A_NUM ? pick : VT_3A_NUM - 1);
  p->radius = 0.1f + 1.9f * u[1];
  if (!(color_jitter > 0)) return;
  // ColorJitter's order (torchvision draws a permutation of its four; hue is off): a shuffle.
  vt_ra_op order[3] = {VT_RA_BRIGHTNESS, VT_RA_CONTRAST, VT_RA_COLOR};
  float factor[3];
  for (int k = 0; k < 3; k++) factor[k] = 1.0f - color_jitter + 2.0f * color_jitter * u[4 + k];
  for (int i = 2; i >= 1; i--) {
    int j = (int)(u[4 - i] * (float)(i + 1));  // u[2] for i = 2, u[3] for i = 1
    j = j > i ? i : j;
    vt_ra_op t = order[i];
    order[i] = order[j], order[j] = t;
  }
  p->njitter = 3;
  for (int k = 0; k < 3; k++) {
    p->jitter_op[k] = order[k];
    p->jitter[k] = factor[order[k] == VT_RA_BRIGHTNESS ? 0 : order[k] == VT_RA_CONTRAST ? 1 : 2];
  }
}

void vt_grayscale(uint8_t *rgb, int w, int h) {
  for (size_t i = 0, n = (size_t)w * h; i < n; i++) {
    const uint8_t l = (uint8_t)vt_pil_luma(rgb + 3 * i);
    rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = l;
  }
}

// The extended box's radius for one of `passes` passes of a Gaussian of this radius, in float
// as Pillow computes it (C float arithmetic, two steps in double).
static float box_radius(float radius, int passes) {
  const float sigma2 = radius * radius / (float)passes;
  const float L = (float)sqrt(12.0 * sigma2 + 1.0);  // the box's length
  const float l = (float)floor((L - 1.0) / 2.0);     // its whole radius
  float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);  // and the far pixels' weight
  a /= 6 * (sigma2 - (l + 1) * (l + 1));
  return l + a;
}

// One box pass over a line of n RGB pixels: in (contiguous) to out (pixel stride ostride
// bytes). Pixels past either end repeat the end pixel. ww: the weight of a whole pixel, fw: of
// each far pixel, 2^24 in all.
static void box_line(const uint8_t *in, uint8_t *out, size_t ostride, int n, int r, uint32_t ww,
                     uint32_t fw) {
  const int last = n - 1;
#define AT(i) p[3 * (size_t)((i) < 0 ? 0 : (i) > last ? last : (i))]
  for (int ch = 0; ch < 3; ch++) {
    const uint8_t *p = in + ch;
    uint32_t acc = (uint32_t)AT(0) * (uint32_t)(r + 1);  // the window of pixel -1
    for (int i = 0; i < r; i++) acc += AT(i);
    for (int x = 0; x < n; x++) {
      acc += (uint32_t)AT(x + r) - (uint32_t)AT(x - r - 1);
      const uint32_t bulk = acc * ww + (uint32_t)(AT(x - r - 1) + AT(x + r + 1)) * fw;
      out[(size_t)x * ostride + ch] = (uint8_t)((bulk + (1u << 23)) >> 24);
    }
  }
#undef AT
}

void vt_gaussian_blur(uint8_t *rgb, int w, int h, float radius, uint8_t *scratch) {
  enum { PASSES = 3 };
  const float fr = box_radius(radius, PASSES);
  const int r = (int)fr;
  const uint32_t ww = (uint32_t)((float)(1 << 24) / (fr * 2 + 1));
  const uint32_t fw = ((1u << 24) - (uint32_t)(r * 2 + 1) * ww) / 2;
  const int side = w > h ? w : h;
  uint8_t *a = scratch, *b = scratch + 3 * (size_t)side;
  for (int y = 0; y < h; y++) {  // the rows, pass after pass
    uint8_t *row = rgb + 3 * (size_t)y * w;
    for (int k = 0; k < PASSES; k++) {
      memcpy(a, row, 3 * (size_t)w);
      box_line(a, row, 3, w, r, ww, fw);
    }
  }
  for (int x = 0; x < w; x++) {  // then the columns
    for (int y = 0; y < h; y++) memcpy(a + 3 * y, rgb + 3 * ((size_t)y * w + x), 3);
    for (int k = 0; k < PASSES; k++) {
      box_line(a, b, 3, h, r, ww, fw);
      uint8_t *t = a;
      a = b, b = t;
    }
    for (int y = 0; y < h; y++) memcpy(rgb + 3 * ((size_t)y * w + x), a + 3 * y, 3);
  }
}

void vt_threeaug_run(const vt_threeaug_plan *p, uint8_t *rgb, int S, uint8_t *scratch) {
  static const uint8_t no_fill[3] = {0, 0, 0};  // the colour operations uncover nothing
  if (p->pick == VT_3A_GRAYSCALE) vt_grayscale(rgb, S, S);
  else if (p->pick == VT_3A_SOLARIZE)
    vt_randaug_op(VT_RA_SOLARIZE, 128, VT_RA_BILINEAR, no_fill, rgb, S, S, scratch);
  else if (p->pick == VT_3A_BLUR) vt_gaussian_blur(rgb, S, S, p->radius, scratch);
  for (int i = 0; i < p->njitter; i++)
    vt_randaug_op(p->jitter_op[i], p->jitter[i], VT_RA_BILINEAR, no_fill, rgb, S, S, scratch);
}
