// safetensors.c: the safetensors writer and a strict reader for files that may be damaged or
// hostile. The reader's JSON parser knows only the expected header shape (no generic value tree,
// nesting bounded by construction), checks every number before use and reads the data only once
// the header passed. Must not depend on MPI, a backend or the model.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  // fileno
#endif
#include "safetensors.h"
#include "safetensors_header.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
  const char *name;
  int size;
} dtypes[] = {  // the reference's byte-sized types; sub-byte F4/F6 are refused
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},     {"I32", 4},
    {"F32", 4},  {"U64", 8}, {"I64", 8}, {"F64", 8},     {"C64", 8}};

int vt_st_dtype_size(const char *dtype) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dtype, dtypes[i].name) == 0) return dtypes[i].size;
  return 0;
}


// ---- writer -----------------------------------------------------------------------------------
typedef struct {
  char *buf;
  size_t len, cap;
  int ok;  // 0 once out of memory; later puts do nothing
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
  if (!b->ok) return;
  if (b->len + n + 1 > b->cap) {
    size_t c = b->cap * 2 + n + 4096;
    char *p = realloc(b->buf, c);
    if (!p) {
      b->ok = 0;
      return;
    }
    b->buf = p, b->cap = c;
  }
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = 0;
}

// A JSON string: quote and backslash escaped, control bytes as \u00XX, UTF-8 as is.
static void put_json(sbuf *b, const char *s) {
  put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char e[8];
    if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, put(b, e, 2);
    else if (c < 0x20) snprintf(e, sizeof e, "\\u%04x", c), put(b, e, 6);
    else put(b, s, 1);
  }
  put(b, "\"", 1);
}

// Arguments the header cannot express. Everything else the reader would refuse (names too long,
// repeated or not UTF-8, repeated metadata keys) is found by reading back the header we built.
static const char *bad_tensor(const vt_st_tensor *t, int need_data, int64_t *total) {
  if (!t->name || !t->dtype || strcmp(t->name, "__metadata__") == 0) return "no or reserved name";
  if (vt_st_dtype_size(t->dtype) != 4) return "dtype is not F32 or I32 (4-byte elements)";
  if (t->ndim < 0 || t->ndim > 4) return "ndim is not in 0..4";
  int64_t n = 4;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0) return "negative dimension";
    if (t->shape[d] > 0 && n > (INT64_MAX - *total) / t->shape[d]) return "too large";
    n *= t->shape[d];
  }
  if (n > 0 && need_data && !t->data) return "no data";
  *total += n;
  return NULL;
}

