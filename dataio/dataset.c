// dataset.c: the dataset index (ImageFolder tree or list file) and the per-epoch sampler of the
// determinism contract. Only names and labels here: no file is decoded, so opening ImageNet costs
// one stat per file. Must not depend on MPI, a backend, the model or an image decoder.
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vt_rng.h"

// Class labels beyond this are almost certainly a misparsed column, not a real dataset.
#define VT_MAX_LIST_LABEL 10000000

static vt_status fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static vt_status fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return VT_ERR_INPUT;
}

static char *join(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  int slash = na > 0 && a[na - 1] != '/';
  char *p = malloc(na + (size_t)slash + nb + 1);
  if (!p) return NULL;
  memcpy(p, a, na);
  if (slash) p[na] = '/';
  memcpy(p + na + slash, b, nb + 1);
  return p;
}

// A growable list of strings (names, then full paths) with their labels.
typedef struct {
  char **s;
  int32_t *lab;
  int64_t n, cap;
} strlist;

static int strlist_push(strlist *l, char *s, int32_t lab) {
  if (!s) return 0;
  if (l->n == l->cap) {
    int64_t cap = l->cap ? 2 * l->cap : 256;
    char **ns = realloc(l->s, (size_t)cap * sizeof(char *));
    if (!ns) return free(s), 0;
    l->s = ns;
    int32_t *nl = realloc(l->lab, (size_t)cap * sizeof(int32_t));
    if (!nl) return free(s), 0;
    l->lab = nl;
    l->cap = cap;
  }
  l->s[l->n] = s;
  l->lab[l->n++] = lab;
  return 1;
}

static void strlist_free(strlist *l) {
  for (int64_t i = 0; i < l->n; i++) free(l->s[i]);
  free(l->s);
  free(l->lab);
  memset(l, 0, sizeof(*l));
}

// strcmp order is byte order, which for UTF-8 equals the code-point order Python's sorted() uses
// (torchvision's class order), and it does not depend on the locale.
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Names in dir (hidden ones skipped) whose type is a directory (want_dir) or a regular file,
// following symbolic links as torchvision does; sorted.
static vt_status list_dir(const char *dir, int want_dir, strlist *out, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) return fail(err, errlen, "cannot read folder %s: %s", dir, strerror(errno));
  struct dirent *e;
  vt_status st = VT_OK;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *full = join(dir, e->d_name);
    struct stat sb;
    int ok = full && stat(full, &sb) == 0;
    free(full);
    if (!ok) continue;  // a dangling link is not a sample; a real file always stats
    if (want_dir ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode)) continue;
    if (!strlist_push(out, strdup(e->d_name), 0)) {
      st = fail(err, errlen, "out of memory listing %s", dir);
      break;
    }
  }
  closedir(d);
  if (st == VT_OK && out->n > 1) qsort(out->s, (size_t)out->n, sizeof(char *), cmp_str);
  return st;
}

static vt_status open_folder(const char *root, vt_dataset *ds, strlist *samples, char *err,
                             size_t errlen) {
  strlist classes = {0};
  vt_status st = list_dir(root, 1, &classes, err, errlen);
  if (st == VT_OK && classes.n == 0)
    st = fail(err, errlen,
              "no class folders in %s: an ImageFolder dataset is ROOT/<class>/<image> "
              "(or pass a list file of 'relative/path<TAB>label' lines)",
              root);
  if (st == VT_OK && classes.n > INT32_MAX) st = fail(err, errlen, "too many classes in %s", root);
  for (int64_t c = 0; st == VT_OK && c < classes.n; c++) {
    char *cdir = join(root, classes.s[c]);
    strlist files = {0};
    st = cdir ? list_dir(cdir, 0, &files, err, errlen)
              : fail(err, errlen, "out of memory listing %s", root);
    if (st == VT_OK && files.n == 0)
      st = fail(err, errlen,
                "class folder %s has no image files: add images or remove the folder "
                "(every folder under %s is a class)",
                cdir, root);
    for (int64_t i = 0; st == VT_OK && i < files.n; i++)
      if (!strlist_push(samples, join(cdir, files.s[i]), (int32_t)c))
        st = fail(err, errlen, "out of memory listing %s", cdir);
    strlist_free(&files);
    free(cdir);
  }
  if (st == VT_OK) {
    ds->num_classes = (int)classes.n;
    ds->class_names = classes.s;  // ownership moves to the dataset
    classes.s = NULL;
    classes.n = 0;
  }
  strlist_free(&classes);
  return st;
}

