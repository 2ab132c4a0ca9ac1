// attention.cu: softmax(q k^T / sqrt(D)) v per (batch, head) on CUDA, forward and backward, as
// fused (flash) kernels that never store the (N, N) scores or probabilities: twin of
// src/cpu/attention.c, with vt_ops.h's contract (the forward saves the row log-denominators lse,
// the backward recomputes p = exp(s - lse) tile by tile). Tiles of 64 queries x 64 keys in
// shared memory; each of a block's 4 warps owns 16 of its 64 rows. The tile products are
// warp-level: tensor cores (WMMA, 16x16x16, bf16 operands, fp32 accumulators) in bf16
// precision, plain fp32 FMAs in fp32 precision; both read the same shared-memory tiles, so one
// kernel body serves both (in bf16 the output accumulators stay in registers, warp_acc).
// Deterministic: no atomics; the backward runs one kernel for dq (per query tile, over the key
// tiles) and one for dk and dv (per key tile, over the query tiles),
// which also make the qkv bias gradient's per-tile column sums (summed in order afterwards).
// The mma.sync backward may instead keep the score gradients dS (bf16, O(N^2) per head, in op
// scratch) from its dk/dv kernel for its dq kernel, where that is faster (variant_for).
// The WMMA forward makes two passes over the keys (the row maxima m, then e = exp(s - m), its
// row sums and e v), the mma.sync one a single pass with running maxima; m being the maximum
// rounded up to a whole power of two of e's scale (vt_ops.h), e is rounded at the CPU twin's
// point whatever the tiles either way, and there is one exponential per score.
// Dropout of the probabilities (timm's attn_drop) draws its mask from Philox numbers in each
// kernel (one call per 4 numbers along a row, per number along a column in the dk/dv kernel);
// nothing is stored. Reads the heads straight out of the timm qkv layout. In bf16 with D <= 80
// (a multiple of 8) the same work runs on mma.sync kernels whose scores stay in registers and
// whose tiles stream in by cp.async, double-buffered (their section below).
// At the end the one-query form of MAP pooling (latent_attention). C-style CUDA, no STL. Must
// not depend on MPI, NCCL or the model.
#include <limits.h>
#include <math.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colsum.cuh"
#include "cuda_common.h"
#include "cuda_ops.h"
#include "vt_rng.h"

#define FA_TILE 64               // queries (or keys) per block and keys (or queries) per step
#define FA_WARPS (FA_TILE / 16)  // one warp per 16 rows of a tile
#define FA_THREADS (32 * FA_WARPS)
#define MMA_LOG2E 1.4426950408889634f
#define MMA_LN2 0.69314718055994531f

// 64-row tiles of N: also the qkv bias gradient's partials per image (store_rows).
static __host__ __device__ __forceinline__ int fa_tiles(int N) {
  return (N + FA_TILE - 1) / FA_TILE;
}

// ---- element types: fp32, or bf16 as stored by bf16 precision ----------------------------------

static __device__ __forceinline__ float widen(float v) { return v; }
static __device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
static __device__ __forceinline__ T narrow(float v);
template <>
__device__ __forceinline__ float narrow<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ---- warp tile products ------------------------------------------------------------------------
// A warp makes 16 rows of a tile product from operands in shared memory; the caller syncs the
// warp before and after (other lanes' elements). Where a tile runs past N (the last of N = 197's
// four tiles holds 5 rows), only its first ncols columns of scores (kn rounded up to 16) are
// made and only its first kk rows of the second operand are summed over: the rest would add
// products of zero probabilities and zero padding, which leave the sums' bits as they are.

// fp32: c (16 x 16, row-major, ldc) = [c +] a (16 x K, row-major, lda) b (K x 16), b row-major
// (ldb) or, with BT, given as its transpose (rows of bm are b's columns). Plain FMAs.
template <bool BT>
static __device__ __forceinline__ void warp_mma(float *c, int ldc, const float *a, int lda,
                                                const float *bm, int ldb, int K, bool accumulate) {
  for (int e = threadIdx.x & 31; e < 256; e += 32) {  // 8 elements per lane
    const int r = e >> 4, n = e & 15;
    float s = accumulate ? c[r * ldc + n] : 0.0f;
    for (int k = 0; k < K; k++) s += a[r * lda + k] * (BT ? bm[n * ldb + k] : bm[k * ldb + n]);
    c[r * ldc + n] = s;
  }
}

// c (16 x ncols) = a (16 x K) b^T, b given as ncols rows of K (bm row-major, ldb): 16 rows of
// scores, ncols a multiple of 16 up to 64. In bf16 on WMMA (16x16x16, fp32 accumulators), the
// 16-column fragments made together, so each 16 x 16 piece of a is loaded once per k step; each
// fragment sums its k steps in order.
template <typename T>
static __device__ __forceinline__ void warp_scores(float *c, int ldc, const T *a, int lda,
                                                   const T *bm, int ldb, int K, int ncols) {
  for (int n = 0; n < ncols; n += 16)
    warp_mma<true>(c + n, ldc, a, lda, bm + n * ldb, ldb, K, false);
}
template <>
__device__ __forceinline__ void warp_scores<__nv_bfloat16>(float *c, int ldc,
                                                           const __nv_bfloat16 *a, int lda,
                                                           const __nv_bfloat16 *bm, int ldb,
                                                           int K, int ncols) {
  using namespace nvcuda;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FA_TILE / 16];
#pragma unroll
  for (int n = 0; n < FA_TILE / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int n = 0; n < FA_TILE / 16; n++)
      if (16 * n < ncols) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, bm + 16 * n * ldb + k, ldb);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      }
  }
#pragma unroll
  for (int n = 0; n < FA_TILE / 16; n++)
    if (16 * n < ncols) wmma::store_matrix_sync(c + 16 * n, acc[n], ldc, wmma::mem_row_major);
}

// A warp's (16, Dp) fp32 output accumulator (O, dQ, dK or dV) over a kernel's steps, each step
// adding a (16 x kk) b (kk x Dp, row-major), kk a multiple of 16 up to 64. fp32 precision: its
// rows in shared memory (rows, ldc). bf16: NF WMMA fragments of 16 columns (Dp <= 16 NF) that
// stay in registers for the whole loop, each 16 x 16 piece of a loaded once per k step for every
// fragment, and stored to rows at the end.
template <typename T, int NF>
struct warp_acc {
  float *c;
  int ldc, Dp;
  __device__ __forceinline__ void init(float *rows, int ld, int dp) {
    c = rows, ldc = ld, Dp = dp;
    for (int i = threadIdx.x & 31; i < 16 * Dp; i += 32) c[i / Dp * ldc + i % Dp] = 0.0f;
  }
  __device__ __forceinline__ void add(const T *a, int lda, const T *bm, int ldb, int kk) {
    for (int n = 0; n < Dp; n += 16) warp_mma<false>(c + n, ldc, a, lda, bm + n, ldb, kk, true);
  }
  __device__ __forceinline__ void store() const {}  // the rows hold it already
};
template <int NF>
struct warp_acc<__nv_bfloat16, NF> {
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f[NF];
  float *c;
  int ldc, Dp;
  __device__ __forceinline__ void init(float *rows, int ld, int dp) {
    c = rows, ldc = ld, Dp = dp;
#pragma unroll
    for (int n = 0; n < NF; n++) nvcuda::wmma::fill_fragment(f[n], 0.0f);
  }
  __device__ __forceinline__ void add(const __nv_bfloat16 *a, int lda, const __nv_bfloat16 *bm,
                                      int ldb, int kk) {
    using namespace nvcuda;
    for (int k = 0; k < kk; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
      for (int n = 0; n < NF; n++)
        if (16 * n < Dp) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
          wmma::load_matrix_sync(fb, bm + (int64_t)k * ldb + 16 * n, ldb);
          wmma::mma_sync(f[n], fa, fb, f[n]);
        }
    }
  }
  __device__ __forceinline__ void store() {
#pragma unroll
    for (int n = 0; n < NF; n++)
      if (16 * n < Dp)
        nvcuda::wmma::store_matrix_sync(c + 16 * n, f[n], ldc, nvcuda::wmma::mem_row_major);
  }
};

// ---- dropout of the probabilities -------------------------------------------------------------
// The mask's numbers (vt_ops.h): element (b, h, i, j) is first + (b * width + h) N^2 + i N + j of
// stream (seed, vt_hash_name("dropout"), site); dropped when its uniform is below p. A kernel
// gets the mask by value with p 0 when nothing drops.

static __device__ __forceinline__ uint64_t drop_base(const vt_dropout_mask &m, int b, int h,
                                                     int N) {
  return (uint64_t)(m.first + ((int64_t)b * m.width + h) * N * N);
}

static __device__ __forceinline__ uint32_t philox_lane(const vt_philox_ctr &c, uint64_t n) {
  const int k = (int)(n & 3);
  return k == 0 ? c.v[0] : k == 1 ? c.v[1] : k == 2 ? c.v[2] : c.v[3];
}

// Bit j: number n0 + j is kept, for j < 32; one Philox call per block of four numbers.
static __device__ __forceinline__ uint32_t drop_keep32(const vt_dropout_mask &m, uint32_t stream,
                                                       uint64_t n0) {
  uint32_t bits = 0;
  vt_philox_ctr c = vt_rng_block_inline(m.seed, stream, m.site, n0 >> 2);
#pragma unroll 1
  for (int j = 0; j < 32; j++) {
    const uint64_t n = n0 + (uint64_t)j;
    if (j > 0 && (n & 3) == 0) c = vt_rng_block_inline(m.seed, stream, m.site, n >> 2);
    if (vt_rng_unit(philox_lane(c, n)) >= m.p) bits |= 1u << j;
  }
  return bits;
}

// Bit j: number n0 + j * stride is kept (a column of the mask), for j < 32.
static __device__ __forceinline__ uint32_t drop_keep32_strided(const vt_dropout_mask &m,
                                                               uint32_t stream, uint64_t n0,
                                                               uint64_t stride) {
  uint32_t bits = 0;
#pragma unroll 1
  for (int j = 0; j < 32; j++)
    if (vt_rng_uniform_inline(m.seed, stream, m.site, n0 + (uint64_t)j * stride) >= m.p)
      bits |= 1u << j;
  return bits;
}

// A probability (or dP) through the mask: fl(v * scale) where kept, else 0.
static __device__ __forceinline__ float drop_apply(const vt_dropout_mask &m, uint32_t keep, int j,
                                                   float v) {
  return (keep >> j & 1u) ? __fmul_rn(v, m.scale) : 0.0f;
}

// ---- shared memory -----------------------------------------------------------------------------
// Every tile has 64 rows. A row of D values is padded with zeros to Dp (D rounded up to 16, the
// WMMA k step) and the leading dimensions add 16 bytes against bank conflicts, which keeps them
// multiples of 16 bytes and every 16-row or 16-column tile start 32-byte aligned, as WMMA needs.
typedef struct {
  int Dp;   // D rounded up to 16
  int ldt;  // (64, Dp) tiles of T: Q, K, V, dO
  int ldp;  // (64, 64) tiles of T: P, dS
  int lds;  // (64, 64) fp32 tiles: S, dP
  int ldo;  // (64, Dp) fp32 accumulators: O, dQ, dK, dV
} fa_dims;

static __host__ __device__ fa_dims fa_dims_of(int D, int esize) {
  fa_dims d;
  d.Dp = (D + 15) / 16 * 16;
  d.ldt = d.Dp + 16 / esize, d.ldp = FA_TILE + 16 / esize;
  d.lds = FA_TILE + 4, d.ldo = d.Dp + 4;
  return d;
}

