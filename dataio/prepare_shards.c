// prepare_shards.c: any dataset vit3d reads, rewritten as tar shards in webdataset's layout
// (prepare.h). Must not depend on MPI, a backend or the model.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dataset.h"
#include "prepare.h"
#include "sample.h"
#include "tar.h"

// The image kind of bytes, by their signature: "png", "jpg", "webp" or NULL.
static const char *image_kind(const uint8_t *b, size_t n) {
  if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return "png";
  if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "jpg";
  if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "webp";
  return NULL;
}

// The largest image the check below decodes (the trainer's --max-image-pixels default).
static const int64_t k_max_pixels = 100000000;

// Whether bytes end as a whole file of their kind ends: a PNG with its IEND chunk, a JPEG with
// its end marker (FF D9), a WebP with the length its RIFF header gives. One that does not (cut
// short, or with bytes after its end) is decoded to tell.
static int ends_whole(const char *kind, const uint8_t *b, size_t n) {
  if (!strcmp(kind, "png"))
    return n >= 20 && !memcmp(b + n - 12, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
  if (!strcmp(kind, "jpg")) return n >= 4 && b[n - 2] == 0xff && b[n - 1] == 0xd9;
  const uint64_t riff = (uint64_t)b[4] | (uint64_t)b[5] << 8 | (uint64_t)b[6] << 16 |
                        (uint64_t)b[7] << 24;
  return riff + 8 + (riff & 1) == n || riff + 8 == n;
}

static int holds_shards(const char *dir) {
  DIR *d = opendir(dir);
  int found = 0;
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    found = n > 4 && !strcasecmp(e->d_name + n - 4, ".tar");  // (the reader's any case)
  }
  if (d) closedir(d);
  return found;
}

// Whether dir holds a folder that is not hidden (its name in name): a run reading OUT would
// find both shards and a folder there, and refuse it.
static int holds_folder(const char *dir, char *name, size_t size) {
  DIR *d = opendir(dir);
  int found = 0;
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    char path[4096];
    struct stat sb;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    found = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (found) snprintf(name, size, "%s", e->d_name);
  }
  if (d) closedir(d);
  return found;
}

// Whether the folder out is the folder src or lies inside it: src's device and inode met going
// up from out by "..", links followed as the file system does.
static int inside(const char *out, const char *src) {
  struct stat s, at, up;
  char path[4096];
  snprintf(path, sizeof path, "%s", out);
  if (stat(src, &s) != 0 || stat(path, &at) != 0) return 0;
  for (int level = 0; level < 256; level++) {
    if (at.st_dev == s.st_dev && at.st_ino == s.st_ino) return 1;
    const size_t n = strlen(path);
    if (n + 4 >= sizeof path) return 0;
    memcpy(path + n, "/..", 4);
    if (stat(path, &up) != 0 || (up.st_dev == at.st_dev && up.st_ino == at.st_ino)) return 0;
    at = up;  // (the root is its own parent)
  }
  return 0;
}

// A write into the stage or OUT that failed (a full disk, an I/O error): VT_ERR_IO (exit 1, as
// train's write failures; 2 is for what the user gave), errno's reason in err.
static vt_status write_failed(char *err, size_t errlen, const char *what, const char *path) {
  const int e = errno;
  snprintf(err, errlen, "%s %s: %s%s", what, path, strerror(e),
           e == ENOSPC || e == EDQUOT ? " (the disk is full: free space and run prepare again)"
                                      : "");
  return VT_ERR_IO;
}

