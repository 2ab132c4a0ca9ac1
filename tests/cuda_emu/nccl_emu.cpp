// nccl_emu.cpp: the emulated NCCL's operations (collectives, sends and receives, groups) over
// the communicators of nccl_emu_comm.cpp.
//
// Every operation starts at its call, after the work queued on its stream (the emulated device
// memory is host memory). Messages go through a progress thread, as NCCL's kernels and proxy
// progress without the host: collectives exchange theirs at the call and queue their results on
// their stream (finish_late: another stream sees them only once it waits for this one); sends
// and receives between ncclGroupStart and ncclGroupEnd are posted at their call, and the group's
// end queues their waits on the streams they were issued on: the next kernel on such a stream,
// or a stream waiting for an event recorded after them, completes them, as a GPU runs the
// group's kernel in its stream's order (so sends on a stream of their own go on while the host
// launches work on another; a receive's data reaches its buffer only then). A pattern that would
// hang on GPUs (two ranks sending to each other outside a group) hangs here too. Every message
// carries a header (kind and size) that its receiver checks: ranks issuing a communicator's
// operations in different orders end with a message, where NCCL would hang. Sums run in rank order (an all-reduce at rank 0), the same on
// every rank.
#include <stdint.h>
#include <string.h>

#include <vector>

#include "nccl_emu_internal.h"

using namespace nccl_emu;

// A collective exchanges its data at the call, after the work queued on its stream, and its
// result reaches the output as late as a GPU may write it: as the stream's next work, when the
// stream is next run (a later launch or operation on it, a wait for it, a synchronize). Until
// then the output holds what it held, so a kernel on another stream that reads it without
// waiting for this one reads the old values (on a GPU: either). Writing the input or the output
// while the collective is in flight (on a GPU it may read or overwrite them at any time) aborts.
struct emu_late {
  const void *in;
  void *out;
  size_t in_bytes;
  uint64_t in_hash, out_hash;
  std::vector<float> result;
};

static void complete_late(void *p) {
  emu_late *l = (emu_late *)p;
  const size_t out_bytes = l->result.size() * sizeof(float);
  const bool in_changed = fnv1a(l->in, l->in_bytes) != l->in_hash;
  if (in_changed || fnv1a(l->out, out_bytes) != l->out_hash)
    die("a collective's %s (%zu bytes at %p) changed between the collective's call and its "
        "completion: work on another stream wrote it without being ordered before or after the "
        "collective (a missing cudaStreamWaitEvent)", in_changed ? "input" : "output",
        in_changed ? l->in_bytes : out_bytes, in_changed ? l->in : (const void *)l->out);
  memcpy(l->out, l->result.data(), out_bytes);
  delete l;
}

static void finish_late(cudaStream_t st, const void *in, size_t in_bytes, void *out,
                        std::vector<float> &&result) {
  const size_t out_bytes = result.size() * sizeof(float);
  emu_late *l = new emu_late{in, out, in_bytes, fnv1a(in, in_bytes), fnv1a(out, out_bytes),
                             std::move(result)};
  vt_emu::defer_on_stream(st, complete_late, l, true);
}

// Rank 0 sums the members' buffers in rank order and sends every member the sum.
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                           ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  const size_t bytes = n * sizeof(float);
  std::vector<float> sum((const float *)s, (const float *)s + n);
  if (c->size > 1 && c->rank == 0) {
    std::vector<float> in(n * (size_t)(c->size - 1));
    std::vector<emu_msg *> got;
    for (int j = 1; j < c->size; j++)
      got.push_back(post(c, j, KIND_COLLECTIVE, false, &in[n * (j - 1)], bytes));
    wait_all(got);
    for (int j = 1; j < c->size; j++)
      for (size_t i = 0; i < n; i++) sum[i] += in[n * (j - 1) + i];
    std::vector<emu_msg *> sent;
    for (int j = 1; j < c->size; j++)
      sent.push_back(post(c, j, KIND_COLLECTIVE, true, sum.data(), bytes));
    wait_all(sent);
  } else if (c->size > 1) {
    wait_for(post(c, 0, KIND_COLLECTIVE, true, sum.data(), bytes));
    wait_for(post(c, 0, KIND_COLLECTIVE, false, sum.data(), bytes));
  }
  finish_late(st, s, bytes, r, std::move(sum));
  return ncclSuccess;
}

// recv (n) <- the sum, in rank order, of block `rank` of every rank's send (n * size); send may
// hold recv (NCCL's in-place form, recv = send + rank * n).
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  const size_t size = (size_t)c->size, me = (size_t)c->rank, bytes = n * sizeof(float);
  std::vector<float> send((const float *)s, (const float *)s + n * size), in(n * size);
  std::vector<emu_msg *> ops;
  for (size_t j = 0; j < size; j++) {
    if (j == me) continue;
    ops.push_back(post(c, (int)j, KIND_COLLECTIVE, true, &send[n * j], bytes));
    ops.push_back(post(c, (int)j, KIND_COLLECTIVE, false, &in[n * j], bytes));
  }
  wait_all(ops);
  memcpy(&in[n * me], &send[n * me], bytes);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i++) {
    float sum = in[i];
    for (size_t j = 1; j < size; j++) sum += in[n * j + i];
    out[i] = sum;
  }
  finish_late(st, s, bytes * size, r, std::move(out));
  return ncclSuccess;
}

