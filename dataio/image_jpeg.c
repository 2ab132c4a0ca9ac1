// image_jpeg.c: JPEG to 8-bit RGB through libjpeg-turbo (empty without VT_HAVE_JPEG): the
// whole image with libjpeg's defaults, as Pillow decodes it, or a window of it at a reduced
// scale for a training crop (DCT scaling, cropped columns, skipped rows, early stop). libjpeg's
// error_exit would exit(): ours longjmps back with the message, and truncation, corruption,
// unsupported variants and bombs become statuses. No MPI, backend or model, and no global state:
// decoder threads call it concurrently.
#ifdef VT_HAVE_JPEG
#include <setjmp.h>
#include <stdio.h>  // before jpeglib.h, which uses FILE
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "image_internal.h"

// Each scan of a progressive JPEG walks every block again, so a small file with thousands of
// scans would take minutes (real encoders write about 10).
#define JPEG_MAX_SCANS 100
// Pixels decoded beyond the region on every side (not past the image): cropped fancy upsampling
// may treat the window's edges as image edges, and those outermost pixels are never sampled.
#define MARGIN 2

#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr jerr;
  struct jpeg_source_mgr src;
  struct jpeg_progress_mgr progress;
  jmp_buf jmp;
  // Everything below outlives a longjmp.
  const uint8_t *bytes;
  size_t nbytes;
  int eof;           // the data ran out: truncated
  int scans;         // more than JPEG_MAX_SCANS scans
  int header_done;   // jpeg_read_header returned
  int all_rows;      // every row of the image is decoded: later errors change no pixel...
  int stray;         // ...unless a marker stands inside a single scan's data (stray_marker)
  int code;          // libjpeg's message code of the error, -1 none
  vt_image_status status;  // a refusal of ours (size, colour space, memory), OK none
  char msg[JMSG_LENGTH_MAX + 64];
  int width, height, cmyk, multi_scan, max_scale;
  int scale, out_w, out_h;  // the reduced image
  int x0, y0, ww, wh;       // the window in the reduced image
  uint8_t *rgb;             // the window's pixels, owned by the caller on every path
  uint8_t *scratch;         // one output row of 4 bytes a pixel (CMYK, rows past the window)
} jpeg_job;

static void on_error(j_common_ptr c) {
  jpeg_job *j = c->client_data;
  j->code = c->err->msg_code;
  (*c->err->format_message)(c, j->msg);
  longjmp(j->jmp, 1);
}

// Warnings (corrupt entropy-coded data, extra bytes before a marker) mean libjpeg has filled in
// what it could not decode; Pillow shows those pixels without an error where nothing fails
// later, and so do we. Nothing is printed: output_message is never reached.
static void on_message(j_common_ptr c, int level) { (void)c, (void)level; }

static void on_progress(j_common_ptr c) {
  jpeg_job *j = c->client_data;
  if (((j_decompress_ptr)c)->input_scan_number > JPEG_MAX_SCANS) {
    j->scans = 1;
    longjmp(j->jmp, 1);
  }
}

// The source: the bytes in memory, all at once. Running out is an error at once (libjpeg's own
// sources would pad with a fake end marker and a warning, decoding the missing part as grey).
static void src_init(j_decompress_ptr c) { (void)c; }
static void src_term(j_decompress_ptr c) { (void)c; }

static boolean src_fill(j_decompress_ptr c) {
  jpeg_job *j = c->client_data;
  j->eof = 1;
  ERREXIT(c, JERR_INPUT_EOF);
  return FALSE;
}

static void src_skip(j_decompress_ptr c, long n) {
  struct jpeg_source_mgr *s = c->src;
  if (n <= 0) return;
  if ((unsigned long)n > s->bytes_in_buffer) src_fill(c);  // does not return
  s->next_input_byte += n;
  s->bytes_in_buffer -= (size_t)n;
}

// Inverted (Adobe) CMYK, which Pillow assumes for every CMYK JPEG, to RGB as PIL's
// convert("RGB"): v = (255 - k) - (255 - k) * c / 255 with PIL's rounding of the product.
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, int n) {
  for (int i = 0; i < n; i++, in += 4, out += 3) {
    int nk = in[3];
    for (int ch = 0; ch < 3; ch++) {
      int t = (255 - in[ch]) * nk + 128;
      out[ch] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
    }
  }
}

static int ends_with_eoi(const uint8_t *b, size_t n) {
  return n >= 2 && b[n - 2] == 0xFF && b[n - 1] == 0xD9;
}

