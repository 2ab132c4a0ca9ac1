// nccl_emu.cpp: NCCL for one rank, for the CUDA emulation (tests/cuda_emu/include/nccl.h). With
// one rank every collective is a copy of count floats (or nothing, in place) and there is no
// peer to send to; a communicator of more ranks is refused, so a test that needs them fails
// clearly instead of computing something else.
#include <string.h>

#include <nccl.h>

struct emu_nccl {
  int rank;
};

// Runs at the call, after the work queued on its stream (tests/cuda_emu/emu.cpp).
static ncclResult_t copy(const void *send, void *recv, size_t count, cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (send != recv) memmove(recv, send, count * sizeof(float));
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId, int rank) {
  if (nranks != 1 || rank != 0) return ncclInvalidUsage;
  *comm = new emu_nccl{rank};
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                           ncclComm_t, cudaStream_t st) {
  return copy(s, r, n, st);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t st) {
  return copy(s, r, n, st);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t, ncclComm_t,
                           cudaStream_t st) {
  return copy(s, r, n, st);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t, int, ncclComm_t,
                           cudaStream_t st) {
  return copy(s, r, n, st);
}
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;  // no peer
}
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *result) {
  *result = ncclSuccess;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t) { return "emulated NCCL: one rank only"; }
const char *ncclGetLastError(ncclComm_t) { return ""; }
