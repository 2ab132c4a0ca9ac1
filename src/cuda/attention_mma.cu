// attention_mma.cu: the fused attention's kernels for bf16 with D up to 80 on PTX mma.sync
// (attention.cu's opening comment; the section below says how they work): forward in one pass,
// backward with dS made again or stored, 64 or 128 rows a block (attention.cu's variant_for
// picks). C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include "attention_mma.cuh"

// ---- bf16 on mma.sync, D up to 80 ---------------------------------------------------------------
// The same rounding points and dropout as attention_wmma.cu's kernels (the forward in one pass),
// but a warp's tile products are PTX mma.sync m16n8k16 (vt_mma16816) whose fragments stay in
// registers: scores, probabilities and their gradients never go through shared memory; only the
// tiles of the operands do. A lane holds, of each 8-column block j of a 16-row score tile, rows g
// and g + 8 (g = lane / 4), columns 8j + 2t and the next (t = lane % 4): exactly the A operand
// layout of the next product's probabilities (two blocks per 16-wide k step), so p and dS go from
// accumulators to operands in registers. Operand tiles stay row-major as the heads lie in memory,
// bf16 rows of Dp + 8 elements (16-byte aligned, and ldmatrix's 8 rows fall in distinct bank
// groups); ldmatrix reads every fragment, transposed (_trans) where a product reads a tile along
// its rows (V in P V; K in dS K; dO, Q in P^T dO, dS^T Q). The streamed tiles come by cp.async into
// two buffers: the copies for the next step are in flight while this step computes, one barrier
// pair per step. Selected for bf16 with D <= 80 and the heads in whole 16-byte chunks (D a multiple
// of 8: ViT-S/B/L, and ViT-H/14's 80; mma_path); VT_ATTN_MMA=0 keeps the WMMA kernels. NK = Dp /
// 16; at NK 5 the dk/dv kernel takes 255 registers (storing dS, 4 bytes spilled; nvcc 13:
// cuda_kernel_resources prints every kernel's). A block has W warps of 16 rows each: its own rows
// (queries; keys for dk/dv) are 16 W, 64 or 128 (more rows per block load each streamed 64-row tile
// for more of them, fewer warps fit on an SM; variant_for picks per shape by timing both); the
// streamed tiles have 64 rows. The backward's dq kernel makes S, P and dP again from Q, K, V and dO
// (three products and an exponential per score for one product of its own), or, where variant_for
// times it faster, reads the bf16 dS^T that the dk/dv kernel wrote out (mma_dqs_kernel: one product
// per score; 2 bytes per score written and read; the same bits). Their exponentials are base 2 on
// the SFU (vt_ex2): scores are taken as y = s scale log2 e, the row maxima and log-sums kept in
// that base, lse stored natural as ever; at D = 64 an exponential by expf cost about as much as the
// score's 64 multiply-adds on the tensor cores. Their pieces (copies, fragments, products, dropout)
// are attention_mma.cuh's.

// The forward in one pass over the T key tiles (flash_fwd_kernel's two passes' values): each
// step makes q k^T of key tile s, moves each row's running maximum M (base 2, a whole number:
// vt_ops.h's m / ln 2) up to the tile's, scaling O and l by 2^(M_old - M_new) where it moves
// (exact), then adds e v and e to the rows' O and l, e = 2^(y - M). Shared memory: Q (16 W
// rows), then two buffers of K, then two of V (64 rows each). DROP: drop.p > 0 (mma_fwd).
template <int NK, int W, bool DROP>
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
  const uint64_t nbase = DROP ? drop_base(drop, b, h, N) : 0;
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
              if (DROP)
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
              bool kept = true;  // one draw for dS and P
              if (drop.p > 0.0f) kept = drop_kept(drop, stream, n), d = drop_by(drop, kept, d);
              dv[jj][i] = p * (d - tD[c]);
              pv[jj][i] = drop.p > 0.0f ? drop_by(drop, kept, p) : p;
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

template <int NK, int W, bool DROP>
static void mma_fwd_launch(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                           int64_t H, int64_t D, const vt_dropout_mask &drop) {
  static int allowed;
  const dim3 grid = fa_grid("attention_fwd", B, N, H, D, 16 * W);
  const size_t smem = mma_smem(MMA_FWD, NK, W);
  fa_smem_allow("attention_fwd", (const void *)mma_fwd_kernel<NK, W, DROP>, smem, D, &allowed);
  mma_fwd_kernel<NK, W, DROP><<<grid, 32 * W, smem, vt_cuda_stream()>>>(
      (bf16_t *)out, lse, (const bf16_t *)qkv, (int)N, (int)H, (int)D, 1.0f / sqrtf((float)D),
      drop, vt_hash_name("dropout"));
  VT_CUDA_CHECK_LAUNCH();
}

// Without dropout the forward is a kernel of its own: the Philox code left out, it takes fewer
// registers (D = 64, 4 warps: 128 against 162 with it, nvcc 13), so more blocks fit on an SM.
template <int NK, int W>
static void mma_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N, int64_t H,
                    int64_t D, const vt_dropout_mask &drop) {
  if (drop.p > 0.0f)
    mma_fwd_launch<NK, W, true>(out, lse, qkv, B, N, H, D, drop);
  else
    mma_fwd_launch<NK, W, false>(out, lse, qkv, B, N, H, D, drop);
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

void vt_cuda_attention_mma_fwd(int W, float *out, float *lse, const float *qkv, int64_t B,
                               int64_t N, int64_t H, int64_t D, const vt_dropout_mask &drop) {
  MMA_DISPATCH(mma_fwd, D, W, out, lse, qkv, B, N, H, D, drop);
}

void vt_cuda_attention_mma_bwd(int W, float *dqkv, float *delta, float *part, bf16_t *ds, int lds,
                               const float *dout, const float *qkv, const float *out,
                               const float *lse, int64_t B, int64_t N, int64_t H, int64_t D,
                               const vt_dropout_mask &drop) {
  MMA_DISPATCH(mma_bwd, D, W, dqkv, delta, part, ds, lds, dout, qkv, out, lse, B, N, H, D, drop);
}
