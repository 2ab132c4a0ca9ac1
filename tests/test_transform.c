// test_transform.c (label data): vt_render_crop against a slow bilinear reference in double,
// resize-then-crop evaluation geometry against torchvision's arithmetic, vt_train_crop's
// determinism, bounds and distribution, renders from windows of reduced images
// (vt_crop_reduction, vt_crop_window, vt_render_crop_part), the 8-bit render, and RandAugment's
// draws and config strings. Needs only dataio's transform code, no image decoder.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transform.h"
#include "vt_rng.h"
#include "vt_check.h"


static vt_image random_image(int w, int h, uint32_t salt) {
  vt_image im = {w, h, malloc((size_t)w * h * 3)};
  for (size_t i = 0; i < (size_t)w * h * 3; i++)
    im.rgb[i] = (uint8_t)(vt_rng_u32(99, salt, 0, i) >> 24);
  return im;
}

static double pixel(const vt_image *im, int x, int y, int c) {
  x = x < 0 ? 0 : x >= im->width ? im->width - 1 : x;
  y = y < 0 ? 0 : y >= im->height ? im->height - 1 : y;
  return im->rgb[((size_t)y * im->width + x) * 3 + c];
}

// Bilinear value at source position (sx, sy) in pixel-centre coordinates, clamped to the image.
static double bilinear(const vt_image *im, double sx, double sy, int c) {
  sx = fmin(fmax(sx, 0.0), im->width - 1.0);
  sy = fmin(fmax(sy, 0.0), im->height - 1.0);
  int x0 = (int)floor(sx), y0 = (int)floor(sy);
  double fx = sx - x0, fy = sy - y0;
  return (1 - fy) * ((1 - fx) * pixel(im, x0, y0, c) + fx * pixel(im, x0 + 1, y0, c)) +
         fy * ((1 - fx) * pixel(im, x0, y0 + 1, c) + fx * pixel(im, x0 + 1, y0 + 1, c));
}

// The obvious computation: output pixel (i, j) of the crop is the source at the centre of its
// footprint, x + (i + 0.5) * w / S - 0.5; a flip mirrors the output; then normalise.
static double reference(const vt_image *im, vt_crop cr, int S, const vt_transform_config *tc,
                        int c, int oy, int ox) {
  int col = cr.flip ? S - 1 - ox : ox;
  double sx = cr.x + (col + 0.5) * (double)cr.w / S - 0.5;
  double sy = cr.y + (oy + 0.5) * (double)cr.h / S - 0.5;
  return (bilinear(im, sx, sy, c) / 255.0 - tc->mean[c]) / tc->std[c];
}

static double max_error(const vt_image *im, vt_crop cr, int S, const vt_transform_config *tc) {
  float *out = malloc(sizeof(float) * 3 * S * S);
  vt_render_crop(im, cr, S, tc, out);
  double worst = 0;
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++) {
        double d = fabs(out[((size_t)c * S + y) * S + x] - reference(im, cr, S, tc, c, y, x));
        worst = d > worst ? d : worst;
      }
  free(out);
  return worst;
}

