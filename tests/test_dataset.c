// test_dataset.c: the dataset index on small ImageFolder trees of PNGs this test writes: class
// order, clear errors for empty datasets and bad list files, tar shards (the folder's very
// batches; damaged shards and bad samples refused), the index as bytes and its cache, label
// members and class names; the loader over an index (the filtered resizes, a rank's share of
// each batch); Fashion-MNIST preparation. The sampler and loader are test_loader.c's; both use
// loader_fixtures.c. Skips (77) in builds without libpng (VT_HAVE_PNG).
#include <stdio.h>

#ifndef VT_HAVE_PNG
int main(void) {
  printf("SKIP: built without libpng (VT_HAVE_PNG undefined)\n");
  return 77;
}
#else

#include <fcntl.h>
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
#include "loader_fixtures.h"
#include "prepare.h"
#include "tar.h"

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

  // List files: a UTF-8 byte order mark (Windows editors write one), comments, blank lines,
  // CRLF, relative and absolute paths, label gaps.
  char text[2048];
  snprintf(text, sizeof(text),
           "\xEF\xBB\xBFord/a/g00.png\t3\r\n  # indented comment\n%s/ord/b/g01.png\t0\n"
           "\n# path<TAB>label\nord/B/g00.png\t 1 \n",
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
                          {"\t1\n", ":1:"},                     {"# nothing\n\n", "no samples"},
                          {"\x89PNG\r\n\x1a\n\x01", "is an image, not a dataset"},
                          {"a\x01" "b\xff\n", "got 'a?b?'"}};  // (no raw bytes in a message)
  for (int i = 0; i < 8; i++) {
    write_bytes(at("bad.txt"), bad[i][0], strlen(bad[i][0]));
    EXPECT(vt_dataset_open(at("bad.txt"), &ds, err, sizeof(err)) ==
           VT_ERR_INPUT && strstr(err, bad[i][1]), "bad list %d: %s", i, err);
  }
  printf("ok - ImageFolder order, empty datasets, list files\n");
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
  // Cut inside the padding after the .png's data (the samples after it would be lost): refused.
  const size_t png_size = (size_t)strtol((const char *)good + 1024 + 124, NULL, 8);
  EXPECT(png_size % 512 != 0, "the test's .png fills whole blocks (%zu bytes)", png_size);
  write_bytes(at("dmg/d.tar"), good, 1536 + png_size + 1);
  expect_refused(at("dmg/d.tar"), "is cut short: member 'k00000.png'", "cut in the padding");
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
  const member_t odd[] = {{"x/n01.PNG", "not a png"},     {"x/n01.CLS", " 1 \n"},
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
  // An upper-case .TAR is a shard; a compressed one is refused, saying to unpack it.
  write_tar(at("dmg/UP.TAR"), odd, 5);
  EXPECT(vt_dataset_open(at("dmg/UP.TAR"), &sh, err, sizeof err) == VT_OK && sh.count == 2,
         "an upper-case .TAR: %s", err);
  vt_dataset_free(&sh);
  remove(at("dmg/UP.TAR"));
  write_bytes(at("dmg/z.tar.gz"), "\x1f\x8b\x08\x00", 4);
  expect_refused(at("dmg/z.tar.gz"), "is a compressed archive", "a .tar.gz shard");
  remove(at("dmg/z.tar.gz"));

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

// The index cache: an entry gives back the very index; a touched class folder (or a folder
// below one), a shard of another size, a damaged entry or another path's entry is not used.
// As launch/data.c reads it: the entry, then the fingerprint of what it names now.
static int cached(const char *path, const vt_dataset *fresh, char *why, size_t whylen) {
  char err[512], file[1200], *fp = NULL, *stored = NULL;
  uint8_t *b = NULL;
  size_t n = 0;
  vt_index_cache_file(at("cache"), path, file, sizeof file);
  const int entry = vt_index_cache_read(file, path, &stored, &b, &n, why, whylen);
  EXPECT(vt_dataset_fingerprint(path, VT_LABEL_KEY, NULL, stored, &fp, err, sizeof err) == VT_OK,
         "fingerprint: %s", err);
  int hit = entry && fp && strcmp(fp, stored) == 0;
  if (entry && !hit) snprintf(why, whylen, "stale");
  free(stored);
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
  // (an ImageFolder's fingerprint is its listing's, of every folder it walked)
  if (ds->fingerprint) fp = strdup(ds->fingerprint);
  EXPECT((fp || vt_dataset_fingerprint(path, VT_LABEL_KEY, NULL, NULL, &fp, err, sizeof err) ==
                    VT_OK) &&
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
  vt_dataset again;  // (listed again, as a run would after a stale entry)
  EXPECT(vt_dataset_open(at("main"), &again, err, sizeof err) == VT_OK, "%s", err);
  store(at("main"), &again);
  EXPECT(cached(at("main"), folder, why, sizeof why), "rewritten entry not used: %s", why);
  vt_dataset_free(&again);
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
  // (the third with a UTF-8 byte order mark, as some editors save; class 3 is "café 🐟")
  const char *files[] = {
      "tench\ngoldfish\ngreat white shark\ncaf\xc3\xa9 \xf0\x9f\x90\x9f\n",
      "0\ttench\n1\tgoldfish\n2\tgreat white shark\n3\tcaf\xc3\xa9 \xf0\x9f\x90\x9f\n",
      "\xef\xbb\xbf"
      "0\ttench\n1\tgoldfish\n2\tgreat white shark\n3\tcaf\xc3\xa9 \xf0\x9f\x90\x9f\n"};
  for (int v = 0; fd >= 0 && v < 3; v++) {
    FILE *f = fopen(path, "w");
    fputs(files[v], f);
    fclose(f);
    vt_label_names names;
    EXPECT(vt_label_names_load(path, &names, err, sizeof err) == VT_OK && names.count == 4,
           "names file %d: %s", v, err);
    const struct {
      const char *key, *text;
      int want;
    } named[] = {{"cls", "goldfish", 1},
                 {"txt", " great white shark\n", 2},
                 {"cls", "2", 2},
                 {"cls", "4", -1},
                 {"cls", "gold", -1},
                 {"cls", "goldfish2", -1},
                 {"json:c", "{\"c\": \"tench\"}", 0},
                 {"json:m.c", "{\"m\": {\"c\": \"great white shark\"}}", 2},
                 {"json:c", "{\"c\": \"ten\\u0063h\"}", 0},  // JSON's escapes undone
                 {"json:c", "{\"c\": \"great\\u0020white\\/shark\"}", -1},
                 {"json:c", "{\"c\": \"great\\u0020white shark\"}", 2},
                 {"json:c", "{\"c\": \"caf\\u00e9 \\ud83d\\udc1f\"}", 3},  // json.dumps's
                 {"json:c", "{\"c\": \"caf\\u00e9 \\ud83d\"}", -1},  // a lone surrogate
                 {"json:c", "{\"c\": \"ten\\qch\"}", -1},                // no such escape
                 {"json:c", "{\"c\": 1}", 1},
                 {"json:c", "{\"c\": \"carp\"}", -1}};
    for (size_t i = 0; names.count == 4 && i < sizeof named / sizeof named[0]; i++) {
      int32_t got = -1;
      char why[160] = "";
      vt_status st = vt_label_parse(named[i].key, named[i].text, strlen(named[i].text), 1000,
                                    &names, &got, why, sizeof why);
      EXPECT(named[i].want >= 0 ? st == VT_OK && got == named[i].want
                                : st == VT_ERR_INPUT && why[0],
             "named label %s of '%s': status %d, label %d (%s), want %d", named[i].key,
             named[i].text, st, got, why, named[i].want);
    }
    int32_t got = -1;
    char why[160] = "";
    const char *bad_escape = "{\"c\": \"t\\qh\"}";
    EXPECT(names.count != 4 ||
               (vt_label_parse("json:c", bad_escape, strlen(bad_escape), 1000, &names, &got, why,
                               sizeof why) == VT_ERR_INPUT && strstr(why, "an escape JSON")),
           "a bad escape said as such: %s", why);
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

// Folders below class folders, as torchvision's ImageFolder walks them: their images are the
// class's, in the order of Python's sorted(os.walk(class folder)) (the folders by path, so
// "x" < "x-1" < "x/y": '-' sorts before '/'), each folder's files sorted; a link to a folder
// above is refused as a loop; the index cache sees a file added two folders down.
static void test_nested(void) {
  char err[512], why[1400];
  mkdir(at("nest"), 0755);
  const char *dirs[] = {"nest/a", "nest/a/x", "nest/a/x/y", "nest/a/x-1", "nest/a/z",
                        "nest/a/.hid", "nest/b"};
  for (int i = 0; i < 7; i++) mkdir(at(dirs[i]), 0755);
  const char *files[] = {"nest/a/x/y/3.png", "nest/a/z/6.png", "nest/a/x-1/4.png",
                         "nest/a/1.png", "nest/a/x/2.png", "nest/a/.hid/5.png", "nest/b/0.png",
                         "nest/a/x/notes.txt"};
  for (int i = 0; i < 8; i++) write_bytes(at(files[i]), "x", 1);
  vt_dataset ds;
  EXPECT(vt_dataset_open(at("nest"), &ds, err, sizeof err) == VT_OK, "%s", err);
  const char *want[] = {"a/1.png", "a/x/2.png", "a/x-1/4.png", "a/x/y/3.png", "a/z/6.png",
                        "b/0.png"};
  int order = ds.count == 6 && ds.subfolders == 4 && ds.other_files == 1 &&
              ds.hidden_classes == 0;
  for (int i = 0; order && i < 6; i++) {
    const char *p = ds.paths[i];
    order = strlen(p) > strlen(want[i]) && !strcmp(p + strlen(p) - strlen(want[i]), want[i]) &&
            ds.labels[i] == (i == 5);
  }
  EXPECT(order, "nested order: %lld samples, %lld folders below classes", (long long)ds.count,
         (long long)ds.subfolders);
  store(at("nest"), &ds);
  EXPECT(cached(at("nest"), &ds, why, sizeof why), "nested entry not used: %s", why);
  struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  write_bytes(at("nest/a/x/y/7.png"), "x", 1);
  EXPECT(utimensat(AT_FDCWD, at("nest/a/x/y"), later, 0) == 0, "utimensat");
  EXPECT(!cached(at("nest"), NULL, why, sizeof why) && strstr(why, "stale"),
         "a file added two folders down: %s", why);
  vt_dataset_free(&ds);
  // Hidden folders beside the classes (a notebook's checkpoints): left out, counted for the
  // caller's warning (torchvision would make each a class); a hidden file is no folder.
  mkdir(at("nest/.ipynb_checkpoints"), 0755);
  mkdir(at("nest/.cache"), 0755);
  write_bytes(at("nest/.ipynb_checkpoints/8.png"), "x", 1);
  write_bytes(at("nest/.DS_Store"), "x", 1);
  EXPECT(vt_dataset_open(at("nest"), &ds, err, sizeof err) == VT_OK, "%s", err);
  EXPECT(ds.count == 7 && ds.num_classes == 2 && ds.hidden_classes == 2 &&
             !strcmp(ds.hidden_class, ".cache"),
         "hidden class folders: %lld samples, %d classes, %lld hidden, first %s",
         (long long)ds.count, ds.num_classes, (long long)ds.hidden_classes, ds.hidden_class);
  vt_dataset_free(&ds);
  // A link to nothing is a sample (a bad image when read, as torchvision lists it and fails to
  // open it), not left out without a word.
  EXPECT(symlink("missing.png", at("nest/a/zz.png")) == 0, "symlink");
  EXPECT(vt_dataset_open(at("nest"), &ds, err, sizeof err) == VT_OK, "%s", err);
  int listed = 0;
  for (int64_t i = 0; i < ds.count; i++) listed += strstr(ds.paths[i], "nest/a/zz.png") != NULL;
  EXPECT(ds.count == 8 && listed == 1, "a dangling link: %lld samples, listed %d",
         (long long)ds.count, listed);
  vt_dataset_free(&ds);
  unlink(at("nest/a/zz.png"));
  EXPECT(symlink("..", at("nest/a/up")) == 0, "symlink");  // (to the dataset's root)
  EXPECT(vt_dataset_open(at("nest"), &ds, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "nest/a/up is a link to a folder above it"), "a link to the root: %s",
         err);
  unlink(at("nest/a/up"));
  EXPECT(symlink("..", at("nest/a/z/loop")) == 0, "symlink");
  EXPECT(vt_dataset_open(at("nest"), &ds, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "loop") && strstr(err, "nest/a/z/loop"), "a link loop: %s", err);
  printf("ok - folders below class folders: torchvision's order, a link loop refused, the index "
         "cache stale after a change two folders down; hidden folders beside the classes "
         "counted\n");
}

int main(void) {
  test_label_parse();
  if (!fx_make_root("vt_dataset_")) return 1;
  test_folder_and_list();
  vt_dataset ds;
  if (!fx_open_main(&ds)) return 1;
  test_shards(&ds);
  test_pack(&ds);
  test_index_cache(&ds);
  test_nested();
  test_filtered(&ds);
  test_share(&ds);
  vt_dataset_free(&ds);
  test_prepare();
  return fx_finish("dataset");
}

#endif
