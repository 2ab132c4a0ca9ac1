// image_png.c: PNG to 8-bit RGB through libpng, whole or a window of rows and columns that stops
// decoding after the window's last row (training crops). Compiled without libpng (VT_HAVE_PNG
// undefined) it reports PNG files as unsupported. No MPI, backend or model, and no global state:
// decoder threads call it concurrently.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// The IHDR must be the first chunk (libpng refuses anything else), so the size is at a fixed
// place; a bomb is refused here, before libpng allocates anything.
__attribute__((unused))  // builds without libpng refuse every PNG without looking
static vt_image_status png_header(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image_info *info, char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  if (nbytes < 33) {  // signature, IHDR length + type, 13 bytes of IHDR, CRC
    vt_img_set_err(err, errlen,
                   "truncated PNG: the file ends after %zu bytes, inside the header", nbytes);
    return VT_IMG_TRUNCATED;
  }
  if (be32(bytes + 8) != 13 || memcmp(bytes + 12, "IHDR", 4) != 0) {
    vt_img_set_err(err, errlen, "corrupt PNG: the first chunk is not a 13-byte IHDR");
    return VT_IMG_CORRUPT;
  }
  int64_t w = be32(bytes + 16), h = be32(bytes + 20);
  if (w == 0 || h == 0 || w > 0x7fffffff || h > 0x7fffffff) {
    vt_img_set_err(err, errlen, "corrupt PNG: image size %lldx%lld in IHDR", (long long)w,
                   (long long)h);
    return VT_IMG_CORRUPT;
  }
  if (vt_img_too_many_pixels(w, h, max_pixels)) {
    vt_img_set_err(err, errlen, "PNG of %lldx%lld pixels is over the limit of %lld pixels",
                   (long long)w, (long long)h, (long long)max_pixels);
    return VT_IMG_TOO_LARGE;
  }
  info->format = VT_FMT_PNG;
  info->width = (int)w;
  info->height = (int)h;
  info->max_scale = 1;
  return VT_IMG_OK;
}

#ifdef VT_HAVE_PNG
#include <png.h>
#include <setjmp.h>
#include <zlib.h>

typedef struct {
  const uint8_t *bytes;
  size_t nbytes, pos;  // pos: bytes libpng has consumed
  int eof;             // the read callback ran out of bytes: the file is truncated
  int info_done;       // the header chunks were read: a cut lies in the image data or after
  int oom;             // a pixel buffer could not be allocated
  int complete;        // every row is decoded; later errors (trailing chunks, IEND) do not matter
  char msg[160];       // libpng's error message
  int width, height;
  int x0, y0, x1, y1;  // the window, inclusive
  uint8_t *rgb;        // the window's pixels: owned by the caller on every path, even longjmp
  png_bytep *rows;     // whole-image decodes
  uint8_t *scratch;    // one full row, for rows (or columns) outside the window
} png_job;