// recv (n * size) <- every rank's send (n) in rank order; send may be recv's block `rank`.
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t, ncclComm_t c,
                           cudaStream_t st) {
  vt_emu::flush_stream(st);
  const size_t bytes = n * sizeof(float);
  std::vector<float> out(n * (size_t)c->size);
  float *own = &out[n * (size_t)c->rank];
  memcpy(own, s, bytes);
  std::vector<emu_msg *> ops;
  for (int j = 0; j < c->size; j++) {
    if (j == c->rank) continue;
    ops.push_back(post(c, j, KIND_COLLECTIVE, true, own, bytes));
    ops.push_back(post(c, j, KIND_COLLECTIVE, false, &out[n * (size_t)j], bytes));
  }
  wait_all(ops);
  finish_late(st, s, bytes, r, std::move(out));
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t, int root,
                           ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (root < 0 || root >= c->size) return ncclInvalidArgument;
  const size_t bytes = n * sizeof(float);
  std::vector<float> out(n);
  if (c->rank != root) {
    wait_for(post(c, root, KIND_COLLECTIVE, false, out.data(), bytes));
    finish_late(st, r, 0, r, std::move(out));
    return ncclSuccess;
  }
  memcpy(out.data(), s, bytes);
  std::vector<emu_msg *> sent;
  for (int j = 0; j < c->size; j++)
    if (j != root) sent.push_back(post(c, j, KIND_COLLECTIVE, true, out.data(), bytes));
  wait_all(sent);
  finish_late(st, s, bytes, r, std::move(out));
  return ncclSuccess;
}

// The root's recv (n) <- the sum in rank order of every rank's send (n); send may be recv. The
// others' send is only read (in flight until their stream runs on, as NCCL may read it then).
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t, int root,
                        ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (root < 0 || root >= c->size) return ncclInvalidArgument;
  const size_t bytes = n * sizeof(float);
  std::vector<float> mine((const float *)s, (const float *)s + n);
  if (c->rank != root) {
    wait_for(post(c, root, KIND_COLLECTIVE, true, mine.data(), bytes));
    finish_late(st, s, bytes, (void *)s, std::move(mine));
    return ncclSuccess;
  }
  std::vector<float> in(n * (size_t)c->size);
  std::vector<emu_msg *> got;
  for (int j = 0; j < c->size; j++)
    if (j != root) got.push_back(post(c, j, KIND_COLLECTIVE, false, &in[n * (size_t)j], bytes));
  wait_all(got);
  memcpy(&in[n * (size_t)root], mine.data(), bytes);
  std::vector<float> sum(in.begin(), in.begin() + (ptrdiff_t)n);
  for (int j = 1; j < c->size; j++)
    for (size_t i = 0; i < n; i++) sum[i] += in[n * (size_t)j + i];
  finish_late(st, s, bytes, r, std::move(sum));
  return ncclSuccess;
}

// A send or receive of a group (or alone), completed in its stream's order by wait_request.
// A receive lands in `stage` and reaches the caller's buffer only then, as a collective's result
// does (finish_late); the buffer's hash when posted catches a write to it while in flight (a
// send's: on a GPU the receiver could get either contents; a receive's: the received data would
// overwrite it, or it the data).
struct p2p_request {
  emu_msg *m;
  bool send;
  void *buf;
  size_t bytes;
  uint64_t hash;
  cudaStream_t stream;
  std::vector<char> stage;
};
static int g_group_depth;
static std::vector<p2p_request *> g_group;  // a group's sends and receives

static void wait_request(void *p) {
  p2p_request *q = (p2p_request *)p;
  if (fnv1a(q->buf, q->bytes) != q->hash)
    die("a %s's buffer (%zu bytes at %p) was written while the %s was in flight, before its "
        "stream's work was waited for", q->send ? "send" : "receive", q->bytes, q->buf,
        q->send ? "send" : "receive");
  wait_for(q->m);
  if (!q->send) memcpy(q->buf, q->stage.data(), q->bytes);
  delete q;
}

static ncclResult_t p2p(bool is_send, const void *buf, size_t n, int peer, ncclComm_t c,
                        cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (peer < 0 || peer >= c->size || peer == c->rank) return ncclInvalidArgument;
  const size_t bytes = n * sizeof(float);
  p2p_request *q = new p2p_request{nullptr, is_send, (void *)buf, bytes, fnv1a(buf, bytes), st,
                                   std::vector<char>(is_send ? 0 : bytes)};
  q->m = post(c, peer, KIND_P2P, is_send, is_send ? buf : q->stage.data(), bytes);
  if (g_group_depth == 0)
    wait_request(q);
  else
    g_group.push_back(q);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t st) {
  return p2p(true, s, n, peer, c, st);
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t st) {
  return p2p(false, r, n, peer, c, st);
}

ncclResult_t ncclGroupStart(void) {
  g_group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth == 0) {
    for (p2p_request *q : g_group) vt_emu::defer_on_stream(q->stream, wait_request, q, true);
    g_group.clear();
  }
  return ncclSuccess;
}
