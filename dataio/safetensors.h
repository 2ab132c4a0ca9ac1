// safetensors.h: writing tensors in the safetensors format (an 8-byte little-endian header
// length, a JSON header of name -> dtype, shape, data_offsets, then the raw little-endian data).
// Must not depend on MPI, a backend or the model.
#ifndef VT_SAFETENSORS_H
#define VT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

typedef struct {
  const char *name;
  const char *dtype;  // "F32" or "I32"
  int ndim;
  int64_t shape[4];
  const void *data;   // host memory, 4-byte elements
} vt_st_tensor;

// Writes n tensors to path (in the given order). Returns VT_ERR_IO with a message in err when
// the file cannot be written completely (full disk, no permission).
vt_status vt_safetensors_write(const char *path, const vt_st_tensor *tensors, int n, char *err,
                               size_t errlen);

#endif