// Writes shard s (samples order[first, end)) as STAGE/shard-NNNNNN.tar, synced. A file that
// cannot go into a shard is named on stderr and counted in *bad (the set is then not kept).
static vt_status write_shard(const vt_dataset *ds, const int64_t *order, int64_t first,
                             int64_t end, const char *stage, int s, int64_t *bad, char *err,
                             size_t errlen) {
  char tmp[4352];
  snprintf(tmp, sizeof tmp, "%s/shard-%06d.tar", stage, s);
  FILE *f = fopen(tmp, "wb");
  if (!f) return write_failed(err, errlen, "cannot write", tmp);
  vt_status st = VT_OK;
  for (int64_t p = first; st == VT_OK && p < end; p++) {
    const int64_t i = order[p];
    uint8_t *bytes;
    size_t n;
    char why[600], image[64], label[64], cls[16];
    if (vt_dataset_read(ds, i, 0, &bytes, &n, why, sizeof why) != VT_IMG_OK) {
      fprintf(stderr, "vit3d prepare: %s\n", why);
      ++*bad;
      continue;
    }
    const char *kind = image_kind(bytes, n);
    snprintf(image, sizeof image, "%08lld.%s", (long long)i, kind ? kind : "");
    snprintf(label, sizeof label, "%08lld.cls", (long long)i);
    snprintf(cls, sizeof cls, "%d\n", ds->labels[i]);
    vt_image im = {0};
    if (!kind) {
      fprintf(stderr, "vit3d prepare: %s is not a PNG, JPEG or WebP file, the kinds a shard "
              "holds\n", ds->paths[i]);
      ++*bad;
    } else if (!ends_whole(kind, bytes, n) &&
               vt_image_decode(bytes, n, k_max_pixels, &im, why, sizeof why) != VT_IMG_OK) {
      fprintf(stderr, "vit3d prepare: %s does not end as a whole %s file and does not decode: "
              "%s\n", ds->paths[i], kind, why);
      ++*bad;
    } else if (vt_tar_write_member(f, image, bytes, n) != 0 ||
             vt_tar_write_member(f, label, cls, strlen(cls)) != 0)
      st = write_failed(err, errlen, "writing", tmp);
    vt_image_free(&im);
    free(bytes);
  }
  if (st == VT_OK && (vt_tar_finish(f) != 0 || fflush(f) != 0 || fsync(fileno(f)) != 0))
    st = write_failed(err, errlen, "writing", tmp);
  if (fclose(f) != 0 && st == VT_OK)
    st = write_failed(err, errlen, "writing", tmp);
  return st;
}

// OUT/.vit3d-prepare.lock, held (flock) while this call writes: the fd, or -1 with err set when
// another prepare holds it. The holder removes the file before it lets go, so a lock taken on
// a file that is no longer the path's (opened before that removal) is let go and taken anew.
static int lock_out(const char *out_dir, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/.vit3d-prepare.lock", out_dir);
  for (;;) {
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      vt_fail_input(err, errlen, "cannot write %s: %s", path, strerror(errno));
      return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      vt_fail_input(err, errlen, "another vit3d prepare is writing into %s (it holds %s): let "
                    "it finish, or choose another folder", out_dir, path);
      close(fd);
      return -1;
    }
    struct stat held, now;
    if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      return fd;
    close(fd);  // (its file was removed by the prepare that held it: the path's is the lock)
  }
}

// Ends this call's hold of OUT: the lock file removed (the next prepare makes it anew), then
// OUT itself where this call made it and it is empty (a refusal or failure), and the parents it
// made (mkdir -p) that are empty then: made folders, OUT the first.
static void unlock_out(const char *out_dir, int lock, int made) {
  char path[4096];
  snprintf(path, sizeof path, "%s/.vit3d-prepare.lock", out_dir);
  unlink(path);
  close(lock);
  snprintf(path, sizeof path, "%s", out_dir);
  for (size_t n = strlen(path); n > 1 && path[n - 1] == '/';) path[--n] = '\0';
  for (int i = 0; i < made && rmdir(path) == 0; i++) {  // (stops where one holds the shards)
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) break;
    *slash = '\0';
  }
}

// How many folders of path (itself, then its parents) do not exist: those mkdir -p makes.
static int missing_levels(const char *path) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  for (size_t k = strlen(p); k > 1 && p[k - 1] == '/';) p[--k] = '\0';
  int n = 0;
  while (p[0] && access(p, F_OK) != 0) {
    n++;
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) break;
    *slash = '\0';
  }
  return n;
}

