// cuda_ops_util.c: test_cuda_ops's helpers (cuda_ops_test.h): memory, random inputs,
// comparisons.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops_test.h"
#include "vt_rng.h"

void *track_host(tc *t, size_t nbytes) {
  void *p = malloc(nbytes ? nbytes : 1);
  if (!p || t->nhost == 64) {
    fprintf(stderr, "test_cuda_ops: out of host memory or slots\n");
    exit(1);
  }
  return t->host[t->nhost++] = p;
}

float *hnew(tc *t, int64_t n) { return track_host(t, (size_t)n * sizeof(float)); }

float *hrand(tc *t, int64_t n, float lo, float hi) {
  float *p = hnew(t, n);
  const uint32_t s = t->stream++;
  for (int64_t i = 0; i < n; i++)
    p[i] = lo + (hi - lo) * vt_rng_uniform(20240607, 7, s, (uint64_t)i);
  return p;
}

float *hcopy(tc *t, const float *src, int64_t n) {
  return memcpy(hnew(t, n), src, (size_t)n * sizeof(float));
}

void *dnew_bytes(tc *t, const void *host, size_t nbytes) {
  void *d = t->gpu->alloc(nbytes);
  if (!d || t->ndev == 64) {
    fprintf(stderr, "test_cuda_ops: %s alloc of %zu bytes failed\n", t->gpu->name, nbytes);
    exit(1);
  }
  if (host) t->gpu->to_device(d, host, nbytes);
  return t->dev[t->ndev++] = d;
}

float *dnew(tc *t, const float *host, int64_t n) {
  return dnew_bytes(t, host, (size_t)n * sizeof(float));
}

// A device buffer full of NaN: an output element the op does not write stays NaN and fails.
float *dpoison(tc *t, int64_t n) {
  // 0x7fc07fc0: a NaN read as one float and as two bf16 halves (bf16 outputs use the buffer too)
  const uint32_t nan2 = 0x7fc07fc0u;
  float *h = hnew(t, n);
  for (int64_t i = 0; i < n; i++) memcpy(&h[i], &nan2, sizeof nan2);
  return dnew(t, h, n);
}

void release(tc *t) {
  t->gpu->synchronize();
  for (int i = 0; i < t->ndev; i++) t->gpu->free(t->dev[i]);
  for (int i = 0; i < t->nhost; i++) free(t->host[i]);
  t->ndev = t->nhost = 0;
}

// FNV-1a of an output's bytes: printed, so that two runs (kernel variants, GPUs) that print the
// same lines made the same bits.
static uint32_t bits_hash(const void *p, size_t nbytes) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < nbytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 16777619u;
  return h;
}

// a: the output's bytes (the first run's).
void report(tc *t, const char *what, double err, double tol, int same, const void *a,
                   size_t nbytes) {
  const int ok = err <= tol && same;  // also fails a NaN error
  t->checks++;
  t->failures += !ok;
  printf("  %-4s %-17s %-30s %-8s err %.2e tol %.0e  repeat %s  %s  bits %08x\n",
         kPrecName[t->prec], t->op, t->shape, what, err, tol, same ? "same bits" : "DIFFERS",
         ok ? "ok" : "FAIL", bits_hash(a, nbytes));
}

// a and b: two runs of the op (host copies); ref the CPU's result.
static void compare(tc *t, const char *what, const float *a, const float *b, const float *ref,
                    int64_t n) {
  double maxdiff = 0.0, maxref = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)ref[i]);
    if (!(d <= maxdiff)) maxdiff = d;  // a NaN sticks
    if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
  }
  const double err = maxref > 0 ? maxdiff / maxref : maxdiff;
  report(t, what, err, t->tol, memcmp(a, b, (size_t)n * sizeof(float)) == 0, a,
         (size_t)n * sizeof(float));
}

// g[0] and g[1] hold two runs of the op on the device; ref the CPU's result.
void check(tc *t, const char *what, float *const g[2], const float *ref, int64_t n) {
  float *a = hnew(t, n), *b = hnew(t, n);
  t->gpu->to_host(a, g[0], (size_t)n * sizeof(float));
  t->gpu->to_host(b, g[1], (size_t)n * sizeof(float));
  compare(t, what, a, b, ref, n);
}

// bf16 activations (vt_ops.h) are the fp32 results rounded to bf16 on each side. The fp32
// values differ by the few ulp the fp32 column allows, and one that sits next to a bf16 rounding
// boundary rounds the other way: one bf16 ulp, 2^-8 to 2^-7 of that element. So a bf16 output may
// differ normwise by up to 2^-7 (7.8e-3), and in at most 1% of the elements that are not tiny
// (|x| >= 1% of the largest; on tiny ones fp32 differences are relatively large: GELU's far left
// tail, near-zero sums): an op that skips its rounding, rounds another way or writes fp32 fails.
// Its fp32 accuracy is the fp32 column's business.
static float bf16_value(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static void check_bf16(tc *t, const char *what, float *const g[2], const float *ref_bits,
                       int64_t n) {
  uint16_t *a = (uint16_t *)hnew(t, n), *b = (uint16_t *)hnew(t, n);
  const uint16_t *rb = (const uint16_t *)ref_bits;
  t->gpu->to_host(a, g[0], (size_t)n * sizeof(uint16_t));
  t->gpu->to_host(b, g[1], (size_t)n * sizeof(uint16_t));
  double maxdiff = 0.0, maxref = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double r = bf16_value(rb[i]), d = fabs((double)bf16_value(a[i]) - r);
    if (!(d <= maxdiff)) maxdiff = d;  // a NaN sticks
    if (fabs(r) > maxref) maxref = fabs(r);
  }
  int64_t apart = 0, large = 0;
  for (int64_t i = 0; i < n; i++)
    if (fabs((double)bf16_value(rb[i])) >= 1e-2 * maxref) large++, apart += a[i] != rb[i];
  const double err = maxref > 0 ? maxdiff / maxref : maxdiff;
  const double frac = large ? (double)apart / (double)large : 0.0;
  char label[32];
  snprintf(label, sizeof label, "%s/bf16", what);
  // Reported: the normwise error, or the share of differing elements when that is too high.
  report(t, label, frac > 1e-2 ? INFINITY : err, 7.9e-3,
         memcmp(a, b, (size_t)n * sizeof(uint16_t)) == 0, a, (size_t)n * sizeof(uint16_t));
}

static int bf16_run(const tc *t) { return kPrec[t->prec] == VT_PRECISION_BF16; }

// An op output that is a bf16 activation in bf16 precision (vt_ops.h).
void check_act(tc *t, const char *what, float *const g[2], const float *ref, int64_t n) {
  if (bf16_run(t)) check_bf16(t, what, g, ref, n);
  else check(t, what, g, ref, n);
}

// An op input that is a bf16 activation in bf16 precision: x as bf16 bits (a new buffer), else x.
float *act_in(tc *t, const float *x, int64_t n) {
  if (!bf16_run(t)) return (float *)x;
  uint16_t *b = (uint16_t *)hnew(t, n);
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);  // nearest even (the inputs are finite)
    b[i] = (uint16_t)(u >> 16);
  }
  return (float *)b;
}
