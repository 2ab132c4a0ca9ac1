// test_loader.c: the dataset index, sampler and threaded loader on small ImageFolder trees of
// PNGs this test writes (and JPEGs through PIL): bytes independent of the thread count, every
// sample once per epoch over DP ranks, exact restart, evaluation padding, bad files under skip
// and fail, clear errors for empty datasets and bad list files, tar shards (the folder's very
// batches; damaged shards and bad samples refused), the index cache, the filtered resizes, the consumer's waits. Skips (77) in builds
// without libpng (VT_HAVE_PNG).
#include <stdio.h>

#ifndef VT_HAVE_PNG
int main(void) {
  printf("SKIP: built without libpng (VT_HAVE_PNG undefined)\n");
  return 77;
}
#else

#include <dirent.h>
#include <fcntl.h>
#include <png.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "dataset.h"
#include "index_cache.h"
#include "label.h"
#include "loader.h"
#include "prepare.h"
#include "sample.h"
#include "tar.h"
#include "vt_check.h"


static char g_root[64];

// ---- files -----------------------------------------------------------------------------------

static void write_png(const char *path, int w, int h, int seed) {
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

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n)) printf("FAIL: cannot write %s\n", path), exit(1);
  fclose(f);
}

// A path under the test's temporary root; a few results stay valid at once.
static char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *at(const char *fmt, ...) {
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

// root/<sub>/<class>/g%02d.png for `per` files per class, sizes varying with the file.
static void make_folder(const char *sub, const char *const *classes, int nclass, int per) {
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

static void rm_tree(const char *path) {
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

typedef struct {
  int nb, B, S;
  float *img;
  int32_t *lab;
  int *valid, *bad;
  int64_t *epoch;
  vt_status st;
  char err[640];
} run_t;

static vt_loader_config base(const vt_dataset *ds, int train, int threads) {
  vt_loader_config c = {.ds = ds, .S = 8, .batch = 4, .threads = threads, .prefetch = 2,
                        .seed = 1234, .train = train, .want_pixels = 1, .max_pixels = 64 * 64,
                        .bad_policy = VT_BAD_SKIP, .tc = vt_transform_defaults(),
                        .per_step = 1, .step_stride = 4, .offset = 0};
  return c;
}

static run_t run(const vt_loader_config *c, int64_t first, int nb) {
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

static void run_free(run_t *r) {
  free(r->img), free(r->lab), free(r->valid), free(r->bad), free(r->epoch);
}

static size_t plane_of(const run_t *r) { return (size_t)3 * r->S * r->S; }

static int same_batches(const run_t *a, int ja, const run_t *b, int jb, int n) {
  size_t P = plane_of(a) * a->B;
  return !memcmp(a->img + ja * P, b->img + jb * P, n * P * sizeof(float)) &&
         !memcmp(a->lab + ja * a->B, b->lab + jb * b->B, (size_t)n * a->B * sizeof(int32_t)) &&
         !memcmp(a->bad + ja, b->bad + jb, n * sizeof(int));
}

static int64_t first_pos(const vt_loader_config *c, int64_t j) {
  return (j / c->per_step) * c->step_stride + c->offset + (j % c->per_step) * c->batch;
}

// ---- tests -----------------------------------------------------------------------------------

static void test_sampler(void) {
  int64_t ns[] = {1, 2, 7, 30, 1000};
  for (int t = 0; t < 5; t++) {
    int64_t n = ns[t], e;
    vt_sampler s, s2;
    vt_sampler_init(&s, 99, n, 1, 0);
    vt_sampler_init(&s2, 99, n, 1, 0);
    char *seen = calloc((size_t)n, 1);
    for (int64_t ep = 0; ep < 3; ep++) {
      memset(seen, 0, (size_t)n);
      int64_t moved = 0;
      for (int64_t i = 0; i < n; i++) {
        int64_t k = vt_sampler_at(&s, ep * n + i, &e);
        EXPECT(k >= 0 && k < n && !seen[k] && e == ep, "n %lld epoch %lld: not a permutation",
               (long long)n, (long long)ep);
        if (k >= 0 && k < n) seen[k] = 1;
        moved += k != i;
        vt_sampler_at(&s2, (2 - ep) * n + i, NULL);  // s2 visits the epochs in another order
      }
      if (n >= 30) EXPECT(moved > n / 2, "n %lld: permutation is hardly shuffled", (long long)n);
    }
    // Jumping between epochs gives the same answers as walking through them.
    for (int64_t i = 0; i < 3 * n; i++)
      EXPECT(vt_sampler_at(&s, i, NULL) == vt_sampler_at(&s2, i, NULL), "sampler differs");
    free(seen);
    vt_sampler_free(&s);
    vt_sampler_free(&s2);
  }
  vt_sampler a, b;
  vt_sampler_init(&a, 1, 1000, 1, 0), vt_sampler_init(&b, 2, 1000, 1, 0);
  int diff_seed = 0, diff_epoch = 0;
  for (int64_t i = 0; i < 1000; i++)
    diff_seed += vt_sampler_at(&a, i, NULL) != vt_sampler_at(&b, i, NULL);
  int64_t e0[1000];
  memcpy(e0, a.perm, sizeof(e0));  // a holds epoch 0 of seed 1
  for (int64_t i = 0; i < 1000; i++) diff_epoch += e0[i] != vt_sampler_at(&a, 1000 + i, NULL);
  EXPECT(diff_seed > 900 && diff_epoch > 900, "seeds/epochs give similar orders (%d, %d)",
         diff_seed, diff_epoch);
  vt_sampler_free(&a), vt_sampler_free(&b);
  // --drop-last: epochs of len < n positions, each the first len of the same epoch's
  // permutation (distinct samples, perm's last n - len left out), epoch e from position e len.
  for (int t = 0; t < 3; t++) {
    const int64_t n = (int64_t[]){30, 1000, 1001}[t], len = (int64_t[]){28, 992, 768}[t];
    vt_sampler full, cut;
    vt_sampler_init(&full, 5, n, 1, 0), vt_sampler_init(&cut, 5, n, 1, len);
    char *seen = calloc((size_t)n, 1);
    int bad = 0;
    for (int64_t ep = 0; ep < 3; ep++) {
      memset(seen, 0, (size_t)n);
      for (int64_t q = 0; q < len; q++) {
        int64_t e, k = vt_sampler_at(&cut, ep * len + q, &e);
        bad += e != ep || k < 0 || k >= n || seen[k] || k != vt_sampler_at(&full, ep * n + q, NULL);
        if (k >= 0 && k < n) seen[k] = 1;
      }
    }
    EXPECT(bad == 0, "n %lld, epochs of %lld: %d positions not the epoch's first len samples",
           (long long)n, (long long)len, bad);
    free(seen);
    vt_sampler_free(&full), vt_sampler_free(&cut);
  }
  printf("ok - sampler permutations (and epochs cut to whole global batches)\n");
}

// Repeated augmentation: an epoch of n positions holds the first ceil(n / R) samples of the
// permutation R times each (the last ones R - 1 times when R does not divide n), the copies in
// one window of R * VT_REPEAT_WINDOW positions, the pairs (2k, 2k + 1) never an image and its
// copy, and every position of an epoch its own augmentation key.
static void test_sampler_repeats(void) {
  const int64_t ns[] = {7, 300, 1000, 1001};
  const int Rs[] = {2, 3, 4};
  for (int t = 0; t < 4; t++)
    for (int u = 0; u < 3; u++) {
      const int64_t n = ns[t];
      const int R = Rs[u];
      vt_sampler s, plain;
      vt_sampler_init(&s, 7, n, R, 0);
      vt_sampler_init(&plain, 7, n, 1, 0);
      int *count = calloc((size_t)n, sizeof(int));
      int64_t *first = malloc((size_t)n * sizeof(int64_t));
      char *key_seen = calloc((size_t)n * R, 1);
      const int64_t unique = (n + R - 1) / R, W = (int64_t)R * VT_REPEAT_WINDOW;
      int bad = 0;
      for (int64_t ep = 1; ep < 3; ep++) {
        memset(count, 0, (size_t)n * sizeof(int)), memset(key_seen, 0, (size_t)n * R);
        for (int64_t q = 0; q < n; q++) {
          int64_t e, k = vt_sampler_at(&s, ep * n + q, &e), key = vt_sampler_key(&s, ep * n + q, k);
          if (e != ep || k < 0 || k >= n || key < k * R || key >= (k + 1) * R || key_seen[key]) {
            bad++;
            continue;
          }
          key_seen[key] = 1;
          if (count[k]++ == 0) first[k] = q;
          else if (first[k] / W != q / W) bad++;  // a copy outside its first's window
          if (q % 2 == 1 && q / W == (q - 1) / W && n - q / W * W >= 2 * R &&
              k == vt_sampler_at(&s, ep * n + q - 1, NULL))
            bad++;  // a pair of an image and its copy
        }
        // Which samples: the first `unique` of the epoch's permutation, R or R - 1 times.
        int64_t held = 0;
        for (int64_t q = 0; q < unique; q++) {
          int64_t k = vt_sampler_at(&plain, ep * n + q, NULL);
          held += count[k];
          if (count[k] < R - 1 || count[k] > R) bad++;
        }
        if (held != n) bad++;
      }
      EXPECT(!bad, "n %lld R %d: %d violations of the repeated stream", (long long)n, R, bad);
      free(count), free(first), free(key_seen);
      vt_sampler_free(&s), vt_sampler_free(&plain);
    }
  printf("ok - repeated augmentation: R copies of 1/R of each epoch, in windows, own keys\n");
}

static void test_folder_and_list(void) {
  char err[512];
  vt_dataset ds;
  // Creation order is not the class order: byte order is ("B" < "a" < "b").
  const char *cls[] = {"b", "a", "B"};
  make_folder("ord", cls, 3, 2);
  write_bytes(at("ord/a/.hidden.png"), "x", 1);
  mkdir(at("ord/.hiddendir"), 0755);
  EXPECT(vt_dataset_open(at("ord"), &ds, err, sizeof(err)) == VT_OK, "%s", err);
  int shape = ds.num_classes == 3 && ds.count == 6;
  EXPECT(shape, "classes %d count %lld", ds.num_classes, (long long)ds.count);
  EXPECT(shape && !strcmp(ds.class_names[0], "B") && !strcmp(ds.class_names[1], "a") &&
         !strcmp(ds.class_names[2], "b"), "class order");
  EXPECT(shape && ds.labels[2] == 1 && strstr(ds.paths[2], "/ord/a/g00.png") &&
         strstr(ds.paths[3], "a/g01"), "file order");
  vt_dataset_free(&ds);

  // Empty root, empty class folder (hidden files do not count), missing path.
  mkdir(at("empty"), 0755);
  EXPECT(vt_dataset_open(at("empty"), &ds, err, sizeof(err)) == VT_ERR_INPUT &&
         strstr(err, "no class folders"), "empty root: %s", err);
  mkdir(at("ord/zz_empty"), 0755);
  write_bytes(at("ord/zz_empty/.DS_Store"), "x", 1);
  EXPECT(vt_dataset_open(at("ord"), &ds, err, sizeof(err)) == VT_ERR_INPUT &&
         strstr(err, "zz_empty") && strstr(err, "no image files"), "empty class: %s", err);
  EXPECT(vt_dataset_open(at("nope"), &ds, err, sizeof(err)) == VT_ERR_INPUT &&
         strstr(err, "nope"), "missing: %s", err);

  // List files: comments, blank lines, CRLF, relative and absolute paths, label gaps.
  char text[2048];
  snprintf(text, sizeof(text),
           "# path<TAB>label\n\nord/a/g00.png\t3\r\n  # indented comment\n%s/ord/b/g01.png\t0\n"
           "ord/B/g00.png\t 1 \n",
           g_root);
  write_bytes(at("list.txt"), text, strlen(text));
  EXPECT(vt_dataset_open(at("list.txt"), &ds, err, sizeof(err)) == VT_OK, "%s",
         err);
  EXPECT(ds.count == 3 && ds.num_classes == 4 && ds.labels[0] == 3 && ds.labels[1] == 0 &&
         ds.labels[2] == 1 && !strcmp(ds.class_names[3], "3"), "list contents");
  EXPECT(ds.count == 3 && !strcmp(ds.paths[0], at("ord/a/g00.png")) &&
         !strcmp(ds.paths[1], at("ord/b/g01.png")), "list paths %s", ds.paths[0]);
  vt_dataset_free(&ds);
  const char *bad[][2] = {{"a.png\t1\n\nno_tab_here\n", ":3:"}, {"a.png\t1\nb.png\tcat\n", ":2:"},
                          {"a.png\t-1\n", ":1:"},              {"a.png\t2x\n", ":1:"},
                          {"\t1\n", ":1:"},                     {"# nothing\n\n", "no samples"}};
  for (int i = 0; i < 6; i++) {
    write_bytes(at("bad.txt"), bad[i][0], strlen(bad[i][0]));
    EXPECT(vt_dataset_open(at("bad.txt"), &ds, err, sizeof(err)) ==
           VT_ERR_INPUT && strstr(err, bad[i][1]), "bad list %d: %s", i, err);
  }
  printf("ok - ImageFolder order, empty datasets, list files\n");
}

static void test_determinism(const vt_dataset *ds) {
  // 20 micro-batches of 4 over 30 samples: crosses two epoch boundaries mid-batch.
  vt_loader_config c = base(ds, 1, 1);
  c.per_step = 2, c.step_stride = 8;
  run_t ref = run(&c, 0, 20);
  EXPECT(ref.st == VT_OK && ref.nb == 20, "reference run: %s", ref.err);
  vt_sampler s;
  vt_sampler_init(&s, c.seed, ds->count, 1, 0);
  for (int j = 0; j < 20; j++) {
    int64_t e, p = first_pos(&c, j);
    for (int i = 0; i < 4; i++)
      EXPECT(ref.lab[j * 4 + i] == ds->labels[vt_sampler_at(&s, p + i, NULL)], "label %d/%d", j, i);
    vt_sampler_at(&s, p, &e);
    EXPECT(ref.epoch[j] == e && ref.valid[j] == 4 && ref.bad[j] == 0, "batch %d meta", j);
  }
  vt_sampler_free(&s);
  // With epochs of whole steps (--drop-last: 24 of the 30 positions), the loader's batches are
  // the cut sampler's, each epoch's last 6 images of its order left out.
  c.epoch_len = 24;
  run_t cut = run(&c, 0, 20);
  vt_sampler_init(&s, c.seed, ds->count, 1, 24);
  int cut_bad = cut.st != VT_OK || cut.nb != 20;
  for (int j = 0; j < 20 && !cut_bad; j++) {
    int64_t e, p = first_pos(&c, j);
    for (int i = 0; i < 4; i++)
      cut_bad += cut.lab[j * 4 + i] != ds->labels[vt_sampler_at(&s, p + i, NULL)];
    vt_sampler_at(&s, p, &e);
    cut_bad += cut.epoch[j] != e || e != p / 24;
  }
  EXPECT(!cut_bad, "epochs of 24 positions: the loader's batches are not the cut sampler's");
  vt_sampler_free(&s), run_free(&cut);
  c.epoch_len = 0;
  int threads[] = {2, 4, 4}, prefetch[] = {1, 3, 8};
  for (int t = 0; t < 3; t++) {
    c.threads = threads[t], c.prefetch = prefetch[t];
    run_t r = run(&c, 0, 20);
    EXPECT(r.nb == 20 && same_batches(&ref, 0, &r, 0, 20), "threads %d prefetch %d differ",
           threads[t], prefetch[t]);
    run_free(&r);
  }
  // Restart at j: exactly the rest of the uninterrupted run.
  int starts[] = {1, 5, 8, 13, 19};
  for (int k = 0; k < 5; k++) {
    c.threads = 2, c.prefetch = 2;
    run_t r = run(&c, starts[k], 20 - starts[k]);
    EXPECT(r.nb == 20 - starts[k] && same_batches(&ref, starts[k], &r, 0, r.nb),
           "restart at %d differs", starts[k]);
    run_free(&r);
  }
  // Labels-only (last pipeline stage) agrees with the decoding stage.
  c.want_pixels = 0, c.threads = 0, c.prefetch = 0;
  run_t lo = run(&c, 0, 20);
  EXPECT(lo.nb == 20 && !memcmp(lo.lab, ref.lab, 80 * sizeof(int32_t)), "labels-only differs");
  run_free(&lo);
  run_free(&ref);
  printf("ok - same bytes for 1, 2, 4 threads; restart; labels-only\n");
}

// RandAugment and repeated augmentation through the loader: the same bytes for 1 and 3 threads
// and after a restart, each sample vt_sample_from_file's under its own key (so the copies of an
// image differ), and the operations change the pixels.
static void test_augmented(const vt_dataset *ds) {
  vt_loader_config c = base(ds, 1, 1);
  c.S = 16, c.per_step = 2, c.step_stride = 8, c.repeats = 3;
  char err[256];
  EXPECT(vt_randaug_parse("rand-m9-mstd0.5-inc1", &c.tc.ra, err, sizeof err) == VT_OK, "%s", err);
  c.tc.ra.prob = 1;  // every drawn operation applied, so that each image changes
  run_t ref = run(&c, 0, 16);
  EXPECT(ref.st == VT_OK && ref.nb == 16, "augmented run: %s", ref.err);
  c.threads = 3;
  run_t r = run(&c, 0, 16), late = run(&c, 7, 9);
  EXPECT(r.nb == 16 && same_batches(&ref, 0, &r, 0, 16), "3 threads differ from 1");
  EXPECT(late.nb == 9 && same_batches(&ref, 7, &late, 0, 9), "restart at 7 differs");
  run_free(&r), run_free(&late);

  vt_sampler s;
  vt_sampler_init(&s, c.seed, ds->count, c.repeats, 0);
  const size_t plane = plane_of(&ref);
  float *one = malloc(plane * sizeof(float));
  int mismatch = 0, copies = 0, copies_equal = 0;
  for (int j = 0; j < 16; j++)
    for (int i = 0; i < 4; i++) {
      int64_t e, p = first_pos(&c, j) + i, k = vt_sampler_at(&s, p, &e);
      vt_sample_spec sp = {.tc = &c.tc, .S = c.S, .train = 1, .seed = c.seed, .epoch = e,
                           .index = vt_sampler_key(&s, p, k), .max_pixels = c.max_pixels};
      EXPECT(vt_sample_from_file(ds->paths[k], &sp, one, err, sizeof err) == VT_IMG_OK, "%s", err);
      const float *got = ref.img + (size_t)(j * 4 + i) * plane;
      mismatch += memcmp(one, got, plane * sizeof(float)) != 0;
      // Another position of this window holding the same image: a copy of it.
      for (int j2 = 0; j2 < 16; j2++)
        for (int i2 = 0; i2 < 4; i2++) {
          int64_t p2 = first_pos(&c, j2) + i2;
          if (p2 <= p || vt_sampler_at(&s, p2, NULL) != k || p2 / ds->count != p / ds->count)
            continue;
          copies++;
          copies_equal += !memcmp(got, ref.img + (size_t)(j2 * 4 + i2) * plane, plane * sizeof(float));
        }
    }
  EXPECT(!mismatch, "%d samples differ from vt_sample_from_file under their keys", mismatch);
  EXPECT(copies > 10 && copies_equal == 0, "%d of %d copies of an image have the same pixels",
         copies_equal, copies);
  // Without RandAugment the crops stay; with it the pixels change.
  c.tc.ra.layers = 0, c.threads = 1;
  run_t plain = run(&c, 0, 16);
  int changed = 0;
  for (int b = 0; b < 64; b++)
    changed += memcmp(plain.img + b * plane, ref.img + b * plane, plane * sizeof(float)) != 0;
  EXPECT(changed >= 56, "RandAugment changed only %d of 64 images", changed);
  run_free(&plain), run_free(&ref);
  vt_sampler_free(&s);
  free(one);
  printf("ok - RandAugment and repeats: threads, restart, own keys (%d copies), %d/64 changed\n",
         copies, changed);
}

// JPEG files (written by PIL, skipped without it) through the reduced decode (DCT scaling,
// windows): the same bytes for 1, 2 and 4 threads and after a restart, and each sample equal to
// vt_sample_from_file's (the function the loader calls, keyed by the sample's own epoch and
// index, as the benchmark calls it).
static void test_jpeg_determinism(void) {
  const char *py = getenv("VT_PYTHON");
  char cmd[1024];
  snprintf(cmd, sizeof(cmd),
           "'%s' -c \"import sys, random; from PIL import Image\n"
           "r = random.Random(5)\n"
           "for c in ('a', 'b', 'c'):\n"
           "  for i in range(6):\n"
           "    w, h = r.randrange(20, 160), r.randrange(20, 160)\n"
           "    im = Image.new('RGB', (w, h)); im.putdata([(r.randrange(256), (x * 7) %% 256, "
           "(x * 3 + y) %% 256) for y in range(h) for x in range(w)])\n"
           "    kw = [dict(quality=90), dict(subsampling=0), dict(progressive=True), dict()][i %% 4]\n"
           "    (im.convert('L') if i == 5 else im).save(sys.argv[1] + '/' + c + '/%%d.jpg' %% i, **kw)"
           "\" '%s' 2>/dev/null",
           py && *py ? py : "/usr/bin/python3", at("jpeg"));
  mkdir(at("jpeg"), 0755);
  mkdir(at("jpeg/a"), 0755), mkdir(at("jpeg/b"), 0755), mkdir(at("jpeg/c"), 0755);
  if (system(cmd) != 0) {
    printf("ok - (skipped: no PIL to write JPEGs) jpeg determinism\n");
    return;
  }
  vt_dataset ds;
  char err[512];
  EXPECT(vt_dataset_open(at("jpeg"), &ds, err, sizeof(err)) == VT_OK && ds.count == 18, "%s", err);
  vt_loader_config c = base(&ds, 1, 1);
  c.S = 16, c.max_pixels = 1 << 20;
  run_t ref = run(&c, 0, 12);
  EXPECT(ref.st == VT_OK && ref.nb == 12, "jpeg reference run: %s", ref.err);
  int threads[] = {2, 4};
  for (int t = 0; t < 2; t++) {
    c.threads = threads[t];
    run_t r = run(&c, 0, 12);
    EXPECT(r.nb == 12 && same_batches(&ref, 0, &r, 0, 12), "jpeg: %d threads differ", threads[t]);
    run_free(&r);
  }
  c.threads = 2;
  run_t r = run(&c, 5, 7);
  EXPECT(r.nb == 7 && same_batches(&ref, 5, &r, 0, 7), "jpeg: restart at 5 differs");
  run_free(&r);
  vt_sampler s;
  vt_sampler_init(&s, c.seed, ds.count, 1, 0);
  size_t P = plane_of(&ref);
  float *one = malloc(P * sizeof(float));
  int same = 0;
  for (int64_t p = 0; p < 48; p++) {
    int64_t e, k = vt_sampler_at(&s, p, &e);
    vt_sample_spec sp = {.tc = &c.tc, .S = c.S, .train = 1, .seed = c.seed, .epoch = e,
                         .index = k, .max_pixels = c.max_pixels};
    same += vt_sample_from_file(ds.paths[k], &sp, one, err, sizeof(err)) == VT_IMG_OK &&
            !memcmp(one, ref.img + (size_t)p * P, P * sizeof(float));
  }
  EXPECT(same == 48, "jpeg: %d of 48 loader samples equal vt_sample_from_file's", same);
  free(one);
  vt_sampler_free(&s);
  run_free(&ref);
  vt_dataset_free(&ds);
  printf("ok - jpeg (reduced decode): same bytes for 1, 2, 4 threads and a restart; samples are "
         "vt_sample_from_file's\n");
}

static void test_dp(const vt_dataset *ds) {
  // G = 12 per step, B = 3: dp 1, 2, 4 with 4, 2, 1 micro-batches per step; 10 steps = 4 epochs.
  const int G = 12, B = 3, steps = 10, n = (int)ds->count, epochs = steps * G / n;
  run_t ref = {0};
  vt_sampler s;
  vt_sampler_init(&s, 1234, ds->count, 1, 0);
  int dps[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    int dp = dps[t], m = G / (dp * B);
    int *uses = calloc((size_t)epochs * n, sizeof(int));
    for (int d = 0; d < dp; d++) {
      vt_loader_config c = base(ds, 1, 2);
      c.batch = B, c.per_step = m, c.step_stride = G, c.offset = (int64_t)d * G / dp;
      run_t r = run(&c, 0, steps * m);
      EXPECT(r.nb == steps * m, "dp %d rank %d: %s", dp, d, r.err);
      size_t P = plane_of(&r);
      for (int j = 0; j < r.nb; j++)
        for (int i = 0; i < B; i++) {
          int64_t p = first_pos(&c, j) + i, e, k = vt_sampler_at(&s, p, &e);
          if (e < epochs) uses[e * n + k]++;
          // The same position gives the same image on any layout.
          if (dp > 1)
            EXPECT(!memcmp(r.img + ((size_t)j * B + i) * P, ref.img + (size_t)p * P,
                           P * sizeof(float)) && r.lab[j * B + i] == ref.lab[p],
                   "dp %d rank %d position %lld differs from dp 1", dp, d, (long long)p);
        }
      if (dp == 1) ref = r;
      else run_free(&r);
    }
    int wrong = 0;
    for (int k = 0; k < epochs * n; k++) wrong += uses[k] != 1;
    EXPECT(wrong == 0, "dp %d: %d (epoch, sample) pairs not used exactly once", dp, wrong);
    free(uses);
  }
  vt_sampler_free(&s);
  run_free(&ref);
  printf("ok - dp 1, 2, 4: every sample once per epoch, same images per position\n");
}

static void test_eval(const vt_dataset *ds) {
  // 30 samples, B 4, dp 2: per_step 1, stride 8, offset 4*d; 4 micro-batches per rank.
  vt_loader_config c = base(ds, 0, 2);
  c.per_step = 1, c.step_stride = 4;
  run_t one = run(&c, 0, 8);  // dp 1: positions 0..31
  EXPECT(one.nb == 8 && one.valid[7] == 2 && one.valid[6] == 4, "eval dp 1 valid %d", one.valid[7]);
  size_t P = plane_of(&one);
  int *seen = calloc((size_t)ds->count, sizeof(int));
  for (int d = 0; d < 2; d++) {
    c.step_stride = 8, c.offset = 4 * d, c.threads = 1 + 2 * d;
    run_t r = run(&c, 0, 4);
    for (int j = 0; j < r.nb; j++) {
      int64_t p0 = first_pos(&c, j);
      int want = p0 + 4 <= ds->count ? 4 : (int)(ds->count - p0);
      EXPECT(r.valid[j] == want, "rank %d batch %d valid %d want %d", d, j, r.valid[j], want);
      for (int i = 0; i < 4; i++) {
        int64_t p = p0 + i;
        const float *img = r.img + ((size_t)j * 4 + i) * P;
        if (i < r.valid[j]) {
          seen[p]++;
          EXPECT(r.lab[j * 4 + i] == ds->labels[p] && !memcmp(img, one.img + p * P, P * 4),
                 "eval position %lld", (long long)p);
        } else {
          float mx = 0;
          for (size_t q = 0; q < P; q++) mx = img[q] > mx ? img[q] : mx < -img[q] ? -img[q] : mx;
          EXPECT(r.lab[j * 4 + i] == 0 && mx == 0, "padding not zero");
        }
      }
    }
    run_free(&r);
  }
  for (int64_t k = 0; k < ds->count; k++) EXPECT(seen[k] == 1, "eval sample %lld", (long long)k);
  free(seen);
  run_free(&one);
  printf("ok - evaluation over 2 ranks: padding, valid, every sample once\n");
}

static void test_bad(void) {
  // Class a: g00..g05 good, then x_empty, x_text, x_trunc; class b: g00..g04, then x_big.
  const char *cls[] = {"a", "b"};
  make_folder("bad", cls, 2, 6);
  unlink(at("bad/b/g05.png"));
  write_bytes(at("bad/a/x_empty.png"), "", 0);
  write_bytes(at("bad/a/x_text.png"), "hello, not a picture\n", 21);
  FILE *f = fopen(at("bad/a/g00.png"), "rb");
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  write_bytes(at("bad/a/x_trunc.png"), buf, n / 2);
  write_png(at("bad/b/x_big.png"), 100, 80, 7);  // over max_pixels 64*64
  char err[512];
  vt_dataset ds;
  EXPECT(vt_dataset_open(at("bad"), &ds, err, sizeof(err)) == VT_OK, "%s", err);
  EXPECT(ds.count == 15, "bad dataset count %lld", (long long)ds.count);
  // Evaluation order: batches of 4 hold indices 4j..4j+3; bad ones are 6, 7, 8 and 14.
  vt_loader_config c = base(&ds, 0, 3);
  run_t r = run(&c, 0, 4);
  int want_bad[] = {0, 2, 1, 1};
  size_t P = plane_of(&r);
  for (int j = 0; j < 4 && r.nb == 4; j++)
    EXPECT(r.bad[j] == want_bad[j], "batch %d bad %d", j, r.bad[j]);
  for (int k = 6; k < 15 && r.nb == 4; k += (k == 8 ? 6 : 1)) {
    // A stand-in is a good sample of the same class: its image equals that sample's.
    int same = 0;
    for (int g = 0; g < 15; g++)
      if (ds.labels[g] == ds.labels[k] && g != k && !(g >= 6 && g <= 8) && g != 14)
        same |= !memcmp(r.img + (size_t)k * P, r.img + (size_t)g * P, P * 4);
    EXPECT(same && r.lab[k] == ds.labels[k], "bad sample %d not replaced by its class", k);
  }
  run_free(&r);
  // Training under skip: the same bytes and counts for 1 and 4 threads.
  c = base(&ds, 1, 1);
  run_t t1 = run(&c, 0, 12);
  c.threads = 4;
  run_t t4 = run(&c, 0, 12);
  vt_sampler s;
  vt_sampler_init(&s, c.seed, ds.count, 1, 0);
  for (int j = 0; j < t1.nb; j++) {
    int want = 0;
    for (int64_t p = 4 * j; p < 4 * j + 4; p++) {
      int64_t k = vt_sampler_at(&s, p, NULL);
      want += (k >= 6 && k <= 8) || k == 14;
    }
    EXPECT(t1.bad[j] == want, "training batch %d: %d bad, want %d", j, t1.bad[j], want);
  }
  vt_sampler_free(&s);
  EXPECT(t1.nb == 12 && t4.nb == 12 && same_batches(&t1, 0, &t4, 0, 12),
         "skip in training: 1 and 4 threads differ, nb %d/%d (%s)", t1.nb, t4.nb, t1.err);
  run_free(&t1), run_free(&t4);
  // Fail: the batch with the first bad file stops with that file named, and stays stopped.
  c = base(&ds, 0, 2);
  c.bad_policy = VT_BAD_FAIL;
  vt_loader *l = vt_loader_create(&c, 0, err, sizeof(err));
  vt_batch b;
  EXPECT(l && vt_loader_next(l, &b, err, sizeof(err)) == VT_OK, "first batch: %s", err);
  EXPECT(vt_loader_next(l, &b, err, sizeof(err)) == VT_ERR_INPUT && strstr(err, "x_empty.png"),
         "fail policy: %s", err);
  EXPECT(vt_loader_next(l, &b, err, sizeof(err)) == VT_ERR_INPUT && strstr(err, "x_empty.png") &&
         vt_loader_position(l) == 1, "fail policy again: %s", err);
  printf("  (fail policy message: %s)\n", err);
  vt_loader_destroy(l);
  c.offset = 12;  // a batch of b/g04 and x_big alone (and padding): the too-large file is named
  l = vt_loader_create(&c, 0, err, sizeof(err));
  EXPECT(l && vt_loader_next(l, &b, err, sizeof(err)) == VT_ERR_INPUT && strstr(err, "x_big.png"),
         "too large: %s", err);
  vt_loader_destroy(l);
  vt_dataset_free(&ds);
  // A class whose every file is bad cannot be replaced: a clear error, not a hang.
  mkdir(at("bad/c"), 0755);
  write_bytes(at("bad/c/1.png"), "", 0);
  write_bytes(at("bad/c/2.png"), "text", 4);
  EXPECT(vt_dataset_open(at("bad"), &ds, err, sizeof(err)) == VT_OK, "%s", err);
  c = base(&ds, 0, 2);
  c.offset = 15;
  run_t rc = run(&c, 0, 1);
  EXPECT(rc.st == VT_ERR_INPUT && strstr(rc.err, "class 'c'"), "bad class: %s", rc.err);
  printf("  (whole bad class message: %s)\n", rc.err);
  run_free(&rc);
  // Omit (evaluation): each bad file a zero image flagged in bad_flags, a good one never; a
  // class with no good file is no error. Bad: 6, 7, 8, 14 and class c's 15, 16.
  c = base(&ds, 0, 3);
  c.bad_policy = VT_BAD_OMIT;
  l = vt_loader_create(&c, 0, err, sizeof(err));
  EXPECT(l != NULL, "omit: %s", err);
  int flagged = 0, wrong = 0;
  const int want_omit[] = {0, 2, 1, 2, 1};  // per batch of 4 (17 images)
  for (int j = 0; l && j < 5; j++) {
    EXPECT(vt_loader_next(l, &b, err, sizeof(err)) == VT_OK, "omit batch %d: %s", j, err);
    for (int i = 0; i < b.valid; i++) {
      const int64_t k = 4 * j + i;
      const int want = (k >= 6 && k <= 8) || k >= 14;
      int zero = 1;
      for (size_t q = 0; q < (size_t)3 * c.S * c.S; q++)
        zero &= b.images[(size_t)i * 3 * c.S * c.S + q] == 0.0f;
      wrong += b.bad_flags[i] != want || (want && !zero) || (!want && zero);
      flagged += b.bad_flags[i];
    }
    EXPECT(b.bad == want_omit[j], "omit batch %d: bad %d, want %d", j, b.bad, want_omit[j]);
  }
  EXPECT(flagged == 6 && wrong == 0, "omit: %d flagged, %d wrong", flagged, wrong);
  vt_loader_destroy(l);
  vt_dataset_free(&ds);
  printf("ok - bad files: skip replaces with counts, fail names the file, omit flags zeros\n");
}

// A gzip IDX file: magic, count (and rows, cols for images), then the bytes.
static void write_idx(const char *path, uint32_t magic, uint32_t n, int rows, int cols,
                      const unsigned char *data) {
  uint32_t hdr[4] = {magic, n, (uint32_t)rows, (uint32_t)cols};
  unsigned char be[16];
  for (int i = 0; i < 16; i++) be[i] = (unsigned char)(hdr[i / 4] >> (24 - 8 * (i % 4)));
  gzFile f = gzopen(path, "wb");
  gzwrite(f, be, magic == 0x803 ? 16 : 8);
  gzwrite(f, data, n * (unsigned)(rows * cols));
  gzclose(f);
}

static void test_prepare(void) {
  char err[512];
  EXPECT(vt_prepare_fashion_mnist_from(at("no_such_dir"), at("fm"), err, sizeof(err)) ==
         VT_ERR_INPUT && strstr(err, "apt-get install dataset-fashion-mnist"), "missing: %s", err);
  // Ten 3x4 images per split, one per class, pixel values that name the image.
  unsigned char pix[10 * 12], lab[10];
  for (int i = 0; i < 10; i++) {
    lab[i] = (unsigned char)(9 - i);
    for (int q = 0; q < 12; q++) pix[i * 12 + q] = (unsigned char)(i * 20 + q);
  }
  mkdir(at("idx"), 0755);
  write_idx(at("idx/train-images-idx3-ubyte.gz"), 0x803, 10, 3, 4, pix);
  write_idx(at("idx/train-labels-idx1-ubyte.gz"), 0x801, 10, 1, 1, lab);
  write_idx(at("idx/t10k-images-idx3-ubyte.gz"), 0x803, 10, 3, 4, pix);
  write_idx(at("idx/t10k-labels-idx1-ubyte.gz"), 0x803, 10, 1, 1, lab);  // wrong magic
  EXPECT(vt_prepare_fashion_mnist_from(at("idx"), at("fm"), err, sizeof(err)) == VT_ERR_INPUT &&
         strstr(err, "magic"), "bad magic: %s", err);
  lab[3] = 10;
  write_idx(at("idx/t10k-labels-idx1-ubyte.gz"), 0x801, 10, 1, 1, lab);
  EXPECT(vt_prepare_fashion_mnist_from(at("idx"), at("fm"), err, sizeof(err)) == VT_ERR_INPUT &&
         strstr(err, "label 10"), "bad label: %s", err);
  lab[3] = 6;
  write_idx(at("idx/t10k-labels-idx1-ubyte.gz"), 0x801, 10, 1, 1, lab);
  EXPECT(vt_prepare_fashion_mnist_from(at("idx"), at("fm"), err, sizeof(err)) == VT_OK, "%s", err);
  vt_dataset ds;
  EXPECT(vt_dataset_open(at("fm/val"), &ds, err, sizeof(err)) == VT_OK, "%s", err);
  int good = ds.count == 10 && ds.num_classes == 10;
  for (int c = 0; good && c < 10; c++) {
    // Sorted folders give label order; file c of the sorted list holds image 9 - c.
    vt_image im;
    good = !strcmp(ds.class_names[c], vt_fashion_mnist_classes[c]) && ds.labels[c] == c &&
           vt_image_load(ds.paths[c], 100, &im, err, sizeof(err)) == VT_IMG_OK;
    for (int q = 0; good && q < 12; q++) good = im.rgb[3 * q] == pix[(9 - c) * 12 + q];
    if (good) good = im.width == 4 && im.height == 3, vt_image_free(&im);
  }
  EXPECT(good, "prepared tree does not match the IDX data");
  vt_dataset_free(&ds);
  printf("ok - prepare: missing package, bad IDX files, PNG tree in label order\n");
}

// A caller's allocator (the trainer passes the backend's pinned host memory): the loader's
// images and labels live in its blocks, which go back to it, and the batches do not change.
static int g_blocks_out;
static void *g_block[2];
static size_t g_block_n[2];
static void *count_alloc(size_t n) {
  void *p = malloc(n);
  if (p && g_blocks_out < 2) g_block[g_blocks_out] = p, g_block_n[g_blocks_out] = n;
  g_blocks_out++;
  return p;
}
static void count_free(void *p) {
  g_blocks_out--;
  free(p);
}
static int inside(const void *p, size_t nbytes, int k) {  // [p, p + nbytes) in block k
  const char *b = g_block[k];
  return b && (const char *)p >= b && (const char *)p + nbytes <= b + g_block_n[k];
}

// ---- tar shards --------------------------------------------------------------------------------

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) printf("FAIL: cannot read %s\n", path), exit(1);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(*n + 1);
  if (!p || fread(p, 1, *n, f) != *n) printf("FAIL: cannot read %s\n", path), exit(1);
  fclose(f);
  return p;
}

// A tar of string members {name, text} made by vt_tar_write_member.
typedef struct {
  const char *name, *text;
} member_t;

static void write_tar(const char *path, const member_t *m, int n) {
  FILE *f = fopen(path, "wb");
  for (int i = 0; f && i < n; i++)
    if (vt_tar_write_member(f, m[i].name, m[i].text, strlen(m[i].text)) != 0) f = NULL;
  if (!f || vt_tar_finish(f) != 0) printf("FAIL: cannot write %s\n", path), exit(1);
  fclose(f);
}

// ds's files as shards dir/part-NNN.tar of `per` samples each, in ds's order: kNNNNN.png and
// kNNNNN.cls, and for every third sample a .json member before them (ignored by the reader).
static int write_shards(const vt_dataset *ds, const char *dir, int per) {
  mkdir(at("%s", dir), 0755);
  int shards = 0;
  for (int64_t i = 0; i < ds->count; i += per, shards++) {
    FILE *f = fopen(at("%s/part-%03d.tar", dir, shards), "wb");
    for (int64_t k = i; f && k < i + per && k < ds->count; k++) {
      size_t n;
      uint8_t *png = slurp(ds->paths[k], &n);
      char name[32], cls[16];
      snprintf(cls, sizeof cls, "%d\n", ds->labels[k]);
      snprintf(name, sizeof name, "k%05lld.json", (long long)k);
      if (k % 3 == 0 && vt_tar_write_member(f, name, "{}", 2) != 0) f = NULL;
      snprintf(name, sizeof name, "k%05lld.png", (long long)k);
      if (f && vt_tar_write_member(f, name, png, n) != 0) f = NULL;
      snprintf(name, sizeof name, "k%05lld.cls", (long long)k);
      if (f && vt_tar_write_member(f, name, cls, strlen(cls)) != 0) f = NULL;
      free(png);
    }
    if (!f || vt_tar_finish(f) != 0) printf("FAIL: cannot write shard %d\n", shards), exit(1);
    fclose(f);
  }
  return shards;
}

// Opening path fails with a message holding want.
static void expect_refused(const char *path, const char *want, const char *what) {
  vt_dataset ds;
  char err[512] = "";
  vt_status st = vt_dataset_open(path, &ds, err, sizeof err);
  EXPECT(st == VT_ERR_INPUT && strstr(err, want), "%s: want '%s', got: %s", what, want, err);
  if (st == VT_OK) vt_dataset_free(&ds);
}

static void test_shards(const vt_dataset *folder) {
  char err[512];
  vt_dataset sh;
  // 30 samples in shards of 7: the loader must give the very batches of the ImageFolder.
  EXPECT(write_shards(folder, "shards", 7) == 5, "five shards");
  EXPECT(vt_dataset_open(at("shards"), &sh, err, sizeof err) == VT_OK, "%s", err);
  int shape = sh.count == folder->count && sh.num_classes == folder->num_classes &&
              sh.nshards == 5;
  EXPECT(shape, "shards: %lld samples, %d classes", (long long)sh.count, sh.num_classes);
  for (int64_t i = 0; shape && i < sh.count; i++)
    EXPECT(sh.labels[i] == folder->labels[i], "label %lld", (long long)i);
  EXPECT(shape && !strcmp(sh.paths[8], at("shards/part-001.tar:k00008.png")), "name %s",
         shape ? sh.paths[8] : "");
  for (int train = 0; shape && train < 2; train++) {
    vt_loader_config c = base(folder, train, 3);
    run_t a = run(&c, 0, 12);
    c.ds = &sh;
    run_t b = run(&c, 0, 12);
    EXPECT(a.st == VT_OK && b.st == VT_OK && a.nb == 12 && b.nb == 12 &&
           same_batches(&a, 0, &b, 0, 12), "%s batches from shards differ from the folder's",
           train ? "training" : "evaluation");
    run_free(&a), run_free(&b);
  }
  vt_dataset_free(&sh);

  // A numbered range and a single shard name the same files.
  EXPECT(vt_dataset_open(at("shards/part-{000..004}.tar"), &sh, err, sizeof err) == VT_OK &&
         sh.count == 30 && sh.nshards == 5, "pattern: %s", err);
  vt_dataset_free(&sh);
  EXPECT(vt_dataset_open(at("shards/part-004.tar"), &sh, err, sizeof err) == VT_OK &&
         sh.count == 2 && sh.labels[1] == 2, "one shard: %s", err);
  vt_dataset_free(&sh);
  expect_refused(at("shards/part-{000..005}.tar"), "part-005.tar", "a missing shard");
  expect_refused(at("shards/part-{004..000}.tar"), "numbered range", "a backwards range");

  // Damaged shards: every refusal names the shard and says what is wrong.
  size_t n;
  uint8_t *good = slurp(at("shards/part-000.tar"), &n);  // k00000.json (header at 0), .png at 1024
  mkdir(at("dmg"), 0755);
  struct {
    size_t cut;      // keep this many bytes (0: all)
    long flip;       // xor this byte with 1 (-1: none)
    const char *want;
  } damage[] = {{0, 3, "header at byte 0 is damaged (checksum)"},
                {0, 1024 + 125, "header at byte 1024 is damaged"},  // the .png's size digits
                {1024 + 100, -1, "cut inside a tar header at byte 1024"},
                {1024 + 512 + 10, -1, "is cut short: member 'k00000.png'"}};
  for (int i = 0; i < 4; i++) {
    uint8_t *b = malloc(n);
    memcpy(b, good, n);
    if (damage[i].flip >= 0) b[damage[i].flip] ^= 1;
    write_bytes(at("dmg/d.tar"), b, damage[i].cut ? damage[i].cut : n);
    expect_refused(at("dmg/d.tar"), damage[i].want, "damaged shard");
    free(b);
  }
  char text[1024];
  memset(text, 'A', sizeof text);
  write_bytes(at("dmg/d.tar"), text, sizeof text);
  expect_refused(at("dmg/d.tar"), "or this is not a tar file", "not a tar");
  // Ends right after a member, without the end-of-archive blocks: accepted, as GNU tar does.
  write_bytes(at("dmg/d.tar"), good, n - 1024);
  EXPECT(vt_dataset_open(at("dmg/d.tar"), &sh, err, sizeof err) == VT_OK && sh.count == 7,
         "a shard without its end blocks: %s", err);
  vt_dataset_free(&sh);
  free(good);

  const member_t no_cls[] = {{"a.jpg", "x"}, {"b.jpg", "x"}, {"b.cls", "1"}};
  const member_t no_img[] = {{"a.cls", "1"}};
  const member_t two[] = {{"a.png", "x"}, {"a.jpg", "x"}, {"a.cls", "0"}};
  const member_t word[] = {{"a.png", "x"}, {"a.cls", "cat"}};
  const member_t neg[] = {{"a.png", "x"}, {"a.cls", "-1"}};
  const member_t none[] = {{"meta.json", "{}"}, {"README", "x"}};
  struct {
    const member_t *m;
    int n;
    const char *want;
  } bad[] = {{no_cls, 3, "sample 'a' has no .cls label member"},
             {no_img, 1, "sample 'a' has a .cls but no .jpg"},
             {two, 3, "two image members (a.png and a.jpg)"},
             {word, 2, "a.cls holds 'cat', not a class number"},
             {neg, 2, "a.cls holds '-1'"},
             {none, 2, "no samples in the 1 shard(s)"}};
  for (int i = 0; i < 6; i++) {
    write_tar(at("dmg/d.tar"), bad[i].m, bad[i].n);
    expect_refused(at("dmg/d.tar"), bad[i].want, "bad sample");
  }
  mkdir(at("dmg/sub"), 0755);
  expect_refused(at("dmg"), "holds both .tar shards", "shards beside folders");

  // Keys in folders, upper-case kinds; a key ends at the first dot of the base name, so
  // "n02.seg.png" is of kind "seg.png", not an image (webdataset's rule). An image no decoder
  // reads is a bad image for the loader's policy, named by shard and member.
  const member_t odd[] = {{"x/n01.PNG", "not a png"},     {"x/n01.cls", " 1 \n"},
                          {"x/n02.seg.png", "not an image"}, {"x/n02.jpeg", "not a jpeg"},
                          {"x/n02.cls", "0"}};
  write_tar(at("dmg/d.tar"), odd, 5);
  EXPECT(vt_dataset_open(at("dmg/d.tar"), &sh, err, sizeof err) == VT_OK && sh.count == 2 &&
         sh.labels[0] == 1 && sh.num_classes == 2, "keys with dots and folders: %s", err);
  if (sh.count == 2) {
    vt_loader_config c = base(&sh, 0, 1);
    c.bad_policy = VT_BAD_FAIL;
    run_t r = run(&c, 0, 1);
    EXPECT(r.st != VT_OK && strstr(r.err, "d.tar:x/n01.PNG"), "bad member: %s", r.err);
    run_free(&r);
  }
  vt_dataset_free(&sh);

  // The writer splits a long name at a '/' (ustar prefix); the reader joins it again.
  char longname[200];
  snprintf(longname, sizeof longname, "%0120d/k.png", 7);
  FILE *f = fopen(at("dmg/long.tar"), "wb");
  EXPECT(f && vt_tar_write_member(f, longname, "x", 1) == 0 && vt_tar_finish(f) == 0, "write");
  if (f) fclose(f);
  vt_tar_member *m = NULL;
  int64_t nm = 0;
  int fd = open(at("dmg/long.tar"), O_RDONLY);
  EXPECT(vt_tar_list(fd, "long.tar", &m, &nm, err, sizeof err) == VT_OK && nm == 1 &&
         !strcmp(m[0].name, longname) && m[0].offset == 512 && m[0].size == 1,
         "long name: %s", nm ? m[0].name : err);
  vt_tar_free_members(m, nm);
  close(fd);
  printf("ok - tar shards: the folder's batches, patterns, damaged shards and bad samples "
         "refused with their names\n");
}

// The filtered resizes (Pillow's, tests/resample_pil.py checks their bytes) through the loader:
// the same batches for any thread count and after a restart, and not the default render's.
static void test_filtered(const vt_dataset *ds) {
  for (int interp = VT_INTERP_BILINEAR; interp <= VT_INTERP_BICUBIC; interp++)
    for (int train = 0; train < 2; train++) {
      vt_loader_config c = base(ds, train, 1);
      c.S = 16;
      run_t plain = run(&c, 0, 6);
      c.tc.train_interp = c.tc.eval_interp = (vt_interp)interp;
      run_t one = run(&c, 0, 6);
      c.threads = 3;
      run_t three = run(&c, 0, 6), later = run(&c, 3, 3);
      EXPECT(one.nb == 6 && three.nb == 6 && later.nb == 3 && same_batches(&one, 0, &three, 0, 6) &&
                 same_batches(&one, 3, &later, 0, 3) && !same_batches(&one, 0, &plain, 0, 6),
             "%s %s: batches depend on threads or restart, or equal the default render's",
             interp == VT_INTERP_BICUBIC ? "bicubic" : "bilinear", train ? "train" : "eval");
      run_free(&plain), run_free(&one), run_free(&three), run_free(&later);
    }
  printf("ok - bilinear and bicubic resizes: same batches for 1 and 3 threads and a restart\n");
}

// A loader that decodes only samples [pixel_first, pixel_first + pixel_count) of each batch (a TP
// rank's share): those images are the whole loader's, every label is there.
static void test_share(const vt_dataset *ds) {
  vt_loader_config c = base(ds, 1, 2);
  run_t whole = run(&c, 0, 5);
  const size_t P = plane_of(&whole);
  int ok = whole.nb == 5;
  for (int r = 0; r < 2; r++) {
    c.pixel_first = 2 * r, c.pixel_count = 2;
    run_t part = run(&c, 0, 5);
    ok = ok && part.nb == 5 &&
         !memcmp(part.lab, whole.lab, (size_t)5 * whole.B * sizeof(int32_t));
    for (int j = 0; ok && j < 5; j++)
      ok = !memcmp(part.img + (j * whole.B + 2 * r) * P, whole.img + (j * whole.B + 2 * r) * P,
                   2 * P * sizeof(float));
    run_free(&part);
  }
  EXPECT(ok, "a loader's share of each batch differs from the whole loader's");
  char err[256];
  c.pixel_first = 3, c.pixel_count = 2;  // past the batch of 4
  EXPECT(!vt_loader_create(&c, 0, err, sizeof err) && strstr(err, "inside the batch"), "%s", err);
  run_free(&whole);
  printf("ok - a loader decoding its share of each batch: those images (only they are held), "
         "every label\n");
}

// The index as bytes (one rank reads the file system and sends it to the others): unpacked it is
// the same index, shards included; a cut or foreign block is refused.
static int same_index(const vt_dataset *a, const vt_dataset *b) {
  int ok = a->count == b->count && a->num_classes == b->num_classes && a->nshards == b->nshards &&
           !memcmp(a->labels, b->labels, (size_t)a->count * sizeof(int32_t));
  for (int64_t i = 0; ok && i < a->count; i++) ok = !strcmp(a->paths[i], b->paths[i]);
  for (int c = 0; ok && c < a->num_classes; c++) ok = !strcmp(a->class_names[c], b->class_names[c]);
  for (int s = 0; ok && s < a->nshards; s++)
    ok = !strcmp(a->shard_paths[s], b->shard_paths[s]) && b->shard_fds[s] >= 0;
  if (ok && a->nshards)
    ok = !memcmp(a->shard_of, b->shard_of, (size_t)a->count * sizeof(int32_t)) &&
         !memcmp(a->offset, b->offset, (size_t)a->count * sizeof(int64_t)) &&
         !memcmp(a->size, b->size, (size_t)a->count * sizeof(int64_t));
  return ok;
}

static void test_pack(const vt_dataset *folder) {
  char err[512];
  vt_dataset sh, back;
  EXPECT(vt_dataset_open(at("shards"), &sh, err, sizeof err) == VT_OK, "%s", err);
  const vt_dataset *both[2] = {folder, &sh};
  for (int k = 0; k < 2; k++) {
    uint8_t *b;
    size_t n;
    EXPECT(vt_dataset_pack(both[k], &b, &n, err, sizeof err) == VT_OK, "%s", err);
    EXPECT(vt_dataset_unpack(b, n, &back, err, sizeof err) == VT_OK && same_index(both[k], &back),
           "%s index: unpacked differs (%s)", k ? "shard" : "folder", err);
    vt_dataset_free(&back);
    for (size_t cut = 0; cut < n; cut += n / 7 + 1)
      EXPECT(vt_dataset_unpack(b, cut, &back, err, sizeof err) == VT_ERR_INPUT &&
                 strstr(err, "is not one"),
             "a block cut to %zu of %zu bytes: %s", cut, n, err);
    b[0] ^= 1;
    EXPECT(vt_dataset_unpack(b, n, &back, err, sizeof err) == VT_ERR_INPUT, "a foreign block");
    free(b);
  }
  vt_dataset_free(&sh);
  printf("ok - the index as bytes: the same folder and shard index unpacked, cut blocks refused\n");
}

// The index cache: an entry gives back the very index; a touched class folder, a shard of
// another size, a damaged entry or another path's entry is not used.
static int cached(const char *path, const vt_dataset *fresh, char *why, size_t whylen) {
  char err[512], file[1200], *fp = NULL;
  uint8_t *b = NULL;
  size_t n = 0;
  vt_index_cache_file(at("cache"), path, file, sizeof file);
  EXPECT(vt_dataset_fingerprint(path, VT_LABEL_KEY, NULL, &fp, err, sizeof err) == VT_OK, "fingerprint: %s", err);
  int hit = fp && vt_index_cache_load(file, path, fp, &b, &n, why, whylen);
  if (hit && fresh) {
    vt_dataset back;
    EXPECT(vt_dataset_unpack(b, n, &back, err, sizeof err) == VT_OK && same_index(fresh, &back),
           "%s: the cached index differs from the one read (%s)", path, err);
    vt_dataset_free(&back);
  }
  free(b), free(fp);
  return hit;
}

static void store(const char *path, const vt_dataset *ds) {
  char err[512], file[1200], *fp = NULL;
  uint8_t *b = NULL;
  size_t n = 0;
  vt_index_cache_file(at("cache"), path, file, sizeof file);
  EXPECT(vt_dataset_fingerprint(path, VT_LABEL_KEY, NULL, &fp, err, sizeof err) == VT_OK &&
             vt_dataset_pack(ds, &b, &n, err, sizeof err) == VT_OK &&
             vt_index_cache_store(file, path, fp, b, n, err, sizeof err) == VT_OK,
         "storing %s: %s", path, err);
  free(b), free(fp);
}

static void test_index_cache(const vt_dataset *folder) {
  char err[512], why[1400], file[1200];
  vt_dataset sh;
  EXPECT(vt_dataset_open(at("shards"), &sh, err, sizeof err) == VT_OK, "%s", err);
  EXPECT(!cached(at("main"), NULL, why, sizeof why) && strstr(why, "no entry"), "empty: %s", why);
  store(at("main"), folder);
  store(at("shards"), &sh);
  EXPECT(cached(at("main"), folder, why, sizeof why), "folder entry not used: %s", why);
  EXPECT(cached(at("shards"), &sh, why, sizeof why), "shard entry not used: %s", why);
  // A class folder whose contents changed (its time moves), a shard that grew.
  struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  EXPECT(utimensat(AT_FDCWD, at("main/dog"), later, 0) == 0, "utimensat");
  EXPECT(!cached(at("main"), NULL, why, sizeof why) && strstr(why, "stale"), "touched: %s", why);
  store(at("main"), folder);
  EXPECT(cached(at("main"), folder, why, sizeof why), "rewritten entry not used: %s", why);
  FILE *f = fopen(sh.shard_paths[1], "ab");
  EXPECT(f && fwrite("\0", 1, 1, f) == 1 && fclose(f) == 0, "growing a shard");
  EXPECT(!cached(at("shards"), NULL, why, sizeof why) && strstr(why, "stale"), "grown: %s", why);
  // A damaged entry: any flipped byte fails the CRC.
  vt_index_cache_file(at("cache"), at("main"), file, sizeof file);
  int fd = open(file, O_RDWR);
  char c = 0;
  EXPECT(fd >= 0 && pread(fd, &c, 1, 40) == 1, "reading the entry");
  c ^= 4;
  EXPECT(pwrite(fd, &c, 1, 40) == 1 && close(fd) == 0, "damaging the entry");
  EXPECT(!cached(at("main"), NULL, why, sizeof why) && strstr(why, "damaged"), "damaged: %s", why);
  // Another path's entry under this name (two paths whose hashes collide) is not used.
  char other[1200];
  vt_index_cache_file(at("cache"), at("shards"), other, sizeof other);
  EXPECT(rename(other, file) == 0, "renaming an entry");
  EXPECT(!cached(at("main"), NULL, why, sizeof why) && strstr(why, "another dataset path"),
         "another path: %s", why);
  vt_dataset_free(&sh);
  printf("ok - the index cache: an entry gives the very index back; a touched class folder, a "
         "grown shard, a damaged entry or another path's entry is not used\n");
}

static void test_allocator(const vt_dataset *ds) {
  char err[256];
  vt_loader_config c = base(ds, 1, 2);
  run_t plain = run(&c, 0, 6);
  c.host_alloc = count_alloc, c.host_free = count_free;
  run_t mine = run(&c, 0, 6);
  EXPECT(plain.st == VT_OK && mine.st == VT_OK && same_batches(&plain, 0, &mine, 0, 6),
         "batches from the caller's allocator differ (%s)", mine.err);
  EXPECT(g_blocks_out == 0, "%d blocks of the caller's allocator not given back", g_blocks_out);
  vt_loader *l = vt_loader_create(&c, 0, err, sizeof(err));
  vt_batch b;
  EXPECT(l && g_blocks_out == 2 && vt_loader_next(l, &b, err, sizeof(err)) == VT_OK &&
             inside(b.labels, (size_t)c.batch * sizeof(int32_t), 0) &&
             inside(b.images, (size_t)c.batch * 3 * c.S * c.S * sizeof(float), 1),
         "the batch is not in the caller's blocks (%d blocks; %s)", g_blocks_out, err);
  vt_loader_destroy(l);
  EXPECT(g_blocks_out == 0, "%d blocks not given back after a destroy", g_blocks_out);
  c.host_free = NULL;
  EXPECT(!vt_loader_create(&c, 0, err, sizeof(err)) && strstr(err, "host_free"),
         "host_alloc without host_free: %s", err);
  run_free(&plain), run_free(&mine);
  printf("ok - the caller's host allocator holds the batches, every block returned\n");
}

static void test_lifecycle(const vt_dataset *ds) {
  char err[256];
  vt_loader_config c = base(ds, 1, 4);
  // Destroy while threads are busy and with a batch outstanding: no hang, no leak.
  for (int k = 0; k < 20; k++) {
    vt_loader *l = vt_loader_create(&c, k, err, sizeof(err));
    vt_batch b;
    if (k & 1) vt_loader_next(l, &b, err, sizeof(err));
    vt_loader_destroy(l);
  }
  c.batch = 0;
  EXPECT(!vt_loader_create(&c, 0, err, sizeof(err)) && strstr(err, "batch"), "batch 0: %s", err);
  printf("ok - destroy with work in flight; bad configuration refused\n");
}

// vt_batch.wait_s: the time vt_loader_next waited for the decoders. Asked for at once, batch
// after batch, one decoder thread cannot keep up (the first batch at least is not ready); given
// time first, the prefetched batches are ready: no wait at all.
static void test_wait(const vt_dataset *ds) {
  char err[256];
  vt_loader_config c = base(ds, 1, 1);
  c.S = 64, c.batch = 8, c.prefetch = 2;
  vt_loader *l = vt_loader_create(&c, 0, err, sizeof(err));
  double waited = 0.0;
  vt_batch b;
  for (int j = 0; l && j < 6; j++) {
    EXPECT(vt_loader_next(l, &b, err, sizeof(err)) == VT_OK && b.wait_s >= 0.0, "batch %d: %s",
           j, err);
    waited += b.wait_s;
  }
  vt_loader_destroy(l);
  l = vt_loader_create(&c, 0, err, sizeof(err));
  struct timespec pause = {1, 0};
  nanosleep(&pause, NULL);  // the two prefetched batches decode meanwhile (a few ms each)
  double ready = 0.0;
  for (int j = 0; l && j < 2; j++) {
    EXPECT(vt_loader_next(l, &b, err, sizeof(err)) == VT_OK, "batch %d: %s", j, err);
    ready += b.wait_s;
  }
  vt_loader_destroy(l);
  EXPECT(waited > 0.0 && ready == 0.0, "waits: %.6f s asked at once, %.6f s when ready", waited,
         ready);
  printf("ok - the loader's waits: %.2f ms over 6 batches asked at once, none for prefetched ones\n",
         1e3 * waited);
}

// Label members: decimal text under a KIND key, a top-level integer field under json:FIELD
// (a field of the same name in a nested object or inside a string is not it), a nested one
// under json:A.B (only along that path).
static void test_label_parse(void) {
  const struct {
    const char *key, *text;
    int want;  // the label, or -1 for a refusal
  } cases[] = {{"cls", "7", 7},
               {"cls", " 12\n", 12},
               {"cls", "cat", -1},
               {"cls", "3 4", -1},
               {"cls", "1000", -1},
               {"json:label", "{\"label\": 3}", 3},
               {"json:label", "{\"a\": {\"label\": 9}, \"label\": 4}", 4},
               {"json:label", "{\"s\": \"x\\\"label\\\": 5\", \"label\": 6}", 6},
               {"json:label", "{\"a\": [{\"label\": 1}], \"label\":17 }", 17},
               {"json:label", "{\"label\": \"3\"}", -1},
               {"json:label", "{\"label\": 3.5}", -1},
               {"json:label", "{\"label\": -2}", -1},
               {"json:label", "{\"other\": 2}", -1},
               {"json:label", "[{\"label\": 1}]", -1},
               {"json:label", "{\"label", -1},
               {"json:a.label", "{\"label\": 1, \"a\": {\"label\": 9}}", 9},
               {"json:a.b.c", "{\"a\": {\"x\": {\"c\": 1}, \"b\": {\"s\": \"}\", \"c\": 5}}}", 5},
               {"json:a.b.c", "{\"a\": {\"b\": {\"c\": [2]}}}", -1},
               {"json:a.c", "{\"a\": {\"b\": {\"c\": 2}}}", -1},
               {"json:a.c", "{\"a\": 3, \"c\": 4}", -1},
               {"json:a.c", "{\"a\": [{\"c\": 4}]}", -1},
               {"json:a.c", "{\"b\": {\"a\": {\"c\": 4}}}", -1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int32_t got = -1;
    char why[128] = "";
    vt_status st = vt_label_parse(cases[i].key, cases[i].text, strlen(cases[i].text), 1000, NULL,
                                  &got, why, sizeof why);
    EXPECT(cases[i].want >= 0 ? st == VT_OK && got == cases[i].want : st == VT_ERR_INPUT && why[0],
           "label %s of '%s': status %d, label %d (%s), want %d", cases[i].key, cases[i].text, st,
           got, why, cases[i].want);
  }
  char err[256];
  EXPECT(vt_label_key_check("cls", err, sizeof err) == VT_OK &&
             vt_label_key_check("json:label_id", err, sizeof err) == VT_OK &&
             vt_label_key_check("png", err, sizeof err) == VT_ERR_INPUT &&
             vt_label_key_check(".cls", err, sizeof err) == VT_ERR_INPUT &&
             vt_label_key_check("json:", err, sizeof err) == VT_ERR_INPUT &&
             vt_label_key_check("json:meta.class_id", err, sizeof err) == VT_OK &&
             vt_label_key_check("json:.a", err, sizeof err) == VT_ERR_INPUT &&
             vt_label_key_check("json:a.", err, sizeof err) == VT_ERR_INPUT &&
             vt_label_key_check("json:a..b", err, sizeof err) == VT_ERR_INPUT &&
             vt_label_key_check("webp", err, sizeof err) == VT_ERR_INPUT,
         "label key checks");
  // Class names: a file of names, or "c<TAB>name" lines (vit3d prepare's classes.txt); then a
  // member's trimmed text or a JSON string names a class; numbers still count; the names'
  // count bounds them. Bad files are refused naming the line.
  char path[64] = "/tmp/vt_names_XXXXXX";
  const int fd = mkstemp(path);
  const char *files[] = {"tench\ngoldfish\ngreat white shark\n",
                         "0\ttench\n1\tgoldfish\n2\tgreat white shark\n"};
  for (int v = 0; fd >= 0 && v < 2; v++) {
    FILE *f = fopen(path, "w");
    fputs(files[v], f);
    fclose(f);
    vt_label_names names;
    EXPECT(vt_label_names_load(path, &names, err, sizeof err) == VT_OK && names.count == 3,
           "names file %d: %s", v, err);
    const struct {
      const char *key, *text;
      int want;
    } named[] = {{"cls", "goldfish", 1},
                 {"txt", " great white shark\n", 2},
                 {"cls", "2", 2},
                 {"cls", "3", -1},
                 {"cls", "gold", -1},
                 {"cls", "goldfish2", -1},
                 {"json:c", "{\"c\": \"tench\"}", 0},
                 {"json:m.c", "{\"m\": {\"c\": \"great white shark\"}}", 2},
                 {"json:c", "{\"c\": \"ten\\u0063h\"}", -1},
                 {"json:c", "{\"c\": 1}", 1},
                 {"json:c", "{\"c\": \"carp\"}", -1}};
    for (size_t i = 0; names.count == 3 && i < sizeof named / sizeof named[0]; i++) {
      int32_t got = -1;
      char why[160] = "";
      vt_status st = vt_label_parse(named[i].key, named[i].text, strlen(named[i].text), 1000,
                                    &names, &got, why, sizeof why);
      EXPECT(named[i].want >= 0 ? st == VT_OK && got == named[i].want
                                : st == VT_ERR_INPUT && why[0],
             "named label %s of '%s': status %d, label %d (%s), want %d", named[i].key,
             named[i].text, st, got, why, named[i].want);
    }
    vt_label_names_free(&names);
  }
  int32_t got = -1;
  char why[160] = "";
  EXPECT(vt_label_parse("cls", "tench", 5, 1000, NULL, &got, why, sizeof why) == VT_ERR_INPUT &&
             strstr(why, "--label-names"), "a name without --label-names: %s", why);
  const struct {
    const char *text, *want;
  } bad[] = {{"a\n\nb\n", "line 2 has no name"},
             {"a\nb\na\n", "classes 0 and 2 are both named 'a'"},
             {"0\ta\n2\tb\n", "line 2 starts with '2', not class 1"},
             {"", "no class names"}};
  for (size_t i = 0; fd >= 0 && i < sizeof bad / sizeof bad[0]; i++) {
    FILE *f = fopen(path, "w");
    fputs(bad[i].text, f);
    fclose(f);
    vt_label_names names;
    EXPECT(vt_label_names_load(path, &names, err, sizeof err) == VT_ERR_INPUT &&
               strstr(err, bad[i].want), "names file '%s': %s", bad[i].text, err);
  }
  if (fd >= 0) close(fd), unlink(path);
}

int main(void) {
  test_label_parse();
  const char *tmp = getenv("TMPDIR");
  snprintf(g_root, sizeof(g_root), "%s/vt_loader_XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(g_root)) return printf("FAIL: mkdtemp %s\n", g_root), 1;
  test_sampler();
  test_sampler_repeats();
  test_folder_and_list();
  const char *cls[] = {"cat", "dog", "emu"};
  make_folder("main", cls, 3, 10);
  vt_dataset ds;
  char err[512];
  if (vt_dataset_open(at("main"), &ds, err, sizeof(err)) != VT_OK)
    return printf("FAIL: %s\n", err), 1;
  test_determinism(&ds);
  test_augmented(&ds);
  test_dp(&ds);
  test_eval(&ds);
  test_lifecycle(&ds);
  test_wait(&ds);
  test_allocator(&ds);
  test_shards(&ds);
  test_pack(&ds);
  test_index_cache(&ds);
  test_filtered(&ds);
  test_share(&ds);
  vt_dataset_free(&ds);
  test_bad();
  test_jpeg_determinism();
  test_prepare();
  rm_tree(g_root);
  printf("%s\n", failures ? "FAILED" : "all loader tests passed");
  return failures ? 1 : 0;
}

#endif