// A kernel's shared memory: nt (64, Dp) tiles of T, ns (64, 64) fp32 tiles, np (64, 64) tiles of
// T, no (64, Dp) fp32 accumulators and nr rows of 64 floats, in that order, each region 128-byte
// aligned. fa_bytes sizes what fa_carve hands out, so the two cannot disagree.
typedef struct {
  int nt, ns, np, no, nr;
} fa_counts;
static __host__ __device__ fa_counts fa_counts_of(int nt, int ns, int np, int no, int nr) {
  fa_counts c = {nt, ns, np, no, nr};
  return c;
}
#define FA_FWD_SMEM fa_counts_of(3, 1, 1, 1, 0)  // Q K V; S; P; O
#define FA_DQ_SMEM fa_counts_of(4, 2, 1, 1, 2)   // Q dO K V; S dP; dS; dQ; lse delta
#define FA_DKV_SMEM fa_counts_of(4, 2, 0, 2, 2)  // K V Q dO; S^T dP^T (then P^T dS^T); dK dV; lse delta

static __host__ __device__ size_t fa_round(size_t n) { return (n + 127) / 128 * 128; }
static __host__ __device__ size_t fa_bytes(fa_dims d, int es, fa_counts c) {
  return c.nt * fa_round((size_t)FA_TILE * d.ldt * es) +
         c.ns * fa_round((size_t)FA_TILE * d.lds * 4) +
         c.np * fa_round((size_t)FA_TILE * d.ldp * es) +
         c.no * fa_round((size_t)FA_TILE * d.ldo * 4) + c.nr * fa_round((size_t)FA_TILE * 4);
}

template <typename T>
struct fa_smem {
  T *t[4];
  float *s[2];
  T *p[2];
  float *o[2], *r[2];
};

template <typename T>
static __device__ __forceinline__ fa_smem<T> fa_carve(unsigned char *base, fa_dims d, fa_counts c) {
  // Fully unrolled with constant indices, so the pointers stay in registers.
  fa_smem<T> m = {};
  const int es = sizeof(T);
#pragma unroll
  for (int i = 0; i < 4; i++)
    if (i < c.nt) m.t[i] = (T *)base, base += fa_round((size_t)FA_TILE * d.ldt * es);
#pragma unroll
  for (int i = 0; i < 2; i++)
    if (i < c.ns) m.s[i] = (float *)base, base += fa_round((size_t)FA_TILE * d.lds * 4);
#pragma unroll
  for (int i = 0; i < 2; i++)
    if (i < c.np) m.p[i] = (T *)base, base += fa_round((size_t)FA_TILE * d.ldp * es);
#pragma unroll
  for (int i = 0; i < 2; i++)
    if (i < c.no) m.o[i] = (float *)base, base += fa_round((size_t)FA_TILE * d.ldo * 4);
#pragma unroll
  for (int i = 0; i < 2; i++)
    if (i < c.nr) m.r[i] = (float *)base, base += fa_round((size_t)FA_TILE * 4);
  return m;
}

// Rows r0 .. r0+63 of an (N, D) matrix at src (row stride ld) into a (64, Dp) tile (row stride
// ldt), zero past row N and column D. By the whole block. Where D and ld are whole 16-byte chunks
// and src is 16-byte aligned (the heads of every timm width: D a multiple of 8), each thread
// moves 16-byte chunks and issues up to 8 loads before it stores any, so that a tile's loads are
// in flight together: one element per load, their L2 latencies came one after another, and that
// was most of the attention's time on an H200 (tests/gpu/run.sh's per-op times). The chunks land
// 16-byte aligned: tiles start 128-byte aligned and a row of ldt elements is a multiple of 16
// bytes (fa_dims_of).
template <typename T>
static __device__ __forceinline__ void load_tile(T *dst, int ldt, const T *src, int64_t ld, int r0,
                                                 int N, int D, int Dp) {
  const int E = 16 / (int)sizeof(T);  // elements per chunk; Dp, a multiple of 16, is whole chunks
  if (D % E == 0 && ld % E == 0 && ((uintptr_t)src & 15) == 0) {
    const int cpr = Dp / E, total = FA_TILE * cpr;
    for (int i0 = threadIdx.x; i0 < total; i0 += 8 * FA_THREADS) {
      uint4 v[8];
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int i = i0 + j * FA_THREADS, r = i / cpr, c = (i - r * cpr) * E;
        v[j] = make_uint4(0u, 0u, 0u, 0u);
        if (i < total && r0 + r < N && c < D)
          v[j] = *(const uint4 *)(src + (int64_t)(r0 + r) * ld + c);
      }
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int i = i0 + j * FA_THREADS, r = i / cpr, c = (i - r * cpr) * E;
        if (i < total) *(uint4 *)(dst + r * ldt + c) = v[j];
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < FA_TILE * Dp; i += FA_THREADS) {
    const int r = i / Dp, c = i - r * Dp;
    dst[r * ldt + c] = (r0 + r < N && c < D) ? src[(int64_t)(r0 + r) * ld + c] : narrow<T>(0.0f);
  }
}

// delta_i = sum_d dout_id out_id for the warp's 16 rows of the dout and out tiles in shared
// memory (row stride ldt; one warp sum each, in lane order), into sD and delta (for the dk/dv
// kernel), and the rows' lse into sL; rows past N get zeros. By every warp for its rows.
template <typename T>
static __device__ __forceinline__ void rows_delta(float *sD, float *sL, float *delta,
                                                  const T *sdO, const T *sOut, int ldt,
                                                  const float *lse, int bh, int q0, int N,
                                                  int D) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = 0; r < 16; r++) {
    const int q = q0 + 16 * w + r;
    const T *dy = sdO + (16 * w + r) * ldt, *o = sOut + (16 * w + r) * ldt;
    float s = 0.0f;
    if (q < N)
      for (int c = lane; c < D; c += 32) s += widen(dy[c]) * widen(o[c]);
    s = vt_warp_sum(s);
    if (lane == 0) {
      sD[16 * w + r] = s, sL[16 * w + r] = q < N ? lse[(int64_t)bh * N + q] : 0.0f;
      if (q < N) delta[(int64_t)bh * N + q] = s;
    }
  }
}

// The block's (ROWS, D) fp32 accumulator acc (rows r0.., ldo) times alpha into the rows of dst
// that start at element `at` (row stride ld; bf16 with bf16 set, vt_put: offsets in elements),
// rows < N only; with part set, also the column sums of those fp32 values over each 64 rows
// (FA_TILE) in row order, into part[g ld .. g ld + D) for the g-th 64 rows that start before N:
// the qkv bias gradient's partials, one per 64-row tile of N whatever the block's rows, so that
// 128-row blocks (variant_for) sum the bias gradient as 64-row ones do, bit for bit. By the
// whole block of THREADS threads.
template <int ROWS = FA_TILE, int THREADS = FA_THREADS>
static __device__ __forceinline__ void store_rows(float *dst, int64_t at, int64_t ld,
                                                  const float *acc, int ldo, float alpha, int r0,
                                                  int N, int D, int bf16, float *part) {
  static_assert(ROWS % FA_TILE == 0, "a block's rows are whole 64-row tiles");
  __syncthreads();  // every warp's rows of acc are final
  for (int i = threadIdx.x; i < ROWS * D; i += THREADS) {
    const int r = i / D, c = i - r * D;
    if (r0 + r < N) vt_put(dst, at + (int64_t)(r0 + r) * ld + c, alpha * acc[r * ldo + c], bf16);
  }
  if (!part) return;
#pragma unroll
  for (int g = 0; g < ROWS / FA_TILE; g++) {
    const int r1 = g * FA_TILE;
    if (r0 + r1 >= N) break;  // no tile of N here, no partial
    for (int c = threadIdx.x; c < D; c += THREADS) {
      float s = 0.0f;
      for (int r = r1; r < r1 + FA_TILE && r0 + r < N; r++) s += alpha * acc[r * ldo + c];
      part[(int64_t)g * ld + c] = s;
    }
  }
}

// ---- forward -----------------------------------------------------------------------------------
// Block (b*H + h, query tile). Each lane handles half of one row of the warp's 16: row
// 16w + lane/2, columns (lane & 1) * 32 .. +31 of each 64-key step. A warp whose rows are all
// past N only helps load the tiles (here and in the backward kernels).
template <typename T, int NF>
static __global__ void __launch_bounds__(FA_THREADS)
    flash_fwd_kernel(T *out, float *lse, const T *qkv, int N, int H, int D, float scale,
                     const vt_dropout_mask drop, uint32_t stream) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const fa_dims d = fa_dims_of(D, sizeof(T));
  const fa_smem<T> sm = fa_carve<T>(fa_shared, d, FA_FWD_SMEM);
  T *sQ = sm.t[0], *sK = sm.t[1], *sV = sm.t[2], *sP = sm.p[0];
  float *sS = sm.s[0], *sO = sm.o[0];
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, q0 = blockIdx.y * FA_TILE;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, c0 = (lane & 1) * 32;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const T *qb = qkv + (int64_t)b * N * ld + (int64_t)h * D, *kb = qb + C, *vb = qb + 2 * C;
  float *sSw = sS + 16 * w * d.lds, *sOw = sO + 16 * w * d.ldo;
  T *sPw = sP + 16 * w * d.ldp;
  const T *sQw = sQ + 16 * w * d.ldt;
  const bool live = q0 + 16 * w < N;
  load_tile(sQ, d.ldt, qb, ld, q0, N, D, d.Dp);
  // Pass 1: the maximum m of this lane's columns of scores.
  float m = -INFINITY;
  for (int k0 = 0; k0 < N; k0 += FA_TILE) {
    __syncthreads();  // everyone is done with the previous K tile (and sQ is loaded)
    load_tile(sK, d.ldt, kb, ld, k0, N, D, d.Dp);
    __syncthreads();
    const int kn = N - k0 < FA_TILE ? N - k0 : FA_TILE, kc = (kn + 15) & ~15;
    if (!live) continue;
    warp_scores(sSw, d.lds, sQw, d.ldt, sK, d.ldt, d.Dp, kc);
    __syncwarp();
    for (int c = c0; c < c0 + 32 && c < kn; c++) m = fmaxf(m, sSw[rr * d.lds + c] * scale);
    __syncwarp();  // the scores are read before the next step overwrites them
  }
  // The row's maximum from its two lanes' (one that saw no column, N <= 32, has -inf), rounded
  // up to a whole power of two of e's scale (vt_ops.h).
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = ceilf(m * MMA_LOG2E) * MMA_LN2;
  // Pass 2: O = sum over key tiles of e v, e = exp(s - m) (with dropout, d) as T (bf16: rounded,
  // the CPU's point), and this lane's share of the row's l = sum e.
  const int row = 16 * w + rr;
  const uint64_t nrow = drop.p > 0.0f ? drop_base(drop, b, h, N) + (uint64_t)(q0 + row) * N : 0;
  float l = 0.0f;
  warp_acc<T, NF> o;
  o.init(sOw, d.ldo, d.Dp);
  for (int k0 = 0; k0 < N; k0 += FA_TILE) {
    __syncthreads();
    load_tile(sK, d.ldt, kb, ld, k0, N, D, d.Dp);
    load_tile(sV, d.ldt, vb, ld, k0, N, D, d.Dp);
    __syncthreads();
    const int kn = N - k0 < FA_TILE ? N - k0 : FA_TILE, kc = (kn + 15) & ~15;
    if (!live) continue;
    warp_scores(sSw, d.lds, sQw, d.ldt, sK, d.ldt, d.Dp, kc);
    __syncwarp();
    const uint32_t keep =
        drop.p > 0.0f && c0 < kn ? drop_keep32(drop, stream, nrow + k0 + c0) : 0;
    for (int c = c0; c < c0 + 32 && c < kc; c++) {  // P's columns kn .. kc-1 are zeros
      float e = 0.0f;
      if (c < kn) {
        e = expf(sSw[rr * d.lds + c] * scale - m);
        l += e;
      }
      if (drop.p > 0.0f) e = drop_apply(drop, keep, c - c0, e);
      sPw[rr * d.ldp + c] = narrow<T>(e);
    }
    __syncwarp();
    o.add(sPw, d.ldp, sV, d.ldt, kc);
    __syncwarp();
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);  // the row's sum (the same bits on both lanes)
  if ((lane & 1) == 0 && q0 + row < N) lse[(int64_t)bh * N + q0 + row] = m + logf(l);
  const float inv = 1.0f / l;
  o.store();
  __syncwarp();
  for (int r = 0; r < 16; r++) {  // out = O / l, row r's 1 / l from its lanes
    const float ir = __shfl_sync(0xffffffffu, inv, 2 * r);
    if (q0 + 16 * w + r < N)
      for (int c = lane; c < D; c += 32)
        out[((int64_t)b * N + q0 + 16 * w + r) * C + (int64_t)h * D + c] =
            narrow<T>(sOw[r * d.ldo + c] * ir);
  }
}

