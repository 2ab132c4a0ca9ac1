// image.c: bytes to 8-bit RGB. PNG (found by its signature) through libpng, everything else
// through stb_image; either library may be compiled out (VT_HAVE_PNG, VT_HAVE_STB), and then its
// files are VT_IMG_UNSUPPORTED. The only file with these #ifdefs. No MPI, backend or model, and
// no global state: decoder threads call it concurrently.
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef VT_HAVE_PNG
#include <png.h>
#include <setjmp.h>
#endif

#ifdef VT_HAVE_STB
// VT_STB_IMPLEMENTATION: the installed libstb lacks stb_image, so compile it from the system
// header into this file (not STB_IMAGE_STATIC: 2.27 then declares a static function it never
// defines). stb's failure reason is thread-local in C11, as in Debian's libstb.
#ifdef VT_STB_IMPLEMENTATION
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
#endif
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "stb_image.h"
#pragma GCC diagnostic pop
#endif

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#if defined(VT_HAVE_PNG) || defined(VT_HAVE_STB)
// max_pixels <= 0 means no limit of our own (the libraries keep theirs).
static int too_many_pixels(int64_t w, int64_t h, int64_t max_pixels) {
  if (max_pixels <= 0 || w <= 0 || h <= 0) return 0;
  return w > max_pixels / h;  // w * h > max_pixels without overflow (headers reach 2^32 - 1)
}
#endif

static const uint8_t png_signature[8] = {137, 80, 78, 71, 13, 10, 26, 10};

// ---- PNG through libpng ------------------------------------------------------------------------
#ifdef VT_HAVE_PNG
static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct {
  const uint8_t *bytes;
  size_t nbytes, pos;
  int eof;          // the read callback ran out of bytes: the file is truncated
  int oom;          // a pixel buffer could not be allocated
  int complete;     // every row is decoded; later errors (trailing chunks, IEND) do not matter
  char msg[160];    // libpng's error message
  int width, height;
  uint8_t *rgb;     // owned by the caller on every path, including longjmp
  png_bytep *rows;
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

// The libpng calls, in their own function so that the setjmp frame owns no variables that
// change after setjmp (everything that outlives a longjmp lives in *j).
static int png_run(png_structp png, png_infop info, png_job *j, int64_t max_pixels) {
  if (setjmp(png_jmpbuf(png))) return -1;
  png_set_read_fn(png, j, png_read_bytes);
  // Belt and braces behind the IHDR check of png_decode: libpng refuses larger headers itself.
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
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  size_t rowbytes = png_get_rowbytes(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      rowbytes != (size_t)j->width * 3)
    png_error(png, "unexpected pixel layout after conversion to 8-bit RGB");

  j->rgb = malloc((size_t)j->width * (size_t)j->height * 3);
  j->rows = malloc((size_t)j->height * sizeof *j->rows);
  if (!j->rgb || !j->rows) {
    j->oom = 1;
    png_error(png, "out of memory");
  }
  for (int y = 0; y < j->height; y++) j->rows[y] = j->rgb + (size_t)y * rowbytes;
  png_read_image(png, j->rows);
  j->complete = 1;
  png_read_end(png, NULL);
  return 0;
}

static vt_image_status png_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image *out, char *err, size_t errlen) {
  // The IHDR must be the first chunk, so a bomb is refused here, before libpng allocates.
  if (nbytes >= 24 && memcmp(bytes + 12, "IHDR", 4) == 0) {
    int64_t w = be32(bytes + 16), h = be32(bytes + 20);
    if (too_many_pixels(w, h, max_pixels)) {
      set_err(err, errlen, "PNG of %lldx%lld pixels is over the limit of %lld pixels",
              (long long)w, (long long)h, (long long)max_pixels);
      return VT_IMG_TOO_LARGE;
    }
  }
  png_job j = {.bytes = bytes, .nbytes = nbytes};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    set_err(err, errlen, "out of memory starting libpng");
    return VT_IMG_TOO_LARGE;
  }
  int rc = png_run(png, info, &j, max_pixels);
  png_destroy_read_struct(&png, &info, NULL);
  free(j.rows);
  if (rc == 0 || j.complete) {  // a file cut after its last image row still has every pixel
    out->width = j.width;
    out->height = j.height;
    out->rgb = j.rgb;
    return VT_IMG_OK;
  }
  free(j.rgb);
  if (j.oom) {
    set_err(err, errlen, "not enough memory for a %dx%d PNG", j.width, j.height);
    return VT_IMG_TOO_LARGE;
  }
  if (j.eof) {
    set_err(err, errlen, "truncated PNG: the file ends after %zu bytes, before the image data",
            nbytes);
    return VT_IMG_TRUNCATED;
  }
  set_err(err, errlen, "corrupt PNG: %s", j.msg);
  return VT_IMG_CORRUPT;
}
#else
static vt_image_status png_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image *out, char *err, size_t errlen) {
  (void)bytes, (void)nbytes, (void)max_pixels, (void)out;
  set_err(err, errlen,
          "PNG file, but this vit3d was built without libpng (install libpng-dev, build with "
          "-DVT_PNG=ON)");
  return VT_IMG_UNSUPPORTED;
}
#endif

