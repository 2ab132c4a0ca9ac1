// tar.h: the member list of a tar file (POSIX ustar, GNU and pax, as Python's tarfile, GNU tar
// and webdataset's writers make them) read from its headers alone, and a plain ustar writer.
// Reading a member is then one pread of (offset, size): nothing is unpacked. Used for datasets
// in tar shards (dataset.h). Must not depend on MPI, a backend, the model or an image decoder.
#ifndef VT_TAR_H
#define VT_TAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vt_error.h"

typedef struct {
  char *name;      // the full member name (pax path, GNU long name or ustar prefix/name)
  int64_t offset;  // of its data in the file
  int64_t size;
} vt_tar_member;

// The regular files of the tar open on fd (path is for messages), in archive order. Directories,
// links and devices are skipped; pax and GNU long-name headers are applied to the member they
// precede. A damaged header (checksum), a member whose data or padding to whole blocks runs
// past the end of the file, a file cut inside a header, a sparse member or a name too long are
// VT_ERR_INPUT with a message that names the file and the byte offset. A file ending after a
// whole member without the end-of-archive blocks is accepted (GNU tar also reads it). *out is
// malloc'd (vt_tar_free_members).
vt_status vt_tar_list(int fd, const char *path, vt_tar_member **out, int64_t *n, char *err,
                      size_t errlen);
void vt_tar_free_members(vt_tar_member *m, int64_t n);

// Appends one regular-file member (ustar; names up to 100 bytes, or 255 split at a '/') and
// its data padded to a block; vt_tar_finish writes the end-of-archive blocks. 0 on success,
// -1 on a write error or a name that does not fit (errno is set).
int vt_tar_write_member(FILE *f, const char *name, const void *data, size_t size);
int vt_tar_finish(FILE *f);

#endif
