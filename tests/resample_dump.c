// resample_dump.c: samples made by vt_sample_from_bytes with a filtered interpolation, for
// tests/resample_pil.py. Usage: resample_dump FILE S train|src|jitter|eval|squash
// bilinear|bicubic N full|reduced OUT (src: training with the simple random crop; jitter:
// training with the colour jitter 0.4 alone, timm's). Writes N samples (seed 5, epoch 0, index
// k) to OUT: per sample a text line "x y w h flip scale" (the crop in full-size pixels and the
// decode's reduction; with jitter then "op factor" three times, the jitter in its order) on
// stdout, and its (3, S, S) floats to OUT, with the ImageNet mean and std.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "sample.h"
#include "threeaug.h"

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: resample_dump FILE S train|src|jitter|eval|squash bilinear|bicubic "
                    "N full|reduced OUT\n");
    return 2;
  }
  uint8_t *bytes;
  size_t n;
  char err[512];
  if (vt_image_read_file(argv[1], 0, &bytes, &n, err, sizeof err) != VT_IMG_OK) {
    fprintf(stderr, "resample_dump: %s\n", err);
    return 1;
  }
  const int S = atoi(argv[2]), count = atoi(argv[5]);
  const int jitter = !strcmp(argv[3], "jitter");
  const int train = !strcmp(argv[3], "train") || !strcmp(argv[3], "src") || jitter;
  vt_transform_config tc = vt_transform_defaults();
  tc.simple_crop = !strcmp(argv[3], "src");
  tc.color_jitter = jitter ? 0.4f : 0;
  tc.eval_squash = !strcmp(argv[3], "squash");  // evaluation, both sides resized
  tc.train_interp = tc.eval_interp =
      !strcmp(argv[4], "bilinear") ? VT_INTERP_BILINEAR : VT_INTERP_BICUBIC;
  FILE *out = fopen(argv[7], "wb");
  float *img = malloc((size_t)3 * S * S * sizeof(float));
  if (!out || !img) return 1;
  for (int k = 0; k < count; k++) {
    vt_sample_spec sp = {.tc = &tc, .S = S, .train = train, .seed = 5, .epoch = 0, .index = k,
                         .full_decode = !strcmp(argv[6], "full")};
    vt_sample_stats st;
    if (vt_sample_from_bytes(bytes, n, &sp, img, &st, err, sizeof err) != VT_IMG_OK) {
      fprintf(stderr, "resample_dump: %s: %s\n", argv[1], err);
      return 1;
    }
    printf("%.9g %.9g %.9g %.9g %d %d", st.crop.x, st.crop.y, st.crop.w, st.crop.h,
           st.crop.flip, st.scale);
    vt_threeaug_plan p;  // (the sampler's draws, as vt_sample_from_bytes made them)
    vt_threeaug_draw(tc.color_jitter, 5, 0, k, &p);
    for (int i = 0; jitter && i < p.njitter; i++)
      printf(" %d %.9g", (int)p.jitter_op[i], p.jitter[i]);
    printf("\n");
    fwrite(img, sizeof(float), (size_t)3 * S * S, out);
  }
  fclose(out);
  free(img);
  free(bytes);
  return 0;
}
