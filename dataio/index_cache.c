// index_cache.c: the on-disk dataset index cache. An entry file is
//   "vit3d-index-cache-1\n", then three blocks each as a little u64 length and its bytes (the
//   dataset path, the fingerprint text, the packed index), then the CRC-32 of all before it.
// Must not depend on MPI.
#include "index_cache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"  // vt_crc32, vt_mkdir_p

static const char MAGIC[] = "vit3d-index-cache-1\n";

void vt_index_cache_file(const char *dir, const char *path, char *file, size_t len) {
  char abs[2 * PATH_MAX], cwd[PATH_MAX];
  const char *key = path;
  if (path[0] != '/' && getcwd(cwd, sizeof cwd)) {
    snprintf(abs, sizeof abs, "%s/%s", cwd, path);
    key = abs;
  }
  uint64_t h = 1469598103934665603ull;                  // FNV-1a, 64 bits
  for (const char *p = key; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  size_t end = strlen(key);
  while (end > 1 && key[end - 1] == '/') end--;
  size_t start = end;
  while (start > 0 && key[start - 1] != '/') start--;
  char base[64];
  size_t k = 0;
  for (size_t i = start; i < end && k + 1 < sizeof base; i++)  // a file-name-safe copy
    base[k++] = (key[i] == '{' || key[i] == '}' || key[i] == '.') ? '_' : key[i];
  base[k] = '\0';
  snprintf(file, len, "%s/%s-%016llx.vtindex", dir, k ? base : "root", (unsigned long long)h);
}

static int read_all(const char *file, uint8_t **buf, size_t *n) {
  FILE *f = fopen(file, "rb");
  if (!f) return 0;
  int ok = fseek(f, 0, SEEK_END) == 0;
  long size = ok ? ftell(f) : -1;
  ok = size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (*buf = malloc((size_t)size + 1)) != NULL;
  ok = ok && fread(*buf, 1, (size_t)size, f) == (size_t)size;
  fclose(f);
  if (!ok) return 0;
  *n = (size_t)size;
  return 1;
}

// One length-prefixed block at *p (advanced past it), or 0 when it does not fit in [*p, end).
static int block(const uint8_t **p, const uint8_t *end, const uint8_t **data, uint64_t *len) {
  if ((size_t)(end - *p) < sizeof *len) return 0;
  memcpy(len, *p, sizeof *len);
  *p += sizeof *len;
  if (*len > (uint64_t)(end - *p)) return 0;
  *data = *p;
  *p += *len;
  return 1;
}

int vt_index_cache_read(const char *file, const char *path, char **fingerprint,
                        uint8_t **index, size_t *n, char *why, size_t whylen) {
  uint8_t *buf = NULL;
  size_t size = 0;
  *index = NULL, *fingerprint = NULL;
  if (!read_all(file, &buf, &size)) {
    free(buf);
    snprintf(why, whylen, "no entry %s yet", file);
    return 0;
  }
  const size_t m = sizeof MAGIC - 1;
  const uint8_t *p = buf + m, *end = buf + (size >= 4 ? size - 4 : 0), *dp, *df, *di;
  uint64_t lp, lf, li;
  uint32_t crc = 0;
  if (size >= 4) memcpy(&crc, buf + size - 4, 4);
  int ok = size >= m + 4 && memcmp(buf, MAGIC, m) == 0 && crc == vt_crc32(0, buf, size - 4) &&
           block(&p, end, &dp, &lp) && block(&p, end, &df, &lf) && block(&p, end, &di, &li) &&
           p == end;
  if (!ok) {
    snprintf(why, whylen, "%s is damaged or not an index cache entry; reading the index again",
             file);
  } else if (lp != strlen(path) || memcmp(dp, path, lp) != 0) {
    snprintf(why, whylen, "%s belongs to another dataset path; reading the index again", file);
    ok = 0;
  } else if ((*index = malloc(li ? li : 1)) == NULL || (*fingerprint = malloc(lf + 1)) == NULL) {
    snprintf(why, whylen, "out of memory for %s", file);
    free(*index), *index = NULL;
    ok = 0;
  } else {
    memcpy(*index, di, li);
    *n = li;
    memcpy(*fingerprint, df, lf);
    (*fingerprint)[lf] = '\0';
  }
  free(buf);
  return ok;
}

static int put_block(FILE *f, const void *data, uint64_t len, uint32_t *crc) {
  *crc = vt_crc32(vt_crc32(*crc, &len, sizeof len), data, len);
  return fwrite(&len, sizeof len, 1, f) == 1 && (len == 0 || fwrite(data, len, 1, f) == 1);
}

vt_status vt_index_cache_store(const char *file, const char *path, const char *fingerprint,
                               const uint8_t *index, size_t n, char *err, size_t errlen) {
  char dir[PATH_MAX], tmp[PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  if (slash && vt_mkdir_p(dir) != 0) {
    snprintf(err, errlen, "cannot create the index cache folder %s: %s", dir, strerror(errno));
    return VT_ERR_IO;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", file, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, errlen, "cannot write the index cache entry %s: %s", tmp, strerror(errno));
    return VT_ERR_IO;
  }
  const size_t m = sizeof MAGIC - 1;
  uint32_t crc = vt_crc32(0, MAGIC, m);
  int ok = fwrite(MAGIC, m, 1, f) == 1 && put_block(f, path, strlen(path), &crc) &&
           put_block(f, fingerprint, strlen(fingerprint), &crc) && put_block(f, index, n, &crc) &&
           fwrite(&crc, sizeof crc, 1, f) == 1;
  ok = fflush(f) == 0 && ok && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, file) != 0) {
    snprintf(err, errlen, "cannot write the index cache entry %s: %s", file, strerror(errno));
    unlink(tmp);
    return VT_ERR_IO;
  }
  return VT_OK;
}
