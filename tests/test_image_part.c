// test_image_part.c: the third part of the test_image program (test_image.h): partial decodes
// (windows of a PNG or JPEG, JPEG at 1/2..1/8 by DCT scaling) against the whole decode, and
// training and evaluation samples (vt_sample_from_bytes) against the full decode + render
// (check_crops, which test_image.c's WebP test calls too). Test code only; needs the decoders
// and dataio's sample.h, not the model.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "test_image.h"

#ifdef VT_HAVE_JPEG
#include <stdio.h>  // (jpeglib.h needs FILE)
#include <jpeglib.h>
#endif

// ---- partial decodes and crops (vt_image_decode_part, vt_sample_from_bytes) ---------------------
static int region_equal(const vt_image_part *p, const vt_image *ref, int x0, int y0, int x1,
                        int y1) {
  if (x0 < p->x0 || y0 < p->y0 || x1 >= p->x0 + p->win.width || y1 >= p->y0 + p->win.height)
    return 0;
  for (int y = y0; y <= y1; y++)
    if (memcmp(p->win.rgb + ((size_t)(y - p->y0) * p->win.width + (x0 - p->x0)) * 3,
               ref->rgb + ((size_t)y * ref->width + x0) * 3, (size_t)(x1 - x0 + 1) * 3))
      return 0;
  return 1;
}

// The mean of each d x d block of img (fewer pixels at the right and bottom edges).
static vt_image box_reduce(const vt_image *img, int d) {
  int w = vt_image_scaled_side(img->width, d), h = vt_image_scaled_side(img->height, d);
  vt_image out = {w, h, malloc((size_t)w * h * 3)};
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        int sum = 0, cnt = 0;
        for (int v = y * d; v < y * d + d && v < img->height; v++)
          for (int u = x * d; u < x * d + d && u < img->width; u++, cnt++)
            sum += img->rgb[((size_t)v * img->width + u) * 3 + c];
        out.rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)((sum + cnt / 2) / cnt);
      }
  return out;
}

// JPEG at 1/d: sizes ceil(w/d); close to a box average of the full decode (DCT scaling keeps the
// low frequencies of each block, a box-like area filter, not the exact box: tolerance below);
// any window equal, over its region, to the whole decode at the same scale (d = 1: to the
// full decode), which checks the margins around cropped columns and skipped rows.
static void test_jpeg_stray(void);
static void test_jpeg_sampling(void);

