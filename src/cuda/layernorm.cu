// layernorm.cu: LayerNorm forward and backward over the last dimension on CUDA, their forms
// fused with the residual add, and the LayerNorm-then-mean pooling of a gap head, twin of
// src/cpu/layernorm.c (fp32, the caller's eps, mean and rstd saved for the backward; QK-norm,
// the same file's last op there, is qk_norm.cu's).
// Rows are independent, so a warp owns a row; the parameter gradients are column sums over all
// rows, done in two fixed-order stages (no float atomics) so they are the same bits every run.
// C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include <limits.h>

#include "colsum.cuh"
#include "cuda_common.h"
#include "cuda_ops.h"

#include "../vt_ops.h"

#define LN_WARPS 8  // rows (warps) per block of the row kernels
// A lane's elements c, c + 32, ... of a row in batches of LN_BATCH, each batch loaded before any
// of it is stored: a store the compiler cannot prove apart from the next loads kept one load's
// latency per element (the sums still add the elements in order).
#define LN_BATCH 4

static unsigned row_blocks(int64_t M) { return vt_cuda_row_blocks(M, LN_WARPS, "layernorm"); }

// The row kernels' two forms (template V): with V = 0 a lane loops over its elements c, c + 32,
// ... (any C); with V = 1 .. LN_VMAX it holds its share of the row in registers as V float4s
// (columns 4 (lane + 32 j) .. + 3, j < V), each loaded once in a 16-byte load, for C a multiple
// of 4 up to 128 LN_VMAX with the rows and parameters 16-byte aligned (ln_vec). A lane's sums
// add its elements in its column order, then vt_warp_sum across the warp.
#define LN_VMAX 8  // up to C = 1024 (ViT-L)