// libpng's default handlers print to stderr and abort; ours record the message and longjmp back.
static void png_on_error(png_structp png, png_const_charp msg) {
  png_job *j = png_get_error_ptr(png);
  snprintf(j->msg, sizeof j->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
  (void)png, (void)msg;  // warnings (ancillary CRC, extra data) do not change the pixels
}

static void png_read_bytes(png_structp png, png_bytep dst, size_t n) {
  png_job *j = png_get_io_ptr(png);
  if (n > j->nbytes - j->pos) {
    j->eof = 1;
    png_error(png, "the file ends early");
  }
  memcpy(dst, j->bytes + j->pos, n);
  j->pos += n;
}

// After an early stop: is the rest of the file what a complete PNG has? 1 when every chunk up to
// the end of the IDAT sequence lies in the file, is followed by the whole header of a chunk that
// is not an IDAT, and every IDAT libpng has not read to its end has a good CRC (the ones it has
// read, it checked). 0 otherwise (cut, bad CRC, odd lengths): then only decoding on says exactly
// what a whole decode would (truncated, corrupt, or complete because the compressed stream ended
// before the damage), and that cost falls on bad files only.
static int png_rest_is_sound(const uint8_t *b, size_t n, size_t consumed) {
  size_t p = 8;
  int seen_idat = 0;
  while (n - p >= 8) {
    uint32_t len = be32(b + p);
    int idat = memcmp(b + p + 4, "IDAT", 4) == 0;
    if (seen_idat && !idat) return 1;
    if (len > 0x7fffffffu || n - p - 8 < (size_t)len + 4) return 0;
    size_t end = p + 12 + len;
    if (idat && end > consumed &&
        (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + p + 4, len + 4) != be32(b + p + 8 + len))
      return 0;
    seen_idat |= idat;
    p = end;
  }
  return 0;
}

// The libpng calls, in their own function so that the setjmp frame owns no variables that
// change after setjmp (everything that outlives a longjmp lives in *j).
static int png_run(png_structp png, png_infop info, png_job *j, int64_t max_pixels) {
  if (setjmp(png_jmpbuf(png))) return -1;
  png_set_read_fn(png, j, png_read_bytes);
  // Belt and braces behind vt_png_probe's IHDR check: libpng refuses larger headers itself.
  if (max_pixels > 0) {
    uint32_t lim = max_pixels < 0x7fffffff ? (uint32_t)max_pixels : 0x7fffffffu;
    png_set_user_limits(png, lim, lim);
  }
  png_set_chunk_malloc_max(png, 8u << 20);  // bounds compressed text/ICC chunk bombs
  // Chunks we never use are skipped unread: less work and less parser exposed to bad input.
  static const png_byte skip[] = "tEXt\0zTXt\0iTXt\0iCCP\0sPLT\0eXIf\0tIME\0";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, 0);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, skip, (int)(sizeof skip / 5));
  png_read_info(png, info);
  j->info_done = 1;

  j->width = (int)png_get_image_width(png, info);
  j->height = (int)png_get_image_height(png, info);
  int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);  // v8 = round(v16 * 255 / 65535), not the high byte
  if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  // Alpha (and palette tRNS, which palette expansion turns into alpha) is dropped, as PIL's
  // convert("RGB") does in torchvision's ImageFolder loader. No gamma correction, as PIL.
  png_set_strip_alpha(png);
  int passes = png_set_interlace_handling(png);
  vt_img_clamp_range(&j->x0, &j->x1, j->width);
  vt_img_clamp_range(&j->y0, &j->y1, j->height);
  // Adam7 spreads every row over seven passes: nothing to stop early, so the whole image.
  if (passes > 1) j->x0 = j->y0 = 0, j->x1 = j->width - 1, j->y1 = j->height - 1;
  const int ww = j->x1 - j->x0 + 1, wh = j->y1 - j->y0 + 1;
  const int whole = ww == j->width && wh == j->height;
#ifdef PNG_IGNORE_ADLER32
  // A decode that stops early never reaches the Adler-32 at the end of the compressed stream,
  // so zlib need not compute it (about 5% of the time); the chunks' CRCs are still checked.
  if (j->y1 < j->height - 1) png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
  png_read_update_info(png, info);  // claims the inflate stream: options before it
  size_t rowbytes = png_get_rowbytes(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      rowbytes != (size_t)j->width * 3)
    png_error(png, "unexpected pixel layout after conversion to 8-bit RGB");
  j->rgb = malloc((size_t)ww * (size_t)wh * 3);
  if (whole)
    j->rows = malloc((size_t)j->height * sizeof *j->rows);
  else
    j->scratch = malloc(rowbytes);
  if (!j->rgb || (whole ? !j->rows : !j->scratch)) {
    j->oom = 1;
    png_error(png, "out of memory");
  }
  if (whole) {
    for (int y = 0; y < j->height; y++) j->rows[y] = j->rgb + (size_t)y * rowbytes;
    png_read_image(png, j->rows);
    j->complete = 1;
    png_read_end(png, NULL);
    return 0;
  }
  // Rows above the window are decoded (each row depends on the one before) and dropped; full-
  // width window rows are decoded in place, narrower ones through the scratch row.
  for (int y = 0; y <= j->y1; y++) {
    if (y < j->y0) {
      png_read_row(png, j->scratch, NULL);
      continue;
    }
    uint8_t *dst = j->rgb + (size_t)(y - j->y0) * ww * 3;
    if (ww == j->width) {
      png_read_row(png, dst, NULL);
    } else {
      png_read_row(png, j->scratch, NULL);
      memcpy(dst, j->scratch + (size_t)j->x0 * 3, (size_t)ww * 3);
    }
  }
  if (j->y1 < j->height - 1 && !png_rest_is_sound(j->bytes, j->nbytes, j->pos))
    for (int y = j->y1 + 1; y < j->height; y++) png_read_row(png, j->scratch, NULL);
  j->complete = 1;
  if (j->y1 == j->height - 1) png_read_end(png, NULL);
  return 0;
}

