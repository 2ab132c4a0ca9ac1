// dataset_shards.c: the dataset index of webdataset-style tar shards (dataset.c opens the
// others): a numbered pattern, a folder of .tar files or one .tar, each shard read member by
// member (one 512-byte header read per member and one read per label), images keyed by their
// sample key, labels from the label member as the label key says. Names and offsets only: no
// image is decoded. Must not depend on MPI, a backend, the model or an image decoder.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dataset_internal.h"
#include "label.h"
#include "tar.h"

int vt_ds_has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && !strcasecmp(s + n - k, suffix);
}

// One "{A..B}" range of decimal numbers in pattern, each number padded with zeros to A's width.
vt_status vt_ds_expand_range(const char *pattern, strlist *out, char *err, size_t errlen) {
  const char *open = strchr(pattern, '{'), *close = open ? strchr(open, '}') : NULL;
  const char *dots = open ? strstr(open, "..") : NULL;
  char *e1, *e2;
  long long a = -1, b = -1;
  if (open && close && dots && dots < close) {
    a = strtoll(open + 1, &e1, 10);
    b = strtoll(dots + 2, &e2, 10);
    if (e1 != dots || e2 != close || open[1] == '-' || dots[2] == '-') a = -1;
  }
  if (a < 0 || b < a || strchr(close, '{'))
    return vt_fail_input(err, errlen,
                         "dataset %s: no such file or folder, and not a shard pattern with "
                         "one numbered range such as train-{000000..000146}.tar",
                         pattern);
  if (b - a >= 1000000)
    return vt_fail_input(err, errlen, "dataset %s: %lld shards, more than 1000000", pattern,
                         b - a + 1);
  const int width = (int)(dots - open - 1);
  for (long long k = a; k <= b; k++) {
    size_t len = strlen(pattern) + 32;
    char *p = malloc(len);
    if (p)
      snprintf(p, len, "%.*s%0*lld%s", (int)(open - pattern), pattern, width, k, close + 1);
    if (!vt_ds_strlist_push(out, p, 0)) return vt_fail_input(err, errlen, "out of memory");
  }
  return VT_OK;
}

// Where a member's sample key ends: at the first '.' of its base name (webdataset's rule:
// "a/b.c.png" is key "a/b", kind "c.png"). NULL for a name without one.
static const char *member_kind(const char *name, size_t *keylen) {
  const char *base = strrchr(name, '/');
  const char *dot = strchr(base ? base + 1 : name, '.');
  if (!dot || dot == (base ? base + 1 : name)) return NULL;
  *keylen = (size_t)(dot - name);
  return dot + 1;
}

static int is_image_kind(const char *k) {
  return !strcasecmp(k, "jpg") || !strcasecmp(k, "jpeg") || !strcasecmp(k, "png") ||
         !strcasecmp(k, "webp");
}

// Per-sample shard, offset and size, grown beside the strlist of names.
typedef struct {
  int32_t *shard;
  int64_t *off, *size, cap;
} shard_refs;

static int refs_push(shard_refs *r, int64_t i, int32_t shard, int64_t off, int64_t size) {
  if (i >= r->cap) {
    int64_t cap = r->cap ? 2 * r->cap : 256;
    int32_t *s = realloc(r->shard, (size_t)cap * sizeof *s);
    if (s) r->shard = s;
    int64_t *o = realloc(r->off, (size_t)cap * sizeof *o);
    if (o) r->off = o;
    int64_t *z = realloc(r->size, (size_t)cap * sizeof *z);
    if (z) r->size = z;
    if (!s || !o || !z) return 0;
    r->cap = cap;
  }
  r->shard[i] = shard, r->off[i] = off, r->size[i] = size;
  return 1;
}

// The class number in the label member (label.h reads it as the label key says).
static vt_status read_label(int fd, const char *shard, const vt_tar_member *cls,
                            const char *label_key, const vt_label_names *names, int32_t *label,
                            char *err, size_t errlen) {
  if (cls->size > VT_LABEL_MAX_BYTES)
    return vt_fail_input(err, errlen, "%s: %s has %lld bytes, more than a label member's %d",
                         shard, cls->name, (long long)cls->size, VT_LABEL_MAX_BYTES);
  char *text = malloc((size_t)cls->size + 1), why[128];
  if (!text) return vt_fail_input(err, errlen, "out of memory reading %s", cls->name);
  const ssize_t got = pread(fd, text, (size_t)cls->size, (off_t)cls->offset);
  vt_status st = VT_OK;
  if (got != cls->size)
    st = vt_fail_input(err, errlen, "%s: cannot read %s: %s", shard, cls->name,
                       got < 0 ? strerror(errno) : "the shard ends inside it");
  else if (vt_label_parse(label_key, text, (size_t)got, VT_MAX_LIST_LABEL, names, label, why,
                          sizeof why) != VT_OK)
    st = vt_fail_input(err, errlen, "%s: %s %s (--label-key %s)", shard, cls->name, why,
                       label_key);
  free(text);
  return st;
}

