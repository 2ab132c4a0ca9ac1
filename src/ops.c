// ops.c: argument checks and dispatch of the op API through the backend table. Checks happen
// here once, so backends assume valid arguments.
#include "vt_ops.h"

#include "vt_error.h"

#define NEED(be, fn)                                                                       \
  VT_CHECK((be) != NULL && (be)->fn != NULL, "op %s is not implemented on backend %s", #fn, \
           (be) ? (be)->name : "(null)")
#define POS(x) VT_CHECK((x) > 0, "%s must be positive, got %lld", #x, (long long)(x))
#define PTR(p) VT_CHECK((p) != NULL, "%s must not be NULL", #p)
#define EPS(e) VT_CHECK((e) > 0.0f && (e) < 1.0f, "LayerNorm eps %g outside (0, 1)", (double)(e))

void vt_linear_fwd(const vt_backend *be, float *out, const float *inp, const float *weight,
                   const float *bias, int64_t M, int64_t I, int64_t O) {
  NEED(be, linear_fwd);
  PTR(out); PTR(inp); PTR(weight);
  POS(M); POS(I); POS(O);
  be->linear_fwd(out, inp, weight, bias, M, I, O);
}

void vt_linear_residual_fwd(const vt_backend *be, float *out, const float *inp,
                            const float *weight, const float *bias, const float *res, int64_t M,
                            int64_t I, int64_t O) {
  NEED(be, linear_residual_fwd);
  PTR(out); PTR(inp); PTR(weight); PTR(res);
  POS(M); POS(I); POS(O);
  VT_CHECK(out != res, "linear_residual_fwd: out must not alias res");
  be->linear_residual_fwd(out, inp, weight, bias, res, M, I, O);
}

void vt_linear_act_fwd(const vt_backend *be, float *out, const float *inp, const float *weight,
                       const float *bias, int64_t M, int64_t I, int64_t O) {
  NEED(be, linear_act_fwd);
  PTR(out); PTR(inp); PTR(weight);
  POS(M); POS(I); POS(O);
  be->linear_act_fwd(out, inp, weight, bias, M, I, O);
}

void vt_linear_bwd(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                   const float *dout, const float *inp, const float *weight, int64_t M, int64_t I,
                   int64_t O) {
  NEED(be, linear_bwd);
  PTR(dout);
  VT_CHECK(dinp || dweight, "linear_bwd: neither dinp nor dweight asked for");
  VT_CHECK(dinp == NULL || weight != NULL, "linear_bwd: dinp needs weight");
  VT_CHECK(dweight == NULL || inp != NULL, "linear_bwd: dweight needs inp");
  POS(M); POS(I); POS(O);
  be->linear_bwd(dinp, dweight, dbias, dout, inp, weight, M, I, O);
}

void vt_linear_bwd_act(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, int64_t M,
                       int64_t I, int64_t O) {
  NEED(be, linear_bwd_act);
  PTR(dinp); PTR(dout); PTR(weight);
  VT_CHECK(dweight == NULL || inp != NULL, "linear_bwd_act: dweight needs inp");
  POS(M); POS(I); POS(O);
  be->linear_bwd_act(dinp, dweight, dbias, dout, inp, weight, M, I, O);
}

void vt_linear_act_bwd(const vt_backend *be, float *dinp, float *dweight, const float *dout,
                       const float *inp, const float *weight, int64_t M, int64_t I, int64_t O) {
  NEED(be, linear_act_bwd);
  PTR(dout);
  VT_CHECK(dinp || dweight, "linear_act_bwd: neither dinp nor dweight asked for");
  VT_CHECK(dinp == NULL || weight != NULL, "linear_act_bwd: dinp needs weight");
  VT_CHECK(dweight == NULL || inp != NULL, "linear_act_bwd: dweight needs inp");
  POS(M); POS(I); POS(O);
  be->linear_act_bwd(dinp, dweight, dout, inp, weight, M, I, O);
}

