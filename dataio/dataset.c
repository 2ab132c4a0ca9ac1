// dataset.c: the dataset index (ImageFolder tree, list file or tar shards, the shards read by
// dataset_shards.c; the per-epoch sampler of dataset.h is in sampler.c). Only names and labels
// here: no file is decoded, so opening ImageNet costs its folders' listings, a stat only for a
// link or where the file system does not give an entry's type (shards: one 512-byte read per
// member and one per label). Must not depend on MPI, a backend, the model or an image
// decoder.
#define _DEFAULT_SOURCE  // dirent d_type (DT_REG, DT_DIR)
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "label.h"
#include "tar.h"


char *vt_ds_join(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  int slash = na > 0 && a[na - 1] != '/';
  char *p = malloc(na + (size_t)slash + nb + 1);
  if (!p) return NULL;
  memcpy(p, a, na);
  if (slash) p[na] = '/';
  memcpy(p + na + slash, b, nb + 1);
  return p;
}

int vt_ds_strlist_push(strlist *l, char *s, int32_t lab) {
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

void vt_ds_strlist_free(strlist *l) {
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

// Names in dir, the hidden ones (starting with '.', "." and ".." aside) or the others, whose type
// is a directory (want_dir) or a regular file, following symbolic links as torchvision does (a
// link to nothing is a file, as there: a bad image when it is read, not left out without a
// word); sorted.
static vt_status list_names(const char *dir, int want_dir, int hidden, strlist *out, char *err,
                            size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) return vt_fail_input(err, errlen, "cannot read folder %s: %s", dir, strerror(errno));
  struct dirent *e;
  vt_status st = VT_OK;
  while ((e = readdir(d))) {
    if ((e->d_name[0] == '.') != hidden || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
#ifdef _DIRENT_HAVE_D_TYPE
    // The entry's own type where the file system gives it: no stat (one per file of ImageNet,
    // the metadata traffic the index exists to keep low). Links and unknown types are stat'ed.
    if (e->d_type == DT_REG || e->d_type == DT_DIR) {
      if ((e->d_type == DT_DIR) != (want_dir != 0)) continue;
      if (!vt_ds_strlist_push(out, strdup(e->d_name), 0)) {
        st = vt_fail_input(err, errlen, "out of memory listing %s", dir);
        break;
      }
      continue;
    }
    if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) continue;  // FIFO, socket, device
#endif
    char *full = vt_ds_join(dir, e->d_name);
    struct stat sb;
    int ok = full && stat(full, &sb) == 0;
    const int dangling = !ok && full && lstat(full, &sb) == 0 && S_ISLNK(sb.st_mode);
    free(full);
    if (dangling && !want_dir) sb.st_mode = S_IFREG, ok = 1;
    if (!ok) continue;  // (a real file always stats)
    if (want_dir ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode)) continue;
    if (!vt_ds_strlist_push(out, strdup(e->d_name), 0)) {
      st = vt_fail_input(err, errlen, "out of memory listing %s", dir);
      break;
    }
  }
  closedir(d);
  if (st == VT_OK && out->n > 1) qsort(out->s, (size_t)out->n, sizeof(char *), cmp_str);
  return st;
}

vt_status vt_ds_list_dir(const char *dir, int want_dir, strlist *out, char *err, size_t errlen) {
  return list_names(dir, want_dir, 0, out, err, errlen);
}

// An image file of a class folder by its extension (any case): torchvision's ImageFolder's
// (TIFF among them: vit3d does not decode it, so such a file is a bad image, said by name,
// not silently no sample) and the GIF and PNM that vit3d decodes.
static const char *const k_image_kinds[] = {"jpg", "jpeg", "png", "webp", "gif", "bmp",
                                            "ppm", "pgm",  "pnm", "tif",  "tiff"};
