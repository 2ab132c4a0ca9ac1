// erase.h: random erasing (Zhong et al. 2017; timm's RandomErasing with one box) of normalised
// training images: with probability prob, a box of 2% to 1/3 of the image with aspect ratio
// 0.3 to 3.3 (log-uniform; 10 tries, else nothing) is filled with zeros (const), one normal
// value per channel (rand) or a normal value per element (pixel, DeiT's choice). The draws are
// Philox keyed by (seed, stream position), so which rank or micro-batch holds the image changes
// nothing. No MPI, backend or model.
#ifndef VT_ERASE_H
#define VT_ERASE_H

#include <stdint.h>

typedef enum { VT_ERASE_CONST = 0, VT_ERASE_RAND = 1, VT_ERASE_PIXEL = 2 } vt_erase_mode;

typedef struct {
  float prob;  // 0: off
  vt_erase_mode mode;
} vt_erase_config;

// The box erased in the image at stream position pos (S x S): rows [*y0, *y1), columns [*x0,
// *x1); returns 0 when the image is left alone. Draws: uniforms (seed, "erase", 0, 64 pos + j),
// j = 0 whether, then 4 per try (area, log aspect, top, left), as timm's order.
int vt_erase_box(const vt_erase_config *c, uint64_t seed, int64_t pos, int S, int *y0, int *y1,
                 int *x0, int *x1);

// Erases the images (B, 3, S, S) at stream positions first .. first + B - 1 in place. The fill
// values are normals keyed by (seed, "erase.fill"): in pixel mode four per Philox block (two
// Box-Muller pairs in float), value k of the box's row y of channel c of image pos from block
// ((3 pos + c) S + y) ceil(S / 4) + k / 4 of stream 0; in rand mode vt_rng_normal number
// 3 pos + c of stream 1.
void vt_erase_batch(const vt_erase_config *c, uint64_t seed, int64_t first, int B, int S,
                    float *images);

#endif
