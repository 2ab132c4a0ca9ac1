// cpu.h: the CPU backend's functions, one group per src/cpu/<op>.c (each has a cuda/<op>.cu
// twin with the same shapes). Shapes and semantics are those of src/vt_ops.h.
// Must not depend on MPI, CUDA or the model.
#ifndef VT_CPU_H
#define VT_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../vt_backend.h"

// Row-major C = alpha * op(A) @ op(B) + beta * C; op(X) = X or X^T. OpenBLAS when built with
// VT_BLAS, plain loops otherwise. C is (M, N); op(A) (M, K); op(B) (K, N). vt_cpu_sgemm splits
// C over the OpenMP threads; the _serial form runs on the calling thread (inside a parallel loop).
void vt_cpu_sgemm_serial(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc);
void vt_cpu_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc);

// bfloat16 rounding of a float (round to nearest, ties to even; NaN stays NaN, overflow goes to
// infinity), kept in a float: the value a bf16 tensor core operand has.
static inline float vt_bf16_round(float x) {
  union { float f; uint32_t u; } v = {x};
  if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu))
    v.u |= 0x00400000u;  // a NaN: keep it quiet, whatever bits the mantissa's tail had
  else
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
  v.u &= 0xffff0000u;
  return v.f;
}

// The bits of vt_bf16_round(x) as a bfloat16 (what a bf16 tensor stores), and back.
static inline uint16_t vt_bf16_bits(float x) {
  union { float f; uint32_t u; } v = {vt_bf16_round(x)};
  return (uint16_t)(v.u >> 16);
}
static inline float vt_bf16_widen(uint16_t b) {
  union { uint32_t u; float f; } v = {(uint32_t)b << 16};
  return v.f;
}

// exp(x) for x <= 0 (and up to ln2/2): 2^n * e^r with |r| <= ln2/2 and a degree-6 Taylor
// polynomial (relative error < 2e-7); below -87 it flushes towards 0 instead of going
// subnormal. Branch-free, so loops over it vectorise (libm's expf is a scalar call): GELU's,
// the attention's probabilities.
static inline float vt_cpu_exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = floorf(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;  // ln2 in two parts
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Stores v as element i of an activation that bf16 precision keeps as bfloat16 (vt_ops.h).
static inline void vt_cpu_put(float *out, int64_t i, float v, int bf16) {
  if (bf16) ((uint16_t *)out)[i] = vt_bf16_bits(v);
  else out[i] = v;
}

// Element i of an activation that bf16 precision keeps as bfloat16, as a float (vt_cpu_put's
// reverse; the CUDA twin is cuda_common.h's vt_get).
static inline float vt_cpu_get(const float *x, int64_t i, int bf16) {
  return bf16 ? vt_bf16_widen(((const uint16_t *)x)[i]) : x[i];
}

// dst[i] = the value of the bf16 element src[i], for n elements (OpenMP-parallel).
void vt_cpu_widen_bf16(float *dst, const void *src, int64_t n);

// The GEMM precision set through the backend table (vt_backend.h); fp32 until set.
void vt_cpu_set_precision(vt_precision precision);
int vt_cpu_bf16(void);

// dst[i] = vt_bf16_round(src[i]) for n elements (OpenMP-parallel, elementwise).
void vt_cpu_round_bf16(float *dst, const float *src, int64_t n);

// Grow-only scratch memory shared by ops within one thread of control (the step loop). The
// first call of each size allocates; later steps reuse it.
float *vt_cpu_scratch(size_t count);

void vt_cpu_linear_act_fwd(float *out, const float *inp, const float *weight, const float *bias,
                           int64_t M, int64_t In, int64_t O);
void vt_cpu_linear_act_bwd(float *dinp, float *dweight, const float *dout, const float *inp,
                           const float *weight, int64_t M, int64_t In, int64_t O);
void vt_cpu_linear_fwd(float *out, const float *inp, const float *weight, const float *bias,
                       int64_t M, int64_t I, int64_t O);
void vt_cpu_linear_residual_fwd(float *out, const float *inp, const float *weight,
                                const float *bias, const float *res, int64_t M, int64_t I,
                                int64_t O);
void vt_cpu_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);
void vt_cpu_linear_bwd_act(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, int64_t M, int64_t I,
                           int64_t O);
void vt_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t M, int64_t C,
                          float eps, int act);
void vt_cpu_layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int64_t M, int64_t C);
void vt_cpu_add_layernorm_fwd(float *sum, float *out, float *mean, float *rstd, const float *a,
                              const float *b, const float *weight, const float *bias, int64_t M,
                              int64_t C, float eps);
void vt_cpu_layernorm_bwd_add(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean,
                              const float *rstd, int64_t M, int64_t C);
void vt_cpu_norm_mean_pool_fwd(float *out, float *pooled, float *mean, float *rstd,
                               const float *x, const float *weight, const float *bias, int64_t B,
                               int64_t N, int64_t T, int64_t C, float eps);
void vt_cpu_norm_mean_pool_bwd(float *dx, float *dweight, float *dbias, const float *dout,
                               const float *x, const float *pooled, const float *weight,
                               const float *mean, const float *rstd, int64_t B, int64_t N,
                               int64_t T, int64_t C);
