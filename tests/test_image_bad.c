// test_image_bad.c: the bad-input half of test_image (label data): truncated, CRC-damaged and
// zlib-damaged PNGs, empty, missing and text files, pixel bombs in PNG, JPEG, BMP and GIF headers,
// JPEGs cut or with broken Huffman tables, random damage; then decoding from several threads.
// Every failure must be a status with a message and no pixels, never a crash.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "sample.h"
#include "test_image.h"

// ---- bad input ---------------------------------------------------------------------------------
// Decodes and checks the invariants every status must keep: pixels exactly when OK, none else.
static vt_image_status status_of(const uint8_t *b, size_t n, int64_t limit, vt_image *keep) {
  vt_image im;
  char err[256];
  vt_image_status st = vt_image_decode(b, n, limit, &im, err, sizeof err);
  if (st == VT_IMG_OK)
    EXPECT(im.rgb && im.width > 0 && im.height > 0 && (int64_t)im.width * im.height <= limit,
           "OK without sane pixels");
  else
    EXPECT(!im.rgb && err[0], "status %s: pixels %p, message '%s'", vt_image_status_name(st),
           (void *)im.rgb, err);
  if (keep)
    *keep = im;
  else
    vt_image_free(&im);
  return st;
}

typedef struct {
  size_t off;  // of the length field
  uint32_t len;
  char type[5];
} chunk;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static void fix_crc(uint8_t *b, const chunk *c) {
  put32(b + c->off + 8 + c->len, (uint32_t)crc32(0, b + c->off + 4, c->len + 4));
}

static int chunks_of(const uint8_t *b, size_t n, chunk *out, int max) {
  int k = 0;
  for (size_t p = 8; p + 12 <= n && k < max; k++) {
    out[k].off = p;
    out[k].len = be32(b + p);
    memcpy(out[k].type, b + p + 4, 4);
    out[k].type[4] = 0;
    p += 12 + out[k].len;
  }
  return k;
}

