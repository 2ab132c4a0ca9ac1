// comm_nccl.cu: the NCCL transport: float operations on device buffers, enqueued on the CUDA
// backend's one stream so they are ordered with the ops without host syncs, except the overlap
// all-reduces, which run on a side stream ordered by events. Built only with NCCL.
// Must not depend on MPI (comm.c broadcasts the unique id) or the model. Compiled in CI; it runs
// only where a GPU is present, with one rank per communicator on the single-GPU test machine.
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda/cuda_common.h"

#define VT_NCCL_CHECK(call)                                                                  \
  do {                                                                                       \
    ncclResult_t vt_nr_ = (call);                                                            \
    if (vt_nr_ != ncclSuccess)                                                               \
      vt_fatal(__FILE__, __LINE__, "%s failed: %s (NCCL result %d)", #call,                  \
               ncclGetErrorString(vt_nr_), (int)vt_nr_);                                     \
  } while (0)

static_assert(sizeof(ncclUniqueId) == VT_COMM_NCCL_ID_NBYTES,
              "VT_COMM_NCCL_ID_NBYTES must match NCCL_UNIQUE_ID_BYTES");

// A communicator, and the side stream (made on first use) that runs the operations started for
// overlap beside the backend's stream, with the events that order the two.
typedef struct {
  ncclComm_t comm;
  cudaStream_t side;
  cudaEvent_t ready, done;  // ready: recorded on the backend's stream; done: on the side stream
  int pending;              // operations started since the last wait_all
} nccl_state;

static ncclComm_t comm_of(void *state) { return ((nccl_state *)state)->comm; }

// The backend's stream waits for the operations started on the side stream (the host goes on).
// Every other operation of the communicator calls it first: NCCL wants one communicator's
// operations to run one after another, not on two streams at once.
static void join_side(void *s) {
  nccl_state *st = (nccl_state *)s;
  if (!st->pending) return;
  VT_CUDA_CHECK(cudaEventRecord(st->done, st->side));
  VT_CUDA_CHECK(cudaStreamWaitEvent(vt_cuda_stream(), st->done, 0));
  st->pending = 0;
}

extern "C" void vt_comm_nccl_unique_id(unsigned char id[VT_COMM_NCCL_ID_NBYTES]) {
  ncclUniqueId uid;
  VT_NCCL_CHECK(ncclGetUniqueId(&uid));
  memcpy(id, &uid, sizeof uid);
}

extern "C" void *vt_comm_nccl_init(const unsigned char id[VT_COMM_NCCL_ID_NBYTES], int size,
                                   int rank) {
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  nccl_state *st = (nccl_state *)calloc(1, sizeof *st);
  VT_CHECK(st != NULL, "out of memory for an NCCL communicator");
  VT_NCCL_CHECK(ncclCommInitRank(&st->comm, size, uid, rank));
  return st;
}

// For the watchdog thread: NCCL reports network failures and remote aborts asynchronously.
extern "C" int vt_comm_nccl_async_error(void *state, char *err, size_t errlen) {
  ncclResult_t st = ncclSuccess;
  if (ncclCommGetAsyncError(comm_of(state), &st) != ncclSuccess || st == ncclSuccess ||
      st == ncclInProgress)
    return 0;
  snprintf(err, errlen, "NCCL asynchronous error: %s (NCCL result %d); last NCCL message: %s",
           ncclGetErrorString(st), (int)st, ncclGetLastError(comm_of(state)));
  return 1;
}

// Ends the communicator's pending operations so a stream stuck in a collective is released.
extern "C" void vt_comm_nccl_abort(void *state) { ncclCommAbort(comm_of(state)); }

static void nccl_all_reduce(void *s, float *buf, int64_t count) {
  join_side(s);
  VT_NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, comm_of(s),
                              vt_cuda_stream()));
}

static void nccl_reduce_scatter(void *s, float *out, const float *inp, int64_t out_count) {
  join_side(s);
  VT_NCCL_CHECK(ncclReduceScatter(inp, out, (size_t)out_count, ncclFloat, ncclSum, comm_of(s),
                                  vt_cuda_stream()));
}

// NCCL's in-place form is exactly comm.c's (inp == out + rank * inp_count): no special case.
static void nccl_all_gather(void *s, float *out, const float *inp, int64_t inp_count) {
  join_side(s);
  VT_NCCL_CHECK(
      ncclAllGather(inp, out, (size_t)inp_count, ncclFloat, comm_of(s), vt_cuda_stream()));
}

static void nccl_broadcast(void *s, float *buf, int64_t count, int root) {
  join_side(s);
  VT_NCCL_CHECK(ncclBroadcast(buf, buf, (size_t)count, ncclFloat, root, comm_of(s),
                              vt_cuda_stream()));
}

static void nccl_send(void *s, const float *buf, int64_t count, int peer) {
  join_side(s);
  VT_NCCL_CHECK(ncclSend(buf, (size_t)count, ncclFloat, peer, comm_of(s), vt_cuda_stream()));
}

static void nccl_recv(void *s, float *buf, int64_t count, int peer) {
  join_side(s);
  VT_NCCL_CHECK(ncclRecv(buf, (size_t)count, ncclFloat, peer, comm_of(s), vt_cuda_stream()));
}

// A group lets NCCL progress every message at once, which is what makes a pipeline step that
// sends and receives in both directions deadlock-free.
static void nccl_exchange(void *s, const vt_comm_p2p *ops, int n) {
  join_side(s);
  VT_NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < n; i++)
    if (ops[i].recv)
      VT_NCCL_CHECK(ncclRecv(ops[i].buf, (size_t)ops[i].count, ncclFloat, ops[i].peer,
                             comm_of(s), vt_cuda_stream()));
    else
      VT_NCCL_CHECK(ncclSend(ops[i].buf, (size_t)ops[i].count, ncclFloat, ops[i].peer,
                             comm_of(s), vt_cuda_stream()));
  VT_NCCL_CHECK(ncclGroupEnd());
}

// The side stream waits for everything queued on the backend's stream so far (the gradients it
// reduces), then reduces while later ops run.
static void nccl_all_reduce_start(void *s, float *buf, int64_t count) {
  nccl_state *st = (nccl_state *)s;
  if (!st->side) {
    VT_CUDA_CHECK(cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking));
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming));
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
  }
  VT_CUDA_CHECK(cudaEventRecord(st->ready, vt_cuda_stream()));
  VT_CUDA_CHECK(cudaStreamWaitEvent(st->side, st->ready, 0));
  VT_NCCL_CHECK(
      ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, st->comm, st->side));
  st->pending++;
}

static void nccl_wait_all(void *s) { join_side(s); }

// Finalize first: it waits for operations still queued on the stream, which Destroy alone may
// cut short.
static void nccl_free(void *s) {
  nccl_state *st = (nccl_state *)s;
  VT_NCCL_CHECK(ncclCommFinalize(st->comm));
  VT_NCCL_CHECK(ncclCommDestroy(st->comm));
  if (st->side) {
    VT_CUDA_CHECK(cudaStreamDestroy(st->side));
    VT_CUDA_CHECK(cudaEventDestroy(st->ready));
    VT_CUDA_CHECK(cudaEventDestroy(st->done));
  }
  free(st);
}

extern "C" const vt_comm_transport vt_comm_nccl_transport = {
    "nccl",    nccl_all_reduce, nccl_reduce_scatter, nccl_all_gather,       nccl_broadcast,
    nccl_send, nccl_recv,       nccl_exchange,       nccl_free,             nccl_all_reduce_start,
    nccl_wait_all,  NULL};