vt_status vt_prepare_shards(const char *src, const char *out_dir, int64_t per_shard,
                            int64_t *samples, int *shards, char *err, size_t errlen) {
  if (per_shard < 1) return vt_fail_input(err, errlen, "samples per shard must be at least 1");
  const int made = missing_levels(out_dir);
  if (vt_mkdir_p(out_dir) != 0)
    return vt_fail_input(err, errlen, "cannot create %s: %s", out_dir, strerror(errno));
  const int lock = lock_out(out_dir, err, errlen);
  if (lock < 0) return VT_ERR_INPUT;
  char sub[256];
  struct stat ss;
  if (holds_shards(out_dir)) {
    unlock_out(out_dir, lock, made);
    return vt_fail_input(err, errlen, "%s holds .tar files already: remove them or choose "
                         "another folder", out_dir);
  }
  if (stat(src, &ss) == 0 && S_ISDIR(ss.st_mode) && inside(out_dir, src)) {
    unlock_out(out_dir, lock, made);
    return vt_fail_input(err, errlen, "%s lies inside the dataset %s, which would then take it "
                         "for a part of itself (a class folder): choose a folder outside it",
                         out_dir, src);
  }
  if (holds_folder(out_dir, sub, sizeof sub)) {
    unlock_out(out_dir, lock, made);
    return vt_fail_input(err, errlen, "%s holds the folder %s: a run reading the shards would "
                         "find a folder beside them and refuse it (choose an empty or new "
                         "folder)", out_dir, sub);
  }
  // The shards are written into OUT/.partial and moved into OUT when all are whole, so that a
  // prepare stopped while writing (killed, a time limit) leaves no shards a run would read as
  // the whole set (the renames at the end are a moment); a rerun clears what such a one left.
  char stage[4096];
  snprintf(stage, sizeof stage, "%s/.partial", out_dir);
  if (access(stage, F_OK) == 0) {
    fprintf(stderr, "vit3d prepare: removing %s, left by a prepare that was stopped\n", stage);
    vt_remove_dir(stage);
  }
  if (vt_mkdir_p(stage) != 0) {
    unlock_out(out_dir, lock, made);
    return write_failed(err, errlen, "cannot create", stage);
  }
  vt_dataset ds;
  if (vt_dataset_open(src, &ds, err, errlen) != VT_OK) {
    vt_remove_dir(stage);
    unlock_out(out_dir, lock, made);
    return VT_ERR_INPUT;
  }
  // A fixed shuffle (Philox, seed 0): shards that a streaming reader takes in order are not
  // sorted by class. vit3d itself samples across all shards, so any order trains as well; but
  // a seed draws other images from the shards than from their source (another, equally valid
  // run, not the same bits).
  int64_t *order = malloc((size_t)ds.count * sizeof *order);
  vt_status st = order ? VT_OK : vt_fail_input(err, errlen, "out of memory");
  if (order) {
    vt_sampler s;
    vt_sampler_init(&s, 0, ds.count, 1, 0);
    for (int64_t p = 0; p < ds.count; p++) order[p] = vt_sampler_at(&s, p, NULL);
    vt_sampler_free(&s);
  }
  int n = 0;
  int64_t bad = 0;
  for (int64_t first = 0; st == VT_OK && first < ds.count; first += per_shard, n++) {
    int64_t end = first + per_shard < ds.count ? first + per_shard : ds.count;
    st = write_shard(&ds, order, first, end, stage, n, &bad, err, errlen);
  }
  if (st == VT_OK && bad > 0)
    st = vt_fail_input(err, errlen, "%lld file%s of %s cannot go into a shard (named above): "
                       "fix, convert or remove %s, then run prepare again", (long long)bad,
                       bad > 1 ? "s" : "", src, bad > 1 ? "them" : "it");
  // The class names (the shards hold numbers; a reader names the classes by this file).
  char path[4352], to[4352];
  snprintf(path, sizeof path, "%s/classes.txt", stage);
  FILE *f = st == VT_OK ? fopen(path, "w") : NULL;
  for (int c = 0; f && c < ds.num_classes; c++) fprintf(f, "%d\t%s\n", c, ds.class_names[c]);
  if (st == VT_OK && (!f || fclose(f) != 0))
    st = write_failed(err, errlen, "writing", path);
  // The shards' names and sizes, so that a reader tells a missing or cut shard (shards.txt).
  snprintf(path, sizeof path, "%s/shards.txt", stage);
  f = st == VT_OK ? fopen(path, "w") : NULL;
  for (int k = 0; f && k < n; k++) {
    struct stat sb;
    snprintf(to, sizeof to, "%s/shard-%06d.tar", stage, k);
    if (stat(to, &sb) != 0) {
      st = write_failed(err, errlen, "cannot stat", to);
      break;
    }
    fprintf(f, "shard-%06d.tar\t%lld\n", k, (long long)sb.st_size);
  }
  if ((f && fclose(f) != 0 && st == VT_OK) || (!f && st == VT_OK))
    st = write_failed(err, errlen, "writing", path);
  // All whole: into OUT, the shards first, shards.txt, classes.txt last.
  for (int k = 0; st == VT_OK && k <= n + 1; k++) {
    const char *name = k < n ? "shard-%06d.tar" : k == n ? "shards.txt" : "classes.txt";
    char leaf[32];
    snprintf(leaf, sizeof leaf, name, k);
    snprintf(path, sizeof path, "%s/%s", stage, leaf);
    snprintf(to, sizeof to, "%s/%s", out_dir, leaf);
    if (rename(path, to) != 0)
      st = write_failed(err, errlen, "cannot rename", path);
  }
  if (st != VT_OK) {  // no half-made set that a rerun would refuse: remove what this call moved
    for (int k = 0; k < n; k++) {
      snprintf(path, sizeof path, "%s/shard-%06d.tar", out_dir, k);
      remove(path);
    }
    snprintf(path, sizeof path, "%s/shards.txt", out_dir);
    remove(path);
  }
  vt_remove_dir(stage);
  unlock_out(out_dir, lock, made);
  if (samples) *samples = ds.count;
  if (shards) *shards = n;
  free(order);
  vt_dataset_free(&ds);
  return st;
}
