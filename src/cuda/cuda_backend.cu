// cuda_backend.cu: the CUDA backend's table, its memory functions (with the uploads' copy
// stream), and the one stream, cuBLAS handle and grow-only scratch that every CUDA op uses. The
// registry (src/backend.c) calls vt_cuda_backend_get. C-style CUDA, no STL. Must not depend on
// MPI, NCCL or the model; which GPU this process uses is chosen by the caller (cudaSetDevice)
// before the first call.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "cuda_ops.h"
#ifdef VT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include "../vt_backend.h"

// How many characters of call name the function called: up to its first parenthesis.
static int call_name_len(const char *call) {
  const char *p = strchr(call, '(');
  return p ? (int)(p - call) : (int)strlen(call);
}

// Errors a kernel leaves on the context for whatever CUDA call comes next (every later call
// returns them too): the call that reports one is seldom the one at fault.
static int sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace: case cudaErrorInvalidPc:
    case cudaErrorAssert:
      return 1;
    default:
      return 0;
  }
}

static const char k_earlier[] =
    "; the error may come from an earlier kernel, not this call (kernels run after their "
    "launch returns): rerun with CUDA_LAUNCH_BLOCKING=1, or under compute-sanitizer, to find "
    "the kernel at fault";

void vt_cuda_fail(const char *file, int line, const char *call, cudaError_t err) {
  vt_fatal(file, line, "%.*s failed: %s (%s)%s", call_name_len(call), call,
           cudaGetErrorString(err), cudaGetErrorName(err),
           sticky(err) ? k_earlier : "");
}

void vt_cublas_fail(const char *file, int line, const char *call, cublasStatus_t st) {
  vt_fatal(file, line, "%.*s failed: %s (%s)%s", call_name_len(call), call,
           cublasGetStatusName(st), cublasGetStatusString(st),
           st == CUBLAS_STATUS_ALLOC_FAILED
               ? "; cuBLAS found the GPU out of memory for its workspace: try a smaller "
                 "--micro-batch-size, or --recompute-blocks"
           : st == CUBLAS_STATUS_EXECUTION_FAILED ? k_earlier
                                                   : "");
}

static cudaStream_t g_stream = NULL;
static cublasHandle_t g_cublas = NULL;

cudaStream_t vt_cuda_stream(void) { return g_stream; }
cublasHandle_t vt_cuda_cublas(void) { return g_cublas; }

static void *cuda_alloc(size_t nbytes) {
  void *p = NULL;
  // cudaMalloc(0) succeeds with NULL, which callers would read as failure.
  if (cudaMalloc(&p, nbytes ? nbytes : 256) != cudaSuccess) {
    // Out of memory is not sticky; clear it so the next unrelated check does not report it.
    (void)cudaGetLastError();
    return NULL;
  }
  VT_CUDA_CHECK(cudaMemsetAsync(p, 0, nbytes, g_stream));
  // The contract is "zeroed memory"; a caller may hand it to another stream (NCCL) right away.
  VT_CUDA_CHECK(cudaStreamSynchronize(g_stream));
  return p;
}

static void cuda_free(void *p) {
  // cudaFree waits for the device, so work still queued on the stream cannot touch freed memory.
  if (p) VT_CUDA_CHECK(cudaFree(p));
}

// Pageable host memory is staged by the driver before cudaMemcpyAsync returns; a pinned host
// buffer must stay unchanged until the next synchronize.
static void cuda_to_device(void *dst, const void *host_src, size_t nbytes) {
  if (nbytes)
    VT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, g_stream));
}

static void cuda_to_host(void *host_dst, const void *src, size_t nbytes) {
  if (nbytes)
    VT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, g_stream));
  // The caller reads host_dst next; with pinned memory the copy may still be in flight.
  VT_CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

static void cuda_copy(void *dst, const void *src, size_t nbytes) {
  if (nbytes) VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, g_stream));
}

static void cuda_zero(void *p, size_t nbytes) {
  if (nbytes) VT_CUDA_CHECK(cudaMemsetAsync(p, 0, nbytes, g_stream));
}

