// emu.cpp: a CPU emulation of the part of the CUDA runtime, cuBLAS and cuBLASLt (emu_blas.cpp)
// that src/cuda uses, so that tests/test_cuda_ops.c and vit3d itself (vit3d_emu, with
// nccl_emu.cpp) can run the CUDA code's logic on a machine without a GPU (CI). This file runs
// kernels; emu_runtime.cpp has the streams, events and memory. Each CUDA thread is a fiber
// (below); the blocks of a grid run one after another, in a fresh random order per launch;
// __syncthreads and the warp collectives are barriers of a small scheduler that aborts on a
// deadlock, a warp whose lanes wait at different collectives or a block whose threads wait at
// different __syncthreads, and runs the threads between barriers in a random order.
// Dynamic shared memory is a buffer per launch, NaN for every block; WMMA is include/mma.h;
// mma.sync (m16n8k16, bf16) and ldmatrix (x4) are in include/cuda_runtime.h, from the PTX
// fragment layouts; cp.async copies wait in their thread's queue until its wait_group lets them
// land (EMU_CP_ASYNC=early: at their issue). cuBLAS is a plain column-major GEMM with fp32 sums
// in k order; bf16 operands are widened exactly, a bf16 C rounded to nearest even. The kernels
// are compiled to fuse multiply-adds where the machine can (tests/CMakeLists.txt), as nvcc does,
// and ex2.approx and the CUDA math functions they call are off by up to their documented errors
// (include/cuda_runtime.h).
// What it finds of data races: those whose outcome depends on the order of threads within a
// block or of the blocks of a grid (each launch runs them in a fresh random order; two runs then
// differ). Not found: races between blocks that need them to overlap (they run one after another),
// real launch limits (ptxas's registers and spills: tests/kernel_resources.py), cuBLAS's own
// summation order and which products nvcc fuses; tests/gpu/run.sh on a real GPU checks those.
#include <time.h>
#include <ucontext.h>

#include <deque>
#include <functional>
#include <vector>

#include "cuda_runtime.h"
#include "cuda_bf16.h"

