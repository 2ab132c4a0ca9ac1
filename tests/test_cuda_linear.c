// test_cuda_linear.c: the CUDA Linear op (forward and backward) against the CPU backend, the
// numerical truth, on random data and odd shapes. Exits 77 (CTest's skip code) when no CUDA
// backend is available, so it is harmless on machines without a GPU. Uses only the public op API
// (vt_ops.h, vt_backend.h); must not depend on CUDA headers, MPI or the model.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_backend.h"
#include "vt_ops.h"
#include "vt_rng.h"

// Normwise relative error, max|cuda - cpu| / max|cpu| over a tensor, so cancellation in single
// elements does not read as failure. Both sides are fp32 with different summation orders; 1e-4
// leaves a margin of about 10x over what sums of a few thousand products differ by.
#define TOL 1e-4

typedef struct {
  int64_t M, I, O;
  int bias, dinp, dbias;  // exercise the optional (NULL) pointers too
} shape;

static const shape kShapes[] = {
    {7, 3, 77, 1, 1, 1},   {197, 192, 576, 1, 1, 1},  {1, 1, 1, 1, 1, 1},
    {33, 65, 17, 0, 0, 0}, {394, 384, 1152, 1, 1, 1}, {5, 1000, 2, 0, 1, 1},
};

static float *host_random(int64_t count, uint32_t stream) {
  float *p = malloc((size_t)count * sizeof(float));
  if (!p) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < count; i++)
    p[i] = 2.0f * vt_rng_uniform(1234, 77, stream, (uint64_t)i) - 1.0f;
  return p;
}

static float *device_copy(const vt_backend *be, const float *host, int64_t count) {
  float *d = be->alloc((size_t)count * sizeof(float));
  if (!d) {
    fprintf(stderr, "FAIL: %s alloc of %lld floats returned NULL\n", be->name, (long long)count);
    exit(1);
  }
  be->to_device(d, host, (size_t)count * sizeof(float));
  return d;
}

// Fetches the device tensor and returns its normwise relative error against ref; prints it.
static double compare(const vt_backend *be, const char *what, const float *dev, const float *ref,
                      int64_t count) {
  float *got = malloc((size_t)count * sizeof(float));
  be->to_host(got, dev, (size_t)count * sizeof(float));
  double maxdiff = 0.0, maxref = 0.0;
  for (int64_t i = 0; i < count; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (!(d <= maxdiff)) maxdiff = d;  // also catches NaN
    if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
  }
  free(got);
  double rel = maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
  printf("    %-8s max abs err %.3e  max |ref| %.3e  rel %.3e %s\n", what, maxdiff, maxref, rel,
         rel <= TOL ? "ok" : "FAIL");
  return rel;
}

static int run_shape(const vt_backend *cpu, const vt_backend *gpu, shape s) {
  const int64_t M = s.M, I = s.I, O = s.O;
  printf("  M=%lld I=%lld O=%lld bias=%d dinp=%d dbias=%d\n", (long long)M, (long long)I,
         (long long)O, s.bias, s.dinp, s.dbias);
  float *inp = host_random(M * I, 1), *w = host_random(O * I, 2), *b = host_random(O, 3);
  float *dout = host_random(M * O, 4);
  // Nonzero starting gradients check that dweight and dbias accumulate instead of overwrite;
  // garbage in dinp and out checks that they are overwritten.
  float *dw = host_random(O * I, 5), *db = host_random(O, 6), *junk = host_random(M * I, 7);
  float *junk_out = host_random(M * O, 8);
  float *out_c = malloc((size_t)(M * O) * sizeof(float));
  float *dinp_c = malloc((size_t)(M * I) * sizeof(float));

  vt_linear_fwd(cpu, out_c, inp, w, s.bias ? b : NULL, M, I, O);
  float *d_inp = device_copy(gpu, inp, M * I), *d_w = device_copy(gpu, w, O * I);
  float *d_b = device_copy(gpu, b, O), *d_dout = device_copy(gpu, dout, M * O);
  float *d_dw = device_copy(gpu, dw, O * I), *d_db = device_copy(gpu, db, O);
  float *d_db2 = device_copy(gpu, db, O), *d_dinp = device_copy(gpu, junk, M * I);
  float *d_out = device_copy(gpu, junk_out, M * O);

  vt_linear_fwd(gpu, d_out, d_inp, d_w, s.bias ? d_b : NULL, M, I, O);
  vt_linear_bwd(cpu, s.dinp ? dinp_c : NULL, dw, s.dbias ? db : NULL, dout, inp, w, M, I, O);
  vt_linear_bwd(gpu, s.dinp ? d_dinp : NULL, d_dw, s.dbias ? d_db : NULL, d_dout, d_inp, d_w, M,
                I, O);

  int fail = 0;
  fail |= compare(gpu, "out", d_out, out_c, M * O) > TOL;
  if (s.dinp) fail |= compare(gpu, "dinp", d_dinp, dinp_c, M * I) > TOL;
  fail |= compare(gpu, "dweight", d_dw, dw, O * I) > TOL;
  // Without dbias, d_db must be untouched (db was not changed on the CPU side either).
  fail |= compare(gpu, "dbias", d_db, db, O) > TOL;
  if (s.dbias) {
    // The column sum promises the same bits on every run: repeat into a second buffer.
    float *a = malloc((size_t)O * sizeof(float)), *c = malloc((size_t)O * sizeof(float));
    vt_linear_bwd(gpu, NULL, d_dw, d_db2, d_dout, d_inp, d_w, M, I, O);
    gpu->to_host(a, d_db, (size_t)O * sizeof(float));
    gpu->to_host(c, d_db2, (size_t)O * sizeof(float));
    int same = memcmp(a, c, (size_t)O * sizeof(float)) == 0;
    printf("    dbias repeat bitwise identical: %s\n", same ? "ok" : "FAIL");
    fail |= !same;
    free(a), free(c);
  }

  float *dev[] = {d_inp, d_w, d_b, d_dout, d_dw, d_db, d_db2, d_dinp, d_out};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu->free(dev[i]);
  free(inp), free(w), free(b), free(dout), free(dw), free(db), free(junk), free(junk_out),
      free(out_c),
      free(dinp_c);
  return fail;
}

int main(void) {
  const char *why = NULL;
  const vt_backend *gpu = vt_backend_get(VT_DEVICE_CUDA, &why);
  if (!gpu) {
    printf("SKIP: %s\n", why ? why : "no CUDA backend");
    return 77;
  }
  const vt_backend *cpu = vt_backend_get(VT_DEVICE_CPU, NULL);
  printf("test_cuda_linear: %s vs %s, normwise relative tolerance %.0e\n", gpu->name, cpu->name,
         TOL);
  int fail = 0;
  for (size_t i = 0; i < sizeof kShapes / sizeof kShapes[0]; i++)
    fail |= run_shape(cpu, gpu, kShapes[i]);
  printf("%s\n", fail ? "FAIL" : "PASS");
  return fail ? 1 : 0;
}