// Pinned host memory for the step's uploads. From pinned memory cudaMemcpyAsync is a DMA queued
// on a stream; from pageable memory the driver stages the copy and may first wait for the
// stream, which would make the host wait for the device at every micro-batch. The uploads run
// on a copy stream of their own, each after an event of the compute stream (recorded at the
// call for upload, at the latest inputs_read for upload_ahead), and the compute stream waits for
// the copy: so an upload_ahead of the next micro-batch's images overlaps the backward pass
// queued before it instead of queueing behind it. g_upload_event, after the latest copy, says
// when the sources may change (an event never recorded counts as complete, as does a wait on
// one).
static cudaStream_t g_copy_stream = NULL;
static cudaEvent_t g_upload_event = NULL, g_issued_event = NULL, g_read_event = NULL;
static void *cuda_host_alloc(size_t nbytes) {
  void *p = NULL;
  const cudaError_t err = cudaHostAlloc(&p, nbytes ? nbytes : 1, cudaHostAllocDefault);
  if (err == cudaSuccess) return p;
  (void)cudaGetLastError();
  // Page-locked memory is limited (ulimit -l, container limits): pageable memory still works,
  // with uploads that may wait for the device.
  static int warned;
  if (!warned++)
    vt_log_warn("cannot pin host memory for the input batches (cudaHostAlloc of %zu bytes: %s); "
                "using pageable memory, whose uploads may wait for the GPU: raise the "
                "locked-memory limit (ulimit -l) or lower --prefetch or --micro-batch-size",
                nbytes, cudaGetErrorString(err));
  return posix_memalign(&p, 4096, nbytes ? nbytes : 1) == 0 ? p : NULL;
}
static void cuda_host_free(void *p) {
  if (!p) return;
  unsigned flags = 0;
  if (cudaHostGetFlags(&flags, p) == cudaSuccess) {  // pinned by cudaHostAlloc
    VT_CUDA_CHECK(cudaFreeHost(p));
    return;
  }
  (void)cudaGetLastError();
  free(p);  // the pageable fallback
}
static void upload_after(cudaEvent_t after, void *dst, const void *host_src, size_t nbytes) {
  if (!nbytes) return;
  VT_CUDA_CHECK(cudaStreamWaitEvent(g_copy_stream, after, 0));
  VT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, g_copy_stream));
  VT_CUDA_CHECK(cudaEventRecord(g_upload_event, g_copy_stream));
  VT_CUDA_CHECK(cudaStreamWaitEvent(g_stream, g_upload_event, 0));
}
static void cuda_upload(void *dst, const void *host_src, size_t nbytes) {
  VT_CUDA_CHECK(cudaEventRecord(g_issued_event, g_stream));
  upload_after(g_issued_event, dst, host_src, nbytes);
}
static void cuda_upload_ahead(void *dst, const void *host_src, size_t nbytes) {
  upload_after(g_read_event, dst, host_src, nbytes);
}
static void cuda_inputs_read(void) { VT_CUDA_CHECK(cudaEventRecord(g_read_event, g_stream)); }
static void cuda_upload_wait(void) { VT_CUDA_CHECK(cudaEventSynchronize(g_upload_event)); }

static vt_precision g_precision = VT_PRECISION_FP32;
static void cuda_set_precision(vt_precision precision) { g_precision = precision; }
int vt_cuda_bf16(void) { return g_precision == VT_PRECISION_BF16; }
static vt_precision cuda_precision(void) { return g_precision; }

static void *g_scratch = NULL;
static size_t g_scratch_nbytes = 0;
// Outgrown scratch buffers, freed at the next synchronize (the step's end).
enum { VT_CUDA_RETIRED_MAX = 64 };
static void *g_retired[VT_CUDA_RETIRED_MAX];
static int g_nretired = 0;

// Grows only, so after the first step no op allocates (design.md: nothing is allocated inside
// the step loop once it runs). Growing waits for nothing: kernels still queued may read the old
// buffer, so it is kept until the next synchronize frees it, at the step's end, where nothing is
// queued. Waiting here (a stream synchronize, or cudaFree's wait for the whole device) could wait
// for a pipeline receive whose send the neighbour queues only later, while the neighbour's host
// waits the same way: a deadlock seen under zb-v on the emulated GPUs (pp 2 x dp 2).
//
// The scratch grown to nbytes, or NULL with *err where cudaMalloc failed (the scratch as it was).
static void *scratch_grow(size_t nbytes, cudaError_t *err) {
  if (nbytes <= g_scratch_nbytes) return g_scratch;
  VT_CHECK(g_nretired < VT_CUDA_RETIRED_MAX, "op scratch grew %d times in a step",
           VT_CUDA_RETIRED_MAX);
  void *grown = NULL;
  *err = cudaMalloc(&grown, nbytes);
  if (*err != cudaSuccess) {
    (void)cudaGetLastError();  // (not sticky: cleared for the next check)
    return NULL;
  }
  if (g_scratch) g_retired[g_nretired++] = g_scratch;
  g_scratch = grown, g_scratch_nbytes = nbytes;
  return g_scratch;
}