// ---- backward: dq (and delta) ------------------------------------------------------------------
// Block (b*H + h, query tile): delta_i = sum_d dout_id out_id for its rows (also written to
// delta for the dk/dv kernel), then over the key tiles dS = p (dP - delta), dQ += dS K.
template <typename T, int NF>
static __global__ void __launch_bounds__(FA_THREADS)
    flash_dq_kernel(float *dqkv, float *part, float *delta, const T *dout, const T *qkv,
                    const T *out, const float *lse, int N, int H, int D, float scale,
                    const vt_dropout_mask drop, uint32_t stream) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const fa_dims d = fa_dims_of(D, sizeof(T));
  const fa_smem<T> sm = fa_carve<T>(fa_shared, d, FA_DQ_SMEM);
  T *sQ = sm.t[0], *sdO = sm.t[1], *sK = sm.t[2], *sV = sm.t[3], *sdS = sm.p[0];
  float *sS = sm.s[0], *sdP = sm.s[1], *sdQ = sm.o[0], *sL = sm.r[0], *sD = sm.r[1];
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, q0 = blockIdx.y * FA_TILE;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, c0 = (lane & 1) * 32;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const T *qb = qkv + (int64_t)b * N * ld + (int64_t)h * D, *kb = qb + C, *vb = qb + 2 * C;
  const int64_t at = (int64_t)b * N * C + (int64_t)h * D;  // this head's columns of out, dout
  load_tile(sQ, d.ldt, qb, ld, q0, N, D, d.Dp);
  load_tile(sdO, d.ldt, dout + at, C, q0, N, D, d.Dp);
  load_tile(sK, d.ldt, out + at, C, q0, N, D, d.Dp);  // out's rows, until the first K tile
  __syncthreads();
  rows_delta(sD, sL, delta, sdO, sK, d.ldt, lse, bh, q0, N, D);
  float *sSw = sS + 16 * w * d.lds, *sdPw = sdP + 16 * w * d.lds, *sdQw = sdQ + 16 * w * d.ldo;
  warp_acc<T, NF> acc_q;
  acc_q.init(sdQw, d.ldo, d.Dp);
  T *sdSw = sdS + 16 * w * d.ldp;
  const T *sQw = sQ + 16 * w * d.ldt, *sdOw = sdO + 16 * w * d.ldt;
  const bool live = q0 + 16 * w < N;
  for (int k0 = 0; k0 < N; k0 += FA_TILE) {
    __syncthreads();
    load_tile(sK, d.ldt, kb, ld, k0, N, D, d.Dp);
    load_tile(sV, d.ldt, vb, ld, k0, N, D, d.Dp);
    __syncthreads();  // also makes sL, sD and the first step's sQ, sdO visible
    const int kn = N - k0 < FA_TILE ? N - k0 : FA_TILE, kc = (kn + 15) & ~15;
    if (!live) continue;
    warp_scores(sSw, d.lds, sQw, d.ldt, sK, d.ldt, d.Dp, kc);    // s / scale
    warp_scores(sdPw, d.lds, sdOw, d.ldt, sV, d.ldt, d.Dp, kc);  // dP = dO V^T
    __syncwarp();
    const float L = sL[16 * w + rr], dl = sD[16 * w + rr];
    const uint64_t nrow = drop_base(drop, b, h, N) + (uint64_t)(q0 + 16 * w + rr) * N;
    const uint32_t keep =
        drop.p > 0.0f && c0 < kn ? drop_keep32(drop, stream, nrow + k0 + c0) : 0;
    for (int c = c0; c < c0 + 32 && c < kc; c++) {  // dS's columns kn .. kc-1 are zeros
      const float pij = c < kn ? expf(sSw[rr * d.lds + c] * scale - L) : 0.0f;
      float dp = sdPw[rr * d.lds + c];
      if (drop.p > 0.0f) dp = drop_apply(drop, keep, c - c0, dp);
      sdSw[rr * d.ldp + c] = narrow<T>(pij * (dp - dl));
    }
    __syncwarp();
    acc_q.add(sdSw, d.ldp, sK, d.ldt, kc);
    __syncwarp();
  }
  acc_q.store();
  const int64_t chunk = (int64_t)b * gridDim.y + blockIdx.y;  // this tile's bias partials
  store_rows(dqkv, (int64_t)b * N * ld + (int64_t)h * D, ld, sdQ, d.ldo, scale, q0, N, D,
             sizeof(T) == 2, part ? part + chunk * ld + (int64_t)h * D : NULL);
}

// ---- backward: dk, dv --------------------------------------------------------------------------
// Block (b*H + h, key tile); each warp owns 16 keys and makes the transposed tiles S^T, dP^T,
// P^T, dS^T for them (rows: its keys, columns: the step's 64 queries), so dV += P^T dO and
// dK += dS^T Q read them row-major. Lane: key row 16w + lane/2, query columns (lane & 1)*32..+31.
template <typename T, int NF>
static __global__ void __launch_bounds__(FA_THREADS)
    flash_dkv_kernel(float *dqkv, float *part, const T *dout, const T *qkv, const float *lse,
                     const float *delta, int N, int H, int D, float scale,
                     const vt_dropout_mask drop, uint32_t stream) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const fa_dims d = fa_dims_of(D, sizeof(T));
  const fa_smem<T> sm = fa_carve<T>(fa_shared, d, FA_DKV_SMEM);
  T *sK = sm.t[0], *sV = sm.t[1], *sQ = sm.t[2], *sdO = sm.t[3];
  float *sS = sm.s[0], *sdP = sm.s[1], *sdK = sm.o[0], *sdV = sm.o[1], *sL = sm.r[0], *sD = sm.r[1];
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, k0 = blockIdx.y * FA_TILE;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, c0 = (lane & 1) * 32;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const T *qb = qkv + (int64_t)b * N * ld + (int64_t)h * D, *kb = qb + C, *vb = qb + 2 * C;
  const T *dob = dout + (int64_t)b * N * C + (int64_t)h * D;
  load_tile(sK, d.ldt, kb, ld, k0, N, D, d.Dp);
  load_tile(sV, d.ldt, vb, ld, k0, N, D, d.Dp);
  float *sSw = sS + 16 * w * d.lds, *sdPw = sdP + 16 * w * d.lds;
  warp_acc<T, NF> acc_k, acc_v;
  acc_k.init(sdK + 16 * w * d.ldo, d.ldo, d.Dp);
  acc_v.init(sdV + 16 * w * d.ldo, d.ldo, d.Dp);
  // P^T and dS^T take the place of S^T and dP^T once these are read (16 rows of ldp T fit in 16
  // rows of lds floats): 18 KiB less shared memory, two blocks per SM instead of one at D=64.
  T *sPw = (T *)sSw, *sdSw = (T *)sdPw;
  const T *sKw = sK + 16 * w * d.ldt, *sVw = sV + 16 * w * d.ldt;
  const bool live = k0 + 16 * w < N;
  for (int q0 = 0; q0 < N; q0 += FA_TILE) {
    __syncthreads();
    load_tile(sQ, d.ldt, qb, ld, q0, N, D, d.Dp);
    load_tile(sdO, d.ldt, dob, C, q0, N, D, d.Dp);
    for (int i = threadIdx.x; i < FA_TILE; i += FA_THREADS) {
      const bool in = q0 + i < N;
      sL[i] = in ? lse[(int64_t)bh * N + q0 + i] : 0.0f;
      sD[i] = in ? delta[(int64_t)bh * N + q0 + i] : 0.0f;
    }
    __syncthreads();
    const int qn = N - q0 < FA_TILE ? N - q0 : FA_TILE, qc = (qn + 15) & ~15;
    if (!live) continue;
    warp_scores(sSw, d.lds, sKw, d.ldt, sQ, d.ldt, d.Dp, qc);    // S^T / scale
    warp_scores(sdPw, d.lds, sVw, d.ldt, sdO, d.ldt, d.Dp, qc);  // dP^T = V dO^T
    __syncwarp();
    // With dropout, this lane's key's column of the mask over its 32 queries.
    const uint64_t ncol = drop_base(drop, b, h, N) + (uint64_t)(q0 + c0) * N + k0 + 16 * w + rr;
    const uint32_t keep =
        drop.p > 0.0f && c0 < qn ? drop_keep32_strided(drop, stream, ncol, N) : 0;
    float pv[32], dv[32];  // this lane's half row, read in full before any lane overwrites
#pragma unroll
    for (int j = 0; j < 32; j++) {
      const int c = c0 + j;
      pv[j] = dv[j] = 0.0f;  // past qn (columns qc .. 63 were not made)
      if (c < qn) {
        pv[j] = expf(sSw[rr * d.lds + c] * scale - sL[c]);
        float dp = sdPw[rr * d.lds + c];
        if (drop.p > 0.0f) dp = drop_apply(drop, keep, j, dp);
        dv[j] = pv[j] * (dp - sD[c]);
        if (drop.p > 0.0f) pv[j] = drop_apply(drop, keep, j, pv[j]);
      }
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 32; j++)
      sPw[rr * d.ldp + c0 + j] = narrow<T>(pv[j]), sdSw[rr * d.ldp + c0 + j] = narrow<T>(dv[j]);
    __syncwarp();
    acc_v.add(sPw, d.ldp, sdO, d.ldt, qc);
    acc_k.add(sdSw, d.ldp, sQ, d.ldt, qc);
    __syncwarp();
  }
  acc_k.store();
  acc_v.store();
  const int64_t chunk = (int64_t)b * gridDim.y + blockIdx.y;
  const int64_t at = (int64_t)b * N * ld + (int64_t)h * D;
  float *pk = part ? part + chunk * ld + C + (int64_t)h * D : NULL;
  store_rows(dqkv, at + C, ld, sdK, d.ldo, scale, k0, N, D, sizeof(T) == 2, pk);
  store_rows(dqkv, at + 2 * C, ld, sdV, d.ldo, 1.0f, k0, N, D, sizeof(T) == 2, pk ? pk + C : NULL);
}

