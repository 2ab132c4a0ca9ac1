// mma.h of the CPU emulation (tests/cuda_emu/emu.cpp): the warp matrix functions (nvcuda::wmma)
// that src/cuda uses, for 16x16x16 tiles of bf16 operands with fp32 accumulators.
// A fragment here holds the whole tile in every lane; a lane computes and stores only the
// accumulator elements it owns (element e belongs to lane e % 32), as a real lane owns 8, so a
// kernel that reads a stored tile before __syncwarp() sees other lanes' elements missing (the
// emulator runs lanes in a random order between barriers). mma_sync is a warp barrier, so a warp
// that diverges at it aborts. Products are exact (bf16 x bf16 fits in fp32) and summed in fp32
// in k order onto the accumulator; real tensor cores sum in their own order.
#pragma once
#include <type_traits>

#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static const int num_elements = 256;
  float x[256];  // element (r, c) at x[r * 16 + c], widened to fp32 (exactly, for bf16)
};

static inline float emu_widen(float v) { return v; }
static inline float emu_widen(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline bool owns(int e) { return e % 32 == vt_emu::lane_of(); }
// What the CUDA programming guide requires of a load or store: a 256-bit aligned pointer and a
// leading dimension that is a multiple of 16 bytes. A GPU faults or misreads otherwise.
template <class T>
void check_operand(const T *p, unsigned ldm) {
  if ((uintptr_t)p % 32 || (ldm * sizeof(T)) % 16) {
    fprintf(stderr, "emu: WMMA operand %p with ldm %u is not 32-byte aligned or ldm is not a "
            "multiple of 16 bytes\n", (const void *)p, ldm);
    abort();
  }
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
  check_operand(p, ldm);
  const bool row = std::is_same<Layout, row_major>::value;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) f.x[r * 16 + c] = emu_widen(row ? p[r * ldm + c] : p[c * ldm + r]);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t l) {
  check_operand(p, ldm);
  for (int e = 0; e < 256; e++) {
    const int r = e / 16, c = e % 16;
    if (owns(e)) f.x[e] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t l) {
  check_operand(p, ldm);
  for (int e = 0; e < 256; e++) {
    const int r = e / 16, c = e % 16;
    if (owns(e)) (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}
template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float v) {
  for (int e = 0; e < 256; e++) f.x[e] = v;
}
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  vt_emu::sync_warp(vt_emu::WARP_WMMA);
  for (int e = 0; e < 256; e++) {
    if (!owns(e)) continue;
    const int r = e / 16, n = e % 16;
    float s = c.x[e];
    for (int k = 0; k < 16; k++) s += a.x[r * 16 + k] * b.x[k * 16 + n];
    d.x[e] = s;
  }
}
}  // namespace wmma
}  // namespace nvcuda