void *vt_cuda_scratch_try(size_t nbytes) {
  cudaError_t err = cudaSuccess;
  return scratch_grow(nbytes, &err);
}

void *vt_cuda_scratch(size_t nbytes) {
  cudaError_t err = cudaSuccess;
  void *p = scratch_grow(nbytes, &err);
  VT_CHECK(p != NULL || nbytes == 0, "out of GPU memory for %zu MiB of op scratch (%s); try a "
           "smaller --micro-batch-size", nbytes >> 20, cudaGetErrorString(err));
  return p;
}

void vt_cuda_scratch_shed(void) {
  if (!g_scratch) return;
  VT_CHECK(g_nretired < VT_CUDA_RETIRED_MAX, "op scratch grew %d times in a step",
           VT_CUDA_RETIRED_MAX);
  g_retired[g_nretired++] = g_scratch;
  g_scratch = NULL, g_scratch_nbytes = 0;
}

// hold_weights' copy: grow-only like the scratch, but made outside the passes (a step's or an
// evaluation's start), where growing may wait.
static __nv_bfloat16 *g_held = NULL;
static int64_t g_held_cap = 0, g_held_count = 0;
static const float *g_held_from = NULL;  // NULL: nothing held
// The fewest weights a copy failed for: asking again at every step's start would fail again
// (what holds the memory does not shrink) and say so every step, so copies of as many or more
// are not tried again and the failure is said once.
static int64_t g_held_failed = INT64_MAX;
static void cuda_hold_weights(const float *w, int64_t count) {
  g_held_from = NULL;
  if (!vt_cuda_bf16() || count <= 0 || count >= g_held_failed) return;
  if (count > g_held_cap) {
    if (g_held) {
      VT_CUDA_CHECK(cudaStreamSynchronize(g_stream));  // no queued GEMM reads the old copy
      VT_CUDA_CHECK(cudaFree(g_held));
    }
    g_held = NULL, g_held_cap = 0;
    const cudaError_t err = cudaMalloc((void **)&g_held, (size_t)count * sizeof *g_held);
    if (err != cudaSuccess) {  // not fatal: every GEMM rounds its weight itself, as before
      (void)cudaGetLastError();
      g_held = NULL;
      if (g_held_failed == INT64_MAX)
        vt_log_warn("no GPU memory for the weights' bf16 copy (%lld MiB: %s); the GEMMs round "
                    "their weights at each call instead (the same bits, a little slower), for "
                    "the rest of the run", (long long)(count >> 19), cudaGetErrorString(err));
      g_held_failed = count;
      return;
    }
    g_held_cap = count;
  }
  vt_cuda_to_bf16(g_held, w, count);
  g_held_from = w, g_held_count = count;
}
static void cuda_release_weights(void) { g_held_from = NULL; }
const __nv_bfloat16 *vt_cuda_held_weights(const float *w, int64_t n) {
  if (!g_held_from || w < g_held_from || w + n > g_held_from + g_held_count) return NULL;
  return g_held + (w - g_held_from);
}

static void cuda_sync(void) {
  VT_CUDA_CHECK(cudaStreamSynchronize(g_stream));
  for (; g_nretired > 0; g_nretired--) VT_CUDA_CHECK(cudaFree(g_retired[g_nretired - 1]));
}

static size_t cuda_scratch_bytes(void) { return g_scratch_nbytes; }

