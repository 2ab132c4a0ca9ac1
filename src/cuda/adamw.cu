// adamw.cu: AdamW with decoupled weight decay on CUDA, twin of src/cpu/adamw.c: the same order
// of operations as torch.optim.AdamW's single-tensor path (decay, moments, bias corrections,
// addcdiv), with the bias corrections computed once on the host exactly as the CPU twin does.
// One launch covers many tensors (a per-element weight-decay mask, vt_ops.h). Also the weights'
// exponential moving average. Element-wise, so deterministic. C-style CUDA, no STL. Must not depend on MPI, NCCL or the model.
#include <math.h>

#include "cuda_common.h"
#include "cuda_ops.h"

static __global__ void adamw_kernel(float *param, const float *grad, float *m, float *v,
                                    const uint8_t *mask, int64_t count, float beta1, float beta2,
                                    float eps, float step_size, float bc2_sqrt, float with) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float keep = !mask || mask[i] ? with : 1.0f;  // 1 - lr * 0 without weight decay
    const float g = grad[i];
    const float mi = m[i] * beta1 + (1.0f - beta1) * g;
    const float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * keep - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
  }
}

extern "C" void vt_cuda_adamw(float *param, const float *grad, float *m, float *v,
                              const uint8_t *decay, int64_t count, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int64_t t) {
  // Host-side, in float as on the CPU, so both backends step with the same constants.
  const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  const float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), with = 1.0f - lr * weight_decay;
  adamw_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(
      param, grad, m, v, decay, count, beta1, beta2, eps, step_size, bc2_sqrt, with);
  VT_CUDA_CHECK_LAUNCH();
}

// __fmul_rn: each product rounded on its own, as on the CPU (no FMA).
static __global__ void ema_kernel(float *ema, const float *param, float decay, float rest,
                                  int64_t count) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    ema[i] = __fmul_rn(ema[i], decay) + __fmul_rn(param[i], rest);
}

extern "C" void vt_cuda_ema(float *ema, const float *param, float decay, int64_t count) {
  ema_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(ema, param, decay,
                                                                      1.0f - decay, count);
  VT_CUDA_CHECK_LAUNCH();
}
