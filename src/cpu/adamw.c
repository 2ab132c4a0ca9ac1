// adamw.c: the optimizers' element-wise arithmetic. AdamW with decoupled weight decay, in the
// order of torch.optim.AdamW's single-tensor path (decay, moments, bias corrections, addcdiv) so
// the reference test can be tight; one call covers many tensors, the weight decay per element
// from a mask (vt_ops.h). LAMB's two halves in the order of timm's Lamb. SGD with momentum in
// torch.optim.SGD's order. (Strict C11 does not contract a * b + c into an FMA: the CUDA
// twins' __fmul_rn products give the same bits.) Also the weights' exponential moving average.
#include <math.h>

#include "cpu.h"

void vt_cpu_adamw(float *param, const float *grad, float *m, float *v, const uint8_t *decay,
                  int64_t count, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t t, float grad_scale) {
  const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  const float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), with = 1.0f - lr * weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    const float keep = !decay || decay[i] ? with : 1.0f;  // 1 - lr * 0 without weight decay
    float g = grad[i] * grad_scale;  // vt_scale's product: the same bits
    float mi = m[i] * beta1 + (1.0f - beta1) * g;
    float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * keep - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
  }
}

void vt_cpu_lamb_moments(float *update, const float *param, const float *grad, float *m, float *v,
                         const uint8_t *decay, int64_t count, float beta1, float beta2, float eps,
                         float weight_decay, int64_t t) {
  const float bc1 = 1.0f - powf(beta1, (float)t), bc2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    const float g = grad[i];
    const float mi = m[i] * beta1 + (1.0f - beta1) * g;
    const float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float u = (mi / bc1) / (sqrtf(vi) / bc2_sqrt + eps);
    if (!decay || decay[i]) u += weight_decay * param[i];
    update[i] = u;
  }
}

void vt_cpu_lamb_apply(float *param, const float *update, int64_t count, float lr, float trust) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) param[i] -= lr * (update[i] * trust);
}

void vt_cpu_sgd(float *param, const float *grad, float *buf, const uint8_t *decay, int64_t count,
                float lr, float momentum, float weight_decay, int nesterov) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    const float d = !decay || decay[i] ? grad[i] + weight_decay * param[i] : grad[i];
    const float b = momentum * buf[i] + d;
    buf[i] = b;
    param[i] -= lr * (nesterov ? d + momentum * b : b);
  }
}

// As timm's ModelEmaV3 (torch.lerp towards the weights, from the nearer end: exact at weight
// 0 and 1): an EMA of a weight that does not move (a fixed sin-cos table, a zero gradient)
// stays it exactly, where ema*d + p*(1-d) drifts by rounding.
void vt_cpu_ema(float *ema, const float *param, float decay, int64_t count) {
  const float rest = 1.0f - decay;
  if (rest < 0.5f) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) ema[i] += rest * (param[i] - ema[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) ema[i] = param[i] - (param[i] - ema[i]) * decay;
  }
}
