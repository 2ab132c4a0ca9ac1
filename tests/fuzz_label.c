// fuzz_label.c: libFuzzer target for vt_label_parse, the reader of tar shards' label members
// (decimal text, or an integer field of a JSON object). Each input is parsed under "cls",
// "json:label" and "json:x". The contract: VT_OK gives a label in [0, max); a refusal is
// VT_ERR_INPUT with a reason; nothing reads past the input (ASan). Built by fuzz_label.sh with
// clang -fsanitize=fuzzer,address,undefined.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "label.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A copy of exactly size bytes, so that a read past the end is an ASan error.
  char *text = malloc(size ? size : 1);
  if (!text) abort();
  if (size) memcpy(text, data, size);
  static const char *const keys[] = {"cls", "json:label", "json:x"};
  for (int k = 0; k < 3; k++) {
    int32_t label = -7;
    char why[128] = "";
    vt_status st = vt_label_parse(keys[k], text, size, 1000, &label, why, sizeof why);
    if (st == VT_OK ? label < 0 || label >= 1000 : st != VT_ERR_INPUT || !why[0]) abort();
  }
  free(text);
  return 0;
}
