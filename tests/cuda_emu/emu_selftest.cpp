// emu_selftest.cpp: checks that the CUDA emulation finds the mistakes it claims to (tests/cuda_emu:
// emu.cpp, nccl_emu.cpp), each case in a child process, since the emulation ends the process
// where it finds one. A collective's result reaches its output only in its stream's order, so
// another stream that reads it without waiting reads the old values, and a write from another
// stream while the collective is in flight aborts the process; so do a warp whose lanes wait at
// different warp collectives and a block whose threads wait at different __syncthreads. A
// pinned buffer rewritten before its upload was waited for gives the device the new values.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "cuda_runtime.h"
#include "nccl.h"

namespace {

const size_t kN = 64;
ncclComm_t g_comm;
cudaStream_t g_a, g_b;  // the collective's stream and another
float *g_x, *g_y;       // device buffers of kN floats

float *filled(float v) {
  float *p = nullptr;
  if (cudaMalloc((void **)&p, kN * sizeof(float)) != cudaSuccess) _exit(5);
  std::vector<float> h(kN, v);
  cudaMemcpyAsync(p, h.data(), kN * sizeof(float), cudaMemcpyHostToDevice, g_b);
  cudaStreamSynchronize(g_b);
  return p;
}

// The first element of device buffer p, read after stream st's work.
float first(const float *p, cudaStream_t st) {
  float v = -1;
  cudaMemcpyAsync(&v, p, sizeof v, cudaMemcpyDeviceToHost, st);
  cudaStreamSynchronize(st);
  return v;
}

void setup() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) || ncclCommInitRank(&g_comm, 1, id, 0)) _exit(5);
  cudaStreamCreateWithFlags(&g_a, 0);
  cudaStreamCreateWithFlags(&g_b, 0);
  g_x = filled(1), g_y = filled(0);
}

// Stream b waits for the work queued on stream a so far.
void b_waits_for_a() {
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaEventRecord(e, g_a);
  cudaStreamWaitEvent(g_b, e, 0);
}

// The result of y <- all-reduce(x) on stream a is not seen by stream b until b waits for a.
int late_result() {
  ncclAllReduce(g_x, g_y, kN, ncclFloat, ncclSum, g_comm, g_a);
  if (first(g_y, g_b) != 0) return 3;  // still the old value
  b_waits_for_a();
  return first(g_y, g_b) == 1 ? 0 : 4;
}

// A write of the input or the output on stream b, not ordered against the collective: aborts.
int written_in_flight(float *buf) {
  ncclAllReduce(g_x, g_y, kN, ncclFloat, ncclSum, g_comm, g_a);
  cudaMemsetAsync(buf, 0x7f, kN * sizeof(float), g_b);
  cudaStreamSynchronize(g_b);
  cudaStreamSynchronize(g_a);
  return 0;
}
int input_written() { return written_in_flight(g_x); }
int output_written() { return written_in_flight(g_y); }

// The same write after stream b waited for the collective: fine.
int ordered_write() {
  ncclAllReduce(g_x, g_x, kN, ncclFloat, ncclSum, g_comm, g_a);
  b_waits_for_a();
  cudaMemsetAsync(g_x, 0, kN * sizeof(float), g_b);
  cudaStreamSynchronize(g_b);
  cudaStreamSynchronize(g_a);
  return first(g_x, g_b) == 0 ? 0 : 6;
}

// Lanes 0-15 shuffle while lanes 16-31 wait at __syncwarp: a diverged warp, which aborts.
__global__ void diverged_kernel(float *out) {
  float v = (float)threadIdx.x;
  if (threadIdx.x < 16)
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  else
    __syncwarp();
  out[threadIdx.x] = v;
}
// Every lane at the same shuffle: fine.
__global__ void uniform_kernel(float *out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}
int run_kernel(void (*k)(float *)) {
  vt_emu::launch(k, dim3(1), dim3(32), 0, g_a)(g_y);
  cudaStreamSynchronize(g_a);
  return first(g_y, g_a) == 1 ? 0 : 7;  // lane 0 got lane 1's value
}
int diverged_warp() { return run_kernel(diverged_kernel); }
int uniform_warp() { return run_kernel(uniform_kernel); }

// The block's two warps at two different __syncthreads: aborts.
__global__ void split_barrier_kernel(float *out) {
  if (threadIdx.x < 32)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}
int split_barrier() {
  vt_emu::launch(split_barrier_kernel, dim3(1), dim3(64), 0, g_a)(g_y);
  cudaStreamSynchronize(g_a);
  return 0;
}

// An upload as the backend makes one: a copy from pinned memory on stream b, which stream a then
// waits for. The host rewrites the pinned source before anything waited for the copy: the copy
// has not run yet (a stream's wait is queued too), so the device gets the new values, as a GPU
// may give it; a program must wait for the copy before it reuses its source.
int pinned_rewritten() {
  float *h = nullptr;
  if (cudaHostAlloc((void **)&h, kN * sizeof(float), 0) != cudaSuccess) return 5;
  for (size_t i = 0; i < kN; i++) h[i] = 1;
  cudaMemcpyAsync(g_y, h, kN * sizeof(float), cudaMemcpyHostToDevice, g_b);
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaEventRecord(e, g_b);
  cudaStreamWaitEvent(g_a, e, 0);
  for (size_t i = 0; i < kN; i++) h[i] = 2;  // too early
  return first(g_y, g_a) == 2 ? 0 : 8;
}

struct test_case {
  const char *name;
  int (*run)();
  int want;  // the child's exit status: 0, 1 where the emulated NCCL stops, 128 + its signal
};

}  // namespace

int main() {
  const test_case cases[] = {{"late_result", late_result, 0},
                             {"input_written", input_written, 1},
                             {"output_written", output_written, 1},
                             {"ordered_write", ordered_write, 0},
                             {"diverged_warp", diverged_warp, 128 + SIGABRT},
                             {"uniform_warp", uniform_warp, 0},
                             {"split_barrier", split_barrier, 128 + SIGABRT},
                             {"pinned_rewritten", pinned_rewritten, 0}};
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each line before the next child's messages
  setenv("EMU_RUN_AHEAD", "0", 1);  // the queues alone: each case's order is the one it sets
  int failed = 0;
  for (const test_case &c : cases) {
    const pid_t pid = fork();
    if (pid == 0) {
      setup();
      _exit(c.run());
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const int got = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    printf("%-16s exit %d, want %d: %s\n", c.name, got, c.want, got == c.want ? "ok" : "FAIL");
    failed += got != c.want;
  }
  printf("%s\n", failed ? "emu_selftest: FAILED" : "emu_selftest: ok");
  return failed != 0;
}