static void test_render(void) {
  vt_transform_config tc = vt_transform_defaults();
  static const int sizes[][2] = {{1, 1}, {2, 3}, {17, 11}, {100, 60}, {7, 300}, {300, 300}};
  double worst = 0;
  int cases = 0;
  for (int s = 0; s < 6; s++) {
    int W = sizes[s][0], H = sizes[s][1];
    vt_image im = random_image(W, H, (uint32_t)s);
    for (int t = 0; t < 40; t++) {
      uint32_t k = (uint32_t)(s * 100 + t);
      // Fractional crops, some reaching a little past the image (clamping), up- and downscaled.
      float w = (float)(W * (0.05 + 1.05 * vt_rng_uniform(5, k, 0, 0)));
      float h = (float)(H * (0.05 + 1.05 * vt_rng_uniform(5, k, 0, 1)));
      vt_crop cr = {(float)((W - w) * vt_rng_uniform(5, k, 0, 2)) - 0.3f,
                    (float)((H - h) * vt_rng_uniform(5, k, 0, 3)) - 0.3f, w, h, t % 2};
      int S = 1 + (int)(vt_rng_u32(5, k, 0, 4) % 40);
      if (t == 0) S = 300;  // more than a column tile
      double e = max_error(&im, cr, S, &tc);
      worst = e > worst ? e : worst;
      cases++;
    }
    free(im.rgb);
  }
  EXPECT(worst < 2e-5, "render vs reference: max error %g", worst);
  printf("render: %d crops against the double reference, max |error| %.2e\n", cases, worst);

  // Identity: the whole image at its own size is the image, normalised; a flip mirrors it.
  vt_image im = random_image(37, 37, 77);
  float *a = malloc(sizeof(float) * 3 * 37 * 37), *b = malloc(sizeof(float) * 3 * 37 * 37);
  vt_render_crop(&im, (vt_crop){0, 0, 37, 37, 0}, 37, &tc, a);
  vt_render_crop(&im, (vt_crop){0, 0, 37, 37, 1}, 37, &tc, b);
  double e_id = 0, e_flip = 0;
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < 37; y++)
      for (int x = 0; x < 37; x++) {
        double want = (pixel(&im, x, y, c) / 255.0 - tc.mean[c]) / tc.std[c];
        e_id = fmax(e_id, fabs(a[(c * 37 + y) * 37 + x] - want));
        e_flip = fmax(e_flip, fabs(b[(c * 37 + y) * 37 + (36 - x)] - a[(c * 37 + y) * 37 + x]));
      }
  EXPECT(e_id < 1e-5 && e_flip == 0, "identity %g, flip %g", e_id, e_flip);
  free(a), free(b), free(im.rgb);

  // A linear ramp is reproduced exactly by bilinear sampling away from the clamped border.
  vt_image ramp = {64, 64, malloc(64 * 64 * 3)};
  for (int y = 0; y < 64; y++)
    for (int x = 0; x < 64; x++)
      for (int c = 0; c < 3; c++) ramp.rgb[(y * 64 + x) * 3 + c] = (uint8_t)(2 * x + y + c);
  vt_transform_config raw = tc;
  for (int c = 0; c < 3; c++) raw.mean[c] = 0, raw.std[c] = 1.0f / 255;
  float out[3 * 24 * 24];
  vt_crop cr = {10.25f, 7.5f, 31.7f, 40.3f, 0};
  vt_render_crop(&ramp, cr, 24, &raw, out);
  double e_ramp = 0;
  for (int y = 0; y < 24; y++)
    for (int x = 0; x < 24; x++) {
      double sx = cr.x + (x + 0.5) * cr.w / 24 - 0.5, sy = cr.y + (y + 0.5) * cr.h / 24 - 0.5;
      e_ramp = fmax(e_ramp, fabs(out[y * 24 + x] - (2 * sx + sy)));
    }
  EXPECT(e_ramp < 1e-3, "ramp error %g", e_ramp);
  free(ramp.rgb);
}