// ---- everything else through stb_image ---------------------------------------------------------
// The formats handed to stb_image, found by their signatures. stb_image also reads TGA (which has
// no signature, so damaged files of any kind would decode as noise), PSD, PIC and HDR (tone-
// mapped); those are refused as unsupported: rare as training data, and less of stb_image's
// parsers exposed to bad input.
static const char *sniff_format(const uint8_t *b, size_t n) {
  if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "JPEG";
  if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return "GIF";
  if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "BMP";
  if (n >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) return "PNM";
  return NULL;
}

#ifdef VT_HAVE_STB
// Walks a JPEG's segments as stb_image reads them, to catch what stb_image 2.27 (Debian 12) does
// not: a cut stream (decoded as if the missing data were zeros, without an error), a Huffman
// table of more than 256 codes (written past its tables) and a scan that uses a Huffman table the
// file never defined (read uninitialised, which trips its assert). The last two are fuzzer finds.
// Segments are skipped by their length, so an EXIF thumbnail's markers are never seen; entropy-
// coded data ends at the first marker that is not a stuffed 0xFF00 or a restart marker.
// It also bounds the scans: each scan of a progressive JPEG walks every block again, so a small
// file with thousands of scans would take minutes (real encoders write about 10).
enum { JPEG_COMPLETE = 1, JPEG_CUT = 0, JPEG_BIG_TABLE = -1, JPEG_NO_TABLE = -2 };
enum { JPEG_TOO_MANY_SCANS = -3, JPEG_MAX_SCANS = 100 };

static int jpeg_walk(const uint8_t *b, size_t n) {
#define AT(i) ((i) < n ? b[i] : 0)  // stb_image reads zeros past the end
  size_t p = 2;
  unsigned defined = 0;  // bit 4 * class + id: Huffman tables seen so far
  int progressive = 0, scans = 0;
  while (p + 1 < n) {
    if (b[p] != 0xFF || b[p + 1] == 0xFF) {  // fill bytes and garbage between segments
      p++;
      continue;
    }
    uint8_t m = b[p + 1];
    if (m == 0xD9) return JPEG_COMPLETE;
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7) || m == 0x00) {  // markers without a length
      p += 2;
      continue;
    }
    if (p + 3 >= n) return JPEG_CUT;
    size_t len = (size_t)b[p + 2] << 8 | b[p + 3];
    if (m == 0xC2) progressive = 1;
    if (m == 0xC4) {  // DHT: tables of (class/id, 16 counts, sum(counts) symbols)
      size_t q = p + 4;
      for (long left = (long)len - 2; left > 0;) {
        unsigned codes = 0;
        for (int i = 0; i < 16; i++) codes += AT(q + 1 + i);
        if (codes > 256) return JPEG_BIG_TABLE;
        defined |= 1u << ((AT(q) >> 4) * 4 + (AT(q) & 15)) % 32;
        q += 17 + codes;
        left -= 17 + (long)codes;
      }
    }
    if (m == 0xDA) {  // SOS: (component, DC/AC table) pairs, then spectral range and bits
      if (++scans > JPEG_MAX_SCANS) return JPEG_TOO_MANY_SCANS;
      int ncomp = AT(p + 4);
      size_t tail = p + 5 + 2 * (size_t)ncomp;
      int ss = AT(tail), ah = AT(tail + 2) >> 4;
      for (int i = 0; i < ncomp; i++) {
        int sel = AT(p + 6 + 2 * (size_t)i), dc = sel >> 4, ac = sel & 15;
        int need_dc = !progressive || (ss == 0 && ah == 0), need_ac = !progressive || ss > 0;
        if ((need_dc && dc < 4 && !(defined >> dc & 1)) ||
            (need_ac && ac < 4 && !(defined >> (4 + ac) & 1)))
          return JPEG_NO_TABLE;
      }
    }
    p += 2 + len;
    if (m != 0xDA) continue;
    while (p + 1 < n && !(b[p] == 0xFF && b[p + 1] != 0x00 && b[p + 1] != 0xFF &&
                          !(b[p + 1] >= 0xD0 && b[p + 1] <= 0xD7)))
      p++;
  }
  return JPEG_CUT;
