// attention.c: softmax(q k^T / sqrt(D)) v per (batch, head), forward and backward, in the fused
// (flash) form of vt_ops.h: the forward saves only each row's log-denominator lse, the backward
// recomputes the probabilities (and dropout's mask, from its Philox numbers). The reference of
// src/cuda/attention.cu: the same values and rounding points, computed here a whole (N, N) head
// at a time. GEMMs on strided views of the timm qkv layout (no copies). The (batch, head) pairs
// run in parallel, each with single-threaded GEMMs and its own scratch, so every pair's result
// is computed the same way whatever the thread count. At the end the one-query form of MAP
// pooling (latent_attention).
#include <math.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu.h"

static int thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

static int max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// The maximum and the sum of x[0..n), element j into running partial j % 16, the partials then
// combined pairwise: a fixed order (whatever the thread count) whose loops vectorise; one running
// sum waited out an addition's latency per element.
#define PARTS 16
static float max16(const float *x, int64_t n) {
  float a[PARTS];
  for (int k = 0; k < PARTS; k++) a[k] = x[0];
  int64_t j = 0;
  for (; j + PARTS <= n; j += PARTS)
    for (int k = 0; k < PARTS; k++) a[k] = x[j + k] > a[k] ? x[j + k] : a[k];
  for (int k = 0; j + k < n; k++) a[k] = x[j + k] > a[k] ? x[j + k] : a[k];
  for (int w = PARTS / 2; w > 0; w >>= 1)
    for (int k = 0; k < w; k++) a[k] = a[k + w] > a[k] ? a[k + w] : a[k];
  return a[0];
}
static float sum16(const float *x, int64_t n) {
  float a[PARTS] = {0};
  int64_t j = 0;
  for (; j + PARTS <= n; j += PARTS)
    for (int k = 0; k < PARTS; k++) a[k] += x[j + k];
  for (int k = 0; j + k < n; k++) a[k] += x[j + k];
  for (int w = PARTS / 2; w > 0; w >>= 1)
    for (int k = 0; k < w; k++) a[k] += a[k + w];
  return a[0];
}

// Each of the N rows of the scores s (N, N) in place: e_j = exp(s_j - m), m the row's maximum
// rounded up to a whole power of two of e's scale (vt_ops.h's unnormalised probabilities);
// inv = 1 / sum_j e_j and lse = m + log sum_j e_j.
static void exp_rows(float *s, float *lse, float *inv, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    float *r = s + i * N;
    const float mx = ceilf(max16(r, N) * 1.44269504088896341f) * 0.69314718055994531f;
    for (int64_t j = 0; j < N; j++) r[j] = vt_cpu_exp_nonpos(r[j] - mx);
    const float sum = sum16(r, N);
    lse[i] = mx + logf(sum);
    inv[i] = 1.0f / sum;
  }
}

// The number of element (b, h, 0, 0) of the attention's dropout mask (vt_ops.h).
static uint64_t drop_base(const vt_dropout_mask *drop, int64_t b, int64_t h, int64_t N) {
  return (uint64_t)(drop->first + (b * drop->width + h) * N * N);
}

void vt_cpu_attention_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                          int64_t H, int64_t D, const vt_dropout_mask *drop) {
  const int64_t C = H * D, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)D);
  // bf16 (vt_backend.h, vt_ops.h): both GEMMs read rounded copies of q, k, v and of the
  // unnormalised probabilities; out is stored as bfloat16, made in fp32 in each thread's scratch
  // first. Per thread: the (N, N) probabilities, the rows' 1 / sum, in bf16 the (N, D) out.
  const int bf16 = vt_cpu_bf16();
  const int64_t per = N * N + N + (bf16 ? N * D : 0);
  float *scratch = vt_cpu_scratch((size_t)(max_threads() * per + (bf16 ? B * N * ld : 0)));
  if (bf16) {
    float *rq = scratch + max_threads() * per;
    vt_cpu_widen_bf16(rq, qkv, B * N * ld);  // qkv: a bf16 activation (vt_ops.h)
    qkv = rq;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *q = qkv + b * N * ld + h * D, *k = q + C, *v = q + 2 * C;
      float *p = scratch + (int64_t)thread_id() * per, *inv = p + N * N, *o = inv + N;
      vt_cpu_sgemm_serial(0, 1, N, N, D, scale, q, ld, k, ld, 0.0f, p, N);  // (N, N) = q k^T
      exp_rows(p, lse + (b * H + h) * N, inv, N);
      if (drop) vt_cpu_dropout_fp32(p, N * N, drop_base(drop, b, h, N), drop);
      if (bf16)
        for (int64_t i = 0; i < N * N; i++) p[i] = vt_bf16_round(p[i]);
      // out = (e v) / l: the product into out itself in fp32, into o in bf16, then scaled
      float *dst = bf16 ? o : out + b * N * C + h * D;
      const int64_t ldd = bf16 ? D : C, at_out = b * N * C + h * D;
      vt_cpu_sgemm_serial(0, 0, N, D, N, 1.0f, p, N, v, ld, 0.0f, dst, ldd);
      for (int64_t i = 0; i < N; i++)
        for (int64_t d = 0; d < D; d++)
          vt_cpu_put(out, at_out + i * C + d, dst[i * ldd + d] * inv[i], bf16);
    }
}