// Evaluation: the crop region equals torchvision's Resize(floor(S / crop_pct)) + CenterCrop(S),
// and rendering it equals resizing the whole image (bilinear, align_corners=False) and cropping.
static void test_eval(void) {
  vt_transform_config tc = vt_transform_defaults();
  vt_crop c = vt_eval_crop(&tc, 500, 375, 224);  // resized to 341 x 256, offset (58, 16)
  double sx = 500.0 / 341, sy = 375.0 / 256;
  EXPECT(fabs(c.x - 58 * sx) < 1e-4 && fabs(c.y - 16 * sy) < 1e-4 && fabs(c.w - 224 * sx) < 1e-4 &&
             fabs(c.h - 224 * sy) < 1e-4 && !c.flip,
         "500x375: %g %g %g %g", c.x, c.y, c.w, c.h);
  c = vt_eval_crop(&tc, 256, 256, 224);
  EXPECT(c.x == 16 && c.y == 16 && c.w == 224 && c.h == 224, "256x256: %g %g %g %g", c.x, c.y,
         c.w, c.h);
  c = vt_eval_crop(&tc, 28, 28, 224);  // upscaled: 256 x 256, centre 224 = source 24.5 px
  EXPECT(fabs(c.x - 1.75) < 1e-6 && fabs(c.w - 24.5) < 1e-5, "28x28: %g %g", c.x, c.w);
  c = vt_eval_crop(&tc, 300, 1000, 224);  // resized to 256 x 853, offset (16, 314.5 -> 314)
  EXPECT(fabs(c.y - 314 * 1000.0 / 853) < 1e-3 && fabs(c.x - 16 * 300.0 / 256) < 1e-4,
         "300x1000: %g %g", c.x, c.y);
  vt_transform_config sq = tc;  // squash: both sides to 256, offset 16 on each
  sq.eval_squash = 1;
  c = vt_eval_crop(&sq, 300, 1000, 224);
  EXPECT(fabs(c.x - 16 * 300.0 / 256) < 1e-4 && fabs(c.y - 16 * 1000.0 / 256) < 1e-3 &&
             fabs(c.w - 224 * 300.0 / 256) < 1e-4 && fabs(c.h - 224 * 1000.0 / 256) < 1e-3,
         "squash 300x1000: %g %g %g %g", c.x, c.y, c.w, c.h);
  sq.crop_pct = 1.0f;  // the whole image
  c = vt_eval_crop(&sq, 300, 1000, 224);
  EXPECT(c.x == 0 && c.y == 0 && c.w == 300 && c.h == 1000, "squash 1.0: %g %g %g %g", c.x, c.y,
         c.w, c.h);
  // crop_pct 0.8 as timm's double: floor(224 / 0.8) = 280 (0.8f would give 279), so a 500 px
  // square's centre 400 px.
  vt_transform_config p8 = tc;
  p8.crop_pct = 0.8;
  c = vt_eval_crop(&p8, 500, 500, 224);
  EXPECT(fabs(c.w - 400) < 1e-9 && fabs(c.x - 50) < 1e-9, "crop_pct 0.8 at 224 px: %g %g", c.x,
         c.w);

  vt_image im = random_image(90, 61, 5);
  const int S = 40, R = (int)floor(S / tc.crop_pct);  // 45 x 66 after the resize
  int rw = R * 90 / 61, rh = R, left = (int)rint((rw - S) / 2.0), top = (int)rint((rh - S) / 2.0);
  c = vt_eval_crop(&tc, 90, 61, S);
  float *out = malloc(sizeof(float) * 3 * S * S);
  vt_render_crop(&im, c, S, &tc, out);
  double e = 0;
  for (int ch = 0; ch < 3; ch++)
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++) {
        double src_x = (left + x + 0.5) * 90.0 / rw - 0.5, src_y = (top + y + 0.5) * 61.0 / rh - 0.5;
        double want = (bilinear(&im, src_x, src_y, ch) / 255.0 - tc.mean[ch]) / tc.std[ch];
        e = fmax(e, fabs(out[(ch * S + y) * S + x] - want));
      }
  EXPECT(e < 1e-4, "eval render vs resize-then-crop: %g", e);
  printf("eval: geometry of 4 sizes and 2 squashed exact, render vs resize-then-crop max |error| "
         "%.2e\n", e);
  free(out), free(im.rgb);
}

static int same(vt_crop a, vt_crop b) {
  return a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h && a.flip == b.flip;
}

