// loader_fixtures.c: the files, temporary root and loader runs that test_loader.c and
// test_dataset.c both use (loader_fixtures.h says what each one does), and the programs' check
// counters. Test code only; needs libpng (built only where VT_HAVE_PNG is) and dataio.
#include "loader_fixtures.h"

#include <dirent.h>
#include <png.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int checks = 0, failures = 0;

char g_root[64];

// ---- files -----------------------------------------------------------------------------------

void write_png(const char *path, int w, int h, int seed) {
  FILE *f = fopen(path, "wb");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  if (!f || setjmp(png_jmpbuf(png))) {
    printf("FAIL: cannot write %s\n", path);
    exit(1);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  unsigned char *row = malloc((size_t)w * 3);
  for (int y = 0; y < h; y++) {
    for (int x = 0; x < w; x++)
      for (int k = 0; k < 3; k++)
        row[3 * x + k] = (unsigned char)(x * 13 + y * 7 + k * 50 + seed * 31);
    png_write_row(png, row);
  }
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(row);
  fclose(f);
}

void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n)) printf("FAIL: cannot write %s\n", path), exit(1);
  fclose(f);
}

char *at(const char *fmt, ...) {
  static char buf[4][512];
  static int k = 0;
  char rel[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof(rel), fmt, ap);
  va_end(ap);
  k = (k + 1) & 3;
  snprintf(buf[k], sizeof(buf[k]), "%s/%s", g_root, rel);
  return buf[k];
}

void make_folder(const char *sub, const char *const *classes, int nclass, int per) {
  mkdir(at("%s", sub), 0755);
  for (int c = 0; c < nclass; c++) {
    mkdir(at("%s/%s", sub, classes[c]), 0755);
    for (int i = 0; i < per; i++) {
      char name[64];
      snprintf(name, sizeof(name), "%s/g%02d.png", classes[c], i);
      write_png(at("%s/%s", sub, name), 12 + (i * 5) % 21, 10 + (i * 7) % 25, c * 100 + i);
    }
  }
}

void rm_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) return (void)unlink(path);
  for (struct dirent *e; (e = readdir(d));) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) rm_tree(p);
  }
  closedir(d);
  rmdir(path);
}

// ---- running loaders -------------------------------------------------------------------------

vt_loader_config base(const vt_dataset *ds, int train, int threads) {
  vt_loader_config c = {.ds = ds, .S = 8, .batch = 4, .threads = threads, .prefetch = 2,
                        .seed = 1234, .train = train, .want_pixels = 1, .max_pixels = 64 * 64,
                        .bad_policy = VT_BAD_SKIP, .tc = vt_transform_defaults(),
                        .per_step = 1, .step_stride = 4, .offset = 0};
  return c;
}

run_t run(const vt_loader_config *c, int64_t first, int nb) {
  run_t r = {.nb = nb, .B = c->batch, .S = c->S, .st = VT_OK};
  size_t plane = (size_t)3 * c->S * c->S;
  r.img = calloc((size_t)nb * c->batch * plane, sizeof(float));
  r.lab = calloc((size_t)nb * c->batch, sizeof(int32_t));
  r.valid = calloc((size_t)nb, sizeof(int));
  r.bad = calloc((size_t)nb, sizeof(int));
  r.epoch = calloc((size_t)nb, sizeof(int64_t));
  vt_loader *l = vt_loader_create(c, first, r.err, sizeof(r.err));
  if (!l) {
    r.st = VT_ERR_INPUT;
    return r;
  }
  for (int j = 0; j < nb; j++) {
    vt_batch b;
    EXPECT(vt_loader_position(l) == first + j, "position %lld", (long long)vt_loader_position(l));
    r.st = vt_loader_next(l, &b, r.err, sizeof(r.err));
    if (r.st != VT_OK) {
      r.nb = j;
      break;
    }
    // A loader of a share hands out just its images: they go to their places in the batch.
    const int share = c->pixel_count ? c->pixel_count : c->batch;
    if (c->want_pixels)
      memcpy(r.img + ((size_t)j * c->batch + (size_t)c->pixel_first) * plane, b.images,
             (size_t)share * plane * sizeof(float));
    memcpy(r.lab + (size_t)j * c->batch, b.labels, (size_t)c->batch * sizeof(int32_t));
    r.valid[j] = b.valid, r.bad[j] = b.bad, r.epoch[j] = b.epoch;
  }
  vt_loader_destroy(l);
  return r;
}

void run_free(run_t *r) {
  free(r->img), free(r->lab), free(r->valid), free(r->bad), free(r->epoch);
}

size_t plane_of(const run_t *r) { return (size_t)3 * r->S * r->S; }

int same_batches(const run_t *a, int ja, const run_t *b, int jb, int n) {
  size_t P = plane_of(a) * a->B;
  return !memcmp(a->img + ja * P, b->img + jb * P, n * P * sizeof(float)) &&
         !memcmp(a->lab + ja * a->B, b->lab + jb * b->B, (size_t)n * a->B * sizeof(int32_t)) &&
         !memcmp(a->bad + ja, b->bad + jb, n * sizeof(int));
}

// ---- a program's start and end ---------------------------------------------------------------

int fx_make_root(const char *prefix) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_root, sizeof(g_root), "%s/%sXXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp", prefix);
  if (!mkdtemp(g_root)) return printf("FAIL: mkdtemp %s\n", g_root), 0;
  return 1;
}

int fx_open_main(vt_dataset *ds) {
  const char *cls[] = {"cat", "dog", "emu"};
  make_folder("main", cls, 3, 10);
  char err[512];
  if (vt_dataset_open(at("main"), ds, err, sizeof(err)) != VT_OK)
    return printf("FAIL: %s\n", err), 0;
  return 1;
}

int fx_finish(const char *what) {
  rm_tree(g_root);
  if (failures) printf("FAILED: %d of %d checks\n", failures, checks);
  else printf("all %s tests passed (%d checks)\n", what, checks);
  return failures ? 1 : 0;
}
