// mix.c: Mixup and CutMix of pairs of the training stream (mix.h).
#include "mix.h"

#include <math.h>
#include <string.h>

#include "vt_error.h"
#include "vt_rng.h"

typedef struct {
  uint64_t seed, base;  // base = 64 * pair: the pair's counters
  uint32_t stream;
  int next;             // draws so far, at most 64 per stream
} pair_rng;

static double uniform(pair_rng *r, int j) {
  return vt_rng_uniform(r->seed, r->stream, 0, r->base + (uint64_t)j);
}

// Gamma(a) by Marsaglia and Tsang (2000); shape a < 1 as Gamma(a + 1) U^(1/a). Each try takes
// one normal and one uniform; the counters run out only after 60 rejections (probability far
// below 1e-30 for any a), and then the mean is returned.
static double gamma_draw(pair_rng *r, double a) {
  double boost = 1.0;
  if (a < 1.0) {
    boost = pow(uniform(r, 4 + r->next++) + 0x1p-25, 1.0 / a);  // never 0
    a += 1.0;
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  while (r->next < 60) {
    const int j = 4 + r->next++;
    const double x = vt_rng_normal(r->seed, r->stream, 1, r->base + (uint64_t)j);
    const double v = (1.0 + c * x) * (1.0 + c * x) * (1.0 + c * x);
    if (v <= 0.0) continue;
    const double u = uniform(r, j) + 0x1p-25;
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v * boost;
  }
  return a * boost;
}

static double beta_draw(pair_rng *r, double a) {
  const double x = gamma_draw(r, a), y = gamma_draw(r, a);
  return x + y > 0.0 ? x / (x + y) : 0.5;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

void vt_mix_pair_params(const vt_mix_config *c, uint64_t seed, int64_t pair, int S,
                        vt_mix_pair *out) {
  memset(out, 0, sizeof *out);
  out->lam = 1.0f;
  if (!vt_mix_enabled(c)) return;
  pair_rng r = {seed, 64 * (uint64_t)pair, vt_hash_name("mix"), 0};
  if (uniform(&r, 0) >= c->prob) return;  // this pair stays as it is
  int cutmix = c->cutmix_alpha > 0;
  if (c->cutmix_alpha > 0 && c->mixup_alpha > 0) cutmix = uniform(&r, 1) < c->switch_prob;
  const double lam = beta_draw(&r, cutmix ? c->cutmix_alpha : c->mixup_alpha);
  if (!cutmix) {
    out->lam = (float)lam;
    return;
  }
  const int cut = (int)(S * sqrt(1.0 - lam));
  const int cy = (int)(uniform(&r, 2) * S), cx = (int)(uniform(&r, 3) * S);
  out->cutmix = 1;
  out->y0 = clampi(cy - cut / 2, 0, S), out->y1 = clampi(cy + cut / 2, 0, S);
  out->x0 = clampi(cx - cut / 2, 0, S), out->x1 = clampi(cx + cut / 2, 0, S);
  out->lam = (float)(1.0 - (double)(out->y1 - out->y0) * (out->x1 - out->x0) / ((double)S * S));
}

// One pair of images (3, S, S) each, mixed in place with each other.
static void mix_images(float *a, float *b, int S, const vt_mix_pair *p) {
  const int64_t n = 3 * (int64_t)S * S;
  if (p->cutmix) {
    for (int ch = 0; ch < 3; ch++)
      for (int y = p->y0; y < p->y1; y++) {
        float *ra = a + ((int64_t)ch * S + y) * S, *rb = b + ((int64_t)ch * S + y) * S;
        for (int x = p->x0; x < p->x1; x++) {
          const float t = ra[x];
          ra[x] = rb[x], rb[x] = t;
        }
      }
    return;
  }
  const float lam = p->lam, rest = 1.0f - p->lam;
  for (int64_t i = 0; i < n; i++) {
    const float va = a[i], vb = b[i];
    a[i] = va * lam + vb * rest;
    b[i] = vb * lam + va * rest;
  }
}

void vt_mix_batch(const vt_mix_config *c, uint64_t seed, int64_t first, int B, int S,
                  float *images, const int32_t *labels, vt_mix_target *mix) {
  VT_CHECK(first % 2 == 0 && B % 2 == 0,
           "mixing pairs needs micro-batches of an even size at even positions (first %lld, "
           "B %d)", (long long)first, B);
  const int64_t n = 3 * (int64_t)S * S;
#pragma omp parallel for schedule(static) if (images != NULL && B > 2)
  for (int i = 0; i < B; i += 2) {
    vt_mix_pair p;
    vt_mix_pair_params(c, seed, (first + i) / 2, S, &p);
    if (images && p.lam < 1.0f) mix_images(images + i * n, images + (i + 1) * n, S, &p);
    if (mix) {
      mix[i] = (vt_mix_target){.partner = labels[i + 1], .lam = p.lam};
      mix[i + 1] = (vt_mix_target){.partner = labels[i], .lam = p.lam};
    }
  }
}