static vt_status layout(const char *path, const vt_st_tensor *tensors, int n,
                        const char *const *meta_kv, int n_meta, int need_data, vt_st_layout *out,
                        char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  int64_t total = 0;
  for (int i = 0; i < n_meta; i++)
    if (!meta_kv[2 * i] || !meta_kv[2 * i + 1]) {
      snprintf(err, errlen, "writing %s: metadata pair %d is missing", path, i);
      return VT_ERR_INPUT;
    }
  for (int i = 0; i < n; i++) {
    const char *why = bad_tensor(&tensors[i], need_data, &total);
    if (why) {
      snprintf(err, errlen, "writing %s: tensor %d ('%.80s'): %s", path, i,
               tensors[i].name ? tensors[i].name : "", why);
      return VT_ERR_INPUT;
    }
  }
  sbuf h = {NULL, 0, 0, 1};
  char num[64];
  put(&h, "12345678{", 9);  // the 8-byte length goes first, once known
  if (n_meta > 0) {
    put(&h, "\"__metadata__\":{", 16);
    for (int i = 0; i < n_meta; i++) {
      if (i) put(&h, ",", 1);
      put_json(&h, meta_kv[2 * i]);
      put(&h, ":", 1);
      put_json(&h, meta_kv[2 * i + 1]);
    }
    put(&h, n ? "}," : "}", n ? 2 : 1);
  }
  int64_t *offset = malloc((size_t)(n > 0 ? n : 1) * sizeof *offset);
  int64_t off = 0;
  for (int i = 0; i < n && offset; i++) {
    const vt_st_tensor *t = &tensors[i];
    if (i) put(&h, ",", 1);
    put_json(&h, t->name);
    snprintf(num, sizeof num, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
    put(&h, num, strlen(num));
    for (int d = 0; d < t->ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      put(&h, num, strlen(num));
    }
    int64_t nbytes = 4;
    for (int d = 0; d < t->ndim; d++) nbytes *= t->shape[d];
    snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
             (long long)(off + nbytes));
    put(&h, num, strlen(num));
    offset[i] = off;
    off += nbytes;
  }
  put(&h, "}", 1);
  while (h.ok && h.len % 8 != 0) put(&h, " ", 1);  // align the data to 8 bytes
  if (!h.ok || !offset) {
    free(h.buf);
    free(offset);
    snprintf(err, errlen, "out of memory writing the header of %s", path);
    return VT_ERR_IO;
  }
  const size_t hlen = h.len - 8;
  vt_st_file back = {0};  // the reader's verdict on this header, before anything touches disk
  char what[600];
  snprintf(what, sizeof what, "%s (not written)", path);
  vt_status st = hlen > VT_ST_MAX_HEADER
                     ? vt_st_refuse(err, errlen, what, "header of %zu bytes is over the cap", hlen)
                     : vt_st_read_header(h.buf + 8, hlen, off, what, &back, err, errlen);
  vt_safetensors_close(&back);
  if (st != VT_OK) {
    free(h.buf);
    free(offset);
    return st;
  }
  for (int i = 0; i < 8; i++) h.buf[i] = (char)((uint64_t)hlen >> (8 * i));
  for (int i = 0; i < n; i++) offset[i] += (int64_t)h.len;
  *out = (vt_st_layout){(uint8_t *)h.buf, (int64_t)h.len, offset, (int64_t)h.len + off};
  return VT_OK;
}

vt_status vt_safetensors_layout(const char *path, const vt_st_tensor *tensors, int n,
                                const char *const *meta_kv, int n_meta, vt_st_layout *out,
                                char *err, size_t errlen) {
  return layout(path, tensors, n, meta_kv, n_meta, 0, out, err, errlen);
}

void vt_st_layout_free(vt_st_layout *l) {
  free(l->head);
  free(l->offset);
  memset(l, 0, sizeof *l);
}

vt_status vt_safetensors_write_meta(const char *path, const vt_st_tensor *tensors, int n,
                                    const char *const *meta_kv, int n_meta, char *err,
                                    size_t errlen) {
  vt_st_layout l;
  vt_status st = layout(path, tensors, n, meta_kv, n_meta, 1, &l, err, errlen);
  if (st != VT_OK) return st;
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    vt_st_layout_free(&l);
    return VT_ERR_IO;
  }
  int good = fwrite(l.head, 1, (size_t)l.head_nbytes, f) == (size_t)l.head_nbytes;
  for (int i = 0; i < n && good; i++) {
    size_t count = 1;
    for (int d = 0; d < tensors[i].ndim; d++) count *= (size_t)tensors[i].shape[d];
    good = count == 0 || fwrite(tensors[i].data, 4, count, f) == count;
  }
  good = (fflush(f) == 0) && good;
  int saved = errno;
  good = (fclose(f) == 0) && good;
  vt_st_layout_free(&l);
  if (!good) {
    snprintf(err, errlen, "writing %s failed: %s (is the disk full?)", path, strerror(saved));
    remove(path);
    return VT_ERR_IO;
  }
  return VT_OK;
}