void test_jpeg_part(void) {
  static const char *names[] = {"p420", "p422", "p444", "pgray", "pprog", "pcmyk"};
  const int turbo = strncmp(vt_image_jpeg_decoder(), "libjpeg", 7) == 0;
  if (turbo) test_jpeg_sampling();  // (its JPEGs are libjpeg's: without PIL too)
  double worst_mean = 0;
  int worst_max = 0, windows = 0, windows_ok = 0;
  for (int k = 0; k < 6; k++) {
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/%s.jpg", dir, names[k]);
    size_t n = 0;
    uint8_t *b = read_all(path, &n);
    if (!b) return;  // no PIL: test_pil_jpegs said so
    vt_image full;
    if (vt_image_decode(b, n, LIMIT, &full, err, sizeof err) != VT_IMG_OK) {
      EXPECT(0, "%s: %s", path, err);
      free(b);
      continue;
    }
    vt_image_info info;
    EXPECT(vt_image_probe(b, n, LIMIT, &info, err, sizeof err) == VT_IMG_OK &&
               info.width == full.width && info.height == full.height &&
               info.max_scale == (!turbo ? 1 : k == 1 ? 4 : 8),  // 4:2:2 stops at 1/4
           "%s: probe %dx%d max_scale %d", names[k], info.width, info.height, info.max_scale);
    for (int d = 1; d <= info.max_scale; d *= 2) {
      vt_image_region whole = {d, 0, 0, INT32_MAX, INT32_MAX};
      vt_image_part all;
      vt_image_status st = vt_image_decode_part(b, n, LIMIT, &whole, &all, err, sizeof err);
      int sw = vt_image_scaled_side(full.width, d), sh = vt_image_scaled_side(full.height, d);
      EXPECT(st == VT_IMG_OK && all.scale == d && all.width == sw &&
                 all.height == sh && all.win.width == sw && all.win.height == sh &&
                 all.full_width == full.width,
             "%s 1/%d: %s %dx%d (%s)", names[k], d, vt_image_status_name(st), all.width,
             all.height, err);
      if (st != VT_IMG_OK) continue;
      double sum = 0;
      int maxd = 0;
      vt_image box = box_reduce(&full, all.scale);
      for (size_t i = 0; i < (size_t)sw * sh * 3; i++) {
        int diff = abs(all.win.rgb[i] - box.rgb[i]);
        sum += diff;
        maxd = diff > maxd ? diff : maxd;
      }
      vt_image_free(&box);
      double mean = sum / ((double)sw * sh * 3);
      if (d == 1) EXPECT(maxd == 0, "%s: whole decode at 1/1 differs from the decode", names[k]);
      // Observed: mean <= 2.1 (4:2:2 at 1/4), max <= 14; the bounds leave room.
      EXPECT(mean <= 3.0 && maxd <= 30, "%s 1/%d vs box average: mean %.2f max %d", names[k], d,
             mean, maxd);
      worst_mean = mean > worst_mean ? mean : worst_mean;
      worst_max = maxd > worst_max ? maxd : worst_max;
      for (int t = 0; t < 12; t++) {  // windows at every corner, edge and inside
        uint32_t h = (uint32_t)(t * 2654435761u + (uint32_t)d * 40503u + (uint32_t)k);
        int x0 = (int)(h % (uint32_t)sw), y0 = (int)((h >> 9) % (uint32_t)sh);
        int x1 = x0 + (int)((h >> 17) % 40), y1 = y0 + (int)((h >> 23) % 30);
        if (t == 0) x0 = y0 = 0;
        if (t == 1) x1 = sw - 1, y1 = sh - 1;
        x1 = x1 < sw ? x1 : sw - 1;
        y1 = y1 < sh ? y1 : sh - 1;
        vt_image_region r = {d, x0, y0, x1, y1};
        vt_image_part p;
        st = vt_image_decode_part(b, n, LIMIT, &r, &p, err, sizeof err);
        windows++;
        windows_ok += st == VT_IMG_OK && region_equal(&p, &all.win, x0, y0, x1, y1);
        vt_image_part_free(&p);
      }
      vt_image_part_free(&all);
    }
    vt_image_free(&full);
    free(b);
  }
  EXPECT(windows_ok == windows, "%d of %d windows differ from the whole decode at their scale",
         windows - windows_ok, windows);
  printf("jpeg partial decodes (%s): 1/2, 1/4, 1/8 vs box average of the full decode: worst "
         "mean |diff| %.2f, max %d; %d windows equal to the whole decode over their region\n",
         turbo ? "libjpeg-turbo" : "stb_image, scale 1 only", worst_mean, worst_max, windows_ok);
  if (turbo) test_jpeg_stray();
}

#ifdef VT_HAVE_JPEG
// A 96x80 gradient as a JPEG whose luma is sampled h x v times the chroma (libjpeg's own writer:
// PIL cannot write 4:1:1); *n its bytes.
static uint8_t *jpeg_sampled(int h, int v, unsigned long *n) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr jerr;
  unsigned char *out = NULL;
  c.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &out, n);
  c.image_width = 96, c.image_height = 80, c.input_components = 3, c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  c.comp_info[0].h_samp_factor = h, c.comp_info[0].v_samp_factor = v;
  for (int k = 1; k < 3; k++) c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  uint8_t row[96 * 3];
  for (int y = 0; y < 80; y++) {
    for (int x = 0; x < 96; x++)
      row[x * 3] = (uint8_t)(x * 2), row[x * 3 + 1] = (uint8_t)(y * 3),
      row[x * 3 + 2] = (uint8_t)(x + y);
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return out;
}

// How far each chroma sampling is reduced (vt_image_probe's max_scale): 4:2:0 to 1/8, chroma
// sampled differently across and down twice (4:2:2, 4:4:0) to 1/4, four times (4:1:1, 1x4)
// not at all (1/4 was up to 24 levels off the whole decode, 1/2 still 10).
static void test_jpeg_sampling(void) {
  static const int hv[][3] = {{2, 2, 8}, {2, 1, 4}, {1, 2, 4}, {4, 1, 1}, {1, 4, 1}};
  for (int k = 0; k < 5; k++) {
    unsigned long n = 0;
    uint8_t *b = jpeg_sampled(hv[k][0], hv[k][1], &n);
    vt_image_info info;
    char err[256];
    EXPECT(b && vt_image_probe(b, n, LIMIT, &info, err, sizeof err) == VT_IMG_OK &&
               info.max_scale == hv[k][2],
           "luma sampled %dx%d: max_scale %d, want %d", hv[k][0], hv[k][1],
           b ? info.max_scale : -1, hv[k][2]);
    free(b);
  }
  printf("jpeg chroma samplings 2x2, 2x1, 1x2, 4x1, 1x4: reduced to 1/8, 1/4, 1/4, 1, 1\n");
}
#else
static void test_jpeg_sampling(void) {}
#endif

