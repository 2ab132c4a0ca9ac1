// embed.c: patchify (the data half of patch embedding), prefix tokens (class, registers) plus
// position embedding, class-token and mean pooling.
#include <string.h>

#include "cpu.h"

void vt_cpu_patchify_fwd(float *patches, const float *img, int64_t B, int64_t S, int64_t P) {
  const int64_t G = S / P, PP = P * P;  // G x G patches per image
  const int bf16 = vt_cpu_bf16();         // patches: a bf16 activation (vt_ops.h)
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < G * G; g++) {
      int64_t gy = g / G, gx = g % G;
      const int64_t at = (b * G * G + g) * 3 * PP;
      for (int64_t ch = 0; ch < 3; ch++)
        for (int64_t y = 0; y < P; y++) {
          const float *src = img + ((b * 3 + ch) * S + gy * P + y) * S + gx * P;
          if (!bf16) {
            memcpy(patches + at + ch * PP + y * P, src, (size_t)P * sizeof(float));
            continue;
          }
          for (int64_t x = 0; x < P; x++) vt_cpu_put(patches, at + ch * PP + y * P + x, src[x], 1);
        }
    }
}

void vt_cpu_patchify_bwd(float *dimg, const float *dpatches, int64_t B, int64_t S, int64_t P) {
  // Patches do not overlap, so the backward is the inverse permutation.
  const int64_t G = S / P, PP = P * P;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < G * G; g++) {
      int64_t gy = g / G, gx = g % G;
      const float *src = dpatches + (b * G * G + g) * 3 * PP;
      for (int64_t ch = 0; ch < 3; ch++)
        for (int64_t y = 0; y < P; y++)
          memcpy(dimg + ((b * 3 + ch) * S + gy * P + y) * S + gx * P, src + ch * PP + y * P,
                 (size_t)P * sizeof(float));
    }
}

void vt_cpu_embed_fwd(float *x, const float *patch_out, const float *prefix, const float *pos,
                      int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t n = 0; n < N; n++) {
      const float *src = n < T ? prefix + n * C : patch_out + (b * (N - T) + n - T) * C;
      float *dst = x + (b * N + n) * C;
      if (n < pos0) {
        memcpy(dst, src, (size_t)C * sizeof(float));
        continue;
      }
      const float *p = pos + (n - pos0) * C;
      for (int64_t c = 0; c < C; c++) dst[c] = src[c] + p[c];
    }
}

void vt_cpu_embed_bwd(float *dpatch_out, float *dprefix, float *dpos, const float *dx, int64_t B,
                      int64_t N, int64_t T, int64_t pos0, int64_t C) {
  if (dpatch_out) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++)
      memcpy(dpatch_out + b * (N - T) * C, dx + (b * N + T) * C,
             (size_t)((N - T) * C) * sizeof(float));
  }
  // Sum over the batch in order, one thread per token row: independent of the thread count.
#pragma omp parallel for schedule(static)
  for (int64_t n = pos0; n < (dpos ? N : pos0); n++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t c = 0; c < C; c++) dpos[(n - pos0) * C + c] += dx[(b * N + n) * C + c];
  for (int64_t n = 0; n < T; n++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t c = 0; c < C; c++) dprefix[n * C + c] += dx[(b * N + n) * C + c];
}

void vt_cpu_cls_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t C) {
  for (int64_t b = 0; b < B; b++) memcpy(out + b * C, x + b * N * C, (size_t)C * sizeof(float));
}

void vt_cpu_cls_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N, int64_t C) {
  memset(dx, 0, (size_t)(B * N * C) * sizeof(float));
  for (int64_t b = 0; b < B; b++) memcpy(dx + b * N * C, dout + b * C, (size_t)C * sizeof(float));
}

// Each (b, c) sums its tokens in order, one float at a time: the CUDA twin's order too.
void vt_cpu_mean_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      float acc = 0.0f;
      for (int64_t n = T; n < N; n++) acc += x[(b * N + n) * C + c];
      out[b * C + c] = acc / (float)(N - T);
    }
}

void vt_cpu_mean_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N, int64_t T,
                          int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++)
        dx[(b * N + n) * C + c] = n < T ? 0.0f : dout[b * C + c] / (float)(N - T);
}