enum { IMAGE_KINDS = sizeof k_image_kinds / sizeof *k_image_kinds };
static int folder_image(const char *name) {
  const char *dot = strrchr(name, '.');
  for (int i = 0; dot && i < IMAGE_KINDS; i++)
    if (!strcasecmp(dot + 1, k_image_kinds[i])) return 1;
  return 0;
}

// One fingerprint line, "path<TAB>size<TAB>mtime<TAB>ctime<TAB>inode" (times as
// seconds.nanoseconds), of a path stat'ed as sb (NULL: stat'ed here; a path that does not stat
// gets "path<TAB>missing", which no stat line equals). The change time and the inode too, as
// git's index keeps them: an archive extracted or a tree copied with its times kept (tar,
// cp -a, rsync -a) brings back the mtimes, but its folders are new files with new change times.
static int fingerprint_line(strlist *out, const char *path, const struct stat *sb) {
  struct stat own;
  char line[128] = "\tmissing\n";
  if (!sb && stat(path, &own) == 0) sb = &own;
  if (sb)
    snprintf(line, sizeof line, "\t%lld\t%lld.%09ld\t%lld.%09ld\t%llu\n", (long long)sb->st_size,
             (long long)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec,
             (long long)sb->st_ctim.tv_sec, (long)sb->st_ctim.tv_nsec,
             (unsigned long long)sb->st_ino);
  char *s = malloc(strlen(path) + strlen(line) + 1);
  if (s) strcat(strcpy(s, path), line);
  return vt_ds_strlist_push(out, s, 0);  // (frees s when it fails)
}

// The folders of a class at dir, its own and every one below it, as torchvision's ImageFolder
// walks them (os.walk with followlinks=True; names starting with '.' skipped here as at the top),
// appended to out; a fingerprint line of each to lines, stat'ed before it is listed (so a
// change after the listing shows as stale). A folder that is its own ancestor (a link loop) is
// refused, where os.walk would go round until the path is too long: above[0..depth-1] are the
// folders above dir, the dataset's root first (a link to it is named, not the folder below).
enum { WALK_DEPTH = 64 };
static vt_status walk_folders(const char *dir, strlist *out, strlist *lines, struct stat *above,
                              int depth, char *err, size_t errlen) {
  struct stat sb;
  if (stat(dir, &sb) != 0)
    return vt_fail_input(err, errlen, "cannot read folder %s: %s", dir, strerror(errno));
  for (int i = 0; i < depth; i++)
    if (above[i].st_dev == sb.st_dev && above[i].st_ino == sb.st_ino)
      return vt_fail_input(err, errlen, "%s is a link to a folder above it (a loop): remove the "
                           "link", dir);
  if (depth == WALK_DEPTH + 1)  // (above[0] is the dataset's root, the class folder's parent)
    return vt_fail_input(err, errlen, "folders nested more than %d deep under a class folder, "
                         "at %s", WALK_DEPTH, dir);
  above[depth] = sb;
  if (!vt_ds_strlist_push(out, strdup(dir), 0) || !fingerprint_line(lines, dir, &sb))
    return vt_fail_input(err, errlen, "out of memory listing %s", dir);
  strlist subs = {0};
  vt_status st = vt_ds_list_dir(dir, 1, &subs, err, errlen);
  for (int64_t i = 0; st == VT_OK && i < subs.n; i++) {
    char *sub = vt_ds_join(dir, subs.s[i]);
    st = sub ? walk_folders(sub, out, lines, above, depth + 1, err, errlen)
             : vt_fail_input(err, errlen, "out of memory listing %s", dir);
    free(sub);
  }
  vt_ds_strlist_free(&subs);
  return st;
}

// The image kinds' fingerprint line and the listing's: an index of a version that took other
// files, or only those directly in class folders, is stale.
static int kinds_line(strlist *lines) {
  char kinds[160] = "listing\tclass folders walked whole\nimages";
  for (int i = 0; i < IMAGE_KINDS; i++)
    snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%c%s", i ? ' ' : '\t',
             k_image_kinds[i]);
  strcat(kinds, "\n");
  return vt_ds_strlist_push(lines, strdup(kinds), 0);
}