// ---- bf16 on mma.sync, D up to 80 ---------------------------------------------------------------
// The same rounding points and dropout as the kernels above (the forward in one pass), but a warp's
// tile products are PTX mma.sync m16n8k16 (vt_mma16816) whose fragments stay in registers: scores,
// probabilities and their gradients never go through shared memory; only the tiles of the operands
// do. A lane holds, of each 8-column block j of a 16-row score tile, rows g and g + 8 (g = lane /
// 4), columns 8j + 2t and the next (t = lane % 4): exactly the A operand layout of the next
// product's probabilities (two blocks per 16-wide k step), so p and dS go from accumulators to
// operands in registers. Operand tiles stay row-major as the heads lie in memory, bf16 rows of Dp +
// 8 elements (16-byte aligned, and ldmatrix's 8 rows fall in distinct bank groups); ldmatrix reads
// every fragment, transposed (_trans) where a product reads a tile along its rows (V in P V; K in
// dS K; dO, Q in P^T dO, dS^T Q). The streamed tiles come by cp.async into two buffers: the copies
// for the next step are in flight while this step computes, one barrier pair per step. Selected for
// bf16 with D <= 80 and the heads in whole 16-byte chunks (D a multiple of 8: ViT-S/B/L, and
// ViT-H/14's 80; mma_path); VT_ATTN_MMA=0 keeps the WMMA kernels. NK = Dp / 16; at NK 5 the dk/dv
// kernel takes 255 registers, no spills (nvcc 13). A block has W warps of 16 rows each: its own
// rows (queries; keys for dk/dv) are 16 W, 64 or 128 (more rows per block load each streamed 64-row
// tile for more of them, fewer warps fit on an SM; variant_for picks per shape by timing both); the
// streamed tiles have 64 rows. The backward's dq kernel makes S, P and dP again from Q, K, V and dO
// (three products and an exponential per score for one product of its own), or, where variant_for
// times it faster, reads the bf16 dS^T that the dk/dv kernel wrote out (mma_dqs_kernel: one product
// per score; 2 bytes per score written and read; the same bits). Their exponentials are base 2 on
// the SFU (vt_ex2): scores are taken as y = s scale log2 e, the row maxima and log-sums kept in
// that base, lse stored natural as ever; at D = 64 an exponential by expf cost about as much as the
// score's 64 multiply-adds on the tensor cores.
#define MMA_NB (FA_TILE / 8)  // 8-column blocks of a 64-wide score tile

typedef __nv_bfloat16 bf16_t;

// Elements of an (R, Dp) operand tile in shared memory (row stride Dp + 8), Dp = 16 NK.
static __host__ __device__ constexpr int mma_tile(int NK, int R = FA_TILE) {
  return R * (16 * NK + 8);
}

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

// A probability's dropout: fl(p * scale) where element n of the mask is kept, else 0.
static __device__ __forceinline__ float drop_one(const vt_dropout_mask &m, uint32_t stream,
                                                 uint64_t n, float p) {
  return vt_rng_uniform_inline(m.seed, stream, m.site, n) >= m.p ? __fmul_rn(p, m.scale) : 0.0f;
}

// The forward in one pass over the T key tiles (flash_fwd_kernel's two passes' values): each
// step makes q k^T of key tile s, moves each row's running maximum M (base 2, a whole number:
// vt_ops.h's m / ln 2) up to the tile's, scaling O and l by 2^(M_old - M_new) where it moves
// (exact), then adds e v and e to the rows' O and l, e = 2^(y - M). Shared memory: Q (16 W
// rows), then two buffers of K, then two of V (64 rows each).
template <int NK, int W>
static __global__ void __launch_bounds__(32 * W)
    mma_fwd_kernel(bf16_t *out, float *lse, const bf16_t *qkv, int N, int H, int D, float scale,
                   const vt_dropout_mask drop, uint32_t stream) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const int TS = mma_tile(NK), ldt = 16 * NK + 8;
  bf16_t *sQ = (bf16_t *)fa_shared, *sK = sQ + mma_tile(NK, 16 * W), *sV = sK + 2 * TS;
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, q0 = blockIdx.y * 16 * W;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const bf16_t *qb = qkv + (int64_t)b * N * ld + (int64_t)h * D, *kb = qb + C, *vb = qb + 2 * C;
  const bool live = q0 + 16 * w < N;
  const int row[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};  // this lane's two rows
  const int T = (N + FA_TILE - 1) / FA_TILE;
  const float scale2 = scale * MMA_LOG2E;  // scores in base 2: y = s scale2
  const uint64_t nbase = drop.p > 0.0f ? drop_base(drop, b, h, N) : 0;
  tile_async<NK, W, 16 * W>(sQ, qb, ld, q0, N, D);
  tile_async<NK, W>(sK, kb, ld, 0, N, D);
  tile_async<NK, W>(sV, vb, ld, 0, N, D);
  vt_cp_async_commit();
  unsigned qf[NK][4];
  float M[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running maxima (base 2), sums
  float o[2 * NK][4];
#pragma unroll
  for (int jd = 0; jd < 2 * NK; jd++) o[jd][0] = o[jd][1] = o[jd][2] = o[jd][3] = 0.0f;
  for (int s = 0; s < T; s++) {
    if (s + 1 < T) {  // the next step's tiles into the other buffers
      tile_async<NK, W>(sK + ((s + 1) & 1) * TS, kb, ld, (s + 1) * FA_TILE, N, D);
      tile_async<NK, W>(sV + ((s + 1) & 1) * TS, vb, ld, (s + 1) * FA_TILE, N, D);
    }
    vt_cp_async_commit();  // (empty at the last step: the wait below still means this step's)
    vt_cp_async_wait<1>();
    __syncthreads();
    const bf16_t *tK = sK + (s & 1) * TS, *tV = sV + (s & 1) * TS;
    const int k0 = s * FA_TILE, kn = N - k0 < FA_TILE ? N - k0 : FA_TILE, kc = (kn + 15) & ~15;
    if (s == 0)
#pragma unroll
      for (int kk = 0; kk < NK; kk++) frag_a(qf[kk], sQ + 16 * w * ldt + 16 * kk, ldt);
    if (live) {
      float sc[MMA_NB][4], f[2];
      mma_scores<NK>(sc, qf, tK, kc);
#pragma unroll
      for (int r = 0; r < 2; r++) {  // the tile's row maxima over the quad, M moved up to them
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < MMA_NB; j++)
#pragma unroll
          for (int i = 2 * r; i < 2 * r + 2; i++)
            if (8 * j + 2 * t + (i & 1) < kn) mx = fmaxf(mx, sc[j][i]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float up = fmaxf(M[r], ceilf(mx * scale2));  // (scale2 > 0)
        const int k = M[r] == -INFINITY ? -127 : (int)(M[r] - up);  // 2^k: 0 or exact
        f[r] = k < -126 ? 0.0f : __uint_as_float((unsigned)(127 + k) << 23);
        M[r] = up, l[r] *= f[r];
      }
#pragma unroll
      for (int jd = 0; jd < 2 * NK; jd++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[jd][i] *= f[i >> 1];
#pragma unroll
      for (int kk = 0; kk < MMA_NB / 2; kk++) {  // O += e v, e (with dropout, d) rounded; l += e
        if (16 * kk >= kc) break;
        float p[2][4];  // blocks 2kk, 2kk + 1
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int r = i >> 1, col = 8 * (2 * kk + jj) + 2 * t + (i & 1);
            float v = 0.0f;
            if (col < kn) {
              v = vt_ex2(fmaf(sc[2 * kk + jj][i], scale2, -M[r]));
              l[r] += v;
              if (drop.p > 0.0f)
                v = drop_one(drop, stream, nbase + (uint64_t)row[r] * N + k0 + col, v);
            }
            p[jj][i] = v;
          }
        unsigned pa[4];
        pack_a(pa, p);
        mma_accumulate<NK>(o, pa, tV, kk);
      }
    }
    __syncthreads();  // step s + 2's copies go into these buffers
  }
  float inv[2];  // each row's sum from its quad's four (pairwise: the same bits on each), lse
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (t == 0 && row[r] < N) lse[(int64_t)bh * N + row[r]] = (M[r] + log2f(l[r])) * MMA_LN2;
    inv[r] = 1.0f / l[r];
  }
  // A lane's two adjacent columns in one 4-byte store (D is a multiple of 8).
#pragma unroll
  for (int jd = 0; jd < 2 * NK; jd++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int c = 8 * jd + 2 * t;
      if (row[r] < N && c < D)
        *(unsigned *)(out + ((int64_t)b * N + row[r]) * C + (int64_t)h * D + c) =
            vt_pack_bf16x2(o[jd][2 * r] * inv[r], o[jd][2 * r + 1] * inv[r]);
    }
}

// The lane's share of a (16, 16 NK) fp32 accumulator into rows 16w.. of a (64, ldo) shared one
// (for store_rows, which the caller runs after every warp has put its rows).
template <int NK>
static __device__ __forceinline__ void mma_put_rows(float *rows, int ldo,
                                                    const float acc[2 * NK][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jd = 0; jd < 2 * NK; jd++)
#pragma unroll
    for (int i = 0; i < 4; i++)
      rows[(g + 8 * (i >> 1)) * ldo + 8 * jd + 2 * t + (i & 1)] = acc[jd][i];
}

// The end of both dq kernels: the block's dQ rows (each warp's acc) through the fp32 rows sdQ
// (16 W, Dp + 4) into dqkv's q columns, times scale, and their bias partials (store_rows).
template <int NK, int W>
static __device__ __forceinline__ void mma_store_dq(float *dqkv, float *part, float *sdQ,
                                                    const float acc[2 * NK][4], int b, int h,
                                                    int q0, int N, int H, int D, float scale) {
  const int ldo = 16 * NK + 4, w = threadIdx.x >> 5;
  const int64_t ld = 3 * (int64_t)H * D, chunk = (int64_t)b * fa_tiles(N) + q0 / FA_TILE;
  mma_put_rows<NK>(sdQ + 16 * w * ldo, ldo, acc);
  store_rows<16 * W, 32 * W>(dqkv, (int64_t)b * N * ld + (int64_t)h * D, ld, sdQ, ldo, scale,
                             q0, N, D, 1, part ? part + chunk * ld + (int64_t)h * D : NULL);
}

// dq and delta (flash_dq_kernel's work), one step per key tile. Shared memory: Q, dO, out (16 W
// rows each: out's for delta), two buffers of K, two of V (64 rows each); then lse and delta (16 W
// floats each). After the loop the K and V buffers hold the fp32 dQ rows.
template <int NK, int W>
static __global__ void __launch_bounds__(32 * W)
    mma_dq_kernel(float *dqkv, float *part, float *delta, const bf16_t *dout, const bf16_t *qkv,
                  const bf16_t *out, const float *lse, int N, int H, int D, float scale,
                  const vt_dropout_mask drop, uint32_t stream) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const int TS = mma_tile(NK), TQ = mma_tile(NK, 16 * W), ldt = 16 * NK + 8;
  bf16_t *sQ = (bf16_t *)fa_shared, *sdO = sQ + TQ, *sO = sdO + TQ, *sK = sO + TQ;
  bf16_t *sV = sK + 2 * TS;
  float *sL = (float *)(sV + 2 * TS), *sD = sL + 16 * W, *sdQ = (float *)sK;
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, q0 = blockIdx.y * 16 * W;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const bf16_t *qb = qkv + (int64_t)b * N * ld + (int64_t)h * D, *kb = qb + C, *vb = qb + 2 * C;
  const int64_t at = (int64_t)b * N * C + (int64_t)h * D;  // this head's columns of out, dout
  const int T = (N + FA_TILE - 1) / FA_TILE;
  tile_async<NK, W, 16 * W>(sQ, qb, ld, q0, N, D);
  tile_async<NK, W, 16 * W>(sdO, dout + at, C, q0, N, D);
  tile_async<NK, W, 16 * W>(sO, out + at, C, q0, N, D);
  tile_async<NK, W>(sK, kb, ld, 0, N, D);
  tile_async<NK, W>(sV, vb, ld, 0, N, D);
  vt_cp_async_commit();
  vt_cp_async_wait<0>();
  __syncthreads();
  rows_delta(sD, sL, delta, sdO, sO, ldt, lse, bh, q0, N, D);  // as flash_dq_kernel's
  __syncwarp();
  unsigned qf[NK][4], dof[NK][4];
