// image.c: bytes to 8-bit RGB: finds the format by its signature and hands the bytes to the PNG
// decoder (image_png.c, libpng), the JPEG decoder (image_jpeg.c, libjpeg-turbo), the WebP decoder
// (image_webp.c, libwebp) or stb_image (here: GIF, BMP, PNM, and JPEG in builds without libjpeg);
// any of the libraries may be compiled out (VT_HAVE_PNG, VT_HAVE_JPEG, VT_HAVE_WEBP,
// VT_HAVE_STB), and then its files are VT_IMG_NO_DECODER. These four files are the only ones
// with those #ifdefs. Also reading files, and the probe and part
// entry points of image.h. No MPI, backend or model, and no global state: decoder threads call
// it concurrently.
#include "image.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_internal.h"

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

#ifdef VT_HAVE_JPEG
#define HAVE_JPEG 1
#else
#define HAVE_JPEG 0
#endif

void vt_img_set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}
#define set_err vt_img_set_err

static const uint8_t png_signature[8] = {137, 80, 78, 71, 13, 10, 26, 10};

static vt_image_format sniff(const uint8_t *b, size_t n) {
  if (n >= 8 && memcmp(b, png_signature, 8) == 0) return VT_FMT_PNG;
  if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return VT_FMT_JPEG;
  if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return VT_FMT_WEBP;
  if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return VT_FMT_GIF;
  if (n >= 2 && b[0] == 'B' && b[1] == 'M') return VT_FMT_BMP;
  if (n >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) return VT_FMT_PNM;
  return VT_FMT_UNKNOWN;
}

// ---- GIF, BMP, PNM (and JPEG without libjpeg) through stb_image -------------------------------
// The formats handed to stb_image, found by their signatures. stb_image also reads TGA (which has
// no signature, so damaged files of any kind would decode as noise), PSD, PIC and HDR (tone-
// mapped); those are refused as unsupported: rare as training data, and less of stb_image's
// parsers exposed to bad input.
static const char *sniff_format(const uint8_t *b, size_t n) {
  switch (sniff(b, n)) {
    case VT_FMT_JPEG: return "JPEG";
    case VT_FMT_GIF: return "GIF";
    case VT_FMT_BMP: return "BMP";
    case VT_FMT_PNM: return "PNM";
    default: return NULL;
  }
}

#ifdef VT_HAVE_STB
// Walks a JPEG's segments as stb_image reads them, to catch what stb_image 2.27 (Debian 12) does
// not: a cut stream (decoded as if the missing data were zeros, without an error), a Huffman
// table of more than 256 codes (written past its tables), a scan that uses a Huffman table the
// file never defined (read uninitialised, which trips its assert), and a component whose
// quantization table is never defined or whose DC coefficients no scan carries (dequantised or
// transformed from uninitialised memory: pixels that change from run to run, against the
// determinism contract). The last four are fuzzer finds.
// Segments are skipped by their length, so an EXIF thumbnail's markers are never seen; entropy-
// coded data ends at the first marker that is not a stuffed 0xFF00 or a restart marker.
// It also bounds the scans: each scan of a progressive JPEG walks every block again, so a small
// file with thousands of scans would take minutes (real encoders write about 10).
enum { JPEG_COMPLETE = 1, JPEG_CUT = 0, JPEG_BIG_TABLE = -1, JPEG_NO_TABLE = -2 };
enum { JPEG_TOO_MANY_SCANS = -3, JPEG_NO_QTABLE = -4, JPEG_NO_DC = -5, JPEG_MAX_SCANS = 100 };