// Intervals: a begin and an end timing event per stretch on the compute stream, made as needed
// and kept. At most VT_CUDA_INTERVALS stretches wait to be taken (the trainer takes them every
// step); more are not timed.
#define VT_CUDA_INTERVALS 8192
static cudaEvent_t *g_marks = NULL;  // 2 per stretch: begin, end
static int *g_mark_kind = NULL;
static int g_nmarks = 0, g_marks_cap = 0, g_mark_open = 0;  // stretches closed, made; one open
static void cuda_interval_begin(void) {
  g_mark_open = 0;
  if (g_nmarks == g_marks_cap) {
    if (g_marks_cap == VT_CUDA_INTERVALS) return;
    const int cap = g_marks_cap ? 2 * g_marks_cap : 64;
    cudaEvent_t *marks = (cudaEvent_t *)realloc(g_marks, 2 * (size_t)cap * sizeof *marks);
    int *kind = (int *)realloc(g_mark_kind, (size_t)cap * sizeof *kind);
    VT_CHECK(marks && kind, "out of host memory for the pass timing events");
    for (int i = 2 * g_marks_cap; i < 2 * cap; i++)
      VT_CUDA_CHECK(cudaEventCreateWithFlags(&marks[i], cudaEventDefault));
    g_marks = marks, g_mark_kind = kind, g_marks_cap = cap;
  }
  VT_CUDA_CHECK(cudaEventRecord(g_marks[2 * g_nmarks], g_stream));
  g_mark_open = 1;
}
static void cuda_interval_end(int kind) {
  if (!g_mark_open) return;
  VT_CUDA_CHECK(cudaEventRecord(g_marks[2 * g_nmarks + 1], g_stream));
  g_mark_kind[g_nmarks++] = kind;
  g_mark_open = 0;
}
// The timeline's origin: an event on the compute stream, and the host clock read as soon as
// the device has passed it (the wait returns then: the two clocks meet there).
static cudaEvent_t g_origin = NULL;
static double g_origin_host = -1.0;
static void cuda_interval_origin(void) {
  if (!g_origin) VT_CUDA_CHECK(cudaEventCreateWithFlags(&g_origin, cudaEventDefault));
  VT_CUDA_CHECK(cudaEventRecord(g_origin, g_stream));
  VT_CUDA_CHECK(cudaEventSynchronize(g_origin));
  g_origin_host = vt_seconds();
}
static int cuda_interval_take(double *ms, double *count, double *spans, int max_spans) {
  int n = 0;
  for (int i = 0; i < g_nmarks; i++) {  // complete after synchronize: no wait
    float t = 0.0f;
    VT_CUDA_CHECK(cudaEventElapsedTime(&t, g_marks[2 * i], g_marks[2 * i + 1]));
    ms[g_mark_kind[i]] += t, count[g_mark_kind[i]] += 1;
    if (spans && n < max_spans && g_origin_host >= 0.0) {
      float b = 0.0f, e = 0.0f;  // (float milliseconds: within a microsecond for 8 s after it)
      VT_CUDA_CHECK(cudaEventElapsedTime(&b, g_origin, g_marks[2 * i]));
      VT_CUDA_CHECK(cudaEventElapsedTime(&e, g_origin, g_marks[2 * i + 1]));
      spans[2 * n] = g_origin_host + 1e-3 * b, spans[2 * n + 1] = g_origin_host + 1e-3 * e;
      n++;
    }
  }
  g_nmarks = 0;
  return n;
}

// Ranges for Nsight Systems (NVTX, header-only: nothing to link; a call costs a check of a
// pointer unless a profiler is attached). Without the header, none (the table's NULLs).
#ifdef VT_HAVE_NVTX
static void cuda_range_push(const char *name) { nvtxRangePushA(name); }
static void cuda_range_pop(void) { nvtxRangePop(); }
#endif

static vt_backend g_table;
static int g_state = 0;  // 0 not tried, 1 ready, -1 unusable (reason in g_why)
static char g_why[256];