// The samples of shard s: runs of adjacent members with one key, each with one image and its
// label member KEY.<label_key> (other kinds are ignored; a run without either is not a sample).
static vt_status index_shard(vt_dataset *ds, int s, const char *label_key,
                             const vt_label_names *names, strlist *samples, shard_refs *refs,
                             int32_t *max_label, char *err, size_t errlen) {
  const char *path = ds->shard_paths[s];
  char kind_of_label[32];  // KEY.<this> holds the label
  vt_label_member_kind(label_key, kind_of_label, sizeof kind_of_label);
  vt_tar_member *m;
  int64_t n;
  vt_status st = vt_tar_list(ds->shard_fds[s], path, &m, &n, err, errlen);
  for (int64_t i = 0, j; st == VT_OK && i < n; i = j) {
    size_t klen = 0, kl = 0;  // (set by member_kind where it finds a kind)
    const char *kind = member_kind(m[i].name, &klen);
    int64_t img = -1, cls = -1;
    for (j = i; j < n; j++) {
      const char *k = kind ? member_kind(m[j].name, &kl) : NULL;
      if (!k || kl != klen || memcmp(m[j].name, m[i].name, klen)) break;
      int64_t *slot = is_image_kind(k) ? &img : !strcasecmp(k, kind_of_label) ? &cls : NULL;
      if (slot && *slot >= 0) {
        st = vt_fail_input(err, errlen,
                           "%s: sample '%.*s' has two %s members (%s and %s): a sample is "
                           "one image and its .%s",
                           path, (int)klen, m[i].name, slot == &img ? "image" : "label",
                           m[*slot].name, m[j].name, kind_of_label);
        break;
      }
      if (slot) *slot = j;
    }
    if (j == i) j = i + 1;  // a member without a kind is no part of a sample
    if (st != VT_OK || (img < 0 && cls < 0)) continue;
    if (img < 0 || cls < 0) {
      st = vt_fail_input(
          err, errlen,
          "%s: sample '%.*s' has %s .%s%s: each sample is KEY.jpg (or .jpeg, .png, .webp) "
          "with KEY.%s holding its class number, next to each other in the shard",
          path, (int)klen, m[i].name, img < 0 ? "a" : "no", kind_of_label,
          img < 0 ? " but no .jpg, .jpeg, .png or .webp image"
                  : " label member (labels in another member: --label-key KIND)",
          kind_of_label);
      break;
    }
    int32_t label = 0;
    st = read_label(ds->shard_fds[s], path, &m[cls], label_key, names, &label, err, errlen);
    if (st != VT_OK) break;
    size_t len = strlen(path) + strlen(m[img].name) + 2;
    char *name = malloc(len);
    if (name) snprintf(name, len, "%s:%s", path, m[img].name);
    int ok = name && refs_push(refs, samples->n, (int32_t)s, m[img].offset, m[img].size);
    if (ok) ok = vt_ds_strlist_push(samples, name, label);  // which frees name when it fails
    else free(name);
    if (!ok) {
      st = vt_fail_input(err, errlen, "out of memory indexing %s", path);
      break;
    }
    if (label > *max_label) *max_label = label;
  }
  vt_tar_free_members(m, n);
  return st;
}

// Every shard stays open for the run: lifts the soft limit on open files to the hard one when
// the shards need more than it leaves.
void vt_ds_raise_file_limit(int nshards) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max &&
      rl.rlim_cur < (rlim_t)nshards + 256) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Opens and indexes the shards (ownership of the names moves to the dataset). With class names
