// tar.c: tar member lists from headers, and a ustar writer (tar.h).
#include "tar.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 512
#define MAX_META (1 << 20)  // a GNU long name or a pax header larger than this is not a name

static int64_t blocks_of(int64_t n) { return (n + BLOCK - 1) / BLOCK * BLOCK; }

// n bytes at off, all of them: 0, or -1 (errno set; EIO for a file that ends early).
static int read_at(int fd, void *buf, size_t n, int64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + (int64_t)got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

// A numeric field: octal digits between optional leading spaces or NULs and a space or NUL, or
// (first byte 0x80) a big-endian base-256 number in the remaining bytes, as GNU tar writes sizes
// of 8 GiB and more. 0 on success.
static int parse_number(const unsigned char *p, int len, int64_t *out) {
  uint64_t v = 0;
  if (p[0] & 0x80) {
    if (p[0] != 0x80) return -1;  // negative or unknown
    for (int i = 1; i < len; i++) {
      if (v >> 55) return -1;  // would pass 2^63
      v = v << 8 | p[i];
    }
    *out = (int64_t)v;
    return 0;
  }
  int i = 0;
  while (i < len && (p[i] == ' ' || p[i] == '\0')) i++;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
    if (v >> 60) return -1;
    v = v << 3 | (uint64_t)(p[i] - '0');
  }
  for (; i < len; i++)
    if (p[i] != ' ' && p[i] != '\0') return -1;
  *out = (int64_t)v;
  return 0;
}

// The stored checksum against the header's byte sum with the checksum field read as spaces
// (unsigned, as POSIX says, or signed, as some old writers summed).
static int checksum_ok(const unsigned char *h) {
  int64_t stored;
  if (parse_number(h + 148, 8, &stored) != 0) return 0;
  int64_t u = 0, s = 0;
  for (int i = 0; i < BLOCK; i++) {
    unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];
    u += c;
    s += (signed char)c;
  }
  return stored == u || stored == s;
}

static int zero_block(const unsigned char *h) {
  for (int i = 0; i < BLOCK; i++)
    if (h[i]) return 0;
  return 1;
}

// The name a ustar header gives: prefix/name for POSIX ustar, name alone for GNU and v7.
static char *header_name(const unsigned char *h) {
  char name[101], prefix[156];
  memcpy(name, h, 100);
  name[100] = '\0';
  int posix = memcmp(h + 257, "ustar\0", 6) == 0;
  memcpy(prefix, h + 345, 155);
  prefix[155] = '\0';
  if (!posix || !prefix[0]) return strdup(name);
  size_t np = strlen(prefix), nn = strlen(name);
  char *full = malloc(np + 1 + nn + 1);
  if (full) {
    memcpy(full, prefix, np);
    full[np] = '/';
    memcpy(full + np + 1, name, nn + 1);
  }
  return full;
}

// pax records "LEN key=value\n": sets *path (replacing it) and *size from theirs. 0 on success.
static int parse_pax(const char *d, int64_t n, char **path, int64_t *size) {
  int64_t i = 0;
  while (i < n) {
    if (d[i] == '\0') break;  // NUL padding after the records
    int64_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9' && len < n) len = len * 10 + (d[j++] - '0');
    if (j == i || j >= n || d[j] != ' ' || len <= j - i || i + len > n || d[i + len - 1] != '\n')
      return -1;
    const char *kv = d + j + 1, *end = d + i + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq) return -1;
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    if (klen == 4 && !memcmp(kv, "path", 4)) {
      char *p = malloc(vlen + 1);
      if (!p) return -1;
      memcpy(p, eq + 1, vlen);
      p[vlen] = '\0';
      free(*path);
      *path = p;
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
      int64_t v = 0;
      if (vlen == 0 || vlen > 18) return -1;
      for (size_t k = 0; k < vlen; k++) {
        if (eq[1 + k] < '0' || eq[1 + k] > '9') return -1;
        v = v * 10 + (eq[1 + k] - '0');
      }
      *size = v;
    }
    i += len;
  }
  return 0;
}