static void test_train(void) {
  vt_transform_config tc = vt_transform_defaults();
  // Determinism and independence of the key's parts.
  int equal_epoch = 0, equal_index = 0, equal_seed = 0, repeat = 0;
  for (int i = 0; i < 2000; i++) {
    vt_crop a = vt_train_crop(&tc, 500, 375, 7, 3, i);
    repeat += same(a, vt_train_crop(&tc, 500, 375, 7, 3, i));
    equal_epoch += same(a, vt_train_crop(&tc, 500, 375, 7, 4, i));
    equal_index += same(a, vt_train_crop(&tc, 500, 375, 7, 3, i + 1));
    equal_seed += same(a, vt_train_crop(&tc, 500, 375, 8, 3, i));
  }
  EXPECT(repeat == 2000 && equal_epoch < 3 && equal_index < 3 && equal_seed < 3,
         "repeat %d, equal across epochs %d, indices %d, seeds %d", repeat, equal_epoch,
         equal_index, equal_seed);

  // Bounds on many shapes: integer crops inside the image, at least one pixel.
  static const int shapes[][2] = {{1, 1},   {2, 2},     {1, 100},  {100, 1},   {3, 2},
                                  {500, 375}, {4096, 4096}, {28, 28}, {10000, 7}, {640, 480}};
  int outside = 0;
  for (int s = 0; s < 10; s++)
    for (int i = 0; i < 3000; i++) {
      int W = shapes[s][0], H = shapes[s][1];
      vt_crop c = vt_train_crop(&tc, W, H, 1, i % 5, i);
      outside += !(c.x >= 0 && c.y >= 0 && c.w >= 1 && c.h >= 1 && c.x + c.w <= W &&
                   c.y + c.h <= H && c.x == floorf(c.x) && c.y == floorf(c.y) &&
                   c.w == floorf(c.w) && c.h == floorf(c.h));
    }
  EXPECT(outside == 0, "%d crops outside their image or fractional", outside);
  // torchvision's fallback for shapes no try can fit: the centre, clamped to the ratio range.
  vt_crop f = vt_train_crop(&tc, 1, 100, 1, 0, 0);
  EXPECT(f.x == 0 && f.y == 49 && f.w == 1 && f.h == 1, "1x100 fallback %g %g %g %g", f.x, f.y,
         f.w, f.h);
  f = vt_train_crop(&tc, 1000, 10, 1, 0, 0);
  EXPECT(f.x == 493 && f.y == 0 && f.w == 13 && f.h == 10, "1000x10 fallback %g %g %g %g", f.x,
         f.y, f.w, f.h);

  // Distribution on a large square image (rounding is negligible): area fraction and aspect
  // ratio within the configured ranges, log-ratio centred, flips half the time, positions
  // spread over the whole image, and no correlation between neighbouring keys.
  const int N = 20000, W = 2000, H = 2000;
  double smin = 1, smax = 0, rmin = 10, rmax = 0, sum_lr = 0, sum_cx = 0, flips = 0;
  double s1 = 0, s2 = 0, s11 = 0, s22 = 0, s12 = 0;
  for (int i = 0; i < N; i++) {
    vt_crop c = vt_train_crop(&tc, W, H, 42, 1, i);
    double s = (double)c.w * c.h / ((double)W * H), r = (double)c.w / c.h;
    smin = fmin(smin, s), smax = fmax(smax, s), rmin = fmin(rmin, r), rmax = fmax(rmax, r);
    sum_lr += log(r);
    sum_cx += (c.x + c.w / 2) / W;
    flips += c.flip;
    vt_crop d = vt_train_crop(&tc, W, H, 42, 2, i);
    double t = (double)d.w * d.h / ((double)W * H);
    s1 += s, s2 += t, s11 += s * s, s22 += t * t, s12 += s * t;
  }
  double corr = (s12 / N - s1 / N * s2 / N) /
                sqrt((s11 / N - s1 * s1 / N / N) * (s22 / N - s2 * s2 / N / N));
  printf("train: area fraction [%.4f, %.4f], ratio [%.4f, %.4f], mean log ratio %.4f, "
         "flips %.3f, mean centre x %.3f, corr(epoch e, e+1) %.4f\n",
         smin, smax, rmin, rmax, sum_lr / N, flips / N, sum_cx / N, corr);
  EXPECT(smin >= 0.0799 && smin < 0.085 && smax <= 1.0 && smax > 0.95, "area range");
  EXPECT(rmin >= 0.749 && rmin < 0.76 && rmax <= 1.3345 && rmax > 1.32, "ratio range");
  EXPECT(fabs(sum_lr / N) < 0.01 && fabs(flips / N - 0.5) < 0.015 && fabs(sum_cx / N - 0.5) < 0.01,
         "centred distributions");
  EXPECT(fabs(corr) < 0.03, "epochs correlated: %g", corr);
  tc.flip_prob = 0;
  int nflip = 0;
  for (int i = 0; i < 1000; i++) nflip += vt_train_crop(&tc, 50, 50, 1, 0, i).flip;
  EXPECT(nflip == 0, "flip_prob 0 flipped %d", nflip);
}

