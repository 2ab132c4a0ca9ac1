// randaug.h: RandAugment (Cubuk et al. 2020) as timm's rand_augment_transform runs it, on the
// 8-bit training crop (after the random-resized crop and flip, before normalisation), as DeiT's
// "rand-m9-mstd0.5-inc1" does. Each image gets `layers` operations drawn uniformly with
// replacement from timm's 15; each is applied with probability `prob`, at a magnitude drawn from
// N(m, mstd) clipped to [0, mmax], with a random sign where the operation has one. Operations
// are PIL's (ImageOps, ImageEnhance, Image.transform with a fill colour) rewritten from their
// definitions; tests/randaug_pil.py checks each against Pillow. The draws are Philox keyed by
// (seed, epoch, sample key), never by thread or rank. No MPI, backend or model.
#ifndef VT_RANDAUG_H
#define VT_RANDAUG_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

#define VT_RA_MAX_LAYERS 8

// timm's _RAND_TRANSFORMS order (and _RAND_INCREASING_TRANSFORMS, the same operations with
// levels that grow in strength for Posterize, Solarize, Color, Contrast, Brightness, Sharpness).
typedef enum {
  VT_RA_AUTOCONTRAST, VT_RA_EQUALIZE, VT_RA_INVERT, VT_RA_ROTATE, VT_RA_POSTERIZE,
  VT_RA_SOLARIZE, VT_RA_SOLARIZE_ADD, VT_RA_COLOR, VT_RA_CONTRAST, VT_RA_BRIGHTNESS,
  VT_RA_SHARPNESS, VT_RA_SHEAR_X, VT_RA_SHEAR_Y, VT_RA_TRANSLATE_X, VT_RA_TRANSLATE_Y,
  VT_RA_NUM_OPS
} vt_ra_op;

typedef enum { VT_RA_BILINEAR = 0, VT_RA_BICUBIC = 1 } vt_ra_interp;

typedef struct {
  int layers;            // operations per image (timm's n, 2); 0: RandAugment off
  float magnitude;       // m, on timm's 0..10 scale (9)
  float magnitude_std;   // mstd (0.5); 0: always m; INFINITY: uniform in [0, m]
  float magnitude_max;   // clip bound of the drawn magnitude (timm's mmax, 10)
  int increasing;        // inc1: the "Increasing" levels of timm
  float prob;            // each drawn operation is applied with this probability (0.5)
  float translate_pct;   // TranslateXRel/YRel at level 10: this fraction of the side (0.45)
  vt_ra_interp interp;   // resampling of Rotate, Shear, Translate (DeiT: bicubic)
  uint8_t fill[3];       // colour of the area the geometric operations uncover (timm: the mean)
} vt_randaug_config;

// Off (layers 0) with timm's other defaults, fill from a [0, 1] mean: min(255, round(255 m)).
vt_randaug_config vt_randaug_defaults(const float mean[3]);
// Parses timm's config string into c (which holds the defaults): "rand" then "-" separated
// keys m<float>, n<int>, mstd<float> (above 100: uniform), mmax<float>, inc<0|1>, p<float>;
// e.g. "rand-m9-mstd0.5-inc1". Weighted choice (w) and other policies are refused by name.
vt_status vt_randaug_parse(const char *spec, vt_randaug_config *c, char *err, size_t errlen);
// "rand-m9-n2-mstd0.5-mmax10-inc1-p0.5", the form the log prints.
void vt_randaug_describe(const vt_randaug_config *c, char *buf, size_t len);
const char *vt_randaug_op_name(vt_ra_op op);

// What happens to one image: the drawn operations with their arguments (apply 0: skipped).
typedef struct {
  int n;
  vt_ra_op op[VT_RA_MAX_LAYERS];
  int apply[VT_RA_MAX_LAYERS];
  float magnitude[VT_RA_MAX_LAYERS];
  float arg[VT_RA_MAX_LAYERS];  // degrees, shear factor, pixels, enhance factor, bits, threshold
} vt_randaug_plan;

// The plan of sample `key` in `epoch`: uniforms (seed, "randaug", epoch, 32 key + 4 i + j) for
// layer i (j = 0 the operation, 1 whether, 2 the sign), normals (seed, "randaug.m", epoch,
// 8 key + i) for its magnitude (j = 3: its uniform when mstd is infinite). Arguments as timm's
// level functions.
void vt_randaug_draw(const vt_randaug_config *c, uint64_t seed, int64_t epoch, int64_t key,
                     vt_randaug_plan *p);
// The argument of op at magnitude m (0..10 scale) with sign negate (timm's _LEVEL_TO_ARG).
float vt_randaug_arg(const vt_randaug_config *c, vt_ra_op op, float m, int negate);

// RGB to L as Pillow converts it: ITU-R 601-2 weights in 16-bit fixed point, rounded.
static inline int vt_pil_luma(const uint8_t *p) {
  return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
}

// One operation in place on an 8-bit RGB image (h, w, 3); scratch holds w * h * 3 bytes.
void vt_randaug_op(vt_ra_op op, float arg, vt_ra_interp interp, const uint8_t fill[3],
                   uint8_t *rgb, int w, int h, uint8_t *scratch);
// The plan's operations in order on an S x S image.
void vt_randaug_run(const vt_randaug_config *c, const vt_randaug_plan *p, uint8_t *rgb, int S,
                    uint8_t *scratch);

#endif
