// partfile.h: one file written by many processes at once, each its own byte ranges (pwrite), and
// the file's CRC-32 from each writer's share, so that no process holds or reads the whole file.
// A checkpoint's tensors are written this way by the ranks that hold them (launch/ckpt.c).
// Must not depend on MPI or the model.
//
// The CRC-32 is linear over GF(2): for files of one length, the CRC register of a XOR b is the
// XOR of the registers of a and b. A writer's share is the register (started at 0, no final
// inversion) of the file as it would be with every byte it does not write zero; the file's CRC-32
// follows from the XOR of all the shares and the length (vt_crc32_of_shares). Runs of zeros are
// skipped by one multiplication by x^(8n) modulo the polynomial, not read.
#ifndef VT_PARTFILE_H
#define VT_PARTFILE_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

// The register after n zero bytes, from register reg (reflected, as vt_crc32's, without its
// inversions).
uint32_t vt_crc32_shift(uint32_t reg, int64_t n);

// The share of n bytes at offset `at` of a file of file_nbytes bytes: shares of disjoint pieces
// XOR into the share of their union, in any order (a writer's share is the XOR of its parts').
uint32_t vt_crc32_piece(int64_t at, const void *data, size_t n, int64_t file_nbytes);
// The CRC-32 (as vt_crc32 of the whole file) of a file of file_nbytes bytes whose bytes are each
// written by exactly one of the n writers whose shares these are.
uint32_t vt_crc32_of_shares(const uint32_t *shares, int n, int64_t file_nbytes);

// Creates path (replacing a regular file there; anything else is refused), writes head at offset 0 and makes the file
// file_nbytes long, its space reserved where the file system can (fallocate), so that a full
// disk is found here and not by the writers; closes it. *head_share: the head's CRC share.
vt_status vt_partfile_create(const char *path, const void *head, int64_t head_nbytes,
                             int64_t file_nbytes, uint32_t *head_share, char *err, size_t errlen);

// A byte range of the file and where its bytes are in memory.
typedef struct {
  int64_t at, nbytes;
  const void *data;
} vt_part;

// Writes this process's parts into the file vt_partfile_create made (sorted by offset here, so
// that overlaps are found: they must not overlap and must lie inside file_nbytes), syncs it to
// disk and returns its CRC share.
// n == 0 writes nothing (share 0). VT_ERR_IO naming the file on a failed open, write or sync.
vt_status vt_partfile_write(const char *path, vt_part *parts, int64_t n, int64_t file_nbytes,
                            uint32_t *share, char *err, size_t errlen);

#endif