template <int V>
static __device__ __forceinline__ void ln_load(float4 v[V], const float *row, int lane,
                                               int64_t C) {
#pragma unroll
  for (int j = 0; j < V; j++) {
    const int64_t c = 4 * (lane + 32 * j);
    v[j] = c < C ? *(const float4 *)(row + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// out is a bf16 activation in bf16 precision (vt_ops.h).
// Two passes over the row (mean, then the centred variance) as the CPU twin does: the one-pass
// E[x^2] - E[x]^2 loses digits when the mean is large against the spread. With add (the fused
// residual add), the row is inp + add, written to sum during the first pass (each lane reads
// back only what it wrote) and normalised from there; sum may alias inp.
template <int V>
static __global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd,
                                            const float *inp, const float *add, float *sum,
                                            const float *weight, const float *bias, int64_t M,
                                            int64_t C, int bf16, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= M) return;  // row is the same for the whole warp: the shuffles below stay full
  if constexpr (V == 0) {
    const float *x = inp + row * C;
    float s = 0.0f;
    if (add) {
      float *xs = sum + row * C;
      const float *b = add + row * C;
      for (int64_t c0 = lane; c0 < C; c0 += 32 * LN_BATCH) {
        float v[LN_BATCH];
#pragma unroll
        for (int k = 0; k < LN_BATCH; k++) {
          const int64_t c = c0 + 32 * k;
          v[k] = c < C ? x[c] + b[c] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < LN_BATCH; k++)
          if (c0 + 32 * k < C) xs[c0 + 32 * k] = v[k], s += v[k];
      }
      x = xs;
    } else {
      for (int64_t c = lane; c < C; c += 32) s += x[c];
    }
    const float mu = vt_warp_sum(s) / (float)C;
    float var = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
      const float d = x[c] - mu;
      var += d * d;
    }
    var = vt_warp_sum(var);
    const float r = 1.0f / sqrtf(var / (float)C + eps);
    for (int64_t c0 = lane; c0 < C; c0 += 32 * LN_BATCH) {
      float v[LN_BATCH];
#pragma unroll
      for (int k = 0; k < LN_BATCH; k++) {
        const int64_t c = c0 + 32 * k;
        v[k] = c < C ? (x[c] - mu) * r * weight[c] + bias[c] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < LN_BATCH; k++)
        if (c0 + 32 * k < C) vt_put(out, row * C + c0 + 32 * k, v[k], bf16);
    }
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = r;
    }
  } else {
    float4 x[V];
    ln_load<V>(x, inp + row * C, lane, C);
    if (add) {  // x + add, kept in sum (a lane writes only what it read: sum may alias inp)
      float4 a[V];
      ln_load<V>(a, add + row * C, lane, C);
#pragma unroll
      for (int j = 0; j < V; j++) {
        x[j] = make_float4(x[j].x + a[j].x, x[j].y + a[j].y, x[j].z + a[j].z, x[j].w + a[j].w);
        const int64_t c = 4 * (lane + 32 * j);
        if (c < C) *(float4 *)(sum + row * C + c) = x[j];
      }
    }
    float s = 0.0f;  // past C the vectors are zeros
#pragma unroll
    for (int j = 0; j < V; j++) s += x[j].x, s += x[j].y, s += x[j].z, s += x[j].w;
    const float mu = vt_warp_sum(s) / (float)C;
    float var = 0.0f;
#pragma unroll
    for (int j = 0; j < V; j++) {
      if (4 * (lane + 32 * j) >= C) continue;
      float e[4];
      vt_f4_get(e, x[j]);
#pragma unroll
      for (int k = 0; k < 4; k++) var += (e[k] - mu) * (e[k] - mu);
    }
    var = vt_warp_sum(var);
    const float r = 1.0f / sqrtf(var / (float)C + eps);
#pragma unroll
    for (int j = 0; j < V; j++) {
      const int64_t c = 4 * (lane + 32 * j);
      if (c >= C) continue;
      float e[4], w[4], b[4];
      vt_f4_get(e, x[j]);
      vt_f4_get(w, *(const float4 *)(weight + c));
      vt_f4_get(b, *(const float4 *)(bias + c));
#pragma unroll
      for (int k = 0; k < 4; k++) e[k] = (e[k] - mu) * r * w[k] + b[k];
      if (bf16)
        *(uint2 *)((__nv_bfloat16 *)out + row * C + c) =
            make_uint2(vt_pack_bf16x2(e[0], e[1]), vt_pack_bf16x2(e[2], e[3]));
      else
        *(float4 *)(out + row * C + c) = vt_f4_make(e);
    }
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = r;
    }
  }
}