vt_status vt_safetensors_copy_meta(const char *src, const char *dst, const char *const *meta_kv,
                                   int n_meta, char *err, size_t errlen) {
  struct stat ss, sd;
  if (stat(src, &ss) == 0 && stat(dst, &sd) == 0 && ss.st_dev == sd.st_dev &&
      ss.st_ino == sd.st_ino) {
    snprintf(err, errlen, "the output %s is the file it copies, %s: give another path", dst, src);
    return VT_ERR_INPUT;
  }
  vt_st_file in;
  vt_status st = vt_safetensors_open(src, &in, err, errlen);  // (the header: tensors one by one)
  if (st != VT_OK) return st;
  vt_st_tensor *ts = calloc((size_t)in.count + 1, sizeof *ts);
  int64_t most = 0;
  for (int i = 0; ts && i < in.count; i++) {
    const vt_st_entry *e = &in.entries[i];
    ts[i] = (vt_st_tensor){e->name, e->dtype, e->ndim, {0}, NULL};
    for (int d = 0; d < e->ndim && d < 4; d++) ts[i].shape[d] = e->shape[d];
    if (e->ndim > 4) ts[i].ndim = e->ndim;  // (refused by the layout: a checkpoint has none)
    if (e->end - e->begin > most) most = e->end - e->begin;
  }
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", dst);
  vt_st_layout l = {0};
  char *buf = ts ? malloc((size_t)most + 1) : NULL;
  if (!ts || !buf) {
    snprintf(err, errlen, "out of host memory copying %s", src);
    st = VT_ERR_IO;
  }
  if (st == VT_OK) st = vt_safetensors_layout(dst, ts, in.count, meta_kv, n_meta, &l, err, errlen);
  FILE *out = NULL;
  if (st == VT_OK && !(out = fopen(tmp, "wb"))) {  // (the output's folder is the usual culprit)
    snprintf(err, errlen, "cannot create the output %s (as %s first): %s; give a path in an "
             "existing, writable folder", dst, tmp, strerror(errno));
    st = VT_ERR_IO;
  }
  // (the first failure's errno: a later close or rename would overwrite it)
  int ok = out && fwrite(l.head, 1, (size_t)l.head_nbytes, out) == (size_t)l.head_nbytes, e = 0;
  for (int i = 0; ok && i < in.count; i++) {  // (contiguous in this order: l.offset[i] follows)
    const vt_st_entry *t = &in.entries[i];
    st = vt_st_read(&in, t, buf, err, errlen);
    ok = st == VT_OK && fwrite(buf, 1, (size_t)(t->end - t->begin), out) ==
                            (size_t)(t->end - t->begin);
  }
  if (out) {
    if (ok && (fflush(out) != 0 || fsync(fileno(out)) != 0)) ok = 0;
    if (!ok) e = errno;
    if (fclose(out) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, dst) != 0) ok = 0, e = errno;
    if (!ok) {
      remove(tmp);
      if (st == VT_OK) {
        snprintf(err, errlen, "writing %s failed: %s%s", dst, strerror(e),
                 e == ENOSPC || e == EDQUOT ? " (the disk is full)" : "");
        st = VT_ERR_IO;
      }
    }
  }
  vt_st_layout_free(&l);
  free(buf);
  free(ts);
  vt_safetensors_close(&in);
  return st;
}

vt_status vt_safetensors_write(const char *path, const vt_st_tensor *tensors, int n, char *err,
                               size_t errlen) {
  return vt_safetensors_write_meta(path, tensors, n, NULL, 0, err, errlen);
}

static vt_status check_length(uint64_t hlen, uint64_t size, const char *what, char *err,
                              size_t errlen) {
  if (hlen > VT_ST_MAX_HEADER)
    return vt_st_refuse(err, errlen, what, "header length %llu exceeds the %d-byte cap (not a "
                  "safetensors file?)", (unsigned long long)hlen, VT_ST_MAX_HEADER);
  if (hlen > size - 8)
    return vt_st_refuse(err, errlen, what, "header length %llu is larger than the %llu bytes after it "
                  "(truncated, or not a safetensors file)", (unsigned long long)hlen,
                  (unsigned long long)(size - 8));
  if (hlen < 2)
    return vt_st_refuse(err, errlen, what, "header length %llu is too small for a JSON object",
                  (unsigned long long)hlen);
  return VT_OK;
}

static uint64_t le64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}


static uint8_t *alloc_data(int64_t n) {  // 64-byte aligned, never NULL for 0 bytes
  return aligned_alloc(64, ((size_t)n + 64) / 64 * 64);
}