// Failing to set up is a normal answer ("no GPU here"), not a fatal error: tests skip and the
// program falls back or explains, so report instead of aborting.
static int cuda_init(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    snprintf(g_why, sizeof g_why, "no CUDA device is visible (cudaGetDeviceCount: %s)",
             cudaGetErrorString(err));
    (void)cudaGetLastError();
    return -1;
  }
  if (count < 1) {
    snprintf(g_why, sizeof g_why, "no CUDA device is visible (cudaGetDeviceCount found 0)");
    return -1;
  }
  err = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    snprintf(g_why, sizeof g_why, "cannot create a CUDA stream (cudaStreamCreateWithFlags: %s)",
             cudaGetErrorString(err));
    (void)cudaGetLastError();
    return -1;
  }
  cublasStatus_t st = cublasCreate(&g_cublas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    snprintf(g_why, sizeof g_why, "cannot create a cuBLAS handle (cublasCreate: status %d)",
             (int)st);
    cudaStreamDestroy(g_stream);
    g_stream = NULL;
    return -1;
  }
  VT_CUBLAS_CHECK(cublasSetStream(g_cublas, g_stream));
  VT_CUDA_CHECK(cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&g_upload_event, cudaEventDisableTiming));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&g_issued_event, cudaEventDisableTiming));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&g_read_event, cudaEventDisableTiming));
  // Stated, not assumed: fp32 GEMMs stay fp32 (the CPU backend is the reference), so no TF32;
  // the bf16 paths ask for tensor cores per call.
  VT_CUBLAS_CHECK(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));

  g_table.name = "cuda";
  g_table.device = VT_DEVICE_CUDA;
  g_table.alloc = cuda_alloc;
  g_table.free = cuda_free;
  g_table.to_device = cuda_to_device;
  g_table.to_host = cuda_to_host;
  g_table.copy = cuda_copy;
  g_table.zero = cuda_zero;
  g_table.synchronize = cuda_sync;
  g_table.host_alloc = cuda_host_alloc;
  g_table.host_free = cuda_host_free;
  g_table.upload = cuda_upload;
  g_table.upload_ahead = cuda_upload_ahead;
  g_table.inputs_read = cuda_inputs_read;
  g_table.upload_wait = cuda_upload_wait;
  g_table.set_precision = cuda_set_precision;
  g_table.precision = cuda_precision;
  g_table.scratch_bytes = cuda_scratch_bytes;
  g_table.interval_begin = cuda_interval_begin;
  g_table.interval_end = cuda_interval_end;
  g_table.interval_take = cuda_interval_take;
  g_table.interval_origin = cuda_interval_origin;
#ifdef VT_HAVE_NVTX
  g_table.range_push = cuda_range_push;
  g_table.range_pop = cuda_range_pop;
#endif
  // VT_WEIGHT_COPY=0: no held copy (every GEMM rounds its weight; the same bits, more traffic).
  if (vt_cuda_switch_on("VT_WEIGHT_COPY")) {
    g_table.hold_weights = cuda_hold_weights;
    g_table.release_weights = cuda_release_weights;
  }
  g_table.linear_fwd = vt_cuda_linear_fwd;
  g_table.linear_act_fwd = vt_cuda_linear_act_fwd;
  g_table.linear_act_bwd = vt_cuda_linear_act_bwd;
  g_table.linear_residual_fwd = vt_cuda_linear_residual_fwd;
  g_table.linear_bwd = vt_cuda_linear_bwd;
  g_table.linear_bwd_act = vt_cuda_linear_bwd_act;
  g_table.layernorm_fwd = vt_cuda_layernorm_fwd;
  g_table.layernorm_bwd = vt_cuda_layernorm_bwd;
  g_table.add_layernorm_fwd = vt_cuda_add_layernorm_fwd;
  g_table.layernorm_bwd_add = vt_cuda_layernorm_bwd_add;
  g_table.act_fwd = vt_cuda_act_fwd;
  g_table.act_bwd = vt_cuda_act_bwd;
  g_table.attention_fwd = vt_cuda_attention_fwd;
  g_table.attention_bwd = vt_cuda_attention_bwd;
  g_table.latent_attention_fwd = vt_cuda_latent_attention_fwd;
  g_table.latent_attention_bwd = vt_cuda_latent_attention_bwd;
  g_table.to_act = vt_cuda_to_act;
  g_table.qk_norm_fwd = vt_cuda_qk_norm_fwd;
  g_table.qk_norm_bwd = vt_cuda_qk_norm_bwd;
  g_table.add = vt_cuda_add;
  g_table.drop_path = vt_cuda_drop_path;
  g_table.dropout = vt_cuda_dropout;
  g_table.patchify_fwd = vt_cuda_patchify_fwd;
  g_table.patchify_bwd = vt_cuda_patchify_bwd;
  g_table.embed_fwd = vt_cuda_embed_fwd;
  g_table.embed_bwd = vt_cuda_embed_bwd;
  g_table.cls_pool_fwd = vt_cuda_cls_pool_fwd;
  g_table.cls_pool_bwd = vt_cuda_cls_pool_bwd;
  g_table.mean_pool_fwd = vt_cuda_mean_pool_fwd;
  g_table.mean_pool_bwd = vt_cuda_mean_pool_bwd;
  g_table.norm_mean_pool_fwd = vt_cuda_norm_mean_pool_fwd;
  g_table.norm_mean_pool_bwd = vt_cuda_norm_mean_pool_bwd;
  g_table.layer_scale_fwd = vt_cuda_layer_scale_fwd;
  g_table.layer_scale_bwd = vt_cuda_layer_scale_bwd;
  g_table.cross_entropy_fwd = vt_cuda_cross_entropy_fwd;
  g_table.cross_entropy_bwd = vt_cuda_cross_entropy_bwd;
  g_table.bce_fwd = vt_cuda_bce_fwd;
  g_table.adamw = vt_cuda_adamw;
  g_table.lamb_moments = vt_cuda_lamb_moments;
  g_table.lamb_apply = vt_cuda_lamb_apply;
  g_table.sgd = vt_cuda_sgd;
  g_table.ema = vt_cuda_ema;
  g_table.sumsq = vt_cuda_sumsq;
  g_table.scale = vt_cuda_scale;
  return 1;
}

