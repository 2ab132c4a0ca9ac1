// adamw.cu: AdamW with decoupled weight decay on CUDA, twin of src/cpu/adamw.c: the same order
// of operations as torch.optim.AdamW's single-tensor path (decay, moments, bias corrections,
// addcdiv), with the bias corrections computed once on the host exactly as the CPU twin does.
// One launch covers many tensors (a per-element weight-decay mask, vt_ops.h). LAMB's two halves
// as the CPU's, each product rounded on its own (no FMA): the same bits; so is SGD with momentum.
// Also the weights' exponential moving average. Element-wise, so deterministic. C-style CUDA, no STL. Must not
// depend on MPI, NCCL or the model.
#include <math.h>

#include "cuda_common.h"
#include "cuda_ops.h"

static __global__ void adamw_kernel(float *param, const float *grad, float *m, float *v,
                                    const uint8_t *mask, int64_t count, float beta1, float beta2,
                                    float eps, float step_size, float bc2_sqrt, float with,
                                    float grad_scale) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float keep = !mask || mask[i] ? with : 1.0f;  // 1 - lr * 0 without weight decay
    const float g = __fmul_rn(grad[i], grad_scale);  // the scale kernel's product, unfused
    const float mi = m[i] * beta1 + (1.0f - beta1) * g;
    const float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * keep - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
  }
}

extern "C" void vt_cuda_adamw(float *param, const float *grad, float *m, float *v,
                              const uint8_t *decay, int64_t count, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int64_t t,
                              float grad_scale) {
  // Host-side, in float as on the CPU, so both backends step with the same constants.
  const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  const float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), with = 1.0f - lr * weight_decay;
  adamw_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(
      param, grad, m, v, decay, count, beta1, beta2, eps, step_size, bc2_sqrt, with, grad_scale);
  VT_CUDA_CHECK_LAUNCH();
}

static __global__ void lamb_moments_kernel(float *update, const float *param, const float *grad,
                                           float *m, float *v, const uint8_t *mask, int64_t count,
                                           float beta1, float beta2, float eps, float bc1,
                                           float bc2_sqrt, float weight_decay) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float g = grad[i];
    const float mi = __fmul_rn(m[i], beta1) + __fmul_rn(1.0f - beta1, g);
    const float vi = __fmul_rn(v[i], beta2) + __fmul_rn(__fmul_rn(1.0f - beta2, g), g);
    m[i] = mi;
    v[i] = vi;
    float u = (mi / bc1) / (sqrtf(vi) / bc2_sqrt + eps);  // IEEE division and root (nvcc's default)
    if (!mask || mask[i]) u += __fmul_rn(weight_decay, param[i]);
    update[i] = u;
  }
}

extern "C" void vt_cuda_lamb_moments(float *update, const float *param, const float *grad,
                                     float *m, float *v, const uint8_t *decay, int64_t count,
                                     float beta1, float beta2, float eps, float weight_decay,
                                     int64_t t) {
  const float bc1 = 1.0f - powf(beta1, (float)t), bc2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
  lamb_moments_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(
      update, param, grad, m, v, decay, count, beta1, beta2, eps, bc1, bc2_sqrt, weight_decay);
  VT_CUDA_CHECK_LAUNCH();
}

static __global__ void lamb_apply_kernel(float *param, const float *update, int64_t count,
                                         float lr, float trust) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    param[i] -= __fmul_rn(lr, __fmul_rn(update[i], trust));
}

extern "C" void vt_cuda_lamb_apply(float *param, const float *update, int64_t count, float lr,
                                   float trust) {
  lamb_apply_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(param, update,
                                                                              count, lr, trust);
  VT_CUDA_CHECK_LAUNCH();
}

static __global__ void sgd_kernel(float *param, const float *grad, float *buf, const uint8_t *mask,
                           int64_t count, float lr, float momentum, float weight_decay,
                           int nesterov) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float d = !mask || mask[i] ? grad[i] + __fmul_rn(weight_decay, param[i]) : grad[i];
    const float b = __fmul_rn(momentum, buf[i]) + d;
    buf[i] = b;
    const float step = nesterov ? d + __fmul_rn(momentum, b) : b;
    param[i] = param[i] - __fmul_rn(lr, step);
  }
}

extern "C" void vt_cuda_sgd(float *param, const float *grad, float *buf, const uint8_t *decay,
                            int64_t count, float lr, float momentum, float weight_decay,
                            int nesterov) {
  sgd_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(
      param, grad, buf, decay, count, lr, momentum, weight_decay, nesterov);
  VT_CUDA_CHECK_LAUNCH();
}

// A lerp towards the weights as vt_cpu_ema (torch.lerp's, from the nearer end; exact for a
// weight that does not move); __fmul_rn: the product rounded on its own (no FMA).
static __global__ void ema_kernel(float *ema, const float *param, float decay, float rest,
                                  int64_t count) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    ema[i] = rest < 0.5f ? ema[i] + __fmul_rn(rest, param[i] - ema[i])
                         : param[i] - __fmul_rn(param[i] - ema[i], decay);
}

extern "C" void vt_cuda_ema(float *ema, const float *param, float decay, int64_t count) {
  ema_kernel<<<vt_cuda_blocks(count, 256), 256, 0, vt_cuda_stream()>>>(ema, param, decay,
                                                                      1.0f - decay, count);
  VT_CUDA_CHECK_LAUNCH();
}
