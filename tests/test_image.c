// test_image.c (label data): vt_image_decode/load on PNGs of every colour type, bit depth and
// interlacing written here with libpng (pixels checked exactly), on JPEGs (an embedded flat-
// colour one, and PIL-made ones checked against PIL's own decode) and on WebPs; test_image_part.c
// adds partial decodes (windows, JPEG at 1/2..1/8) and whole samples (vt_sample_from_bytes)
// against the full decode, test_image_bad.c bad files, damage seen through crops, and threads.
// `test_image --seeds DIR` only writes a small seed corpus (DIR/png, DIR/jpeg) for the fuzz
// targets; `test_image --jpeg-decoder` prints the build's JPEG decoder. Needs libpng (to write)
// and the decoders; not the model.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sample.h"
#include "test_image.h"

int failures = 0, checks = 0;
char dir[64];

// A 16x16 baseline JPEG of the flat colour (200, 100, 50), 4:2:0, written by PIL for this test.
const uint8_t flat_jpeg[] = {
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x03, 0x02, 0x02, 0x03, 0x02, 0x02, 0x03,
    0x03, 0x03, 0x03, 0x04, 0x03, 0x03, 0x04, 0x05, 0x08, 0x05, 0x05, 0x04, 0x04, 0x05, 0x0a, 0x07,
    0x07, 0x06, 0x08, 0x0c, 0x0a, 0x0c, 0x0c, 0x0b, 0x0a, 0x0b, 0x0b, 0x0d, 0x0e, 0x12, 0x10, 0x0d,
    0x0e, 0x11, 0x0e, 0x0b, 0x0b, 0x10, 0x16, 0x10, 0x11, 0x13, 0x14, 0x15, 0x15, 0x15, 0x0c, 0x0f,
    0x17, 0x18, 0x16, 0x14, 0x18, 0x12, 0x14, 0x15, 0x14, 0xff, 0xdb, 0x00, 0x43, 0x01, 0x03, 0x04,
    0x04, 0x05, 0x04, 0x05, 0x09, 0x05, 0x05, 0x09, 0x14, 0x0d, 0x0b, 0x0d, 0x14, 0x14, 0x14, 0x14,
    0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14,
    0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14,
    0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0x14, 0xff, 0xc0,
    0x00, 0x11, 0x08, 0x00, 0x10, 0x00, 0x10, 0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11,
    0x01, 0xff, 0xc4, 0x00, 0x15, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0xff, 0xc4, 0x00, 0x14, 0x10, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xc4,
    0x00, 0x15, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x07, 0x08, 0xff, 0xc4, 0x00, 0x14, 0x11, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xda, 0x00, 0x0c, 0x03,
    0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3f, 0x00, 0x90, 0x00, 0x7a, 0x90, 0x7f, 0xff, 0xd9,
};
const size_t flat_jpeg_len = sizeof flat_jpeg;

uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

