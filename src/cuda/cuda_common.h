// cuda_common.h: what every src/cuda/*.cu shares: the fatal-error macros for CUDA and cuBLAS
// calls, the backend's one stream and cuBLAS handle, and launch-size helpers. CUDA-only (C++
// as compiled by nvcc); C code includes cuda_ops.h instead. Must not depend on MPI or the model.
#ifndef VT_CUDA_COMMON_H
#define VT_CUDA_COMMON_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../vt_error.h"

#define VT_CUDA_CHECK(call)                                                                    \
  do {                                                                                         \
    cudaError_t vt_err_ = (call);                                                              \
    if (vt_err_ != cudaSuccess)                                                                \
      vt_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #call, cudaGetErrorString(vt_err_),   \
               cudaGetErrorName(vt_err_));                                                     \
  } while (0)

// cuBLAS has no message table of its own worth relying on across versions; the status number
// is what its documentation (cublasStatus_t) indexes.
#define VT_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                         \
    cublasStatus_t vt_st_ = (call);                                                            \
    if (vt_st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      vt_fatal(__FILE__, __LINE__, "%s failed: cuBLAS status %d", #call, (int)vt_st_);         \
  } while (0)

// A launch reports bad configurations only through the next error query; ask right away so the
// message names the kernel that failed rather than a later, innocent call.
#define VT_CUDA_CHECK_LAUNCH() VT_CUDA_CHECK(cudaGetLastError())

// Every op runs on this one stream, so ops are ordered among themselves without host syncs.
// Valid once vt_cuda_backend_get has returned non-NULL.
cudaStream_t vt_cuda_stream(void);
cublasHandle_t vt_cuda_cublas(void);

// Blocks for a grid-stride loop over count elements: enough to fill the GPU, never more than
// the work needs (count > 0).
static inline unsigned vt_cuda_blocks(int64_t count, int threads) {
  int64_t b = (count + threads - 1) / threads;
  return (unsigned)(b < 65535 ? b : 65535);
}

#endif