// Whether a marker other than the end (EOI) stands in a single scan's entropy-coded data (b, n:
// from its first byte to the file's end), where only stuffed 0xFF00s, restart markers and fill
// 0xFFs belong. A damaged block (bytes overwritten in transfer or on disk) almost always makes
// one: libjpeg then ends the scan with a warning, fills the rest of the image with grey, and
// fails only when it reads that marker after the last row, in jpeg_finish_decompress, as
// Pillow's whole decode does ("broken data stream"). Found here, a decode that stops early
// (a crop) still reads on to the end, for the whole decode's verdict: one per file, whatever
// the crop.
static int stray_marker(const uint8_t *b, size_t n) {
  for (const uint8_t *p = b, *end = b + n; (p = memchr(p, 0xFF, (size_t)(end - p))) != NULL;) {
    while (p < end && *p == 0xFF) p++;  // fill bytes
    if (p == end || *p == 0xD9) return 0;
    if (*p != 0x00 && (*p < 0xD0 || *p > 0xD7)) return 1;
    p++;
  }
  return 0;
}

// After jpeg_start_decompress of a progressive file (which has read every scan): did every
// coefficient of every component arrive in full? Only then is libjpeg's interblock smoothing
// (do_block_smoothing, for coefficients still missing) certain to stay off.
static int all_coefficients_complete(const struct jpeg_decompress_struct *c) {
  if (!c->progressive_mode) return 1;
  if (!c->coef_bits) return 0;
  for (int ci = 0; ci < c->num_components; ci++)
    for (int k = 0; k < DCTSIZE2; k++)
      if (c->coef_bits[ci][k] != 0) return 0;
  return 1;
}

