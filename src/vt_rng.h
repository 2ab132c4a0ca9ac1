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