static void test_png_damage(void) {
  png_case pc = {PNG_COLOR_TYPE_RGB, 8, 40, 30, 0, 0, 1};
  char path[128];
  snprintf(path, sizeof path, "%s/damage.png", dir);
  write_png(path, &pc);
  size_t n = 0;
  uint8_t *good = read_all(path, &n), *b = malloc(n);
  chunk ch[64];
  int nch = chunks_of(good, n, ch, 64), nidat = 0;
  size_t idat_end = 0;
  for (int i = 0; i < nch; i++)
    if (strcmp(ch[i].type, "IDAT") == 0) idat_end = ch[i].off + 12 + ch[i].len, nidat++;
  EXPECT(nidat >= 3, "want several IDAT chunks, got %d", nidat);

  // Every cut before the end of the last IDAT is truncated; after it every pixel is there.
  int cuts_bad = 0, cuts_ok = 0;
  for (size_t cut = 1; cut < n; cut++) {
    vt_image im;
    vt_image_status st = status_of(good, cut, LIMIT, &im);
    if (cut < idat_end)
      cuts_bad += st == VT_IMG_TRUNCATED;
    else
      cuts_ok += st == VT_IMG_OK && check_png_pixels(&pc, &im);
    vt_image_free(&im);
  }
  EXPECT(cuts_bad == (int)idat_end - 1 && cuts_ok == (int)(n - idat_end),
         "cuts: %d of %zu truncated, %d of %zu complete", cuts_bad, idat_end - 1, cuts_ok,
         n - idat_end);
  printf("png truncation: %d cuts truncated, %d cuts after the last IDAT decoded in full\n",
         cuts_bad, cuts_ok);

  // Critical chunks with a bad CRC, or with a good CRC over damaged zlib data, are corrupt;
  // a bad CRC on an ancillary chunk (gAMA, zTXt) is ignored as libpng does.
  int corrupt = 0, flips = 0, ancillary_ok = 0, nanc = 0;
  for (int i = 0; i < nch; i++) {
    memcpy(b, good, n);
    b[ch[i].off + 8 + ch[i].len] ^= 0x20;  // the CRC
    vt_image_status st = status_of(b, n, LIMIT, NULL);
    if (strcmp(ch[i].type, "IHDR") == 0 || strcmp(ch[i].type, "IDAT") == 0)
      corrupt += st == VT_IMG_CORRUPT, flips++;
    else if (strcmp(ch[i].type, "IEND") != 0)
      ancillary_ok += st == VT_IMG_OK, nanc++;
  }
  EXPECT(corrupt == flips && ancillary_ok == nanc, "CRC: %d/%d critical corrupt, %d/%d ok",
         corrupt, flips, ancillary_ok, nanc);
  int zlib_bad = 0, zlib_flips = 0;
  for (int i = 0; i < nch; i++) {
    if (strcmp(ch[i].type, "IDAT") != 0) continue;
    for (uint32_t k = 0; k < ch[i].len; k++) {
      memcpy(b, good, n);
      b[ch[i].off + 8 + k] ^= (uint8_t)(1u << (k % 8));
      fix_crc(b, &ch[i]);
      vt_image im;
      vt_image_status st = status_of(b, n, LIMIT, &im);
      zlib_flips++;
      // A flip may survive inflate; then the Adler-32 of the stream must catch it.
      zlib_bad += st == VT_IMG_CORRUPT;
      EXPECT(st == VT_IMG_CORRUPT || (st == VT_IMG_OK && check_png_pixels(&pc, &im)),
             "IDAT byte %u flipped: %s", k, vt_image_status_name(st));
      vt_image_free(&im);
    }
  }
  printf("png damage: %d/%d bad CRCs corrupt, %d/%d flipped IDAT bytes (CRC fixed) corrupt\n",
         corrupt, flips, zlib_bad, zlib_flips);

  // Pixel limit: exactly at the limit decodes, one under refuses before allocating.
  EXPECT(status_of(good, n, 40 * 30, NULL) == VT_IMG_OK, "at the limit");
  EXPECT(status_of(good, n, 40 * 30 - 1, NULL) == VT_IMG_TOO_LARGE, "over the limit");
  // A decompression bomb: a 100000 x 100000 header with a tiny IDAT.
  memcpy(b, good, n);
  put32(b + 16, 100000);
  put32(b + 20, 100000);
  fix_crc(b, &ch[0]);
  char err[256];
  vt_image im;
  EXPECT(vt_image_decode(b, n, LIMIT, &im, err, sizeof err) == VT_IMG_TOO_LARGE &&
             strstr(err, "100000x100000"), "bomb: %s", err);
  free(b);
  free(good);
}

