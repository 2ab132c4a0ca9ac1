// randaug.c: RandAugment on 8-bit RGB images (randaug.h). Each operation follows Pillow's
// definition (ImageOps, ImageEnhance, Image.transform/rotate), written from the documented
// algorithms: look-up tables from per-channel histograms, blends in float truncated to 8 bits as
// Image.blend does, the 3 x 3 SMOOTH kernel with Pillow's rounding, and affine resampling that
// maps each output pixel centre back to the input and fills what falls outside.
#include "randaug.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_error.h"
#include "vt_rng.h"

#define SLOTS_PER_LAYER 4

static const char *const op_names[VT_RA_NUM_OPS] = {
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
    "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
    "TranslateYRel"};

const char *vt_randaug_op_name(vt_ra_op op) {
  return op >= 0 && op < VT_RA_NUM_OPS ? op_names[op] : "?";
}

vt_randaug_config vt_randaug_defaults(const float mean[3]) {
  vt_randaug_config c = {.layers = 0, .magnitude = 10, .magnitude_std = 0, .magnitude_max = 10,
                         .increasing = 0, .prob = 0.5f, .translate_pct = 0.45f,
                         .interp = VT_RA_BICUBIC};
  for (int ch = 0; ch < 3; ch++) {
    // timm's round(255 * mean) of the mean as written (a double: 255 x 0.3 is 76.49999...),
    // not of its float (76.500003); Python's round takes halves to even, as rint
    char text[32];
    double v = rint(255.0 * strtod(vt_float_text(mean[ch], text, sizeof text), NULL));
    c.fill[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
  }
  return c;
}

// A number that fills the rest of a key's text ("9", "0.5"), nothing else after it.
static int parse_number(const char *s, double *v) {
  char *end;
  *v = strtod(s, &end);
  return end != s && *end == '\0' && isfinite(*v);
}

vt_status vt_randaug_parse(const char *spec, vt_randaug_config *c, char *err, size_t errlen) {
  char buf[128];
  if (strlen(spec) >= sizeof buf) {
    snprintf(err, errlen, "--aa '%.40s...' is too long", spec);
    return VT_ERR_INPUT;
  }
  strcpy(buf, spec);
  const size_t len = strlen(spec);
  if (strstr(spec, "--") || (len && spec[len - 1] == '-')) {
    snprintf(err, errlen, "--aa '%s': an empty key between '-' separators", spec);
    return VT_ERR_INPUT;
  }
  char *save = NULL, *tok = strtok_r(buf, "-", &save);
  if (!tok || strcmp(tok, "rand") != 0) {
    snprintf(err, errlen, "--aa '%s': only RandAugment is built, as timm writes it: "
             "rand-m9-mstd0.5-inc1 (keys m, n, mstd, mmax, inc, p)", spec);
    return VT_ERR_INPUT;
  }
  vt_randaug_config r = *c;
  r.layers = 2;
  while ((tok = strtok_r(NULL, "-", &save))) {
    double v;
    int ok;
    if (strncmp(tok, "mstd", 4) == 0) {
      ok = parse_number(tok + 4, &v) && v >= 0;
      r.magnitude_std = v > 100 ? INFINITY : (float)v;
    } else if (strncmp(tok, "mmax", 4) == 0) {
      ok = parse_number(tok + 4, &v) && v > 0 && v <= 100;
      r.magnitude_max = (float)v;
    } else if (strncmp(tok, "inc", 3) == 0) {
      ok = parse_number(tok + 3, &v) && (v == 0 || v == 1);
      r.increasing = (int)v;
    } else if (tok[0] == 'm') {
      ok = parse_number(tok + 1, &v) && v >= 0 && v <= 100;
      r.magnitude = (float)v;
    } else if (tok[0] == 'n') {
      ok = parse_number(tok + 1, &v) && v >= 1 && v <= VT_RA_MAX_LAYERS && v == floor(v);
      r.layers = (int)v;
    } else if (tok[0] == 'p') {
      ok = parse_number(tok + 1, &v) && v >= 0 && v <= 1;
      r.prob = (float)v;
    } else {
      snprintf(err, errlen, "--aa '%s': unknown key '%s' (vit3d knows m, n, mstd, mmax, inc, p; "
               "timm's weighted choice 'w' is not built)", spec, tok);
      return VT_ERR_INPUT;
    }
    if (!ok) {
      snprintf(err, errlen, "--aa '%s': bad value in '%s' (m and mmax in [0, 100], n in 1..%d, "
               "mstd >= 0, inc 0 or 1, p in [0, 1])", spec, tok, VT_RA_MAX_LAYERS);
      return VT_ERR_INPUT;
    }
  }
  *c = r;
  return VT_OK;
}

void vt_randaug_describe(const vt_randaug_config *c, char *buf, size_t len) {
  char mstd[32];
  if (isinf(c->magnitude_std))
    snprintf(mstd, sizeof mstd, "uniform");
  else
    snprintf(mstd, sizeof mstd, "%g", c->magnitude_std);
  snprintf(buf, len, "rand-m%g-n%d-mstd%s-mmax%g-inc%d-p%g", c->magnitude, c->layers, mstd,
           c->magnitude_max, c->increasing, c->prob);
}

// timm's level functions (_LEVEL_TO_ARG), level on the 0..10 scale.
float vt_randaug_arg(const vt_randaug_config *c, vt_ra_op op, float m, int negate) {
  const double level = m / 10.0, sign = negate ? -1.0 : 1.0;
  switch (op) {
    case VT_RA_ROTATE: return (float)(sign * level * 30.0);
    case VT_RA_SHEAR_X:
    case VT_RA_SHEAR_Y: return (float)(sign * level * 0.3);
    case VT_RA_TRANSLATE_X:
    case VT_RA_TRANSLATE_Y: return (float)(sign * level * c->translate_pct);
    case VT_RA_POSTERIZE: {
      int bits = (int)(level * 4);
      return (float)(c->increasing ? 4 - bits : bits);
    }
    case VT_RA_SOLARIZE: {
      int t = (int)(level * 256);
      return (float)(c->increasing ? 256 - t : t);
    }
    case VT_RA_SOLARIZE_ADD: return (float)fmin(128, (int)(level * 110));  // timm's cap
    case VT_RA_COLOR:
    case VT_RA_CONTRAST:
    case VT_RA_BRIGHTNESS:
    case VT_RA_SHARPNESS:
      if (!c->increasing) return (float)(level * 1.8 + 0.1);
      return (float)fmax(0.1, 1.0 + sign * level * 0.9);
    default: return 0;  // AutoContrast, Equalize, Invert take none
  }
}

void vt_randaug_draw(const vt_randaug_config *c, uint64_t seed, int64_t epoch, int64_t key,
                     vt_randaug_plan *p) {
  const uint32_t su = vt_hash_name("randaug"), sn = vt_hash_name("randaug.m");
  const uint64_t base = (uint64_t)key * SLOTS_PER_LAYER * VT_RA_MAX_LAYERS;
  memset(p, 0, sizeof *p);
  p->n = c->layers;
  for (int i = 0; i < c->layers && i < VT_RA_MAX_LAYERS; i++) {
    const uint64_t j = base + SLOTS_PER_LAYER * (uint64_t)i;
    int op = (int)(vt_rng_uniform(seed, su, (uint32_t)epoch, j) * VT_RA_NUM_OPS);
    p->op[i] = (vt_ra_op)(op < VT_RA_NUM_OPS ? op : VT_RA_NUM_OPS - 1);
    p->apply[i] = vt_rng_uniform(seed, su, (uint32_t)epoch, j + 1) < c->prob;
    double m = c->magnitude;
    if (isinf(c->magnitude_std))
      m = c->magnitude * vt_rng_uniform(seed, su, (uint32_t)epoch, j + 3);
    else if (c->magnitude_std > 0)
      m += c->magnitude_std * vt_rng_normal(seed, sn, (uint32_t)epoch,
                                            (uint64_t)key * VT_RA_MAX_LAYERS + (uint64_t)i);
    m = fmax(0.0, fmin(m, c->magnitude_max));
    p->magnitude[i] = (float)m;
    const int negate = vt_rng_uniform(seed, su, (uint32_t)epoch, j + 2) > 0.5f;
    p->arg[i] = vt_randaug_arg(c, p->op[i], (float)m, negate);
  }
}

// ---- colour operations: look-up tables --------------------------------------------------------

static void histograms(const uint8_t *rgb, size_t npix, int64_t h[3][256]) {
  memset(h, 0, 3 * 256 * sizeof(int64_t));
  for (size_t i = 0; i < npix; i++)
    for (int ch = 0; ch < 3; ch++) h[ch][rgb[3 * i + ch]]++;
}

static void apply_luts(uint8_t *rgb, size_t npix, uint8_t lut[3][256]) {
  for (size_t i = 0; i < npix; i++)
    for (int ch = 0; ch < 3; ch++) rgb[3 * i + ch] = lut[ch][rgb[3 * i + ch]];
}

static uint8_t clip8i(int64_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

// ImageOps.autocontrast (cutoff 0): each channel's [lo, hi] stretched to [0, 255], truncated.
static void autocontrast_luts(const int64_t h[3][256], uint8_t lut[3][256]) {
  for (int ch = 0; ch < 3; ch++) {
    int lo = 0, hi = 255;
    while (lo < 255 && !h[ch][lo]) lo++;
    while (hi > 0 && !h[ch][hi]) hi--;
    for (int i = 0; i < 256; i++) {
      if (hi <= lo) {
        lut[ch][i] = (uint8_t)i;
        continue;
      }
      const double scale = 255.0 / (hi - lo), offset = -lo * scale;
      lut[ch][i] = clip8i((int64_t)(i * scale + offset));  // int() of a value > -1 or clipped
    }
  }
}

// ImageOps.equalize: per channel, the cumulative histogram in steps of (pixels - count of the
// last used value) / 255, started half a step in.
static void equalize_luts(const int64_t h[3][256], uint8_t lut[3][256]) {
  for (int ch = 0; ch < 3; ch++) {
    int64_t total = 0, last = 0, used = 0;
    for (int i = 0; i < 256; i++)
      if (h[ch][i]) total += h[ch][i], last = h[ch][i], used++;
    const int64_t step = used <= 1 ? 0 : (total - last) / 255;
    int64_t n = step / 2;
    for (int i = 0; i < 256; i++) {
      lut[ch][i] = step ? clip8i(n / step) : (uint8_t)i;
      n += h[ch][i];
    }
  }
}

static void point_op(vt_ra_op op, int arg, uint8_t *rgb, size_t npix) {
  uint8_t lut[3][256];
  int64_t h[3][256];
  if (op == VT_RA_AUTOCONTRAST || op == VT_RA_EQUALIZE) {
    histograms(rgb, npix, h);
    (op == VT_RA_AUTOCONTRAST ? autocontrast_luts : equalize_luts)((const int64_t(*)[256])h, lut);
  } else {
    for (int i = 0; i < 256; i++) {
      int v = i;
      if (op == VT_RA_INVERT) v = 255 - i;
      // ImageOps.posterize keeps the top `bits` bits; none at all for bits <= 0.
      if (op == VT_RA_POSTERIZE) v = arg >= 8 ? i : arg <= 0 ? 0 : i & ~((1 << (8 - arg)) - 1);
      if (op == VT_RA_SOLARIZE) v = i < arg ? i : 255 - i;
      if (op == VT_RA_SOLARIZE_ADD) v = i < 128 ? (i + arg < 255 ? i + arg : 255) : i;
      lut[0][i] = lut[1][i] = lut[2][i] = (uint8_t)v;
    }
  }
  apply_luts(rgb, npix, lut);
}

// ---- enhancements: Image.blend(degenerate, image, factor) -------------------------------------

// Pillow's blend of two 8-bit values: in float, truncated, clipped for factors outside [0, 1].
static inline uint8_t blend(int degenerate, int v, float f) {
  const float t = (float)degenerate + f * (float)(v - degenerate);
  return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
}

// ImageFilter.SMOOTH (1 1 1 / 1 5 1 / 1 1 1, divided by 13) as Pillow's 3 x 3 filter runs it:
// float kernel, sum started at 0.5 and truncated; the border rows and columns are copied.
static void smooth(const uint8_t *src, uint8_t *dst, int w, int h) {
  memcpy(dst, src, (size_t)w * h * 3);
  if (w < 3 || h < 3) return;
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  for (int y = 1; y < h - 1; y++) {
    const uint8_t *rows[3] = {src + (size_t)(y + 1) * w * 3, src + (size_t)y * w * 3,
                              src + (size_t)(y - 1) * w * 3};
    uint8_t *out = dst + (size_t)y * w * 3;
    for (int x = 1; x < w - 1; x++)
      for (int ch = 0; ch < 3; ch++) {
        float ss = 0.5f;
        for (int r = 0; r < 3; r++) {
          const uint8_t *in = rows[r] + 3 * x + ch;
          const float kc = r == 1 ? k5 : k1;
          ss += (float)in[-3] * k1 + (float)in[0] * kc + (float)in[3] * k1;
        }
        out[3 * x + ch] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
      }
  }
}

static void enhance(vt_ra_op op, float f, uint8_t *rgb, int w, int h, uint8_t *scratch) {
  const size_t npix = (size_t)w * h;
  if (op == VT_RA_CONTRAST) {  // towards the mean grey level, int(mean + 0.5)
    int64_t sum = 0;
    for (size_t i = 0; i < npix; i++) sum += vt_pil_luma(rgb + 3 * i);
    const int mean = (int)((double)sum / (double)npix + 0.5);
    for (size_t i = 0; i < 3 * npix; i++) rgb[i] = blend(mean, rgb[i], f);
  } else if (op == VT_RA_BRIGHTNESS) {  // towards black
    for (size_t i = 0; i < 3 * npix; i++) rgb[i] = blend(0, rgb[i], f);
  } else if (op == VT_RA_COLOR) {  // towards the pixel's grey
    for (size_t i = 0; i < npix; i++) {
      const int g = vt_pil_luma(rgb + 3 * i);
      for (int ch = 0; ch < 3; ch++) rgb[3 * i + ch] = blend(g, rgb[3 * i + ch], f);
    }
  } else {  // Sharpness: towards the smoothed image
    smooth(rgb, scratch, w, h);
    for (size_t i = 0; i < 3 * npix; i++) rgb[i] = blend(scratch[i], rgb[i], f);
  }
}

// ---- geometry: Image.transform(size, AFFINE, m, resample, fillcolor) --------------------------

static inline int clampi(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

// The cubic through four samples at offset d in [0, 1) between the middle two (a = -1, the
// kernel Pillow's transform uses).
static inline double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// Output pixel (x, y) samples the input at (m0 (x + .5) + m1 (y + .5) + m2, m3 (x + .5) +
// m4 (y + .5) + m5); a point outside [0, w) x [0, h) takes the fill colour. Taps beyond the
// edges repeat the edge pixels. The sample is truncated to 8 bits (bicubic clipped first).
static void affine(const double m[6], vt_ra_interp interp, const uint8_t fill[3],
                   const uint8_t *src, uint8_t *dst, int w, int h) {
  for (int y = 0; y < h; y++) {
    for (int x = 0; x < w; x++) {
      uint8_t *out = dst + ((size_t)y * w + x) * 3;
      double xin = m[0] * (x + 0.5) + m[1] * (y + 0.5) + m[2];
      double yin = m[3] * (x + 0.5) + m[4] * (y + 0.5) + m[5];
      if (!(xin >= 0.0 && xin < w && yin >= 0.0 && yin < h)) {
        memcpy(out, fill, 3);
        continue;
      }
      xin -= 0.5, yin -= 0.5;
      const int xi = (int)floor(xin), yi = (int)floor(yin);
      const double dx = xin - xi, dy = yin - yi;
      if (interp == VT_RA_BILINEAR) {
        const uint8_t *r0 = src + (size_t)clampi(yi, h - 1) * w * 3;
        const uint8_t *r1 = src + (size_t)clampi(yi + 1, h - 1) * w * 3;
        const int x0 = 3 * clampi(xi, w - 1), x1 = 3 * clampi(xi + 1, w - 1);
        for (int ch = 0; ch < 3; ch++) {
          const double v1 = r0[x0 + ch] + (r0[x1 + ch] - r0[x0 + ch]) * dx;
          const double v2 = r1[x0 + ch] + (r1[x1 + ch] - r1[x0 + ch]) * dx;
          out[ch] = (uint8_t)(v1 + (v2 - v1) * dy);
        }
        continue;
      }
      int xs[4];
      const uint8_t *rows[4];
      for (int k = 0; k < 4; k++) {
        xs[k] = 3 * clampi(xi - 1 + k, w - 1);
        rows[k] = src + (size_t)clampi(yi - 1 + k, h - 1) * w * 3;
      }
      for (int ch = 0; ch < 3; ch++) {
        // cubic(a, b, c, d, 0) is b exactly, so an offset of 0 (every column of Shear Y and
        // Translate Y, every row of Shear X and Translate X) needs one cubic, not five.
        double s;
        if (dy == 0.0) {
          const uint8_t *r = rows[1] + ch;
          s = cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
        } else {
          double v[4];
          for (int k = 0; k < 4; k++) {
            const uint8_t *r = rows[k] + ch;
            v[k] = dx == 0.0 ? r[xs[1]] : cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
          }
          s = cubic(v[0], v[1], v[2], v[3], dy);
        }
        out[ch] = s <= 0.0 ? 0 : s >= 255.0 ? 255 : (uint8_t)s;
      }
    }
  }
}

// Image.rotate(degrees) without expand: about the centre (w / 2, h / 2), counter-clockwise.
static void rotation_matrix(double degrees, int w, int h, double m[6]) {
  double a = fmod(degrees, 360.0);
  if (a < 0) a += 360.0;
  a = -a * (3.14159265358979323846 / 180.0);  // math.radians
  // Pillow rounds the cosine and sine to 15 decimals.
  const double c = rint(cos(a) * 1e15) / 1e15, s = rint(sin(a) * 1e15) / 1e15;
  const double cx = w / 2.0, cy = h / 2.0;
  m[0] = c, m[1] = s, m[3] = -s, m[4] = c;
  m[2] = c * -cx + s * -cy + cx;
  m[5] = -s * -cx + c * -cy + cy;
}

void vt_randaug_op(vt_ra_op op, float arg, vt_ra_interp interp, const uint8_t fill[3],
                   uint8_t *rgb, int w, int h, uint8_t *scratch) {
  const size_t npix = (size_t)w * h;
  double m[6] = {1, 0, 0, 0, 1, 0};
  switch (op) {
    case VT_RA_AUTOCONTRAST:
    case VT_RA_EQUALIZE:
    case VT_RA_INVERT:
    case VT_RA_POSTERIZE:
    case VT_RA_SOLARIZE:
    case VT_RA_SOLARIZE_ADD: point_op(op, (int)arg, rgb, npix); return;
    case VT_RA_COLOR:
    case VT_RA_CONTRAST:
    case VT_RA_BRIGHTNESS:
    case VT_RA_SHARPNESS: enhance(op, arg, rgb, w, h, scratch); return;
    case VT_RA_ROTATE: rotation_matrix(arg, w, h, m); break;
    case VT_RA_SHEAR_X: m[1] = arg; break;
    case VT_RA_SHEAR_Y: m[3] = arg; break;
    case VT_RA_TRANSLATE_X: m[2] = (double)arg * w; break;
    case VT_RA_TRANSLATE_Y: m[5] = (double)arg * h; break;
    default: return;
  }
  memcpy(scratch, rgb, npix * 3);
  affine(m, interp, fill, scratch, rgb, w, h);
}

void vt_randaug_run(const vt_randaug_config *c, const vt_randaug_plan *p, uint8_t *rgb, int S,
                    uint8_t *scratch) {
  for (int i = 0; i < p->n; i++)
    if (p->apply[i]) vt_randaug_op(p->op[i], p->arg[i], c->interp, c->fill, rgb, S, S, scratch);
}