void vt_layernorm_fwd(const vt_backend *be, float *out, float *mean, float *rstd,
                      const float *inp, const float *weight, const float *bias, int64_t M,
                      int64_t C, float eps, int act) {
  NEED(be, layernorm_fwd);
  PTR(out); PTR(mean); PTR(rstd); PTR(inp); PTR(weight); PTR(bias);
  POS(M); POS(C); EPS(eps);
  be->layernorm_fwd(out, mean, rstd, inp, weight, bias, M, C, eps, act);
}

void vt_layernorm_bwd(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                      const float *dout, const float *inp, const float *weight, const float *mean,
                      const float *rstd, int64_t M, int64_t C) {
  NEED(be, layernorm_bwd);
  PTR(dinp); PTR(dweight); PTR(dbias); PTR(dout); PTR(inp); PTR(weight); PTR(mean); PTR(rstd);
  POS(M); POS(C);
  be->layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C);
}

void vt_add_layernorm_fwd(const vt_backend *be, float *sum, float *out, float *mean, float *rstd,
                          const float *a, const float *b, const float *weight, const float *bias,
                          int64_t M, int64_t C, float eps) {
  NEED(be, add_layernorm_fwd);
  PTR(sum); PTR(out); PTR(mean); PTR(rstd); PTR(a); PTR(b); PTR(weight); PTR(bias);
  POS(M); POS(C); EPS(eps);
  be->add_layernorm_fwd(sum, out, mean, rstd, a, b, weight, bias, M, C, eps);
}

void vt_layernorm_bwd_add(const vt_backend *be, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight,
                          const float *mean, const float *rstd, int64_t M, int64_t C) {
  NEED(be, layernorm_bwd_add);
  PTR(dinp); PTR(dweight); PTR(dbias); PTR(dout); PTR(inp); PTR(weight); PTR(mean); PTR(rstd);
  POS(M); POS(C);
  be->layernorm_bwd_add(dinp, dweight, dbias, dout, inp, weight, mean, rstd, M, C);
}

void vt_act_fwd(const vt_backend *be, float *out, const float *inp, int64_t count, vt_act kind) {
  NEED(be, act_fwd);
  PTR(out); PTR(inp);
  POS(count);
  VT_CHECK(kind >= VT_ACT_GELU && kind <= VT_ACT_QUICK_GELU, "act: unknown kind %d", (int)kind);
  be->act_fwd(out, inp, count, (int)kind);
}

void vt_act_bwd(const vt_backend *be, float *dinp, float *dbias, const float *inp,
                const float *dout, int64_t M, int64_t F, vt_act kind) {
  NEED(be, act_bwd);
  PTR(dinp); PTR(inp); PTR(dout);
  POS(M); POS(F);
  VT_CHECK(kind >= VT_ACT_GELU && kind <= VT_ACT_QUICK_GELU, "act: unknown kind %d", (int)kind);
  be->act_bwd(dinp, dbias, inp, dout, M, F, (int)kind);
}

int64_t vt_act_floats(const vt_backend *be, int64_t count) {
  return be->precision() == VT_PRECISION_BF16 ? (count + 1) / 2 : count;
}

// The attention's dropout mask: numbers of heads at least this call's, a probability in (0, 1).
static void check_attention_drop(const char *op, const vt_dropout_mask *drop, int64_t H) {
  if (!drop) return;
  VT_CHECK(drop->p > 0.0f && drop->p < 1.0f && drop->first >= 0 && drop->width >= H,
           "%s: dropout p %g, first %lld, %lld heads in all of which %lld here", op,
           (double)drop->p, (long long)drop->first, (long long)drop->width, (long long)H);
}

void vt_attention_fwd(const vt_backend *be, float *out, float *lse, const float *qkv, int64_t B,
                      int64_t N, int64_t H, int64_t D, const vt_dropout_mask *drop) {
  NEED(be, attention_fwd);
  PTR(out); PTR(lse); PTR(qkv);
  POS(B); POS(N); POS(H); POS(D);
  check_attention_drop("attention_fwd", drop, H);
  be->attention_fwd(out, lse, qkv, B, N, H, D, drop);
}