void vt_cpu_attention_bwd(float *dqkv, float *dbias, const float *dout, const float *qkv,
                          const float *out, const float *lse, int64_t B, int64_t N, int64_t H,
                          int64_t D, const vt_dropout_mask *drop) {
  const int64_t C = H * D, ld = 3 * C, T = max_threads();
  const float scale = 1.0f / sqrtf((float)D);
  // Per thread: the probabilities and dS (N, N each) and delta (N). In bf16 also, made once up
  // front: qkv, dout and out widened (bf16 activations); and the fp32 dqkv, for the bias
  // gradient before it is stored as bf16.
  const int bf16 = vt_cpu_bf16();
  const int64_t per = 2 * N * N + N;
  float *scratch = vt_cpu_scratch((size_t)(T * per + (bf16 ? B * N * (2 * ld + 2 * C) : 0)));
  const float *dy_all = dout, *out_all = out;
  float *dst = dqkv;
  if (bf16) {
    float *rq = scratch + T * per, *rd = rq + B * N * ld, *ro = rd + B * N * C;
    vt_cpu_widen_bf16(rq, qkv, B * N * ld);
    vt_cpu_widen_bf16(rd, dout, B * N * C);
    vt_cpu_widen_bf16(ro, out, B * N * C);
    qkv = rq, dy_all = rd, out_all = ro, dst = ro + B * N * C;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *q = qkv + b * N * ld + h * D, *k = q + C, *v = q + 2 * C;
      const int64_t at = b * N * C + h * D;
      const float *dy = dy_all + at, *l = lse + (b * H + h) * N;
      float *dq = dst + b * N * ld + h * D, *dk = dq + C, *dv = dq + 2 * C;
      float *p = scratch + (int64_t)thread_id() * per, *ds = p + N * N, *delta = ds + N * N;
      for (int64_t i = 0; i < N; i++) {
        float s = 0.0f;
        for (int64_t d = 0; d < D; d++) s += dy[i * C + d] * out_all[at + i * C + d];
        delta[i] = s;
      }
      vt_cpu_sgemm_serial(0, 1, N, N, D, scale, q, ld, k, ld, 0.0f, p, N);  // s = scale q k^T
      vt_cpu_sgemm_serial(0, 1, N, N, D, 1.0f, dy, C, v, ld, 0.0f, ds, N);  // dp = dy v^T
      const uint64_t n0 = drop ? drop_base(drop, b, h, N) : 0;
      if (drop) vt_cpu_dropout_fp32(ds, N * N, n0, drop);  // dp through the mask
      // p = exp(s - lse) (s <= lse up to rounding); ds = p (dp - delta) in place over dp; in
      // bf16 ds rounded, then p (with dropout, d) rounded as the dv GEMM reads it.
      for (int64_t i = 0; i < N; i++) {
        const float li = l[i], di = delta[i];
        float *pr = p + i * N, *dr = ds + i * N;
        for (int64_t j = 0; j < N; j++) {
          pr[j] = vt_cpu_exp_nonpos(pr[j] - li);
          dr[j] = pr[j] * (dr[j] - di);
        }
      }
      if (drop) vt_cpu_dropout_fp32(p, N * N, n0, drop);
      if (bf16)
        for (int64_t i = 0; i < N * N; i++) {
          p[i] = vt_bf16_round(p[i]);
          ds[i] = vt_bf16_round(ds[i]);
        }
      vt_cpu_sgemm_serial(1, 0, N, D, N, 1.0f, p, N, dy, C, 0.0f, dv, ld);      // dv = p^T dy
      vt_cpu_sgemm_serial(0, 0, N, D, N, scale, ds, N, k, ld, 0.0f, dq, ld);    // dq = scale ds k
      vt_cpu_sgemm_serial(1, 0, N, D, N, scale, ds, N, q, ld, 0.0f, dk, ld);    // dk = scale ds^T q
    }
  if (dbias) vt_cpu_colsum_acc(dbias, dst, B * N, ld);  // the qkv bias gradient, from fp32
  if (!bf16) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < B * N * ld; i++) vt_cpu_put(dqkv, i, dst[i], 1);
}

