// test_loader.c: the sampler and the threaded loader on small ImageFolder trees of PNGs this
// test writes (and JPEGs through PIL): permutations and repeated augmentation, bytes independent
// of the thread count, every sample once per epoch over DP ranks, exact restart, RandAugment,
// evaluation padding, bad files under skip, fail and omit, the caller's allocator, the
// consumer's waits. The dataset index is test_dataset.c's; both use loader_fixtures.c. Skips
// (77) in builds without libpng (VT_HAVE_PNG).
#include <stdio.h>

#ifndef VT_HAVE_PNG
int main(void) {
  printf("SKIP: built without libpng (VT_HAVE_PNG undefined)\n");
  return 77;
}
#else

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dataset.h"
#include "loader.h"
#include "loader_fixtures.h"
#include "sample.h"

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
// permutation R times each (those of the last window fewer when R does not divide its length),
// the copies in one window of R * VT_REPEAT_WINDOW positions, the pairs (2k, 2k + 1) never an
// image and its copy (but in a last window of a single image), and every position of an epoch
// its own augmentation key.
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
        // Which samples: the first `unique` of the epoch's permutation, n positions in all.
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
          copies_equal +=
              !memcmp(got, ref.img + (size_t)(j2 * 4 + i2) * plane, plane * sizeof(float));
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
           "    kw = [dict(quality=90), dict(subsampling=0), dict(progressive=True), "
           "dict()][i %% 4]\n"
           "    (im.convert('L') if i == 5 else im).save(sys.argv[1] + '/' + c + "
           "'/%%d.jpg' %% i, **kw)"
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
  printf("ok - the loader's waits: %.2f ms over 6 batches asked at once, none for prefetched "
         "ones\n", 1e3 * waited);
}

int main(void) {
  test_sampler();
  test_sampler_repeats();
  vt_dataset ds;
  if (!fx_make_root("vt_loader_") || !fx_open_main(&ds)) return 1;
  test_determinism(&ds);
  test_augmented(&ds);
  test_dp(&ds);
  test_eval(&ds);
  test_lifecycle(&ds);
  test_wait(&ds);
  test_allocator(&ds);
  vt_dataset_free(&ds);
  test_bad();
  test_jpeg_determinism();
  return fx_finish("loader");
}

#endif