#undef AT
}

static vt_image_status stb_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image *out, char *err, size_t errlen) {
  const char *fmt = sniff_format(bytes, nbytes);
  if (nbytes > INT_MAX) {
    set_err(err, errlen, "file of %zu bytes is larger than any image vit3d decodes", nbytes);
    return VT_IMG_TOO_LARGE;
  }
  if (!fmt) {
    set_err(err, errlen, "not an image vit3d can decode (PNG, JPEG, GIF, BMP, PNM)");
    return VT_IMG_UNSUPPORTED;
  }
  int is_jpeg = strcmp(fmt, "JPEG") == 0;
  int walk = is_jpeg ? jpeg_walk(bytes, nbytes) : JPEG_COMPLETE;
  if (walk < 0) {  // before stb_image sees it, info included
    set_err(err, errlen, "corrupt JPEG: %s",
            walk == JPEG_BIG_TABLE ? "a Huffman table of more than 256 codes"
            : walk == JPEG_NO_TABLE ? "a scan uses a Huffman table the file does not define"
                                    : "more than 100 scans");
    return VT_IMG_CORRUPT;
  }
  int w = 0, h = 0, c = 0;
  // The header alone first, so a bomb is refused before stb_image allocates its pixels.
  if (!stbi_info_from_memory(bytes, (int)nbytes, &w, &h, &c)) {
    if (walk == JPEG_CUT) {
      set_err(err, errlen, "truncated %s: the file ends after %zu bytes, inside the header", fmt,
              nbytes);
      return VT_IMG_TRUNCATED;
    }
    set_err(err, errlen, "corrupt %s header", fmt);
    return VT_IMG_CORRUPT;
  }
  if (too_many_pixels(w, h, max_pixels)) {
    set_err(err, errlen, "%s of %dx%d pixels is over the limit of %lld pixels", fmt, w, h,
            (long long)max_pixels);
    return VT_IMG_TOO_LARGE;
  }
  if (walk == JPEG_CUT) {
    set_err(err, errlen, "truncated JPEG: the file ends after %zu bytes, before its end marker",
            nbytes);
    return VT_IMG_TRUNCATED;
  }
  int w2 = 0, h2 = 0;
  uint8_t *px = stbi_load_from_memory(bytes, (int)nbytes, &w2, &h2, &c, 3);
  if (!px) {
    const char *why = stbi_failure_reason();  // thread-local in stb_image for C11 builds
    set_err(err, errlen, "corrupt %s: %s", fmt, why ? why : "decoder failed");
    return VT_IMG_CORRUPT;
  }
  if (w2 != w || h2 != h) {  // never seen; would break the max_pixels guarantee
    free(px);
    set_err(err, errlen, "corrupt %s: size changed between header and data", fmt);
    return VT_IMG_CORRUPT;
  }
  // stbi_image_free is free() unless STBI_FREE is redefined (neither the Debian build nor ours
  // does), so the buffer is handed on as it is, without a copy; vt_image_free frees it.
  out->width = w;
  out->height = h;
  out->rgb = px;
  return VT_IMG_OK;
}
#else
static vt_image_status stb_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image *out, char *err, size_t errlen) {
  (void)max_pixels, (void)out;
  const char *fmt = sniff_format(bytes, nbytes);
  if (fmt)
    set_err(err, errlen,
            "%s file, but this vit3d was built without stb_image (install libstb-dev, build "
            "with -DVT_STB=ON)", fmt);
  else
    set_err(err, errlen, "not an image vit3d can decode (PNG; built without stb_image for JPEG)");
  return VT_IMG_UNSUPPORTED;
}
#endif

