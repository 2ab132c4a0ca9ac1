// partfile.c: a file written in parts by many processes, and its CRC-32 from their shares
// (partfile.h).
#define _GNU_SOURCE  // fallocate
#include "partfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"

#define FAIL(status, ...) return (snprintf(err, errlen, __VA_ARGS__), (status))

// Polynomials modulo the CRC-32 polynomial, reflected: bit 31 is x^0, bit 0 is x^31.
#define POLY 0xEDB88320u
#define X0 0x80000000u  // the polynomial 1

// a * b modulo the polynomial: b times each term of a, b multiplied by x at each term.
static uint32_t mul_mod(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (uint32_t term = X0; term && a; term >>= 1) {
    if (a & term) p ^= b, a ^= term;
    b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
  }
  return p;
}

// x^(8n) modulo the polynomial: the product of x^(2^k) over the set bits k of 8n.
static uint32_t x_pow_bytes(int64_t n) {
  uint32_t r = X0, sq = X0 >> 8;  // x^8, the square to use for bit 0 of n
  for (uint64_t e = (uint64_t)n; e; e >>= 1) {
    if (e & 1) r = mul_mod(r, sq);
    sq = mul_mod(sq, sq);
  }
  return r;
}

uint32_t vt_crc32_shift(uint32_t reg, int64_t n) {
  return n > 0 && reg ? mul_mod(x_pow_bytes(n), reg) : reg;
}

uint32_t vt_crc32_piece(int64_t at, const void *data, size_t n, int64_t file_nbytes) {
  return vt_crc32_shift(~vt_crc32(0xFFFFFFFFu, data, n), file_nbytes - at - (int64_t)n);
}

uint32_t vt_crc32_of_shares(const uint32_t *shares, int n, int64_t file_nbytes) {
  // vt_crc32 of the file is ~(register after the file from ~0); by linearity that register is
  // the one of the initial ~0 over file_nbytes zeros XOR the one of the bytes from 0.
  uint32_t reg = vt_crc32_shift(0xFFFFFFFFu, file_nbytes);
  for (int i = 0; i < n; i++) reg ^= shares[i];
  return ~reg;
}

// Writes all n bytes at offset at (pwrite may write fewer).
static int pwrite_all(int fd, const void *data, int64_t n, int64_t at) {
  const char *p = data;
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, (size_t)(n < (1 << 30) ? n : (1 << 30)), (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return -1;
    }
    p += w, at += w, n -= w;
  }
  return 0;
}

vt_status vt_partfile_create(const char *path, const void *head, int64_t head_nbytes,
                             int64_t file_nbytes, uint32_t *head_share, char *err, size_t errlen) {
  // Only a regular file is replaced (a failed write below removes it).
  if (vt_output_file_check(path, "the output file", err, errlen) != VT_OK) return VT_ERR_INPUT;
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) FAIL(VT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  int ok = pwrite_all(fd, head, head_nbytes, 0) == 0;
  if (ok && file_nbytes > head_nbytes) {
    // Reserve the space: a full disk fails here, before any rank writes. Where the file system
    // cannot (EOPNOTSUPP: some NFS, older Lustre), the file is only sized and a full disk shows
    // as a failed write.
    const int rc = fallocate(fd, 0, (off_t)head_nbytes, (off_t)(file_nbytes - head_nbytes));
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
      ok = ftruncate(fd, (off_t)file_nbytes) == 0;
    else
      ok = rc == 0;
  }
  const int saved = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) {
    unlink(path);
    FAIL(VT_ERR_IO, "cannot write %s (%lld bytes): %s%s", path, (long long)file_nbytes,
         strerror(saved), saved == ENOSPC ? " (the disk is full)" : "");
  }
  *head_share = vt_crc32_piece(0, head, (size_t)head_nbytes, file_nbytes);
  return VT_OK;
}

static int by_offset(const void *a, const void *b) {
  const int64_t x = ((const vt_part *)a)->at, y = ((const vt_part *)b)->at;
  return (x > y) - (x < y);
}

vt_status vt_partfile_write(const char *path, vt_part *parts, int64_t n, int64_t file_nbytes,
                            uint32_t *share, char *err, size_t errlen) {
  *share = 0;
  if (n == 0) return VT_OK;
  qsort(parts, (size_t)n, sizeof *parts, by_offset);
  for (int64_t i = 0; i < n; i++)
    if (parts[i].at < (i ? parts[i - 1].at + parts[i - 1].nbytes : 0) ||
        parts[i].at + parts[i].nbytes > file_nbytes)
      FAIL(VT_ERR_INPUT, "writing %s: part %lld (bytes %lld..%lld) overlaps another or ends "
           "past the file's %lld bytes", path, (long long)i, (long long)parts[i].at,
           (long long)(parts[i].at + parts[i].nbytes), (long long)file_nbytes);
  const int fd = open(path, O_WRONLY);
  if (fd < 0) FAIL(VT_ERR_IO, "cannot open %s to write its part: %s", path, strerror(errno));
  int ok = 1;
  for (int64_t i = 0; i < n && ok; i++) {
    ok = pwrite_all(fd, parts[i].data, parts[i].nbytes, parts[i].at) == 0;
    if (ok) *share ^= vt_crc32_piece(parts[i].at, parts[i].data, (size_t)parts[i].nbytes,
                                     file_nbytes);
  }
  ok = ok && fsync(fd) == 0;
  const int saved = errno;
  ok = close(fd) == 0 && ok;
  if (!ok)
    FAIL(VT_ERR_IO, "writing its part of %s failed: %s%s", path, strerror(saved),
         saved == ENOSPC ? " (the disk is full)" : "");
  return VT_OK;
}
