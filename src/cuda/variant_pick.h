// variant_pick.h: which of an op's kernel variants, timed at its first call, to keep (plain C, no
// CUDA, so that test_unit checks it). The variants are meant to give the same bits, so that the
// pick, made by timing, changes only the time; where a GPU's arithmetic makes one differ from the
// first candidate, only those that agree with the first may be kept, so that runs and ranks
// still agree to the last bit whatever their timings.
#ifndef VT_VARIANT_PICK_H
#define VT_VARIANT_PICK_H

#include <stdint.h>

// n candidates, bits[i] a hash of candidate i's outputs and ms[i] its time: the fastest of those
// whose hash is the first's (the first where none is faster); *all_agree is whether all agree.
static inline int vt_variant_pick(int n, const uint64_t *bits, const float *ms, int *all_agree) {
  int best = 0;
  *all_agree = 1;
  for (int i = 1; i < n; i++) {
    if (bits[i] != bits[0])
      *all_agree = 0;
    else if (ms[i] < ms[best])
      best = i;
  }
  return best;
}

#endif