// A warp's row of the input gradient, register form (V >= 1: the lane's share of dout and inp
// loaded as ln_load does): dx = r (g - mean(g) - xhat mean(g xhat)) with g = dout * weight,
// written, or with add added to what dx holds. g is rounded on its own (__fmul_rn) in both
// places: fused into an FMA it would carry its rounding error into g - mean(g), which rstd then
// multiplies (with C = 1 the CPU's 0 became 6e-5).
template <int V>
static __device__ __forceinline__ void ln_dinp_row(float *dx, const float4 (&dy)[V],
                                                   const float4 (&x)[V], const float *weight,
                                                   float mu, float r, int lane, int64_t C,
                                                   int add) {
  float sg = 0.0f, sgx = 0.0f;
#pragma unroll
  for (int j = 0; j < V; j++) {
    const int64_t c = 4 * (lane + 32 * j);
    if (c >= C) continue;
    float g[4], e[4], w[4];
    vt_f4_get(g, dy[j]);
    vt_f4_get(e, x[j]);
    vt_f4_get(w, *(const float4 *)(weight + c));
#pragma unroll
    for (int k = 0; k < 4; k++) {
      g[k] = __fmul_rn(g[k], w[k]);  // unfused, so that g - mean(g) is the CPU's (C = 1: 0)
      sg += g[k];
      sgx += g[k] * (e[k] - mu) * r;
    }
  }
  sg = vt_warp_sum(sg) / (float)C;
  sgx = vt_warp_sum(sgx) / (float)C;
#pragma unroll
  for (int j = 0; j < V; j++) {
    const int64_t c = 4 * (lane + 32 * j);
    if (c >= C) continue;
    float g[4], e[4], w[4], o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    vt_f4_get(g, dy[j]);
    vt_f4_get(e, x[j]);
    vt_f4_get(w, *(const float4 *)(weight + c));
    if (add) vt_f4_get(o, *(const float4 *)(dx + c));
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float v = r * (__fmul_rn(g[k], w[k]) - sg - (e[k] - mu) * r * sgx);
      o[k] = add ? o[k] + v : v;
    }
    *(float4 *)(dx + c) = vt_f4_make(o);
  }
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, per row; written,
// or with add added to what dinp holds (the fused residual gradient).
template <int V>
static __global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *weight, const float *mean,
                                             const float *rstd, int64_t M, int64_t C, int add) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  if constexpr (V == 0) {
    const float *x = inp + row * C, *dy = dout + row * C;
    const float mu = mean[row], r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
      const float g = __fmul_rn(dy[c], weight[c]);
      sg += g;
      sgx += g * (x[c] - mu) * r;
    }
    sg = vt_warp_sum(sg) / (float)C;
    sgx = vt_warp_sum(sgx) / (float)C;
    float *dx = dinp + row * C;
    for (int64_t c0 = lane; c0 < C; c0 += 32 * LN_BATCH) {
      float v[LN_BATCH];
#pragma unroll
      for (int k = 0; k < LN_BATCH; k++) {
        const int64_t c = c0 + 32 * k;
        const float w =
            c < C ? r * (__fmul_rn(dy[c], weight[c]) - sg - (x[c] - mu) * r * sgx) : 0.0f;
        v[k] = add && c < C ? dx[c] + w : w;
      }
#pragma unroll
      for (int k = 0; k < LN_BATCH; k++)
        if (c0 + 32 * k < C) dx[c0 + 32 * k] = v[k];
    }
  } else {
    float4 dy[V], x[V];
    ln_load<V>(dy, dout + row * C, lane, C);
    ln_load<V>(x, inp + row * C, lane, C);
    ln_dinp_row<V>(dinp + row * C, dy, x, weight, mean[row], rstd[row], lane, C, add);
  }
}

// V for the row kernels: the register form's where C is a multiple of 4 up to 128 LN_VMAX and
// every given pointer (NULL: not given) is 16-byte aligned, else 0 (the loops).
static int ln_vec(int64_t C, const void *p0, const void *p1, const void *p2, const void *p3,
                  const void *p4, const void *p5) {
  const uintptr_t any = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3 |
                        (uintptr_t)p4 | (uintptr_t)p5;
  return C % 4 == 0 && C <= 128 * LN_VMAX && any % 16 == 0 ? (int)((C + 127) / 128) : 0;
}

// Launch the row kernel of V = v (0 .. LN_VMAX): each instantiation launches its own or passes
// v on to the next.
template <int V>
static void ln_fwd_launch(int v, float *out, float *mean, float *rstd, const float *inp,
                          const float *add, float *sum, const float *weight, const float *bias,
                          int64_t M, int64_t C, int bf16, float eps) {
  if (v == V)
    layernorm_fwd_kernel<V><<<row_blocks(M), 32 * LN_WARPS, 0, vt_cuda_stream()>>>(
        out, mean, rstd, inp, add, sum, weight, bias, M, C, bf16, eps);
  else if constexpr (V < LN_VMAX)
    ln_fwd_launch<V + 1>(v, out, mean, rstd, inp, add, sum, weight, bias, M, C, bf16, eps);
}
template <int V>
static void ln_dinp_launch(int v, float *dinp, const float *dout, const float *inp,
                           const float *weight, const float *mean, const float *rstd, int64_t M,
                           int64_t C, int add) {
  if (v == V)
    layernorm_dinp_kernel<V><<<row_blocks(M), 32 * LN_WARPS, 0, vt_cuda_stream()>>>(
        dinp, dout, inp, weight, mean, rstd, M, C, add);
  else if constexpr (V < LN_VMAX)
    ln_dinp_launch<V + 1>(v, dinp, dout, inp, weight, mean, rstd, M, C, add);
}

