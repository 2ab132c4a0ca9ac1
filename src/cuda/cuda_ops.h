// cuda_ops.h: the CUDA backend's functions, one group per src/cuda/<op>.cu, each the twin of the
// src/cpu/cpu.h function of the same name (shapes and semantics as in src/vt_ops.h; pointers are
// device memory). A C header, so C code may include it; must not depend on MPI or the model.
#ifndef VT_CUDA_OPS_H
#define VT_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "vt_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// gemm.cu
void vt_cuda_linear_act_fwd(float *out, const float *inp, const float *weight, const float *bias,
                            int64_t M, int64_t I, int64_t O);
void vt_cuda_linear_act_bwd(float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, int64_t M, int64_t I, int64_t O);
void vt_cuda_linear_fwd(float *out, const float *inp, const float *weight, const float *bias,
                        int64_t M, int64_t I, int64_t O);
void vt_cuda_linear_residual_fwd(float *out, const float *inp, const float *weight,
                                 const float *bias, const float *res, int64_t M, int64_t I,
                                 int64_t O);
void vt_cuda_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);
void vt_cuda_linear_bwd_act(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);

// layernorm.cu
void vt_cuda_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int64_t M, int64_t C,
                           float eps, int act);
void vt_cuda_layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int64_t M, int64_t C);

void vt_cuda_add_layernorm_fwd(float *sum, float *out, float *mean, float *rstd, const float *a,
                               const float *b, const float *weight, const float *bias, int64_t M,
                               int64_t C, float eps);
void vt_cuda_layernorm_bwd_add(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int64_t M, int64_t C);
void vt_cuda_norm_mean_pool_fwd(float *out, float *pooled, float *mean, float *rstd,
                                const float *x, const float *weight, const float *bias, int64_t B,
                                int64_t N, int64_t T, int64_t C, float eps);
void vt_cuda_norm_mean_pool_bwd(float *dx, float *dweight, float *dbias, const float *dout,
                                const float *x, const float *pooled, const float *weight,
                                const float *mean, const float *rstd, int64_t B, int64_t N,
                                int64_t T, int64_t C);
void vt_cuda_qk_norm_fwd(float *out, float *mean, float *rstd, const float *qkv, const float *qw,
                         const float *qb, const float *kw, const float *kb, int64_t M, int64_t H,
                         int64_t D, float eps);
void vt_cuda_qk_norm_bwd(float *dqkv, float *dqw, float *dqb, float *dkw, float *dkb,
                         float *dbias, const float *dout, const float *qkv, const float *qw,
                         const float *kw, const float *mean, const float *rstd, int64_t M,
                         int64_t H, int64_t D);

// elementwise.cu
void vt_cuda_act_fwd(float *out, const float *inp, int64_t count, int kind);
void vt_cuda_act_bwd(float *dinp, float *dbias, const float *inp, const float *dout, int64_t M,
                     int64_t F, int kind);
void vt_cuda_add(float *out, const float *a, const float *b, int64_t count);
void vt_cuda_to_act(float *dst, const float *src, int64_t count);
void vt_cuda_drop_path(float *out, const float *x, const float *res, int64_t rows, int64_t cols,
                       const vt_drop_mask *mask);
void vt_cuda_dropout(float *out, const float *x, int64_t rows, int64_t cols,
                     const vt_dropout_mask *mask, int act);
void vt_cuda_sumsq(double *out, const float *x, int64_t count);
void vt_cuda_scale(float *x, float alpha, int64_t count);

// attention.cu
void vt_cuda_attention_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                           int64_t H, int64_t D, const vt_dropout_mask *drop);
void vt_cuda_attention_bwd(float *dqkv, float *dbias, const float *dout, const float *qkv,
                           const float *out, const float *lse, int64_t B, int64_t N, int64_t H,
                           int64_t D, const vt_dropout_mask *drop);
void vt_cuda_latent_attention_fwd(float *out, float *lse, const float *q, const float *kv,
                                  int64_t B, int64_t N, int64_t H, int64_t D);
void vt_cuda_latent_attention_bwd(float *dq, float *dkv, float *dbias, const float *dout,
                                  const float *q, const float *kv, const float *out,
                                  const float *lse, int64_t B, int64_t N, int64_t H, int64_t D);

// embed.cu
void vt_cuda_patchify_fwd(float *patches, const float *img, int64_t B, int64_t S, int64_t P);
void vt_cuda_patchify_bwd(float *dimg, const float *dpatches, int64_t B, int64_t S, int64_t P);
void vt_cuda_embed_fwd(float *x, const float *patch_out, const float *prefix, const float *pos,
                       int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C);
void vt_cuda_embed_bwd(float *dpatch_out, float *dprefix, float *dpos, const float *dx,
                       int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C);
void vt_cuda_cls_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t C);
void vt_cuda_cls_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N, int64_t C);
void vt_cuda_mean_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t T,
                           int64_t C);
void vt_cuda_mean_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N, int64_t T,
                           int64_t C);
void vt_cuda_layer_scale_fwd(float *out, const float *x, const float *gamma, int64_t rows,
                             int64_t cols);
void vt_cuda_layer_scale_bwd(float *dx, float *dgamma, const float *dout, const float *x,
                             const float *gamma, int64_t rows, int64_t cols);

// cross_entropy.cu
void vt_cuda_cross_entropy_fwd(float *losses, float *probs, const float *logits,
                               const int32_t *labels, const vt_mix_target *mix, float smoothing,
                               int64_t B, int64_t K);
void vt_cuda_bce_fwd(float *losses, float *probs, const float *logits, const int32_t *labels,
                     const vt_mix_target *mix, float smoothing, float thresh, int64_t B,
                     int64_t K);
void vt_cuda_cross_entropy_bwd(float *dlogits, const float *probs, const int32_t *labels,
                               const vt_mix_target *mix, float smoothing, float thresh,
                               float scale, int64_t B, int64_t K);

// adamw.cu
void vt_cuda_adamw(float *param, const float *grad, float *m, float *v, const uint8_t *decay,
                   int64_t count, float lr, float beta1, float beta2, float eps, float weight_decay,
                   int64_t t, float grad_scale);
void vt_cuda_lamb_moments(float *update, const float *param, const float *grad, float *m,
                          float *v, const uint8_t *decay, int64_t count, float beta1, float beta2,
                          float eps, float weight_decay, int64_t t);
void vt_cuda_lamb_apply(float *param, const float *update, int64_t count, float lr, float trust);
void vt_cuda_sgd(float *param, const float *grad, float *buf, const uint8_t *decay, int64_t count,
                 float lr, float momentum, float weight_decay, int nesterov);
void vt_cuda_ema(float *ema, const float *param, float decay, int64_t count);

#ifdef __cplusplus
}
#endif

#endif