void vt_attention_bwd(const vt_backend *be, float *dqkv, float *dbias, const float *dout,
                      const float *qkv, const float *out, const float *lse, int64_t B, int64_t N,
                      int64_t H, int64_t D, const vt_dropout_mask *drop) {
  NEED(be, attention_bwd);
  PTR(dqkv); PTR(dout); PTR(qkv); PTR(out); PTR(lse);
  POS(B); POS(N); POS(H); POS(D);
  check_attention_drop("attention_bwd", drop, H);
  be->attention_bwd(dqkv, dbias, dout, qkv, out, lse, B, N, H, D, drop);
}

void vt_latent_attention_fwd(const vt_backend *be, float *out, float *lse, const float *q,
                             const float *kv, int64_t B, int64_t N, int64_t H, int64_t D) {
  NEED(be, latent_attention_fwd);
  PTR(out); PTR(lse); PTR(q); PTR(kv);
  POS(B); POS(N); POS(H); POS(D);
  be->latent_attention_fwd(out, lse, q, kv, B, N, H, D);
}

void vt_latent_attention_bwd(const vt_backend *be, float *dq, float *dkv, float *dbias,
                             const float *dout, const float *q, const float *kv, const float *out,
                             const float *lse, int64_t B, int64_t N, int64_t H, int64_t D) {
  NEED(be, latent_attention_bwd);
  PTR(dq); PTR(dkv); PTR(dout); PTR(q); PTR(kv); PTR(out); PTR(lse);
  POS(B); POS(N); POS(H); POS(D);
  be->latent_attention_bwd(dq, dkv, dbias, dout, q, kv, out, lse, B, N, H, D);
}

void vt_qk_norm_fwd(const vt_backend *be, float *out, float *mean, float *rstd, const float *qkv,
                    const float *qw, const float *qb, const float *kw, const float *kb,
                    int64_t M, int64_t H, int64_t D, float eps) {
  NEED(be, qk_norm_fwd);
  PTR(out); PTR(mean); PTR(rstd); PTR(qkv); PTR(qw); PTR(qb); PTR(kw); PTR(kb);
  POS(M); POS(H); POS(D); EPS(eps);
  VT_CHECK(out != qkv, "qk_norm_fwd: out must not alias qkv");
  be->qk_norm_fwd(out, mean, rstd, qkv, qw, qb, kw, kb, M, H, D, eps);
}

void vt_qk_norm_bwd(const vt_backend *be, float *dqkv, float *dqw, float *dqb, float *dkw,
                    float *dkb, float *dbias, const float *dout, const float *qkv,
                    const float *qw, const float *kw, const float *mean, const float *rstd,
                    int64_t M, int64_t H, int64_t D) {
  NEED(be, qk_norm_bwd);
  PTR(dqkv); PTR(dqw); PTR(dqb); PTR(dkw); PTR(dkb); PTR(dout); PTR(qkv); PTR(qw); PTR(kw);
  PTR(mean); PTR(rstd);
  POS(M); POS(H); POS(D);
  VT_CHECK(dqkv != dout && dqkv != qkv, "qk_norm_bwd: dqkv must not alias dout or qkv");
  be->qk_norm_bwd(dqkv, dqw, dqb, dkw, dkb, dbias, dout, qkv, qw, kw, mean, rstd, M, H, D);
}

void vt_to_act(const vt_backend *be, float *dst, const float *src, int64_t count) {
  NEED(be, to_act);
  PTR(dst); PTR(src);
  POS(count);
  VT_CHECK(dst != src, "to_act: dst must not alias src");
  be->to_act(dst, src, count);
}

void vt_add(const vt_backend *be, float *out, const float *a, const float *b, int64_t count) {
  NEED(be, add);
  PTR(out); PTR(a); PTR(b);
  POS(count);
  be->add(out, a, b, count);
}

void vt_drop_path(const vt_backend *be, float *out, const float *x, const float *res,
                  int64_t rows, int64_t cols, const vt_drop_mask *mask) {
  NEED(be, drop_path);
  PTR(out); PTR(x); PTR(mask);
  POS(rows); POS(cols); POS(mask->rows_per_sample);
  VT_CHECK(mask->row0 >= 0 && mask->scale >= 1.0f, "drop_path: row0 %lld, scale %g",
           (long long)mask->row0, (double)mask->scale);
  be->drop_path(out, x, res, rows, cols, mask);
}

