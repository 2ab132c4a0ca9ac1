// fuzz_label.c: libFuzzer target for vt_label_parse, the reader of tar shards' label members
// (decimal text, or an integer field of a JSON object; with class names, a name). Each input is
// parsed under "cls", "json:label", "json:x" and "json:a.b", without and with 4 class names. The contract: VT_OK gives a label in [0, max); a refusal is
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
  // Class names for the named half of the runs (the parser looks names up by binary search).
  static char *names_of[] = {"a", "b b", "cat", "x"};
  static int32_t order[] = {0, 1, 2, 3};
  static const vt_label_names names = {4, names_of, order};
  static const char *const keys[] = {"cls", "json:label", "json:x", "json:a.b"};
  for (int k = 0; k < 8; k++) {
    int32_t label = -7;
    char why[160] = "";
    const vt_label_names *np = k >= 4 ? &names : NULL;
    const int32_t max = np ? np->count : 1000;
    vt_status st = vt_label_parse(keys[k % 4], text, size, 1000, np, &label, why, sizeof why);
    if (st == VT_OK ? label < 0 || label >= max : st != VT_ERR_INPUT || !why[0]) abort();
  }
  free(text);
  return 0;
}
