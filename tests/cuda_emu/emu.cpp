// emu.cpp: a CPU emulation of the part of the CUDA runtime, cuBLAS and cuBLASLt (emu_blas.cpp)
// that src/cuda uses, so that tests/test_cuda_ops.c and vit3d itself (vit3d_emu, with
// nccl_emu.cpp) can run the CUDA code's logic on a machine without a GPU (CI). Each CUDA thread
// is a fiber (below); the blocks of a grid run one after another; __syncthreads and warp
// shuffles are barriers of a small scheduler that aborts on a deadlock or a warp that diverges
// at a shuffle, and runs the threads between barriers in a random order.
// Dynamic shared memory is a buffer per launch, NaN for every block; WMMA is include/mma.h;
// mma.sync (m16n8k16, bf16) and ldmatrix (x4) are in include/cuda_runtime.h, from the PTX
// fragment layouts; cp.async copies wait in their thread's queue until its wait_group lets them
// land (EMU_CP_ASYNC=early: at their issue).
// Streams: kernels, asynchronous copies and memsets and events' marks wait in their stream's
// queue until something needs them (a library call or NCCL operation on that stream, a wait on
// an event recorded after them, a synchronize, a copy to pageable memory), as late as a GPU that
// lags the host may run them. So a kernel that does not wait for another stream's kernel or copy
// reads stale data, and a host buffer reused before its copy ran shows. cuBLAS is a plain
// column-major GEMM with fp32 sums in k order; bf16 operands are widened exactly, a bf16 C
// rounded to nearest even.
// What it finds of data races: those whose outcome depends on the order of threads within a
// block or of the blocks of a grid (each launch runs them in a fresh random order; two runs then
// differ). Not found: races between blocks that need them to overlap (they run one after another),
// real launch and resource limits, cuBLAS's own summation order and FMA contraction;
// tests/gpu/run.sh on a real GPU checks those.
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
static const int kSmemOptin = 232448;
static unsigned char *g_dyn;
static size_t g_dyn_size;
static struct { const void *k; int bytes; } g_smem_attr[64];
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

// ---- streams and events ----
struct emu_work {
  std::function<void()> run;
  bool when_needed;  // never run ahead (below): only when something needs the stream's work
};
struct emu_stream {
  std::deque<emu_work> q;         // queued kernels, copies, memsets, marks, oldest first
  uint64_t issued = 0, done = 0;  // how many were queued and run
};
struct emu_event {
  emu_stream *s = nullptr;  // where it was last recorded (none: complete)
  uint64_t seq = 0;         // the stream's work queued before the record
  bool timing = true;       // not made with cudaEventDisableTiming
  double ms = -1;           // the host clock when the last record's mark ran
  uint64_t records = 0;     // records so far (a mark writes ms only for the last one)
};
static emu_stream g_null_stream;
static std::vector<emu_stream *> g_streams;
static emu_stream *stream_of(cudaStream_t s) { return s ? s : &g_null_stream; }
static void run_front(emu_stream *s) {
  std::function<void()> f = std::move(s->q.front().run);
  s->q.pop_front();
  f();
  s->done++;
}
static void run_until(emu_stream *s, uint64_t seq) {
  while (s->done < seq) run_front(s);
}

// The device also runs ahead of the host at times: after one in four enqueues, the oldest one
// to three items of a random stream with work run at once (up to an item queued to run only
// when needed: a wait for a message, which could block the host, or a collective's result, kept
// as late as a GPU could make it), as a GPU may run any stream's work once the work before it
// there is done. So two streams' kernels and copies that nothing orders run in either order in
// different places of a run, as on a GPU, where the queues alone would always run the stream
// synchronized first. Its own random sequence (EMU_SEED picks another; EMU_RUN_AHEAD=0: the
// queues only).
static void run_ahead() {
  static int on = -1;
  static uint64_t x;
  if (on < 0) {
    const char *e = getenv("EMU_RUN_AHEAD"), *seed = getenv("EMU_SEED");
    on = !(e && strcmp(e, "0") == 0);
    x = (0x853c49e6748fea9bull ^ (seed ? strtoull(seed, NULL, 10) : 0)) | 1;  // never 0
  }
  if (!on) return;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  const uint64_t r = x * 0x2545f4914f6cdd1dull;
  if (r % 4) return;
  emu_stream *with_work[65];
  int n = 0;
  if (!g_null_stream.q.empty()) with_work[n++] = &g_null_stream;
  for (emu_stream *t : g_streams)
    if (!t->q.empty() && n < 65) with_work[n++] = t;
  if (!n) return;
  emu_stream *t = with_work[(r >> 8) % (uint64_t)n];
  for (int k = 1 + (int)((r >> 16) % 3); k > 0 && !t->q.empty() && !t->q.front().when_needed;
       k--)
    run_front(t);
}