static char *join_lines(const strlist *lines) {
  size_t total = 1;
  for (int64_t i = 0; i < lines->n; i++) total += strlen(lines->s[i]);
  char *text = malloc(total), *p = text;
  for (int64_t i = 0; text && i < lines->n; i++) p = stpcpy(p, lines->s[i]);
  if (text) *p = '\0';
  return text;
}

// The hidden folders in root, which vt_ds_list_dir leaves out: counted into ds, the first by
// name.
static void count_hidden_classes(const char *root, vt_dataset *ds) {
  strlist hidden = {0};
  char err[64];
  if (list_names(root, 1, 1, &hidden, err, sizeof err) == VT_OK && hidden.n > 0) {
    ds->hidden_classes = hidden.n;
    snprintf(ds->hidden_class, sizeof ds->hidden_class, "%s", hidden.s[0]);
  }
  vt_ds_strlist_free(&hidden);
}

static vt_status open_folder(const char *root, vt_dataset *ds, strlist *samples, char *err,
                             size_t errlen) {
  strlist classes = {0}, lines = {0};
  struct stat rsb;
  vt_status st = stat(root, &rsb) == 0 && kinds_line(&lines) && fingerprint_line(&lines, root, &rsb)
                     ? vt_ds_list_dir(root, 1, &classes, err, errlen)
                     : vt_fail_input(err, errlen, "cannot read folder %s: %s", root,
                                     strerror(errno));
  char *partial = st == VT_OK && classes.n == 0 ? vt_ds_join(root, ".partial") : NULL;
  struct stat sp;
  if (partial && stat(partial, &sp) == 0 && S_ISDIR(sp.st_mode))
    st = vt_fail_input(err, errlen, "%s holds no shards, only the .partial folder of a vit3d "
                       "prepare shards that was stopped: run that prepare again", root);
  else if (st == VT_OK && classes.n == 0)
    st = vt_fail_input(err, errlen,
                       "no class folders in %s: an ImageFolder dataset is ROOT/<class>/<image> "
                       "(or pass a list file of 'relative/path<TAB>label' lines)",
                       root);
  free(partial);
  if (st == VT_OK && classes.n > INT32_MAX)
    st = vt_fail_input(err, errlen, "too many classes in %s", root);
  if (st == VT_OK) count_hidden_classes(root, ds);
  struct stat above[WALK_DEPTH + 1];
  if (st == VT_OK && stat(root, &above[0]) != 0)
    st = vt_fail_input(err, errlen, "cannot read folder %s: %s", root, strerror(errno));
  for (int64_t c = 0; st == VT_OK && c < classes.n; c++) {
    char *cdir = vt_ds_join(root, classes.s[c]);
    // Its folders in the order of their paths (Python's sorted(os.walk(...)), each one's files
    // sorted: torchvision's order of samples).
    strlist dirs = {0};
    st = cdir ? walk_folders(cdir, &dirs, &lines, above, 1, err, errlen)
              : vt_fail_input(err, errlen, "out of memory listing %s", root);
    if (st == VT_OK && dirs.n > 1) qsort(dirs.s, (size_t)dirs.n, sizeof(char *), cmp_str);
    ds->subfolders += dirs.n > 0 ? dirs.n - 1 : 0;
    // An image by its extension, as torchvision's and timm's ImageFolder take them: a README
    // or a Thumbs.db beside the images is no sample (counted, said by the caller).
    int64_t images = 0, files_seen = 0;
    for (int64_t d = 0; st == VT_OK && d < dirs.n; d++) {
      strlist files = {0};
      st = vt_ds_list_dir(dirs.s[d], 0, &files, err, errlen);
      files_seen += files.n;
      for (int64_t i = 0; st == VT_OK && i < files.n; i++) {
        if (!folder_image(files.s[i])) {
          if (ds->other_files++ == 0)
            snprintf(ds->other_file, sizeof ds->other_file, "%s/%s", dirs.s[d], files.s[i]);
          continue;
        }
        images++;
        if (!vt_ds_strlist_push(samples, vt_ds_join(dirs.s[d], files.s[i]), (int32_t)c))
          st = vt_fail_input(err, errlen, "out of memory listing %s", dirs.s[d]);
      }
      vt_ds_strlist_free(&files);
    }
    if (st == VT_OK && images == 0)
      st = vt_fail_input(err, errlen,
                         "class folder %s has no image files (.jpg, .jpeg, .png, .webp, .gif, "
                         ".bmp, .ppm, .pgm, .pnm, .tif or .tiff; %lld other files, in it and "
                         "the %lld folders below it): add images or remove the folder (every "
                         "folder under %s is a class)", cdir, (long long)files_seen,
                         (long long)(dirs.n > 0 ? dirs.n - 1 : 0), root);
    vt_ds_strlist_free(&dirs);
    free(cdir);
  }
  if (st == VT_OK && !(ds->fingerprint = join_lines(&lines)))
    st = vt_fail_input(err, errlen, "out of memory");
  if (st == VT_OK) {
    ds->num_classes = (int)classes.n;
    ds->class_names = classes.s;  // ownership moves to the dataset
    classes.s = NULL;
    classes.n = 0;
  }
  vt_ds_strlist_free(&classes);
  vt_ds_strlist_free(&lines);
  return st;
}