vt_status vt_safetensors_parse(const uint8_t *bytes, size_t nbytes, vt_st_file *f, char *err,
                               size_t errlen) {
  const char *what = "<memory>";
  memset(f, 0, sizeof *f);
  if (nbytes < 8)
    return vt_st_refuse(err, errlen, what, "%zu bytes is too short for a safetensors file", nbytes);
  uint64_t hlen = le64(bytes);
  vt_status st = check_length(hlen, nbytes, what, err, errlen);
  if (st != VT_OK) return st;
  int64_t data_nbytes = (int64_t)(nbytes - 8 - hlen);
  st = vt_st_read_header((const char *)bytes + 8, (size_t)hlen, data_nbytes, what, f, err, errlen);
  if (st == VT_OK && !(f->data = alloc_data(data_nbytes)))
    st = vt_st_refuse(err, errlen, what, "out of memory for %lld bytes of data", (long long)data_nbytes);
  if (st != VT_OK) return vt_safetensors_close(f), st;
  memcpy(f->data, bytes + 8 + hlen, (size_t)data_nbytes);
  return VT_OK;
}

// Opens path and reads and checks its header (every check of vt_safetensors_read but the data's):
// VT_OK with *fpo open just past the header (f->data_nbytes is the data section's size).
static vt_status open_header(const char *path, vt_st_file *f, FILE **fpo, char *err,
                             size_t errlen) {
  memset(f, 0, sizeof *f);
  *fpo = NULL;
  // O_NONBLOCK: opening a FIFO would wait for a writer for ever (it is refused below, not a
  // regular file); it changes nothing for the regular files read here.
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  FILE *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!fp) {
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return VT_ERR_IO;
  }
  struct stat sb;
  memset(&sb, 0, sizeof sb);
  uint8_t len8[8];
  char *hdr = NULL;
  vt_status st = VT_OK;
  if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    snprintf(err, errlen, "cannot read %s: not a regular file", path);
    st = VT_ERR_IO;
  } else if (sb.st_size < 8) {
    st = vt_st_refuse(err, errlen, path, "%lld bytes is too short for a safetensors file (the header "
                "length alone takes 8)", (long long)sb.st_size);
  } else if (fread(len8, 1, 8, fp) != 8) {
    snprintf(err, errlen, "cannot read %s: %s", path, ferror(fp) ? strerror(errno) : "short read");
    st = VT_ERR_IO;
  }
  uint64_t hlen = st == VT_OK ? le64(len8) : 0;
  if (st == VT_OK) st = check_length(hlen, (uint64_t)sb.st_size, path, err, errlen);
  const int64_t data_nbytes = st == VT_OK ? (int64_t)((uint64_t)sb.st_size - 8 - hlen) : 0;
  if (st == VT_OK && !(hdr = malloc((size_t)hlen))) {
    snprintf(err, errlen, "%s: out of memory for a %llu-byte header", path,
             (unsigned long long)hlen);
    st = VT_ERR_IO;
  }
  if (st == VT_OK && fread(hdr, 1, (size_t)hlen, fp) != (size_t)hlen) {
    snprintf(err, errlen, "cannot read the header of %s (did the file shrink?)", path);
    st = VT_ERR_IO;
  }
  if (st == VT_OK) st = vt_st_read_header(hdr, (size_t)hlen, data_nbytes, path, f, err, errlen);
  free(hdr);
  if (st != VT_OK) {
    fclose(fp);
    vt_safetensors_close(f);
    return st;
  }
  f->data_off_ = 8 + (int64_t)hlen;
  *fpo = fp;
  return VT_OK;
}

vt_status vt_safetensors_read(const char *path, vt_st_file *f, char *err, size_t errlen) {
  FILE *fp;
  vt_status st = open_header(path, f, &fp, err, errlen);
  if (st != VT_OK) return st;
  const int64_t data_nbytes = f->data_nbytes;
  // Only now, with every tensor's range checked against the file size, is the data read.
  if (!(f->data = alloc_data(data_nbytes))) {
    snprintf(err, errlen, "%s: out of memory for %lld bytes of data", path, (long long)data_nbytes);
    st = VT_ERR_IO;
  }
  if (st == VT_OK && (fread(f->data, 1, (size_t)data_nbytes, fp) != (size_t)data_nbytes ||
                      fgetc(fp) != EOF)) {
    snprintf(err, errlen, "cannot read the data of %s (did the file change while read?)", path);
    st = VT_ERR_IO;
  }
  fclose(fp);
  if (st != VT_OK) vt_safetensors_close(f);
  else f->bytes_read_ = data_nbytes;
  return st;
}