static void layernorm_fwd_rows(float *out, float *mean, float *rstd, const float *inp,
                               const float *add, float *sum, const float *weight,
                               const float *bias, int64_t M, int64_t C, int bf16, float eps) {
  ln_fwd_launch<0>(ln_vec(C, out, inp, add, sum, weight, bias), out, mean, rstd, inp, add, sum,
                   weight, bias, M, C, bf16, eps);
  VT_CUDA_CHECK_LAUNCH();
}

// Parameter gradients, stage 1: the rows are cut into chunks of LN_CHUNK (a constant, so the
// summation order depends on M alone, never on the GPU or the launch). Block (x, chunk) owns 32
// VEC adjacent columns (coalesced reads) of one chunk, VEC per thread (4: one 16-byte load per
// row and tensor, for C a multiple of 4 and aligned data); its LN_Y lanes per column walk the
// chunk's rows y, y + LN_Y, ... in order, then one thread per column adds the lane partials in
// lane order (the same bits for either VEC).
#define LN_CHUNK 256
#define LN_Y 8
template <int VEC>
static __global__ void layernorm_param_partial_kernel(float *pw, float *pb, const float *dout,
                                                      const float *inp, const float *mean,
                                                      const float *rstd, int64_t M, int64_t C) {
  __shared__ float sw[LN_Y][32 * VEC + 1], sb[LN_Y][32 * VEC + 1];
  const int64_t c0 = ((int64_t)blockIdx.x * 32 + threadIdx.x) * VEC, chunk = blockIdx.y;
  const int64_t m0 = chunk * LN_CHUNK, m1 = m0 + LN_CHUNK < M ? m0 + LN_CHUNK : M;
  float aw[VEC], ab[VEC];
#pragma unroll
  for (int k = 0; k < VEC; k++) aw[k] = ab[k] = 0.0f;
  if (c0 < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += LN_Y) {
      float dy[VEC], x[VEC];
      if constexpr (VEC == 4) {
        vt_f4_get(dy, *(const float4 *)(dout + m * C + c0));
        vt_f4_get(x, *(const float4 *)(inp + m * C + c0));
      } else {
        dy[0] = dout[m * C + c0], x[0] = inp[m * C + c0];
      }
      const float mu = mean[m], r = rstd[m];
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        aw[k] += dy[k] * (x[k] - mu) * r;
        ab[k] += dy[k];
      }
    }
#pragma unroll
  for (int k = 0; k < VEC; k++) {
    sw[threadIdx.y][VEC * threadIdx.x + k] = aw[k];
    sb[threadIdx.y][VEC * threadIdx.x + k] = ab[k];
  }
  __syncthreads();
  const int t = threadIdx.y * 32 + threadIdx.x;  // 32 LN_Y threads, 32 VEC columns
  const int64_t c = (int64_t)blockIdx.x * 32 * VEC + t;
  if (t < 32 * VEC && c < C) {
    float w = 0.0f, b = 0.0f;
    for (int y = 0; y < LN_Y; y++) w += sw[y][t], b += sb[y][t];
    pw[chunk * C + c] = w;
    pb[chunk * C + c] = b;
  }
}

// The chunk's partials of one parameter: each warp's (a: its lanes' 4 V columns) into row y of
// ln_part, then dst[c] = the rows 0 .. LN_Y-1 of column c added in order.
template <int V>
static __device__ __forceinline__ void ln_part_store(float *dst, const float (&a)[4 * V],
                                                     float *ln_part, int lane, int y, int64_t C) {
#pragma unroll
  for (int j = 0; j < V; j++) {
    const int64_t c = 4 * (lane + 32 * j);
    if (c < C) *(float4 *)(ln_part + y * C + c) = vt_f4_make(a + 4 * j);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += 32 * LN_Y) {
    float t = 0.0f;
    for (int k = 0; k < LN_Y; k++) t += ln_part[k * C + c];
    dst[c] = t;
  }
  __syncthreads();
}

