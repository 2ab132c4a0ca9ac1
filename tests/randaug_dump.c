// randaug_dump: applies RandAugment's and 3-Augment's operations to a raw 8-bit RGB image for
// tests/randaug_pil.py, which runs the same operations through Pillow and compares. Usage:
//   randaug_dump IN.rgb W H OUT.rgb < cases
// Each line of cases is "OP ARG INTERP" (OP a vt_ra_op number, or 100 grayscale and 101 the
// Gaussian blur of radius ARG; INTERP 0 bilinear, 1 bicubic); OUT.rgb receives each case's
// W x H x 3 result, in order, each from the input image.
//   randaug_dump --threeaug IN.rgb S OUT.rgb JITTER N
// draws 3-Augment's plans of samples 0..N-1 (seed 5, epoch 2) with colour jitter JITTER, prints
// each as "PICK RADIUS OP FACTOR OP FACTOR OP FACTOR" and writes its result on the S x S image.
// The fill colour is timm's for ImageNet's mean, (124, 116, 104).
//   randaug_dump --levels
// prints "INC OP M NEGATE ARG" for every operation, magnitude 0, 0.5, .., 12 and sign, with
// increasing levels off and on (vt_randaug_arg, translate_pct 0.45).
//   randaug_dump --bench IN.rgb S REPS SPEC < cases
// times each case (as above) on the S x S image, REPS calls each from a fresh copy of it, and
// then the whole policy SPEC ("rand-m9-mstd0.5-inc1") over REPS images (draws and operations),
// printing "OP ARG INTERP MS" and "policy SPEC MS" in milliseconds per image
// (tests/bench_randaug.py).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "randaug.h"
#include "threeaug.h"

static int levels(void) {
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  vt_randaug_config c = vt_randaug_defaults(mean);
  for (c.increasing = 0; c.increasing <= 1; c.increasing++)
    for (int op = 0; op < VT_RA_NUM_OPS; op++)
      for (int k = 0; k <= 24; k++)
        for (int neg = 0; neg <= 1; neg++)
          printf("%d %d %.9g %d %.9g\n", c.increasing, op, 0.5 * k, neg,
                 vt_randaug_arg(&c, (vt_ra_op)op, 0.5f * k, neg));
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench(const char *path, int S, int reps, const char *spec) {
  const size_t n = (size_t)S * S * 3;
  uint8_t *in = malloc(n), *img = malloc(n), *scratch = malloc(n);
  FILE *f = fopen(path, "rb");
  if (S <= 0 || reps <= 0 || !in || !img || !scratch || !f || fread(in, 1, n, f) != n) {
    fprintf(stderr, "cannot read %dx%d RGB from %s\n", S, S, path);
    return 1;
  }
  fclose(f);
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  vt_randaug_config c = vt_randaug_defaults(mean);
  char err[256];
  if (vt_randaug_parse(spec, &c, err, sizeof err) != VT_OK) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  int op, interp;
  float arg;
  while (scanf("%d %f %d", &op, &arg, &interp) == 3) {
    if (op < 0 || op >= VT_RA_NUM_OPS) return 1;
    const double t0 = now();
    for (int r = 0; r < reps; r++) {
      memcpy(img, in, n);
      vt_randaug_op((vt_ra_op)op, arg, (vt_ra_interp)interp, c.fill, img, S, S, scratch);
    }
    printf("%d %.9g %d %.6f\n", op, arg, interp, (now() - t0) / reps * 1e3);
  }
  const double t0 = now();
  for (int r = 0; r < reps; r++) {
    vt_randaug_plan p;
    memcpy(img, in, n);
    vt_randaug_draw(&c, 1, 0, r, &p);
    vt_randaug_run(&c, &p, img, S, scratch);
  }
  printf("policy %s %.6f\n", spec, (now() - t0) / reps * 1e3);
  free(in), free(img), free(scratch);
  return 0;
}

static int threeaug(const char *path, int S, const char *out_path, float jitter, int count) {
  const size_t n = (size_t)S * S * 3;
  uint8_t *in = malloc(n), *img = malloc(n), *scratch = malloc(n + 6 * (size_t)S);
  FILE *f = fopen(path, "rb"), *out = fopen(out_path, "wb");
  if (S <= 0 || !in || !img || !scratch || !f || !out || fread(in, 1, n, f) != n) {
    fprintf(stderr, "cannot read %dx%d RGB from %s or write %s\n", S, S, path, out_path);
    return 1;
  }
  fclose(f);
  for (int k = 0; k < count; k++) {
    vt_threeaug_plan p;
    vt_threeaug_draw(jitter, 5, 2, k, &p);
    printf("%d %.9g", (int)p.pick, p.radius);
    for (int i = 0; i < p.njitter; i++) printf(" %d %.9g", (int)p.jitter_op[i], p.jitter[i]);
    printf("\n");
    memcpy(img, in, n);
    vt_threeaug_run(&p, img, S, scratch);
    if (fwrite(img, 1, n, out) != n) return 1;
  }
  fclose(out);
  free(in), free(img), free(scratch);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--levels") == 0) return levels();
  if (argc == 7 && strcmp(argv[1], "--threeaug") == 0)
    return threeaug(argv[2], atoi(argv[3]), argv[4], (float)atof(argv[5]), atoi(argv[6]));
  if (argc == 6 && strcmp(argv[1], "--bench") == 0)
    return bench(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
  if (argc != 5) {
    fprintf(stderr, "usage: %s IN.rgb W H OUT.rgb < cases\n", argv[0]);
    return 2;
  }
  const int w = atoi(argv[2]), h = atoi(argv[3]);
  const size_t n = (size_t)w * h * 3;
  uint8_t *in = malloc(n), *img = malloc(n), *scratch = malloc(n + 6 * (size_t)(w > h ? w : h));
  FILE *f = fopen(argv[1], "rb");
  if (w <= 0 || h <= 0 || !in || !img || !scratch || !f || fread(in, 1, n, f) != n) {
    fprintf(stderr, "cannot read %dx%d RGB from %s\n", w, h, argv[1]);
    return 1;
  }
  fclose(f);
  FILE *out = fopen(argv[4], "wb");
  if (!out) return 1;
  const uint8_t fill[3] = {124, 116, 104};
  int op, interp;
  float arg;
  while (scanf("%d %f %d", &op, &arg, &interp) == 3) {
    memcpy(img, in, n);
    if (op == 100) vt_grayscale(img, w, h);
    else if (op == 101) vt_gaussian_blur(img, w, h, arg, scratch);
    else if (op >= 0 && op < VT_RA_NUM_OPS)
      vt_randaug_op((vt_ra_op)op, arg, (vt_ra_interp)interp, fill, img, w, h, scratch);
    else return 1;
    if (fwrite(img, 1, n, out) != n) return 1;
  }
  fclose(out);
  free(in), free(img), free(scratch);
  return 0;
}
