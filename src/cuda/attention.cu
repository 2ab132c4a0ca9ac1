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
// whose tiles stream in by cp.async, double-buffered (attention_mma.cu).
// The kernels live in attention_wmma.cu and attention_mma.cu, what they share in
// attention_tiles.cuh; this file picks the family and the mma.sync variant for each call (MAP
// pooling's one-query form is latent_attention.cu). C-style CUDA, no STL. Must not depend on
// MPI, NCCL or the model.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_tiles.cuh"
#include "variant_pick.h"

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
// All are meant to give the same bits (store_rows; S^T and S are the same sums), so that the
// pick changes only the time: the timing also hashes each variant's outputs, and keeps only
// variants whose bits are the first candidate's (vt_variant_pick), so ranks and runs agree to
// the last bit even on a GPU whose tensor cores round S^T and S apart (a warning names the
// shape then). VT_ATTN_REPORT=1 prints each pick with its times (tests/gpu/run.sh).
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

// A hash of the bits of n 32-bit words, position included, into *out: one block, a strided
// share per thread, then a fixed tree (64-bit sums, so the order would not matter anyway).
static __global__ void bits_hash_kernel(unsigned long long *out, const uint32_t *w, int64_t n) {
  __shared__ unsigned long long sh[VT_TREE_THREADS];
  const int t = threadIdx.x;
  unsigned long long sum = 0;
  for (int64_t i = t; i < n; i += VT_TREE_THREADS) {
    unsigned long long x = ((unsigned long long)i << 32) ^ w[i];  // splitmix64's finaliser
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    sum += x ^ (x >> 31);
  }
  sh[t] = sum;
  __syncthreads();
  for (int k = VT_TREE_THREADS / 2; k > 0; k >>= 1) {
    if (t < k) sh[t] += sh[t + k];
    __syncthreads();
  }
  if (t == 0) *out = sh[0];
}

// An op's outputs, whose bits the variants must agree on (bytes a multiple of 4; 0: none).
typedef struct {
  const void *p;
  size_t bytes;
} variant_out;
enum { VARIANT_OUTS = 2 };

// The variant picked before for this shape and direction, or -1.
static int picked(int64_t B, int64_t N, int64_t H, int64_t D, int bwd) {
  for (int i = 0; i < g_npicks; i++) {
    const variant_pick *p = &g_picks[i];
    if (p->B == B && p->N == N && p->H == H && p->D == D && p->bwd == bwd) return p->v;
  }
  return -1;
}

