// fuzz_image.c: libFuzzer target for one image path: vt_image_decode, vt_image_probe, a partial
// decode (vt_image_decode_part) of a window, and a whole sample (vt_sample_from_bytes: probe,
// crop, reduced or early-stopping decode, render), window and crop derived from the input's
// bytes. Every input gets the format's signature, so mutations exercise that decoder and our
// error handling rather than format sniffing: the PNG signature (libpng), or with
// -DVT_FUZZ_JPEG_TARGET a JPEG start-of-image marker (libjpeg-turbo: scaled, cropped, skipped
// and stopped decodes; or stb_image and our checks), or with -DVT_FUZZ_WEBP_TARGET WebP's
// "RIFF" and "WEBP" tags (libwebp: our header and status checks). Built by fuzz.sh with clang
// -fsanitize=fuzzer,address,undefined from dataio's image, transform and sample sources.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "sample.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int64_t max_pixels = 1 << 18;  // small: bombs are refused, every input is fast

// The contract: pixels (within the limit) exactly when OK, none and a message otherwise.
static void check_image(vt_image_status st, const vt_image *im, const char *err) {
  if (st == VT_IMG_OK) {
    if (!im->rgb || im->width <= 0 || im->height <= 0 ||
        (int64_t)im->width * im->height > max_pixels)
      abort();
    volatile uint8_t sink = im->rgb[(size_t)im->width * im->height * 3 - 1];  // all there
    (void)sink;
  } else if (im->rgb || !err[0]) {
    abort();
  }
}

static uint64_t hash(const uint8_t *d, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
  return h;
}

static void fuzz_one(const uint8_t *buf, size_t size) {
  vt_image im;
  char err[256];
  vt_image_status full = vt_image_decode(buf, size, max_pixels, &im, err, sizeof err);
  check_image(full, &im, err);

  vt_image_info info;
  vt_image_status st = vt_image_probe(buf, size, max_pixels, &info, err, sizeof err);
  if (st == VT_IMG_OK && (info.width <= 0 || info.height <= 0 || info.max_scale < 1 ||
                          (int64_t)info.width * info.height > max_pixels))
    abort();
  if (st != VT_IMG_OK && !err[0]) abort();
  if (st != VT_IMG_OK && full == VT_IMG_OK) abort();  // a probe refuses only what decode does

  // A window at a scale, from the input's hash: it must hold the region asked for (clamped).
  uint64_t h = hash(buf, size);
  if (st == VT_IMG_OK) {
    int d = 1 << (h & 3);
    d = d < info.max_scale ? d : info.max_scale;
    int sw = vt_image_scaled_side(info.width, d), sh = vt_image_scaled_side(info.height, d);
    vt_image_region r = {d, (int)((h >> 8) % (uint64_t)(sw + 2)) - 1,
                         (int)((h >> 20) % (uint64_t)(sh + 2)) - 1, 0, 0};
    r.x1 = r.x0 + (int)((h >> 32) % 64);
    r.y1 = r.y0 + (int)((h >> 40) % 64);
    vt_image_part p;
    st = vt_image_decode_part(buf, size, max_pixels, &r, &p, err, sizeof err);
    check_image(st, &p.win, err);
    if (st == VT_IMG_OK) {
      int x0 = r.x0, y0 = r.y0, x1 = r.x1, y1 = r.y1;  // the region, clamped as the decoder does
      x0 = x0 < 0 ? 0 : x0 < p.width ? x0 : p.width - 1;
      y0 = y0 < 0 ? 0 : y0 < p.height ? y0 : p.height - 1;
      x1 = x1 < x0 ? x0 : x1 < p.width ? x1 : p.width - 1;
      y1 = y1 < y0 ? y0 : y1 < p.height ? y1 : p.height - 1;
      if (p.full_width != info.width || p.full_height != info.height || p.scale != d ||
          p.width != vt_image_scaled_side(info.width, d) ||
          p.height != vt_image_scaled_side(info.height, d) || p.x0 < 0 || p.y0 < 0 ||
          p.x0 + p.win.width > p.width || p.y0 + p.win.height > p.height || x0 < p.x0 ||
          y0 < p.y0 || x1 >= p.x0 + p.win.width || y1 >= p.y0 + p.win.height)
        abort();
      // At full scale the region's pixels are the whole decode's, wherever the decode stopped.
      if (d == 1 && full == VT_IMG_OK)
        for (int y = y0; y <= y1; y++)
          if (memcmp(p.win.rgb + ((size_t)(y - p.y0) * p.win.width + (x0 - p.x0)) * 3,
                     im.rgb + ((size_t)y * im.width + x0) * 3, (size_t)(x1 - x0 + 1) * 3))
            abort();
    }
    vt_image_part_free(&p);
  }
  vt_image_free(&im);

  // A whole training or evaluation sample, as the loader makes it (half of the training
  // samples with RandAugment at up to 3 operations, magnitude up to 12, always applied; a third
  // of all samples each with the default render, Pillow's bilinear and its bicubic resize).
  vt_transform_config tc = vt_transform_defaults();
  tc.train_interp = tc.eval_interp = (vt_interp)((h >> 30) % 3);
  if ((h >> 20) & 1) {
    tc.ra.layers = 1 + (int)((h >> 21) % 3);
    tc.ra.magnitude = (float)((h >> 23) % 13), tc.ra.magnitude_max = 12, tc.ra.prob = 1;
    tc.ra.interp = (h >> 27) & 1 ? VT_RA_BICUBIC : VT_RA_BILINEAR;
  }
  vt_sample_spec sp = {&tc, 1 + (int)((h >> 48) % 40), (int)(h >> 47) & 1, h >> 13,
                       (int64_t)(h >> 58), (int64_t)((h >> 24) % 1000), max_pixels, 0};
  float out[3 * 40 * 40];
  st = vt_sample_from_bytes(buf, size, &sp, out, NULL, err, sizeof err);
  if (st == VT_IMG_OK) {
    for (int i = 0; i < 3 * sp.S * sp.S; i++)
      if (!isfinite(out[i])) abort();
  } else if (!err[0]) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#if defined(VT_FUZZ_JPEG_TARGET)
  static const uint8_t sig[3] = {0xFF, 0xD8, 0xFF};  // JPEG start-of-image
#elif defined(VT_FUZZ_WEBP_TARGET)
  static const uint8_t sig[12] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
#else
  static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};  // PNG signature
#endif
  // The signature overwrites the first bytes (seeds keep theirs), shorter inputs stay a prefix.
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  for (size_t i = 0; i < size && i < sizeof sig; i++)
    if (i < 4 || i >= 8) buf[i] = sig[i];  // WebP's bytes 4-7 (the RIFF size) stay the input's
  fuzz_one(buf, size);
  free(buf);
  return 0;
}
