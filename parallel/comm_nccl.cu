// comm_nccl.cu: the NCCL transport: float operations on device buffers, enqueued on the CUDA
// backend's one stream so they are ordered with the ops without host syncs. Built only with NCCL.
// Must not depend on MPI (comm.c broadcasts the unique id) or the model. Compiled in CI; it runs
// only where a GPU is present, with one rank per communicator on the single-GPU test machine.
#include <nccl.h>
#include <stdio.h>
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

static ncclComm_t comm_of(void *state) { return (ncclComm_t)state; }

extern "C" void vt_comm_nccl_unique_id(unsigned char id[VT_COMM_NCCL_ID_NBYTES]) {
  ncclUniqueId uid;
  VT_NCCL_CHECK(ncclGetUniqueId(&uid));
  memcpy(id, &uid, sizeof uid);
}

extern "C" void *vt_comm_nccl_init(const unsigned char id[VT_COMM_NCCL_ID_NBYTES], int size,
                                   int rank) {
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  ncclComm_t comm;
  VT_NCCL_CHECK(ncclCommInitRank(&comm, size, uid, rank));
  return (void *)comm;
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
  VT_NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, comm_of(s),
                              vt_cuda_stream()));
}

static void nccl_reduce_scatter(void *s, float *out, const float *inp, int64_t out_count) {
  VT_NCCL_CHECK(ncclReduceScatter(inp, out, (size_t)out_count, ncclFloat, ncclSum, comm_of(s),
                                  vt_cuda_stream()));
}

// NCCL's in-place form is exactly comm.c's (inp == out + rank * inp_count): no special case.
static void nccl_all_gather(void *s, float *out, const float *inp, int64_t inp_count) {
  VT_NCCL_CHECK(
      ncclAllGather(inp, out, (size_t)inp_count, ncclFloat, comm_of(s), vt_cuda_stream()));
}

static void nccl_broadcast(void *s, float *buf, int64_t count, int root) {
  VT_NCCL_CHECK(ncclBroadcast(buf, buf, (size_t)count, ncclFloat, root, comm_of(s),
                              vt_cuda_stream()));
}

static void nccl_send(void *s, const float *buf, int64_t count, int peer) {
  VT_NCCL_CHECK(ncclSend(buf, (size_t)count, ncclFloat, peer, comm_of(s), vt_cuda_stream()));
}

static void nccl_recv(void *s, float *buf, int64_t count, int peer) {
  VT_NCCL_CHECK(ncclRecv(buf, (size_t)count, ncclFloat, peer, comm_of(s), vt_cuda_stream()));
}

// A group lets NCCL progress both directions at once, which is what makes the pair deadlock-free.
static void nccl_sendrecv(void *s, const float *sendbuf, int64_t send_count, int dst,
                          float *recvbuf, int64_t recv_count, int src) {
  VT_NCCL_CHECK(ncclGroupStart());
  VT_NCCL_CHECK(
      ncclSend(sendbuf, (size_t)send_count, ncclFloat, dst, comm_of(s), vt_cuda_stream()));
  VT_NCCL_CHECK(
      ncclRecv(recvbuf, (size_t)recv_count, ncclFloat, src, comm_of(s), vt_cuda_stream()));
  VT_NCCL_CHECK(ncclGroupEnd());
}

// Finalize first: it waits for operations still queued on the stream, which Destroy alone may
// cut short.
static void nccl_free(void *s) {
  VT_NCCL_CHECK(ncclCommFinalize(comm_of(s)));
  VT_NCCL_CHECK(ncclCommDestroy(comm_of(s)));
}

extern "C" const vt_comm_transport vt_comm_nccl_transport = {
    "nccl",    nccl_all_reduce, nccl_reduce_scatter, nccl_all_gather, nccl_broadcast,
    nccl_send, nccl_recv,       nccl_sendrecv,       nccl_free};