namespace vt_emu {

struct pending_copy {  // a cp.async not yet landed: its bytes as read at the issue
  unsigned char *dst;
  unsigned char data[16];
  int bytes, group;  // group: the thread's commits before it (its group once committed)
};

// Fibers switch through fiber_switch. ucontext's swapcontext and getcontext make a system call
// each (they save and restore the signal mask), which was 40% of an emulated attention test's
// time; on x86-64 the switch below saves only what the SysV ABI has a callee keep (rbx, rbp,
// r12-r15; no fiber changes MXCSR or the x87 control word) and swaps stack pointers. Elsewhere,
// and under AddressSanitizer (which follows stacks through swapcontext), ucontext does it.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define EMU_OWN_SWITCH 1
extern "C" void vt_emu_switch(void **save_sp, void *load_sp);
asm(".text\n"
    ".globl vt_emu_switch\n"
    ".type vt_emu_switch, @function\n"
    "vt_emu_switch:\n"  // rdi: where to save this stack's pointer; rsi: the stack to resume
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size vt_emu_switch, .-vt_emu_switch\n");
struct emu_ctx {
  void *sp;
};
#else
struct emu_ctx {
  ucontext_t uc;
};
#endif

struct fiber {
  emu_ctx ctx;
  dim3 tid;
  int linear, warp, lane;
  int state;  // 0 runnable, 1 at block barrier, 2 at warp barrier, 3 done
  int at;     // with state 2: which warp collective (vt_emu::warp_op)
  const char *file;  // with state 1: the __syncthreads it waits at
  int line;
  std::vector<pending_copy> copies;  // cp.async in flight, oldest first
  int commits;                       // cp.async groups committed so far
};

fiber *g_cur;
dim3 g_block_idx, g_block_dim, g_grid_dim;
static emu_ctx g_sched;
static fiber *g_fibers;
static char *g_stacks;
static int g_nthreads;
static const size_t kStack = 256 * 1024;
static void (*g_body)(void *);
static void *g_arg;
static float g_slots_f[32][32];
static double g_slots_d[32][32];

const dim3 &tid_of(fiber *f) { return f->tid; }
int lane_of() { return g_cur->lane; }
float *warp_slots_f() { return g_slots_f[g_cur->warp]; }
static mma_regs g_mma_slots[32][32];
mma_regs *warp_mma_slots() { return g_mma_slots[g_cur->warp]; }
double *warp_slots_d() { return g_slots_d[g_cur->warp]; }
static const void *g_ptr_slots[32][32];
const void **warp_ptr_slots() { return g_ptr_slots[g_cur->warp]; }

static void fiber_switch(emu_ctx *save, emu_ctx *load) {
#ifdef EMU_OWN_SWITCH
  vt_emu_switch(&save->sp, load->sp);
#else
  swapcontext(&save->uc, &load->uc);
#endif
}

void sync_block(const char *file, int line) {
  g_cur->state = 1;
  g_cur->file = file, g_cur->line = line;
  fiber_switch(&g_cur->ctx, &g_sched);
}
void sync_warp(warp_op op) {
  g_cur->state = 2;
  g_cur->at = op;
  fiber_switch(&g_cur->ctx, &g_sched);
}

static const char *warp_op_name(int op) {
  static const char *const names[] = {"__syncwarp", "a 4-byte shuffle", "an 8-byte shuffle",
                                      "mma.sync", "ldmatrix", "a WMMA mma_sync"};
  return op >= 0 && op < (int)(sizeof names / sizeof *names) ? names[op] : "?";
}

// A fiber's first code; it never returns (the scheduler does not resume a finished fiber).
static void trampoline() {
  g_body(g_arg);
  g_cur->state = 3;
  fiber_switch(&g_cur->ctx, &g_sched);
  abort();
}

// Sets a fiber up to start in trampoline on the given stack at its first switch.
static void fiber_start(emu_ctx *c, char *stack, size_t size) {
#ifdef EMU_OWN_SWITCH
  // What vt_emu_switch pops: six registers (zero), then trampoline as the return address, at
  // a 16-byte boundary, so that trampoline starts as if called (rsp + 8 aligned), its own
  // return address a zero above it.
  void **top = (void **)(((uintptr_t)(stack + size) & ~(uintptr_t)15) - 16);
  top[0] = (void *)trampoline;
  top[1] = NULL;
  for (int r = 1; r <= 6; r++) top[-r] = NULL;
  c->sp = top - 6;
#else
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = NULL;
  makecontext(&c->uc, trampoline, 0);
#endif
}

// xorshift64*: the scheduling order below; the same sequence in every process.
static uint64_t next_random() {
  static uint64_t x = 0x9e3779b97f4a7c15ull;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  return x * 0x2545f4914f6cdd1dull;
}

// order = 0 .. n-1 shuffled (Fisher-Yates on next_random): the order threads and blocks run in.
static void random_order(std::vector<uint32_t> &order, uint64_t n) {
  order.resize(n);
  for (uint64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
  for (uint64_t i = n; i > 1; i--) {
    const uint64_t j = next_random() % i;
    const uint32_t t = order[i - 1];
    order[i - 1] = order[j], order[j] = t;
  }
}

static void run_block() {
  const int n = g_nthreads;
  for (int i = 0; i < n; i++) {
    fiber *f = &g_fibers[i];
    f->linear = i;
    f->tid = dim3(i % g_block_dim.x, (i / g_block_dim.x) % g_block_dim.y,
                  i / (g_block_dim.x * g_block_dim.y));
    f->warp = i / 32, f->lane = i % 32;
    f->state = 0;
    f->copies.clear();
    f->commits = 0;
    fiber_start(&f->ctx, g_stacks + (size_t)i * kStack, kStack);
  }
  for (;;) {
    int progressed = 0, live = 0;
    // Runnable threads go in a fresh random order every round (a round ends at barriers), so a
    // kernel that reads another thread's write without a barrier between them sees different
    // orders in different launches: test_cuda_ops's two runs of an op then differ ("repeat
    // DIFFERS"), or disagree with the CPU.
    static std::vector<uint32_t> order;
    random_order(order, (uint64_t)n);
    for (int k = 0; k < n; k++) {
      fiber *f = &g_fibers[order[k]];
      if (f->state != 0) continue;
      g_cur = f;
      fiber_switch(&g_sched, &f->ctx);
      progressed = 1;
    }
    for (int i = 0; i < n; i++) live += g_fibers[i].state != 3;
    if (!live) return;
    // Release warp barriers where every live lane of the warp waits at one.
    int released = 0;
    for (int w = 0; w * 32 < n; w++) {
      int wl = 0, wait = 0;
      for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
        wl += g_fibers[i].state != 3;
        wait += g_fibers[i].state == 2;
      }
      if (wl && wait == wl) {
        // Every live lane at the same collective: on a GPU lanes at different ones (a shuffle
        // and an ldmatrix, say) exchange nothing sensible.
        int first = -1;
        for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
          if (g_fibers[i].state != 2) continue;
          if (first < 0) first = i;
          if (g_fibers[i].at != g_fibers[first].at) {
            fprintf(stderr, "emu: warp %d diverged: lane %d at %s, lane %d at %s (block %u)\n",
                    w, first % 32, warp_op_name(g_fibers[first].at), i % 32,
                    warp_op_name(g_fibers[i].at), g_block_idx.x);
            abort();
          }
        }
        for (int i = w * 32; i < n && i < w * 32 + 32; i++)
          if (g_fibers[i].state == 2) g_fibers[i].state = 0;
        released = 1;
      } else if (wait && wait != wl) {
        // some lanes at a shuffle, others elsewhere: check none are runnable
        int runnable = 0;
        for (int i = w * 32; i < n && i < w * 32 + 32; i++) runnable += g_fibers[i].state == 0;
        if (!runnable) {
          fprintf(stderr, "emu: warp %d diverged at a shuffle (block %u)\n", w, g_block_idx.x);
          abort();
        }
      }
    }
    if (!released) {
      int wait = 0;
      for (int i = 0; i < n; i++) wait += g_fibers[i].state == 1;
      if (wait == live) {
        // Every live thread at the same __syncthreads: one in a branch that not all threads
        // take (or two in the branches of one) hangs or misbehaves on a GPU.
        const fiber *first = nullptr;
        for (int i = 0; i < n; i++) {
          const fiber *f = &g_fibers[i];
          if (f->state != 1) continue;
          if (!first) first = f;
          if (f->line != first->line || strcmp(f->file, first->file) != 0) {
            fprintf(stderr, "emu: threads %d and %d of block %u wait at different __syncthreads "
                    "(%s:%d and %s:%d)\n", first->linear, f->linear, g_block_idx.x,
                    first->file, first->line, f->file, f->line);
            abort();
          }
        }
        for (int i = 0; i < n; i++)
          if (g_fibers[i].state == 1) g_fibers[i].state = 0;
        released = 1;
      }
    }
    if (!released && !progressed) {
      fprintf(stderr, "emu: deadlock in block %u\n", g_block_idx.x);
      abort();
    }
  }
}

// Dynamic shared memory: the launch's size, refilled with NaN for every block (a kernel that
// reads shared memory nobody wrote shows it). More than the default 48 KiB needs the kernel's
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first, as on a GPU; sm_90 allows 227 KiB.
// EMU_SMEM_OPTIN=BYTES claims another GPU's opt-in limit (an A100: 166912, sm_86/89: 101376).
static int smem_optin() {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("EMU_SMEM_OPTIN");
    v = e ? atoi(e) : 232448;
  }
  return v;
}
static unsigned char *g_dyn;
static size_t g_dyn_size;
static struct { const void *k; int bytes; } g_smem_attr[256];  // kernels with a raised limit
unsigned char *dyn_smem() { return g_dyn; }