static void test_other_bad(void) {
  char path[128], err[256];
  vt_image im;
  vt_image_status st;
  // Empty, missing, a directory, a text file: statuses and the path in the message.
  EXPECT(status_of(NULL, 0, LIMIT, NULL) == VT_IMG_EMPTY, "empty buffer");
  snprintf(path, sizeof path, "%s/empty.png", dir);
  write_all(path, "", 0);
  EXPECT(vt_image_load(path, LIMIT, &im, err, sizeof err) == VT_IMG_EMPTY && strstr(err, path),
         "empty file: %s", err);
  snprintf(path, sizeof path, "%s/missing.png", dir);
  EXPECT(vt_image_load(path, LIMIT, &im, err, sizeof err) == VT_IMG_UNREADABLE, "missing: %s", err);
  EXPECT(vt_image_load(dir, LIMIT, &im, err, sizeof err) == VT_IMG_UNREADABLE, "dir: %s", err);
  // A FIFO (a list file may name one) is refused at once: opening it must not wait for a writer.
  snprintf(path, sizeof path, "%s/fifo.png", dir);
  EXPECT(mkfifo(path, 0600) == 0 &&
             vt_image_load(path, LIMIT, &im, err, sizeof err) == VT_IMG_UNREADABLE &&
             strstr(err, "not a regular file"), "a FIFO: %s", err);
  static const char text[] = "class,label\nshirt,6\nThis is a text file, not an image.\n";
  snprintf(path, sizeof path, "%s/notes.jpg", dir);
  write_all(path, text, sizeof text - 1);
  EXPECT(vt_image_load(path, LIMIT, &im, err, sizeof err) == VT_IMG_UNSUPPORTED, "text: %s", err);
  printf("text file: %s\n", err);

  // JPEG: every cut is truncated (from 3 bytes on it is recognisably a JPEG).
  size_t n = flat_jpeg_len;
  uint8_t *b = malloc(n);
  int cuts = 0;
  for (size_t cut = 1; cut < n; cut++) {
    vt_image_status st = status_of(flat_jpeg, cut, LIMIT, NULL);
    cuts += cut < 3 ? st != VT_IMG_OK : st == VT_IMG_TRUNCATED;
  }
  EXPECT(cuts == (int)n - 1, "jpeg cuts: %d of %zu refused as truncated", cuts, n - 1);
  size_t sof = 0;
  for (size_t i = 2; i + 9 < n && !sof; i++)
    if (flat_jpeg[i] == 0xFF && flat_jpeg[i + 1] == 0xC0) sof = i;
  memcpy(b, flat_jpeg, n);
  b[sof + 5] = b[sof + 7] = 0xEA;  // 60000 x 60000
  b[sof + 6] = b[sof + 8] = 0x60;
  EXPECT(status_of(b, n, LIMIT, NULL) == VT_IMG_TOO_LARGE, "jpeg bomb");
  memcpy(b, flat_jpeg, n);
  b[sof + 9] = 0;  // no components
  EXPECT(status_of(b, n, LIMIT, NULL) == VT_IMG_CORRUPT, "jpeg without components");
  // What stb_image 2.27 would overrun or read uninitialised: a Huffman table of more than 256
  // codes, and a scan using tables (id 2) the file never defines.
  size_t dht = 0, sos = 0;
  for (size_t i = 2; i + 1 < n; i++) {
    if (!dht && flat_jpeg[i] == 0xFF && flat_jpeg[i + 1] == 0xC4) dht = i;
    if (!sos && flat_jpeg[i] == 0xFF && flat_jpeg[i + 1] == 0xDA) sos = i;
  }
  // libjpeg refuses both with its own messages; what it must bound instead is the scans of a
  // progressive file (test_jpeg_scans).
  const int turbo = strncmp(vt_image_jpeg_decoder(), "libjpeg", 7) == 0;
  memcpy(b, flat_jpeg, n);
  b[dht + 5] = b[dht + 6] = 0xFF;  // 510 codes
  EXPECT(vt_image_decode(b, n, LIMIT, &im, err, sizeof err) == VT_IMG_CORRUPT &&
             strstr(err, turbo ? "Huffman table" : "more than 256"), "huge Huffman table: %s",
         err);
  memcpy(b, flat_jpeg, n);
  b[sos + 8] = 0x22;  // second component: DC and AC table 2
  EXPECT(vt_image_decode(b, n, LIMIT, &im, err, sizeof err) == VT_IMG_CORRUPT &&
             strstr(err, turbo ? "not defined" : "does not define"),
         "undefined Huffman table: %s", err);
  // A component whose quantization table (id 2) is never defined: stb_image would dequantise
  // with uninitialised memory (pixels changing from run to run; a fuzzer find), libjpeg refuses.
  memcpy(b, flat_jpeg, n);
  b[sof + 12] = 2;  // the first component's table
  EXPECT(vt_image_decode(b, n, LIMIT, &im, err, sizeof err) == VT_IMG_CORRUPT &&
             strstr(err, "uantization table"), "undefined quantization table: %s", err);
  // A decoding-time bomb for stb_image: 101 scans (each would walk every block again). libjpeg
  // decodes a single-scan image from its first scan; the copies after it are markers where only
  // its end belongs (Pillow: "broken data stream"), found without decoding them (stray_marker).
  size_t scan = n - 2 - sos, nbig = sos + 101 * scan + 2;
  uint8_t *big = malloc(nbig);
  memcpy(big, flat_jpeg, sos);
  for (int k = 0; k < 101; k++) memcpy(big + sos + k * scan, flat_jpeg + sos, scan);
  memcpy(big + nbig - 2, flat_jpeg + n - 2, 2);
  st = vt_image_decode(big, nbig, LIMIT, &im, err, sizeof err);
  vt_image_free(&im);
  EXPECT(st == VT_IMG_CORRUPT && strstr(err, turbo ? "more than one scan" : "100 scans"),
         "101 scans: %s %s", vt_image_status_name(st), err);
  memcpy(big + sos + 2 * scan, flat_jpeg + n - 2, 2);  // two
  EXPECT(status_of(big, sos + 2 * scan + 2, LIMIT, NULL) == VT_IMG_CORRUPT, "2 scans");
  free(big);
  free(b);

  // BMP and GIF headers that claim huge sizes.
  uint8_t bmp[54] = {'B', 'M'};
  put32(bmp + 10, 0x36000000), put32(bmp + 14, 0x28000000);  // little endian: 54, 40
  bmp[18] = 0x30, bmp[19] = 0x75, bmp[22] = 0x30, bmp[23] = 0x75;  // 30000 x 30000
  bmp[26] = 1, bmp[28] = 24;
  EXPECT(status_of(bmp, sizeof bmp, LIMIT, NULL) == VT_IMG_TOO_LARGE, "bmp bomb");
  uint8_t gif[32] = {'G', 'I', 'F', '8', '9', 'a', 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0, 0, 0x2C};
  EXPECT(status_of(gif, sizeof gif, LIMIT, NULL) == VT_IMG_TOO_LARGE, "gif bomb");

  // Random damage to good files and random bytes behind known signatures: any status but OK
  // must come without pixels, and nothing may crash (the fuzz targets go further).
  png_case pc = {PNG_COLOR_TYPE_RGB_ALPHA, 16, 13, 9, 1, 0, 0};
  snprintf(path, sizeof path, "%s/mutate.png", dir);
  write_png(path, &pc);
  size_t npng = 0;
  uint8_t *png = read_all(path, &npng);
  uint32_t rng = 12345;
  int count[8] = {0};
  for (int t = 0; t < 6000; t++) {
    const uint8_t *src = t % 2 ? png : flat_jpeg;
    size_t len = t % 2 ? npng : flat_jpeg_len;
    uint8_t buf[4096];
    memcpy(buf, src, len);
    for (int f = 0; f <= t % 5; f++) {
      rng = rng * 1664525u + 1013904223u;
      buf[(rng >> 8) % len] = (uint8_t)(rng >> 24);
    }
    if (t % 3 == 0) {  // random bytes after a signature
      for (size_t i = 8; i < len; i++) buf[i] = (uint8_t)((rng = rng * 1664525u + 1013904223u) >> 24);
    }
    count[status_of(buf, len, 1 << 20, NULL)]++;
  }
  printf("6000 damaged files: ok %d truncated %d corrupt %d unsupported %d too large %d\n",
         count[VT_IMG_OK], count[VT_IMG_TRUNCATED], count[VT_IMG_CORRUPT],
         count[VT_IMG_UNSUPPORTED], count[VT_IMG_TOO_LARGE]);
  free(png);
}