// Reduced renders (vt_render_crop_part): the reduction rule, the window of taps, and that a
// window of a reduced image renders exactly as the whole reduced image does, which itself
// matches the double reference with sample positions divided by the scale.
static void test_part(void) {
  vt_transform_config tc = vt_transform_defaults();
  struct { float w, h; int S, d; } red[] = {{1024, 1024, 224, 4}, {448, 500, 224, 2},
                                           {447, 900, 224, 1}, {1792, 1800, 224, 8},
                                           {5000, 4000, 224, 8}, {10, 10, 224, 1},
                                           {895.9f, 2000, 224, 2}, {64, 64, 8, 8}};
  for (int k = 0; k < 8; k++) {
    vt_crop c = {0, 0, red[k].w, red[k].h, 0};
    EXPECT(vt_crop_reduction(c, red[k].S) == red[k].d, "reduction of %gx%g for %d: %d, want %d",
           red[k].w, red[k].h, red[k].S, vt_crop_reduction(c, red[k].S), red[k].d);
  }
  double worst = 0;
  int cases = 0, loose = 0, exact = 0;
  for (int t = 0; t < 300; t++) {
    uint32_t k = (uint32_t)t;
    int W = 1 + (int)(vt_rng_u32(9, k, 0, 0) % 400), H = 1 + (int)(vt_rng_u32(9, k, 0, 1) % 400);
    int d = 1 << (vt_rng_u32(9, k, 0, 2) % 4), S = 1 + (int)(vt_rng_u32(9, k, 0, 3) % 64);
    float w = (float)(W * (0.02 + 1.1 * vt_rng_uniform(9, k, 0, 4)));
    float h = (float)(H * (0.02 + 1.1 * vt_rng_uniform(9, k, 0, 5)));
    vt_crop cr = {(float)((W - w) * vt_rng_uniform(9, k, 0, 6)) - 0.4f,
                  (float)((H - h) * vt_rng_uniform(9, k, 0, 7)) - 0.4f, w, h, t % 2};
    int sw = vt_image_scaled_side(W, d), sh = vt_image_scaled_side(H, d);
    vt_image red_img = random_image(sw, sh, 1000 + k);  // stands for the image at 1/d
    int x0, y0, x1, y1;
    vt_crop_window(cr, S, d, sw, sh, &x0, &y0, &x1, &y1);
    // Tight and complete: the reference's taps span exactly the window.
    int tx0 = sw, tx1 = -1, ty0 = sh, ty1 = -1;
    for (int i = 0; i < S; i++) {
      double sx = fmin(fmax((cr.x + (i + 0.5) * (double)cr.w / S) / d - 0.5, 0), sw - 1.0);
      double sy = fmin(fmax((cr.y + (i + 0.5) * (double)cr.h / S) / d - 0.5, 0), sh - 1.0);
      int xi = (int)sx, yi = (int)sy;
      tx0 = xi < tx0 ? xi : tx0, ty0 = yi < ty0 ? yi : ty0;
      int xn = xi < sw - 1 ? xi + 1 : xi, yn = yi < sh - 1 ? yi + 1 : yi;
      tx1 = xn > tx1 ? xn : tx1, ty1 = yn > ty1 ? yn : ty1;
    }
    loose += !(x0 == tx0 && x1 == tx1 && y0 == ty0 && y1 == ty1);
    // The window alone, copied out, renders as the whole reduced image.
    vt_image win = {x1 - x0 + 1, y1 - y0 + 1, malloc((size_t)(x1 - x0 + 1) * (y1 - y0 + 1) * 3)};
    for (int y = y0; y <= y1; y++)
      memcpy(win.rgb + (size_t)(y - y0) * win.width * 3, red_img.rgb + ((size_t)y * sw + x0) * 3,
             (size_t)win.width * 3);
    vt_image_part whole = {red_img, 0, 0, d, sw, sh, W, H}, part = {win, x0, y0, d, sw, sh, W, H};
    float *a = malloc(sizeof(float) * 3 * S * S), *b = malloc(sizeof(float) * 3 * S * S);
    vt_render_crop_part(&whole, cr, S, &tc, a);
    vt_render_crop_part(&part, cr, S, &tc, b);
    exact += !memcmp(a, b, sizeof(float) * 3 * S * S);
    for (int c = 0; c < 3; c++)
      for (int oy = 0; oy < S; oy++)
        for (int ox = 0; ox < S; ox++) {
          int col = cr.flip ? S - 1 - ox : ox;
          double sx = (cr.x + (col + 0.5) * (double)cr.w / S) / d - 0.5;
          double sy = (cr.y + (oy + 0.5) * (double)cr.h / S) / d - 0.5;
          double want = (bilinear(&red_img, sx, sy, c) / 255.0 - tc.mean[c]) / tc.std[c];
          worst = fmax(worst, fabs(a[((size_t)c * S + oy) * S + ox] - want));
        }
    cases++;
    free(a), free(b), free(win.rgb), free(red_img.rgb);
  }
  EXPECT(loose == 0, "%d of %d windows not exactly the span of the taps", loose, cases);
  EXPECT(exact == cases, "%d of %d window renders differ from the whole image's", cases - exact,
         cases);
  EXPECT(worst < 2e-5, "reduced render vs reference: %g", worst);
  printf("part: reduction rule on 8 crops; %d windows exactly the taps' span, renders from them "
         "identical to the whole image's, max |error| %.2e vs the reference\n", cases, worst);
}