static void enqueue(cudaStream_t st, std::function<void()> f, bool when_needed = false) {
  emu_stream *s = stream_of(st);
  s->q.push_back(emu_work{std::move(f), when_needed});
  s->issued++;
  run_ahead();
}
namespace vt_emu {
void flush_stream(cudaStream_t st) {
  emu_stream *s = stream_of(st);
  run_until(s, s->issued);
}
void defer_on_stream(cudaStream_t st, void (*fn)(void *), void *arg, bool when_needed) {
  enqueue(st, [fn, arg]() { fn(arg); }, when_needed);
}
}  // namespace vt_emu
static void flush_all() {
  vt_emu::flush_stream(nullptr);
  for (emu_stream *s : g_streams) vt_emu::flush_stream(s);
}
// "Pinned" host memory is remembered, so cudaHostGetFlags tells it from other memory and a copy
// from it can wait in its queue (from pageable memory the source is read at the call, as the
// driver stages it); EMU_NO_PINNED=1 makes cudaHostAlloc fail, as a low locked-memory limit does.
static struct {
  void *p;
  size_t n;
} g_pinned[64];
static bool is_pinned(const void *p) {
  for (auto &a : g_pinned)
    if (a.p && (const char *)p >= (const char *)a.p && (const char *)p < (const char *)a.p + a.n)
      return true;
  return false;
}

// ---- runtime ----
static size_t g_used = 0;

// Where the host waits for the device (a stream, an event, a copy to pageable memory, a free),
// counted so that tests can hold the trainer to its documented host synchronisations per step:
// with EMU_SYNC_REPORT=FILE the counts are written there at exit (FILE.R under mpirun or spawn.sh,
// R the rank). cudaStreamWaitEvent, a wait of one stream for another, is not one.
static struct emu_sync_counts {
  long stream, event, d2h, free_;
  ~emu_sync_counts() {
    const char *path = getenv("EMU_SYNC_REPORT"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("RANK");
    char name[4096];
    if (path) snprintf(name, sizeof name, rank ? "%s.%s" : "%s", path, rank);
    FILE *f = path ? fopen(name, "w") : NULL;
    if (!f) return;
    fprintf(f, "stream_sync %ld\nevent_sync %ld\nd2h_pageable %ld\nfree %ld\n", stream, event,
            d2h, free_);
    fclose(f);
  }
} g_sync;
cudaError_t cudaMalloc(void **p, size_t n) {
  // n bytes exactly (256-byte aligned, as cudaMalloc's), so that an AddressSanitizer build sees
  // a kernel read or write past the end (compute-sanitizer's memcheck on a GPU).
  if (posix_memalign(p, 256, n ? n : 1)) return cudaErrorMemoryAllocation;
  memset(*p, 0xff, n);  // NaN in every float: a kernel that reads memory nobody wrote shows it
  g_used += n;
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  g_sync.free_++;
  flush_all();  // cudaFree waits for the device
  free(p);
  return cudaSuccess;
}
// Device to pageable host memory returns when done (CUDA's rule); from pageable host memory the
// source is read now; everything else waits in the stream's queue.
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
  if (k == cudaMemcpyDeviceToHost && !is_pinned(d)) {
    g_sync.d2h++;
    vt_emu::flush_stream(st);
    memmove(d, s, n);
  } else if (k == cudaMemcpyHostToDevice && !is_pinned(s)) {
    std::vector<char> staged((const char *)s, (const char *)s + n);
    enqueue(st, [d, staged]() { memcpy(d, staged.data(), staged.size()); });
  } else {
    enqueue(st, [d, s, n]() { memmove(d, s, n); });
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h,
                              cudaMemcpyKind, cudaStream_t st) {
  if (w > dp || w > sp) return 1;
  enqueue(st, [=]() {
    for (size_t r = 0; r < h; r++) memmove((char *)d + r * dp, (const char *)s + r * sp, w);
  });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
  enqueue(st, [=]() { memset(p, v, n); });
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  g_sync.stream++;
  vt_emu::flush_stream(st);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned) {
  *st = new emu_stream;
  g_streams.push_back(*st);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t st) {
  vt_emu::flush_stream(st);
  for (size_t i = 0; i < g_streams.size(); i++)
    if (g_streams[i] == st) g_streams.erase(g_streams.begin() + (long)i);
  delete st;
  return cudaSuccess;
}
// One GPU, none with EMU_NO_GPU=1, or EMU_GPUS=N (several ranks of vit3d_emu on one host).
cudaError_t cudaGetDeviceCount(int *n) {
  const char *gpus = getenv("EMU_GPUS");
  *n = getenv("EMU_NO_GPU") ? 0 : gpus ? atoi(gpus) : 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
  snprintf(p->name, sizeof p->name, "CPU-emulated GPU");
  p->totalGlobalMem = (size_t)8 << 30;
  const char *cc = getenv("EMU_CC");  // the compute capability it claims, as 90
  const int v = cc ? atoi(cc) : 90;
  p->major = v / 10, p->minor = v % 10;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
  *t = (size_t)8 << 30;
  *f = *t - g_used;
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDevice(int *i) {
  *i = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
  if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return 1;
  *v = vt_emu::kSmemOptin;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v) {
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > vt_emu::kSmemOptin)
    return 1;
  for (auto &s : vt_emu::g_smem_attr)
    if (s.k == f || !s.k) {
      s.k = f, s.bytes = v;
      return cudaSuccess;
    }
  return 1;
}
const char *cudaGetErrorString(cudaError_t) { return "emulated error"; }
const char *cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }

