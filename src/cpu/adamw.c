// adamw.c: AdamW with decoupled weight decay, in the order of torch.optim.AdamW's single-tensor
// path (decay, moments, bias corrections, addcdiv) so the reference test can be tight; one call
// covers many tensors, the weight decay per element from a mask (vt_ops.h). Also the weights'
// exponential moving average.
#include <math.h>

#include "cpu.h"

void vt_cpu_adamw(float *param, const float *grad, float *m, float *v, const uint8_t *decay,
                  int64_t count, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t t) {
  const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  const float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), with = 1.0f - lr * weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    const float keep = !decay || decay[i] ? with : 1.0f;  // 1 - lr * 0 without weight decay
    float g = grad[i];
    float mi = m[i] * beta1 + (1.0f - beta1) * g;
    float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * keep - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
  }
}

void vt_cpu_ema(float *ema, const float *param, float decay, int64_t count) {
  const float rest = 1.0f - decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) ema[i] = ema[i] * decay + param[i] * rest;
}