// The variant for this call of op (bwd: the backward's kernels; may_store: whether dS may be
// stored, which the caller decides as it carves dS's scratch): the only one the settings leave
// (4 warps where 8 warps' shared memory would not fit: D = 80's dq kernel on a GPU with 99 KiB
// a block), the one picked before for this shape, or the fastest of those whose outputs' bits
// (outs) agree with the first candidate's, timed now. launch(v) runs the op's kernels in variant
// v; each launch rewrites the same outputs, adding into none.
template <typename L>
static int variant_for(const char *op, int bwd, int64_t B, int64_t N, int64_t H, int64_t D,
                       int may_store, const variant_out (&outs)[VARIANT_OUTS], L launch) {
  const int wf = rows_fixed(), df = bwd ? ds_fixed() : 0, nk = (int)((D + 15) / 16);
  const size_t need8 = bwd ? mma_smem(MMA_DQ, nk, 8) : mma_smem(MMA_FWD, nk, 8);
  int cand[4], n = 0;
  for (int w = 4; w <= 8; w += 4) {
    if (wf ? w != wf : w == 8 && need8 > smem_optin()) continue;
    for (int d = 0; d <= 1; d++)
      if (d ? may_store : df != 1) cand[n++] = w | (d ? MMA_DS : 0);
  }
  if (n == 1) return cand[0];
  // (A pick that stores dS where there is no room for it now: the first candidate, whose bits
  // every pick has.)
  const int known = picked(B, N, H, D, bwd);
  if (known >= 0) return known & MMA_DS && !may_store ? cand[0] : known;
  if (g_npicks == PICKS) return cand[0];
  // Each variant's first launch (limits raised, caches warm), its outputs hashed; then each
  // timed between events.
  static unsigned long long *hashes = NULL;  // [4][VARIANT_OUTS] on the device, made once
  if (!hashes) VT_CUDA_CHECK(cudaMalloc((void **)&hashes, 4 * VARIANT_OUTS * sizeof *hashes));
  cudaStream_t st = vt_cuda_stream();
  VT_CUDA_CHECK(cudaMemsetAsync(hashes, 0, 4 * VARIANT_OUTS * sizeof *hashes, st));
  for (int i = 0; i < n; i++) {
    launch(cand[i]);
    for (int r = 0; r < VARIANT_OUTS; r++) {
      if (!outs[r].bytes) continue;
      bits_hash_kernel<<<1, VT_TREE_THREADS, 0, st>>>(
          hashes + i * VARIANT_OUTS + r, (const uint32_t *)outs[r].p, (int64_t)(outs[r].bytes / 4));
      VT_CUDA_CHECK_LAUNCH();
    }
  }
  enum { REPS = 2 };
  cudaEvent_t e[5];
  float t[4];
  for (int i = 0; i <= n; i++) VT_CUDA_CHECK(cudaEventCreateWithFlags(&e[i], cudaEventDefault));
  VT_CUDA_CHECK(cudaEventRecord(e[0], st));
  for (int i = 0; i < n; i++) {
    for (int r = 0; r < REPS; r++) launch(cand[i]);
    VT_CUDA_CHECK(cudaEventRecord(e[i + 1], st));
  }
  VT_CUDA_CHECK(cudaEventSynchronize(e[n]));
  unsigned long long h[4 * VARIANT_OUTS];
  VT_CUDA_CHECK(cudaMemcpyAsync(h, hashes, sizeof h, cudaMemcpyDeviceToHost, st));  // waits
  uint64_t bits[4];
  for (int i = 0; i < n; i++) {
    VT_CUDA_CHECK(cudaEventElapsedTime(&t[i], e[i], e[i + 1]));
    bits[i] = h[i * VARIANT_OUTS] * 0x100000001b3ull ^ h[i * VARIANT_OUTS + 1];
  }
  for (int i = 0; i <= n; i++) VT_CUDA_CHECK(cudaEventDestroy(e[i]));
  int agree = 1;
  const int best = vt_variant_pick(n, bits, t, &agree);
  g_picks[g_npicks++] = variant_pick{B, N, H, D, bwd, cand[best]};
  const char *rep = getenv("VT_ATTN_REPORT");
  if (!agree || (rep && strcmp(rep, "1") == 0)) {
    char line[640], name[64];
    int k = snprintf(line, sizeof line, "%s B=%lld N=%lld H=%lld D=%lld:", op, (long long)B,
                     (long long)N, (long long)H, (long long)D);
    for (int i = 0; i < n; i++) {
      variant_name(name, sizeof name, cand[i], bwd);
      k += snprintf(line + k, sizeof line - k, " %s %.3f ms%s,", name, t[i] / REPS,
                    bits[i] == bits[0] ? "" : " (other bits)");
    }
    variant_name(name, sizeof name, cand[best], bwd);
    if (agree)
      fprintf(stderr, "vit3d: %s kept %s\n", line, name);
    else
      vt_log_warn("%s kept %s: on this GPU the kernel variants marked do not give the first's "
                  "bits, so only those that do are kept (runs and ranks still agree to the last "
                  "bit); VT_ATTN_ROWS and VT_ATTN_DS fix a variant", line, name);
  }
  return cand[best];
}

// For the start-up check (vt_backend_attention_fits): the most shared memory per block the
// kernels that would run for head dim D take, and the GPU's opt-in limit. In bf16 with D <= 80 a
// multiple of 8, the mma.sync kernels (the rows VT_ATTN_ROWS fixes, else 64: 128 only where it
// fits, variant_for; the stored-dS dq kernel unless VT_ATTN_DS=0); else the WMMA ones. Not
// counted: the WMMA fallback for tensors that are not 16-byte aligned (mma_path), which the
// model's activations are; fa_smem_allow still stops such a call with a message.
extern "C" size_t vt_cuda_attention_smem(int64_t D, int bf16, size_t *limit) {
  *limit = smem_optin();
  if (!(bf16 && D <= 80 && D % 8 == 0 && vt_cuda_switch_on("VT_ATTN_MMA")))
    return vt_cuda_attention_wmma_smem(D, bf16);
  const int nk = (int)((D + 15) / 16), w = rows_fixed() == 8 ? 8 : 4;
  size_t need = 0;
  for (int k = MMA_FWD; k <= MMA_DQS; k++) {
    if (k == MMA_DQS && ds_fixed() == 0) continue;
    const size_t n = mma_smem(k, nk, w);
    if (n > need) need = n;
  }
  return need;
}