// Whether this build's kernels run on compute capability major.minor: machine code for each
// arch of VT_CUDA_ARCHS (CMake; as "80,90") runs on its major version from its minor up, the PTX
// of the last one on any GPU at least as new (the driver compiles it).
#ifndef VT_CUDA_ARCHS_LIST
#define VT_CUDA_ARCHS_LIST "90"
#endif
static int build_runs_on(int major, int minor) {
  const char *p = VT_CUDA_ARCHS_LIST;
  int last = 0, runs = 0;
  while (*p) {
    const int a = atoi(p);
    if (a / 10 == major && minor >= a % 10) runs = 1;
    last = a;
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  return runs || 10 * major + minor >= last;
}

// One GPU per rank: GPU index modulo the GPUs visible (vt_backend_select), its UUID in id.
// Before the first vt_cuda_backend_get, which creates the stream and the cuBLAS handle on the
// current device.
extern "C" int vt_cuda_select(int index, char *desc, size_t desclen, unsigned char id[16]) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count < 1) {
    snprintf(desc, desclen, "no CUDA device is visible (cudaGetDeviceCount: %s)",
             err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    (void)cudaGetLastError();
    return 1;
  }
  index %= count;  // (more ranks than GPUs here: the caller finds two ranks on one GPU)
  cudaDeviceProp prop;
  err = cudaSetDevice(index);
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) {
    snprintf(desc, desclen, "cannot use GPU %d: %s", index, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return 1;
  }
  // bf16 tensor cores (mma.sync, cp.async: the attention and its WMMA twin) need 8.0.
  if (prop.major < 8) {
    snprintf(desc, desclen, "GPU %d (%s) is compute capability %d.%d; vit3d's CUDA kernels need "
             "8.0 or newer (bf16 tensor cores: A100, H100 and later); use --device cpu",
             index, prop.name, prop.major, prop.minor);
    return 1;
  }
  if (!build_runs_on(prop.major, prop.minor)) {
    snprintf(desc, desclen, "GPU %d (%s) is compute capability %d.%d: this build has no kernels "
             "for it (VT_CUDA_ARCHS %s); rebuild with -DVT_CUDA_ARCHS=%d%d", index, prop.name,
             prop.major, prop.minor, VT_CUDA_ARCHS_LIST, prop.major, prop.minor);
    return 1;
  }
  snprintf(desc, desclen, "cuda:%d %s %.1f GiB", index, prop.name,
           (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  memcpy(id, prop.uuid.bytes, 16);
  return 0;
}

extern "C" size_t vt_cuda_memory_used(void) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total_b - free_b;
}

// Not thread-safe on the first call: the step loop's thread calls it before any other thread
// could need the backend.
extern "C" const vt_backend *vt_cuda_backend_get(const char **why) {
  if (g_state == 0) g_state = cuda_init();
  if (g_state < 0) {
    if (why) *why = g_why;
    return NULL;
  }
  return &g_table;
}