// A baseline JPEG with a block of bytes overwritten in its image data (a marker, 0xFF40, where
// none belongs: libjpeg ends the scan with a warning and greys the rest, then fails reading the
// marker after the last row; Pillow: "broken data stream") is corrupt: decoded whole and
// decoded only as far as a region at its top, which stops long before the damage.
static void test_jpeg_stray(void) {
  char path[128], err[256];
  snprintf(path, sizeof path, "%s/p420.jpg", dir);
  size_t n = 0;
  uint8_t *b = read_all(path, &n);
  if (!b) return;
  memset(b + n * 7 / 10, 0x5A, 64);
  b[n * 7 / 10 + 32] = 0xFF, b[n * 7 / 10 + 33] = 0x40;
  vt_image im;
  const vt_image_status whole = vt_image_decode(b, n, LIMIT, &im, err, sizeof err);
  vt_image_free(&im);
  EXPECT(whole == VT_IMG_CORRUPT && strstr(err, "marker"), "a stray marker, decoded whole: %s",
         err);
  const vt_image_region top = {1, 0, 0, 15, 7};
  vt_image_part part;
  const vt_image_status st = vt_image_decode_part(b, n, LIMIT, &top, &part, err, sizeof err);
  if (st == VT_IMG_OK) vt_image_part_free(&part);
  EXPECT(st == VT_IMG_CORRUPT, "a stray marker below a region at the top: %s",
         vt_image_status_name(st));
  printf("jpeg with a stray marker in its data: corrupt, whole and for a region above it (%s)\n",
         err);
  free(b);
}

// Values back in 0..255 units, for tolerances that read as pixel levels.
static double level_diff(const float *a, const float *b, int S, const vt_transform_config *tc,
                         double *maxd) {
  double sum = 0;
  *maxd = 0;
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < S * S; i++) {
      double d = fabs((double)a[c * S * S + i] - b[c * S * S + i]) * tc->std[c] * 255.0;
      sum += d;
      *maxd = d > *maxd ? d : *maxd;
    }
  return sum / (3.0 * S * S);
}

// Training and evaluation crops through vt_sample_from_bytes, reduced decode against the full
// decode + render (full_decode = 1). At 1/1 (PNG always, JPEG for crops under 2S): identical
// bytes, since rows are exact and the window holds every tap. At 1/d: not equal, by design.
// Against the same crop rendered from the full decode box-averaged to 1/d (same sample
// positions): within 3 levels on average and 40 at most (observed 2.0 and 13, 4:2:2 at 1/4):
// what is left is DCT scaling's own filter, which is not exactly a box; a crop misplaced by one
// reduced pixel would be off by 7 to 20 levels on average here. Against the full decode
// rendered directly: within 12 levels on average (observed 8.0, max 42, on these images, which
// carry strong pixel-level noise, 15% of a random image): DCT scaling averages each source area
// where the full path point-samples bilinearly, so the two differ by the detail finer than a
// reduced pixel, which the full path aliases and the reduced path filters out.
void check_crops(const uint8_t *b, size_t n, const char *name, crop_stats *cs) {
  vt_transform_config tc = vt_transform_defaults();
  vt_image full, box[4] = {{0}};
  char err[256];
  if (vt_image_decode(b, n, LIMIT, &full, err, sizeof err) != VT_IMG_OK) return;
  float *fa = malloc(sizeof(float) * 3 * 96 * 96), *fb = malloc(sizeof(float) * 3 * 96 * 96);
  float *fc = malloc(sizeof(float) * 3 * 96 * 96);
  for (int i = 0; i < 64; i++) {
    int S = i < 32 ? 24 : 96;
    vt_sample_spec sp = {&tc, S, i % 8 != 7, 7, i % 3, i, LIMIT, 0};
    vt_sample_stats st;
    vt_image_status sa = vt_sample_from_bytes(b, n, &sp, fa, &st, err, sizeof err);
    sp.full_decode = 1;
    vt_image_status sb = vt_sample_from_bytes(b, n, &sp, fb, NULL, err, sizeof err);
    EXPECT(sa == VT_IMG_OK && sb == VT_IMG_OK, "%s sample %d: %s", name, i, err);
    if (sa != VT_IMG_OK || sb != VT_IMG_OK) break;
    cs->total++;
    int d = st.scale;
    if (d == 1) {
      int same = !memcmp(fa, fb, sizeof(float) * 3 * S * S);
      EXPECT(same, "%s sample %d (%s crop %gx%g): reduced decode at 1/1 differs", name, i,
             sp.train ? "train" : "eval", st.crop.w, st.crop.h);
      cs->equal += same;
      continue;
    }
    int li = d == 2 ? 1 : d == 4 ? 2 : 3;
    if (!box[li].rgb) box[li] = box_reduce(&full, d);
    vt_image_part bp = {box[li], 0, 0, d, box[li].width, box[li].height, full.width, full.height};
    vt_render_crop_part(&bp, st.crop, S, &tc, fc);
    double mb, mf, eb = level_diff(fa, fc, S, &tc, &mb), ef = level_diff(fa, fb, S, &tc, &mf);
    EXPECT(eb <= 3.0 && mb <= 40 && ef <= 12, "%s sample %d at 1/%d: vs box %.2f (max %.1f), "
           "vs full %.2f levels", name, i, d, eb, mb, ef);
    cs->box_mean = eb > cs->box_mean ? eb : cs->box_mean;
    cs->box_max = mb > cs->box_max ? mb : cs->box_max;
    cs->full_mean = ef > cs->full_mean ? ef : cs->full_mean;
    cs->full_max = mf > cs->full_max ? mf : cs->full_max;
  }
  for (int k = 0; k < 4; k++) vt_image_free(&box[k]);
  vt_image_free(&full);
  free(fa), free(fb), free(fc);
}

