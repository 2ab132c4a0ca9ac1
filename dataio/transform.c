// transform.c: crops and resampling from a decoded image to the normalised (3, S, S) input.
// The crop geometry is torchvision's (RandomResizedCrop.get_params, Resize + CenterCrop); the
// random numbers are Philox keyed by (seed, epoch, sample), never by thread or rank.
// Must not depend on MPI, a backend, the model or the image decoders (only on image.h's types).
#include "transform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "resample.h"
#include "vt_error.h"
#include "vt_rng.h"

// Each sample owns a block of this many counters in the (seed, "transform.train", epoch) stream:
// 10 tries x 4 draws, and the flip at a fixed slot, so no two samples or epochs share a number.
#define DRAWS_PER_SAMPLE 64
#define FLIP_SLOT 63
#define MAX_TRIES 10

vt_transform_config vt_transform_defaults(void) {
  vt_transform_config c = {
      .scale_min = 0.08f, .scale_max = 1.0f,
      .ratio_min = 3.0f / 4.0f, .ratio_max = 4.0f / 3.0f,
      .flip_prob = 0.5f,
      .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f},
      .crop_pct = 0.875,
      .jpeg_reduce = 1,
  };
  c.ra = vt_randaug_defaults(c.mean);
  return c;
}

typedef struct {
  uint64_t seed;
  uint32_t stream, epoch;
  uint64_t base;
} draws;

static double draw(const draws *d, int slot) {
  return vt_rng_uniform(d->seed, d->stream, d->epoch, d->base + (uint64_t)slot);
}

// torch.randint(0, n): uniform in [0, n).
static int draw_int(const draws *d, int slot, int n) {
  int k = (int)floor(draw(d, slot) * n);
  return k < n - 1 ? k : n - 1;
}

vt_crop vt_train_crop(const vt_transform_config *tc, int width, int height, uint64_t seed,
                      int64_t epoch, int64_t index) {
  // epoch picks the stream, index the block inside it: 2^58 samples before blocks could wrap.
  draws d = {seed, vt_hash_name("transform.train"), (uint32_t)epoch,
             (uint64_t)index * DRAWS_PER_SAMPLE};
  vt_crop c = {0, 0, (float)width, (float)height, 0};
  c.flip = draw(&d, FLIP_SLOT) < tc->flip_prob;
  if (width <= 0 || height <= 0) return c;

  const double area = (double)width * height;
  const double log_rmin = log(tc->ratio_min), log_rmax = log(tc->ratio_max);
  for (int t = 0; t < MAX_TRIES; t++) {
    double target = area * (tc->scale_min + (tc->scale_max - tc->scale_min) * draw(&d, 4 * t));
    double ratio = exp(log_rmin + (log_rmax - log_rmin) * draw(&d, 4 * t + 1));
    // Python's round() rounds halves to even, as rint() does in the default rounding mode.
    double w = rint(sqrt(target * ratio)), h = rint(sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      c.w = (float)w;
      c.h = (float)h;
      c.y = (float)draw_int(&d, 4 * t + 2, height - (int)h + 1);
      c.x = (float)draw_int(&d, 4 * t + 3, width - (int)w + 1);
      return c;
    }
  }
  // torchvision's fallback: the whole image, or its centre clamped to the ratio range.
  double in_ratio = (double)width / height, w = width, h = height;
  if (in_ratio < tc->ratio_min)
    h = rint(w / tc->ratio_min);
  else if (in_ratio > tc->ratio_max)
    w = rint(h * tc->ratio_max);
  if (w < 1) w = 1;
  if (h < 1) h = 1;
  c.w = (float)w;
  c.h = (float)h;
  c.x = (float)((width - (int)w) / 2);
  c.y = (float)((height - (int)h) / 2);
  return c;
}

// Evaluation's resize: timm's scale_size = floor(S / crop_pct); torchvision's Resize(int) then
// gives the longer side int(size * long / short) (squash: Resize((R, R)), both sides R), and
// CenterCrop's offset is round((side - S) / 2).
static void eval_geometry(double crop_pct, int squash, int width, int height, int S,
                          int64_t *rw, int64_t *rh, double *left, double *top) {
  int64_t R = (int64_t)floor(S / crop_pct);
  if (R < S) R = S;
  if (squash) {
    *rw = *rh = R;
  } else if (width <= height) {
    *rw = R;
    *rh = R * height / width;
  } else {
    *rh = R;
    *rw = R * width / height;
  }
  *left = rint((double)(*rw - S) / 2.0), *top = rint((double)(*rh - S) / 2.0);
}