static int blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') return 0;
  return 1;
}

// Classes named "0".."max_label": labels may have gaps (a class no sample uses); the model still
// needs max + 1 outputs.
vt_status vt_ds_number_classes(vt_dataset *ds, int32_t max_label, char *err, size_t errlen) {
  ds->num_classes = max_label + 1, ds->numbered = 1;
  ds->class_names = calloc((size_t)ds->num_classes, sizeof(char *));
  if (!ds->class_names) return vt_fail_input(err, errlen, "out of memory");
  for (int c = 0; c < ds->num_classes; c++) {
    char name[16];
    snprintf(name, sizeof(name), "%d", c);
    if (!(ds->class_names[c] = strdup(name))) return vt_fail_input(err, errlen, "out of memory");
  }
  return VT_OK;
}

static vt_status open_list(const char *file, vt_dataset *ds, strlist *samples, char *err,
                           size_t errlen) {
  FILE *f = fopen(file, "r");
  if (!f) return vt_fail_input(err, errlen, "cannot read list file %s: %s", file, strerror(errno));
  unsigned char head[12] = {0};
  const size_t got = fread(head, 1, sizeof head, f);
  rewind(f);
  if (got >= 4 && (!memcmp(head, "\x89PNG", 4) || (head[0] == 0xff && head[1] == 0xd8) ||
                   !memcmp(head, "RIFF", 4) || !memcmp(head, "GIF8", 4))) {
    fclose(f);
    return vt_fail_input(err, errlen, "%s is an image, not a dataset: give a folder of class "
                         "folders, a list file or tar shards", file);
  }
  // Paths are relative to the list's folder, so a dataset can be moved as a whole.
  char *dir = strdup(file);
  char *slash = dir ? strrchr(dir, '/') : NULL;
  if (slash) slash[1] = '\0';
  else if (dir) strcpy(dir, "./");

  vt_status st = dir ? VT_OK : vt_fail_input(err, errlen, "out of memory");
  char *line = NULL;
  size_t cap = 0;
  long lineno = 0;
  int32_t max_label = -1;
  while (st == VT_OK) {
    errno = 0;
    ssize_t len = getline(&line, &cap, f);
    if (len < 0) {
      if (ferror(f)) st = vt_fail_input(err, errlen, "error reading %s: %s", file, strerror(errno));
      break;
    }
    lineno++;
    if (lineno == 1 && len >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3))  // a UTF-8 byte order mark
      memmove(line, line + 3, (size_t)(len -= 3) + 1);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || blank(p)) continue;
    // The label is after the last TAB, so paths may hold spaces (but not TABs).
    char *tab = strrchr(line, '\t');
    if (!tab || tab == line) {
      char text[84];  // (80 bytes of the line at most)
      st = vt_fail_input(err, errlen, "%s:%ld: expected 'relative/path<TAB>label', got '%s'",
                         file, lineno, vt_printable(line, text, sizeof text));
      break;
    }
    *tab = '\0';
    char *end;
    errno = 0;
    long lab = strtol(tab + 1, &end, 10);
    while (*end == ' ') end++;
    if (end == tab + 1 || *end || errno || lab < 0 || lab >= VT_MAX_LIST_LABEL) {
      char text[84];  // (80 bytes of the line at most)
      st = vt_fail_input(err, errlen, "%s:%ld: label '%.40s' is not an integer in [0, %d)", file,
                         lineno, vt_printable(tab + 1, text, sizeof text), VT_MAX_LIST_LABEL);
      break;
    }
    if (lab > max_label) max_label = (int32_t)lab;
    char *path = line[0] == '/' ? strdup(line) : vt_ds_join(dir, line);
    if (!vt_ds_strlist_push(samples, path, (int32_t)lab))
      st = vt_fail_input(err, errlen, "out of memory reading %s", file);
  }
  free(line);
  free(dir);
  fclose(f);
  if (st == VT_OK && samples->n == 0)
    st = vt_fail_input(err, errlen,
                       "list file %s has no samples (lines are 'relative/path<TAB>label')", file);
  if (st != VT_OK) return st;
  return vt_ds_number_classes(ds, max_label, err, errlen);
}

