// attention_mma.cuh: the pieces of attention_mma.cu's kernels (private to it): the streamed
// tiles' cp.async copies, operand fragments by ldmatrix, tile products on register fragments
// (vt_mma16816) and a score's dropout. attention_mma.cu's opening comment says how the kernels
// use them. C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#ifndef VT_ATTENTION_MMA_CUH
#define VT_ATTENTION_MMA_CUH

#include "attention_tiles.cuh"

#define MMA_NB (FA_TILE / 8)  // 8-column blocks of a 64-wide score tile

// Issues the copies of rows r0 .. r0+R-1 of an (N, D) bf16 matrix at src (row stride ld; src, D
// and ld in whole 16-byte chunks) into an (R, Dp) tile at dst (row stride Dp + 8), zeros past row
// N and column D. By the whole block of 32 W threads; they land at the wait for their group.
template <int NK, int W, int R = FA_TILE>
static __device__ __forceinline__ void tile_async(bf16_t *dst, const bf16_t *src, int64_t ld,
                                                  int r0, int N, int D) {
  const int cpr = 2 * NK;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < R * cpr; i += 32 * W) {
    const int r = i / cpr, c = 8 * (i - r * cpr);
    const bool in = r0 + r < N && c < D;
    vt_cp_async16(dst + r * (16 * NK + 8) + c, in ? src + (int64_t)(r0 + r) * ld + c : src, in);
  }
}

// Issues the copies of entries r0 .. r0+63 of a length-N fp32 row (lse, delta) into dst, zeros
// past N; 4 bytes each (the rows of (B H, N) are not 16-byte aligned).
template <int W>
static __device__ __forceinline__ void row_async(float *dst, const float *src, int r0, int N) {
  for (int i = threadIdx.x; i < FA_TILE; i += 32 * W)
    vt_cp_async4(dst + i, r0 + i < N ? src + r0 + i : src, r0 + i < N);
}

// A fragment: rows 0..15, columns 0..15 of a row-major bf16 tile at p (ld elements).
static __device__ __forceinline__ void frag_a(unsigned a[4], const bf16_t *p, int ld) {
  const int lane = threadIdx.x & 31;
  vt_ldsm_x4(a, p + ((lane & 7) + 8 * (lane >> 3 & 1)) * ld + 8 * (lane >> 4));
}

// B fragments (16 k x 8 n) of n-blocks 0 and 1 (b[0..1], b[2..3]) from a tile holding B as 16
// rows of 16 (rows n, columns k; ld): the scores' keys (or queries) against the rows' heads.
static __device__ __forceinline__ void frag_b2(unsigned b[4], const bf16_t *p, int ld) {
  const int lane = threadIdx.x & 31;
  vt_ldsm_x4(b, p + ((lane & 7) + 8 * (lane >> 4)) * ld + 8 * (lane >> 3 & 1));
}

// The same from a tile holding B itself (rows k, columns n; ld): a product along the tile's rows.
static __device__ __forceinline__ void frag_b2_trans(unsigned b[4], const bf16_t *p, int ld) {
  const int lane = threadIdx.x & 31;
  vt_ldsm_x4_trans(b, p + ((lane & 7) + 8 * (lane >> 3 & 1)) * ld + 8 * (lane >> 4));
}

// The A fragment (rows 0..15, columns 0..15) of A^T's tile: rows 0..15 (A's columns), columns
// 0..15 (A's rows) of a row-major bf16 tile at p (ld elements).
static __device__ __forceinline__ void frag_a_trans(unsigned a[4], const bf16_t *p, int ld) {
  const int lane = threadIdx.x & 31;
  vt_ldsm_x4_trans(a, p + ((lane & 7) + 8 * (lane >> 4)) * ld + 8 * (lane >> 3 & 1));
}

// s (16 x 64, the lane's share) = a (16 x 16 NK, fragments in registers) b^T, b the first ncols
// rows (a multiple of 16) of a row-major operand tile; blocks past ncols are zero.
template <int NK>
static __device__ __forceinline__ void mma_scores(float s[MMA_NB][4], const unsigned a[NK][4],
                                                  const bf16_t *bm, int ncols) {
  const int ld = 16 * NK + 8;
#pragma unroll
  for (int jp = 0; jp < MMA_NB / 2; jp++) {
#pragma unroll
    for (int i = 0; i < 4; i++) s[2 * jp][i] = s[2 * jp + 1][i] = 0.0f;
    if (16 * jp < ncols)
#pragma unroll
      for (int kk = 0; kk < NK; kk++) {
        unsigned b[4];
        frag_b2(b, bm + 16 * jp * ld + 16 * kk, ld);
        vt_mma16816(s[2 * jp], a[kk], b);
        vt_mma16816(s[2 * jp + 1], a[kk], b + 2);
      }
  }
}

// The A fragment of a k16 step from the lane's share of its two 8-column blocks of a score tile
// (x[jj][i]: block jj, row g + 8 (i >> 1), column 2t + (i & 1)), rounded to bf16.
static __device__ __forceinline__ void pack_a(unsigned a[4], const float x[2][4]) {
  a[0] = vt_pack_bf16x2(x[0][0], x[0][1]), a[1] = vt_pack_bf16x2(x[0][2], x[0][3]);
  a[2] = vt_pack_bf16x2(x[1][0], x[1][1]), a[3] = vt_pack_bf16x2(x[1][2], x[1][3]);
}

// acc (16 x 16 NK, the lane's share) += p (16 x 16, the A fragment of k16 step kk: pa) b, b the
// rows 16 kk .. 16 kk + 15 of a row-major operand tile (64, Dp).
template <int NK>
static __device__ __forceinline__ void mma_accumulate(float acc[2 * NK][4], const unsigned pa[4],
                                                      const bf16_t *bt, int kk) {
  const int ld = 16 * NK + 8;
#pragma unroll
  for (int jp = 0; jp < NK; jp++) {
    unsigned b[4];
    frag_b2_trans(b, bt + 16 * kk * ld + 16 * jp, ld);
    vt_mma16816(acc[2 * jp], pa, b);
    vt_mma16816(acc[2 * jp + 1], pa, b + 2);
  }
}

// Whether element n of the mask is kept, and a value through it: fl(v * scale) if so, else 0.
static __device__ __forceinline__ bool drop_kept(const vt_dropout_mask &m, uint32_t stream,
                                                 uint64_t n) {
  return vt_rng_uniform_inline(m.seed, stream, m.site, n) >= m.p;
}
static __device__ __forceinline__ float drop_by(const vt_dropout_mask &m, bool kept, float v) {
  return kept ? __fmul_rn(v, m.scale) : 0.0f;
}
static __device__ __forceinline__ float drop_one(const vt_dropout_mask &m, uint32_t stream,
                                                 uint64_t n, float p) {
  return drop_by(m, drop_kept(m, stream, n), p);
}

#endif
