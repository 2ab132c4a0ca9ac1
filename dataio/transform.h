// transform.h: from a decoded image to a normalised (3, S, S) float tensor. Training: random-
// resized crop (torchvision's algorithm: area scale and log-uniform aspect ratio, 10 tries, then
// a centre crop), horizontal flip, bilinear resampling of only the S x S output pixels (the work
// is O(S^2), whatever the source size), normalisation. Evaluation: resize the shorter side to
// S / crop_pct and take the centre S x S. Randomness is keyed by (seed, epoch, sample), so a
// sample's crop does not depend on which thread or rank makes it. The crop is chosen on the
// full-size image; rendering can read a reduced, windowed decode of it (vt_image_part: JPEG at
// 1/2, 1/4, 1/8 by DCT scaling), which sample.h puts together. No MPI, backend or model.
#ifndef VT_TRANSFORM_H
#define VT_TRANSFORM_H

#include <stdint.h>

#include "image.h"
#include "randaug.h"

// The simple random crop's reflected padding on each side, in resized pixels (DeiT III's 4).
#define VT_SIMPLE_CROP_PAD 4

// A region of the source image (pixel units, may be fractional) mapped onto the S x S output.
typedef struct {
  float x, y, w, h;
  int flip;  // mirror left-right
} vt_crop;

// How the crop becomes S x S pixels. SAMPLE: bilinear samples at the S x S output positions
// only (O(S^2) work, no antialiasing beyond the reduced decode); BILINEAR, BICUBIC: Pillow's
// antialiased resize (resample.h), torchvision's transforms on PIL images byte for byte on a
// full-size decode: training crops the image, then resizes the crop to S x S; evaluation
// resizes the whole image (shorter side to S / crop_pct), then takes the centre S x S.
typedef enum { VT_INTERP_SAMPLE = 0, VT_INTERP_BILINEAR = 1, VT_INTERP_BICUBIC = 2 } vt_interp;

typedef struct {
  float scale_min, scale_max;  // fraction of the image area, torchvision: 0.08, 1
  float ratio_min, ratio_max;  // aspect ratio w/h, torchvision: 3/4, 4/3
  float flip_prob;             // 0.5
  float mean[3], std[3];       // on [0, 1] pixel values; ImageNet's by default
  double crop_pct;             // evaluation: 0.875 (a double as timm's: floor(224 / 0.8) = 280)
  int eval_squash;             // 1: evaluation resizes both sides to floor(S / crop_pct), the
                               // aspect not kept (timm's crop_mode 'squash'; big_vision's and the
                               // ViT paper's resize), then the centre S x S; 0: the shorter side
  vt_interp train_interp, eval_interp;  // SAMPLE by default
  vt_randaug_config ra;        // RandAugment of training crops (randaug.h); off by default
  int simple_crop;             // 1: training crops are DeiT III's simple random crop
                               // (vt_simple_crop) instead of the random-resized crop
  int three_aug;               // 1: 3-Augment of training crops (threeaug.h) instead; 0 off
  float color_jitter;          // colour jitter strength: 3-Augment's (DeiT III: 0.3), or alone
                               // without it (timm's ColorJitter, applied without RandAugment:
                               // vt_threeaug_plan's jitter, no pick); 0: none (the default)
  int jpeg_reduce;             // 1: JPEGs decoded at 1/2, 1/4 or 1/8 (DCT scaling) where the
                               // resize allows (vt_crop_reduction); 0: at full size, the pixels
                               // of Pillow's decode (--jpeg-reduce)
} vt_transform_config;

vt_transform_config vt_transform_defaults(void);

// The training crop of sample `index` in `epoch` for a width x height image: integer x, y, w, h
// inside the image. Its random numbers are Philox (seed, "transform.train", epoch, 64 * index + k).
vt_crop vt_train_crop(const vt_transform_config *tc, int width, int height, uint64_t seed,
                      int64_t epoch, int64_t index);