// The libjpeg calls, in their own function so that the setjmp frame owns no variables that
// change after setjmp. region NULL: the header only (a probe).
static int jpeg_run(jpeg_job *j, int64_t max_pixels, const vt_image_region *region) {
  struct jpeg_decompress_struct *c = &j->cinfo;
  if (setjmp(j->jmp)) return -1;
  c->err = jpeg_std_error(&j->jerr);
  j->jerr.error_exit = on_error;
  j->jerr.emit_message = on_message;
  c->client_data = j;
  jpeg_create_decompress(c);
  j->src = (struct jpeg_source_mgr){.next_input_byte = j->bytes, .bytes_in_buffer = j->nbytes,
                                    .init_source = src_init, .fill_input_buffer = src_fill,
                                    .skip_input_data = src_skip,
                                    .resync_to_restart = jpeg_resync_to_restart,
                                    .term_source = src_term};
  c->src = &j->src;
  j->progress.progress_monitor = on_progress;
  c->progress = &j->progress;
  jpeg_read_header(c, TRUE);
  j->header_done = 1;
  j->width = (int)c->image_width;
  j->height = (int)c->image_height;
  j->multi_scan = jpeg_has_multiple_scans(c);
  // Chroma upsampled by different factors across and down (4:2:2, 4:4:0) loses its smooth
  // upsampling at 1/8 (libjpeg only does it above 1x1 blocks) and comes out about 10 levels off
  // a box average there; 1/4 is as close as 4:2:0 at 1/8. So those stop at 1/4. Those whose
  // factors differ four times (4:1:1, 1x4: rare) are decoded whole: against the whole decode a
  // smooth gradient came out up to 24 levels off at 1/4 and still 10 at 1/2.
  j->max_scale = 8;
  for (int ci = 0; ci < c->num_components; ci++) {
    const jpeg_component_info *k = &c->comp_info[ci];
    if (k->h_samp_factor <= 0 || k->v_samp_factor <= 0) continue;  // read_header refuses them
    const int across = c->max_h_samp_factor * k->v_samp_factor,
              down = c->max_v_samp_factor * k->h_samp_factor;  // (each over the other)
    const int ratio = across > down ? across / down : down / across;
    if (ratio >= 4) j->max_scale = 1;
    else if (across != down && j->max_scale > 4) j->max_scale = 4;
  }
  if (vt_img_too_many_pixels(j->width, j->height, max_pixels)) {
    snprintf(j->msg, sizeof j->msg, "JPEG of %dx%d pixels is over the limit of %lld pixels",
             j->width, j->height, (long long)max_pixels);
    j->status = VT_IMG_TOO_LARGE;
    return -1;
  }
  switch (c->jpeg_color_space) {
    case JCS_GRAYSCALE: case JCS_YCbCr: case JCS_RGB: c->out_color_space = JCS_RGB; break;
    case JCS_CMYK: case JCS_YCCK: c->out_color_space = JCS_CMYK, j->cmyk = 1; break;
    default:
      snprintf(j->msg, sizeof j->msg,
               "unsupported JPEG: %d colour components that are not grey, YCbCr, RGB or CMYK",
               c->num_components);
      j->status = VT_IMG_UNSUPPORTED;
      return -1;
  }
  if (!region) return 0;
  // The scan's data starts where the header ended (a probe does not look: its verdict is the
  // header's). A file of several scans has them all read by jpeg_start_decompress, libjpeg's
  // own verdict.
  if (!j->multi_scan) j->stray = stray_marker(c->src->next_input_byte, c->src->bytes_in_buffer);

  // Defaults otherwise (JDCT_ISLOW, fancy upsampling, no block smoothing changes): Pillow's.
  j->scale = region->scale == 2 || region->scale == 4 || region->scale == 8 ? region->scale : 1;
  if (j->scale > j->max_scale) j->scale = j->max_scale;
  c->scale_num = 1;
  c->scale_denom = (unsigned)j->scale;
  jpeg_calc_output_dimensions(c);
  j->out_w = (int)c->output_width;
  j->out_h = (int)c->output_height;
  if (j->out_w != vt_image_scaled_side(j->width, j->scale) ||
      j->out_h != vt_image_scaled_side(j->height, j->scale)) {
    snprintf(j->msg, sizeof j->msg, "libjpeg scaled %dx%d by 1/%d to %dx%d", j->width,
             j->height, j->scale, j->out_w, j->out_h);
    j->status = VT_IMG_CORRUPT;
    return -1;
  }
  jpeg_start_decompress(c);  // multi-scan files: every scan is entropy-decoded here

  int x0, x1, y0, y1;
  vt_img_rescale_region(region, region->scale, j->scale, &x0, &y0, &x1, &y1);
  vt_img_clamp_range(&x0, &x1, j->out_w);
  vt_img_clamp_range(&y0, &y1, j->out_h);
  x0 = x0 > MARGIN ? x0 - MARGIN : 0;
  y0 = y0 > MARGIN ? y0 - MARGIN : 0;
  x1 = x1 + MARGIN < j->out_w ? x1 + MARGIN : j->out_w - 1;
  y1 = y1 + MARGIN < j->out_h ? y1 + MARGIN : j->out_h - 1;
  JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0 + 1);
  // Whole iMCU columns: xoff moves left to a boundary and cw grows to keep the right edge.
  // Not for a progressive file with coefficients never completed (scans missing): libjpeg
  // then smooths across blocks, and a cropped decode smooths differently (not the whole
  // decode's pixels).
  if ((int)cw < j->out_w && all_coefficients_complete(c)) jpeg_crop_scanline(c, &xoff, &cw);
  j->x0 = (int)xoff;
  j->ww = (int)c->output_width;
  j->y0 = y0;
  j->wh = y1 - y0 + 1;
  if (j->x0 < 0 || j->x0 + j->ww > j->out_w || j->x0 > x0 || j->x0 + j->ww - 1 < x1) {
    snprintf(j->msg, sizeof j->msg, "libjpeg cropped columns %d..%d to %d..%d", x0, x1, j->x0,
             j->x0 + j->ww - 1);
    j->status = VT_IMG_CORRUPT;
    return -1;
  }
  j->rgb = malloc((size_t)j->ww * (size_t)j->wh * 3);
  j->scratch = malloc((size_t)j->ww * 4);
  if (!j->rgb || !j->scratch) {
    snprintf(j->msg, sizeof j->msg, "not enough memory for a %dx%d JPEG", j->width, j->height);
    j->status = VT_IMG_TOO_LARGE;
    return -1;
  }
  // Rows above the window: entropy-decoded (single-scan files) but not transformed.
  if (y0 > 0 && jpeg_skip_scanlines(c, (JDIMENSION)y0) != (JDIMENSION)y0) ERREXIT(c, JERR_NOTIMPL);
  while ((int)c->output_scanline <= y1) {
    uint8_t *dst = j->rgb + (size_t)((int)c->output_scanline - y0) * j->ww * 3;
    JSAMPROW row = j->cmyk ? j->scratch : dst;
    if ((int)c->output_scanline < y0 || jpeg_read_scanlines(c, &row, 1) != 1)
      ERREXIT(c, JERR_NOTIMPL);  // never: the source does not suspend
    if (j->cmyk) cmyk_to_rgb(j->scratch, dst, j->ww);
  }
  if ((int)c->output_scanline == j->out_h) j->all_rows = 1;
  // A file that ends with its EOI marker is not cut. Any other (cut, or trailing bytes after
  // the marker), and one with a stray marker, is decoded on to its end, so that the verdict is
  // the whole decode's.
  if (!j->stray && (ends_with_eoi(j->bytes, j->nbytes) || jpeg_input_complete(c))) return 0;
  while ((int)c->output_scanline < j->out_h) {
    JSAMPROW row = j->scratch;
    if (jpeg_read_scanlines(c, &row, 1) != 1) ERREXIT(c, JERR_NOTIMPL);
  }
  j->all_rows = 1;
  jpeg_finish_decompress(c);  // reads on to the EOI marker
  return 0;
}