vt_image_status vt_png_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                   const vt_image_region *region, vt_image_part *out, char *err,
                                   size_t errlen) {
  memset(out, 0, sizeof *out);
  vt_image_info pi;
  vt_image_status st = png_header(bytes, nbytes, max_pixels, &pi, err, errlen);
  if (st != VT_IMG_OK) return st;
  png_job j = {.bytes = bytes, .nbytes = nbytes};
  vt_img_rescale_region(region, region->scale, 1, &j.x0, &j.y0, &j.x1, &j.y1);
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    vt_img_set_err(err, errlen, "out of memory starting libpng");
    return VT_IMG_TOO_LARGE;
  }
  int rc = png_run(png, info, &j, max_pixels);
  png_destroy_read_struct(&png, &info, NULL);
  free(j.rows);
  free(j.scratch);
  if (rc == 0 || j.complete) {  // a file cut after its last image row still has every pixel
    out->win.width = j.x1 - j.x0 + 1;
    out->win.height = j.y1 - j.y0 + 1;
    out->win.rgb = j.rgb;
    out->x0 = j.x0;
    out->y0 = j.y0;
    out->scale = 1;
    out->width = out->full_width = j.width;
    out->height = out->full_height = j.height;
    return VT_IMG_OK;
  }
  free(j.rgb);
  if (j.oom) {
    vt_img_set_err(err, errlen, "not enough memory for a %dx%d PNG", j.width, j.height);
    return VT_IMG_TOO_LARGE;
  }
  if (j.eof) {
    vt_img_set_err(err, errlen,
                   "truncated PNG: the file ends after %zu bytes, %s", nbytes,
                   j.info_done ? "inside its image data" : "before the image data");
    return VT_IMG_TRUNCATED;
  }
  vt_img_set_err(err, errlen, "corrupt PNG: %s", j.msg);
  return VT_IMG_CORRUPT;
}
#endif

#ifdef VT_HAVE_PNG
vt_image_status vt_png_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                             vt_image_info *info, char *err, size_t errlen) {
  return png_header(bytes, nbytes, max_pixels, info, err, errlen);
}
#else
static const char no_libpng[] =
    "PNG file, but this vit3d was built without libpng (install libpng-dev, build with "
    "-DVT_PNG=ON)";

vt_image_status vt_png_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                             vt_image_info *info, char *err, size_t errlen) {
  (void)bytes, (void)nbytes, (void)max_pixels;
  memset(info, 0, sizeof *info);
  vt_img_set_err(err, errlen, "%s", no_libpng);
  return VT_IMG_NO_DECODER;
}

vt_image_status vt_png_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                   const vt_image_region *region, vt_image_part *out, char *err,
                                   size_t errlen) {
  (void)bytes, (void)nbytes, (void)max_pixels, (void)region;
  memset(out, 0, sizeof *out);
  vt_img_set_err(err, errlen, "%s", no_libpng);
  return VT_IMG_NO_DECODER;
}
#endif