static int blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') return 0;
  return 1;
}

static vt_status open_list(const char *file, vt_dataset *ds, strlist *samples, char *err,
                           size_t errlen) {
  FILE *f = fopen(file, "r");
  if (!f) return fail(err, errlen, "cannot read list file %s: %s", file, strerror(errno));
  // Paths are relative to the list's folder, so a dataset can be moved as a whole.
  char *dir = strdup(file);
  char *slash = dir ? strrchr(dir, '/') : NULL;
  if (slash) slash[1] = '\0';
  else if (dir) strcpy(dir, "./");

  vt_status st = dir ? VT_OK : fail(err, errlen, "out of memory");
  char *line = NULL;
  size_t cap = 0;
  long lineno = 0;
  int32_t max_label = -1;
  while (st == VT_OK) {
    errno = 0;
    ssize_t len = getline(&line, &cap, f);
    if (len < 0) {
      if (ferror(f)) st = fail(err, errlen, "error reading %s: %s", file, strerror(errno));
      break;
    }
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || blank(p)) continue;
    // The label is after the last TAB, so paths may hold spaces (but not TABs).
    char *tab = strrchr(line, '\t');
    if (!tab || tab == line) {
      st = fail(err, errlen, "%s:%ld: expected 'relative/path<TAB>label', got '%.80s'", file,
                lineno, line);
      break;
    }
    *tab = '\0';
    char *end;
    errno = 0;
    long lab = strtol(tab + 1, &end, 10);
    while (*end == ' ') end++;
    if (end == tab + 1 || *end || errno || lab < 0 || lab >= VT_MAX_LIST_LABEL) {
      st = fail(err, errlen, "%s:%ld: label '%.40s' is not an integer in [0, %d)", file, lineno,
                tab + 1, VT_MAX_LIST_LABEL);
      break;
    }
    if (lab > max_label) max_label = (int32_t)lab;
    if (!strlist_push(samples, line[0] == '/' ? strdup(line) : join(dir, line), (int32_t)lab))
      st = fail(err, errlen, "out of memory reading %s", file);
  }
  free(line);
  free(dir);
  fclose(f);
  if (st == VT_OK && samples->n == 0)
    st = fail(err, errlen, "list file %s has no samples (lines are 'relative/path<TAB>label')",
              file);
  if (st != VT_OK) return st;
  // Labels may have gaps (a class no line uses); the model still needs max+1 outputs.
  ds->num_classes = max_label + 1;
  ds->class_names = calloc((size_t)ds->num_classes, sizeof(char *));
  if (!ds->class_names) return fail(err, errlen, "out of memory");
  for (int c = 0; c < ds->num_classes; c++) {
    char name[16];
    snprintf(name, sizeof(name), "%d", c);
    if (!(ds->class_names[c] = strdup(name))) return fail(err, errlen, "out of memory");
  }
  return VT_OK;
}

vt_status vt_dataset_open(const char *path, vt_dataset *ds, char *err, size_t errlen) {
  memset(ds, 0, sizeof(*ds));
  if (!path || !*path) return fail(err, errlen, "no dataset path given");
  struct stat sb;
  if (stat(path, &sb) != 0)
    return fail(err, errlen, "dataset %s: %s", path, strerror(errno));
  strlist samples = {0};
  vt_status st;
  if (S_ISDIR(sb.st_mode)) st = open_folder(path, ds, &samples, err, errlen);
  else if (S_ISREG(sb.st_mode)) st = open_list(path, ds, &samples, err, errlen);
  else st = fail(err, errlen, "dataset %s is neither a folder nor a list file", path);
  if (st != VT_OK) {
    strlist_free(&samples);
    vt_dataset_free(ds);
    return st;
  }
  ds->count = samples.n;
  ds->paths = samples.s;
  ds->labels = samples.lab;
  return VT_OK;
}

