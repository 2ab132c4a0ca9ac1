// cuda_bf16.h of the CPU emulation: the bf16 type and the two conversions src/cuda uses
// (round to nearest even, NaN kept quiet).
#pragma once
#include "cuda_runtime.h"

struct __nv_bfloat16 {
  unsigned short x;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  __nv_bfloat16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = (unsigned short)((u >> 16) | 0x40);
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.x = (unsigned short)(u >> 16);
  return r;
}
static inline float __bfloat162float(__nv_bfloat16 b) {
  const unsigned u = (unsigned)b.x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