// Stage 1 fused with the input gradient (register form, V >= 1): block = the chunk of LN_CHUNK
// rows, its LN_Y warps taking rows y, y + LN_Y, ... in order as the partial kernel's lanes do,
// each making the row's dinp (ln_dinp_row) and adding the row into its lane's column partials
// (the same expression), then the LN_Y warps' partials added in warp order through shared memory
// (LN_Y C floats, dynamic): the same bits as layernorm_dinp_kernel then the partial kernel, with
// dout and inp read once instead of twice.
template <int V>
static __global__ void __launch_bounds__(32 * LN_Y)
    layernorm_bwd_fused_kernel(float *dinp, float *pw, float *pb, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int64_t M, int64_t C, int add) {
  extern __shared__ __align__(16) float ln_part[];  // [LN_Y][C]
  const int lane = threadIdx.x & 31, y = threadIdx.x >> 5;
  const int64_t chunk = blockIdx.x, m0 = chunk * LN_CHUNK;
  const int64_t m1 = m0 + LN_CHUNK < M ? m0 + LN_CHUNK : M;
  float aw[4 * V], ab[4 * V];
#pragma unroll
  for (int k = 0; k < 4 * V; k++) aw[k] = ab[k] = 0.0f;
  for (int64_t row = m0 + y; row < m1; row += LN_Y) {
    float4 dy[V], x[V];
    ln_load<V>(dy, dout + row * C, lane, C);
    ln_load<V>(x, inp + row * C, lane, C);
    const float mu = mean[row], r = rstd[row];
    ln_dinp_row<V>(dinp + row * C, dy, x, weight, mu, r, lane, C, add);
#pragma unroll
    for (int j = 0; j < V; j++) {
      float g[4], e[4];
      vt_f4_get(g, dy[j]);
      vt_f4_get(e, x[j]);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        aw[4 * j + k] += g[k] * (e[k] - mu) * r;
        ab[4 * j + k] += g[k];
      }
    }
  }
  ln_part_store<V>(pw + chunk * C, aw, ln_part, lane, y, C);  // the weight's, then the bias's
  ln_part_store<V>(pb + chunk * C, ab, ln_part, lane, y, C);
}
template <int V>
static void ln_bwd_fused_launch(int v, float *dinp, float *pw, float *pb, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int64_t M, int64_t C, int add,
                                int64_t nchunk) {
  if (v == V)
    layernorm_bwd_fused_kernel<V><<<(unsigned)nchunk, 32 * LN_Y,
                                    (size_t)(LN_Y * C) * sizeof(float), vt_cuda_stream()>>>(
        dinp, pw, pb, dout, inp, weight, mean, rstd, M, C, add);
  else if constexpr (V < LN_VMAX)
    ln_bwd_fused_launch<V + 1>(v, dinp, pw, pb, dout, inp, weight, mean, rstd, M, C, add,
                               nchunk);
}

// Whether the backward fuses the partials into the input gradient's pass (VT_LN_FUSED=0: two
// passes, for tests/gpu/run.sh's A/B; the same bits either way).
static int ln_fused_enabled(void) {
  static int on = -1;
  if (on < 0) on = vt_cuda_switch_on("VT_LN_FUSED");
  return on;
}

extern "C" void vt_cuda_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int64_t M,
                                      int64_t C, float eps, int act) {
  layernorm_fwd_rows(out, mean, rstd, inp, NULL, NULL, weight, bias, M, C,
                     act && vt_cuda_bf16(), eps);
}

extern "C" void vt_cuda_add_layernorm_fwd(float *sum, float *out, float *mean, float *rstd,
                                          const float *a, const float *b, const float *weight,
                                          const float *bias, int64_t M, int64_t C, float eps) {
  layernorm_fwd_rows(out, mean, rstd, a, b, sum, weight, bias, M, C, vt_cuda_bf16(), eps);
}