vt_crop vt_eval_crop(const vt_transform_config *tc, int width, int height, int S) {
  vt_crop c = {0, 0, (float)width, (float)height, 0};
  if (width <= 0 || height <= 0 || S <= 0) return c;
  int64_t rw, rh;
  double left, top;
  eval_geometry(tc->crop_pct, tc->eval_squash, width, height, S, &rw, &rh, &left, &top);
  // A pixel of the resized image spans width/rw source pixels, so the centre S x S of the
  // resized image is this region of the source (render_crop's sample centres then coincide
  // with those of resize-then-crop).
  double sx = (double)width / rw, sy = (double)height / rh;
  c.x = (float)(left * sx);
  c.y = (float)(top * sy);
  c.w = (float)(S * sx);
  c.h = (float)(S * sy);
  return c;
}

vt_crop vt_simple_crop_region(const vt_transform_config *tc, int width, int height, int S) {
  vt_transform_config whole = *tc;
  whole.crop_pct = 1.0, whole.eval_squash = 0;  // Resize(S): the shorter side becomes S
  return vt_eval_crop(&whole, width, height, S);
}

vt_crop vt_simple_crop(const vt_transform_config *tc, int width, int height, int S,
                       uint64_t seed, int64_t epoch, int64_t index) {
  draws d = {seed, vt_hash_name("transform.train"), (uint32_t)epoch,
             (uint64_t)index * DRAWS_PER_SAMPLE};
  vt_crop c = {0, 0, (float)S, (float)S, draw(&d, FLIP_SLOT) < tc->flip_prob};
  if (width <= 0 || height <= 0 || S <= 0) return c;
  int64_t rw, rh;
  double left, top;
  eval_geometry(1.0f, 0, width, height, S, &rw, &rh, &left, &top);
  // RandomCrop.get_params on the padded image: i (rows) first, then j.
  c.y = (float)(draw_int(&d, 0, (int)(rh + 2 * VT_SIMPLE_CROP_PAD - S + 1)) - VT_SIMPLE_CROP_PAD);
  c.x = (float)(draw_int(&d, 1, (int)(rw + 2 * VT_SIMPLE_CROP_PAD - S + 1)) - VT_SIMPLE_CROP_PAD);
  return c;
}

// Output columns are done in tiles whose source positions are tabulated once per tile.
#define TILE 256

// Where output pixel i of a crop samples, in pixel-centre coordinates of the image reduced to
// 1/scale: the footprint's centre start + (i + 0.5) * step in full-size pixels, divided by the
// scale (a reduced pixel k covers full-size pixels [k * scale, (k + 1) * scale)). For scale 1
// this is start + (i + 0.5) * step - 0.5, bit for bit. One function for the renderer and for
// vt_crop_window, so the window always holds every pixel the renderer reads.
static inline double sample_pos(double start, double step, int i, int scale, int n) {
  double s = (start + (i + 0.5) * step) / scale - 0.5;
  if (s < 0) s = 0;  // clamped at the image's edges (not the crop's)
  if (s > n - 1) s = n - 1;
  return s;
}

int vt_crop_reduction(vt_crop crop, int S) {
  double side = crop.w < crop.h ? crop.w : crop.h;
  int d = 8;
  while (d > 1 && !(side >= (double)S * d)) d /= 2;
  return d;
}

void vt_crop_window(vt_crop crop, int S, int scale, int width, int height, int *x0, int *y0,
                    int *x1, int *y1) {
  const double step_x = (double)crop.w / S, step_y = (double)crop.h / S;
  // Positions grow with i (rounding is monotonic), so the first and last samples bound them;
  // each sample reads its pixel and the next one (fx = 0 included).
  int a = (int)sample_pos(crop.x, step_x, 0, scale, width);
  int b = (int)sample_pos(crop.x, step_x, S - 1, scale, width);
  *x0 = a;
  *x1 = b < width - 1 ? b + 1 : b;
  a = (int)sample_pos(crop.y, step_y, 0, scale, height);
  b = (int)sample_pos(crop.y, step_y, S - 1, scale, height);
  *y0 = a;
  *y1 = b < height - 1 ? b + 1 : b;
}

