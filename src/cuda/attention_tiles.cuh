// attention_tiles.cuh: what the fused attention's two kernel families share (private to
// attention.cu, attention_wmma.cu and attention_mma.cu): the tile size, bf16 and fp32 element
// access, the probabilities' dropout mask, the rows of an accumulator stored (with the qkv bias
// gradient's per-tile column sums), the grids, shared-memory limits and op scratch of their
// launches, and the two families' entry points. attention.cu's opening comment describes the
// kernels. C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#ifndef VT_ATTENTION_TILES_CUH
#define VT_ATTENTION_TILES_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>

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


// ---- dropout of the probabilities -------------------------------------------------------------
// The mask's numbers (vt_ops.h): element (b, h, i, j) is first + (b * width + h) N^2 + i N + j of
// stream (seed, vt_hash_name("dropout"), site); dropped when its uniform is below p. A kernel
// gets the mask by value with p 0 when nothing drops.

static __device__ __forceinline__ uint64_t drop_base(const vt_dropout_mask &m, int b, int h,
                                                     int N) {
  return (uint64_t)(m.first + ((int64_t)b * m.width + h) * N * N);
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
    if (vt_rng_unit(vt_philox_lane(c, n)) >= m.p) bits |= 1u << j;
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

typedef __nv_bfloat16 bf16_t;

// Elements of an (R, Dp) operand tile in shared memory (row stride Dp + 8), Dp = 16 NK.
static __host__ __device__ constexpr int mma_tile(int NK, int R = FA_TILE) {
  return R * (16 * NK + 8);
}

// ---- host side ----------------------------------------------------------------------------------

// The grid of a kernel over (image, head) pairs and tiles of N, and a check that its shared
// memory fits: asks the device once and allows the kernel to use that much (past the default
// 48 KiB) once per kernel.
static inline dim3 fa_grid(const char *op, int64_t B, int64_t N, int64_t H, int64_t D,
                           int rows = FA_TILE) {
  VT_CHECK(B * H <= INT_MAX && (N + rows - 1) / rows <= 65535 && 3 * H * D <= INT_MAX,
           "%s: B=%lld N=%lld H=%lld D=%lld are too large for one grid", op, (long long)B,
           (long long)N, (long long)H, (long long)D);
  return dim3((unsigned)(B * H), (unsigned)((N + rows - 1) / rows));
}

// The GPU's opt-in shared memory per block, in bytes.
static inline size_t smem_optin(void) {
  static int optin = -1;
  if (optin < 0) {
    int dev = 0;
    VT_CUDA_CHECK(cudaGetDevice(&dev));
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  }
  return (size_t)optin;
}

static inline void fa_smem_allow(const char *op, const void *kernel, size_t need, int64_t D,
                                 int *allowed) {
  VT_CHECK(need <= smem_optin(),
           "%s: head dim D=%lld needs %zu bytes of shared memory per block in %s precision, "
           "more than this GPU's %zu (vit3d train's start-up checks this, "
           "vt_cuda_attention_smem): use more heads of a smaller dim",
           op, (long long)D, need, vt_cuda_bf16() ? "bf16" : "fp32", smem_optin());
  if ((size_t)*allowed < need) {
    VT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    *allowed = (int)need;
  }
}

// The backward's op scratch: delta (B, H, N), and with dbias the bias partials, one row of 3HD
// per (image, tile of N): each block writes its head's columns of its row; bwd_bias then sums
// the rows in order into dbias. Then ds_bytes for the mma.sync backward's stored dS^T, at *ds
// (NULL without; ds may be NULL when ds_bytes is 0). *nbytes: the scratch it needs, where
// nbytes is given, and then nothing is carved.
static inline void bwd_scratch(int64_t B, int64_t N, int64_t H, int64_t D, unsigned tiles,
                               int dbias, float **delta, float **part, size_t ds_bytes = 0,
                               bf16_t **ds = NULL, size_t *nbytes = NULL) {
  const int64_t nchunk = B * tiles, ld = 3 * H * D;
  size_t end = 0;
  const size_t at_delta = vt_cuda_carve(&end, (size_t)(B * H * N) * sizeof(float));
  const size_t at_part = vt_cuda_carve(&end, dbias ? (size_t)(nchunk * ld) * sizeof(float) : 0);
  const size_t at_ds = vt_cuda_carve(&end, ds_bytes);
  if (nbytes) {
    *nbytes = end;
    return;
  }
  char *base = (char *)vt_cuda_scratch(end);
  *delta = (float *)(base + at_delta), *part = dbias ? (float *)(base + at_part) : NULL;
  if (ds) *ds = ds_bytes ? (bf16_t *)(base + at_ds) : NULL;
}

static inline void bwd_bias(float *dbias, const float *part, int64_t nchunk, int64_t ld) {
  if (!dbias) return;
  colsum_final(dbias, part, NULL, NULL, nchunk, ld);
}

// The mma.sync kernels' dynamic shared memory in bytes for NK = Dp / 16 and W warps (the layouts
// in the kernels' comments): the forward's Q and two buffers each of K and V; the dq kernel's
// Q, dO and O, two buffers each of K and V, and two rows of 16 W statistics; the dk/dv kernel's
// K and V, two buffers each of Q and dO, and four rows of 64 statistics; the stored-dS dq
// kernel's two buffers each of K and dS^T, or its fp32 dQ rows after them.
enum { MMA_FWD, MMA_DQ, MMA_DKV, MMA_DQS };
static inline size_t mma_smem(int kernel, int NK, int W) {
  const size_t own = mma_tile(NK, 16 * W) * sizeof(bf16_t),
               streamed = mma_tile(NK) * sizeof(bf16_t);
  if (kernel == MMA_FWD) return own + 4 * streamed;
  if (kernel == MMA_DQ) return 3 * own + 4 * streamed + 2 * 16 * W * sizeof(float);
  if (kernel == MMA_DKV) return 2 * own + 4 * streamed + 4 * FA_TILE * sizeof(float);
  const size_t loop = 2 * streamed + 2 * mma_tile(W) * sizeof(bf16_t),
               rows = (size_t)16 * W * (16 * NK + 4) * sizeof(float);
  return loop > rows ? loop : rows;
}

// The kernels' launches for one call, on the current stream: the WMMA kernels (fp32, or bf16
// where the mma.sync ones do not apply) and the mma.sync kernels with W warps a block (4 or 8),
// their backward's delta and part from bwd_scratch, dS^T stored at ds (row stride lds) or, with
// ds NULL, made again (mma_bwd).
void vt_cuda_attention_wmma_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                                int64_t H, int64_t D, const vt_dropout_mask &drop);
// The most shared memory per block the WMMA kernels take for head dim D in bf16 or fp32 (their
// forward, dq and dk/dv kernels), SIZE_MAX where bf16 cannot take D (fa_nf): for the start-up
// check (vt_cuda_attention_smem).
size_t vt_cuda_attention_wmma_smem(int64_t D, int bf16);
void vt_cuda_attention_wmma_bwd(float *dqkv, float *dbias, const float *dout, const float *qkv,
                                const float *out, const float *lse, int64_t B, int64_t N,
                                int64_t H, int64_t D, const vt_dropout_mask &drop);
void vt_cuda_attention_mma_fwd(int W, float *out, float *lse, const float *qkv, int64_t B,
                               int64_t N, int64_t H, int64_t D, const vt_dropout_mask &drop);
void vt_cuda_attention_mma_bwd(int W, float *dqkv, float *delta, float *part, bf16_t *ds, int lds,
                               const float *dout, const float *qkv, const float *out,
                               const float *lse, int64_t B, int64_t N, int64_t H, int64_t D,
                               const vt_dropout_mask &drop);

#endif  // VT_ATTENTION_TILES_CUH
