// emu_runtime.cpp: the CUDA emulation's streams, events, memory and device queries (emu.cpp runs
// the kernels). Kernels, asynchronous copies and memsets and events' marks wait in their
// stream's queue until something needs them (a library call or NCCL operation on that stream, a
// wait on an event recorded after them, a synchronize, a copy to pageable memory), as late as a
// GPU that lags the host may run them, and at times the device runs ahead (run_ahead); a
// stream's wait for another's event is itself queued. So a kernel that does not wait for
// another stream's kernel or copy reads stale data, unordered work of two streams runs in both
// orders, and a host buffer reused before its copy ran shows. Also
// NVTX's ranges (their nesting checked).
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "nvtx3/nvToolsExt.h"

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
  std::vector<emu_stream *> with_work;
  if (!g_null_stream.q.empty()) with_work.push_back(&g_null_stream);
  for (emu_stream *t : g_streams)
    if (!t->q.empty()) with_work.push_back(t);
  if (with_work.empty()) return;
  emu_stream *t = with_work[(r >> 8) % with_work.size()];
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

// The file a report named by environment variable env goes to (FILE, or FILE.R for rank R), or
// NULL where env is unset.
static FILE *report_file(const char *env) {
  const char *path = getenv(env), *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("RANK");
  char name[4096];
  if (path) snprintf(name, sizeof name, rank ? "%s.%s" : "%s", path, rank);
  return path ? fopen(name, "w") : NULL;
}

// Where the host waits for the device (a stream, an event, a copy to pageable memory, a free),
// counted so that tests can hold the trainer to its documented host synchronisations per step:
// with EMU_SYNC_REPORT=FILE the counts are written there at exit (FILE.R under mpirun or spawn.sh,
// R the rank). cudaStreamWaitEvent, a wait of one stream for another, is not one.
static struct emu_sync_counts {
  long stream, event, d2h, free_;
  ~emu_sync_counts() {
    FILE *f = report_file("EMU_SYNC_REPORT");
    if (!f) return;
    fprintf(f, "stream_sync %ld\nevent_sync %ld\nd2h_pageable %ld\nfree %ld\n", stream, event,
            d2h, free_);
    fclose(f);
  }
} g_sync;
// NVTX ranges (include/nvtx3/nvToolsExt.h): their nesting, and with EMU_NVTX_REPORT=FILE each
// name (digits as #) with its count and the deepest nesting, written at exit.
static struct emu_ranges {
  std::map<std::string, long> names;
  int depth = 0, deepest = 0;
  ~emu_ranges() {
    FILE *f = report_file("EMU_NVTX_REPORT");
    if (!f) return;
    for (auto &n : names) fprintf(f, "%s\t%ld\n", n.first.c_str(), n.second);
    fprintf(f, "open at exit\t%d\ndeepest\t%d\n", depth, deepest);
    fclose(f);
  }
} g_ranges;
int nvtxRangePushA(const char *message) {
  std::string n;  // each run of digits as one #
  for (const char *c = message; *c; c++)
    if (*c < '0' || *c > '9') n += *c;
    else if (n.empty() || n.back() != '#') n += '#';
  g_ranges.names[n]++;
  if (++g_ranges.depth > g_ranges.deepest) g_ranges.deepest = g_ranges.depth;
  return g_ranges.depth - 1;
}
int nvtxRangePop(void) {
  if (g_ranges.depth == 0) {
    fprintf(stderr, "[cuda emulation] nvtxRangePop with no range open: unbalanced ranges\n");
    abort();
  }
  return --g_ranges.depth;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  // EMU_MALLOC_FAIL_MIN=BYTES: a GPU without room for any allocation of that many bytes or more
  // (the paths that must do without one).
  static const char *fail_min = getenv("EMU_MALLOC_FAIL_MIN");
  if (fail_min && n >= (size_t)strtoull(fail_min, NULL, 10)) return cudaErrorMemoryAllocation;
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
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int i) {
  snprintf(p->name, sizeof p->name, "CPU-emulated GPU");
  const char *base = getenv("EMU_GPU_BASE");  // (a launcher showing each rank its own GPUs)
  memset(p->uuid.bytes, 0, sizeof p->uuid.bytes);
  snprintf(p->uuid.bytes, sizeof p->uuid.bytes, "emu-gpu %d", i + (base ? atoi(base) : 0));
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
const char *cudaGetErrorString(cudaError_t) { return "emulated error"; }
const char *cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }

// ---- events: a record marks its stream's queue; the host waiting for it runs the queue up to
// there; a stream waiting for it queues a wait that does so when that stream's work runs (as
// late as a GPU may: an upload's copy then runs when the kernels that need it run, so a pinned
// source rewritten before upload_wait shows) ----
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
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned) {
  if (!e->s) return cudaSuccess;  // (never recorded: complete)
  emu_stream *producer = e->s;
  const uint64_t seq = e->seq;  // (the record this wait is for, not a later one)
  enqueue(st, [producer, seq]() { run_until(producer, seq); });
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