// What path names: tar shards (a numbered pattern, a folder of .tar files or one .tar: their
// paths in *shards), else a folder (ImageFolder) or a list file, told apart by *sb.
static vt_status resolve(const char *path, struct stat *sb, strlist *shards, char *err,
                         size_t errlen) {
  memset(sb, 0, sizeof *sb);
  if (!path || !*path) return vt_fail_input(err, errlen, "no dataset path given");
  if (stat(path, sb) != 0) {
    if (errno != ENOENT || !strchr(path, '{'))
      return vt_fail_input(err, errlen, "dataset %s: %s", path, strerror(errno));
    return vt_ds_expand_range(path, shards, err, errlen);  // train-{000..146}.tar
  }
  if (S_ISDIR(sb->st_mode)) return vt_ds_list_shards(path, shards, err, errlen);
  if (S_ISREG(sb->st_mode) && vt_ds_has_suffix(path, ".tar"))
    return vt_ds_strlist_push(shards, strdup(path), 0) ? VT_OK
                                                 : vt_fail_input(err, errlen, "out of memory");
  if (!S_ISREG(sb->st_mode))
    return vt_fail_input(err, errlen, "dataset %s is neither a folder nor a list file", path);
  static const char *const packed[] = {".tar.gz", ".tgz", ".tar.xz", ".tar.zst", ".tar.bz2",
                                       ".zip"};
  for (size_t i = 0; i < sizeof packed / sizeof *packed; i++)
    if (vt_ds_has_suffix(path, packed[i]))
      return vt_fail_input(err, errlen, "dataset %s is a compressed archive: shards are read as "
                           "plain .tar files (seeked into, not streamed); unpack it (for "
                           "instance gunzip it into a .tar)", path);
  return VT_OK;
}

vt_status vt_dataset_open(const char *path, vt_dataset *ds, char *err, size_t errlen) {
  return vt_dataset_open_keyed(path, VT_LABEL_KEY, ds, err, errlen);
}

vt_status vt_dataset_open_keyed(const char *path, const char *label_key, vt_dataset *ds,
                                char *err, size_t errlen) {
  return vt_dataset_open_labeled(path, label_key, NULL, ds, err, errlen);
}

