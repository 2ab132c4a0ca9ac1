// cuda_runtime.h of the CPU emulation (tests/cuda_emu/emu.cpp): the types, launch syntax
// (gen.py rewrites k<<<g, b, shm, st>>>(args) as vt_emu::launch(k, g, b, shm, st)(args), and
// an extern __shared__ array as a pointer to the launch's dynamic shared memory), thread
// indices, barriers and runtime calls that src/cuda uses. Compiled as C++ by the host compiler.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
enum {
  cudaSuccess = 0,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,  // (the errors a kernel leaves behind: cuda_backend.cu's sticky)
  cudaErrorLaunchTimeout = 702,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717,
  cudaErrorInvalidPc = 718,
  cudaErrorLaunchFailure = 719
};
typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
#define cudaEventDefault 0
#define cudaEventDisableTiming 2
#define cudaStreamNonBlocking 1
typedef enum {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
} cudaMemcpyKind;
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct __attribute__((aligned(16))) uint4 {  // CUDA's 16-byte vector (the tiles' chunks)
  unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  uint4 v = {x, y, z, w};
  return v;
}
struct __attribute__((aligned(8))) uint2 {
  unsigned x, y;
};
static inline uint2 make_uint2(unsigned x, unsigned y) {
  uint2 v = {x, y};
  return v;
}
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) {
  float4 v = {x, y, z, w};
  return v;
}
typedef struct {
  char bytes[16];
} cudaUUID_t;
typedef struct {
  char name[256];
  cudaUUID_t uuid;  // "emu-gpu" and the GPU's number plus EMU_GPU_BASE (default 0): the GPUs a
                    // rank sees are another's where their numbers meet
  size_t totalGlobalMem;
  int major, minor;  // 9.0, or EMU_CC's (e.g. 80: 8.0)
} cudaDeviceProp;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };

namespace vt_emu {
struct fiber;
extern fiber *g_cur;
extern dim3 g_block_idx, g_block_dim, g_grid_dim;
const dim3 &tid_of(fiber *f);
void sync_block(const char *file, int line);  // where the __syncthreads is
// A warp-wide barrier: every live lane of the warp waits at the same collective (the emulation
// aborts where lanes wait at different ones).
enum warp_op { WARP_SYNC, WARP_SHFL4, WARP_SHFL8, WARP_MMA, WARP_LDSM, WARP_WMMA };
void sync_warp(warp_op op = WARP_SYNC);
float *warp_slots_f();
double *warp_slots_d();
int lane_of();
void run_grid(dim3 grid, dim3 block, size_t shm, const void *kernel, void (*body)(void *),
              void *arg);
unsigned char *dyn_smem();
// Runs the work queued on stream st (emu_runtime.cpp): a library call or NCCL operation on st
// comes after it.
void flush_stream(cudaStream_t st);
// Queues fn(arg) on stream st, to run after the work queued there before it, when something
// needs the stream's work or (unless when_needed) the device runs ahead (emu_runtime.cpp's
// run_ahead; kernel launches below; nccl_emu.cpp: a collective's result and a wait for
// messages, when needed only).
void defer_on_stream(cudaStream_t st, void (*fn)(void *), void *arg, bool when_needed = false);
template <class F>
struct launcher;
template <class... P>
struct launcher<void(P...)> {
  void (*k)(P...);
  dim3 grid, block;
  size_t shm;
  cudaStream_t st;
  void operator()(P... a) {
    // The kernel waits in its stream's queue, its arguments copied, until something needs the
    // stream's work.
    auto job = [k = k, g = grid, b = block, shm = shm, a...]() {
      auto fn = [&]() { k(a...); };
      run_grid(g, b, shm, (const void *)k, [](void *p) { (*(decltype(fn) *)p)(); }, &fn);
    };
    using job_t = decltype(job);
    defer_on_stream(st, [](void *p) {
      (*(job_t *)p)();
      delete (job_t *)p;
    }, new job_t(job));
  }
};
template <class F>
launcher<F> launch(F *k, dim3 g, dim3 b, size_t shm = 0, cudaStream_t st = 0) {
  return launcher<F>{k, g, b, shm, st};
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (src/cuda/cuda_common.h's vt_mma16816):
// every lane of the warp brings its fragment registers in the PTX ISA's layout (g = lane / 4,
// t = lane % 4; A, 16 x 16: register r holds row g + 8 (r & 1), columns 2t + 8 (r >> 1) and the
// next; B, 16 x 8: register r holds rows 2t + 8r and the next of column g; C and D, 16 x 8: d[i]
// is row g + 8 (i >> 1), column 2t + (i & 1); a register's first element in its low half). The
// products are exact and summed in k order onto d; real tensor cores sum in their own order.
struct mma_regs {
  unsigned a[4], b[2];
};
mma_regs *warp_mma_slots();  // the warp's 32 lanes' registers
inline float mma_half(unsigned reg, int hi) {
  const unsigned u = (hi ? reg >> 16 : reg & 0xffffu) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline void mma16816(float d[4], const unsigned a[4], const unsigned b[2]) {
  mma_regs *s = warp_mma_slots();
  const int lane = lane_of();
  for (int r = 0; r < 4; r++) s[lane].a[r] = a[r];
  s[lane].b[0] = b[0], s[lane].b[1] = b[1];
  sync_warp(WARP_MMA);
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; i++) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; k++) {
      const float x = mma_half(s[(row % 8) * 4 + (k % 8) / 2].a[row / 8 + 2 * (k / 8)], k & 1);
      const float y = mma_half(s[col * 4 + (k % 8) / 2].b[k / 8], k & 1);
      acc += x * y;
    }
    d[i] = acc;
  }
  sync_warp(WARP_MMA);
}

// cp.async (src/cuda/cuda_common.h's vt_cp_async16/4, commit, wait): each thread's copies wait
// in its own queue, grouped by its commits, until cp_async_wait lets no more than n of its newest
// groups stay in flight (emu.cpp): a kernel that reads a tile before the wait (and the barrier
// after it) for its group reads what was there before, NaN in a fresh launch. With
// EMU_CP_ASYNC=early every copy lands when issued instead, so a copy issued into a tile that
// other threads still read (before the barrier that ends their reads) changes what they read.
// Destinations must lie in the launch's dynamic shared memory, 16-byte (4-byte) aligned, and
// sources as aligned (PTX requires cp.async's addresses aligned to the copy's size).
void cp_async(void *dst, const void *src, int bytes, bool valid);
inline void cp_async16(void *dst, const void *src, bool valid) { cp_async(dst, src, 16, valid); }
inline void cp_async4(void *dst, const void *src, bool valid) { cp_async(dst, src, 4, valid); }
void cp_async_commit();
void cp_async_wait_groups(int n);
template <int N>
void cp_async_wait() {
  cp_async_wait_groups(N);
}
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (cuda_common.h's vt_ldsm_x4[_trans]): lane
// 8i + r brings the address of row r of matrix i; lane 4r + c gets, in register i, row r's
// elements 2c and 2c + 1, or with trans column r's elements in rows 2c and 2c + 1.
const void **warp_ptr_slots();
void check_ldsm_row(const void *row);  // in dynamic shared memory, 16-byte aligned
inline void ldsm(unsigned r[4], const void *row, bool trans) {
  const void **s = warp_ptr_slots();
  const int lane = lane_of(), g = lane >> 2, t = lane & 3;
  check_ldsm_row(row);
  s[lane] = row;
  sync_warp(WARP_LDSM);
  for (int i = 0; i < 4; i++) {
    uint16_t lo, hi;
    if (trans) {
      memcpy(&lo, (const uint16_t *)s[8 * i + 2 * t] + g, 2);
      memcpy(&hi, (const uint16_t *)s[8 * i + 2 * t + 1] + g, 2);
    } else {
      memcpy(&lo, (const uint16_t *)s[8 * i + g] + 2 * t, 2);
      memcpy(&hi, (const uint16_t *)s[8 * i + g] + 2 * t + 1, 2);
    }
    r[i] = (unsigned)lo | (unsigned)hi << 16;
  }
  sync_warp(WARP_LDSM);
}
inline void ldsm_x4(unsigned r[4], const void *row) { ldsm(r, row, false); }
inline void ldsm_x4_trans(unsigned r[4], const void *row) { ldsm(r, row, true); }

// Lane src's v (shfl), or lane (this lane ^ o)'s (shfl_xor); every lane of the warp calls it.
template <class T>
T shfl_from(T v, int src) {
  T *s = (T *)(sizeof(T) == 4 ? (void *)warp_slots_f() : (void *)warp_slots_d());
  const warp_op op = sizeof(T) == 4 ? WARP_SHFL4 : WARP_SHFL8;
  s[lane_of()] = v;
  sync_warp(op);
  T r = s[src & 31];
  sync_warp(op);
  return r;
}
template <class T>
T shfl_xor(T v, int o) {
  return shfl_from(v, lane_of() ^ o);
}
}  // namespace vt_emu

#define VT_CUDA_EMULATION 1  // src/cuda/cuda_common.h: vt_mma16816 is vt_emu::mma16816
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define threadIdx (vt_emu::tid_of(vt_emu::g_cur))
#define blockIdx (vt_emu::g_block_idx)
#define blockDim (vt_emu::g_block_dim)
#define gridDim (vt_emu::g_grid_dim)
#define __syncthreads() vt_emu::sync_block(__FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, o) vt_emu::shfl_xor((v), (o))
#define __shfl_sync(mask, v, src) vt_emu::shfl_from((v), (src))
#define __syncwarp(...) vt_emu::sync_warp()
// A product rounded on its own, never fused into an FMA (the kernels are built to fuse every
// other a * b + c they can, as nvcc does: tests/CMakeLists.txt), so the volatile store.
static inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// y, the host library's f(x), moved by -m to +m ulp, by a hash of x's bits and the function's salt
// (the same x, the same result): what a GPU's approximation may give where it is bounded to m ulp
// (plus the host library's own error, under an ulp), so that the tolerances hold for any such
// error, and a check that needs the CPU's exact bits from such a function fails here as it could
// on a GPU. Infinities, NaNs and zeros stay.
static inline float emu_ulps(float y, float x, unsigned salt, int m) {
  unsigned u;
  memcpy(&u, &x, 4);
  u = (u ^ salt ^ (u >> 15)) * 0x2c1b3c6dU;
  for (int k = (int)((u >> 16) % (2 * m + 1)) - m; k != 0 && isfinite(y) && y != 0.0f;
       k += k > 0 ? -1 : 1)
    y = nextafterf(y, k > 0 ? INFINITY : -INFINITY);
  return y;
}

// PTX ex2.approx.ftz.f32 (cuda_common.h's vt_ex2) as the ISA bounds it rather than exactly:
// 2^x off by up to 2 ulp, results below 2^-126 flushed to zero.
static inline float ex2_approx(float x) {
  const float y = exp2f(x);
  return y < 0x1p-126f ? 0.0f : emu_ulps(y, x, 0, 2);
}

// The CUDA Math API's single-precision functions that the kernels call, each off by up to its
// documented maximum error (the CUDA C++ Programming Guide's table: expf and erff 2 ulp, logf,
// log2f and log1pf 1 ulp; sqrtf and division are IEEE, nvcc's default, so exact). The kernels
// call nothing else that a GPU rounds differently; host code in src/cuda calls none of these.
static inline float emu_expf(float x) { return emu_ulps(expf(x), x, 0x1000193u, 2); }
static inline float emu_erff(float x) { return emu_ulps(erff(x), x, 0x2000193u, 2); }
static inline float emu_logf(float x) { return emu_ulps(logf(x), x, 0x3000193u, 1); }
static inline float emu_log2f(float x) { return emu_ulps(log2f(x), x, 0x4000193u, 1); }
static inline float emu_log1pf(float x) { return emu_ulps(log1pf(x), x, 0x5000193u, 1); }
#define expf(x) emu_expf(x)
#define erff(x) emu_erff(x)
#define logf(x) emu_logf(x)
#define log2f(x) emu_log2f(x)
#define log1pf(x) emu_log1pf(x)

cudaError_t cudaMalloc(void **p, size_t n);
template <class T>
cudaError_t cudaMalloc(T **p, size_t n) {
  return cudaMalloc((void **)p, n);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h,
                              cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned f);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int i);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int i);
cudaError_t cudaMemGetInfo(size_t *f, size_t *t);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDevice(int *i);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev);
cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v);
template <class F>
cudaError_t cudaFuncSetAttribute(F *f, cudaFuncAttribute a, int v) {
  return cudaFuncSetAttribute((const void *)f, a, v);
}
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
#define cudaHostAllocDefault 0
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostGetFlags(unsigned *flags, void *p);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f);