#pragma unroll
  for (int kk = 0; kk < NK; kk++) {
    frag_a(qf[kk], sQ + 16 * w * ldt + 16 * kk, ldt);
    frag_a(dof[kk], sdO + 16 * w * ldt + 16 * kk, ldt);
  }
  const float scale2 = scale * MMA_LOG2E;  // base 2, as the forward's
  const float L[2] = {sL[16 * w + g] * MMA_LOG2E, sL[16 * w + g + 8] * MMA_LOG2E};
  const float dl[2] = {sD[16 * w + g], sD[16 * w + g + 8]};
  const int row[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};
  const uint64_t nbase = drop.p > 0.0f ? drop_base(drop, b, h, N) : 0;
  const bool live = q0 + 16 * w < N;
  float acc[2 * NK][4];
#pragma unroll
  for (int jd = 0; jd < 2 * NK; jd++) acc[jd][0] = acc[jd][1] = acc[jd][2] = acc[jd][3] = 0.0f;
  for (int s = 0; s < T; s++) {
    if (s + 1 < T) {
      tile_async<NK, W>(sK + ((s + 1) & 1) * TS, kb, ld, (s + 1) * FA_TILE, N, D);
      tile_async<NK, W>(sV + ((s + 1) & 1) * TS, vb, ld, (s + 1) * FA_TILE, N, D);
    }
    vt_cp_async_commit();
    vt_cp_async_wait<1>();
    __syncthreads();
    const bf16_t *tK = sK + (s & 1) * TS, *tV = sV + (s & 1) * TS;
    const int k0 = s * FA_TILE, kn = N - k0 < FA_TILE ? N - k0 : FA_TILE, kc = (kn + 15) & ~15;
    if (live) {
      float sc[MMA_NB][4], dp[MMA_NB][4];
      mma_scores<NK>(sc, qf, tK, kc);   // s / scale
      mma_scores<NK>(dp, dof, tV, kc);  // dP = dO V^T
#pragma unroll
      for (int kk = 0; kk < MMA_NB / 2; kk++) {
        if (16 * kk >= kc) break;
        float ds[2][4];  // blocks 2kk, 2kk + 1
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int r = i >> 1, j = 2 * kk + jj, col = 8 * j + 2 * t + (i & 1);
            const float pij = col < kn ? vt_ex2(fmaf(sc[j][i], scale2, -L[r])) : 0.0f;
            float d = dp[j][i];
            if (drop.p > 0.0f && col < kn)
              d = drop_one(drop, stream, nbase + (uint64_t)row[r] * N + k0 + col, d);
            ds[jj][i] = pij * (d - dl[r]);
          }
        unsigned da[4];
        pack_a(da, ds);
        mma_accumulate<NK>(acc, da, tK, kk);  // dQ += dS K
      }
    }
    __syncthreads();  // step s + 2's copies go into these buffers
  }
  // every copy has landed (the last wait): sdQ's buffers are free
  mma_store_dq<NK, W>(dqkv, part, sdQ, acc, b, h, q0, N, H, D, scale);
}

// dk and dv (flash_dkv_kernel's work): warps own 16 keys and make the transposed tiles S^T, dP^T
// in registers, one step per query tile. Shared memory: K, V (16 W rows each), two buffers of Q,
// two of dO (64 rows each); then two buffers each of lse and delta (64 floats). After the loop K
// and V hold the fp32 dK rows, the Q and dO buffers the dV rows. With DS it also stores dS^T,
// the bf16 operand of its dK product, for mma_dqs_kernel: (B H, N, lds) bf16 at ds, row = key,
// columns = queries, zeros from N to lds (a multiple of 16).
template <int NK, int W, bool DS>
static __global__ void __launch_bounds__(32 * W)
    mma_dkv_kernel(float *dqkv, float *part, const bf16_t *dout, const bf16_t *qkv,
                   const float *lse, const float *delta, int N, int H, int D, float scale,
                   const vt_dropout_mask drop, uint32_t stream, bf16_t *ds, int lds) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const int TS = mma_tile(NK), TK = mma_tile(NK, 16 * W), ldt = 16 * NK + 8;
  const int ldo = 16 * NK + 4;
  bf16_t *sK = (bf16_t *)fa_shared, *sV = sK + TK, *sQ = sV + TK, *sdO = sQ + 2 * TS;
  float *sL = (float *)(sdO + 2 * TS), *sD = sL + 2 * FA_TILE;
  float *sdK = (float *)sK, *sdV = (float *)sQ;
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, k0 = blockIdx.y * 16 * W;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const bf16_t *qb = qkv + (int64_t)b * N * ld + (int64_t)h * D, *kb = qb + C, *vb = qb + 2 * C;
  const bf16_t *dob = dout + (int64_t)b * N * C + (int64_t)h * D;
  const float *lse_r = lse + (int64_t)bh * N, *delta_r = delta + (int64_t)bh * N;
  const int T = (N + FA_TILE - 1) / FA_TILE;
  const float scale2 = scale * MMA_LOG2E;  // base 2, as the forward's
  tile_async<NK, W, 16 * W>(sK, kb, ld, k0, N, D);
  tile_async<NK, W, 16 * W>(sV, vb, ld, k0, N, D);
  tile_async<NK, W>(sQ, qb, ld, 0, N, D);
  tile_async<NK, W>(sdO, dob, C, 0, N, D);
  row_async<W>(sL, lse_r, 0, N);
  row_async<W>(sD, delta_r, 0, N);
  vt_cp_async_commit();
  unsigned kf[NK][4], vf[NK][4];
  const int key[2] = {k0 + 16 * w + g, k0 + 16 * w + g + 8};
  const uint64_t nbase = drop.p > 0.0f ? drop_base(drop, b, h, N) : 0;
  const bool live = k0 + 16 * w < N;
  float ak[2 * NK][4], av[2 * NK][4];
#pragma unroll
  for (int jd = 0; jd < 2 * NK; jd++)
#pragma unroll
    for (int i = 0; i < 4; i++) ak[jd][i] = av[jd][i] = 0.0f;
  for (int s = 0; s < T; s++) {
    if (s + 1 < T) {
      const int n1 = (s + 1) & 1, q1 = (s + 1) * FA_TILE;
      tile_async<NK, W>(sQ + n1 * TS, qb, ld, q1, N, D);
      tile_async<NK, W>(sdO + n1 * TS, dob, C, q1, N, D);
      row_async<W>(sL + n1 * FA_TILE, lse_r, q1, N);
      row_async<W>(sD + n1 * FA_TILE, delta_r, q1, N);
    }
    vt_cp_async_commit();
    vt_cp_async_wait<1>();
    __syncthreads();
    if (s == 0)
#pragma unroll
      for (int kk = 0; kk < NK; kk++) {
        frag_a(kf[kk], sK + 16 * w * ldt + 16 * kk, ldt);
        frag_a(vf[kk], sV + 16 * w * ldt + 16 * kk, ldt);
      }
    const bf16_t *tQ = sQ + (s & 1) * TS, *tdO = sdO + (s & 1) * TS;
    const float *tL = sL + (s & 1) * FA_TILE, *tD = sD + (s & 1) * FA_TILE;
    const int q0 = s * FA_TILE, qn = N - q0 < FA_TILE ? N - q0 : FA_TILE, qc = (qn + 15) & ~15;
    if (live) {
      float st[MMA_NB][4], dpt[MMA_NB][4];
      mma_scores<NK>(st, kf, tQ, qc);    // S^T / scale
      mma_scores<NK>(dpt, vf, tdO, qc);  // dP^T = V dO^T
#pragma unroll
      for (int kk = 0; kk < MMA_NB / 2; kk++) {
        if (16 * kk >= qc) break;
        float pv[2][4], dv[2][4];  // blocks 2kk, 2kk + 1 of P^T and dS^T
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int r = i >> 1, j = 2 * kk + jj, c = 8 * j + 2 * t + (i & 1);
            pv[jj][i] = dv[jj][i] = 0.0f;  // past qn
            if (c < qn) {
              float p = vt_ex2(fmaf(st[j][i], scale2, -tL[c] * MMA_LOG2E)), d = dpt[j][i];
              const uint64_t n = nbase + (uint64_t)(q0 + c) * N + key[r];
              if (drop.p > 0.0f) d = drop_one(drop, stream, n, d);
              dv[jj][i] = p * (d - tD[c]);
              if (drop.p > 0.0f) p = drop_one(drop, stream, n, p);
              pv[jj][i] = p;
            }
          }
        unsigned pa[4], da[4];
        pack_a(pa, pv);
        pack_a(da, dv);
        if (DS) {  // pack_a's registers: rows g, g + 8; columns 2t, 2t + 1 and 8 further
          bf16_t *d = ds + ((int64_t)bh * N + key[0]) * lds + q0 + 16 * kk + 2 * t;
          if (key[0] < N) *(unsigned *)d = da[0], *(unsigned *)(d + 8) = da[2];
          d += 8 * lds;
          if (key[1] < N) *(unsigned *)d = da[1], *(unsigned *)(d + 8) = da[3];
        }
        mma_accumulate<NK>(av, pa, tdO, kk);  // dV += P^T dO
        mma_accumulate<NK>(ak, da, tQ, kk);   // dK += dS^T Q
      }
    }
    __syncthreads();  // step s + 2's copies go into these buffers
  }
  mma_put_rows<NK>(sdK + 16 * w * ldo, ldo, ak);  // every copy has landed (the last wait)
  mma_put_rows<NK>(sdV + 16 * w * ldo, ldo, av);
  const int64_t chunk = (int64_t)b * fa_tiles(N) + k0 / FA_TILE;
  const int64_t at = (int64_t)b * N * ld + (int64_t)h * D;
  float *pk = part ? part + chunk * ld + C + (int64_t)h * D : NULL;
  store_rows<16 * W, 32 * W>(dqkv, at + C, ld, sdK, ldo, scale, k0, N, D, 1, pk);
  store_rows<16 * W, 32 * W>(dqkv, at + 2 * C, ld, sdV, ldo, 1.0f, k0, N, D, 1,
                             pk ? pk + C : NULL);
}

// delta (rows_delta's sums, the same bits) for the backward that stores dS, whose dk/dv kernel
// runs before its dq kernel: a warp per row of (B H, N), 8 rows a block.
static __global__ void __launch_bounds__(256)
    mma_delta_kernel(float *delta, const bf16_t *dout, const bf16_t *out, int N, int H, int D) {
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, lane = threadIdx.x & 31;
  const int q = blockIdx.y * 8 + (threadIdx.x >> 5);
  if (q >= N) return;  // the whole warp
  const int64_t at = ((int64_t)b * N + q) * H * D + (int64_t)h * D;
  float s = 0.0f;
  for (int c = lane; c < D; c += 32) s += widen(dout[at + c]) * widen(out[at + c]);
  s = vt_warp_sum(s);
  if (lane == 0) delta[(int64_t)bh * N + q] = s;
}