void vt_dropout(const vt_backend *be, float *out, const float *x, int64_t rows, int64_t cols,
                const vt_dropout_mask *mask, int act) {
  NEED(be, dropout);
  PTR(out); PTR(x); PTR(mask);
  POS(rows); POS(cols); POS(mask->width);
  VT_CHECK(mask->first >= 0 && mask->p >= 0.0f && mask->p < 1.0f && mask->scale >= 1.0f &&
               cols <= mask->width,
           "dropout: first %lld, p %g, scale %g, %lld columns of %lld", (long long)mask->first,
           (double)mask->p, (double)mask->scale, (long long)cols, (long long)mask->width);
  be->dropout(out, x, rows, cols, mask, act);
}

void vt_patchify_fwd(const vt_backend *be, float *patches, const float *img, int64_t B,
                     int64_t S, int64_t P) {
  NEED(be, patchify_fwd);
  PTR(patches); PTR(img);
  POS(B); POS(S); POS(P);
  VT_CHECK(S % P == 0, "image size %lld is not a multiple of patch size %lld", (long long)S,
           (long long)P);
  be->patchify_fwd(patches, img, B, S, P);
}

void vt_patchify_bwd(const vt_backend *be, float *dimg, const float *dpatches, int64_t B,
                     int64_t S, int64_t P) {
  NEED(be, patchify_bwd);
  PTR(dimg); PTR(dpatches);
  POS(B); POS(S); POS(P);
  VT_CHECK(S % P == 0, "image size %lld is not a multiple of patch size %lld", (long long)S,
           (long long)P);
  be->patchify_bwd(dimg, dpatches, B, S, P);
}

// Prefix tokens (class, registers; none without a class token) and at least one patch; positions
// from token 0 or from the first patch token.
#define EMBED_SHAPE(op)                                                                      \
  VT_CHECK(T >= 0 && N > T && (pos0 == 0 || pos0 == T),                                      \
           op ": N=%lld tokens, T=%lld prefix tokens, positions from %lld (0 or T)",          \
           (long long)N, (long long)T, (long long)pos0)

void vt_embed_fwd(const vt_backend *be, float *x, const float *patch_out, const float *prefix,
                  const float *pos, int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C) {
  NEED(be, embed_fwd);
  PTR(x); PTR(patch_out); PTR(pos);
  if (T > 0) PTR(prefix);
  POS(B); POS(C);
  EMBED_SHAPE("embed");
  be->embed_fwd(x, patch_out, prefix, pos, B, N, T, pos0, C);
}

void vt_embed_bwd(const vt_backend *be, float *dpatch_out, float *dprefix, float *dpos,
                  const float *dx, int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C) {
  NEED(be, embed_bwd);
  PTR(dx);
  if (T > 0) PTR(dprefix);
  POS(B); POS(C);
  EMBED_SHAPE("embed");
  be->embed_bwd(dpatch_out, dprefix, dpos, dx, B, N, T, pos0, C);
}

void vt_cls_pool_fwd(const vt_backend *be, float *out, const float *x, int64_t B, int64_t N,
                     int64_t C) {
  NEED(be, cls_pool_fwd);
  PTR(out); PTR(x);
  POS(B); POS(N); POS(C);
  be->cls_pool_fwd(out, x, B, N, C);
}

void vt_cls_pool_bwd(const vt_backend *be, float *dx, const float *dout, int64_t B, int64_t N,
                     int64_t C) {
  NEED(be, cls_pool_bwd);
  PTR(dx); PTR(dout);
  POS(B); POS(N); POS(C);
  be->cls_pool_bwd(dx, dout, B, N, C);
}

void vt_mean_pool_fwd(const vt_backend *be, float *out, const float *x, int64_t B, int64_t N,
                      int64_t T, int64_t C) {
  NEED(be, mean_pool_fwd);
  PTR(out); PTR(x);
  POS(B); POS(C);
  VT_CHECK(T >= 0 && N > T, "mean_pool: N=%lld tokens with T=%lld prefix tokens has no patch",
           (long long)N, (long long)T);
  be->mean_pool_fwd(out, x, B, N, T, C);
}