// RandAugment's draws: timm's distribution (operations uniform with replacement, each applied
// with probability p, magnitude N(m, mstd) clipped, signs even), keyed by (seed, epoch, key);
// the config string's parser; the 8-bit render against the float one.
static void test_randaug(void) {
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  vt_randaug_config c = vt_randaug_defaults(mean);
  char err[256];
  EXPECT(c.fill[0] == 124 && c.fill[1] == 116 && c.fill[2] == 104, "fill %d %d %d", c.fill[0],
         c.fill[1], c.fill[2]);
  // (timm rounds 255 x the mean in double: 0.3 gives 76 and 0.9 230, where the floats' products
  // 76.500003 and 229.49999 rounded to 77 and 229)
  const float halves[3] = {0.3f, 0.9f, 0.5f};
  c = vt_randaug_defaults(halves);
  EXPECT(c.fill[0] == 76 && c.fill[1] == 230 && c.fill[2] == 128, "fill of 0.3, 0.9, 0.5: %d %d %d",
         c.fill[0], c.fill[1], c.fill[2]);
  EXPECT(vt_randaug_parse("rand-m9-mstd0.5-inc1", &c, err, sizeof err) == VT_OK, "%s", err);
  EXPECT(c.layers == 2 && c.magnitude == 9 && c.magnitude_std == 0.5f && c.increasing == 1 &&
         c.prob == 0.5f && c.magnitude_max == 10, "parsed rand-m9-mstd0.5-inc1 wrong");
  const char *bad[] = {"auto", "rand-m9-w0", "rand-mx", "rand-n0", "rand-n9", "rand-inc2",
                       "rand-p1.5", "rand-m9-", "original-mstd0.5"};
  for (int i = 0; i < 9; i++) {
    vt_randaug_config d = c;
    EXPECT(vt_randaug_parse(bad[i], &d, err, sizeof err) == VT_ERR_INPUT && strstr(err, "--aa"),
           "'%s' accepted", bad[i]);
  }
  vt_randaug_config u = c;
  EXPECT(vt_randaug_parse("rand-m7-n3-mstd101-mmax12-inc0-p0.25", &u, err, sizeof err) == VT_OK &&
             u.layers == 3 && isinf(u.magnitude_std) && u.magnitude_max == 12 && !u.increasing &&
             u.prob == 0.25f, "long form: %s", err);

  enum { N = 60000 };
  int ops[VT_RA_NUM_OPS] = {0}, applied = 0, neg = 0, rot = 0, same_key = 0, same_epoch = 0;
  double sm = 0, sm2 = 0;
  for (int k = 0; k < N; k++) {
    vt_randaug_plan p, q, r, again;
    vt_randaug_draw(&c, 5, 2, k, &p);
    vt_randaug_draw(&c, 5, 2, k, &again);
    vt_randaug_draw(&c, 5, 3, k, &q);
    vt_randaug_draw(&c, 5, 2, k + N, &r);
    EXPECT(!memcmp(&p, &again, sizeof p), "draw %d is not a function of its key", k);
    same_epoch += !memcmp(&p, &q, sizeof p);
    same_key += !memcmp(&p, &r, sizeof p);
    for (int i = 0; i < p.n; i++) {
      ops[p.op[i]]++;
      applied += p.apply[i];
      sm += p.magnitude[i], sm2 += (double)p.magnitude[i] * p.magnitude[i];
      if (p.op[i] == VT_RA_ROTATE) rot++, neg += p.arg[i] < 0;
    }
  }
  const double draws = 2.0 * N, expect = draws / VT_RA_NUM_OPS, sd = sqrt(expect);
  int worst = 0;
  for (int o = 0; o < VT_RA_NUM_OPS; o++)
    if (fabs(ops[o] - expect) > fabs(ops[worst] - expect)) worst = o;
  EXPECT(fabs(ops[worst] - expect) < 5 * sd, "%s drawn %d times of %.0f expected",
         vt_randaug_op_name((vt_ra_op)worst), ops[worst], expect);
  EXPECT(fabs(applied / draws - 0.5) < 5 * sqrt(0.25 / draws), "applied %g", applied / draws);
  EXPECT(fabs(neg / (double)rot - 0.5) < 5 * sqrt(0.25 / rot), "negative rotations %g",
         neg / (double)rot);
  // N(9, 0.5) clipped at 10: mean 8.9956, sd 0.4897 (numpy, 1e7 draws).
  const double mm = sm / draws, msd = sqrt(sm2 / draws - mm * mm);
  EXPECT(fabs(mm - 8.9956) < 0.01 && fabs(msd - 0.4897) < 0.01, "magnitude mean %g sd %g", mm,
         msd);
  EXPECT(same_epoch < 10 && same_key < 10, "plans repeat across epochs (%d) or keys (%d)",
         same_epoch, same_key);

  // The 8-bit render is the float render's value rounded: normalising it again lands within
  // half a level of the float path.
  vt_image im = random_image(97, 61, 3);
  vt_transform_config tc = vt_transform_defaults();
  const int S = 40;
  vt_crop cr = vt_train_crop(&tc, im.width, im.height, 1, 0, 9);
  float *f = malloc(sizeof(float) * 3 * S * S), *g = malloc(sizeof(float) * 3 * S * S);
  uint8_t *rgb = malloc(3 * S * S);
  vt_image_part whole = {.win = im, .scale = 1, .width = im.width, .height = im.height,
                         .full_width = im.width, .full_height = im.height};
  vt_render_crop_part(&whole, cr, S, &tc, f);
  vt_render_crop_part_u8(&whole, cr, S, rgb);
  vt_normalize_u8(&tc, rgb, S, g);
  double e = 0;
  for (int i = 0; i < 3 * S * S; i++) {
    const int ch = i / (S * S);
    e = fmax(e, fabs(f[i] - g[i]) * 255.0 * tc.std[ch]);
  }
  EXPECT(e <= 0.5 + 1e-3, "8-bit render off by %g levels", e);
  free(f), free(g), free(rgb), free(im.rgb);
}

int main(void) {
  test_randaug();
  test_render();
  test_eval();
  test_train();
  test_part();
  printf("test_transform: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