static vt_image_status jpeg_verdict(jpeg_job *j, int rc, char *err, size_t errlen) {
  if (rc == 0 || (j->all_rows && !j->eof && !j->stray && j->status == VT_IMG_OK))
    return VT_IMG_OK;
  if (j->status != VT_IMG_OK) {
    vt_img_set_err(err, errlen, "%s", j->msg);
    return j->status;
  }
  if (j->eof) {
    vt_img_set_err(err, errlen, "truncated JPEG: the file ends after %zu bytes, %s", j->nbytes,
                   j->header_done ? "before its end marker" : "inside the header");
    return VT_IMG_TRUNCATED;
  }
  if (j->scans) {
    vt_img_set_err(err, errlen, "corrupt JPEG: more than %d scans", JPEG_MAX_SCANS);
    return VT_IMG_CORRUPT;
  }
  switch (j->code) {
    case JERR_OUT_OF_MEMORY:
      vt_img_set_err(err, errlen, "not enough memory for a %dx%d JPEG (%s)", j->width, j->height,
                     j->msg);
      return VT_IMG_TOO_LARGE;
    case JERR_IMAGE_TOO_BIG: case JERR_WIDTH_OVERFLOW:
      vt_img_set_err(err, errlen, "JPEG too large: %s", j->msg);
      return VT_IMG_TOO_LARGE;
    case JERR_BAD_PRECISION: case JERR_SOF_UNSUPPORTED: case JERR_NOT_COMPILED:
    case JERR_ARITH_NOTIMPL: case JERR_CONVERSION_NOTIMPL:
      vt_img_set_err(err, errlen,
                     "unsupported JPEG: %s (vit3d decodes 8-bit baseline, progressive and "
                     "arithmetic-coded JPEGs in grey, YCbCr, RGB or CMYK)", j->msg);
      return VT_IMG_UNSUPPORTED;
    default:
      vt_img_set_err(err, errlen, "corrupt JPEG: %s", j->msg);
      return VT_IMG_CORRUPT;
  }
}

vt_image_status vt_jpeg_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                              vt_image_info *info, char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  jpeg_job *j = calloc(1, sizeof *j);  // a few KB: off the stack of decoder threads
  if (!j) {
    vt_img_set_err(err, errlen, "out of memory starting libjpeg");
    return VT_IMG_TOO_LARGE;
  }
  j->bytes = bytes, j->nbytes = nbytes, j->code = -1;
  int rc = jpeg_run(j, max_pixels, NULL);
  jpeg_destroy_decompress(&j->cinfo);
  vt_image_status st = jpeg_verdict(j, rc, err, errlen);
  if (st == VT_IMG_OK) {
    info->format = VT_FMT_JPEG;
    info->width = j->width;
    info->height = j->height;
    info->max_scale = j->max_scale;
  }
  free(j);
  return st;
}

vt_image_status vt_jpeg_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                    const vt_image_region *region, vt_image_part *out,
                                    char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  jpeg_job *j = calloc(1, sizeof *j);
  if (!j) {
    vt_img_set_err(err, errlen, "out of memory starting libjpeg");
    return VT_IMG_TOO_LARGE;
  }
  j->bytes = bytes, j->nbytes = nbytes, j->code = -1;
  int rc = jpeg_run(j, max_pixels, region);
  jpeg_destroy_decompress(&j->cinfo);  // also after a stop before the last row
  free(j->scratch);
  vt_image_status st = jpeg_verdict(j, rc, err, errlen);
  if (st == VT_IMG_OK) {
    out->win = (vt_image){j->ww, j->wh, j->rgb};
    out->x0 = j->x0;
    out->y0 = j->y0;
    out->scale = j->scale;
    out->width = j->out_w;
    out->height = j->out_h;
    out->full_width = j->width;
    out->full_height = j->height;
  } else {
    free(j->rgb);
  }
  free(j);
  return st;
}

const char *vt_jpeg_version(void) {
#ifdef LIBJPEG_TURBO_VERSION
  return "libjpeg-turbo " STR(LIBJPEG_TURBO_VERSION);
#else
  return "libjpeg " STR(JPEG_LIB_VERSION);
#endif
}
#else
typedef int vt_image_jpeg_not_built;  // ISO C wants something in a translation unit
#endif