void vt_mean_pool_bwd(const vt_backend *be, float *dx, const float *dout, int64_t B, int64_t N,
                      int64_t T, int64_t C) {
  NEED(be, mean_pool_bwd);
  PTR(dx); PTR(dout);
  POS(B); POS(C);
  VT_CHECK(T >= 0 && N > T, "mean_pool: N=%lld tokens with T=%lld prefix tokens has no patch",
           (long long)N, (long long)T);
  be->mean_pool_bwd(dx, dout, B, N, T, C);
}

void vt_norm_mean_pool_fwd(const vt_backend *be, float *out, float *pooled, float *mean,
                           float *rstd, const float *x, const float *weight, const float *bias,
                           int64_t B, int64_t N, int64_t T, int64_t C, float eps) {
  NEED(be, norm_mean_pool_fwd);
  PTR(out); PTR(pooled); PTR(mean); PTR(rstd); PTR(x); PTR(weight); PTR(bias);
  POS(B); POS(C); EPS(eps);
  VT_CHECK(T >= 0 && N > T, "norm_mean_pool: N=%lld tokens with T=%lld prefix tokens has no "
           "patch", (long long)N, (long long)T);
  be->norm_mean_pool_fwd(out, pooled, mean, rstd, x, weight, bias, B, N, T, C, eps);
}

void vt_norm_mean_pool_bwd(const vt_backend *be, float *dx, float *dweight, float *dbias,
                           const float *dout, const float *x, const float *pooled,
                           const float *weight, const float *mean, const float *rstd, int64_t B,
                           int64_t N, int64_t T, int64_t C) {
  NEED(be, norm_mean_pool_bwd);
  PTR(dx); PTR(dweight); PTR(dbias); PTR(dout); PTR(x); PTR(pooled); PTR(weight); PTR(mean);
  PTR(rstd);
  POS(B); POS(C);
  VT_CHECK(T >= 0 && N > T, "norm_mean_pool: N=%lld tokens with T=%lld prefix tokens has no "
           "patch", (long long)N, (long long)T);
  be->norm_mean_pool_bwd(dx, dweight, dbias, dout, x, pooled, weight, mean, rstd, B, N, T, C);
}

void vt_layer_scale_fwd(const vt_backend *be, float *out, const float *x, const float *gamma,
                        int64_t rows, int64_t cols) {
  NEED(be, layer_scale_fwd);
  PTR(out); PTR(x); PTR(gamma);
  POS(rows); POS(cols);
  be->layer_scale_fwd(out, x, gamma, rows, cols);
}

void vt_layer_scale_bwd(const vt_backend *be, float *dx, float *dgamma, const float *dout,
                        const float *x, const float *gamma, int64_t rows, int64_t cols) {
  NEED(be, layer_scale_bwd);
  PTR(dx); PTR(dgamma); PTR(dout); PTR(x); PTR(gamma);
  POS(rows); POS(cols);
  VT_CHECK(x != dx, "layer_scale_bwd: dx must not alias x");
  be->layer_scale_bwd(dx, dgamma, dout, x, gamma, rows, cols);
}

void vt_cross_entropy_fwd(const vt_backend *be, float *losses, float *probs, const float *logits,
                          const int32_t *labels, const vt_mix_target *mix, float smoothing,
                          int64_t B, int64_t K) {
  NEED(be, cross_entropy_fwd);
  PTR(losses); PTR(probs); PTR(logits); PTR(labels);
  POS(B); POS(K);
  VT_CHECK(smoothing >= 0.0f && smoothing < 1.0f, "label smoothing %g not in [0, 1)", smoothing);
  be->cross_entropy_fwd(losses, probs, logits, labels, mix, smoothing, B, K);
}