void write_all(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n) {
    printf("cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

// ---- PNG writing with libpng -------------------------------------------------------------------
static int channels(int color) {
  switch (color) {
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // grey, palette
  }
}

static int palette_size(int depth) { return depth < 8 ? 1 << depth : 200; }

static png_color palette_entry(int i) {
  png_color c = {(png_byte)(i * 37 + 11), (png_byte)(255 - i * 5), (png_byte)(i * i + 3)};
  return c;
}

// Sample values spread over the whole range, including 0, the maximum and (16-bit) values next
// to the rounding boundaries of the 16-to-8 scaling.
static uint32_t sample(const png_case *pc, int x, int y, int c) {
  uint32_t maxv = pc->color == PNG_COLOR_TYPE_PALETTE ? (uint32_t)palette_size(pc->depth) - 1
                                                      : (1u << pc->depth) - 1;
  static const uint32_t edge16[] = {0, 65535, 128, 129, 32767, 32768, 32896, 32895, 255, 257};
  uint32_t k = (uint32_t)((y * pc->w + x) * channels(pc->color) + c);
  if (pc->depth == 16 && k < 10) return edge16[k];
  if (k == 0) return 0;
  if (k == 1) return maxv;
  uint32_t h = (uint32_t)x * 73856093u ^ (uint32_t)y * 19349663u ^ (uint32_t)c * 83492791u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return h % (maxv + 1);
}

// What vt_image_decode must give: grey replicated, alpha dropped, palette looked up, low depths
// scaled to 0..255 (v * 255 / (2^d - 1)), 16 bits rounded as libpng's scale_16: round(v / 257).
static uint8_t to8(uint32_t v, int depth) {
  if (depth == 16) return (uint8_t)((v * 255 + 32895) >> 16);
  return (uint8_t)(v * 255 / ((1u << depth) - 1));
}

static void expected_pixel(const png_case *pc, int x, int y, uint8_t rgb[3]) {
  if (pc->color == PNG_COLOR_TYPE_PALETTE) {
    png_color c = palette_entry((int)sample(pc, x, y, 0));
    rgb[0] = c.red, rgb[1] = c.green, rgb[2] = c.blue;
  } else if (pc->color & PNG_COLOR_MASK_COLOR) {
    for (int c = 0; c < 3; c++) rgb[c] = to8(sample(pc, x, y, c), pc->depth);
  } else {
    rgb[0] = rgb[1] = rgb[2] = to8(sample(pc, x, y, 0), pc->depth);
  }
}

static void png_fail(png_structp png, png_const_charp msg) {
  printf("libpng (writing): %s\n", msg);
  png_longjmp(png, 1);
}

// Writes pc's image; small compression buffers give several IDAT chunks.
void write_png(const char *path, const png_case *pc) {
  FILE *f = fopen(path, "wb");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_fail, NULL);
  png_infop info = png_create_info_struct(png);
  int ch = channels(pc->color);
  size_t rowbytes = ((size_t)pc->w * ch * pc->depth + 7) / 8;
  png_bytep data = calloc((size_t)pc->h, rowbytes);
  png_bytep *rows = malloc((size_t)pc->h * sizeof *rows);
  if (!f || setjmp(png_jmpbuf(png))) exit(1);
  png_init_io(png, f);
  png_set_compression_buffer_size(png, 64);
  png_set_IHDR(png, info, (png_uint_32)pc->w, (png_uint_32)pc->h, pc->depth, pc->color,
               pc->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (pc->color == PNG_COLOR_TYPE_PALETTE) {
    png_color pal[256];
    for (int i = 0; i < palette_size(pc->depth); i++) pal[i] = palette_entry(i);
    png_set_PLTE(png, info, pal, palette_size(pc->depth));
  }
  if (pc->trns) {
    png_byte alpha[256];
    for (int i = 0; i < 256; i++) alpha[i] = (png_byte)(i * 7);
    png_color_16 key = {0, 1, 2, 3, 1};
    int ntrans = palette_size(pc->depth) < 5 ? palette_size(pc->depth) : 5;
    png_set_tRNS(png, info, alpha, pc->color == PNG_COLOR_TYPE_PALETTE ? ntrans : 0, &key);
  }
  if (pc->extras) {
    png_set_gAMA(png, info, 0.2);
    png_text t = {PNG_TEXT_COMPRESSION_zTXt, "Comment", "vit3d test image", 0, 0, NULL, NULL};
    png_set_text(png, info, &t, 1);
  }
  for (int y = 0; y < pc->h; y++) {
    rows[y] = data + (size_t)y * rowbytes;
    for (int x = 0; x < pc->w; x++)
      for (int c = 0; c < ch; c++) {
        uint32_t v = sample(pc, x, y, c);
        size_t bit = ((size_t)x * ch + c) * pc->depth;
        if (pc->depth == 16) {
          rows[y][bit / 8] = (png_byte)(v >> 8);
          rows[y][bit / 8 + 1] = (png_byte)v;
        } else {  // MSB first within a byte
          rows[y][bit / 8] |= (png_byte)(v << (8 - pc->depth - bit % 8));
        }
      }
  }
  png_set_rows(png, info, rows);
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
  png_destroy_write_struct(&png, &info);
  fclose(f);
  free(rows);
  free(data);
}

int check_png_pixels(const png_case *pc, const vt_image *im) {
  if (im->width != pc->w || im->height != pc->h) return 0;
  for (int y = 0; y < pc->h; y++)
    for (int x = 0; x < pc->w; x++) {
      uint8_t e[3];
      expected_pixel(pc, x, y, e);
      if (memcmp(e, im->rgb + ((size_t)y * pc->w + x) * 3, 3) != 0) {
        printf("  pixel (%d, %d): want %d %d %d\n", x, y, e[0], e[1], e[2]);
        return 0;
      }
    }
  return 1;
}

const int kinds[][2] = {
    {PNG_COLOR_TYPE_GRAY, 1},      {PNG_COLOR_TYPE_GRAY, 2},       {PNG_COLOR_TYPE_GRAY, 4},
    {PNG_COLOR_TYPE_GRAY, 8},      {PNG_COLOR_TYPE_GRAY, 16},      {PNG_COLOR_TYPE_GRAY_ALPHA, 8},
    {PNG_COLOR_TYPE_GRAY_ALPHA, 16}, {PNG_COLOR_TYPE_RGB, 8},      {PNG_COLOR_TYPE_RGB, 16},
    {PNG_COLOR_TYPE_RGB_ALPHA, 8}, {PNG_COLOR_TYPE_RGB_ALPHA, 16}, {PNG_COLOR_TYPE_PALETTE, 1},
    {PNG_COLOR_TYPE_PALETTE, 2},   {PNG_COLOR_TYPE_PALETTE, 4},    {PNG_COLOR_TYPE_PALETTE, 8},
};
const int nkinds = (int)(sizeof kinds / sizeof kinds[0]);

static void test_png_kinds(void) {
  static const int sizes[][2] = {{13, 9}, {1, 1}, {33, 3}, {3, 35}};
  int files = 0;
  for (int k = 0; k < nkinds; k++)
    for (int s = 0; s < 4; s++)
      for (int il = 0; il < 2; il++)
        for (int var = 0; var < 3; var++) {
          png_case pc = {kinds[k][0], kinds[k][1], sizes[s][0], sizes[s][1], il, var == 1,
                         var == 2};
          if (var == 1 && pc.color & PNG_COLOR_MASK_ALPHA) continue;  // no tRNS with alpha
          if (var > 0 && s != 0) continue;
          char path[128];
          snprintf(path, sizeof path, "%s/c%d_d%d_%dx%d_i%d_v%d.png", dir, pc.color, pc.depth,
                   pc.w, pc.h, il, var);
          write_png(path, &pc);
          vt_image im;
          char err[256];
          vt_image_status st = vt_image_load(path, LIMIT, &im, err, sizeof err);
          EXPECT(st == VT_IMG_OK && check_png_pixels(&pc, &im), "%s: %s %s", path,
                 vt_image_status_name(st), err);
          vt_image_free(&im);
          files++;
        }
  printf("png: %d files of %d colour type/bit depth kinds decoded\n", files, nkinds);
}

// ---- JPEG --------------------------------------------------------------------------------------
static void test_flat_jpeg(void) {
  vt_image im;
  char err[256];
  vt_image_status st = vt_image_decode(flat_jpeg, sizeof flat_jpeg, LIMIT, &im, err, sizeof err);
  EXPECT(st == VT_IMG_OK && im.width == 16 && im.height == 16, "flat jpeg: %s %s",
         vt_image_status_name(st), err);
  int maxd = 0;
  for (int i = 0; st == VT_IMG_OK && i < 16 * 16; i++)
    for (int c = 0; c < 3; c++) {
      int d = abs(im.rgb[i * 3 + c] - (int[]){200, 100, 50}[c]);
      maxd = d > maxd ? d : maxd;
    }
  EXPECT(maxd <= 3, "flat jpeg: off by %d", maxd);
  vt_image_free(&im);
}

static const char *python(void) {
  const char *p = getenv("VT_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

// Writes the Python lines as DIR/NAME and runs them on DIR (sys.argv[1]); 1 when they succeed.
static int run_pil_script(const char *name, const char *const *parts, int nparts) {
  char script[160], cmd[512];
  snprintf(script, sizeof script, "%s/%s", dir, name);
  FILE *f = fopen(script, "w");
  if (!f) return 0;
  for (int i = 0; i < nparts; i++) fputs(parts[i], f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2>/dev/null", python(), script, dir);
  return system(cmd) == 0;
}

// A larger photo-like image `big` (301 x 203) for partial decodes and crops: smooth structure
// (a bicubic-upsampled random grid) plus fine detail (a random grid at full size).
static const char pil_photo[] =
    "import random\n"
    "rnd = random.Random(1)\n"
    "W, H = 301, 203\n"
    "def grid(w, h):\n"
    "    g = Image.new('RGB', (w, h))\n"
    "    g.putdata([tuple(rnd.randrange(256) for _ in range(3)) for _ in range(w * h)])\n"
    "    return g\n"
    "big = Image.blend(grid(12, 9).resize((W, H), Image.BICUBIC), grid(W, H), 0.15)\n";

// Copies DIR/NAME.EXT of each name to OUT/SUB/NAME.EXT (fuzzer seeds), where they exist.
static void copy_seeds(const char *out, const char *sub, const char *const *names, int n,
                       const char *ext) {
  char src[160], dst[512];
  snprintf(dst, sizeof dst, "%s/%s", out, sub);
  mkdir(dst, 0755);
  for (int k = 0; k < n; k++) {
    size_t nbytes = 0;
    snprintf(src, sizeof src, "%s/%s.%s", dir, names[k], ext);
    uint8_t *b = read_all(src, &nbytes);
    snprintf(dst, sizeof dst, "%s/%s/%s.%s", out, sub, names[k], ext);
    if (b) write_all(dst, b, nbytes);
    free(b);
  }
}

static const char *jpeg_names[] = {"q90_420", "q95_444", "q75_422", "progressive", "gray", "cmyk"};

// PIL writes JPEGs of several kinds and its own decode of each (.rgb); ours must agree within
// what two IDCT and upsampling implementations differ by.
static void test_pil_jpegs(void) {
  const char *script[3] = {
      "import sys\nfrom PIL import Image\nd = sys.argv[1]\n"
      "im = Image.new('RGB', (67, 45))\n"
      "im.putdata([((x * 255) // 66, (y * 255) // 44, ((x + y) * 3 + (x * y) % 50) % 256)\n"
      "            for y in range(45) for x in range(67)])\n"
      "kinds = {'q90_420': dict(quality=90), 'q95_444': dict(quality=95, subsampling=0),\n"
      "         'q75_422': dict(quality=75, subsampling=1),\n"
      "         'progressive': dict(quality=85, progressive=True)}\n"
      "for name, kw in kinds.items():\n"
      "    im.save(f'{d}/{name}.jpg', 'JPEG', **kw)\n"
      "im.convert('L').save(f'{d}/gray.jpg', 'JPEG', quality=90)\n"
      "im.convert('CMYK').save(f'{d}/cmyk.jpg', 'JPEG', quality=90)\n"
      "for name in list(kinds) + ['gray', 'cmyk']:\n"
      "    ref = Image.open(f'{d}/{name}.jpg').convert('RGB')\n"
      "    open(f'{d}/{name}.rgb', 'wb').write(ref.tobytes())\n",
      pil_photo,  // for the partial decodes (test_jpeg_part)
      "parts = {'p420': dict(quality=90), 'p422': dict(quality=90, subsampling=1),\n"
      "         'p444': dict(quality=90, subsampling=0),\n"
      "         'pprog': dict(quality=90, progressive=True)}\n"
      "for name, kw in parts.items():\n"
      "    big.save(f'{d}/{name}.jpg', 'JPEG', **kw)\n"
      "big.convert('L').save(f'{d}/pgray.jpg', 'JPEG', quality=90)\n"
      "big.convert('CMYK').save(f'{d}/pcmyk.jpg', 'JPEG', quality=90)\n"};
  if (!run_pil_script("make_jpegs.py", script, 3)) {
    printf("SKIP part: %s cannot write JPEGs with PIL (apt-get install python3-pil)\n", python());
    return;
  }
  const char *const *names = jpeg_names;
  const int turbo = strncmp(vt_image_jpeg_decoder(), "libjpeg", 7) == 0;
  for (int k = 0; k < 6; k++) {
    char path[128], ref[128];
    snprintf(path, sizeof path, "%s/%s.jpg", dir, names[k]);
    snprintf(ref, sizeof ref, "%s/%s.rgb", dir, names[k]);
    size_t nref = 0;
    uint8_t *want = read_all(ref, &nref);
    vt_image im;
    char err[256];
    vt_image_status st = vt_image_load(path, LIMIT, &im, err, sizeof err);
    EXPECT(st == VT_IMG_OK && im.width == 67 && im.height == 45 && nref == 67 * 45 * 3,
           "%s: %s %s", path, vt_image_status_name(st), err);
    if (st == VT_IMG_OK && nref == 67 * 45 * 3) {
      // stb_image 2.27 swaps the two weights of 4:2:2 chroma upsampling at the right edge
      // (stbi__resample_row_h_2: input[w-2]*3 + input[w-1]), so one column (x = 66 here) has
      // wrong chroma there; it is reported apart, everything else must agree.
      int maxd = 0, edge = 0, stb_edge_col = k == 2 && !turbo ? 66 : -1;
      double sum = 0;
      for (size_t i = 0; i < nref; i++) {
        int d = abs(im.rgb[i] - want[i]);
        if ((int)(i / 3 % 67) == stb_edge_col) {
          edge = d > edge ? d : edge;
          continue;
        }
        maxd = d > maxd ? d : maxd;
        sum += d;
      }
      printf("jpeg %-12s vs PIL: max |diff| %d, mean %.3f", names[k], maxd, sum / nref);
      printf(stb_edge_col >= 0 ? " (column %d, stb's 4:2:2 edge: %d)\n" : "\n", stb_edge_col, edge);
      // libjpeg-turbo is Pillow's own decoder with Pillow's settings: the same pixels. stb_image
      // has its own IDCT and upsampling: close.
      if (turbo)
        EXPECT(maxd == 0, "%s: max diff %d from Pillow with the same library", names[k], maxd);
      else
        EXPECT(maxd <= 4 && sum / nref <= 0.5, "%s: max diff %d mean %.3f", names[k], maxd,
               sum / nref);
    }
    vt_image_free(&im);
    free(want);
  }
}

// ---- WebP ----------------------------------------------------------------------------------------
// Pillow writes WebP files of each kind (lossy 4:2:0, lossless, both with an alpha channel, grey,
// a 7x5 and a 1x1 image, and a two-frame animation) and its own decode of each (.rgb): libwebp is
// Pillow's decoder, with the same defaults, so the pixels must be the same bytes. Then cut,
// damaged, oversized and animated files get the right status, and training and evaluation crops
// of a WebP are the full decode's (check_crops at 1/1). Without libwebp every WebP is refused as
// unsupported, naming the library.
static const char *webp_names[] = {"w_lossy", "w_lossless", "w_alpha_lossy", "w_alpha_lossless",
                                   "w_grey", "w_tiny", "w_one"};
enum { NWEBP = sizeof webp_names / sizeof webp_names[0] };

static int make_webps(void) {
  const char *script[3] = {
      "import sys\nfrom PIL import Image, features\nd = sys.argv[1]\n"
      "if not features.check('webp'): sys.exit(3)\n",
      pil_photo,
      "alpha = big.convert('RGBA')\n"
      "alpha.putalpha(Image.linear_gradient('L').resize((W, H)))\n"
      "big.save(f'{d}/w_lossy.webp', 'WEBP', quality=80)\n"
      "big.save(f'{d}/w_lossless.webp', 'WEBP', lossless=True)\n"
      "alpha.save(f'{d}/w_alpha_lossy.webp', 'WEBP', quality=70)\n"
      "alpha.save(f'{d}/w_alpha_lossless.webp', 'WEBP', lossless=True)\n"
      "big.convert('L').save(f'{d}/w_grey.webp', 'WEBP', quality=90)\n"
      "big.resize((7, 5)).save(f'{d}/w_tiny.webp', 'WEBP', quality=90)\n"
      "big.resize((1, 1)).save(f'{d}/w_one.webp', 'WEBP', lossless=True)\n"
      "big.save(f'{d}/w_anim.webp', 'WEBP', save_all=True, append_images=[big.rotate(90)],\n"
      "         duration=100)\n"
      "for n in ['w_lossy', 'w_lossless', 'w_alpha_lossy', 'w_alpha_lossless', 'w_grey',\n"
      "          'w_tiny', 'w_one']:\n"
      "    open(f'{d}/{n}.rgb', 'wb').write(Image.open(f'{d}/{n}.webp').convert('RGB').tobytes())\n"};
  return run_pil_script("make_webps.py", script, 3);
}

static void test_webp(void) {
  if (!make_webps()) {
    printf("SKIP webp: %s cannot write WebP files with PIL (apt-get install python3-pil)\n",
           python());
    return;
  }
  const int have = strcmp(vt_image_webp_decoder(), "none") != 0;
  char path[160], err[256];
  vt_image im;
  for (int k = 0; k < NWEBP; k++) {
    size_t n = 0, nref = 0;
    snprintf(path, sizeof path, "%s/%s.webp", dir, webp_names[k]);
    uint8_t *b = read_all(path, &n);
    snprintf(path, sizeof path, "%s/%s.rgb", dir, webp_names[k]);
    uint8_t *want = read_all(path, &nref);
    vt_image_status st = vt_image_decode(b, n, LIMIT, &im, err, sizeof err);
    if (!have) {
      EXPECT(st == VT_IMG_NO_DECODER && strstr(err, "libwebp-dev"), "%s without libwebp: %s %s",
             webp_names[k], vt_image_status_name(st), err);
    } else {
      int same = st == VT_IMG_OK && (size_t)im.width * im.height * 3 == nref &&
                 memcmp(im.rgb, want, nref) == 0;
      EXPECT(same, "%s: %s %s, not Pillow's pixels", webp_names[k], vt_image_status_name(st), err);
      if (same) printf("webp %-17s %dx%d: Pillow's bytes\n", webp_names[k], im.width, im.height);
      vt_image_info info;
      st = vt_image_probe(b, n, LIMIT, &info, err, sizeof err);
      EXPECT(st == VT_IMG_OK && info.format == VT_FMT_WEBP && info.width == im.width &&
             info.height == im.height && info.max_scale == 1, "%s probe: %s %s", webp_names[k],
             vt_image_status_name(st), err);
    }
    vt_image_free(&im);
    free(b), free(want);
  }
  if (!have) return;
  size_t n = 0;
  snprintf(path, sizeof path, "%s/w_lossy.webp", dir);
  uint8_t *b = read_all(path, &n);
  // Cut anywhere: inside the RIFF header, the VP8 header, the data; never a crash or pixels.
  const size_t cuts[] = {4, 11, 12, 20, 30, 40, n / 2, n - 1};
  for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
    vt_image_status st = vt_image_decode(b, cuts[c], LIMIT, &im, err, sizeof err);
    vt_image_status want = cuts[c] < 12 ? VT_IMG_UNSUPPORTED : VT_IMG_TRUNCATED;
    EXPECT(st == want && !im.rgb && err[0], "w_lossy cut to %zu bytes: %s (%s), want %s", cuts[c],
           vt_image_status_name(st), err, vt_image_status_name(want));
  }
  // A damaged frame header (the VP8 start code 9d 01 2a at byte 23): corrupt.
  uint8_t *bad = malloc(n);
  memcpy(bad, b, n);
  EXPECT(n > 30 && !memcmp(b + 12, "VP8 ", 4) && bad[23] == 0x9d, "w_lossy is not simple VP8");
  bad[23] ^= 0xff;
  vt_image_status st = vt_image_decode(bad, n, LIMIT, &im, err, sizeof err);
  EXPECT(st == VT_IMG_CORRUPT && strstr(err, "corrupt WebP"), "damaged VP8 start code: %s (%s)",
         vt_image_status_name(st), err);
  free(bad);
  // Over the pixel limit: refused from the header, before any pixel buffer.
  st = vt_image_decode(b, n, 301 * 203 - 1, &im, err, sizeof err);
  EXPECT(st == VT_IMG_TOO_LARGE && strstr(err, "301x203"), "webp over the limit: %s (%s)",
         vt_image_status_name(st), err);
  // Training and evaluation crops: the whole decode, so at 1/1 the full path's very floats.
  crop_stats cs = {0};
  check_crops(b, n, "webp", &cs);
  printf("webp crops: %d of %d identical to the full decode + render\n", cs.equal, cs.total);
  EXPECT(cs.total == 64 && cs.equal == 64, "webp crops: %d of %d", cs.equal, cs.total);
  free(b);
  snprintf(path, sizeof path, "%s/w_anim.webp", dir);
  b = read_all(path, &n);
  st = vt_image_decode(b, n, LIMIT, &im, err, sizeof err);
  EXPECT(st == VT_IMG_UNSUPPORTED && strstr(err, "animated WebP"), "animated webp: %s (%s)",
         vt_image_status_name(st), err);
  free(b);
}

// ---- entry -------------------------------------------------------------------------------------
static void write_seeds(const char *out) {
  char path[512];
  snprintf(path, sizeof path, "%s/png", out);
  mkdir(out, 0755);
  mkdir(path, 0755);
  for (int k = 0; k < nkinds; k++) {
    png_case pc = {kinds[k][0], kinds[k][1], 5 + k, 3 + k % 4, k % 3 == 0, k % 4 == 1, k % 5 == 2};
    if (pc.trns && pc.color & PNG_COLOR_MASK_ALPHA) pc.trns = 0;
    snprintf(path, sizeof path, "%s/png/seed%02d.png", out, k);
    write_png(path, &pc);
  }
  snprintf(path, sizeof path, "%s/jpeg", out);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/jpeg/flat.jpg", out);
  write_all(path, flat_jpeg, sizeof flat_jpeg);
  test_pil_jpegs();  // into dir; copied below when PIL is there
  copy_seeds(out, "jpeg", jpeg_names, 6, "jpg");
  make_webps();
  copy_seeds(out, "webp", webp_names, NWEBP, "webp");
}

// Which file names need a decoder this build lacks (what a dataset is refused for at start-up):
// by extension, in any case, a shard member's too; as vt_image_decoders says of the build.
static void test_decoder_missing(void) {
  char build[256];
  vt_image_decoders(build, sizeof build);
  static const struct {
    const char *name, *decoder;  // decoder: vt_image_decoders' words for a build without it
  } cases[] = {{"/d/c0/a.png", "PNG none"}, {"/d/c0/a.PNG", "PNG none"},
               {"/d/x.tar:00001.jpg", "JPEG none"}, {"/d/c1/b.JPEG", "JPEG none"},
               {"/d/c1/b.webp", "WebP none"}, {"/d/c/b.gif", "GIF/BMP/PNM none"},
               {"/d/c/b.Pgm", "GIF/BMP/PNM none"}, {"/d/c/b.tif", NULL},
               {"/data.v2/c/b", NULL}, {"/d/c/b.pngx", NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *got = vt_image_decoder_missing(cases[i].name);
    const int lacks = cases[i].decoder && strstr(build, cases[i].decoder);
    EXPECT(lacks ? got != NULL : got == NULL, "%s in a build of %s: %s", cases[i].name, build,
           got ? got : "decodable");
  }
}

int main(int argc, char **argv) {
  snprintf(dir, sizeof dir, "/tmp/vt_test_image_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  if (argc == 2 && strcmp(argv[1], "--jpeg-decoder") == 0) {  // for fuzz.sh
    printf("%s\n", vt_image_jpeg_decoder());
    rmdir(dir);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "--seeds") == 0) {
    write_seeds(argv[2]);
  } else {
    test_png_kinds();
    test_flat_jpeg();
    test_pil_jpegs();
    test_jpeg_part();
    test_sample_crops();
    test_webp();
    test_bad_inputs();
    test_threads();
    test_decoder_missing();
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
  if (argc == 3) return 0;
  printf("test_image: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