extern "C" void vt_cuda_attention_fwd(float *out, float *lse, const float *qkv, int64_t B,
                                      int64_t N, int64_t H, int64_t D,
                                      const vt_dropout_mask *drop) {
  // bf16 (vt_ops.h): qkv and out are bf16 activations; fp32: fp32 tensors.
  if (mma_path(D, out, qkv, NULL)) {
    const vt_dropout_mask m = drop_arg(drop);
    auto launch = [&](int w) { vt_cuda_attention_mma_fwd(w, out, lse, qkv, B, N, H, D, m); };
    const variant_out outs[VARIANT_OUTS] = {{out, (size_t)(B * N * H * D) * sizeof(bf16_t)},
                                            {lse, (size_t)(B * H * N) * sizeof(float)}};
    launch(variant_for("attention_fwd", 0, B, N, H, D, 0, outs, launch));
    return;
  }
  vt_cuda_attention_wmma_fwd(out, lse, qkv, B, N, H, D, drop_arg(drop));
}

extern "C" void vt_cuda_attention_bwd(float *dqkv, float *dbias, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      int64_t B, int64_t N, int64_t H, int64_t D,
                                      const vt_dropout_mask *drop) {
  // bf16 (vt_ops.h): dout and dqkv are bf16 activations as well.
  const vt_dropout_mask m = drop_arg(drop);
  if (mma_path(D, dout, qkv, out)) {
    // dS^T's scratch where a variant may store it: not where this shape's pick makes dS again,
    // nor (unless VT_ATTN_DS=1 asks for it) where the GPU has no memory for it.
    const int lds = (int)((N + 15) & ~15), df = ds_fixed(), known = picked(B, N, H, D, 1);
    const size_t ds_bytes = (size_t)(B * H * N) * lds * sizeof(bf16_t);
    int may_store = df == 1 || (df < 0 && ds_bytes <= MMA_DS_MAX && (known < 0 || known & MMA_DS));
    float *delta, *part;
    bf16_t *ds;
    const unsigned tiles = fa_tiles((int)N);
    if (may_store && df < 0) {
      size_t nbytes = 0;
      bwd_scratch(B, N, H, D, tiles, dbias != NULL, &delta, &part, ds_bytes, &ds, &nbytes);
      may_store = vt_cuda_scratch_try(nbytes) != NULL;
    }
    bwd_scratch(B, N, H, D, tiles, dbias != NULL, &delta, &part, may_store ? ds_bytes : 0, &ds);
    auto launch = [&](int v) {
      bf16_t *dsv = v & MMA_DS ? ds : NULL;
      vt_cuda_attention_mma_bwd(v & (MMA_DS - 1), dqkv, delta, part, dsv, lds, dout, qkv, out,
                                lse, B, N, H, D, m);
    };
    const int64_t nchunk = B * fa_tiles((int)N);
    const variant_out outs[VARIANT_OUTS] = {
        {dqkv, (size_t)(B * N * 3 * H * D) * sizeof(bf16_t)},
        {part, dbias ? (size_t)(nchunk * 3 * H * D) * sizeof(float) : 0}};
    const int v = variant_for("attention_bwd", 1, B, N, H, D, may_store, outs, launch);
    launch(v);
    bwd_bias(dbias, part, nchunk, 3 * H * D);
    // The first call timed a variant that stores dS and picked one that makes it again: the
    // scratch's room for dS (up to MMA_DS_MAX) goes, the next op's scratch allocated anew.
    if (may_store && !(v & MMA_DS) && picked(B, N, H, D, 1) == v) vt_cuda_scratch_shed();
    return;
  }
  vt_cuda_attention_wmma_bwd(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, m);
}