// Cuts, bad IDAT CRCs and (CRC-fixed) flipped compressed bytes of png, each through 8 crops: the
// reduced decode stops after a crop's last row, yet cuts and CRCs must get the whole decode's
// verdict whatever the crop. Flipped bytes under a recomputed CRC are what it cannot see when
// inflate goes on without an error (deflate's own check, Adler-32, ends the stream, which an
// early stop never reaches): counted, not failed (sample.h says so).
void chunk_damage_checks(const uint8_t *png, size_t n, int interlaced) {
  vt_transform_config tc = vt_transform_defaults();
  float out[3 * 16 * 16];
  char err[256];
  uint8_t *b = malloc(n);
  chunk ch[4096];
  int nch = chunks_of(png, n, ch, 4096), same = 0, tried = 0, unseen = 0, unseen_tried = 0;
  for (int kind = 0; kind < 3; kind++) {
    for (int t = 0; t < 24; t++) {
      size_t len = n;
      memcpy(b, png, n);
      if (kind == 0) {
        len = 1 + (size_t)t * (n - 1) / 24;  // cuts from the header to the end
      } else {
        int c = 1 + (int)((uint32_t)t * 2654435761u % (uint32_t)(nch - 2));  // an IDAT (or so)
        if (kind == 1) b[ch[c].off + 8 + ch[c].len] ^= 0x20;  // its CRC
        if (kind == 2 && ch[c].len) {
          b[ch[c].off + 8 + (uint32_t)t % ch[c].len] ^= 0x10;  // its data, CRC fixed
          fix_crc(b, &ch[c]);
        }
      }
      vt_image im;
      vt_image_status whole = vt_image_decode(b, len, LIMIT, &im, err, sizeof err);
      vt_image_free(&im);
      for (int i = 0; i < 8; i++) {
        vt_sample_spec sp = {&tc, 16, 1, 11, 0, t * 8 + i, LIMIT, 0};
        vt_image_status st = vt_sample_from_bytes(b, len, &sp, out, NULL, err, sizeof err);
        if (kind < 2) {
          tried++;
          same += st == whole;
          EXPECT(st == whole, "png %s %d crop %d: %s, whole decode %s (%s)",
                 kind ? "bad CRC" : "cut at", kind ? t : (int)len, i, vt_image_status_name(st),
                 vt_image_status_name(whole), err);
        } else {
          unseen_tried++;
          unseen += st != whole;
          EXPECT(st == whole || (st == VT_IMG_OK && !interlaced), "png flip %d crop %d: %s, %s",
                 t, i, vt_image_status_name(st), vt_image_status_name(whole));
        }
      }
    }
  }
  printf("png damage through crops: %d/%d cut or bad-CRC verdicts equal to the whole decode; "
         "%d/%d flipped bytes under a recomputed CRC not seen by the early stop\n", same, tried,
         unseen, unseen_tried);
  free(b);
}

