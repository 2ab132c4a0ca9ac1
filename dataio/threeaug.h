// threeaug.h: 3-Augment, DeiT III's data augmentation (Touvron et al. 2022, "DeiT III: Revenge of
// the ViT", the deit repository's new_data_aug_generator), on the 8-bit training crop after the
// random-resized crop and flip, in place of RandAugment: each image gets one of grayscale
// (torchvision's Grayscale(3): Pillow's L in all three channels), solarization (ImageOps.solarize
// at 128) and a Gaussian blur (ImageFilter.GaussianBlur, radius uniform in [0.1, 2]), chosen
// uniformly, then torchvision's ColorJitter(j, j, j): brightness, contrast and saturation
// factors uniform in [1 - j, 1 + j], applied in a random order as ImageEnhance does. Operations
// are Pillow's (tests/randaug_pil.py checks them byte for byte); the draws are Philox keyed by
// (seed, epoch, sample key), never by thread or rank. No MPI, backend or model.
#ifndef VT_THREEAUG_H
#define VT_THREEAUG_H

#include <stdint.h>

#include "randaug.h"

// (VT_3A_NONE: the colour jitter alone, timm's --color-jitter without 3-Augment)
typedef enum {
  VT_3A_NONE = -1, VT_3A_GRAYSCALE, VT_3A_SOLARIZE, VT_3A_BLUR, VT_3A_NUM
} vt_threeaug_pick;

// What happens to one image.
typedef struct {
  vt_threeaug_pick pick;
  float radius;            // VT_3A_BLUR: the Gaussian's radius (Pillow's, a standard deviation)
  int njitter;             // 3 with colour jitter, else 0
  vt_ra_op jitter_op[3];   // VT_RA_BRIGHTNESS, VT_RA_CONTRAST, VT_RA_COLOR in the order applied
  float jitter[3];         // their enhance factors
} vt_threeaug_plan;

// The plan of sample `key` in `epoch` with colour jitter strength j (0: none): uniforms (seed,
// "threeaug", epoch, 8 key + k), k = 0 the pick, 1 the radius, 2-3 the jitter order, 4-6 the
// brightness, contrast and saturation factors.
void vt_threeaug_draw(float color_jitter, uint64_t seed, int64_t epoch, int64_t key,
                      vt_threeaug_plan *p);
// The plan on an S x S image (its pick, none where VT_3A_NONE, then its jitter); scratch holds
// 6 * S bytes.
void vt_threeaug_run(const vt_threeaug_plan *p, uint8_t *rgb, int S, uint8_t *scratch);

// Pillow's ImageFilter.GaussianBlur(radius) in place on an 8-bit RGB image (h, w, 3): three
// passes of an extended box blur (fractional edge weights, 8.24 fixed point) along each row,
// then along each column, edges extended; scratch holds 6 * max(w, h) bytes.
void vt_gaussian_blur(uint8_t *rgb, int w, int h, float radius, uint8_t *scratch);
// Each pixel's Pillow L value in all three channels.
void vt_grayscale(uint8_t *rgb, int w, int h);

#endif