void vt_bce_fwd(const vt_backend *be, float *losses, float *probs, const float *logits,
                const int32_t *labels, const vt_mix_target *mix, float smoothing, float thresh,
                int64_t B, int64_t K) {
  NEED(be, bce_fwd);
  PTR(losses); PTR(probs); PTR(logits); PTR(labels);
  POS(B); POS(K);
  VT_CHECK(smoothing >= 0.0f && smoothing < 1.0f, "bce: smoothing %g not in [0, 1)",
           (double)smoothing);
  VT_CHECK(thresh < 1.0f, "bce: target threshold %g >= 1 leaves no target", (double)thresh);
  be->bce_fwd(losses, probs, logits, labels, mix, smoothing, thresh, B, K);
}

void vt_cross_entropy_bwd(const vt_backend *be, float *dlogits, const float *probs,
                          const int32_t *labels, const vt_mix_target *mix, float smoothing,
                          float thresh, float scale, int64_t B, int64_t K) {
  NEED(be, cross_entropy_bwd);
  PTR(dlogits); PTR(probs); PTR(labels);
  POS(B); POS(K);
  VT_CHECK(smoothing >= 0.0f && smoothing < 1.0f, "label smoothing %g not in [0, 1)", smoothing);
  VT_CHECK(thresh < 1.0f, "target threshold %g >= 1 leaves no target", (double)thresh);
  be->cross_entropy_bwd(dlogits, probs, labels, mix, smoothing, thresh, scale, B, K);
}

void vt_adamw(const vt_backend *be, float *param, const float *grad, float *m, float *v,
              const uint8_t *decay, int64_t count, float lr, float beta1, float beta2, float eps,
              float weight_decay, int64_t t, float grad_scale) {
  NEED(be, adamw);
  PTR(param); PTR(grad); PTR(m); PTR(v);
  POS(count);
  VT_CHECK(t >= 1, "AdamW step must start at 1, got %lld", (long long)t);
  be->adamw(param, grad, m, v, decay, count, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

void vt_lamb_moments(const vt_backend *be, float *update, const float *param, const float *grad,
                     float *m, float *v, const uint8_t *decay, int64_t count, float beta1,
                     float beta2, float eps, float weight_decay, int64_t t) {
  NEED(be, lamb_moments);
  PTR(update); PTR(param); PTR(grad); PTR(m); PTR(v);
  POS(count);
  VT_CHECK(t >= 1, "LAMB step must start at 1, got %lld", (long long)t);
  be->lamb_moments(update, param, grad, m, v, decay, count, beta1, beta2, eps, weight_decay, t);
}

void vt_lamb_apply(const vt_backend *be, float *param, const float *update, int64_t count,
                   float lr, float trust) {
  NEED(be, lamb_apply);
  PTR(param); PTR(update);
  POS(count);
  be->lamb_apply(param, update, count, lr, trust);
}

void vt_sgd(const vt_backend *be, float *param, const float *grad, float *buf,
            const uint8_t *decay, int64_t count, float lr, float momentum, float weight_decay,
            int nesterov) {
  NEED(be, sgd);
  PTR(param); PTR(grad); PTR(buf);
  POS(count);
  VT_CHECK(momentum >= 0.0f && momentum < 1.0f, "SGD momentum %g outside [0, 1)", (double)momentum);
  be->sgd(param, grad, buf, decay, count, lr, momentum, weight_decay, nesterov != 0);
}

void vt_sumsq(const vt_backend *be, double *out, const float *x, int64_t count) {
  NEED(be, sumsq);
  PTR(out);
  if (count <= 0) {
    be->zero(out, sizeof *out);
    return;
  }
  PTR(x);
  be->sumsq(out, x, count);
}

void vt_ema(const vt_backend *be, float *ema, const float *param, float decay, int64_t count) {
  NEED(be, ema);
  PTR(ema); PTR(param);
  POS(count);
  VT_CHECK(decay >= 0.0f && decay < 1.0f, "ema: decay %g not in [0, 1)", decay);
  be->ema(ema, param, decay, count);
}

void vt_scale(const vt_backend *be, float *x, float alpha, int64_t count) {
  NEED(be, scale);
  PTR(x);
  if (count <= 0) return;
  be->scale(x, alpha, count);
}