static int jpeg_walk(const uint8_t *b, size_t n) {
#define AT(i) ((i) < n ? b[i] : 0)  // stb_image reads zeros past the end
  size_t p = 2;
  unsigned defined = 0;  // bit 4 * class + id: Huffman tables seen so far
  unsigned qdefined = 0, qused = 0;  // bit id: quantization tables defined, used by the frame
  int ids[4], nids = 0;  // the frame's component ids
  unsigned dc_seen = 0;  // bit k: a scan has carried the DC coefficients of frame component k
  int progressive = 0, scans = 0;
  while (p + 1 < n) {
    if (b[p] != 0xFF || b[p + 1] == 0xFF) {  // fill bytes and garbage between segments
      p++;
      continue;
    }
    uint8_t m = b[p + 1];
    if (m == 0xD9) return dc_seen == (1u << nids) - 1 ? JPEG_COMPLETE : JPEG_NO_DC;
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7) || m == 0x00) {  // markers without a length
      p += 2;
      continue;
    }
    if (p + 3 >= n) return JPEG_CUT;
    size_t len = (size_t)b[p + 2] << 8 | b[p + 3];
    if (m == 0xC2) progressive = 1;
    if (m == 0xC0 || m == 0xC1 || m == 0xC2)  // SOF: (id, sampling, quantization table) each
      for (int i = nids = 0, nc = AT(p + 9); i < nc && i < 4; i++) {
        ids[nids++] = AT(p + 10 + 3 * (size_t)i);
        qused |= 1u << (AT(p + 12 + 3 * (size_t)i) & 15);
      }
    if (m == 0xDB) {  // DQT: tables of (precision/id, 64 or 128 values)
      size_t q = p + 4;
      for (long left = (long)len - 2; left > 0;) {
        int pq = AT(q) >> 4;
        qdefined |= 1u << (AT(q) & 15);
        q += 1 + (pq ? 128 : 64);
        left -= 1 + (pq ? 128 : 64);
      }
    }
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
      if (qused & ~qdefined) return JPEG_NO_QTABLE;
      int ncomp = AT(p + 4);
      size_t tail = p + 5 + 2 * (size_t)ncomp;
      int ss = AT(tail), ah = AT(tail + 2) >> 4;
      for (int i = 0; i < ncomp; i++) {
        for (int k = 0; k < nids; k++)  // a first DC scan (baseline: every scan) zeroes blocks
          if (ids[k] == AT(p + 5 + 2 * (size_t)i) && ss == 0 && ah == 0) dc_seen |= 1u << k;
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

// The header checks: format, the JPEG walk, stb_image's header parse, the pixel limit.
static vt_image_status stb_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                 int *width, int *height, char *err, size_t errlen) {
  const char *fmt = sniff_format(bytes, nbytes);
  if (nbytes > INT_MAX) {
    set_err(err, errlen, "file of %zu bytes is larger than any image vit3d decodes", nbytes);
    return VT_IMG_TOO_LARGE;
  }
  if (!fmt) {
    set_err(err, errlen, "not an image vit3d can decode (PNG, JPEG, WebP, GIF, BMP, PNM)");
    return VT_IMG_UNSUPPORTED;
  }
  int is_jpeg = strcmp(fmt, "JPEG") == 0;
  int walk = is_jpeg ? jpeg_walk(bytes, nbytes) : JPEG_COMPLETE;
  if (walk < 0) {  // before stb_image sees it, info included
    set_err(err, errlen, "corrupt JPEG: %s",
            walk == JPEG_BIG_TABLE   ? "a Huffman table of more than 256 codes"
            : walk == JPEG_NO_TABLE  ? "a scan uses a Huffman table the file does not define"
            : walk == JPEG_NO_QTABLE ? "a component uses a quantization table the file does not "
                                       "define"
            : walk == JPEG_NO_DC     ? "a component whose DC coefficients no scan carries"
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
  if (vt_img_too_many_pixels(w, h, max_pixels)) {
    set_err(err, errlen, "%s of %dx%d pixels is over the limit of %lld pixels", fmt, w, h,
            (long long)max_pixels);
    return VT_IMG_TOO_LARGE;
  }
  if (walk == JPEG_CUT) {
    set_err(err, errlen, "truncated JPEG: the file ends after %zu bytes, before its end marker",
            nbytes);
    return VT_IMG_TRUNCATED;
  }
  *width = w;
  *height = h;
  return VT_IMG_OK;
}

static vt_image_status stb_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image *out, char *err, size_t errlen) {
  int w = 0, h = 0, c = 0;
  vt_image_status st = stb_probe(bytes, nbytes, max_pixels, &w, &h, err, errlen);
  if (st != VT_IMG_OK) return st;
  const char *fmt = sniff_format(bytes, nbytes);
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
static vt_image_status stb_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                 int *width, int *height, char *err, size_t errlen) {
  (void)max_pixels, (void)width, (void)height;
  const char *fmt = sniff_format(bytes, nbytes);
  if (fmt) {
    set_err(err, errlen,
            "%s file, but this vit3d was built without stb_image (install libstb-dev, build "
            "with -DVT_STB=ON)", fmt);
    return VT_IMG_NO_DECODER;
  }
  set_err(err, errlen, "not an image vit3d can decode (%s; built without stb_image)",
          HAVE_JPEG ? "PNG, JPEG, WebP" : "PNG, WebP");
  return VT_IMG_UNSUPPORTED;
}

static vt_image_status stb_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                  vt_image *out, char *err, size_t errlen) {
  (void)out;
  int w, h;
  return stb_probe(bytes, nbytes, max_pixels, &w, &h, err, errlen);
}
#endif