vt_status vt_safetensors_open(const char *path, vt_st_file *f, char *err, size_t errlen) {
  FILE *fp;
  vt_status st = open_header(path, f, &fp, err, errlen);
  if (st != VT_OK) return st;
  f->fd_ = dup(fileno(fp));
  fclose(fp);
  if (f->fd_ < 0) {
    snprintf(err, errlen, "cannot keep %s open: %s", path, strerror(errno));
    vt_safetensors_close(f);
    return VT_ERR_IO;
  }
  f->lazy_ = 1;
  return VT_OK;
}

vt_status vt_st_read(vt_st_file *f, const vt_st_entry *e, void *dst, char *err, size_t errlen) {
  return vt_st_read_range(f, e, 0, e->end - e->begin, dst, err, errlen);
}

vt_status vt_st_read_range(vt_st_file *f, const vt_st_entry *e, int64_t at, int64_t n, void *dst,
                           char *err, size_t errlen) {
  if (at < 0 || n < 0 || at + n > e->end - e->begin) {
    snprintf(err, errlen, "tensor %s: bytes [%lld, %lld) asked for, outside its %lld", e->name,
             (long long)at, (long long)(at + n), (long long)(e->end - e->begin));
    return VT_ERR_INPUT;
  }
  if (!f->lazy_) {
    memcpy(dst, f->data + e->begin + at, (size_t)n);
    return VT_OK;
  }
  int64_t got = 0;
  while (got < n) {
    const ssize_t r = pread(f->fd_, (char *)dst + got, (size_t)(n - got),
                            (off_t)(f->data_off_ + e->begin + at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      snprintf(err, errlen, "tensor %s: read %lld of %lld bytes (%s)", e->name,
               (long long)got, (long long)n,
               r < 0 ? strerror(errno) : "the file is shorter than its header says");
      return VT_ERR_IO;
    }
    got += r;
  }
  f->bytes_read_ += n;
  return VT_OK;
}

int64_t vt_st_bytes_read(const vt_st_file *f) { return f->bytes_read_; }

int64_t vt_st_data_offset(const vt_st_file *f) { return f->data_off_; }

// ---- lookups ----------------------------------------------------------------------------------
static int name_is(const void *key, const void *e) {
  return strcmp(key, (*(vt_st_entry *const *)e)->name);
}
static int key_is(const void *key, const void *pair) { return strcmp(key, *(char *const *)pair); }

const vt_st_entry *vt_st_find(const vt_st_file *f, const char *name) {
  vt_st_entry **hit = f->count ? bsearch(name, f->by_name_, (size_t)f->count, sizeof *hit, name_is)
                               : NULL;
  return hit ? *hit : NULL;
}

const void *vt_st_data(const vt_st_file *f, const vt_st_entry *e) {
  return f->lazy_ ? NULL : f->data + e->begin;
}

const char *vt_st_metadata(const vt_st_file *f, const char *key) {
  char **hit = f->n_meta_ ? bsearch(key, f->meta_, (size_t)f->n_meta_, 2 * sizeof *hit, key_is)
                          : NULL;
  return hit ? hit[1] : NULL;
}

int vt_st_metadata_count(const vt_st_file *f) { return f->n_meta_; }

const char *vt_st_metadata_key(const vt_st_file *f, int i) {
  return i >= 0 && i < f->n_meta_ ? f->meta_[2 * i] : NULL;
}

void vt_safetensors_close(vt_st_file *f) {
  if (f->lazy_) close(f->fd_);
  free(f->entries);
  free(f->data);
  free(f->by_name_);
  free(f->meta_);
  free(f->arena_);
  memset(f, 0, sizeof *f);
}