// ---- one latent query per head (MAP pooling) ---------------------------------------------------
// The same values and rounding points as above with a single query row; the (sample, head)
// pairs run in parallel, each over its N tokens in order.

void vt_cpu_latent_attention_fwd(float *out, float *lse, const float *q, const float *kv,
                                 int64_t B, int64_t N, int64_t H, int64_t D) {
  const int64_t C = H * D, ld = 2 * C;
  const float scale = 1.0f / sqrtf((float)D);
  const int bf16 = vt_cpu_bf16();
  float *scratch = vt_cpu_scratch((size_t)(max_threads() * N));  // each pair's scores
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      float *s = scratch + (int64_t)thread_id() * N, mx = -INFINITY, sum = 0.0f;
      for (int64_t t = 0; t < N; t++) {
        const int64_t at = (b * N + t) * ld + h * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; d++)
          dot += vt_cpu_get(q, h * D + d, bf16) * vt_cpu_get(kv, at + d, bf16);
        s[t] = scale * dot;
        mx = s[t] > mx ? s[t] : mx;
      }
      for (int64_t t = 0; t < N; t++) {
        const float e = expf(s[t] - mx);
        sum += e;
        s[t] = bf16 ? vt_bf16_round(e) : e;
      }
      lse[b * H + h] = mx + logf(sum);
      const float inv = 1.0f / sum;
      for (int64_t d = 0; d < D; d++) {
        float o = 0.0f;
        for (int64_t t = 0; t < N; t++)
          o += s[t] * vt_cpu_get(kv, (b * N + t) * ld + C + h * D + d, bf16);
        vt_cpu_put(out, b * C + h * D + d, o * inv, bf16);
      }
    }
}

void vt_cpu_latent_attention_bwd(float *dq, float *dkv, float *dbias, const float *dout,
                                 const float *q, const float *kv, const float *out,
                                 const float *lse, int64_t B, int64_t N, int64_t H, int64_t D) {
  const int64_t C = H * D, ld = 2 * C;
  const float scale = 1.0f / sqrtf((float)D);
  const int bf16 = vt_cpu_bf16();
  // Scratch: each sample's query gradient (B, C), summed over the samples in order at the end;
  // each thread's ds (N); in bf16 also the fp32 dkv (for the bias gradient before rounding).
  const int64_t T = max_threads();
  float *scratch = vt_cpu_scratch((size_t)(B * C + T * N + (bf16 ? B * N * ld : 0)));
  float *dq_b = scratch, *ds_all = dq_b + B * C, *dst = bf16 ? ds_all + T * N : dkv;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      float *ds = ds_all + (int64_t)thread_id() * N, delta = 0.0f;
      const int64_t o_at = b * C + h * D;
      for (int64_t d = 0; d < D; d++)
        delta += vt_cpu_get(dout, o_at + d, bf16) * vt_cpu_get(out, o_at + d, bf16);
      for (int64_t t = 0; t < N; t++) {
        const int64_t at = (b * N + t) * ld + h * D;
        float s = 0.0f, dp = 0.0f;
        for (int64_t d = 0; d < D; d++) {
          s += vt_cpu_get(q, h * D + d, bf16) * vt_cpu_get(kv, at + d, bf16);
          dp += vt_cpu_get(dout, o_at + d, bf16) * vt_cpu_get(kv, at + C + d, bf16);
        }
        const float p = expf(scale * s - lse[b * H + h]), g = p * (dp - delta);
        const float pr = bf16 ? vt_bf16_round(p) : p;
        ds[t] = bf16 ? vt_bf16_round(g) : g;
        for (int64_t d = 0; d < D; d++) {
          dst[at + d] = scale * ds[t] * vt_cpu_get(q, h * D + d, bf16);
          dst[at + C + d] = pr * vt_cpu_get(dout, o_at + d, bf16);
        }
      }
      for (int64_t d = 0; d < D; d++) {
        float acc = 0.0f;
        for (int64_t t = 0; t < N; t++)
          acc += ds[t] * vt_cpu_get(kv, (b * N + t) * ld + h * D + d, bf16);
        dq_b[o_at + d] = scale * acc;
      }
    }
  for (int64_t c = 0; c < C; c++) {
    float acc = 0.0f;
    for (int64_t b = 0; b < B; b++) acc += dq_b[b * C + c];
    dq[c] = acc;
  }
  if (dbias) vt_cpu_colsum_acc(dbias, dst, B * N, ld);  // the kv bias gradient, from fp32
  if (!bf16) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < B * N * ld; i++) vt_cpu_put(dkv, i, dst[i], 1);
}