// The renderer of both outputs: normalised planes (out, with scale and bias per channel) or
// 8-bit RGB rounded to nearest (rgb8, when out is NULL).
static void render(const vt_image_part *part, vt_crop crop, int S, const float scale[3],
                   const float bias[3], float *out, uint8_t *rgb8) {
  const int W = part->width, H = part->height, d = part->scale;
  const int WW = part->win.width, ox = part->x0, oy = part->y0;
  const uint8_t *rgb = part->win.rgb;
  // The decoder promised a window holding every pixel read below; a broken promise would read
  // outside the buffer, so it stops here instead.
  int x0, y0, x1, y1;
  vt_crop_window(crop, S, d, W, H, &x0, &y0, &x1, &y1);
  VT_CHECK(x0 >= ox && y0 >= oy && x1 < ox + WW && y1 < oy + part->win.height,
           "crop window [%d, %d] x [%d, %d] outside the decoded window %dx%d at (%d, %d)", x0,
           x1, y0, y1, WW, part->win.height, ox, oy);
  const size_t plane = (size_t)S * S;
  const double step_x = (double)crop.w / S, step_y = (double)crop.h / S;
  int xa[TILE], xb[TILE];
  float fx[TILE];
  // Each source row's horizontal interpolation (per channel, the tile's columns), computed once
  // and kept for the next output row that reads it: a row is the lower tap of one output row
  // and often the upper tap of the next. The same float operations as interpolating in place,
  // so the same bits; the vertical step then runs over contiguous floats.
  float hrow[2][3][TILE];
  for (int i0 = 0; i0 < S; i0 += TILE) {
    int n = S - i0 < TILE ? S - i0 : TILE;
    for (int k = 0; k < n; k++) {
      int col = crop.flip ? S - 1 - (i0 + k) : i0 + k;
      // align_corners=False: output pixel centres map to source pixel centres.
      double sx = sample_pos(crop.x, step_x, col, d, W);
      int xi = (int)sx;
      xa[k] = 3 * (xi - ox);
      xb[k] = 3 * ((xi < W - 1 ? xi + 1 : xi) - ox);
      fx[k] = (float)(sx - xi);
    }
    int held[2] = {-1, -1};  // the source row in hrow[0], hrow[1]
    for (int oyi = 0; oyi < S; oyi++) {
      double sy = sample_pos(crop.y, step_y, oyi, d, H);
      int yi = (int)sy;
      float fy = (float)(sy - yi);
      const int rows[2] = {yi, yi < H - 1 ? yi + 1 : yi};
      int at[2];
      for (int t = 0; t < 2; t++) {
        int b = held[0] == rows[t] ? 0 : held[1] == rows[t] ? 1 : -1;
        if (b < 0) {
          b = t == 0 ? (held[0] == rows[1] ? 1 : 0) : (at[0] == 0 ? 1 : 0);
          const uint8_t *r = rgb + (size_t)(rows[t] - oy) * WW * 3;
          for (int k = 0; k < n; k++)
            for (int ch = 0; ch < 3; ch++) {
              float a = r[xa[k] + ch], e = r[xb[k] + ch];
              hrow[b][ch][k] = a + fx[k] * (e - a);
            }
          held[b] = rows[t];
        }
        at[t] = b;
      }
      for (int ch = 0; ch < 3; ch++) {
        const float *top = hrow[at[0]][ch], *bot = hrow[at[1]][ch];
        if (out) {
          float *o = out + ch * plane + (size_t)oyi * S + i0;
          const float sc = scale[ch], bi = bias[ch];
          for (int k = 0; k < n; k++) o[k] = (top[k] + fy * (bot[k] - top[k])) * sc + bi;
        } else {  // v lies between its four taps, so in [0, 255]
          uint8_t *o = rgb8 + ((size_t)oyi * S + i0) * 3 + ch;
          for (int k = 0; k < n; k++) o[3 * k] = (uint8_t)(top[k] + fy * (bot[k] - top[k]) + 0.5f);
        }
      }
    }
  }
}

