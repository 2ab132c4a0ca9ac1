// resample.c: Pillow's Image.resize for 8-bit RGB (resample.h). The arithmetic follows
// libImaging/Resample.c step for step (the box as floats, coefficients in double, their
// rounding to fixed point, the 8-bit clipping, the order of the passes), because an image that
// differs by one level in one pixel is no longer the one timm trains on.
#include "resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vt_error.h"

#define PRECISION_BITS (32 - 8 - 2)

static double filter_at(vt_filter f, double x) {
  if (x < 0.0) x = -x;
  if (f == VT_FILTER_BILINEAR) return x < 1.0 ? 1.0 - x : 0.0;
  const double a = -0.5;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

static double support_of(vt_filter f) { return f == VT_FILTER_BILINEAR ? 1.0 : 2.0; }

// The fixed-point coefficients of outputs [o0, o0 + n): output i reads inputs
// lo[i] .. lo[i] + len[i] - 1 with weights k[i * ksize + j].
typedef struct {
  int ksize;
  int *lo, *len;
  int32_t *k;
} coeffs;

static double filterscale_of(const vt_resample_axis *a, double *scale) {
  *scale = (double)(a->box1 - a->box0) / a->out_size;
  return *scale < 1.0 ? 1.0 : *scale;
}

// Pillow's precompute_coeffs for one output pixel: its first input and count.
static void bounds_of(const vt_resample_axis *a, vt_filter f, int xx, int *lo, int *len) {
  double scale, fs = filterscale_of(a, &scale), support = support_of(f) * fs;
  double center = a->box0 + (xx + 0.5) * scale;
  int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
  if (xmin < 0) xmin = 0;
  if (xmax > a->in_size) xmax = a->in_size;
  *lo = xmin, *len = xmax - xmin;
}

static coeffs make_coeffs(const vt_resample_axis *a, vt_filter f) {
  double scale, fs = filterscale_of(a, &scale), support = support_of(f) * fs;
  coeffs c = {(int)ceil(support) * 2 + 1, NULL, NULL, NULL};
  c.lo = malloc((size_t)a->n * sizeof(int));
  c.len = malloc((size_t)a->n * sizeof(int));
  c.k = calloc((size_t)a->n * c.ksize, sizeof(int32_t));
  double *w = malloc((size_t)c.ksize * sizeof(double));
  VT_CHECK(c.lo && c.len && c.k && w, "out of memory for resampling coefficients");
  for (int i = 0; i < a->n; i++) {
    const int xx = a->o0 + i;
    const double center = a->box0 + (xx + 0.5) * scale, ss = 1.0 / fs;
    bounds_of(a, f, xx, &c.lo[i], &c.len[i]);
    double ww = 0.0;
    for (int x = 0; x < c.len[i]; x++) {
      w[x] = filter_at(f, (x + c.lo[i] - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < c.len[i]; x++) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[(size_t)i * c.ksize + x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                                           : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
    }
  }
  free(w);
  return c;
}

static void free_coeffs(coeffs *c) { free(c->lo), free(c->len), free(c->k); }

static inline uint8_t clip8(int32_t v) {
  if (v >= (1 << PRECISION_BITS << 8)) return 255;
  if (v <= 0) return 0;
  return (uint8_t)(v >> PRECISION_BITS);
}

// Pillow skips a pass whose axis is not resized; which test it uses (box end against the output
// size) is reproduced as it is.
static int needs_pass(const vt_resample_axis *a) {
  return a->out_size != a->in_size || a->box0 != 0 || a->box1 != a->out_size;
}

void vt_resample_span(const vt_resample_axis *a, vt_filter f, int *lo, int *hi) {
  if (!needs_pass(a)) {
    *lo = a->o0, *hi = a->o0 + a->n - 1;
    return;
  }
  int l0, n0, l1, n1;  // the bounds grow with the output index
  bounds_of(a, f, a->o0, &l0, &n0);
  bounds_of(a, f, a->o0 + a->n - 1, &l1, &n1);
  *lo = l0, *hi = l1 + n1 - 1;
}

void vt_resample_rgb8(const uint8_t *win, size_t stride, int wx0, int wy0,
                      const vt_resample_axis *x, const vt_resample_axis *y, vt_filter f, int flip,
                      uint8_t *out) {
  const int nx = x->n, ny = y->n, hpass = needs_pass(x), vpass = needs_pass(y);
  int r0, r1;  // the input rows the vertical pass reads
  vt_resample_span(y, f, &r0, &r1);
  coeffs h = hpass ? make_coeffs(x, f) : (coeffs){0};
  coeffs v = vpass ? make_coeffs(y, f) : (coeffs){0};
  // Horizontal pass: rows r0..r1, the wanted columns, rounded to 8 bits as Pillow's image is.
  uint8_t *tmp = malloc((size_t)(r1 - r0 + 1) * nx * 3);
  VT_CHECK(tmp, "out of memory resampling %d x %d", nx, ny);
  for (int r = r0; r <= r1; r++) {
    const uint8_t *row = win + (size_t)(r - wy0) * stride;
    uint8_t *t = tmp + (size_t)(r - r0) * nx * 3;
    for (int i = 0; i < nx; i++) {
      if (!hpass) {
        memcpy(t + 3 * i, row + 3 * (x->o0 + i - wx0), 3);
        continue;
      }
      const int32_t *k = h.k + (size_t)i * h.ksize;
      const uint8_t *p = row + 3 * (h.lo[i] - wx0);
      int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
      for (int j = 0; j < h.len[i]; j++, p += 3) {
        s0 += p[0] * k[j];
        s1 += p[1] * k[j];
        s2 += p[2] * k[j];
      }
      t[3 * i] = clip8(s0), t[3 * i + 1] = clip8(s1), t[3 * i + 2] = clip8(s2);
    }
  }
  // Vertical pass over the 8-bit rows.
  for (int j = 0; j < ny; j++) {
    uint8_t *o = out + (size_t)j * nx * 3;
    for (int i = 0; i < nx; i++) {
      uint8_t *px = o + 3 * (flip ? nx - 1 - i : i);
      if (!vpass) {
        memcpy(px, tmp + ((size_t)(y->o0 + j - r0) * nx + i) * 3, 3);
        continue;
      }
      const int32_t *k = v.k + (size_t)j * v.ksize;
      int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
      const uint8_t *p = tmp + ((size_t)(v.lo[j] - r0) * nx + i) * 3;
      for (int q = 0; q < v.len[j]; q++, p += (size_t)nx * 3) {
        s0 += p[0] * k[q];
        s1 += p[1] * k[q];
        s2 += p[2] * k[q];
      }
      px[0] = clip8(s0), px[1] = clip8(s1), px[2] = clip8(s2);
    }
  }
  free(tmp);
  if (hpass) free_coeffs(&h);
  if (vpass) free_coeffs(&v);
}