void vt_cpu_qk_norm_fwd(float *out, float *mean, float *rstd, const float *qkv, const float *qw,
                        const float *qb, const float *kw, const float *kb, int64_t M, int64_t H,
                        int64_t D, float eps);
void vt_cpu_qk_norm_bwd(float *dqkv, float *dqw, float *dqb, float *dkw, float *dkb, float *dbias,
                        const float *dout, const float *qkv, const float *qw, const float *kw,
                        const float *mean, const float *rstd, int64_t M, int64_t H, int64_t D);
void vt_cpu_act_fwd(float *out, const float *inp, int64_t count, int kind);
void vt_cpu_act_bwd(float *dinp, float *dbias, const float *inp, const float *dout, int64_t M,
                    int64_t F, int kind);
// x[0 .. len) in place: x * scale where numbers n0 .. n0 + len - 1 of the mask's stream keep the
// element, else 0 (vt_cpu_dropout's arithmetic on one fp32 span, one thread; for attention).
void vt_cpu_dropout_fp32(float *x, int64_t len, uint64_t n0, const vt_dropout_mask *mask);
void vt_cpu_attention_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                          int64_t H, int64_t D, const vt_dropout_mask *drop);
void vt_cpu_attention_bwd(float *dqkv, float *dbias, const float *dout, const float *qkv,
                          const float *out, const float *lse, int64_t B, int64_t N, int64_t H,
                          int64_t D, const vt_dropout_mask *drop);
void vt_cpu_latent_attention_fwd(float *out, float *lse, const float *q, const float *kv,
                                 int64_t B, int64_t N, int64_t H, int64_t D);
void vt_cpu_latent_attention_bwd(float *dq, float *dkv, float *dbias, const float *dout,
                                 const float *q, const float *kv, const float *out,
                                 const float *lse, int64_t B, int64_t N, int64_t H, int64_t D);
void vt_cpu_to_act(float *dst, const float *src, int64_t count);
void vt_cpu_add(float *out, const float *a, const float *b, int64_t count);
void vt_cpu_drop_path(float *out, const float *x, const float *res, int64_t rows, int64_t cols,
                      const vt_drop_mask *mask);
void vt_cpu_dropout(float *out, const float *x, int64_t rows, int64_t cols,
                    const vt_dropout_mask *mask, int act);
void vt_cpu_patchify_fwd(float *patches, const float *img, int64_t B, int64_t S, int64_t P);
void vt_cpu_patchify_bwd(float *dimg, const float *dpatches, int64_t B, int64_t S, int64_t P);
void vt_cpu_embed_fwd(float *x, const float *patch_out, const float *prefix, const float *pos,
                      int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C);
void vt_cpu_embed_bwd(float *dpatch_out, float *dprefix, float *dpos, const float *dx, int64_t B,
                      int64_t N, int64_t T, int64_t pos0, int64_t C);
void vt_cpu_cls_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t C);
void vt_cpu_cls_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N, int64_t C);
void vt_cpu_mean_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t T, int64_t C);
void vt_cpu_mean_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N, int64_t T,
                          int64_t C);
void vt_cpu_layer_scale_fwd(float *out, const float *x, const float *gamma, int64_t rows,
                            int64_t cols);
void vt_cpu_layer_scale_bwd(float *dx, float *dgamma, const float *dout, const float *x,
                            const float *gamma, int64_t rows, int64_t cols);
void vt_cpu_cross_entropy_fwd(float *losses, float *probs, const float *logits,
                              const int32_t *labels, const vt_mix_target *mix, float smoothing,
                              int64_t B, int64_t K);
void vt_cpu_bce_fwd(float *losses, float *probs, const float *logits, const int32_t *labels,
                    const vt_mix_target *mix, float smoothing, float thresh, int64_t B,
                    int64_t K);
void vt_cpu_cross_entropy_bwd(float *dlogits, const float *probs, const int32_t *labels,
                              const vt_mix_target *mix, float smoothing, float thresh,
                              float scale, int64_t B, int64_t K);
void vt_cpu_adamw(float *param, const float *grad, float *m, float *v, const uint8_t *decay,
                  int64_t count, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t t, float grad_scale);
void vt_cpu_lamb_moments(float *update, const float *param, const float *grad, float *m,
                         float *v, const uint8_t *decay, int64_t count, float beta1, float beta2,
                         float eps, float weight_decay, int64_t t);
void vt_cpu_lamb_apply(float *param, const float *update, int64_t count, float lr, float trust);
void vt_cpu_sgd(float *param, const float *grad, float *buf, const uint8_t *decay, int64_t count,
                float lr, float momentum, float weight_decay, int nesterov);
void vt_cpu_ema(float *ema, const float *param, float decay, int64_t count);
void vt_cpu_sumsq(double *out, const float *x, int64_t count);
void vt_cpu_scale(float *x, float alpha, int64_t count);

// Column sums of a (M, C) matrix added into out (C), in a fixed order whatever the thread
// count (bias and LayerNorm parameter gradients).
void vt_cpu_colsum_acc(float *out, const float *x, int64_t M, int64_t C);

#endif