static int push(vt_tar_member **m, int64_t *n, int64_t *cap, char *name, int64_t off,
                int64_t size) {
  if (*n == *cap) {
    int64_t c = *cap ? 2 * *cap : 64;
    vt_tar_member *nm = realloc(*m, (size_t)c * sizeof **m);
    if (!nm) return -1;
    *m = nm, *cap = c;
  }
  (*m)[(*n)++] = (vt_tar_member){name, off, size};
  return 0;
}

vt_status vt_tar_list(int fd, const char *path, vt_tar_member **out, int64_t *n, char *err,
                      size_t errlen) {
  *out = NULL, *n = 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0) return vt_fail_input(err, errlen, "%s: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))  // (its opener does not wait for a FIFO's writer: O_NONBLOCK)
    return vt_fail_input(err, errlen, "%s is not a regular file: a shard is a .tar file", path);
  const int64_t fsize = (int64_t)sb.st_size;
  vt_tar_member *m = NULL;
  int64_t cap = 0, off = 0;
  char *next_name = NULL;  // from a GNU long-name or pax header, for the member that follows
  int64_t next_size = -1;  // from a pax header
  char *meta = NULL;
  vt_status st = VT_OK;
  const char *fix = "re-create or re-copy the shard";
  while (st == VT_OK && off < fsize) {  // a file ending after a member is accepted
    unsigned char h[BLOCK];
    if (fsize - off < BLOCK) {
      st = vt_fail_input(err, errlen,
                         "%s is cut inside a tar header at byte %lld (file of %lld bytes): "
                         "%s",
                         path, (long long)off, (long long)fsize, fix);
      break;
    }
    if (read_at(fd, h, BLOCK, off) != 0) {
      st = vt_fail_input(err, errlen, "%s: reading byte %lld: %s", path, (long long)off,
                         strerror(errno));
      break;
    }
    if (zero_block(h)) break;  // end of archive
    int64_t size;
    if (!checksum_ok(h) || parse_number(h + 124, 12, &size) != 0) {
      st = vt_fail_input(err, errlen,
                         "%s: the tar header at byte %lld is damaged (%s) or this is not a "
                         "tar file: %s",
                         path, (long long)off, checksum_ok(h) ? "size field" : "checksum", fix);
      break;
    }
    const char type = (char)h[156];
    const int regular = type == '0' || type == '\0' || type == '7';
    if (regular && next_size >= 0) size = next_size;
    const int has_data = !(type >= '1' && type <= '6');  // links, devices, folders, fifos
    if (!has_data) size = 0;
    const int64_t data = off + BLOCK;
    if (size > fsize - data || blocks_of(size) > fsize - data) {  // padded to whole blocks
      char *nm = next_name ? strdup(next_name) : header_name(h);
      st = vt_fail_input(err, errlen,
                         "%s is cut short: member '%s' (tar header at byte %lld) has %lld "
                         "bytes of data (%lld padded to whole 512-byte blocks) but the file "
                         "ends %lld bytes after its header: %s",
                         path, nm ? nm : "?", (long long)off, (long long)size,
                         (long long)blocks_of(size), (long long)(fsize - data), fix);
      free(nm);
      break;
    }
    if (type == 'L' || type == 'x') {  // a GNU long name or a pax header for the next member
      if (size > MAX_META) {
        st = vt_fail_input(err, errlen,
                           "%s: the %s header at byte %lld is %lld bytes long (at most %d): "
                           "%s",
                           path, type == 'L' ? "long-name" : "pax", (long long)off, (long long)size,
                           MAX_META, fix);
        break;
      }
      meta = malloc((size_t)size + 1);
      if (!meta || read_at(fd, meta, (size_t)size, data) != 0) {
        st = vt_fail_input(err, errlen, "%s: reading the header at byte %lld: %s", path,
                           (long long)off, meta ? strerror(errno) : "out of memory");
        break;
      }
      meta[size] = '\0';
      if (type == 'L') {
        free(next_name);
        next_name = meta;  // NUL-terminated by the writer or by the byte added above
        meta = NULL;
      } else {
        int bad = parse_pax(meta, size, &next_name, &next_size);
        free(meta);
        meta = NULL;
        if (bad) {
          st = vt_fail_input(err, errlen, "%s: the pax header at byte %lld is damaged: %s", path,
                             (long long)off, fix);
          break;
        }
      }
    } else if (type == 'S') {
      st = vt_fail_input(err, errlen,
                         "%s: member at byte %lld is a sparse file, which a dataset shard "
                         "cannot hold: %s without --sparse",
                         path, (long long)off, fix);
      break;
    } else if (type == 'g' || type == 'K') {
      // a pax global header or a GNU long link name: nothing a dataset needs
    } else {
      if (regular) {
        char *nm = next_name ? next_name : header_name(h);
        next_name = NULL;
        if (!nm || push(&m, n, &cap, nm, data, size) != 0) {
          free(nm);
          st = vt_fail_input(err, errlen, "%s: out of memory listing members", path);
          break;
        }
      }
      free(next_name);  // a long name or pax record belongs to the header right after it
      next_name = NULL;
      next_size = -1;
    }
    off = data + blocks_of(size);
  }
  free(next_name);
  if (st != VT_OK) {
    vt_tar_free_members(m, *n);
    *n = 0;
    return st;
  }
  *out = m;
  return VT_OK;
}

