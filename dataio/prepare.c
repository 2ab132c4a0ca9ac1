// prepare.c: Fashion-MNIST IDX files (gzip) to an ImageFolder tree of grey PNGs, written by a
// few threads at zlib level 1 (70000 small files: the cost is per file, not per byte).
// Must not depend on MPI, a backend or the model; needs zlib and libpng (VT_HAVE_PNG).
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include "prepare.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const vt_fashion_mnist_classes[10] = {
    "0_tshirt", "1_trouser", "2_pullover", "3_dress",  "4_coat",
    "5_sandal", "6_shirt",   "7_sneaker",  "8_bag",    "9_ankle_boot"};

static vt_status fail(vt_status st, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static vt_status fail(vt_status st, char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return st;
}

#ifndef VT_HAVE_PNG

vt_status vt_prepare_fashion_mnist_from(const char *src_dir, const char *out_dir, char *err,
                                        size_t errlen) {
  (void)src_dir;
  (void)out_dir;
  return fail(VT_ERR_INPUT, err, errlen,
              "vit3d was built without libpng: install libpng-dev and zlib1g-dev and rebuild");
}

#else

#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <unistd.h>
#include <zlib.h>

#define MARKER ".vit3d-prepared"
#define MAX_THREADS 8

typedef struct {
  int32_t count, rows, cols;
  uint8_t *data;  // images (count, rows, cols) or labels (count)
} idx_file;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static vt_status read_all(gzFile f, const char *path, uint8_t *buf, size_t n, char *err,
                          size_t errlen) {
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
    int got = gzread(f, buf, chunk);
    if (got < 0) {
      int code;
      const char *why = gzerror(f, &code);
      return fail(VT_ERR_INPUT, err, errlen, "%s: corrupt gzip data (%s)", path, why);
    }
    if (got == 0) return fail(VT_ERR_INPUT, err, errlen, "%s: truncated (ends early)", path);
    buf += got;
    n -= (size_t)got;
  }
  return VT_OK;
}

// An IDX file: magic 0x00000803 (ubyte, 3 dims) for images, 0x00000801 for labels, big-endian.
static vt_status read_idx(const char *dir, const char *name, int images, idx_file *out,
                          char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  memset(out, 0, sizeof(*out));
  gzFile f = gzopen(path, "rb");
  if (!f) return fail(VT_ERR_INPUT, err, errlen, "cannot open %s: %s", path, strerror(errno));
  uint8_t hdr[16];
  size_t hlen = images ? 16 : 8;
  vt_status st = read_all(f, path, hdr, hlen, err, errlen);
  uint32_t magic = st == VT_OK ? be32(hdr) : 0;
  if (st == VT_OK && magic != (images ? 0x803u : 0x801u))
    st = fail(VT_ERR_INPUT, err, errlen, "%s: magic number 0x%08x, expected 0x%08x (IDX %s)",
              path, magic, images ? 0x803u : 0x801u, images ? "images" : "labels");
  if (st == VT_OK) {
    uint32_t n = be32(hdr + 4), r = images ? be32(hdr + 8) : 1, c = images ? be32(hdr + 12) : 1;
    if (n == 0 || n > 10000000 || r == 0 || r > 4096 || c == 0 || c > 4096)
      st = fail(VT_ERR_INPUT, err, errlen, "%s: implausible sizes %u x %u x %u", path, n, r, c);
    out->count = (int32_t)n, out->rows = (int32_t)r, out->cols = (int32_t)c;
  }
  size_t nbytes = (size_t)out->count * out->rows * out->cols;
  if (st == VT_OK && !(out->data = malloc(nbytes)))
    st = fail(VT_ERR_IO, err, errlen, "out of memory for %s", path);
  if (st == VT_OK) st = read_all(f, path, out->data, nbytes, err, errlen);
  uint8_t extra;
  if (st == VT_OK && gzread(f, &extra, 1) != 0)
    st = fail(VT_ERR_INPUT, err, errlen, "%s: longer than its header says", path);
  gzclose(f);
  if (st != VT_OK) {
    free(out->data);
    out->data = NULL;
  }
  return st;
}

static vt_status make_dir(const char *path, char *err, size_t errlen) {
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", path);
  // mkdir -p: every prefix, tolerating the ones that exist.
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return fail(VT_ERR_IO, err, errlen, "cannot create folder %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  return VT_OK;
}

static int write_png(const char *path, const uint8_t *pix, int w, int h) {
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  int ok = 0;
  if (info && !setjmp(png_jmpbuf(png))) {
    png_init_io(png, f);
    png_set_compression_level(png, 1);
    png_set_filter(png, 0, PNG_FILTER_NONE);  // filters cost more than they save at level 1
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(pix + (size_t)y * w));
    png_write_end(png, NULL);
    ok = 1;
  }
  png_destroy_write_struct(&png, &info);
  return fclose(f) == 0 && ok;
}

typedef struct {
  const char *dir;  // OUT/train or OUT/val
  const idx_file *img, *lab;
  int tid, nthreads;
  int failed_index;  // first index that could not be written, -1 none
  int failed_errno;
} job;

static void *write_part(void *arg) {
  job *j = arg;
  char path[4096];
  size_t plane = (size_t)j->img->rows * j->img->cols;
  j->failed_index = -1;
  for (int32_t i = j->tid; i < j->img->count; i += j->nthreads) {
    snprintf(path, sizeof(path), "%s/%s/%05d.png", j->dir,
             vt_fashion_mnist_classes[j->lab->data[i]], i);
    if (!write_png(path, j->img->data + (size_t)i * plane, j->img->cols, j->img->rows)) {
      j->failed_index = i;
      j->failed_errno = errno;
      break;
    }
  }
  return NULL;
}

