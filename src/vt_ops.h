// vt_ops.h: the op API. Each vt_<op>_fwd/_bwd checks its arguments once and dispatches through the
// backend table (vt_backend.h states the conventions: row-major, activation gradients
// overwritten, parameter gradients accumulated). Must not depend on MPI or the model.
#ifndef VT_OPS_H
#define VT_OPS_H

#include "vt_backend.h"


#ifdef __cplusplus
extern "C" {
#endif

// bf16 activations. In bf16 precision (vt_backend.h) the activations that only ever feed GEMMs
// are stored as bfloat16, 2 bytes per element, in float * buffers of vt_act_floats(be, count)
// floats: linear's inp, the out of patchify_fwd, layernorm_fwd, add_layernorm_fwd (not its sum),
// act_fwd, attention_fwd, latent_attention_fwd, to_act and linear_act_fwd, attention's qkv and
// latent_attention's q and kv inputs, act_bwd's dinp and attention_bwd's dqkv and
// latent_attention_bwd's dkv (as linear_act_bwd's dout). The GEMMs rounded exactly these values
// to bf16 anyway, so storing them rounded changes no result; it halves their memory and traffic
// and the GEMMs read them as they are. Two kinds are rounded where PyTorch's bf16 autocast
// rounds them, which changes results within bf16's precision: GELU's input (fc1's output, made
// by linear_act_fwd; GELU and its derivative are computed in fp32 at the rounded value), and the
// input gradients of the Linears after GELU and attention (linear_bwd_act's dinp, read as
// act_bwd's and attention_bwd's dout), which autocast's bf16 GEMMs make in bf16. Everything
// else stays fp32.
int64_t vt_act_floats(const vt_backend *be, int64_t count);

// out = inp @ weight^T + bias (bias may be NULL): a torch.nn.Linear.
// out (M, O), inp (M, I), weight (O, I), bias (O)
void vt_linear_fwd(const vt_backend *be, float *out, const float *inp, const float *weight,
                   const float *bias, int64_t M, int64_t I, int64_t O);
// linear_fwd plus a residual: out = res + (inp @ weight^T + bias), the Linear at the end of a
// residual branch with the add fused in (the branch's output is neither stored nor read back:
// the GEMM reads res as its C). res (M, O) fp32, not aliasing out; bias may be NULL. The same value as
// linear_fwd then add up to fp32 rounding: the CPU computes exactly that, CUDA adds res in the
// GEMM (or starts from res + bias) before the products.
void vt_linear_residual_fwd(const vt_backend *be, float *out, const float *inp,
                            const float *weight, const float *bias, const float *res, int64_t M,
                            int64_t I, int64_t O);
// linear_fwd whose out is a bf16 activation in bf16 precision (above): the fp32 result, bias
// included, rounded once; the bias rounded to bf16 first, as in PyTorch's bf16 autocast (whose
// Linear casts its bias too; on CUDA a bf16 output takes a bf16 bias in cuBLASLt's epilogue).
// For a Linear whose output only feeds GEMMs (qkv feeds attention) or GELU (fc1).
void vt_linear_act_fwd(const vt_backend *be, float *out, const float *inp, const float *weight,
                       const float *bias, int64_t M, int64_t I, int64_t O);
// dinp (M, I) overwritten unless NULL; dweight (O, I) and dbias (O) accumulated unless NULL (one
// of dinp and dweight must be given; inp is read only for dweight, weight only for dinp); dout
// (M, O). Computing dinp and dweight in two calls gives the same bits as in one (ZB-H1's split
// backward).
void vt_linear_bwd(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                   const float *dout, const float *inp, const float *weight, int64_t M, int64_t I,
                   int64_t O);
// linear_bwd whose dinp (not NULL) is a bf16 activation in bf16 precision: the fp32 GEMM result
// rounded once. For a Linear whose input gradient only feeds an op that reads it as such (fc2's
// goes to act_bwd, proj's to attention_bwd; both Linears are row-parallel under TP, so the
// gradient needs no reduction over TP ranks first).
void vt_linear_bwd_act(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, int64_t M,
                       int64_t I, int64_t O);
// linear_bwd whose dout is a bf16 activation in bf16 precision (act_bwd's dinp, attention_bwd's
// dqkv), with no bias gradient (their maker summed it from the fp32 values): the same bits as
// linear_bwd on that fp32 dout, which rounded it to bf16 for its GEMMs anyway, without the pass
// that did.
void vt_linear_act_bwd(const vt_backend *be, float *dinp, float *dweight, const float *dout,
                       const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);

// LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, eps the model's
// (timm's ViT 1e-6; nn.LayerNorm's 1e-5 in the CLIP towers). out, inp (M, C); mean, rstd (M)
// saved for the backward, which needs no eps; weight, bias (C). With act set, out is an
// activation (bf16 in bf16 precision: the norms before a Linear), else fp32 (norm_pre, whose
// output is the residual stream; autocast keeps LayerNorm's output fp32).
void vt_layernorm_fwd(const vt_backend *be, float *out, float *mean, float *rstd,
                      const float *inp, const float *weight, const float *bias, int64_t M,
                      int64_t C, float eps, int act);
void vt_layernorm_bwd(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                      const float *dout, const float *inp, const float *weight, const float *mean,
                      const float *rstd, int64_t M, int64_t C);
// The residual add fused with the LayerNorm that reads its result (one pass over the stream
// fewer): sum = a + b (sum may alias a or b), then layernorm_fwd of sum. The same bits as
// vt_add followed by vt_layernorm_fwd.
void vt_add_layernorm_fwd(const vt_backend *be, float *sum, float *out, float *mean, float *rstd,
                          const float *a, const float *b, const float *weight, const float *bias,
                          int64_t M, int64_t C, float eps);
// layernorm_bwd that adds its input gradient into dinp (the residual stream's gradient) instead
// of overwriting it: the same bits as vt_layernorm_bwd into a scratch and vt_add.
void vt_layernorm_bwd_add(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight,
                          const float *mean, const float *rstd, int64_t M, int64_t C);

// An activation after a Linear: GELU in one of its three forms (timm's act_layer 'gelu',
// 'gelu_tanh' and 'quick_gelu'; PyTorch's approximate='none' and 'tanh'), the exact
// x * 0.5 * (1 + erf(x / sqrt 2)) or x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (Flax's
// default: big_vision's ViTs) or x * sigmoid(1.702 x) (OpenAI's CLIP), in the MLPs; or tanh
// itself (big_vision's pre-logits layer). inp and out are bf16 activations in bf16 precision.
typedef enum {
  VT_ACT_GELU = 0,
  VT_ACT_GELU_TANH = 1,
  VT_ACT_TANH = 2,
  VT_ACT_QUICK_GELU = 3
} vt_act;
void vt_act_fwd(const vt_backend *be, float *out, const float *inp, int64_t count, vt_act kind);
// The backward, fused with the bias gradient of the Linear that made the activation's input
// (fc1): dinp (M, F) = dout * act'(inp), a bf16 activation in bf16 precision (it only feeds that
// Linear's GEMMs, through linear_act_bwd); dbias (F) += the column sums of the fp32 dinp, in the
// same pass (dbias may be NULL). inp (M, F) as act_fwd read it and dout (M, F) as linear_bwd_act
// made it (both bf16 in bf16 precision).
void vt_act_bwd(const vt_backend *be, float *dinp, float *dbias, const float *inp,
                const float *dout, int64_t M, int64_t F, vt_act kind);

// Scaled dot-product attention per head, no mask, in the fused (flash) form: the probabilities
// are never stored. qkv (B, N, 3*H*D) laid out as timm's qkv Linear output: [q of all heads |
// k of all heads | v of all heads], head h at columns h*D. out (B, N, H*D) with head h at
// columns h*D (timm's transpose-reshape). lse (B, H, N) fp32, saved for the backward: per query
// row i the log of the softmax denominator, lse_i = log sum_j exp(s_ij), s = q k^T / sqrt(D).
// Both backends compute the same values with the same rounding points (only summation orders
// differ): with m_i = ln 2 ceil(log2 e max_j s_ij), the row's maximum rounded up to a whole
// power of two of e's scale, the unnormalised probabilities e_ij = exp(s_ij - m_i),
// l_i = sum_j e_ij (unrounded), lse_i = m_i + log l_i and out_i = (sum_j e_ij v_j) (1 / l_i),
// e rounded to bf16 in bf16 precision. Any whole power of two in m's place scales e, l and
// e v by a power of two and rounds the same, so a kernel may make all of it in one pass over
// the keys, with the running maximum so rounded, scaling what it has by 2^-k when that moves up
// k: the rounded e does not depend on how the keys are tiled (short of values below 2^-126).
// Under TP, H is the local head count.
// Dropout of the probabilities (timm's attn_drop; drop NULL: none): with d_ij = fl(e_ij * scale)
// where the mask keeps (i, j), else 0, out_i = (sum_j d_ij v_j) (1 / l_i) (d rounded to bf16 in
// bf16 precision); lse is the softmax's as without. The mask's numbering differs from vt_dropout's:
// element (b, h, i, j) is number first + (b * width + h) * N * N + i * N + j, width being the
// heads over TP and first counting the micro-batch's first image and this rank's first head.
void vt_attention_fwd(const vt_backend *be, float *out, float *lse, const float *qkv, int64_t B,
                      int64_t N, int64_t H, int64_t D, const vt_dropout_mask *drop);
// dqkv (B, N, 3*H*D) overwritten, a bf16 activation in bf16 precision (it only feeds the qkv
// Linear's GEMMs, through linear_act_bwd); dbias (3*H*D) += the column sums of the fp32 dqkv, the
// qkv bias gradient, made here from the values before rounding (may be NULL); dout (B, N, H*D)
// as linear_bwd_act made it (a bf16 activation in bf16 precision); out and lse as attention_fwd
// left them.
// The (normalised) probabilities p_ij = exp(s_ij - lse_i) are recomputed from q, k and lse; the
// softmax gradient is ds_ij = p_ij (dp_ij - delta_i), dp = dout v^T, delta_i = sum_d dout_id
// out_id (which equals sum_j p_ij dp_ij). In bf16 the GEMMs read ds and p rounded to bf16. With
// dropout (the forward's mask): dp_ij = fl(dout_i . v_j * scale) where kept, else 0 (delta
// unchanged: it equals sum_j fl(p_ij scale) (dout_i . v_j) over the kept), and dv reads
// fl(p_ij * scale) where kept, else 0, for p.
void vt_attention_bwd(const vt_backend *be, float *dqkv, float *dbias, const float *dout,
                      const float *qkv, const float *out, const float *lse, int64_t B, int64_t N,
                      int64_t H, int64_t D, const vt_dropout_mask *drop);

// Attention of one query per head over a sample's N tokens (the latent query of timm's
// AttentionPoolLatent, big_vision's MAP head): the query q (H*D), the same for every sample, is a
// bf16 activation in bf16 precision; kv (B, N, 2*H*D) as timm's kv Linear makes it, [k of all
// heads | v of all heads] per token (a bf16 activation). out (B, H*D), head h at columns h*D (a
// bf16 activation); lse (B, H) fp32 saved for the backward. With s_t = q_h . k_t / sqrt(D):
// m = max_t s_t, e_t = exp(s_t - m) (rounded to bf16 in bf16 precision), l = sum_t e_t
// (unrounded), lse = m + log l, out = (sum_t e_t v_t) (1 / l): attention_fwd's arithmetic with
// one query row, m being the exact maximum here (the whole row is at hand).
void vt_latent_attention_fwd(const vt_backend *be, float *out, float *lse, const float *q,
                             const float *kv, int64_t B, int64_t N, int64_t H, int64_t D);
// dq (H*D) fp32, overwritten: the sum over the samples (in order 0..B-1) of each one's query
// gradient; dkv (B, N, 2*H*D) overwritten, a bf16 activation in bf16 precision (it only feeds
// the kv Linear's GEMMs, through linear_act_bwd); dbias (2*H*D) += the column sums of the fp32
// dkv, the kv bias gradient (may be NULL). dout (B, H*D) as linear_bwd_act made it; q, kv, out
// and lse as latent_attention_fwd read and left them. attention_bwd's arithmetic with one query
// row: p_t = exp(s_t - lse) (rounded to bf16 in bf16), delta = dout . out,
// ds_t = p_t (dout . v_t - delta) (rounded likewise), dk_t = ds_t q / sqrt(D), dv_t = p_t dout,
// dq = sum_t ds_t k_t / sqrt(D).
void vt_latent_attention_bwd(const vt_backend *be, float *dq, float *dkv, float *dbias,
                             const float *dout, const float *q, const float *kv, const float *out,
                             const float *lse, int64_t B, int64_t N, int64_t H, int64_t D);

// QK-norm (timm's qk_norm, ViT-22B): a LayerNorm (the caller's eps) over each head's D
// values of q and of k, the q heads sharing the weights qw, qb (D), the k heads kw, kb. qkv and
// out (M, 3*H*D) in attention's layout (vt_attention_fwd); out holds the normalised q and k and v
// as it is; both are bf16 activations in bf16 precision. mean, rstd (M, 2H): each row's
// statistics, q heads then k heads (fp32). Under TP, H is the local head count.
void vt_qk_norm_fwd(const vt_backend *be, float *out, float *mean, float *rstd, const float *qkv,
                    const float *qw, const float *qb, const float *kw, const float *kb,
                    int64_t M, int64_t H, int64_t D, float eps);
// dqkv (M, 3HD) overwritten (a bf16 activation in bf16 precision): the LayerNorm backward of
// dout's q and k parts, dout's v part as it is (dout: attention_bwd's dqkv of out, a bf16
// activation in bf16); dqw, dqb, dkw, dkb (D) += their column sums over the M*H rows of each;
// dbias (3HD) += the column sums of the fp32 dqkv, qkv's bias gradient (may be NULL).
void vt_qk_norm_bwd(const vt_backend *be, float *dqkv, float *dqw, float *dqb, float *dkw,
                    float *dkb, float *dbias, const float *dout, const float *qkv,
                    const float *qw, const float *kw, const float *mean, const float *rstd,
                    int64_t M, int64_t H, int64_t D);

// dst (count) = src (count, fp32) as an activation: rounded to bf16 and stored as such in bf16
// precision (vt_ops.h), copied in fp32. For an fp32 value that feeds a GEMM's input (MAP's latent
// query and its head's input); the gradient passes through unchanged.
void vt_to_act(const vt_backend *be, float *dst, const float *src, int64_t count);

// Residual add, out = a + b (out may alias a or b). Its backward passes the gradient to both
// inputs unchanged, so the model reuses this op to add branch gradients into the stream.
void vt_add(const vt_backend *be, float *out, const float *a, const float *b, int64_t count);

// Drop path (stochastic depth, timm's DropPath) of a residual branch: per sample, the branch is
// kept and scaled by mask->scale or dropped. out (rows, cols) = res + x * scale where the row's
// sample is kept, res where it is dropped (both rounded once, in fp32); with res NULL, x * scale
// or 0, which is also the backward (the branch's gradient from the stream's, same mask). Row i
// belongs to sample (mask->row0 + i) / mask->rows_per_sample; samples past the mask's words
// count as dropped (the padding rows of sequence parallelism). out may alias x or res.
void vt_drop_path(const vt_backend *be, float *out, const float *x, const float *res,
                  int64_t rows, int64_t cols, const vt_drop_mask *mask);

// Dropout (timm's nn.Dropout in training): out = x * scale where the mask keeps the element, else
// 0; also the backward (the gradient through the same mask). With act set, x and out are
// activations (bf16 in bf16 precision, as autocast's dropout of a bf16 tensor rounds its product;
// the MLP's hidden units), else fp32. out may alias x. (rows, cols)
void vt_dropout(const vt_backend *be, float *out, const float *x, int64_t rows, int64_t cols,
                const vt_dropout_mask *mask, int act);

// Patch embedding, first half: cut images into P x P patches, each flattened as (3, P, P), the
// order of a Conv2d weight (C, 3, P, P), so patch embedding = patchify + linear.
// patches (B, (S/P)^2, 3*P*P), img (B, 3, S, S)
void vt_patchify_fwd(const vt_backend *be, float *patches, const float *img, int64_t B,
                     int64_t S, int64_t P);
void vt_patchify_bwd(const vt_backend *be, float *dimg, const float *dpatches, int64_t B,
                     int64_t S, int64_t P);

// Prefix tokens and position embedding (timm's _pos_embed): token n < T of every image is
// prefix[n] (the class token, then the register tokens; T may be 0, prefix then unused), token
// T + i is patch_out[b, i]; tokens from pos0 on add pos[n - pos0]: pos0 = 0 gives every token a
// position (timm's default), pos0 = T only the patch tokens (timm's no_embed_class, DeiT III and
// DINOv2). x (B, N, C), patch_out (B, N-T, C), prefix (T, C), pos (N-pos0, C)
void vt_embed_fwd(const vt_backend *be, float *x, const float *patch_out, const float *prefix,
                  const float *pos, int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C);
// dpatch_out (B, N-T, C) overwritten (may be NULL); dprefix (T, C), dpos (N-pos0, C; may be
// NULL: fixed positions) accumulated, each adding the batch in order 0..B-1 onto its old value.
void vt_embed_bwd(const vt_backend *be, float *dpatch_out, float *dprefix, float *dpos,
                  const float *dx, int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C);

// Class-token pooling: out[b] = x[b, 0]. out (B, C), x (B, N, C). The backward writes the whole
// dx (zeros but for the class token).
void vt_cls_pool_fwd(const vt_backend *be, float *out, const float *x, int64_t B, int64_t N,
                     int64_t C);
void vt_cls_pool_bwd(const vt_backend *be, float *dx, const float *dout, int64_t B, int64_t N,
                     int64_t C);
// Mean pooling of the patch tokens (timm's global_pool='avg'): out[b] = the mean of x[b, T..N-1]
// (a float sum in token order, divided by N - T), T the prefix tokens (class and registers). The
// backward writes the whole dx: zeros on the prefix tokens, dout[b] / (N - T) on every patch token.
void vt_mean_pool_fwd(const vt_backend *be, float *out, const float *x, int64_t B, int64_t N,
                      int64_t T, int64_t C);
void vt_mean_pool_bwd(const vt_backend *be, float *dx, const float *dout, int64_t B, int64_t N,
                      int64_t T, int64_t C);
// LayerNorm of every patch token, then their mean (timm's global_pool='avg' with fc_norm=False,
// big_vision's 'gap' head): out[b] = weight * pooled[b] + bias, pooled[b] (fp32, kept for the
// backward) the mean over the patch tokens t = T..N-1 of xhat_t = (x[b, t] - mean) * rstd, each
// token's mean and rstd (B, N - T) saved as LayerNorm's (the caller's eps); out (B, C) is a
// bf16 activation in bf16 precision, x (B, N, C) fp32. Every token shares the one gradient
// g = dout[b] * weight / (N - T) of its xhat, so the backward writes the whole dx (zeros on the
// prefix tokens, LayerNorm's input gradient of g on each patch token; dx may alias x, each row
// being read before it is written) and adds the column sums over b of dout * pooled and dout to
// dweight and dbias (in b order).
void vt_norm_mean_pool_fwd(const vt_backend *be, float *out, float *pooled, float *mean,
                           float *rstd, const float *x, const float *weight, const float *bias,
                           int64_t B, int64_t N, int64_t T, int64_t C, float eps);
void vt_norm_mean_pool_bwd(const vt_backend *be, float *dx, float *dweight, float *dbias,
                           const float *dout, const float *x, const float *pooled,
                           const float *weight, const float *mean, const float *rstd, int64_t B,
                           int64_t N, int64_t T, int64_t C);

// LayerScale (timm's ls1 and ls2: CaiT, DeiT III, DINOv2): out (rows, cols) = x * gamma, gamma
// per column (out may alias x). The backward: dx = dout * gamma (dx may alias dout); dgamma
// (cols) += the column sums of dout * x (each product rounded, then summed in a fixed order).
void vt_layer_scale_fwd(const vt_backend *be, float *out, const float *x, const float *gamma,
                        int64_t rows, int64_t cols);
void vt_layer_scale_bwd(const vt_backend *be, float *dx, float *dgamma, const float *dout,
                        const float *x, const float *gamma, int64_t rows, int64_t cols);

// Softmax cross-entropy with label smoothing (PyTorch's definition: target (1-s) on the label
// plus s/K on every class). losses (B) per sample; probs (B, K) saved; labels (B) in [0, K).
// mix (B) or NULL: Mixup/CutMix targets, lam times the smoothed target of labels[b] plus
// (1 - lam) times that of mix[b].partner, so loss = (1-s) (lam nll(label) + (1-lam)
// nll(partner)) + s mean_k(-log p_k).
void vt_cross_entropy_fwd(const vt_backend *be, float *losses, float *probs, const float *logits,
                          const int32_t *labels, const vt_mix_target *mix, float smoothing,
                          int64_t B, int64_t K);
// dlogits (B, K) = scale * (probs - target); scale is 1 / global batch for a mean loss. With mix,
// the label's class loses scale (1-s) lam and the partner's scale (1-s) (1-lam), in that order.
// thresh >= 0 (binary cross-entropy's binary targets, vt_bce_fwd): the target is 1 where the
// soft one, s/K + (1-s) (lam on the label, 1 - lam on the partner) in float, exceeds thresh,
// else 0; negative: the soft targets.
void vt_cross_entropy_bwd(const vt_backend *be, float *dlogits, const float *probs,
                          const int32_t *labels, const vt_mix_target *mix, float smoothing,
                          float thresh, float scale, int64_t B, int64_t K);

// Binary cross-entropy with logits over the classes (timm's BinaryCrossEntropy, DeiT III and
// "ResNet strikes back"), with the same (smoothed, mixed) targets t as cross_entropy: losses[b] =
// mean over k of softplus(z_k) - z_k t_k (softplus(z) = max(z, 0) + log1p(exp(-|z|)), sums in
// double), so the mean over samples is PyTorch's binary_cross_entropy_with_logits(reduction=
// 'mean'). probs (B, K) = sigmoid(z), saved: the backward is cross_entropy_bwd's
// scale * (probs - target) with scale divided by K. thresh >= 0: binary targets, 1 where the soft
// target exceeds thresh (timm's target_threshold; DeiT III's targets.gt(0)), as cross_entropy_bwd
// makes them; negative: the soft targets.
void vt_bce_fwd(const vt_backend *be, float *losses, float *probs, const float *logits,
                const int32_t *labels, const vt_mix_target *mix, float smoothing, float thresh,
                int64_t B, int64_t K);

// AdamW (decoupled weight decay, PyTorch's torch.optim.AdamW arithmetic), step t >= 1, over any
// number of tensors at once (one launch for a whole model): element i decays with weight_decay
// where decay[i] is nonzero (decay: count bytes of backend memory), or everywhere when decay is
// NULL; elsewhere it has no weight decay. Each gradient is multiplied by grad_scale first
// (gradient clipping's coefficient; 1 leaves it as it is): the same bits as vt_scale of the
// gradients, then AdamW, without a pass over them.
void vt_adamw(const vt_backend *be, float *param, const float *grad, float *m, float *v,
              const uint8_t *decay, int64_t count, float lr, float beta1, float beta2, float eps,
              float weight_decay, int64_t t, float grad_scale);

// LAMB (You et al. 2019, in timm's Lamb arithmetic), in two ops around the per-tensor norms
// that the optimizer sums over its ranks. lamb_moments updates the Adam moments m and v (step
// t >= 1) and writes the Adam direction update = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps), plus
// weight_decay * param where decay[i] is nonzero (NULL: everywhere); update may be grad itself.
// lamb_apply steps param -= lr * (update * trust), trust being the tensor's ||param|| / ||update||.
void vt_lamb_moments(const vt_backend *be, float *update, const float *param, const float *grad,
                     float *m, float *v, const uint8_t *decay, int64_t count, float beta1,
                     float beta2, float eps, float weight_decay, int64_t t);
void vt_lamb_apply(const vt_backend *be, float *param, const float *update, int64_t count,
                   float lr, float trust);

// SGD with momentum (torch.optim.SGD's arithmetic, dampening 0; timm's --opt sgd with
// nesterov, --opt momentum without): d = grad + weight_decay * param where decay[i] is nonzero
// (NULL: everywhere; L2 weight decay, coupled, as torch's), buf = momentum * buf + d (buf
// starting at zero equals torch's first-step copy of d), then param -= lr * (d + momentum * buf)
// with nesterov, lr * buf without. Each product rounded on its own.
void vt_sgd(const vt_backend *be, float *param, const float *grad, float *buf,
            const uint8_t *decay, int64_t count, float lr, float momentum, float weight_decay,
            int nesterov);

// Exponential moving average of the weights (timm's ModelEmaV2): ema = ema * decay +
// param * (1 - decay), each product rounded on its own, then the sum.
void vt_ema(const vt_backend *be, float *ema, const float *param, float decay, int64_t count);

// Sum of squares (accumulated in double) and in-place scaling, for the gradient norm and clipping.
// vt_sumsq writes the sum into *out, one double of the backend's memory, and does not wait for
// the device: a caller queues many and brings them to the host with one to_host.
void vt_sumsq(const vt_backend *be, double *out, const float *x, int64_t count);
void vt_scale(const vt_backend *be, float *x, float alpha, int64_t count);

#ifdef __cplusplus
}
#endif

#endif
