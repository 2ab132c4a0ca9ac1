// sampler.c: the per-epoch sampler of the determinism contract (dataset.h: the sample stream is
// the concatenation of per-epoch permutations keyed by (seed, epoch), with repeated
// augmentation's windows). Must not depend on MPI, a backend, the model or an image decoder.
#include <stdlib.h>

#include "dataset.h"
#include "vt_rng.h"

// Draw k of the stream (seed, "sampler", epoch). Draws are consumed in a fixed order, so the
// variable number that rejection takes is itself deterministic.
typedef struct {
  uint64_t seed;
  uint32_t stream;
  uint32_t epoch;
  uint64_t k;
} draw_state;

static uint32_t draw(draw_state *d) { return vt_rng_u32(d->seed, d->stream, d->epoch, d->k++); }

// Uniform in [0, bound) without modulo bias: Lemire's multiply-shift with rejection of the
// few products that would over-represent some values; 64-bit rejection for huge bounds.
static uint64_t uniform_below(draw_state *d, uint64_t bound) {
  if (bound <= UINT32_MAX) {
    uint32_t b = (uint32_t)bound;
    uint64_t m = (uint64_t)draw(d) * b;
    if ((uint32_t)m < b) {
      uint32_t threshold = (uint32_t)(-b) % b;
      while ((uint32_t)m < threshold) m = (uint64_t)draw(d) * b;
    }
    return m >> 32;
  }
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound, x;
  do x = ((uint64_t)draw(d) << 32) | draw(d);
  while (x >= limit);
  return x % bound;
}

void vt_sampler_init(vt_sampler *s, uint64_t seed, int64_t n, int repeats, int64_t len) {
  VT_CHECK(n > 0, "sampler over an empty dataset (n = %lld)", (long long)n);
  VT_CHECK(repeats >= 1, "sampler with %d repeats", repeats);
  VT_CHECK(len >= 0 && len <= n, "sampler epochs of %lld of %lld positions", (long long)len,
           (long long)n);
  s->seed = seed;
  s->n = n;
  s->len = len > 0 ? len : n;
  s->repeats = repeats;
  s->epoch = -1;
  s->perm = malloc((size_t)n * sizeof(int64_t));
  VT_CHECK(s->perm, "out of memory for a %lld-sample permutation", (long long)n);
}

void vt_sampler_free(vt_sampler *s) {
  free(s->perm);
  s->perm = NULL;
  s->n = 0;
  s->epoch = -1;
}

// Where position q of an epoch reads perm, and which copy it is (dataset.h's windows).
static int64_t slot_of(const vt_sampler *s, int64_t q, int64_t *copy) {
  const int64_t R = s->repeats, L = VT_REPEAT_WINDOW, W = R * L;
  const int64_t w = q / W, r = q % W, len = s->n - w * W < W ? s->n - w * W : W;
  const int64_t held = len == W ? L : (len + R - 1) / R;  // samples in this window
  *copy = r / held;
  return w * L + r % held;
}

int64_t vt_sampler_at(vt_sampler *s, int64_t position, int64_t *epoch) {
  VT_CHECK(position >= 0 && s->perm, "sampler position %lld", (long long)position);
  int64_t e = position / s->len;
  if (e != s->epoch) {
    // Fisher-Yates (Durstenfeld): perm is uniform over all n! orders given unbiased draws.
    draw_state d = {s->seed, vt_hash_name("sampler"), (uint32_t)e, 0};
    for (int64_t i = 0; i < s->n; i++) s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
      int64_t j = (int64_t)uniform_below(&d, (uint64_t)i + 1);
      int64_t t = s->perm[i];
      s->perm[i] = s->perm[j];
      s->perm[j] = t;
    }
    s->epoch = e;
  }
  if (epoch) *epoch = e;
  int64_t copy;
  return s->perm[slot_of(s, position % s->len, &copy)];
}

int64_t vt_sampler_key(const vt_sampler *s, int64_t position, int64_t index) {
  int64_t copy;
  slot_of(s, position % s->len, &copy);
  return index * s->repeats + copy;
}