// A progressive file (PIL's) with its first scan repeated: each scan walks every block again,
// so more than 100 scans are refused, 100 decode (libjpeg; stb_image: test_other_bad). Then
// with its first scan turned into a refinement (Ah = 1), so that no scan carries the DC
// coefficients: stb_image would transform uninitialised memory (pixels changing from run to
// run; a fuzzer find), so its path refuses the file; libjpeg zeroes missing coefficients. Either
// way the pixels must not change from one decode to the next.
static void test_jpeg_scans(void) {
  const int turbo = strncmp(vt_image_jpeg_decoder(), "libjpeg", 7) == 0;
  char path[128], err[256];
  snprintf(path, sizeof path, "%s/progressive.jpg", dir);
  size_t n = 0;
  uint8_t *src = read_all(path, &n);
  if (!src) return;  // no PIL
  // Segments to the first SOS, then its entropy-coded data to the next real marker.
  size_t p = 2, sos = 0, end = 0;
  int scans = 0;
  while (p + 3 < n) {
    uint8_t m = src[p + 1];
    size_t len = (size_t)src[p + 2] << 8 | src[p + 3];
    if (m == 0xD9) break;
    size_t q = p + 2 + len;
    if (m == 0xDA) {
      while (q + 1 < n && !(src[q] == 0xFF && src[q + 1] != 0 && !(src[q + 1] >= 0xD0 &&
                                                                  src[q + 1] <= 0xD7)))
        q++;
      if (!sos) sos = p, end = q;
      scans++;
    }
    p = q;
  }
  EXPECT(sos && scans > 1 && scans < 100, "progressive.jpg: %d scans", scans);
  for (int total = 100; total <= 101 && sos && turbo; total++) {
    int copies = total - scans;
    size_t seg = end - sos, nb = n + (size_t)copies * seg;
    uint8_t *b = malloc(nb);
    memcpy(b, src, end);
    for (int k = 0; k < copies; k++) memcpy(b + end + k * seg, src + sos, seg);
    memcpy(b + end + (size_t)copies * seg, src + end, n - end);
    vt_image im;
    vt_image_status st = vt_image_decode(b, nb, LIMIT, &im, err, sizeof err);
    vt_image_free(&im);
    EXPECT(total == 100 ? st == VT_IMG_OK : st == VT_IMG_CORRUPT && strstr(err, "100 scans"),
           "%d scans: %s %s", total, vt_image_status_name(st), err);
    free(b);
  }
  if (sos) {
    uint8_t ns = src[sos + 4];
    src[sos + 4 + 2 * ns + 3] |= 0x10;  // the first scan's Ah
    vt_image a, b;
    vt_image_status sa = vt_image_decode(src, n, LIMIT, &a, err, sizeof err);
    vt_image_status sb = vt_image_decode(src, n, LIMIT, &b, err, sizeof err);
    EXPECT(sa == sb && (sa != VT_IMG_OK || !memcmp(a.rgb, b.rgb, (size_t)a.width * a.height * 3)),
           "no DC scan: decodes differ");
    EXPECT(turbo || (sa == VT_IMG_CORRUPT && strstr(err, "DC coefficients")),
           "no DC scan through stb_image: %s %s", vt_image_status_name(sa), err);
    vt_image_free(&a), vt_image_free(&b);
  }
  printf("jpeg scans: %sa progressive file without a DC scan %s\n",
         turbo ? "a progressive file of 100 scans decodes, of 101 is refused; " : "",
         turbo ? "decodes the same twice" : "is refused");
  free(src);
}

