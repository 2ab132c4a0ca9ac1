// test_image.h: what the parts of the test_image program (test_image.c, test_image_part.c,
// test_image_bad.c) share: the check counter, the temporary folder, PNG writing with libpng and
// the expected pixels, the embedded JPEG, the crop checks. Test code only; needs libpng and
// dataio/image.h, nothing else.
#ifndef VT_TEST_IMAGE_H
#define VT_TEST_IMAGE_H

#include <png.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "image.h"

// The two files share the counters (defined in test_image.c).
#define VT_CHECK_SHARED
#include "vt_check.h"

#define LIMIT (1 << 26)  // max_pixels for the tests: 64 Mpixels

extern char dir[64];              // a fresh temporary folder, removed at the end
extern const uint8_t flat_jpeg[];  // 16x16, the flat colour (200, 100, 50)
extern const size_t flat_jpeg_len;

typedef struct {
  int color, depth, w, h, interlace;
  int trns, extras;  // a tRNS chunk; gAMA + zTXt chunks (both must be ignored)
} png_case;

extern const int kinds[][2];  // (colour type, bit depth) of every kind PNG has
extern const int nkinds;

uint8_t *read_all(const char *path, size_t *n);
void write_all(const char *path, const void *b, size_t n);
void write_png(const char *path, const png_case *pc);  // several IDAT chunks
int check_png_pixels(const png_case *pc, const vt_image *im);

// test_image_part.c: partial decodes and whole samples against the full decode.
typedef struct {
  int total, equal;                // samples; at 1/1, identical to the full path
  double box_mean, box_max;        // at 1/d: against the box-averaged full decode
  double full_mean, full_max;      // at 1/d: against the full decode + bilinear
} crop_stats;
void check_crops(const uint8_t *b, size_t n, const char *name, crop_stats *cs);
void test_jpeg_part(void);
void test_sample_crops(void);

void test_bad_inputs(void);  // test_image_bad.c
// Damaged copies of a PNG through vt_sample_from_bytes: the verdict of the whole decode for any
// crop (test_image_bad.c).
void chunk_damage_checks(const uint8_t *png, size_t n, int interlaced);
void test_threads(void);

#endif
