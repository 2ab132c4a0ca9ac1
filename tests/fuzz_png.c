// fuzz_png.c: libFuzzer target for the PNG path of vt_image_decode. Every input gets the PNG
// signature, so mutations exercise libpng and our error handling rather than format sniffing.
// Built by fuzz.sh with clang -fsanitize=fuzzer,address; needs nothing but dataio/image.c.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
  // The signature overwrites the first bytes (seeds keep theirs), shorter inputs stay a prefix.
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  for (size_t i = 0; i < size && i < sizeof sig; i++) buf[i] = sig[i];
  vt_image im;
  char err[256];
  const int64_t max_pixels = 1 << 18;  // small: bombs are refused, every input decodes fast
  vt_image_status st = vt_image_decode(buf, size, max_pixels, &im, err, sizeof err);
  // The contract: pixels (within the limit) exactly when OK, none and a message otherwise.
  if (st == VT_IMG_OK) {
    if (!im.rgb || im.width <= 0 || im.height <= 0 || (int64_t)im.width * im.height > max_pixels)
      abort();
    volatile uint8_t sink = im.rgb[(size_t)im.width * im.height * 3 - 1];  // whole buffer there
    (void)sink;
  } else if (im.rgb || !err[0]) {
    abort();
  }
  vt_image_free(&im);
  free(buf);
  return 0;
}