// The evaluation crop: shorter side (or, with eval_squash, both sides) scaled to S / crop_pct,
// centre S x S, as a source region.
vt_crop vt_eval_crop(const vt_transform_config *tc, int width, int height, int S);
// DeiT III's simple random crop (its --src: torchvision's Resize(S), RandomCrop(S, padding=4,
// padding_mode='reflect'), RandomHorizontalFlip) of sample `index`: the image resized to the
// shorter side S, padded by 4 mirrored pixels (numpy's reflect: the edge pixel not repeated),
// and the S x S window at a uniform offset. Unlike the others this crop is in pixels of the
// resized image: x, y the window's start (-4 up to the resized side - S + 4), w = h = S. Its
// random numbers are vt_train_crop's (two offsets and the flip). Needs a filtered interpolation
// (the resize is Pillow's).
vt_crop vt_simple_crop(const vt_transform_config *tc, int width, int height, int S,
                       uint64_t seed, int64_t epoch, int64_t index);
// The source region whose reduction (vt_crop_reduction) fits the simple crop's resize: the
// centre S x S of the image resized to the shorter side S.
vt_crop vt_simple_crop_region(const vt_transform_config *tc, int width, int height, int S);

// Bilinear resampling of the crop to (3, S, S) floats, normalised: out = (v/255 - mean) / std.
// Sample centres follow align_corners=False (as PyTorch's interpolate): output pixel i samples
// x + (i + 0.5) * w / S - 0.5, clamped to the image's edges (not the crop's). No antialiasing:
// a crop much larger than S is point-sampled bilinearly, the price of O(S^2) work (the reduced
// decode below is what mostly keeps that from aliasing: at 1/d with vt_crop_reduction's d,
// output samples are less than 2 source pixels apart, for crops up to 16 S across).
void vt_render_crop(const vt_image *img, vt_crop crop, int S, const vt_transform_config *tc,
                    float *out);

// The reduction for a crop: the largest d of 1, 2, 4, 8 that leaves the crop at least S pixels
// across in both directions at 1/d (min(w, h) >= S * d), so the output never has more pixels
// than the source region it samples and quality does not drop below the output resolution.
int vt_crop_reduction(vt_crop crop, int S);
// The pixels [x0, x1] x [y0, y1] (inclusive) that rendering the crop reads from the image
// reduced to 1/scale, width x height pixels (vt_image_scaled_side of the full size): bilinear
// taps included, from the same sample positions as the renderer, so a window holding this block
// is all the renderer needs.
void vt_crop_window(vt_crop crop, int S, int scale, int width, int height, int *x0, int *y0,
                    int *x1, int *y1);
// vt_render_crop from a window of the image reduced to 1/part->scale: the crop (full-size
// pixels) is mapped to reduced pixels by dividing by the scale (a reduced pixel k covers full-
// size pixels [k*d, (k+1)*d)), so output pixel i samples (x + (i + 0.5) * w / S) / d - 0.5,
// clamped to the reduced image's edges. At scale 1 with the whole image as window this is
// vt_render_crop exactly. The window must hold vt_crop_window's block (checked: VT_CHECK).
void vt_render_crop_part(const vt_image_part *part, vt_crop crop, int S,
                         const vt_transform_config *tc, float *out);
// The same samples as 8-bit RGB (S, S, 3), each rounded to nearest, for RandAugment (which, as
// in timm, works on the 8-bit crop); vt_normalize_u8 then makes the (3, S, S) input of it.
void vt_render_crop_part_u8(const vt_image_part *part, vt_crop crop, int S, uint8_t *rgb);
// The filtered renders (interp BILINEAR or BICUBIC): the pixels [x0, x1] x [y0, y1] of the image
// reduced to 1/scale (width x height; full_w x full_h at full size) that rendering the crop
// (vt_train_crop's, or vt_simple_crop's with tc->simple_crop, when train, else vt_eval_crop's)
// reads, and the render itself, 8-bit RGB (S, S, 3), mirrored when the training crop says so.
// At scale 1 this is Pillow's result; at 1/d the same resize of the reduced image (the crop's
// box divided by d).
void vt_filtered_window(const vt_transform_config *tc, vt_crop crop, int train, int S,
                        int scale, int width, int height, int full_w, int full_h, int *x0,
                        int *y0, int *x1, int *y1);
void vt_render_filtered_u8(const vt_image_part *part, vt_crop crop, int train, int S,
                           const vt_transform_config *tc, uint8_t *rgb);
void vt_normalize_u8(const vt_transform_config *tc, const uint8_t *rgb, int S, float *out);

#endif
