// backend.c: the backend registry, the only place in src/ that knows which backends were
// compiled in, and the CPU thread setting shared by OpenMP and OpenBLAS.
#include "vt_backend.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vt_trace.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef VT_HAVE_BLAS
#include <cblas.h>
#endif

extern const vt_backend vt_cpu_backend;
#ifdef VT_HAVE_CUDA
const vt_backend *vt_cuda_backend_get(const char **why);
int vt_cuda_select(int index, char *desc, size_t desclen, unsigned char id[16]);
size_t vt_cuda_memory_used(void);
size_t vt_cuda_attention_smem(int64_t D, int bf16, size_t *limit);
int64_t vt_cuda_latent_max_tokens(void);
#endif

static int g_threads = 0;  // 0: not set yet

const vt_backend *vt_backend_get(vt_device device, const char **why) {
  if (device == VT_DEVICE_CPU) {
    // The thread setting also pins OpenBLAS to one thread; make sure it happened.
    if (g_threads == 0) {
#ifdef _OPENMP
      vt_backend_set_threads(omp_get_max_threads());
#else
      vt_backend_set_threads(1);
#endif
    }
    return &vt_cpu_backend;
  }
#ifdef VT_HAVE_CUDA
  return vt_cuda_backend_get(why);
#else
  if (why) *why = "this vit3d was built without CUDA (configure with -DVT_CUDA=ON)";
  return NULL;
#endif
}

int vt_backend_select(vt_device device, int local_rank, char *desc, size_t desclen,
                      unsigned char id[16]) {
  memset(id, 0, 16);
  if (device == VT_DEVICE_CPU) {
    snprintf(desc, desclen, "cpu");
    return 0;
  }
#ifdef VT_HAVE_CUDA
  return vt_cuda_select(local_rank, desc, desclen, id);
#else
  (void)local_rank;
  snprintf(desc, desclen, "this vit3d was built without CUDA (configure with -DVT_CUDA=ON)");
  return 1;
#endif
}

int vt_backend_attention_fits(vt_device device, int bf16, int64_t D, size_t *need,
                              size_t *limit) {
  *need = *limit = 0;
#ifdef VT_HAVE_CUDA
  if (device == VT_DEVICE_CUDA) *need = vt_cuda_attention_smem(D, bf16, limit);
#else
  (void)device, (void)bf16, (void)D;
#endif
  return *need <= *limit;
}

int64_t vt_backend_latent_max_tokens(vt_device device) {
#ifdef VT_HAVE_CUDA
  if (device == VT_DEVICE_CUDA) return vt_cuda_latent_max_tokens();
#else
  (void)device;
#endif
  return INT64_MAX;
}

size_t vt_backend_device_memory_used(vt_device device) {
#ifdef VT_HAVE_CUDA
  if (device == VT_DEVICE_CUDA) return vt_cuda_memory_used();
#else
  (void)device;
#endif
  return 0;
}

void vt_backend_set_threads(int threads) {
  g_threads = threads > 0 ? threads : 1;
#ifdef _OPENMP
  omp_set_num_threads(g_threads);
#endif
#ifdef VT_HAVE_BLAS
#ifdef _OPENMP
  openblas_set_num_threads(1);  // one pool: src/cpu/gemm.c splits GEMMs over OpenMP's threads
#else
  openblas_set_num_threads(g_threads);
#endif
#endif
}


const char *vt_backend_build_info(void) {
  return "cpu"
#ifdef VT_HAVE_BLAS
         "+openblas"
#else
         "+loops"
#endif
#ifdef _OPENMP
         "+openmp"
#endif
#ifdef VT_HAVE_CUDA
         " cuda"
#ifdef VT_HAVE_NVTX
         "+nvtx"
#endif
#endif
#ifdef VT_HAVE_NCCL
         "+nccl"
#endif
#ifdef VT_HAVE_MPI
         " mpi"
#endif
      ;
}

void vt_range_push(const vt_backend *be, const char *fmt, ...) {
  char name[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  vt_trace_push(name);
  if (be->range_push) be->range_push(name);
}

void vt_range_pop(const vt_backend *be) {
  if (be->range_pop) be->range_pop();
  vt_trace_pop();
}