static void check_smem(const void *p, size_t n, size_t align, const char *what) {
  const unsigned char *c = (const unsigned char *)p;
  if (!g_dyn || c < g_dyn || c + n > g_dyn + g_dyn_size || (uintptr_t)c % align) {
    fprintf(stderr, "emu: %s at %p: not %zu bytes inside the launch's dynamic shared memory "
            "(%p, %zu bytes) or not %zu-byte aligned (block %u,%u)\n", what, p, n,
            (void *)g_dyn, g_dyn_size, align, g_block_idx.x, g_block_idx.y);
    abort();
  }
}
void check_ldsm_row(const void *row) { check_smem(row, 16, 16, "ldmatrix row"); }

static bool cp_async_early() {
  static int early = -1;
  if (early < 0) {
    const char *e = getenv("EMU_CP_ASYNC");
    early = e && strcmp(e, "early") == 0;
  }
  return early;
}
void cp_async(void *dst, const void *src, int bytes, bool valid) {
  check_smem(dst, (size_t)bytes, (size_t)bytes, "cp.async destination");
  if ((uintptr_t)src % (uintptr_t)bytes) {  // PTX: its addresses aligned to the size
    fprintf(stderr, "emu: cp.async source %p not %d-byte aligned (block %u,%u)\n", src, bytes,
            g_block_idx.x, g_block_idx.y);
    abort();
  }
  pending_copy c;
  c.dst = (unsigned char *)dst, c.bytes = bytes, c.group = g_cur->commits;
  if (valid) memcpy(c.data, src, (size_t)bytes);
  else memset(c.data, 0, sizeof c.data);
  if (cp_async_early()) memcpy(c.dst, c.data, (size_t)bytes);
  else g_cur->copies.push_back(c);
}
void cp_async_commit() { g_cur->commits++; }
void cp_async_wait_groups(int n) {
  std::vector<pending_copy> &q = g_cur->copies;
  size_t done = 0;  // copies are queued in group order: land the groups older than the newest n
  while (done < q.size() && q[done].group < g_cur->commits - n) {
    memcpy(q[done].dst, q[done].data, (size_t)q[done].bytes);
    done++;
  }
  q.erase(q.begin(), q.begin() + (long)done);
}