// ---- entry points --------------------------------------------------------------------------------
// The checks before any decoder: empty, or the start of a PNG signature only. 1: go on.
static int precheck(const uint8_t *bytes, size_t nbytes, vt_image_status *st, char *err,
                    size_t errlen) {
  set_err(err, errlen, "%s", "");
  if (nbytes == 0 || !bytes) {
    set_err(err, errlen, "empty file");
    *st = VT_IMG_EMPTY;
    return 0;
  }
  if (nbytes < 8 && memcmp(bytes, png_signature, nbytes) == 0) {
    set_err(err, errlen, "truncated PNG: the file ends after %zu bytes, inside the signature",
            nbytes);
    *st = VT_IMG_TRUNCATED;
    return 0;
  }
  return 1;
}

vt_image_status vt_image_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                               vt_image_info *info, char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  vt_image_status st;
  if (!precheck(bytes, nbytes, &st, err, errlen)) return st;
  vt_image_format f = sniff(bytes, nbytes);
  if (f == VT_FMT_PNG) return vt_png_probe(bytes, nbytes, max_pixels, info, err, errlen);
  if (f == VT_FMT_WEBP) return vt_webp_probe(bytes, nbytes, max_pixels, info, err, errlen);
#ifdef VT_HAVE_JPEG
  if (f == VT_FMT_JPEG) return vt_jpeg_probe(bytes, nbytes, max_pixels, info, err, errlen);
#endif
  int w = 0, h = 0;
  st = stb_probe(bytes, nbytes, max_pixels, &w, &h, err, errlen);
  if (st == VT_IMG_OK) *info = (vt_image_info){f, w, h, 1};
  return st;
}

vt_image_status vt_image_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                     const vt_image_region *region, vt_image_part *out,
                                     char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  vt_image_status st;
  if (!precheck(bytes, nbytes, &st, err, errlen)) return st;
  vt_image_format f = sniff(bytes, nbytes);
  if (f == VT_FMT_PNG)
    return vt_png_decode_part(bytes, nbytes, max_pixels, region, out, err, errlen);
  if (f == VT_FMT_WEBP)
    return vt_webp_decode_part(bytes, nbytes, max_pixels, region, out, err, errlen);
#ifdef VT_HAVE_JPEG
  if (f == VT_FMT_JPEG)
    return vt_jpeg_decode_part(bytes, nbytes, max_pixels, region, out, err, errlen);
#endif
  // stb_image decodes whole images only: the window is the image, at scale 1.
  st = stb_decode(bytes, nbytes, max_pixels, &out->win, err, errlen);
  if (st != VT_IMG_OK) return st;
  out->scale = 1;
  out->width = out->full_width = out->win.width;
  out->height = out->full_height = out->win.height;
  return VT_IMG_OK;
}

