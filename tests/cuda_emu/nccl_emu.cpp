// nccl_emu.cpp: NCCL for the CUDA emulation (tests/cuda_emu/include/nccl.h), so that vit3d_emu
// runs the trainer's NCCL transport (parallel/comm_nccl.cu) where no GPU is. Built with MPI
// (EMU_NCCL_MPI), a communicator of several ranks is an MPI communicator and every operation
// runs at its call, after the work queued on its stream, as blocking MPI calls on the emulated
// device memory (host memory): collectives as MPI's; sends and receives between
// ncclGroupStart and ncclGroupEnd as non-blocking ones posted at their call, as NCCL progresses
// a group's messages together, whose waits the group's end queues on the streams they were
// issued on: the next kernel on such a stream, or a stream waiting for an event recorded after
// them, completes them, as a GPU runs the group's kernel in its stream's order (so sends on a
// stream of their own go on while the host launches work on another). A pattern that would hang
// on GPUs (two ranks sending to each other outside a group) hangs here too. Without MPI, one
// rank: every collective is a copy and there is no peer.
//
// ncclCommInitRank splits MPI_COMM_WORLD, so every world rank must create its communicators in
// the same order (comm.c does: tp, pp, dp); the unique id names the rank that made it and its
// count, which becomes the split's colour.
#include <stdint.h>
#include <string.h>

#include <nccl.h>
#ifdef EMU_NCCL_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <vector>
#endif

struct emu_nccl {
  int rank, size;
#ifdef EMU_NCCL_MPI
  MPI_Comm comm;
#endif
};

// Runs at the call, after the work queued on its stream (tests/cuda_emu/emu.cpp).
static void settle(const void *send, void *recv, size_t count, cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (send != recv) memmove(recv, send, count * sizeof(float));
}

#ifdef EMU_NCCL_MPI
static int g_group_depth;
struct emu_p2p {
  MPI_Request req;
  cudaStream_t stream;
  const void *send;  // a send's buffer (NULL: a receive), its size and hash when posted
  size_t bytes;
  uint64_t hash;
};
static std::vector<emu_p2p> g_requests;  // a group's sends and receives

static uint64_t fnv1a(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
  return h;
}

// Queued on a stream by ncclGroupEnd: completes one message. A send whose buffer changed since
// it was posted (written before anything waited for the send) aborts: on a GPU the receiver
// could get either contents.
static void wait_request(void *p) {
  emu_p2p *m = (emu_p2p *)p;
  if (m->send && fnv1a(m->send, m->bytes) != m->hash) {
    fprintf(stderr, "emu: a send's buffer (%zu bytes at %p) was written while the send was in "
            "flight, before its stream's work was waited for\n", m->bytes, m->send);
    abort();
  }
  MPI_Wait(&m->req, MPI_STATUS_IGNORE);
  delete m;
}

static int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
#endif

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
#ifdef EMU_NCCL_MPI
  static int32_t made;
  const int32_t who[2] = {world_rank(), made++};
  memcpy(id->internal, who, sizeof who);
#endif
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
#ifdef EMU_NCCL_MPI
  int32_t who[2];
  memcpy(who, id.internal, sizeof who);
  MPI_Comm c;
  if (MPI_Comm_split(MPI_COMM_WORLD, who[0] * 1024 + who[1] % 1024, rank, &c) != MPI_SUCCESS)
    return ncclInvalidUsage;
  int size = 0, r = 0;
  MPI_Comm_size(c, &size);
  MPI_Comm_rank(c, &r);
  if (size != nranks || r != rank) return ncclInvalidArgument;
  *comm = new emu_nccl{rank, nranks, c};
#else
  if (nranks != 1 || rank != 0) return ncclInvalidUsage;
  *comm = new emu_nccl{rank, 1};
#endif
  return ncclSuccess;
}

// A member's colour picks its new communicator (NCCL_SPLIT_NOCOLOR: none, *newcomm NULL), its key
// its rank there. Collective over comm, as MPI_Comm_split; config is not read.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  (void)config;
  *newcomm = NULL;
#ifdef EMU_NCCL_MPI
  MPI_Comm c;
  if (MPI_Comm_split(comm->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &c) !=
      MPI_SUCCESS)
    return ncclInvalidUsage;
  if (c == MPI_COMM_NULL) return ncclSuccess;
  int size = 0, r = 0;
  MPI_Comm_size(c, &size);
  MPI_Comm_rank(c, &r);
  *newcomm = new emu_nccl{r, size, c};
#else
  (void)comm, (void)key;
  if (color != NCCL_SPLIT_NOCOLOR) *newcomm = new emu_nccl{0, 1};
