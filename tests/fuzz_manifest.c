// fuzz_manifest.c: libFuzzer target for the checkpoint manifest parser
// (vt_ckpt_manifest_parse): any bytes must give VT_OK with values in their ranges, or a refusal
// with a message; never a crash, a hang or a read past the input.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // An exact-size copy, so reading one byte too far is caught by ASan.
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  if (size) memcpy(text, data, size);
  vt_ckpt_manifest m;
  char err[512] = "";
  if (vt_ckpt_manifest_parse(text, size, &m, err, sizeof err) == VT_OK) {
    if (m.nfiles < 1 || m.nfiles > VT_CKPT_MAX_FILES || m.step < 0 || m.width < 1 ||
        m.global_batch < 1 || !(m.mlp_ratio > 0) || m.nunknown < 0 ||
        memchr(m.unknown, 0, sizeof m.unknown) == NULL || (m.nunknown == 0) != !m.unknown[0] ||
        memchr(m.freeze, 0, sizeof m.freeze) == NULL || !(m.drop_path >= 0 && m.drop_path <= 1))
      abort();  // accepted values out of their ranges (unknown keys: skipped, named)
  } else if (!err[0]) {
    abort();  // a refusal must say why
  }
  free(text);
  return 0;
}