static vt_status write_split(const char *out_dir, const char *split, const idx_file *img,
                             const idx_file *lab, char *err, size_t errlen) {
  char dir[4096], sub[4096 + 64];
  snprintf(dir, sizeof(dir), "%s/%s", out_dir, split);
  for (int c = 0; c < 10; c++) {
    snprintf(sub, sizeof(sub), "%s/%s", dir, vt_fashion_mnist_classes[c]);
    vt_status st = make_dir(sub, err, errlen);
    if (st != VT_OK) return st;
  }
  cpu_set_t set;  // (the CPUs this process may run on: taskset, a Slurm task's, a cpuset)
  CPU_ZERO(&set);
  long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cores < 1) cores = sysconf(_SC_NPROCESSORS_ONLN);
  int nt = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores;
  job jobs[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int created[MAX_THREADS] = {0};
  for (int t = 0; t < nt; t++) jobs[t] = (job){dir, img, lab, t, nt, -1, 0};
  for (int t = 1; t < nt; t++)
    created[t] = pthread_create(&th[t], NULL, write_part, &jobs[t]) == 0;
  write_part(&jobs[0]);
  // A thread that could not start leaves its share to this one.
  for (int t = 1; t < nt; t++) {
    if (created[t]) pthread_join(th[t], NULL);
    else write_part(&jobs[t]);
  }
  for (int t = 0; t < nt; t++)
    if (jobs[t].failed_index >= 0)
      return fail(VT_ERR_IO, err, errlen, "cannot write %s/%s/%05d.png: %s", dir,
                  vt_fashion_mnist_classes[lab->data[jobs[t].failed_index]],
                  jobs[t].failed_index, strerror(jobs[t].failed_errno));
  return VT_OK;
}

static vt_status load_pair(const char *src, const char *prefix, idx_file *img, idx_file *lab,
                           char *err, size_t errlen) {
  char name[256];
  snprintf(name, sizeof(name), "%s-images-idx3-ubyte.gz", prefix);
  vt_status st = read_idx(src, name, 1, img, err, errlen);
  snprintf(name, sizeof(name), "%s-labels-idx1-ubyte.gz", prefix);
  if (st == VT_OK) st = read_idx(src, name, 0, lab, err, errlen);
  if (st == VT_OK && img->count != lab->count)
    st = fail(VT_ERR_INPUT, err, errlen, "%s/%s: %d labels for %d images", src, name, lab->count,
              img->count);
  for (int32_t i = 0; st == VT_OK && i < lab->count; i++)
    if (lab->data[i] > 9)
      st = fail(VT_ERR_INPUT, err, errlen, "%s/%s: label %d of image %d is not 0..9", src, name,
                lab->data[i], i);
  return st;
}

vt_status vt_prepare_fashion_mnist_from(const char *src, const char *out_dir, char *err,
                                        size_t errlen) {
  char probe[4096], marker[4096], want[128], have[128] = "";
  // Longer paths would be cut in the fixed buffers below; no real folder is this deep.
  if (strlen(src) > 3000 || strlen(out_dir) > 3000)
    return fail(VT_ERR_INPUT, err, errlen, "path too long: %.60s...", out_dir);
  snprintf(probe, sizeof(probe), "%s/train-images-idx3-ubyte.gz", src);
  struct stat sb;
  if (stat(probe, &sb) != 0)
    return fail(VT_ERR_INPUT, err, errlen,
                "Fashion-MNIST not found (%s is missing): apt-get install dataset-fashion-mnist",
                probe);
  idx_file ti = {0}, tl = {0}, vi = {0}, vl = {0};
  vt_status st = load_pair(src, "train", &ti, &tl, err, errlen);
  if (st == VT_OK) st = load_pair(src, "t10k", &vi, &vl, err, errlen);
  if (st == VT_OK) {
    // The marker records what a complete copy holds; any other content means "redo".
    snprintf(marker, sizeof(marker), "%s/" MARKER, out_dir);
    snprintf(want, sizeof(want), "fashion-mnist train %d val %d size %dx%d\n", ti.count,
             vi.count, ti.cols, ti.rows);
    FILE *m = fopen(marker, "r");
    if (m) {
      size_t n = fread(have, 1, sizeof(have) - 1, m);
      have[n] = '\0';
      fclose(m);
    }
    if (strcmp(have, want) == 0) {
      vt_log_info("%s already holds Fashion-MNIST (%d train, %d val images); nothing to do",
                  out_dir, ti.count, vi.count);
    } else {
      remove(marker);
      st = make_dir(out_dir, err, errlen);
      if (st == VT_OK) st = write_split(out_dir, "train", &ti, &tl, err, errlen);
      if (st == VT_OK) st = write_split(out_dir, "val", &vi, &vl, err, errlen);
      FILE *w = st == VT_OK ? fopen(marker, "w") : NULL;
      int wrote = w && fputs(want, w) >= 0;
      if (w && fclose(w) != 0) wrote = 0;
      if (st == VT_OK && !wrote)
        st = fail(VT_ERR_IO, err, errlen, "cannot write %s: %s", marker, strerror(errno));
    }
  }
  free(ti.data), free(tl.data), free(vi.data), free(vl.data);
  return st;
}

#endif

vt_status vt_prepare_fashion_mnist(const char *out_dir, char *err, size_t errlen) {
  return vt_prepare_fashion_mnist_from(VT_FASHION_MNIST_DIR, out_dir, err, errlen);
}