void test_sample_crops(void) {
  crop_stats cs = {0};
  static const char *names[] = {"p420", "p422", "p444", "pgray", "pprog", "pcmyk"};
  for (int k = 0; k < 6; k++) {
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/%s.jpg", dir, names[k]);
    size_t n = 0;
    uint8_t *b = read_all(path, &n);
    if (!b) break;
    check_crops(b, n, names[k], &cs);
    // Cut, and with bytes after the end marker: the verdict is the whole decode's, whatever
    // the crop (a crop near the top stops decoding long before the cut).
    vt_transform_config tc = vt_transform_defaults();
    float out[3 * 16 * 16];
    int cut_bad = 0, tail_ok = 0;
    uint8_t *tail = malloc(n + 5);
    memcpy(tail, b, n);
    memcpy(tail + n, "junk!", 5);
    for (int i = 0; i < 16; i++) {
      vt_sample_spec sp = {&tc, 16, 1, 3, 0, i, LIMIT, 0};
      cut_bad += vt_sample_from_bytes(b, n * 7 / 10, &sp, out, NULL, err, sizeof err) ==
                 VT_IMG_TRUNCATED;
      tail_ok += vt_sample_from_bytes(tail, n + 5, &sp, out, NULL, err, sizeof err) == VT_IMG_OK;
    }
    EXPECT(cut_bad == 16 && tail_ok == 16, "%s: cut %d/16 truncated, tail %d/16 ok", names[k],
           cut_bad, tail_ok);
    free(tail);
    free(b);
  }
  if (cs.total)
    printf("jpeg crops: %d samples, %d at 1/1 identical to the full path; at 1/2..1/8 worst "
           "mean %.2f (max %.1f) levels from the box-averaged full decode, %.2f (max %.1f) "
           "from the full decode\n", cs.total, cs.equal, cs.box_mean, cs.box_max, cs.full_mean,
           cs.full_max);

  // PNG: rows are exact, so a crop rendered after an early stop is the full decode's, byte for
  // byte; interlaced files decode in full. Damage below any crop is still found.
  for (int il = 0; il < 2; il++) {
    png_case pc = {PNG_COLOR_TYPE_RGB, 8, 300, 200, il, 0, 0};
    char path[128];
    snprintf(path, sizeof path, "%s/crop%d.png", dir, il);
    write_png(path, &pc);
    size_t n = 0;
    uint8_t *b = read_all(path, &n);
    crop_stats ps = {0};
    check_crops(b, n, il ? "png interlaced" : "png", &ps);
    EXPECT(ps.total == 64 && ps.equal == 64, "png crops: %d/%d identical", ps.equal, ps.total);
    chunk_damage_checks(b, n, il);
    printf("png crops (%s): %d of %d identical to the full decode + render\n",
           il ? "interlaced" : "early stop", ps.equal, ps.total);
    free(b);
  }
}
