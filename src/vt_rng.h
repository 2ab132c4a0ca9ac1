// vt_rng.h: a counter-based random number generator (Philox4x32-10). The numbers depend only on
// (key, counter), never on which rank, thread or backend asks, which is what the determinism
// contract of design.md needs: weights keyed by (seed, parameter, element), augmentation by
// (seed, epoch, sample). Must not depend on anything but libc.
#ifndef VT_RNG_H
#define VT_RNG_H

#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint32_t v[4];
} vt_philox_ctr;

// The Philox round function and the uniform float as inline functions that CUDA kernels can call
// too (dropout's masks are drawn per element on the device): the same bits on every backend.
#ifdef __CUDACC__
#define VT_RNG_INLINE static inline __host__ __device__
#else
#define VT_RNG_INLINE static inline
#endif

VT_RNG_INLINE vt_philox_ctr vt_philox4x32_inline(vt_philox_ctr c, uint64_t key) {
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c.v[0], p1 = (uint64_t)0xCD9E8D57u * c.v[2];
    vt_philox_ctr n = {{(uint32_t)(p1 >> 32) ^ c.v[1] ^ k0, (uint32_t)p1,
                        (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1, (uint32_t)p0}};
    c = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Block blk of stream (key, stream_hi, stream_lo): the rounds at counter (blk, stream_lo,
// stream_hi) (vt_rng_block).
VT_RNG_INLINE vt_philox_ctr vt_rng_block_inline(uint64_t key, uint32_t stream_hi,
                                                uint32_t stream_lo, uint64_t blk) {
  const vt_philox_ctr c = {{(uint32_t)blk, (uint32_t)(blk >> 32), stream_lo, stream_hi}};
  return vt_philox4x32_inline(c, key);
}

// Number k (0..3) of a block, by selects rather than an index: on a GPU, c.v[k] with k known only
// at run time puts c in local memory (ptxas -warn-lmem-usage), a load and store per number.
VT_RNG_INLINE uint32_t vt_philox_lane(vt_philox_ctr c, uint64_t k) {
  k &= 3;
  return k == 0 ? c.v[0] : k == 1 ? c.v[1] : k == 2 ? c.v[2] : c.v[3];
}

// A 32-bit number's top 24 bits over 2^24: every float in [0, 1) with spacing 2^-24, never 1.0.
VT_RNG_INLINE float vt_rng_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

// Number i of stream (key, stream_hi, stream_lo) as vt_rng_uniform gives it: lane i % 4 of
// block i / 4, as a uniform in [0, 1).
VT_RNG_INLINE float vt_rng_uniform_inline(uint64_t key, uint32_t stream_hi, uint32_t stream_lo,
                                          uint64_t i) {
  return vt_rng_unit(vt_philox_lane(vt_rng_block_inline(key, stream_hi, stream_lo, i >> 2), i));
}

// The Philox4x32-10 block function: four 32-bit outputs for a 128-bit counter and 64-bit key.
vt_philox_ctr vt_philox4x32(vt_philox_ctr ctr, uint64_t key);

// Block blk of stream (key, stream_hi, stream_lo): the four 32-bit numbers 4 blk .. 4 blk + 3
// that vt_rng_u32 hands out one at a time.
vt_philox_ctr vt_rng_block(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t blk);

// A stable 32-bit name hash (FNV-1a), used to key streams by parameter name.
uint32_t vt_hash_name(const char *name);

// The i-th uniform float in [0, 1) of stream (key, stream_hi, stream_lo). Four consecutive i
// share one Philox call; calling it per element is simple and cheap enough for init and data.
float vt_rng_uniform(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t i);

// The i-th standard normal of a stream (Box-Muller on two uniforms of the same block).
float vt_rng_normal(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t i);

// A uniform 32-bit integer, for labels and permutations.
uint32_t vt_rng_u32(uint64_t key, uint32_t stream_hi, uint32_t stream_lo, uint64_t i);

#ifdef __cplusplus
}
#endif

#endif