// (v / 255 - mean) / std as one multiply-add per channel.
static void normaliser(const vt_transform_config *tc, float scale[3], float bias[3]) {
  for (int ch = 0; ch < 3; ch++) {
    scale[ch] = 1.0f / (255.0f * tc->std[ch]);
    bias[ch] = -tc->mean[ch] / tc->std[ch];
  }
}

void vt_render_crop_part(const vt_image_part *part, vt_crop crop, int S,
                         const vt_transform_config *tc, float *out) {
  float scale[3], bias[3];
  normaliser(tc, scale, bias);
  render(part, crop, S, scale, bias, out, NULL);
}

void vt_render_crop_part_u8(const vt_image_part *part, vt_crop crop, int S, uint8_t *rgb) {
  const float none[3] = {0, 0, 0};
  render(part, crop, S, none, none, NULL, rgb);
}

// ---- filtered renders (Pillow's resize, resample.h) -------------------------------------------

// The resize along one axis, in pixels of the image reduced to 1/d (reduced pixels, full pixels
// full), and where the image it resizes starts (*first). Training: the crop [pos, pos + size)
// as an image of its own, to S pixels; at 1/d the whole reduced pixels it touches, with the
// crop's box inside them. Evaluation: the whole image to out_size pixels, of which [o0, o0 + S).
static vt_resample_axis filtered_axis(int train, double pos, double size, int S, int d,
                                      int reduced, int full, int64_t out_size, double o0,
                                      int *first) {
  if (train) {
    const double a = pos / d, b = (pos + size) / d;
    int lo = (int)floor(a), hi = (int)ceil(b);
    if (hi > reduced) hi = reduced;
    if (lo > hi - 1) lo = hi - 1;
    *first = lo;
    return (vt_resample_axis){hi - lo, (float)(a - lo), (float)(b - lo), S, 0, S};
  }
  *first = 0;
  return (vt_resample_axis){reduced, 0.0f, (float)((double)full / d), (int)out_size, (int)o0, S};
}

// The simple crop along one axis: the whole image (reduced, full pixels full) resized to
// out_size pixels, of which those of the window [start, start + S) that lie inside it; the rest
// of the window is the reflected padding (vt_render_filtered_u8).
static vt_resample_axis simple_axis(int start, int S, int d, int reduced, int full,
                                   int64_t out_size, int *first) {
  const int o0 = start < 0 ? 0 : start;
  const int end = (int64_t)start + S < out_size ? start + S : (int)out_size;
  *first = 0;
  return (vt_resample_axis){reduced, 0.0f, (float)((double)full / d), (int)out_size, o0, end - o0};
}

static void filtered_axes(const vt_transform_config *tc, vt_crop crop, int train, int S, int d,
                          int width, int height, int full_w, int full_h, vt_resample_axis *ax,
                          vt_resample_axis *ay, int *fx, int *fy) {
  int64_t rw = 0, rh = 0;
  double left = 0, top = 0;
  if (train && tc->simple_crop) {
    eval_geometry(1.0f, 0, full_w, full_h, S, &rw, &rh, &left, &top);
    *ax = simple_axis((int)crop.x, S, d, width, full_w, rw, fx);
    *ay = simple_axis((int)crop.y, S, d, height, full_h, rh, fy);
    return;
  }
  if (!train)
    eval_geometry(tc->crop_pct, tc->eval_squash, full_w, full_h, S, &rw, &rh, &left, &top);
  *ax = filtered_axis(train, crop.x, crop.w, S, d, width, full_w, rw, left, fx);
  *ay = filtered_axis(train, crop.y, crop.h, S, d, height, full_h, rh, top, fy);
}

// numpy's reflect padding: index i of a line of n pixels, the edge pixel not repeated.
static int reflect(int i, int n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; }

