// image_internal.h: what the decoder files of dataio (image.c, image_png.c, image_jpeg.c,
// image_webp.c) share. Not a public header: nothing outside these files includes it.
#ifndef VT_IMAGE_INTERNAL_H
#define VT_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"

void vt_img_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// w * h > max_pixels without overflow (headers reach 2^32 - 1); max_pixels <= 0: no limit.
static inline int vt_img_too_many_pixels(int64_t w, int64_t h, int64_t max_pixels) {
  if (max_pixels <= 0 || w <= 0 || h <= 0) return 0;
  return w > max_pixels / h;
}

// Clamps an inclusive range [*lo, *hi] into [0, n - 1] (n >= 1), keeping it non-empty.
static inline void vt_img_clamp_range(int *lo, int *hi, int n) {
  if (*lo < 0) *lo = 0;
  if (*lo > n - 1) *lo = n - 1;
  if (*hi > n - 1) *hi = n - 1;
  if (*hi < *lo) *hi = *lo;
}

// A region asked for at 1/from, in pixels of the image at 1/to (to <= from: a decoder that cannot
// reduce as far), covering at least the same full-size pixels.
static inline void vt_img_rescale_region(const vt_image_region *r, int from, int to, int *x0,
                                         int *y0, int *x1, int *y1) {
  *x0 = r->x0, *y0 = r->y0, *x1 = r->x1, *y1 = r->y1;
  if (from <= to || to < 1) return;
  int64_t f = from / to;  // powers of two
  int64_t v[4] = {*x0 * f, *y0 * f, (*x1 + (int64_t)1) * f - 1, (*y1 + (int64_t)1) * f - 1};
  for (int i = 0; i < 4; i++) v[i] = v[i] < 0 ? 0 : v[i] > INT32_MAX ? INT32_MAX : v[i];
  *x0 = (int)v[0], *y0 = (int)v[1], *x1 = (int)v[2], *y1 = (int)v[3];
}

// The whole image at scale 1: what vt_image_decode asks the part decoders for.
static inline vt_image_region vt_img_whole_region(void) {
  vt_image_region r = {1, 0, 0, INT32_MAX, INT32_MAX};
  return r;
}

// PNG (image_png.c): bytes start with the 8-byte signature. Without libpng (VT_HAVE_PNG
// undefined) both return VT_IMG_NO_DECODER with a message saying how to build with it.
vt_image_status vt_png_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                             vt_image_info *info, char *err, size_t errlen);
vt_image_status vt_png_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                   const vt_image_region *region, vt_image_part *out, char *err,
                                   size_t errlen);

// JPEG through libjpeg-turbo (image_jpeg.c, only with VT_HAVE_JPEG): bytes start with FF D8 FF.
vt_image_status vt_jpeg_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                              vt_image_info *info, char *err, size_t errlen);
vt_image_status vt_jpeg_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                    const vt_image_region *region, vt_image_part *out,
                                    char *err, size_t errlen);
const char *vt_jpeg_version(void);

// WebP through libwebp (image_webp.c): bytes start with "RIFF", 4 bytes, "WEBP". Without libwebp
// (VT_HAVE_WEBP undefined) both return VT_IMG_NO_DECODER saying how to build with it; the whole
// image is decoded, whatever the region. vt_webp_version: "libwebp" or "none".
vt_image_status vt_webp_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                              vt_image_info *info, char *err, size_t errlen);
vt_image_status vt_webp_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                    const vt_image_region *region, vt_image_part *out,
                                    char *err, size_t errlen);
const char *vt_webp_version(void);

#endif