// dq from the dS^T that mma_dkv_kernel<NK, W, true> stored: dQ = dS K, one step per key tile,
// the same products in the same order as mma_dq_kernel's (the same bits: S^T and S are the same
// sums) without making S, P and dP again. Shared memory: two buffers each of K (64 rows) and of
// dS^T (64 keys x the block's 16 W queries, row stride 16 W + 8); after the loop the dQ rows.
template <int NK, int W>
static __global__ void __launch_bounds__(32 * W)
    mma_dqs_kernel(float *dqkv, float *part, const bf16_t *ds, int lds, const bf16_t *qkv, int N,
                   int H, int D, float scale) {
  extern __shared__ __align__(128) unsigned char fa_shared[];
  const int TS = mma_tile(NK), TD = mma_tile(W), ldd = 16 * W + 8;
  bf16_t *sK = (bf16_t *)fa_shared, *sS = sK + 2 * TS;
  float *sdQ = (float *)fa_shared;
  const int bh = blockIdx.x, b = bh / H, h = bh - b * H, q0 = blockIdx.y * 16 * W;
  const int w = threadIdx.x >> 5;
  const int64_t C = (int64_t)H * D, ld = 3 * C;
  const bf16_t *kb = qkv + (int64_t)b * N * ld + C + (int64_t)h * D;
  const bf16_t *db = ds + (int64_t)bh * N * lds + q0;  // the block's columns of the head's dS^T
  const int T = (N + FA_TILE - 1) / FA_TILE;
  // dS^T's tiles by tile_async as (64, 16 W) tiles: "NK" W, "D" the columns left in a row
  tile_async<NK, W>(sK, kb, ld, 0, N, D);
  tile_async<W, W>(sS, db, lds, 0, N, lds - q0);
  vt_cp_async_commit();
  const bool live = q0 + 16 * w < N;
  float acc[2 * NK][4];
#pragma unroll
  for (int jd = 0; jd < 2 * NK; jd++) acc[jd][0] = acc[jd][1] = acc[jd][2] = acc[jd][3] = 0.0f;
  for (int s = 0; s < T; s++) {
    if (s + 1 < T) {
      tile_async<NK, W>(sK + ((s + 1) & 1) * TS, kb, ld, (s + 1) * FA_TILE, N, D);
      tile_async<W, W>(sS + ((s + 1) & 1) * TD, db, lds, (s + 1) * FA_TILE, N, lds - q0);
    }
    vt_cp_async_commit();
    vt_cp_async_wait<1>();
    __syncthreads();
    const bf16_t *tK = sK + (s & 1) * TS, *tS = sS + (s & 1) * TD;
    const int k0 = s * FA_TILE, kn = N - k0 < FA_TILE ? N - k0 : FA_TILE, kc = (kn + 15) & ~15;
    if (live)
#pragma unroll
      for (int kk = 0; kk < MMA_NB / 2; kk++) {
        if (16 * kk >= kc) break;
        unsigned da[4];
        frag_a_trans(da, tS + 16 * kk * ldd + 16 * w, ldd);
        mma_accumulate<NK>(acc, da, tK, kk);  // dQ += dS K
      }
    __syncthreads();  // step s + 2's copies go into these buffers
  }
  // every copy has landed (the last wait): sdQ's buffers are free
  mma_store_dq<NK, W>(dqkv, part, sdQ, acc, b, h, q0, N, H, D, scale);
}

// ---- host side -------------------------------------------------------------------------------

// The grid of a kernel over (image, head) pairs and tiles of N, and a check that its shared
// memory fits: asks the device once and allows the kernel to use that much (past the default
// 48 KiB) once per kernel.
static dim3 fa_grid(const char *op, int64_t B, int64_t N, int64_t H, int64_t D,
                    int rows = FA_TILE) {
  VT_CHECK(B * H <= INT_MAX && (N + rows - 1) / rows <= 65535 && 3 * H * D <= INT_MAX,
           "%s: B=%lld N=%lld H=%lld D=%lld are too large for one grid", op, (long long)B,
           (long long)N, (long long)H, (long long)D);
  return dim3((unsigned)(B * H), (unsigned)((N + rows - 1) / rows));
}

// The GPU's opt-in shared memory per block, in bytes.
static size_t smem_optin(void) {
  static int optin = -1;
  if (optin < 0) {
    int dev = 0;
    VT_CUDA_CHECK(cudaGetDevice(&dev));
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  }
  return (size_t)optin;
}

static void fa_smem_allow(const char *op, const void *kernel, size_t need, int64_t D,
                          int *allowed) {
  VT_CHECK(need <= smem_optin(),
           "%s: head dim D=%lld needs %zu bytes of shared memory per block in %s precision, "
           "more than this GPU's %zu (on an H100/H200 the fused attention takes D up to 128 in "
           "bf16, 96 in fp32): use more heads of a smaller dim, or bf16",
           op, (long long)D, need, vt_cuda_bf16() ? "bf16" : "fp32", smem_optin());
  if ((size_t)*allowed < need) {
    VT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    *allowed = (int)need;
  }
}

// NF: the accumulators' 16-column fragments in bf16 (warp_acc): 4 up to D 64, else 8 (D 128, the
// most the bf16 kernels take: fa_nf); fp32 keeps its accumulators in shared memory (any NF).
static int fa_nf(const char *op, int64_t D, int bf16) {
  VT_CHECK(!bf16 || D <= 128, "%s: head dim D=%lld: the bf16 attention kernels take D up to 128; "
           "use more heads of a smaller dim", op, (long long)D);
  return bf16 && D > 64 ? 8 : 4;
}

template <typename T, int NF>
static void fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N, int64_t H,
                int64_t D, const vt_dropout_mask &drop) {
  static int allowed;
  const dim3 grid = fa_grid("attention_fwd", B, N, H, D);
  const size_t smem = fa_bytes(fa_dims_of((int)D, sizeof(T)), sizeof(T), FA_FWD_SMEM);
  fa_smem_allow("attention_fwd", (const void *)flash_fwd_kernel<T, NF>, smem, D, &allowed);
  flash_fwd_kernel<T, NF><<<grid, FA_THREADS, smem, vt_cuda_stream()>>>(
      (T *)out, lse, (const T *)qkv, (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D), drop,
      vt_hash_name("dropout"));
  VT_CUDA_CHECK_LAUNCH();
}

// The backward's op scratch: delta (B, H, N), and with dbias the bias partials, one row of 3HD
// per (image, tile of N): each block writes its head's columns of its row; bwd_bias then sums
// the rows in order into dbias. Then ds_bytes for the mma.sync backward's stored dS^T, at *ds
// (NULL without; ds may be NULL when ds_bytes is 0).
static void bwd_scratch(int64_t B, int64_t N, int64_t H, int64_t D, unsigned tiles, int dbias,
                        float **delta, float **part, size_t ds_bytes = 0, bf16_t **ds = NULL) {
  const int64_t nchunk = B * tiles, ld = 3 * H * D;
  size_t end = 0;
  const size_t at_delta = vt_cuda_carve(&end, (size_t)(B * H * N) * sizeof(float));
  const size_t at_part = vt_cuda_carve(&end, dbias ? (size_t)(nchunk * ld) * sizeof(float) : 0);
  const size_t at_ds = vt_cuda_carve(&end, ds_bytes);
  char *base = (char *)vt_cuda_scratch(end);
  *delta = (float *)(base + at_delta), *part = dbias ? (float *)(base + at_part) : NULL;
  if (ds) *ds = ds_bytes ? (bf16_t *)(base + at_ds) : NULL;
}

static void bwd_bias(float *dbias, const float *part, int64_t nchunk, int64_t ld) {
  if (!dbias) return;
  colsum_final(dbias, part, NULL, NULL, nchunk, ld);
}

template <typename T, int NF>
static void bwd(float *dqkv, float *dbias, const float *dout, const float *qkv, const float *out,
                const float *lse, int64_t B, int64_t N, int64_t H, int64_t D,
                const vt_dropout_mask &drop) {
  static int allowed_dq, allowed_dkv;
  const dim3 grid = fa_grid("attention_bwd", B, N, H, D);
  const fa_dims d = fa_dims_of((int)D, sizeof(T));
  const size_t smem_dq = fa_bytes(d, sizeof(T), FA_DQ_SMEM),
               smem_dkv = fa_bytes(d, sizeof(T), FA_DKV_SMEM);
  fa_smem_allow("attention_bwd", (const void *)flash_dq_kernel<T, NF>, smem_dq, D, &allowed_dq);
  fa_smem_allow("attention_bwd", (const void *)flash_dkv_kernel<T, NF>, smem_dkv, D, &allowed_dkv);
  const float scale = 1.0f / sqrtf((float)D);
  const uint32_t stream = vt_hash_name("dropout");
  float *delta, *part;
  bwd_scratch(B, N, H, D, grid.y, dbias != NULL, &delta, &part);
  flash_dq_kernel<T, NF><<<grid, FA_THREADS, smem_dq, vt_cuda_stream()>>>(
      dqkv, part, delta, (const T *)dout, (const T *)qkv, (const T *)out, lse, (int)N, (int)H,
      (int)D, scale, drop, stream);
  VT_CUDA_CHECK_LAUNCH();
  flash_dkv_kernel<T, NF><<<grid, FA_THREADS, smem_dkv, vt_cuda_stream()>>>(
      dqkv, part, (const T *)dout, (const T *)qkv, lse, delta, (int)N, (int)H, (int)D, scale,
      drop, stream);
  VT_CUDA_CHECK_LAUNCH();
  bwd_bias(dbias, part, B * grid.y, 3 * H * D);
}

// The mma.sync kernels' dynamic shared memory in bytes for NK = Dp / 16 and W warps (the layouts
// in the kernels' comments): the forward's Q and two buffers each of K and V; the dq kernel's
// Q, dO and O, two buffers each of K and V, and two rows of 16 W statistics; the dk/dv kernel's
// K and V, two buffers each of Q and dO, and four rows of 64 statistics; the stored-dS dq
// kernel's two buffers each of K and dS^T, or its fp32 dQ rows after them.
enum { MMA_FWD, MMA_DQ, MMA_DKV, MMA_DQS };
static size_t mma_smem(int kernel, int NK, int W) {
  const size_t own = mma_tile(NK, 16 * W) * sizeof(bf16_t),
               streamed = mma_tile(NK) * sizeof(bf16_t);
  if (kernel == MMA_FWD) return own + 4 * streamed;
  if (kernel == MMA_DQ) return 3 * own + 4 * streamed + 2 * 16 * W * sizeof(float);
  if (kernel == MMA_DKV) return 2 * own + 4 * streamed + 4 * FA_TILE * sizeof(float);
  const size_t loop = 2 * streamed + 2 * mma_tile(W) * sizeof(bf16_t),
               rows = (size_t)16 * W * (16 * NK + 4) * sizeof(float);
  return loop > rows ? loop : rows;
}