vt_status vt_dataset_open_labeled(const char *path, const char *label_key, const char *names_path,
                                  vt_dataset *ds, char *err, size_t errlen) {
  memset(ds, 0, sizeof(*ds));
  struct stat sb;
  strlist samples = {0}, shards = {0};
  vt_status st = resolve(path, &sb, &shards, err, errlen);
  if (st == VT_OK) {
    if (shards.n)
      st = vt_ds_open_shards(path, label_key, names_path, &shards, ds, &samples, err, errlen);
    else if (S_ISDIR(sb.st_mode)) st = open_folder(path, ds, &samples, err, errlen);
    else st = open_list(path, ds, &samples, err, errlen);
  }
  vt_ds_strlist_free(&shards);
  if (st != VT_OK) {
    vt_ds_strlist_free(&samples);
    vt_dataset_free(ds);
    return st;
  }
  ds->count = samples.n;
  ds->paths = samples.s;
  ds->labels = samples.lab;
  return VT_OK;
}

const char *vt_dataset_shard_names(const char *path, char *buf, size_t size) {
  struct stat sb;
  strlist shards = {0};
  char err[512];
  int found = 0;
  if (resolve(path, &sb, &shards, err, sizeof err) == VT_OK && shards.n > 0) {
    const char *first = shards.s[0], *slash = strrchr(first, '/');
    if (slash) snprintf(buf, size, "%.*s/classes.txt", (int)(slash - first), first);
    else snprintf(buf, size, "classes.txt");
    vt_label_names names = {0};
    found = access(buf, R_OK) == 0 && vt_label_names_load(buf, &names, err, sizeof err) == VT_OK;
    vt_label_names_free(&names);
  }
  vt_ds_strlist_free(&shards);
  return found ? buf : NULL;
}

// The path of a stat line (the text before its last four tabs; a path may hold tabs), or NULL
// for another line (kinds, label key, a "missing" one).
static char *line_path(const char *line, size_t len) {
  size_t end = len;
  for (int tabs = 0; tabs < 4; tabs++) {
    while (end > 0 && line[end - 1] != '\t') end--;
    if (end == 0) return NULL;
    end--;
  }
  char *path = end > 0 ? malloc(end + 1) : NULL;
  if (path) memcpy(path, line, end), path[end] = '\0';
  return path;
}

vt_status vt_dataset_fingerprint(const char *path, const char *label_key, const char *names_path,
                                 const char *stored, char **text, char *err, size_t errlen) {
  *text = NULL;
  struct stat sb;
  strlist sources = {0}, lines = {0};  // the shards, else what is listed below
  vt_status st = resolve(path, &sb, &sources, err, errlen);
  if (st == VT_OK && sources.n) {  // shards: their labels depend on the label member's kind
    char *line = malloc(strlen(label_key) + 16);
    if (line) sprintf(line, "label key\t%s\n", label_key);
    if (!vt_ds_strlist_push(&lines, line, 0)) st = vt_fail_input(err, errlen, "out of memory");
    // and on the class names, where they are given
    if (st == VT_OK && names_path && names_path[0] && !fingerprint_line(&lines, names_path, NULL))
      st = vt_fail_input(err, errlen, "out of memory");
  }
  if (st == VT_OK && sources.n == 0 && S_ISDIR(sb.st_mode)) {
    // An ImageFolder: its folders as open_folder listed them, re-stat'ed (stored: the cache
    // entry's fingerprint). A folder's times change when a name in it is added, removed or
    // renamed, so the root unchanged means the same class folders, each unchanged the same
    // folders below it: the stored folders, unchanged, are all there is to look at.
    if (!kinds_line(&lines) || !fingerprint_line(&lines, path, NULL))
      st = vt_fail_input(err, errlen, "out of memory");
    for (const char *p = stored, *nl; st == VT_OK && p && *p; p = nl + 1) {
      if (!(nl = strchr(p, '\n'))) break;
      char *dir = line_path(p, (size_t)(nl - p));
      if (dir && strcmp(dir, path) != 0 && !fingerprint_line(&lines, dir, NULL))
        st = vt_fail_input(err, errlen, "out of memory");
      free(dir);
    }
  } else if (st == VT_OK && sources.n == 0 && !vt_ds_strlist_push(&sources, strdup(path), 0)) {
    st = vt_fail_input(err, errlen, "out of memory");  // a list file
  }
  for (int64_t i = 0; st == VT_OK && i < sources.n; i++)
    if (!fingerprint_line(&lines, sources.s[i], NULL))
      st = vt_fail_input(err, errlen, "out of memory");
  if (st == VT_OK && !(*text = join_lines(&lines)))
    st = vt_fail_input(err, errlen, "out of memory");
  vt_ds_strlist_free(&sources);
  vt_ds_strlist_free(&lines);
  return st;
}