void run_grid(dim3 grid, dim3 block, size_t shm, const void *kernel, void (*body)(void *),
              void *arg) {
  if (shm > 48 * 1024) {
    int allowed = 0;
    for (auto &a : g_smem_attr)
      if (a.k == kernel) allowed = a.bytes;
    if (shm > (size_t)allowed) {
      fprintf(stderr, "emu: launch with %zu bytes of dynamic shared memory, more than 48 KiB, "
              "without cudaFuncSetAttribute allowing it (allowed: %d)\n", shm, allowed);
      abort();
    }
  }
  free(g_dyn);
  g_dyn = nullptr;  // the launch's bytes exactly, as cudaMalloc's
  if (shm && posix_memalign((void **)&g_dyn, 128, shm)) g_dyn = nullptr;
  g_dyn_size = shm;
  const int n = (int)(block.x * block.y * block.z);
  if (n <= 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.x > 2147483647u ||
      grid.y > 65535 || grid.z > 65535) {
    fprintf(stderr, "emu: bad launch grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y, grid.z,
            block.x, block.y, block.z);
    abort();
  }
  if (n % 32) {
    fprintf(stderr, "emu: block of %d threads is not whole warps\n", n);
  }
  if (!g_fibers) {
    g_fibers = new fiber[1024];
    g_stacks = (char *)malloc(1024 * kStack);
  }
  g_nthreads = n;
  g_body = body, g_arg = arg;
  g_block_dim = block, g_grid_dim = grid;
  // The blocks in a fresh random order every launch, as a GPU may schedule them: a kernel whose
  // block reads what another block of the same launch writes (without the atomics and fences
  // that make that safe) then gives other results in other launches.
  static std::vector<uint32_t> order;
  const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
  if (nblocks > UINT32_MAX) {
    fprintf(stderr, "emu: a grid of %llu blocks is more than the emulation numbers\n",
            (unsigned long long)nblocks);
    abort();
  }
  random_order(order, nblocks);
  for (uint64_t i = 0; i < nblocks; i++) {
    const uint32_t b = order[i];
    g_block_idx = dim3(b % grid.x, b / grid.x % grid.y, b / grid.x / grid.y);
    if (g_dyn) memset(g_dyn, 0xff, g_dyn_size);
    run_block();
  }
}
}  // namespace vt_emu

// The opt-in shared memory limit and the kernels' raised limits (cudaFuncSetAttribute).
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
  if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return 1;
  *v = vt_emu::smem_optin();
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v) {
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > vt_emu::smem_optin())
    return 1;
  for (auto &s : vt_emu::g_smem_attr)
    if (s.k == f || !s.k) {
      s.k = f, s.bytes = v;
      return cudaSuccess;
    }
  return 1;
}
