// fuzz_tar.c: libFuzzer target for vt_tar_list, the reader of dataset shards' headers. Each input
// is put in a memory file and listed. The contract: a refusal is VT_ERR_INPUT with a message and
// no members; an accepted file lists members whose data lie inside it, start on a block after
// their header, come in file order without overlapping, and have names. Built by fuzz_tar.sh with
// clang -fsanitize=fuzzer,address,undefined.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz_tar", 0);
  if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) abort();
  vt_tar_member *m = (vt_tar_member *)1;
  int64_t n = -1;
  char err[512] = "";
  vt_status st = vt_tar_list(fd, "fuzz.tar", &m, &n, err, sizeof err);
  close(fd);
  if (st != VT_OK) {
    if (st != VT_ERR_INPUT || !err[0] || m || n) abort();
    return 0;
  }
  int64_t end = 0;  // where the previous member's data ended
  for (int64_t i = 0; i < n; i++) {
    if (!m[i].name || m[i].offset % 512 || m[i].offset < end + 512 || m[i].size < 0 ||
        m[i].offset + m[i].size > (int64_t)size)
      abort();
    end = m[i].offset + m[i].size;
  }
  vt_tar_free_members(m, n);
  return 0;
}
