// rng.c: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// written from the paper's constants (the rounds are vt_rng.h's inline functions, which CUDA
// kernels share).
#include "vt_rng.h"

#include <math.h>

vt_philox_ctr vt_philox4x32(vt_philox_ctr c, uint64_t key) {
  return vt_philox4x32_inline(c, key);
}

uint32_t vt_hash_name(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return h;
}

vt_philox_ctr vt_rng_block(uint64_t key, uint32_t hi, uint32_t lo, uint64_t blk) {
  return vt_rng_block_inline(key, hi, lo, blk);
}

uint32_t vt_rng_u32(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t i) {
  return vt_rng_block(key, stream_hi, stream_lo, i >> 2).v[i & 3];
}

float vt_rng_uniform(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t i) {
  return vt_rng_uniform_inline(key, stream_hi, stream_lo, i);
}

float vt_rng_normal(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t i) {
  // Element i uses the block of pair i/2: cosine for even i, sine for odd i.
  vt_philox_ctr r = vt_rng_block(key, stream_hi, stream_lo, i >> 1);
  int second = (int)(i & 1);
  double u1 = ((double)(r.v[0] >> 8) + 0.5) / 16777216.0;  // in (0, 1): log is finite
  double u2 = (double)(r.v[1] >> 8) / 16777216.0;
  double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
  return (float)(second ? rad * sin(ang) : rad * cos(ang));
}
