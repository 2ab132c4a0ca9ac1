// attention.c: softmax(q k^T / sqrt(D)) v per (batch, head), forward and backward, with the
// GEMMs on strided views of the timm qkv layout (no copies). The (batch, head) pairs run in
// parallel, each with single-threaded GEMMs and its own scratch, so every pair's result is
// computed the same way whatever the thread count.
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

// Softmax of each of the `rows` rows of length N, in place.
static void softmax_rows(float *s, int64_t rows, int64_t N) {
  for (int64_t i = 0; i < rows; i++) {
    float *r = s + i * N, mx = r[0], sum = 0.0f;
    for (int64_t j = 1; j < N; j++) mx = r[j] > mx ? r[j] : mx;
    for (int64_t j = 0; j < N; j++) {
      r[j] = expf(r[j] - mx);
      sum += r[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < N; j++) r[j] *= inv;
  }
}

void vt_cpu_attention_fwd(float *out, float *att, const float *qkv, int64_t B, int64_t N,
                          int64_t H, int64_t D) {
  const int64_t C = H * D, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)D);
  // bf16 (vt_backend.h, vt_ops.h): both GEMMs read rounded copies of q, k, v and of the
  // probabilities, which att stores as bfloat16, as out is; each thread makes its probabilities
  // (N, N) and its head's output (N, D) in fp32 in its own scratch first.
  const int bf16 = vt_cpu_bf16();
  const int64_t per = N * N + N * D;
  float *rq = NULL, *rp = NULL;
  if (bf16) {
    rq = vt_cpu_scratch((size_t)(B * N * ld + max_threads() * per));
    rp = rq + B * N * ld;
    vt_cpu_widen_bf16(rq, qkv, B * N * ld);  // qkv: a bf16 activation (vt_ops.h)
    qkv = rq;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *q = qkv + b * N * ld + h * D, *k = q + C, *v = q + 2 * C;
      const int64_t at = (b * H + h) * N * N;
      float *p = bf16 ? rp + (int64_t)thread_id() * per : att + at;
      vt_cpu_sgemm_serial(0, 1, N, N, D, scale, q, ld, k, ld, 0.0f, p, N);  // (N, N) = q k^T
      softmax_rows(p, N, N);
      if (bf16) {
        uint16_t *pb = (uint16_t *)att + at;
        for (int64_t i = 0; i < N * N; i++)
          pb[i] = vt_bf16_bits(p[i]), p[i] = vt_bf16_widen(pb[i]);
      }
      if (!bf16) {
        vt_cpu_sgemm_serial(0, 0, N, D, N, 1.0f, p, N, v, ld, 0.0f, out + b * N * C + h * D, C);
        continue;
      }
      float *o = p + N * N;
      vt_cpu_sgemm_serial(0, 0, N, D, N, 1.0f, p, N, v, ld, 0.0f, o, D);
      const int64_t at_out = b * N * C + h * D;
      for (int64_t i = 0; i < N; i++)
        for (int64_t d = 0; d < D; d++) vt_cpu_put(out, at_out + i * C + d, o[i * D + d], 1);
    }
}

void vt_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att,
                          int64_t B, int64_t N, int64_t H, int64_t D) {
  const int64_t C = H * D, ld = 3 * C, T = max_threads();
  const float scale = 1.0f / sqrtf((float)D);
  // Per thread: dS (N, N), and in bf16 the stored probabilities widened to fp32 (N, N); in bf16
  // also rounded copies of qkv and dout for every (image, head), made once up front.
  const int bf16 = vt_cpu_bf16();
  const int64_t per = bf16 ? 2 * N * N : N * N;
  float *scratch = vt_cpu_scratch((size_t)(T * per + (bf16 ? B * N * (ld + C) : 0)));
  if (bf16) {
    float *rq = scratch + T * per, *rd = rq + B * N * ld;
    vt_cpu_widen_bf16(rq, qkv, B * N * ld);  // qkv: a bf16 activation (vt_ops.h)
    vt_cpu_round_bf16(rd, dout, B * N * C);
    qkv = rq, dout = rd;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *q = qkv + b * N * ld + h * D, *k = q + C, *v = q + 2 * C;
      const float *dy = dout + b * N * C + h * D;
      const int64_t at = (b * H + h) * N * N;
      float *dq = dqkv + b * N * ld + h * D, *dk = dq + C, *dv = dq + 2 * C;
      float *ds = scratch + (int64_t)thread_id() * per;
      const float *p = att + at;
      if (bf16) {
        float *w = ds + N * N;
        const uint16_t *pb = (const uint16_t *)att + at;
        for (int64_t i = 0; i < N * N; i++) w[i] = vt_bf16_widen(pb[i]);
        p = w;
      }
      vt_cpu_sgemm_serial(1, 0, N, D, N, 1.0f, p, N, dy, C, 0.0f, dv, ld);  // dv = p^T dy
      vt_cpu_sgemm_serial(0, 1, N, N, D, 1.0f, dy, C, v, ld, 0.0f, ds, N);  // dp = dy v^T
      // Softmax backward in place: ds = p * (dp - rowsum(p * dp)), with the stored p.
      for (int64_t i = 0; i < N; i++) {
        const float *pr = p + i * N;
        float *r = ds + i * N, dot = 0.0f;
        for (int64_t j = 0; j < N; j++) dot += pr[j] * r[j];
        for (int64_t j = 0; j < N; j++) r[j] = pr[j] * (r[j] - dot);
      }
      if (bf16)
        for (int64_t i = 0; i < N * N; i++) ds[i] = vt_bf16_round(ds[i]);
      vt_cpu_sgemm_serial(0, 0, N, D, N, scale, ds, N, k, ld, 0.0f, dq, ld);  // dq = scale ds k
      vt_cpu_sgemm_serial(1, 0, N, D, N, scale, ds, N, q, ld, 0.0f, dk, ld);  // dk = scale ds^T q
    }
}
