// resample.h: Pillow's antialiased resampling of 8-bit RGB (Image.resize with BILINEAR or
// BICUBIC, libImaging/Resample.c), reproduced byte for byte: per output pixel a filter stretched
// by the downscale factor, weights normalised in double and rounded to 22-bit fixed point, a
// horizontal pass rounded to 8 bits, then a vertical pass. torchvision's resized crop and
// resize on PIL images (timm's and DeiT's training and evaluation transforms) are this.
// Must not depend on MPI, a backend or the model.
#ifndef VT_RESAMPLE_H
#define VT_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  VT_FILTER_BILINEAR = 0,  // triangle, support 1
  VT_FILTER_BICUBIC = 1,   // Keys cubic with a = -0.5, support 2
} vt_filter;

// One axis of a resize: an image of in_size pixels whose box [box0, box1) (Pillow takes the box
// as C floats) is stretched onto out_size pixels, of which out pixels [o0, o0 + n) are wanted.
typedef struct {
  int in_size;
  float box0, box1;
  int out_size, o0, n;
} vt_resample_axis;

// The input pixels [*lo, *hi] (inclusive) that the wanted outputs of the axis read.
void vt_resample_span(const vt_resample_axis *a, vt_filter f, int *lo, int *hi);

// The wanted n_x x n_y outputs of Image.resize((x.out_size, y.out_size), f, box) of an image
// whose pixel (px, py) is at win[(py - wy0) * stride + 3 * (px - wx0)] (a window that must hold
// both axes' spans), into out (n_y rows of n_x RGB pixels, mirrored left-right when flip).
void vt_resample_rgb8(const uint8_t *win, size_t stride, int wx0, int wy0,
                      const vt_resample_axis *x, const vt_resample_axis *y, vt_filter f, int flip,
                      uint8_t *out);

#endif
