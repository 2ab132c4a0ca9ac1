// safetensors.c: the safetensors writer.
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t numel(const vt_st_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

// Appends to a growing string; returns 0 when out of memory.
static int append(char **buf, size_t *len, size_t *cap, const char *s) {
  size_t n = strlen(s);
  if (*len + n + 1 > *cap) {
    size_t c = (*cap ? *cap * 2 : 4096) + n;
    char *b = realloc(*buf, c);
    if (!b) return 0;
    *buf = b, *cap = c;
  }
  memcpy(*buf + *len, s, n + 1);
  *len += n;
  return 1;
}

vt_status vt_safetensors_write(const char *path, const vt_st_tensor *tensors, int n, char *err,
                               size_t errlen) {
  char *hdr = NULL, item[512];
  size_t len = 0, cap = 0;
  int ok = append(&hdr, &len, &cap, "{");
  int64_t off = 0;
  for (int i = 0; i < n && ok; i++) {
    const vt_st_tensor *t = &tensors[i];
    int64_t nbytes = numel(t) * 4;
    int k = snprintf(item, sizeof item, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                     t->name, t->dtype);
    for (int d = 0; d < t->ndim; d++)
      k += snprintf(item + k, sizeof item - (size_t)k, "%s%lld", d ? "," : "",
                    (long long)t->shape[d]);
    snprintf(item + k, sizeof item - (size_t)k, "],\"data_offsets\":[%lld,%lld]}",
             (long long)off, (long long)(off + nbytes));
    ok = append(&hdr, &len, &cap, item);
    off += nbytes;
  }
  ok = ok && append(&hdr, &len, &cap, "}");
  while (ok && len % 8 != 0) ok = append(&hdr, &len, &cap, " ");  // align the data to 8 bytes
  if (!ok) {
    free(hdr);
    snprintf(err, errlen, "out of memory writing the header of %s", path);
    return VT_ERR_IO;
  }
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    free(hdr);
    return VT_ERR_IO;
  }
  unsigned char lenle[8];
  for (int i = 0; i < 8; i++) lenle[i] = (unsigned char)((uint64_t)len >> (8 * i));
  int good = fwrite(lenle, 1, 8, f) == 8 && fwrite(hdr, 1, len, f) == len;
  for (int i = 0; i < n && good; i++)
    good = fwrite(tensors[i].data, 4, (size_t)numel(&tensors[i]), f) == (size_t)numel(&tensors[i]);
  good = (fflush(f) == 0) && good;
  int saved = errno;
  good = (fclose(f) == 0) && good;
  free(hdr);
  if (!good) {
    snprintf(err, errlen, "writing %s failed: %s (is the disk full?)", path, strerror(saved));
    remove(path);
    return VT_ERR_IO;
  }
  return VT_OK;
}