// The backward's kernels; delta and part from bwd_scratch (part NULL without dbias), which they
// overwrite: launched again, they write the same. With ds (bwd_scratch's, row stride lds) the
// dk/dv kernel stores dS^T there and the dq kernel reads it (delta made first by its own
// kernel); without, the dq kernel (and delta) first, then the dk/dv kernel, each making S, P and
// dP. Both ways give the same bits.
template <int NK, int W>
static void mma_bwd(float *dqkv, float *delta, float *part, bf16_t *ds, int lds,
                    const float *dout, const float *qkv, const float *out, const float *lse,
                    int64_t B, int64_t N, int64_t H, int64_t D, const vt_dropout_mask &drop) {
  static int allowed_dq, allowed_dkv, allowed_dkvs, allowed_dqs;
  const dim3 grid = fa_grid("attention_bwd", B, N, H, D, 16 * W);
  const size_t smem_dq = mma_smem(MMA_DQ, NK, W), smem_dkv = mma_smem(MMA_DKV, NK, W);
  const float scale = 1.0f / sqrtf((float)D);
  const uint32_t stream = vt_hash_name("dropout");
  const bf16_t *dy = (const bf16_t *)dout, *x = (const bf16_t *)qkv, *y = (const bf16_t *)out;
  if (ds) {
    const size_t smem_dqs = mma_smem(MMA_DQS, NK, W);
    fa_smem_allow("attention_bwd", (const void *)mma_dkv_kernel<NK, W, true>, smem_dkv, D,
                  &allowed_dkvs);
    fa_smem_allow("attention_bwd", (const void *)mma_dqs_kernel<NK, W>, smem_dqs, D,
                  &allowed_dqs);
    mma_delta_kernel<<<dim3(grid.x, (unsigned)((N + 7) / 8)), 256, 0, vt_cuda_stream()>>>(
        delta, dy, y, (int)N, (int)H, (int)D);
    VT_CUDA_CHECK_LAUNCH();
    mma_dkv_kernel<NK, W, true><<<grid, 32 * W, smem_dkv, vt_cuda_stream()>>>(
        dqkv, part, dy, x, lse, delta, (int)N, (int)H, (int)D, scale, drop, stream, ds, lds);
    VT_CUDA_CHECK_LAUNCH();
    mma_dqs_kernel<NK, W><<<grid, 32 * W, smem_dqs, vt_cuda_stream()>>>(
        dqkv, part, ds, lds, x, (int)N, (int)H, (int)D, scale);
    VT_CUDA_CHECK_LAUNCH();
    return;
  }
  fa_smem_allow("attention_bwd", (const void *)mma_dq_kernel<NK, W>, smem_dq, D, &allowed_dq);
  fa_smem_allow("attention_bwd", (const void *)mma_dkv_kernel<NK, W, false>, smem_dkv, D,
                &allowed_dkv);
  mma_dq_kernel<NK, W><<<grid, 32 * W, smem_dq, vt_cuda_stream()>>>(
      dqkv, part, delta, dy, x, y, lse, (int)N, (int)H, (int)D, scale, drop, stream);
  VT_CUDA_CHECK_LAUNCH();
  mma_dkv_kernel<NK, W, false><<<grid, 32 * W, smem_dkv, vt_cuda_stream()>>>(
      dqkv, part, dy, x, lse, delta, (int)N, (int)H, (int)D, scale, drop, stream, NULL, 0);
  VT_CUDA_CHECK_LAUNCH();
}

// ---- one latent query per head (MAP pooling) ---------------------------------------------------
// One block of VT_TREE_THREADS threads per (sample, head); the scores (forward) or ds (backward)
// of its N tokens in dynamic shared memory. A warp takes a token's dot products over D (its
// lanes' partial sums added by vt_warp_sum), the block the max and sum over the tokens (fixed
// trees), one thread per column of D the sums over the tokens in token order. The backward
// writes each sample's query gradient to a row of op scratch; the rows are summed in sample order
// afterwards. No atomics.

template <typename T>
static __device__ __forceinline__ float as_stored(float v) {  // v as a T stores it
  return widen(narrow<T>(v));
}

template <typename T>
static __global__ void latent_fwd_kernel(T *out, float *lse, const T *q, const T *kv, int N, int H,
                                         int D, float scale) {
  extern __shared__ float la_s[];  // (N) scores, then probabilities
  __shared__ float red[VT_TREE_THREADS];
  const int b = blockIdx.x / H, h = blockIdx.x % H, lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t C = (int64_t)H * D, ld = 2 * C;
  const T *qh = q + (int64_t)h * D, *kb = kv + (int64_t)b * N * ld + (int64_t)h * D;
  for (int t = warp; t < N; t += nwarps) {
    float acc = 0.0f;
    for (int d = lane; d < D; d += 32) acc += widen(qh[d]) * widen(kb[(int64_t)t * ld + d]);
    acc = vt_warp_sum(acc);
    if (lane == 0) la_s[t] = scale * acc;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < N; t += blockDim.x) mx = fmaxf(mx, la_s[t]);
  mx = vt_block_max(mx, red);
  float sum = 0.0f;
  for (int t = threadIdx.x; t < N; t += blockDim.x) {  // e = exp(s - max) as T stores it
    const float e = expf(la_s[t] - mx);
    sum += e;
    la_s[t] = as_stored<T>(e);
  }
  sum = vt_block_sum(sum, red);  // (its barriers also publish la_s)
  if (threadIdx.x == 0) lse[blockIdx.x] = mx + logf(sum);
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const T *v = kb + C + d;
    float o = 0.0f;
    for (int t = 0; t < N; t++) o += la_s[t] * widen(v[(int64_t)t * ld]);
    out[(int64_t)b * C + (int64_t)h * D + d] = narrow<T>(o * inv);
  }
}

// dkv32: the fp32 dkv when the bias gradient needs it before a bf16 dkv is stored (else NULL and
// dkv takes the values as T).
template <typename T>
static __global__ void latent_bwd_kernel(float *dq_part, T *dkv, float *dkv32, const T *dout,
                                         const T *q, const T *kv, const T *out, const float *lse,
                                         int N, int H, int D, float scale) {
  extern __shared__ float la_s[];  // (N) ds
  __shared__ float red[VT_TREE_THREADS];
  const int b = blockIdx.x / H, h = blockIdx.x % H, lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t C = (int64_t)H * D, ld = 2 * C, o_at = (int64_t)b * C + (int64_t)h * D;
  const T *qh = q + (int64_t)h * D, *kb = kv + (int64_t)b * N * ld + (int64_t)h * D;
  const T *dy = dout + o_at;
  float part = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) part += widen(dy[d]) * widen(out[o_at + d]);
  const float delta = vt_block_sum(part, red), l = lse[blockIdx.x];
  for (int t = warp; t < N; t += nwarps) {
    const T *k = kb + (int64_t)t * ld;
    float s = 0.0f, dp = 0.0f;
    for (int d = lane; d < D; d += 32) {
      s += widen(qh[d]) * widen(k[d]);
      dp += widen(dy[d]) * widen(k[C + d]);
    }
    s = vt_warp_sum(s), dp = vt_warp_sum(dp);
    const float p = expf(scale * s - l), g = as_stored<T>(p * (dp - delta)), pr = as_stored<T>(p);
    if (lane == 0) la_s[t] = g;
    const int64_t at = ((int64_t)b * N + t) * ld + (int64_t)h * D;
    for (int d = lane; d < D; d += 32) {
      const float dk = scale * g * widen(qh[d]), dv = pr * widen(dy[d]);
      if (dkv32) dkv32[at + d] = dk, dkv32[at + C + d] = dv;
      else dkv[at + d] = narrow<T>(dk), dkv[at + C + d] = narrow<T>(dv);
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < N; t++) acc += la_s[t] * widen(kb[(int64_t)t * ld + d]);
    dq_part[o_at + d] = scale * acc;
  }
}

// N floats, rounded up to whole 16-byte groups: the compiler reads the scores 4 at a time and
// may read a partial last group whole (compute-sanitizer's memcheck on an H200 caught a 12-byte
// read past N = 197 in latent_fwd_kernel<float>).
static size_t la_smem(const char *op, int64_t B, int64_t N, int64_t H, int64_t D) {
  const size_t need = (size_t)(N + 3) / 4 * 4 * sizeof(float);
  VT_CHECK(B * H <= INT_MAX && 2 * H * D <= INT_MAX && N <= INT_MAX,
           "%s: B=%lld N=%lld H=%lld D=%lld are too large for one grid", op, (long long)B,
           (long long)N, (long long)H, (long long)D);
  VT_CHECK(need <= 48 * 1024, "%s: %lld tokens need %zu bytes of shared memory per block, more "
           "than 48 KiB (at most 12288 tokens)", op, (long long)N, need);
  return need;
}