void test_bad_inputs(void) {
  test_png_damage();
  test_other_bad();
  test_jpeg_scans();
}

// ---- threads -----------------------------------------------------------------------------------
// libpng and stb_image keep no shared state in our use, so decoding from several threads gives
// what one thread gives. Inputs: good and bad PNGs and JPEGs.
#define NINPUTS 48
static uint8_t *inputs[NINPUTS];
static size_t input_len[NINPUTS];
static uint64_t want_hash[NINPUTS];

static uint64_t decode_hash(int i) {
  vt_image im;
  char err[256];
  vt_image_status st = vt_image_decode(inputs[i], input_len[i], LIMIT, &im, err, sizeof err);
  uint64_t h = 1469598103934665603ull ^ (uint64_t)st;
  for (size_t k = 0; k < (size_t)im.width * im.height * 3; k++) h = (h ^ im.rgb[k]) * 1099511628211ull;
  for (const char *p = err; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  vt_image_free(&im);
  return h;
}

static void *thread_main(void *arg) {
  int id = (int)(intptr_t)arg, bad = 0;
  for (int rep = 0; rep < 20; rep++)
    for (int k = 0; k < NINPUTS; k++) {
      int i = (k * 7 + id * 13 + rep) % NINPUTS;
      bad += decode_hash(i) != want_hash[i];
    }
  return (void *)(intptr_t)bad;
}

void test_threads(void) {
  for (int i = 0; i < NINPUTS; i++) {
    png_case pc = {kinds[i % nkinds][0], kinds[i % nkinds][1], 31 + i, 17, i % 2, 0, 0};
    char path[128];
    snprintf(path, sizeof path, "%s/thread%d.png", dir, i);
    if (i % 4 == 3) {
      input_len[i] = flat_jpeg_len - (i % 8 == 7 ? 40 : 0);  // every other one truncated
      inputs[i] = malloc(flat_jpeg_len);
      memcpy(inputs[i], flat_jpeg, flat_jpeg_len);
    } else {
      write_png(path, &pc);
      inputs[i] = read_all(path, &input_len[i]);
      if (i % 4 == 2) input_len[i] -= 30;  // truncated
      if (i % 4 == 1) inputs[i][input_len[i] / 2] ^= 0x55;  // corrupt
    }
    want_hash[i] = decode_hash(i);
  }
  pthread_t t[4];
  int mismatches = 0;
  for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, thread_main, (void *)(intptr_t)k);
  for (int k = 0; k < 4; k++) {
    void *r;
    pthread_join(t[k], &r);
    mismatches += (int)(intptr_t)r;
  }
  EXPECT(mismatches == 0, "threads: %d decodes differ from the single-thread result", mismatches);
  printf("threads: 4 x %d decodes of %d good and bad files, %d mismatches\n", 20 * NINPUTS,
         NINPUTS, mismatches);
  for (int i = 0; i < NINPUTS; i++) free(inputs[i]);
}