vt_image_status vt_image_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                vt_image *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  set_err(err, errlen, "%s", "");
  if (nbytes == 0 || !bytes) {
    set_err(err, errlen, "empty file");
    return VT_IMG_EMPTY;
  }
  if (nbytes < 8 && memcmp(bytes, png_signature, nbytes) == 0) {
    set_err(err, errlen, "truncated PNG: the file ends after %zu bytes, inside the signature",
            nbytes);
    return VT_IMG_TRUNCATED;
  }
  if (nbytes >= 8 && memcmp(bytes, png_signature, 8) == 0)
    return png_decode(bytes, nbytes, max_pixels, out, err, errlen);
  return stb_decode(bytes, nbytes, max_pixels, out, err, errlen);
}

vt_image_status vt_image_load(const char *path, int64_t max_pixels, vt_image *out, char *err,
                              size_t errlen) {
  memset(out, 0, sizeof *out);
  set_err(err, errlen, "%s", "");
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return VT_IMG_UNREADABLE;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s: not a regular file", path);
    close(fd);
    return VT_IMG_UNREADABLE;
  }
  if (st.st_size == 0) {
    set_err(err, errlen, "%s: empty file", path);
    close(fd);
    return VT_IMG_EMPTY;
  }
  // No format needs more than 8 bytes a pixel (16-bit RGBA, uncompressed), so a much bigger
  // file is refused before it is read into memory.
  int64_t cap = max_pixels > 0 ? 16 * max_pixels + (64 << 20) : INT64_MAX;
  if ((int64_t)st.st_size > cap) {
    set_err(err, errlen, "%s: file of %lld bytes is over what --max-image-pixels allows", path,
            (long long)st.st_size);
    close(fd);
    return VT_IMG_TOO_LARGE;
  }
  size_t n = (size_t)st.st_size, got = 0;
  uint8_t *buf = malloc(n);
  if (!buf) {
    set_err(err, errlen, "%s: not enough memory to read %zu bytes", path, n);
    close(fd);
    return VT_IMG_TOO_LARGE;
  }
  const char *why_short = "the file shrank while it was read";
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) why_short = strerror(errno);  // EIO, EISDIR...
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got < n) {
    set_err(err, errlen, "%s: read %zu of %zu bytes: %s", path, got, n, why_short);
    free(buf);
    return VT_IMG_UNREADABLE;
  }
  char why[256];
  vt_image_status s = vt_image_decode(buf, n, max_pixels, out, why, sizeof why);
  free(buf);
  if (s != VT_IMG_OK) set_err(err, errlen, "%s: %s", path, why);
  return s;
}

void vt_image_free(vt_image *img) {
  if (!img) return;
  free(img->rgb);
  img->rgb = NULL;
  img->width = img->height = 0;
}

const char *vt_image_status_name(vt_image_status s) {
  switch (s) {
    case VT_IMG_OK: return "ok";
    case VT_IMG_UNREADABLE: return "unreadable";
    case VT_IMG_EMPTY: return "empty";
    case VT_IMG_TRUNCATED: return "truncated";
    case VT_IMG_CORRUPT: return "corrupt";
    case VT_IMG_UNSUPPORTED: return "unsupported";
    case VT_IMG_TOO_LARGE: return "too large";
  }
  return "unknown";
}