void vt_dataset_free(vt_dataset *ds) {
  if (!ds) return;
  if (ds->paths)
    for (int64_t i = 0; i < ds->count; i++) free(ds->paths[i]);
  if (ds->class_names)
    for (int c = 0; c < ds->num_classes; c++) free(ds->class_names[c]);
  for (int s = 0; s < ds->nshards; s++) {
    if (ds->shard_fds && ds->shard_fds[s] >= 0) close(ds->shard_fds[s]);
    if (ds->shard_paths) free(ds->shard_paths[s]);
  }
  free(ds->shard_paths);
  free(ds->shard_fds);
  free(ds->shard_of);
  free(ds->offset);
  free(ds->size);
  free(ds->paths);
  free(ds->labels);
  free(ds->class_names);
  free(ds->fingerprint);
  memset(ds, 0, sizeof(*ds));
}

// ---- the index as bytes ---------------------------------------------------------------------

#define PACK_MAGIC 0x76743364737432ULL  // "vt3dst2"

// Strings one after another, each with its NUL.
static size_t strings_nbytes(char *const *s, int64_t n) {
  size_t k = 0;
  for (int64_t i = 0; i < n; i++) k += strlen(s[i]) + 1;
  return k;
}

static uint8_t *put(uint8_t *p, const void *src, size_t n) {
  if (n) memcpy(p, src, n);
  return p + n;
}

static uint8_t *put_strings(uint8_t *p, char *const *s, int64_t n) {
  for (int64_t i = 0; i < n; i++) p = put(p, s[i], strlen(s[i]) + 1);
  return p;
}

vt_status vt_dataset_pack(const vt_dataset *ds, uint8_t **bytes, size_t *nbytes, char *err,
                          size_t errlen) {
  const int64_t head[8] = {(int64_t)PACK_MAGIC, ds->count, ds->num_classes, ds->nshards,
                           (int64_t)strings_nbytes(ds->paths, ds->count),
                           (int64_t)strings_nbytes(ds->class_names, ds->num_classes),
                           (int64_t)strings_nbytes(ds->shard_paths, ds->nshards), ds->numbered};
  const size_t per = sizeof(int32_t) + (ds->nshards ? sizeof(int32_t) + 2 * sizeof(int64_t) : 0);
  const size_t n = sizeof head + (size_t)ds->count * per + (size_t)(head[4] + head[5] + head[6]);
  uint8_t *b = malloc(n ? n : 1), *p = b;
  if (!b)
    return vt_fail_input(err, errlen, "out of memory packing the dataset index (%zu bytes)", n);
  p = put(p, head, sizeof head);
  p = put(p, ds->labels, (size_t)ds->count * sizeof(int32_t));
  if (ds->nshards) {
    p = put(p, ds->shard_of, (size_t)ds->count * sizeof(int32_t));
    p = put(p, ds->offset, (size_t)ds->count * sizeof(int64_t));
    p = put(p, ds->size, (size_t)ds->count * sizeof(int64_t));
  }
  p = put_strings(p, ds->paths, ds->count);
  p = put_strings(p, ds->class_names, ds->num_classes);
  p = put_strings(p, ds->shard_paths, ds->nshards);
  *bytes = b, *nbytes = (size_t)(p - b);
  return VT_OK;
}