void vt_tar_free_members(vt_tar_member *m, int64_t n) {
  for (int64_t i = 0; i < n; i++) free(m[i].name);
  free(m);
}

// ---- writer ---------------------------------------------------------------------------------

static void octal(unsigned char *field, int len, uint64_t v) {
  snprintf((char *)field, (size_t)len, "%0*llo", len - 1, (unsigned long long)v);
}

int vt_tar_write_member(FILE *f, const char *name, const void *data, size_t size) {
  unsigned char h[BLOCK] = {0};
  size_t nn = strlen(name);
  const char *base = name;
  size_t np = 0;  // prefix length
  if (nn > 100) {  // split at a '/' so that the prefix fits 155 and the rest 100
    const char *cut = NULL;
    for (const char *s = name; *s; s++)
      if (*s == '/' && (size_t)(s - name) <= 155 && nn - (size_t)(s - name) - 1 <= 100) cut = s;
    if (!cut || cut == name) {
      errno = ENAMETOOLONG;
      return -1;
    }
    np = (size_t)(cut - name);
    base = cut + 1;
  }
  if (nn == 0 || (uint64_t)size > 077777777777ULL) {
    errno = nn == 0 ? EINVAL : EFBIG;
    return -1;
  }
  memcpy(h, base, strlen(base));
  memcpy(h + 345, name, np);
  octal(h + 100, 8, 0644);
  octal(h + 108, 8, 0);
  octal(h + 116, 8, 0);
  octal(h + 124, 12, size);
  octal(h + 136, 12, 0);  // mtime 0: the same bytes on every run
  h[156] = '0';
  memcpy(h + 257, "ustar\0" "00", 8);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);  // six digits, NUL, and the space already there
  static const unsigned char pad[BLOCK];
  size_t tail = (size_t)(blocks_of((int64_t)size) - (int64_t)size);
  if (fwrite(h, 1, BLOCK, f) != BLOCK || fwrite(data, 1, size, f) != size ||
      fwrite(pad, 1, tail, f) != tail)
    return -1;
  return 0;
}

int vt_tar_finish(FILE *f) {
  static const unsigned char zeros[2 * BLOCK];
  return fwrite(zeros, 1, sizeof zeros, f) == sizeof zeros ? 0 : -1;
}