// The simple crop's S x S window from the resized pixels its axes rendered (in: ax->n x ay->n,
// starting at resized pixel (ax->o0, ay->o0)): the padding mirrored in, then the flip.
static void simple_window(const uint8_t *in, const vt_resample_axis *ax,
                          const vt_resample_axis *ay, vt_crop crop, int S, uint8_t *rgb) {
  for (int oy = 0; oy < S; oy++) {
    const int sy = reflect((int)crop.y + oy, ay->out_size) - ay->o0;
    for (int ox = 0; ox < S; ox++) {
      const int sx = reflect((int)crop.x + (crop.flip ? S - 1 - ox : ox), ax->out_size) - ax->o0;
      memcpy(rgb + 3 * ((size_t)oy * S + ox), in + 3 * ((size_t)sy * ax->n + sx), 3);
    }
  }
}

static vt_filter filter_of(const vt_transform_config *tc, int train) {
  return (train ? tc->train_interp : tc->eval_interp) == VT_INTERP_BILINEAR ? VT_FILTER_BILINEAR
                                                                             : VT_FILTER_BICUBIC;
}

// The reduced image's pixels the resize of the axes reads (the images they resize start at fx,
// fy).
static void axes_window(const vt_resample_axis *ax, const vt_resample_axis *ay, int fx, int fy,
                        vt_filter f, int *x0, int *y0, int *x1, int *y1) {
  vt_resample_span(ax, f, x0, x1);
  vt_resample_span(ay, f, y0, y1);
  *x0 += fx, *x1 += fx, *y0 += fy, *y1 += fy;
}

void vt_filtered_window(const vt_transform_config *tc, vt_crop crop, int train, int S,
                        int scale, int width, int height, int full_w, int full_h, int *x0,
                        int *y0, int *x1, int *y1) {
  vt_resample_axis ax, ay;
  int fx, fy;
  filtered_axes(tc, crop, train, S, scale, width, height, full_w, full_h, &ax, &ay, &fx, &fy);
  axes_window(&ax, &ay, fx, fy, filter_of(tc, train), x0, y0, x1, y1);
}

void vt_render_filtered_u8(const vt_image_part *part, vt_crop crop, int train, int S,
                           const vt_transform_config *tc, uint8_t *rgb) {
  vt_resample_axis ax, ay;
  int fx, fy, x0, y0, x1, y1;
  filtered_axes(tc, crop, train, S, part->scale, part->width, part->height, part->full_width,
                part->full_height, &ax, &ay, &fx, &fy);
  axes_window(&ax, &ay, fx, fy, filter_of(tc, train), &x0, &y0, &x1, &y1);
  VT_CHECK(x0 >= part->x0 && y0 >= part->y0 && x1 < part->x0 + part->win.width &&
               y1 < part->y0 + part->win.height,
           "resize window [%d, %d] x [%d, %d] outside the decoded window %dx%d at (%d, %d)", x0,
           x1, y0, y1, part->win.width, part->win.height, part->x0, part->y0);
  if (!(train && tc->simple_crop)) {
    vt_resample_rgb8(part->win.rgb, (size_t)part->win.width * 3, part->x0 - fx, part->y0 - fy,
                     &ax, &ay, filter_of(tc, train), train && crop.flip, rgb);
    return;
  }
  uint8_t *inside = malloc((size_t)ax.n * ay.n * 3);
  VT_CHECK(inside != NULL, "out of memory for a %dx%d crop", ax.n, ay.n);
  vt_resample_rgb8(part->win.rgb, (size_t)part->win.width * 3, part->x0 - fx, part->y0 - fy,
                   &ax, &ay, filter_of(tc, train), 0, inside);
  simple_window(inside, &ax, &ay, crop, S, rgb);
  free(inside);
}

void vt_normalize_u8(const vt_transform_config *tc, const uint8_t *rgb, int S, float *out) {
  float scale[3], bias[3];
  normaliser(tc, scale, bias);
  const size_t plane = (size_t)S * S;
  for (size_t i = 0; i < plane; i++)
    for (int ch = 0; ch < 3; ch++) out[ch * plane + i] = rgb[3 * i + ch] * scale[ch] + bias[ch];
}

void vt_render_crop(const vt_image *img, vt_crop crop, int S, const vt_transform_config *tc,
                    float *out) {
  vt_image_part whole = {.win = *img, .scale = 1, .width = img->width, .height = img->height,
                         .full_width = img->width, .full_height = img->height};
  vt_render_crop_part(&whole, crop, S, tc, out);
}