static void layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int64_t M, int64_t C, int add) {
  cudaStream_t st = vt_cuda_stream();
  const int64_t nchunk = (M + LN_CHUNK - 1) / LN_CHUNK;
  VT_CHECK(nchunk <= 65535 && (C + 31) / 32 <= INT_MAX,
           "layernorm_bwd: M=%lld C=%lld exceed the parameter-gradient grid", (long long)M,
           (long long)C);
  if (nchunk == 0) return;
  float *pw = (float *)vt_cuda_scratch((size_t)(2 * nchunk * C) * sizeof(float));
  float *pb = pw + nchunk * C;
  const int v = ln_vec(C, dinp, dout, inp, weight, NULL, NULL);
  if (v > 0 && ln_fused_enabled()) {  // stage 1 in the input gradient's pass
    ln_bwd_fused_launch<1>(v, dinp, pw, pb, dout, inp, weight, mean, rstd, M, C, add, nchunk);
  } else {  // the input gradient, then stage 1 (4 columns a thread where aligned)
    ln_dinp_launch<0>(v, dinp, dout, inp, weight, mean, rstd, M, C, add);
    VT_CUDA_CHECK_LAUNCH();
    if (C % 4 == 0 && ((uintptr_t)dout | (uintptr_t)inp) % 16 == 0)
      layernorm_param_partial_kernel<4><<<dim3((unsigned)((C + 127) / 128), (unsigned)nchunk),
                                          dim3(32, LN_Y), 0, st>>>(pw, pb, dout, inp, mean,
                                                                   rstd, M, C);
    else
      layernorm_param_partial_kernel<1><<<dim3((unsigned)((C + 31) / 32), (unsigned)nchunk),
                                          dim3(32, LN_Y), 0, st>>>(pw, pb, dout, inp, mean,
                                                                   rstd, M, C);
  }
  VT_CUDA_CHECK_LAUNCH();
  colsum_final(dweight, pw, dbias, pb, nchunk, C);  // stage 2 (colsum.cuh)
}

extern "C" void vt_cuda_layernorm_bwd(float *dinp, float *dweight, float *dbias,
                                      const float *dout, const float *inp, const float *weight,
                                      const float *mean, const float *rstd, int64_t M,
                                      int64_t C) {
  layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C, 0);
}

extern "C" void vt_cuda_layernorm_bwd_add(float *dinp, float *dweight, float *dbias,
                                          const float *dout, const float *inp,
                                          const float *weight, const float *mean,
                                          const float *rstd, int64_t M, int64_t C) {
  layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C, 1);
}

// ---- LayerNorm of every patch token, then their mean (vt_norm_mean_pool_fwd): a block per
// sample; its warps take the patch tokens' statistics (as layernorm_fwd_kernel), then each
// thread sums a column's xhat over the tokens in order. ----
static __global__ void norm_mean_pool_fwd_kernel(float *out, float *pooled, float *mean,
                                                 float *rstd, const float *x, const float *weight,
                                                 const float *bias, int64_t N, int64_t T,
                                                 int64_t C, int bf16, float eps) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.x, Np = N - T;
  const float *xb = x + (b * N + T) * C;
  for (int64_t n = warp; n < Np; n += LN_WARPS) {  // the same n for the whole warp
    const float *row = xb + n * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32) s += row[c];
    const float mu = vt_warp_sum(s) / (float)C;
    float var = 0.0f;
    for (int64_t c = lane; c < C; c += 32) var += (row[c] - mu) * (row[c] - mu);
    var = vt_warp_sum(var);
    if (lane == 0) {
      mean[b * Np + n] = mu;
      rstd[b * Np + n] = 1.0f / sqrtf(var / (float)C + eps);
    }
  }
  __syncthreads();  // the block's statistics, written to global memory, are visible to it all
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t n = 0; n < Np; n++)
      acc += (xb[n * C + c] - mean[b * Np + n]) * rstd[b * Np + n];
    const float p = acc / (float)Np;
    pooled[b * C + c] = p;
    vt_put(out, b * C + c, p * weight[c] + bias[c], bf16);
  }
}