template <typename T>
static void latent_fwd(float *out, float *lse, const float *q, const float *kv, int64_t B,
                       int64_t N, int64_t H, int64_t D) {
  const size_t smem = la_smem("latent_attention_fwd", B, N, H, D);
  latent_fwd_kernel<T><<<(unsigned)(B * H), VT_TREE_THREADS, smem, vt_cuda_stream()>>>(
      (T *)out, lse, (const T *)q, (const T *)kv, (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D));
  VT_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void latent_bwd(float *dq, float *dkv, float *dbias, const float *dout, const float *q,
                       const float *kv, const float *out, const float *lse, int64_t B, int64_t N,
                       int64_t H, int64_t D) {
  const size_t smem = la_smem("latent_attention_bwd", B, N, H, D);
  const int64_t C = H * D, ld = 2 * C, rows = B * N;
  const bool bf16_bias = dbias && sizeof(T) == 2;
  // Op scratch: each sample's query gradient (B, C); with a bf16 dkv and dbias the fp32 dkv;
  // with dbias the column sums' partials.
  size_t end = 0;
  const size_t at_dq = vt_cuda_carve(&end, (size_t)(B * C) * sizeof(float));
  const size_t at_32 = vt_cuda_carve(&end, bf16_bias ? (size_t)(rows * ld) * sizeof(float) : 0);
  const size_t at_part =
      vt_cuda_carve(&end, dbias ? (size_t)(colsum_chunks(rows) * ld) * sizeof(float) : 0);
  char *base = (char *)vt_cuda_scratch(end);
  float *dq_part = (float *)(base + at_dq), *dkv32 = bf16_bias ? (float *)(base + at_32) : NULL;
  latent_bwd_kernel<T><<<(unsigned)(B * H), VT_TREE_THREADS, smem, vt_cuda_stream()>>>(
      dq_part, (T *)dkv, dkv32, (const T *)dout, (const T *)q, (const T *)kv, (const T *)out, lse,
      (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D));
  VT_CUDA_CHECK_LAUNCH();
  VT_CUDA_CHECK(cudaMemsetAsync(dq, 0, (size_t)C * sizeof(float), vt_cuda_stream()));
  colsum_final(dq, dq_part, NULL, NULL, B, C);
  if (!dbias) return;
  float *part = (float *)(base + at_part);
  if (bf16_bias) colsum_acc(dbias, dkv, 1, vt_src_plain{dkv32}, part, rows, ld);
  else colsum_acc(dbias, (float *)NULL, 0, vt_src_plain{dkv}, part, rows, ld);
}

extern "C" void vt_cuda_latent_attention_fwd(float *out, float *lse, const float *q,
                                             const float *kv, int64_t B, int64_t N, int64_t H,
                                             int64_t D) {
  if (vt_cuda_bf16()) latent_fwd<__nv_bfloat16>(out, lse, q, kv, B, N, H, D);
  else latent_fwd<float>(out, lse, q, kv, B, N, H, D);
}

extern "C" void vt_cuda_latent_attention_bwd(float *dq, float *dkv, float *dbias,
                                             const float *dout, const float *q, const float *kv,
                                             const float *out, const float *lse, int64_t B,
                                             int64_t N, int64_t H, int64_t D) {
  if (vt_cuda_bf16()) latent_bwd<__nv_bfloat16>(dq, dkv, dbias, dout, q, kv, out, lse, B, N, H, D);
  else latent_bwd<float>(dq, dkv, dbias, dout, q, kv, out, lse, B, N, H, D);
}

// The kernels' mask: the caller's, or one with p 0 (nothing drops).
static vt_dropout_mask drop_arg(const vt_dropout_mask *drop) {
  vt_dropout_mask m = {};
  if (drop) m = *drop;
  return m;
}

// The mma.sync kernels for bf16 with D <= 80 a multiple of 8 and the tensors 16-byte aligned
// (their tiles come in 16-byte copies), unless VT_ATTN_MMA=0; the WMMA kernels otherwise.
static int mma_path(int64_t D, const void *a, const void *b, const void *c) {
  static int on = -1;
  if (on < 0) on = vt_cuda_switch_on("VT_ATTN_MMA");
  const uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
  return on && vt_cuda_bf16() && D <= 80 && D % 8 == 0 && any % 16 == 0;
}

// ---- the mma.sync kernels' variants ------------------------------------------------------------
// Rows per block: 64 (W = 4 warps) or 128 (8 warps: each streamed tile loaded once for twice the
// rows, fewer blocks fit on an SM). The backward's dS: made again in the dq kernel (S, P and dP
// from Q, K, V and dO, as the dk/dv kernel makes them), or stored (MMA_DS: the dk/dv kernel
// writes dS^T, bf16, B H N round16(N) elements of op scratch, and the dq kernel reads it: one
// product per score instead of three, no exponential; only up to MMA_DS_MAX bytes unless set).
// Which is faster depends on the GPU and the shape. VT_ATTN_ROWS=64|128 fixes the rows,
// VT_ATTN_DS=1|0 the stored dS; unset (or auto), the first call of each shape and direction
// times each variant left on its own operands (one warming launch each, then two between
// events; the host waits for it there, once per shape) and keeps the fastest for the process.
// All give the same bits (store_rows; S^T and S are the same sums), so the pick changes only
// the time: ranks or runs that pick differently still agree to the last bit. VT_ATTN_REPORT=1
// prints each pick with its times (tests/gpu/run.sh).
#define MMA_DS 16  // a variant: W, plus MMA_DS where the backward stores dS
#define MMA_DS_MAX ((size_t)1 << 30)
#define PICKS 32
typedef struct {
  int64_t B, N, H, D;
  int bwd, v;
} variant_pick;
static variant_pick g_picks[PICKS];
static int g_npicks = 0;

// W set by VT_ATTN_ROWS, or 0: timed per shape.
static int rows_fixed(void) {
  static int w = -1;
  if (w < 0) {
    const char *e = getenv("VT_ATTN_ROWS");
    const int is_auto = !e || !*e || strcmp(e, "auto") == 0;
    VT_CHECK(is_auto || strcmp(e, "64") == 0 || strcmp(e, "128") == 0,
             "VT_ATTN_ROWS=%s: give 64 or 128 rows per attention block, or auto (unset: the "
             "faster of the two, timed per shape)", e);
    w = is_auto ? 0 : strcmp(e, "128") == 0 ? 8 : 4;
  }
  return w;
}

// 1 (store dS) or 0 (make it again) set by VT_ATTN_DS, or -1: timed per shape.
static int ds_fixed(void) {
  static int d = -2;
  if (d == -2) {
    const char *e = getenv("VT_ATTN_DS");
    const int is_auto = !e || !*e || strcmp(e, "auto") == 0;
    VT_CHECK(is_auto || strcmp(e, "0") == 0 || strcmp(e, "1") == 0,
             "VT_ATTN_DS=%s: give 1 (the attention backward stores its score gradients), 0 "
             "(its dq kernel makes them again) or auto (unset: the faster, timed per shape)", e);
    d = is_auto ? -1 : e[0] == '1';
  }
  return d;
}

static void variant_name(char *buf, size_t size, int v, int bwd) {
  snprintf(buf, size, "%d rows%s", 16 * (v & (MMA_DS - 1)),
           !bwd ? "" : v & MMA_DS ? " + dS stored" : " + dS made again");
}

// The variant for this call of op (bwd: the backward's kernels; may_store: whether dS may be
// stored, which the caller decides as it carves dS's scratch): the only one the settings leave
// (4 warps where 8 warps' shared memory would not fit: D = 80's dq kernel on a GPU with 99 KiB
// a block), the one picked before for this shape, or the fastest of them, timed now. launch(v)
// runs the op's kernels in variant v; each launch rewrites the same outputs, adding into none.
template <typename L>
static int variant_for(const char *op, int bwd, int64_t B, int64_t N, int64_t H, int64_t D,
                       int may_store, L launch) {
  const int wf = rows_fixed(), df = bwd ? ds_fixed() : 0, nk = (int)((D + 15) / 16);
  const size_t need8 = bwd ? mma_smem(MMA_DQ, nk, 8) : mma_smem(MMA_FWD, nk, 8);
  int cand[4], n = 0;
  for (int w = 4; w <= 8; w += 4) {
    if (wf ? w != wf : w == 8 && need8 > smem_optin()) continue;
    for (int d = 0; d <= 1; d++)
      if (d ? may_store : df != 1) cand[n++] = w | (d ? MMA_DS : 0);
  }
  if (n == 1) return cand[0];
  for (int i = 0; i < g_npicks; i++) {
    const variant_pick *p = &g_picks[i];
    if (p->B == B && p->N == N && p->H == H && p->D == D && p->bwd == bwd) return p->v;
  }
  if (g_npicks == PICKS) return cand[0];
  enum { REPS = 2 };
  cudaEvent_t e[5];
  float t[4];
  for (int i = 0; i <= n; i++) VT_CUDA_CHECK(cudaEventCreateWithFlags(&e[i], cudaEventDefault));
  for (int i = 0; i < n; i++) launch(cand[i]);  // the first launches: limits raised, caches warm
  VT_CUDA_CHECK(cudaEventRecord(e[0], vt_cuda_stream()));
  for (int i = 0; i < n; i++) {
    for (int r = 0; r < REPS; r++) launch(cand[i]);
    VT_CUDA_CHECK(cudaEventRecord(e[i + 1], vt_cuda_stream()));
  }
  VT_CUDA_CHECK(cudaEventSynchronize(e[n]));
  int best = 0;
  for (int i = 0; i < n; i++) {
    VT_CUDA_CHECK(cudaEventElapsedTime(&t[i], e[i], e[i + 1]));
    if (t[i] < t[best]) best = i;
  }
  for (int i = 0; i <= n; i++) VT_CUDA_CHECK(cudaEventDestroy(e[i]));
  g_picks[g_npicks++] = variant_pick{B, N, H, D, bwd, cand[best]};
  const char *rep = getenv("VT_ATTN_REPORT");
  if (rep && strcmp(rep, "1") == 0) {
    char line[512], name[64];
    int k = snprintf(line, sizeof line, "vit3d: %s B=%lld N=%lld H=%lld D=%lld:", op,
                     (long long)B, (long long)N, (long long)H, (long long)D);
    for (int i = 0; i < n; i++) {
      variant_name(name, sizeof name, cand[i], bwd);
      k += snprintf(line + k, sizeof line - k, " %s %.3f ms,", name, t[i] / REPS);
    }
    variant_name(name, sizeof name, cand[best], bwd);
    fprintf(stderr, "%s kept %s\n", line, name);
  }
  return cand[best];
}

template <int NK, int W>
static void mma_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N, int64_t H,
                    int64_t D, const vt_dropout_mask &drop) {
  static int allowed;
  const dim3 grid = fa_grid("attention_fwd", B, N, H, D, 16 * W);
  const size_t smem = mma_smem(MMA_FWD, NK, W);
  fa_smem_allow("attention_fwd", (const void *)mma_fwd_kernel<NK, W>, smem, D, &allowed);
  mma_fwd_kernel<NK, W><<<grid, 32 * W, smem, vt_cuda_stream()>>>(
      (bf16_t *)out, lse, (const bf16_t *)qkv, (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D),
      drop, vt_hash_name("dropout"));
  VT_CUDA_CHECK_LAUNCH();
}

// mma_fwd or mma_bwd (F) with NK = Dp / 16 and W warps (4 or 8): a switch over the 10 kernels.
#define MMA_DISPATCH(F, D, W, ...)                                            \
  do {                                                                        \
    const int nk_ = (int)(((D) + 15) / 16), w8_ = (W) == 8;                   \
    if (nk_ == 1) w8_ ? F<1, 8>(__VA_ARGS__) : F<1, 4>(__VA_ARGS__);          \
    else if (nk_ == 2) w8_ ? F<2, 8>(__VA_ARGS__) : F<2, 4>(__VA_ARGS__);     \
    else if (nk_ == 3) w8_ ? F<3, 8>(__VA_ARGS__) : F<3, 4>(__VA_ARGS__);     \
    else if (nk_ == 4) w8_ ? F<4, 8>(__VA_ARGS__) : F<4, 4>(__VA_ARGS__);     \
    else w8_ ? F<5, 8>(__VA_ARGS__) : F<5, 4>(__VA_ARGS__);                   \
  } while (0)

extern "C" void vt_cuda_attention_fwd(float *out, float *lse, const float *qkv, int64_t B,
                                      int64_t N, int64_t H, int64_t D,
                                      const vt_dropout_mask *drop) {
  // bf16 (vt_ops.h): qkv and out are bf16 activations; fp32: fp32 tensors.
  if (mma_path(D, out, qkv, NULL)) {
    const vt_dropout_mask m = drop_arg(drop);
    auto launch = [&](int w) { MMA_DISPATCH(mma_fwd, D, w, out, lse, qkv, B, N, H, D, m); };
    launch(variant_for("attention_fwd", 0, B, N, H, D, 0, launch));
    return;
  }
  const int bf16 = vt_cuda_bf16(), nf = fa_nf("attention_fwd", D, bf16);
  if (bf16 && nf == 8) fwd<__nv_bfloat16, 8>(out, lse, qkv, B, N, H, D, drop_arg(drop));
  else if (bf16) fwd<__nv_bfloat16, 4>(out, lse, qkv, B, N, H, D, drop_arg(drop));
  else fwd<float, 4>(out, lse, qkv, B, N, H, D, drop_arg(drop));
}

extern "C" void vt_cuda_attention_bwd(float *dqkv, float *dbias, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      int64_t B, int64_t N, int64_t H, int64_t D,
                                      const vt_dropout_mask *drop) {
  // bf16 (vt_ops.h): dout and dqkv are bf16 activations as well.
  const vt_dropout_mask m = drop_arg(drop);
  if (mma_path(D, dout, qkv, out)) {
    // dS^T's scratch where a variant may store it (the first call's timing grows the op
    // scratch by it even where the pick makes dS again).
    const int lds = (int)((N + 15) & ~15), df = ds_fixed();
    const size_t ds_bytes = (size_t)(B * H * N) * lds * sizeof(bf16_t);
    const int may_store = df == 1 || (df < 0 && ds_bytes <= MMA_DS_MAX);
    float *delta, *part;
    bf16_t *ds;
    bwd_scratch(B, N, H, D, fa_tiles((int)N), dbias != NULL, &delta, &part,
                may_store ? ds_bytes : 0, &ds);
    auto launch = [&](int v) {
      bf16_t *dsv = v & MMA_DS ? ds : NULL;
      MMA_DISPATCH(mma_bwd, D, v & (MMA_DS - 1), dqkv, delta, part, dsv, lds, dout, qkv, out,
                   lse, B, N, H, D, m);
    };
    launch(variant_for("attention_bwd", 1, B, N, H, D, may_store, launch));
    bwd_bias(dbias, part, B * fa_tiles((int)N), 3 * H * D);
    return;
  }
  const int bf16 = vt_cuda_bf16(), nf = fa_nf("attention_bwd", D, bf16);
  if (bf16 && nf == 8) bwd<__nv_bfloat16, 8>(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, m);
  else if (bf16) bwd<__nv_bfloat16, 4>(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, m);
  else bwd<float, 4>(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, m);
}
