// attention_wmma.cu: the fused attention's WMMA kernels (attention.cu's opening comment): fp32
// precision, and bf16 where the mma.sync kernels do not apply (D > 80 or not a multiple of 8,
// unaligned tensors, VT_ATTN_MMA=0). Warp tile products on WMMA in bf16 or plain FMAs in fp32
// from the same shared-memory tiles; the forward in two passes over the keys; the backward's dq
// kernel per query tile, its dk/dv kernel per key tile. C-style CUDA, no STL. Must not depend on
// MPI, NCCL or the model.
#include <mma.h>

#include "attention_tiles.cuh"

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
// K V Q dO; S^T dP^T (then P^T dS^T); dK dV; lse delta
#define FA_DKV_SMEM fa_counts_of(4, 2, 0, 2, 2)

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

size_t vt_cuda_attention_wmma_smem(int64_t D, int bf16) {
  if (D < 1 || (bf16 && D > 128)) return SIZE_MAX;
  const int es = bf16 ? 2 : 4;
  const fa_dims d = fa_dims_of((int)D, es);
  const size_t fw = fa_bytes(d, es, FA_FWD_SMEM), dq = fa_bytes(d, es, FA_DQ_SMEM),
               dkv = fa_bytes(d, es, FA_DKV_SMEM);
  const size_t m = fw > dq ? fw : dq;
  return m > dkv ? m : dkv;
}

void vt_cuda_attention_wmma_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                                int64_t H, int64_t D, const vt_dropout_mask &drop) {
  const int bf16 = vt_cuda_bf16(), nf = fa_nf("attention_fwd", D, bf16);
  if (bf16 && nf == 8) fwd<__nv_bfloat16, 8>(out, lse, qkv, B, N, H, D, drop);
  else if (bf16) fwd<__nv_bfloat16, 4>(out, lse, qkv, B, N, H, D, drop);
  else fwd<float, 4>(out, lse, qkv, B, N, H, D, drop);
}

void vt_cuda_attention_wmma_bwd(float *dqkv, float *dbias, const float *dout, const float *qkv,
                                const float *out, const float *lse, int64_t B, int64_t N,
                                int64_t H, int64_t D, const vt_dropout_mask &drop) {
  const int bf16 = vt_cuda_bf16(), nf = fa_nf("attention_bwd", D, bf16);
  if (bf16 && nf == 8)
    bwd<__nv_bfloat16, 8>(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, drop);
  else if (bf16) bwd<__nv_bfloat16, 4>(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, drop);
  else bwd<float, 4>(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, drop);
}