vt_image_status vt_image_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                vt_image *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  vt_image_region whole = vt_img_whole_region();
  vt_image_part part;
  vt_image_status st = vt_image_decode_part(bytes, nbytes, max_pixels, &whole, &part, err, errlen);
  if (st != VT_IMG_OK) return st;
  if (part.x0 != 0 || part.y0 != 0 || part.win.width != part.width ||
      part.win.height != part.height) {  // never: a whole region gives the whole image
    vt_image_part_free(&part);
    set_err(err, errlen, "internal error: a whole decode returned a window");
    return VT_IMG_CORRUPT;
  }
  *out = part.win;
  return VT_IMG_OK;
}

vt_image_status vt_image_read_file(const char *path, int64_t max_pixels, uint8_t **bytes,
                                   size_t *nbytes, char *err, size_t errlen) {
  *bytes = NULL;
  *nbytes = 0;
  set_err(err, errlen, "%s", "");
  // O_NONBLOCK: opening a FIFO (a list file may name one) would wait for a writer for ever; it
  // changes nothing for the regular files read here.
  int fd = open(path, O_RDONLY | O_NONBLOCK);
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
  *bytes = buf;
  *nbytes = n;
  return VT_IMG_OK;
}

vt_image_status vt_image_load(const char *path, int64_t max_pixels, vt_image *out, char *err,
                              size_t errlen) {
  memset(out, 0, sizeof *out);
  uint8_t *buf;
  size_t n;
  vt_image_status s = vt_image_read_file(path, max_pixels, &buf, &n, err, errlen);
  if (s != VT_IMG_OK) return s;
  char why[256];
  s = vt_image_decode(buf, n, max_pixels, out, why, sizeof why);
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

void vt_image_part_free(vt_image_part *part) {
  if (part) vt_image_free(&part->win);
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
    case VT_IMG_NO_DECODER: return "no decoder in this build";
  }
  return "unknown";
}

const char *vt_image_webp_decoder(void) { return vt_webp_version(); }

void vt_image_decoders(char *buf, size_t size) {
#ifdef VT_HAVE_PNG
  const char *png = "libpng";
#else
  const char *png = "none";
#endif
#ifdef VT_HAVE_STB
  const char *stb = "stb_image";
#else
  const char *stb = "none";
#endif
  snprintf(buf, size, "PNG %s, JPEG %s, WebP %s, GIF/BMP/PNM %s", png, vt_image_jpeg_decoder(),
           vt_image_webp_decoder(), stb);
}

const char *vt_image_decoder_missing(const char *name) {
#ifdef VT_HAVE_PNG
  const int png = 1;
#else
  const int png = 0;
#endif
#ifdef VT_HAVE_STB
  const int stb = 1;
#else
  const int stb = 0;
#endif
  const int webp = strcmp(vt_webp_version(), "none") != 0;
  const char *dot = strrchr(name, '.');
  char ext[8] = "";
  for (int i = 0; dot && i < 7 && dot[1 + i] && dot[1 + i] != '/'; i++)
    ext[i] = (char)tolower((unsigned char)dot[1 + i]), ext[i + 1] = '\0';
  if (!strcmp(ext, "png")) return png ? NULL : "libpng (PNG files)";
  if (!strcmp(ext, "jpg") || !strcmp(ext, "jpeg"))
    return HAVE_JPEG || stb ? NULL : "libjpeg-turbo or stb_image (JPEG files)";
  if (!strcmp(ext, "webp")) return webp ? NULL : "libwebp (WebP files)";
  if (!strcmp(ext, "gif") || !strcmp(ext, "bmp") || !strcmp(ext, "ppm") ||
      !strcmp(ext, "pgm") || !strcmp(ext, "pnm"))
    return stb ? NULL : "stb_image (GIF, BMP and PNM files)";
  return NULL;
}

const char *vt_image_jpeg_decoder(void) {
#if defined(VT_HAVE_JPEG)
  return vt_jpeg_version();
#elif defined(VT_HAVE_STB)
  return "stb_image";
#else
  return "none";
#endif
}