// (names_path; NULL or "": none) labels may be names, and the classes are the file's.
vt_status vt_ds_open_shards(const char *what, const char *label_key, const char *names_path,
                            strlist *shards, vt_dataset *ds, strlist *samples, char *err,
                            size_t errlen) {
  ds->nshards = (int)shards->n;
  ds->shard_paths = shards->s;
  shards->s = NULL;
  free(shards->lab);
  memset(shards, 0, sizeof *shards);
  ds->shard_fds = malloc((size_t)ds->nshards * sizeof(int));
  if (!ds->shard_fds) return vt_fail_input(err, errlen, "out of memory");
  for (int s = 0; s < ds->nshards; s++) ds->shard_fds[s] = -1;
  vt_ds_raise_file_limit(ds->nshards);
  shard_refs refs = {0};
  int32_t max_label = -1;
  vt_label_names names = {0};
  vt_status st = names_path && names_path[0] ? vt_label_names_load(names_path, &names, err, errlen)
                                              : VT_OK;
  const vt_label_names *np = names.count ? &names : NULL;
  for (int s = 0; st == VT_OK && s < ds->nshards; s++) {
    ds->shard_fds[s] = open(ds->shard_paths[s], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (ds->shard_fds[s] < 0)
      st = vt_fail_input(err, errlen, "cannot open shard %s: %s%s", ds->shard_paths[s],
                         strerror(errno),
                         errno == EMFILE ? " (every shard stays open: raise ulimit -n)" : "");
    else
      st = index_shard(ds, s, label_key, np, samples, &refs, &max_label, err, errlen);
  }
  ds->shard_of = refs.shard, ds->offset = refs.off, ds->size = refs.size;
  if (st == VT_OK && samples->n == 0)
    st = vt_fail_input(err, errlen,
                       "no samples in the %d shard(s) of %s: a sample is KEY.jpg (or .jpeg, "
                       ".png, .webp) with its label member (--label-key %s), next to each other in a "
                       "shard (webdataset's layout)",
                       ds->nshards, what, label_key);
  if (st == VT_OK && np) {  // the classes are the file's, named by it
    ds->num_classes = names.count;
    ds->class_names = names.names;
    names.names = NULL;
  } else if (st == VT_OK) {
    st = vt_ds_number_classes(ds, max_label, err, errlen);
  }
  vt_label_names_free(&names);
  return st;
}

// The .tar files directly in dir, sorted; none when it has none. A folder with both .tar files
// and subfolders is refused: neither reading of it is safe to guess.
// Where dir holds vit3d prepare's shards.txt ("NAME<TAB>BYTES" per shard it wrote): every shard
// it names is there with its size (a missing one was left out without a word: fewer images).
static vt_status check_prepared(const char *dir, const strlist *shards, char *err,
                                size_t errlen) {
  char *list = vt_ds_join(dir, "shards.txt");
  FILE *f = list ? fopen(list, "r") : NULL;
  vt_status st = VT_OK;
  char line[600], name[512];
  long long bytes;
  while (f && st == VT_OK && fgets(line, sizeof line, f)) {
    if (sscanf(line, "%511[^\t]\t%lld", name, &bytes) != 2) continue;
    char *path = vt_ds_join(dir, name);
    struct stat sb;
    int listed = 0;
    for (int64_t i = 0; path && i < shards->n && !listed; i++) listed = !strcmp(shards->s[i], path);
    if (!listed || stat(path, &sb) != 0)
      st = vt_fail_input(err, errlen, "%s lacks %s, one of the shards its shards.txt lists (vit3d "
                         "prepare wrote them): restore it or prepare the shards again (or "
                         "remove shards.txt to read the folder as it is)", dir, name);
    else if ((long long)sb.st_size != bytes)
      st = vt_fail_input(err, errlen, "%s has %lld bytes and its shards.txt says %lld (vit3d "
                         "prepare wrote it): it was cut or changed; restore it or prepare the "
                         "shards again", path, (long long)sb.st_size, bytes);
    free(path);
  }
  if (f) fclose(f);
  free(list);
  return st;
}

vt_status vt_ds_list_shards(const char *dir, strlist *out, char *err, size_t errlen) {
  strlist files = {0}, dirs = {0};
  vt_status st = vt_ds_list_dir(dir, 0, &files, err, errlen);
  for (int64_t i = 0; st == VT_OK && i < files.n; i++)
    if (vt_ds_has_suffix(files.s[i], ".tar") &&
        !vt_ds_strlist_push(out, vt_ds_join(dir, files.s[i]), 0))
      st = vt_fail_input(err, errlen, "out of memory listing %s", dir);
  if (st == VT_OK && out->n) st = vt_ds_list_dir(dir, 1, &dirs, err, errlen);
  if (st == VT_OK && out->n) st = check_prepared(dir, out, err, errlen);
  if (st == VT_OK && dirs.n)
    st = vt_fail_input(err, errlen,
                       "%s holds both .tar shards (%s) and folders (%s): pass the shards "
                       "(a pattern or a folder of only shards) or the ImageFolder root",
                       dir, out->s[0], dirs.s[0]);
  vt_ds_strlist_free(&files);
  vt_ds_strlist_free(&dirs);
  return st;
}

