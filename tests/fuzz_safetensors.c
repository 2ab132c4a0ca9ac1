// fuzz_safetensors.c: libFuzzer target for vt_safetensors_parse. Each input is parsed twice: as a
// whole file, and as a bare header (the 8-byte length put in front here, no data) so mutations
// reach the JSON parser without having to keep that length in step. Built by fuzz_safetensors.sh
// with clang -fsanitize=fuzzer,address,undefined; needs only dataio/safetensors.c.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// The contract: a refusal leaves f empty with a message; an accepted file describes tensors that
// lie inside the data it copied, cover it exactly, match their shapes and can all be found.
static void check(const uint8_t *b, size_t n) {
  vt_st_file f;
  char err[512] = "";
  vt_status st = vt_safetensors_parse(b, n, &f, err, sizeof err);
  if (st != VT_OK) {
    if (st != VT_ERR_INPUT || !err[0] || f.count || f.entries || f.data) abort();
    return;
  }
  if (!f.data || f.data_nbytes < 0 || (size_t)f.data_nbytes > n - 8 ||
      memcmp(f.data, b + n - (size_t)f.data_nbytes, (size_t)f.data_nbytes) != 0)
    abort();
  int64_t covered = 0;
  for (int i = 0; i < f.count; i++) {
    const vt_st_entry *e = &f.entries[i];
    int64_t bytes = vt_st_dtype_size(e->dtype);
    if (!bytes || e->ndim < 0 || e->ndim > VT_ST_MAX_DIMS || !memchr(e->name, 0, VT_ST_MAX_NAME))
      abort();
    for (int d = 0; d < e->ndim; d++) bytes *= e->shape[d];  // checked by the parser: no overflow
    if (e->begin < 0 || e->end < e->begin || e->end > f.data_nbytes || e->end - e->begin != bytes)
      abort();
    if (vt_st_find(&f, e->name) != e) abort();
    const volatile uint8_t *p = vt_st_data(&f, e);
    if (bytes) (void)p[0], (void)p[bytes - 1];  // ASan: the whole range is there
    covered += bytes;
  }
  if (covered != f.data_nbytes) abort();
  const char *v = vt_st_metadata(&f, "format");
  if (v) (void)strlen(v);
  vt_safetensors_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(data, size);
  uint8_t *b = malloc(size + 8);
  if (!b) return 0;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)size >> (8 * i));
  if (size) memcpy(b + 8, data, size);
  check(b, size + 8);
  free(b);
  return 0;
}