// The backward's input gradient: a block per sample, mean(g) by the block's tree sum, then a warp
// per token row (layernorm_dinp_kernel with the sample's one g); prefix rows zero. A lane reads
// each element of its row before writing it, so dx may alias x.
static __global__ void norm_mean_pool_dinp_kernel(float *dx, const float *dout, const float *x,
                                                  const float *weight, const float *mean,
                                                  const float *rstd, int64_t N, int64_t T,
                                                  int64_t C) {
  __shared__ float sh[VT_TREE_THREADS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.x, Np = N - T;
  const float *dy = dout + b * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += dy[c] * weight[c] / (float)Np;
  const float sg = vt_block_sum(s, sh) / (float)C;
  for (int64_t n = warp; n < N; n += LN_WARPS) {
    float *d = dx + (b * N + n) * C;
    if (n < T) {
      for (int64_t c = lane; c < C; c += 32) d[c] = 0.0f;
      continue;
    }
    const float *xr = x + (b * N + n) * C;
    const float mu = mean[b * Np + n - T], r = rstd[b * Np + n - T];
    float sgx = 0.0f;
    for (int64_t c = lane; c < C; c += 32) sgx += dy[c] * weight[c] / (float)Np * (xr[c] - mu) * r;
    sgx = vt_warp_sum(sgx) / (float)C;
    for (int64_t c = lane; c < C; c += 32) {
      const float xh = (xr[c] - mu) * r;
      d[c] = r * (dy[c] * weight[c] / (float)Np - sg - xh * sgx);
    }
  }
}

// The parameter gradients: a thread per column sums over the samples in order (the CPU's order:
// the same bits).
static __global__ void norm_mean_pool_param_kernel(float *dweight, float *dbias, const float *dout,
                                                   const float *pooled, int64_t B, int64_t C) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float aw = 0.0f, ab = 0.0f;
  for (int64_t b = 0; b < B; b++) {
    aw += dout[b * C + c] * pooled[b * C + c];
    ab += dout[b * C + c];
  }
  dweight[c] += aw;
  dbias[c] += ab;
}

extern "C" void vt_cuda_norm_mean_pool_fwd(float *out, float *pooled, float *mean, float *rstd,
                                           const float *x, const float *weight, const float *bias,
                                           int64_t B, int64_t N, int64_t T, int64_t C,
                                           float eps) {
  VT_CHECK(B <= INT_MAX, "norm_mean_pool: B=%lld samples are too many for one grid", (long long)B);
  norm_mean_pool_fwd_kernel<<<(unsigned)B, LN_WARPS * 32, 0, vt_cuda_stream()>>>(
      out, pooled, mean, rstd, x, weight, bias, N, T, C, vt_cuda_bf16(), eps);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_norm_mean_pool_bwd(float *dx, float *dweight, float *dbias,
                                           const float *dout, const float *x, const float *pooled,
                                           const float *weight, const float *mean,
                                           const float *rstd, int64_t B, int64_t N, int64_t T,
                                           int64_t C) {
  static_assert(LN_WARPS * 32 == VT_TREE_THREADS, "the dinp kernel's block sum wants 256 threads");
  VT_CHECK(B <= INT_MAX, "norm_mean_pool: B=%lld samples are too many for one grid", (long long)B);
  cudaStream_t st = vt_cuda_stream();
  norm_mean_pool_dinp_kernel<<<(unsigned)B, LN_WARPS * 32, 0, st>>>(dx, dout, x, weight, mean,
                                                                    rstd, N, T, C);
  VT_CUDA_CHECK_LAUNCH();
  norm_mean_pool_param_kernel<<<(unsigned)((C + 255) / 256), 256, 0, st>>>(dweight, dbias, dout,
                                                                           pooled, B, C);
  VT_CUDA_CHECK_LAUNCH();
}
