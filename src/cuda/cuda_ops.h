// cuda_ops.h: the CUDA backend's functions, one group per src/cuda/<op>.cu, each the twin of the
// src/cpu/cpu.h function of the same name (shapes and semantics as in src/vt_ops.h; pointers are
// device memory). A C header, so C code may include it; must not depend on MPI or the model.
#ifndef VT_CUDA_OPS_H
#define VT_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void vt_cuda_linear_fwd(float *out, const float *inp, const float *weight, const float *bias,
                        int64_t M, int64_t I, int64_t O);
void vt_cuda_linear_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);

// Column sums of a (M, C) matrix added into out (C), in a fixed order whatever the launch
// (bias and LayerNorm parameter gradients), as vt_cpu_colsum_acc.
void vt_cuda_colsum_acc(float *out, const float *x, int64_t M, int64_t C);

#ifdef __cplusplus
}
#endif

#endif