// n NUL-terminated strings from [*p, end) into a new array.
static char **take_strings(const uint8_t **p, const uint8_t *end, int64_t n) {
  char **s = calloc((size_t)(n ? n : 1), sizeof(char *));
  for (int64_t i = 0; s && i < n; i++) {
    const uint8_t *z = memchr(*p, 0, (size_t)(end - *p));
    if (!z || !(s[i] = strdup((const char *)*p))) {
      for (int64_t k = 0; k < i; k++) free(s[k]);
      free(s);
      return NULL;
    }
    *p = z + 1;
  }
  return s;
}

static int take(const uint8_t **p, const uint8_t *end, void *dst, size_t n) {
  if ((size_t)(end - *p) < n) return 0;
  if (n) memcpy(dst, *p, n);
  *p += n;
  return 1;
}

vt_status vt_dataset_unpack(const uint8_t *bytes, size_t nbytes, vt_dataset *ds, char *err,
                            size_t errlen) {
  memset(ds, 0, sizeof *ds);
  const uint8_t *p = bytes, *end = bytes + nbytes;
  int64_t head[8];
  if (!take(&p, end, head, sizeof head) || head[0] != (int64_t)PACK_MAGIC || head[1] < 0 ||
      head[2] < 0 || head[2] > INT32_MAX || head[3] < 0 || head[3] > INT32_MAX ||
      head[1] > (int64_t)(nbytes / sizeof(int32_t)))
    return vt_fail_input(err, errlen, "the dataset index received is not one (%zu bytes)", nbytes);
  const int64_t count = head[1];
  ds->count = count, ds->num_classes = (int)head[2], ds->nshards = (int)head[3];
  ds->numbered = head[7] != 0;
  int ok = (ds->labels = malloc((size_t)(count ? count : 1) * sizeof(int32_t))) &&
           take(&p, end, ds->labels, (size_t)count * sizeof(int32_t));
  if (ok && ds->nshards) {
    ds->shard_of = malloc((size_t)(count ? count : 1) * sizeof(int32_t));
    ds->offset = malloc((size_t)(count ? count : 1) * sizeof(int64_t));
    ds->size = malloc((size_t)(count ? count : 1) * sizeof(int64_t));
    ok = ds->shard_of && ds->offset && ds->size &&
         take(&p, end, ds->shard_of, (size_t)count * sizeof(int32_t)) &&
         take(&p, end, ds->offset, (size_t)count * sizeof(int64_t)) &&
         take(&p, end, ds->size, (size_t)count * sizeof(int64_t));
  }
  ok = ok && (ds->paths = take_strings(&p, end, count)) &&
       (ds->class_names = take_strings(&p, end, ds->num_classes)) &&
       (ds->shard_paths = take_strings(&p, end, ds->nshards)) && p == end;
  if (ok && ds->nshards) ok = (ds->shard_fds = malloc((size_t)ds->nshards * sizeof(int))) != NULL;
  if (!ok) {
    if (!ds->paths) ds->count = 0;  // nothing to free past what was taken
    if (!ds->class_names) ds->num_classes = 0;
    if (!ds->shard_paths) ds->nshards = 0;
    vt_dataset_free(ds);
    return vt_fail_input(err, errlen, "the dataset index received is not one (%zu bytes)", nbytes);
  }
  for (int s = 0; s < ds->nshards; s++) ds->shard_fds[s] = -1;
  vt_ds_raise_file_limit(ds->nshards);
  for (int s = 0; s < ds->nshards; s++) {
    ds->shard_fds[s] = open(ds->shard_paths[s], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (ds->shard_fds[s] < 0) {
      vt_status st = vt_fail_input(err, errlen, "cannot open shard %s: %s%s", ds->shard_paths[s],
                                   strerror(errno),
                                   errno == EMFILE ? " (every shard stays open: raise ulimit -n)"
                                                   : "");
      vt_dataset_free(ds);
      return st;
    }
  }
  return VT_OK;
}