// ---- events: a record marks its stream's queue; waiting for it runs the queue up to there (a
// stream that waits runs nothing before its next launch anyway, so running the work now is the
// latest point that keeps the order) ----
static void wait_event(cudaEvent_t e) {
  if (e->s) run_until(e->s, e->seq);
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  *e = new emu_event;
  (*e)->timing = !(flags & cudaEventDisableTiming);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  flush_all();  // its records' marks, still queued on any stream, would write it
  delete e;
  return cudaSuccess;
}
// A record queues a mark that takes the host clock when the stream's work before it has run.
// An earlier record's mark, if still queued, then writes nothing (its record number is old).
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
  e->s = stream_of(st);
  e->ms = -1;
  const uint64_t record = ++e->records;
  enqueue(st, [e, record]() {
    if (e->records != record) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ms = 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
  });
  e->seq = e->s->issued;
  return cudaSuccess;
}
// As the runtime: both events recorded, with timing, and complete (the work queued before each
// has run), else an error rather than a wait.
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  for (cudaEvent_t e : {start, end}) {
    if (e->s && e->s->done < e->seq) return cudaErrorNotReady;
    if (!e->timing || e->ms < 0) return 1;  // cudaErrorInvalidResourceHandle
  }
  *ms = (float)(end->ms - start->ms);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  g_sync.event++;
  wait_event(e);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  wait_event(e);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) {
  *p = NULL;
  if (getenv("EMU_NO_PINNED")) return cudaErrorMemoryAllocation;
  for (auto &a : g_pinned)
    if (!a.p) {
      const size_t rounded = (n + 4095) / 4096 * 4096;
      *p = a.p = aligned_alloc(4096, rounded);
      a.n = a.p ? rounded : 0;
      return *p ? cudaSuccess : cudaErrorMemoryAllocation;
    }
  return cudaErrorMemoryAllocation;
}
cudaError_t cudaHostGetFlags(unsigned *flags, void *p) {
  for (auto &a : g_pinned)
    if (a.p && a.p == p) return *flags = 0, cudaSuccess;
  return 1;  // not memory from cudaHostAlloc
}
cudaError_t cudaFreeHost(void *p) {
  flush_all();  // as cudaFree, it waits for the device
  for (auto &a : g_pinned)
    if (a.p && a.p == p) {
      free(p);
      a.p = NULL, a.n = 0;
      return cudaSuccess;
    }
  return 1;
}