#endif
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                           ncclComm_t c, cudaStream_t st) {
  settle(s, r, n, st);
#ifdef EMU_NCCL_MPI
  if (MPI_Allreduce(MPI_IN_PLACE, r, (int)n, MPI_FLOAT, MPI_SUM, c->comm) != MPI_SUCCESS)
    return ncclInvalidUsage;
#endif
  return ncclSuccess;
}

// recv (n) <- the sum of block `rank` of every rank's send (n * size); send may hold recv (NCCL's
// in-place form, recv = send + rank * n), so the send goes through a copy.
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t c, cudaStream_t st) {
#ifdef EMU_NCCL_MPI
  vt_emu::flush_stream(st);
  std::vector<float> send((const float *)s, (const float *)s + n * (size_t)c->size);
  if (MPI_Reduce_scatter_block(send.data(), r, (int)n, MPI_FLOAT, MPI_SUM, c->comm) != MPI_SUCCESS)
    return ncclInvalidUsage;
#else
  settle(s, r, n, st);
#endif
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t, ncclComm_t c,
                           cudaStream_t st) {
#ifdef EMU_NCCL_MPI
  vt_emu::flush_stream(st);
  float *out = (float *)r;
  const int rc = s == out + n * (size_t)c->rank
                     ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, r, (int)n, MPI_FLOAT, c->comm)
                     : MPI_Allgather(s, (int)n, MPI_FLOAT, r, (int)n, MPI_FLOAT, c->comm);
  if (rc != MPI_SUCCESS) return ncclInvalidUsage;
#else
  settle(s, r, n, st);
#endif
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t, int root,
                           ncclComm_t c, cudaStream_t st) {
#ifdef EMU_NCCL_MPI
  vt_emu::flush_stream(st);
  if (c->rank == root && s != r) memmove(r, s, n * sizeof(float));
  if (MPI_Bcast(r, (int)n, MPI_FLOAT, root, c->comm) != MPI_SUCCESS) return ncclInvalidUsage;
#else
  settle(s, r, n, st);
#endif
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t st) {
#ifdef EMU_NCCL_MPI
  vt_emu::flush_stream(st);
  if (peer < 0 || peer >= c->size) return ncclInvalidArgument;
  if (g_group_depth == 0)
    return MPI_Send(s, (int)n, MPI_FLOAT, peer, 0, c->comm) == MPI_SUCCESS ? ncclSuccess
                                                                          : ncclInvalidUsage;
  g_requests.push_back({MPI_REQUEST_NULL, st, s, n * sizeof(float), fnv1a(s, n * sizeof(float))});
  MPI_Isend(s, (int)n, MPI_FLOAT, peer, 0, c->comm, &g_requests.back().req);
  return ncclSuccess;
#else
  (void)s, (void)n, (void)peer, (void)c, (void)st;
  return ncclInvalidUsage;  // no peer
#endif
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t st) {
#ifdef EMU_NCCL_MPI
  vt_emu::flush_stream(st);
  if (peer < 0 || peer >= c->size) return ncclInvalidArgument;
  if (g_group_depth == 0)
    return MPI_Recv(r, (int)n, MPI_FLOAT, peer, 0, c->comm, MPI_STATUS_IGNORE) == MPI_SUCCESS
               ? ncclSuccess
               : ncclInvalidUsage;
  g_requests.push_back({MPI_REQUEST_NULL, st, NULL, 0, 0});
  MPI_Irecv(r, (int)n, MPI_FLOAT, peer, 0, c->comm, &g_requests.back().req);
  return ncclSuccess;
#else
  (void)r, (void)n, (void)peer, (void)c, (void)st;
  return ncclInvalidUsage;
#endif
}

ncclResult_t ncclGroupStart(void) {
#ifdef EMU_NCCL_MPI
  g_group_depth++;
#endif
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
#ifdef EMU_NCCL_MPI
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth == 0) {
    for (const emu_p2p &m : g_requests)
      vt_emu::defer_on_stream(m.stream, wait_request, new emu_p2p(m));
    g_requests.clear();
  }
#endif
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
#ifdef EMU_NCCL_MPI
  MPI_Comm_free(&comm->comm);
#endif
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }  // the job is ending anyway
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *result) {
  *result = ncclSuccess;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t) {
#ifdef EMU_NCCL_MPI
  return "emulated NCCL (over MPI): a bad argument or an MPI failure";
#else
  return "emulated NCCL: one rank only";
#endif
}
const char *ncclGetLastError(ncclComm_t) { return ""; }