void vt_dataset_free(vt_dataset *ds) {
  if (!ds) return;
  if (ds->paths)
    for (int64_t i = 0; i < ds->count; i++) free(ds->paths[i]);
  if (ds->class_names)
    for (int c = 0; c < ds->num_classes; c++) free(ds->class_names[c]);
  free(ds->paths);
  free(ds->labels);
  free(ds->class_names);
  memset(ds, 0, sizeof(*ds));
}

// ---- sampler --------------------------------------------------------------------------------

// Draw k of the stream (seed, "sampler", epoch). Draws are consumed in a fixed order, so the
// variable number that rejection takes is itself deterministic.
typedef struct {
  uint64_t seed;
  uint32_t stream;
  uint32_t epoch;
  uint64_t k;
} draw_state;

static uint32_t draw(draw_state *d) { return vt_rng_u32(d->seed, d->stream, d->epoch, d->k++); }

// Uniform in [0, bound) without modulo bias: Lemire's multiply-shift with rejection of the
// few products that would over-represent some values; 64-bit rejection for huge bounds.
static uint64_t uniform_below(draw_state *d, uint64_t bound) {
  if (bound <= UINT32_MAX) {
    uint32_t b = (uint32_t)bound;
    uint64_t m = (uint64_t)draw(d) * b;
    if ((uint32_t)m < b) {
      uint32_t threshold = (uint32_t)(-b) % b;
      while ((uint32_t)m < threshold) m = (uint64_t)draw(d) * b;
    }
    return m >> 32;
  }
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound, x;
  do x = ((uint64_t)draw(d) << 32) | draw(d);
  while (x >= limit);
  return x % bound;
}

void vt_sampler_init(vt_sampler *s, uint64_t seed, int64_t n, int repeats) {
  VT_CHECK(n > 0, "sampler over an empty dataset (n = %lld)", (long long)n);
  VT_CHECK(repeats >= 1, "sampler with %d repeats", repeats);
  s->seed = seed;
  s->n = n;
  s->repeats = repeats;
  s->epoch = -1;
  s->perm = malloc((size_t)n * sizeof(int64_t));
  VT_CHECK(s->perm, "out of memory for a %lld-sample permutation", (long long)n);
}

void vt_sampler_free(vt_sampler *s) {
  free(s->perm);
  s->perm = NULL;
  s->n = 0;
  s->epoch = -1;
}

// Where position q of an epoch reads perm, and which copy it is (dataset.h's windows).
static int64_t slot_of(const vt_sampler *s, int64_t q, int64_t *copy) {
  const int64_t R = s->repeats, L = VT_REPEAT_WINDOW, W = R * L;
  const int64_t w = q / W, r = q % W, len = s->n - w * W < W ? s->n - w * W : W;
  const int64_t held = len == W ? L : (len + R - 1) / R;  // samples in this window
  *copy = r / held;
  return w * L + r % held;
}

int64_t vt_sampler_at(vt_sampler *s, int64_t position, int64_t *epoch) {
  VT_CHECK(position >= 0 && s->perm, "sampler position %lld", (long long)position);
  int64_t e = position / s->n;
  if (e != s->epoch) {
    // Fisher-Yates (Durstenfeld): perm is uniform over all n! orders given unbiased draws.
    draw_state d = {s->seed, vt_hash_name("sampler"), (uint32_t)e, 0};
    for (int64_t i = 0; i < s->n; i++) s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
      int64_t j = (int64_t)uniform_below(&d, (uint64_t)i + 1);
      int64_t t = s->perm[i];
      s->perm[i] = s->perm[j];
      s->perm[j] = t;
    }
    s->epoch = e;
  }
  if (epoch) *epoch = e;
  int64_t copy;
  return s->perm[slot_of(s, position % s->n, &copy)];
}

int64_t vt_sampler_key(const vt_sampler *s, int64_t position, int64_t index) {
  int64_t copy;
  slot_of(s, position % s->n, &copy);
  return index * s->repeats + copy;
}
