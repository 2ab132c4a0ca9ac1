// comm_nccl.cu: the NCCL transport: float operations on device buffers, enqueued on the CUDA
// backend's one stream so they are ordered with the ops without host syncs, except the overlap
// all-reduces, which run on a side stream ordered by events, and a pipeline comm's sends, which
// run on a send stream of their own (vt_comm_nccl_open_links). Built only with NCCL.
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

// The messages between this rank and one neighbour of a pipeline comm, per channel
// (vt_comm_p2p.channel): to[ch] carries this rank's sends (it is rank 0 there, the neighbour
// rank 1) and is used only from its send stream sends[ch]; from[ch] carries the neighbour's sends,
// received on the backend's stream. One stream per communicator on each rank, as NCCL wants; a
// group of one stream, as a group over two streams would make each wait for the other. A send
// stream per link and channel, so that a send waiting for its receiver holds up no other.
typedef struct {
  int peer;  // its rank in the parent comm
  ncclComm_t to[VT_COMM_CHANNELS], from[VT_COMM_CHANNELS];
  cudaStream_t sends[VT_COMM_CHANNELS];
} nccl_link;
#define VT_NCCL_SEND_STREAMS (2 * VT_COMM_CHANNELS)  // two links at most

// A communicator, and the side stream (made on first use) that runs the operations started for
// overlap beside the backend's stream, with the events that order the two. A pipeline comm also
// has links to its neighbours (up to two) with their send streams (send stream s: link s /
// VT_COMM_CHANNELS, channel s % VT_COMM_CHANNELS), with an event per key of deferred sends
// (vt_comm_p2p.defer) and send stream, recorded after that key's latest sends there.
typedef struct {
  ncclComm_t comm;
  cudaStream_t side;
  cudaEvent_t ready, done;  // ready: recorded on the backend's stream; done: on the side stream
  int pending;              // operations started since the last wait_all
  int nlinks;
  nccl_link links[2];
  ncclComm_t split[2 * VT_NCCL_SEND_STREAMS];  // the links' communicators in the order they were
  int nsplit;  // made (every rank's order is one global order: finalize goes by it)
  cudaEvent_t sends_ready;                   // on the backend's stream before sends
  cudaEvent_t sends_done[VT_NCCL_SEND_STREAMS];  // after a send stream's undeferred sends
  int nkeys;
  cudaEvent_t *sent;  // [nkeys][VT_NCCL_SEND_STREAMS]
  int *unwaited;      // [nkeys][VT_NCCL_SEND_STREAMS]: sends the backend's stream has not waited for
} nccl_state;
#define VT_NCCL_MAX_COMMS (1 + 2 * VT_NCCL_SEND_STREAMS)

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

// ncclCommSplit came with NCCL 2.18: an older NCCL keeps a pipeline's messages on its comm (one
// group per exchange on the backend's stream, sends completed with the receives: correct, and
// every schedule is verified deadlock-free so, but ZB-H1's sends then wait for their receivers).
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define VT_NCCL_LINKS 1
#else
#define VT_NCCL_LINKS 0
#endif

// The links of a pipeline comm of `size` ranks: a neighbour pair {i, i+1 mod size} for each
// i < size - 1, and {size-1, 0} too where size > 2 (the interleaved schedule's ring), each with
// one communicator per direction and channel, split from the parent. A split is collective over
// the parent and gives a rank at most one new comm, so the pairs go in rounds of disjoint pairs
// (even i, odd i, and the ring's last pair alone where size is odd), four splits (directions
// times channels) per round.
extern "C" void vt_comm_nccl_open_links(void *state, int size, int rank) {
  nccl_state *st = (nccl_state *)state;
#if !VT_NCCL_LINKS
  if (rank == 0)
    vt_log_warn("NCCL %d.%d has no ncclCommSplit (2.18 and later): the pipeline's sends complete "
                "with their receives (no send stream)", NCCL_MAJOR, NCCL_MINOR);
  (void)st, (void)size;
#else
  const int npairs = size == 2 ? 1 : size;
  float *warm = NULL;  // one float sent over each new link (below)
  VT_CUDA_CHECK(cudaMalloc((void **)&warm, sizeof(float)));
  for (int round = 0; round < 3; round++) {
    int any = 0, mine = -1;
    for (int i = 0; i < npairs; i++) {
      const int r = size > 2 && size % 2 == 1 && i == size - 1 ? 2 : i % 2;
      if (r != round) continue;
      any = 1;
      if (rank == i || rank == (i + 1) % size) mine = i;
    }
    if (!any) continue;
    for (int split = 0; split < 2 * VT_COMM_CHANNELS; split++) {
      // dir 0: i sends to i + 1; dir 1: i + 1 sends to i. The sender is rank 0 of the new comm.
      const int dir = split / VT_COMM_CHANNELS, ch = split % VT_COMM_CHANNELS;
      const int a = mine, b = (mine + 1) % size, sender = dir == 0 ? a : b;
      const int peer = mine < 0 ? -1 : rank == a ? b : a;
      ncclComm_t c = NULL;
      VT_NCCL_CHECK(ncclCommSplit(st->comm, mine < 0 ? NCCL_SPLIT_NOCOLOR : mine,
                                  rank == sender ? 0 : 1, &c, NULL));
      if (mine < 0) continue;
      VT_CHECK(c != NULL, "ncclCommSplit gave pipeline rank %d no link to rank %d", rank, peer);
      int k = 0;
      while (k < st->nlinks && st->links[k].peer != peer) k++;
      VT_CHECK(k < 2, "pipeline rank %d has more than two neighbours", rank);
      if (k == st->nlinks) {
        memset(&st->links[k], 0, sizeof st->links[k]);
        st->links[k].peer = peer;
        st->nlinks++;
      }
      if (rank == sender) st->links[k].to[ch] = c;
      else st->links[k].from[ch] = c;
      st->split[st->nsplit++] = c;
      // Connected here, while both its ranks are at it: NCCL connects a pair lazily, in the first
      // group that uses it, where a send waits for its receiver's group; two neighbours whose
      // first sends to each other fell in one exchange (each before its receives) would wait for
      // each other for ever.
      VT_NCCL_CHECK(ncclGroupStart());
      if (rank == sender) VT_NCCL_CHECK(ncclSend(warm, 1, ncclFloat, 1, c, vt_cuda_stream()));
      else VT_NCCL_CHECK(ncclRecv(warm, 1, ncclFloat, 0, c, vt_cuda_stream()));
      VT_NCCL_CHECK(ncclGroupEnd());
    }
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(vt_cuda_stream()));
  VT_CUDA_CHECK(cudaFree(warm));
  for (int k = 0; k < st->nlinks; k++)
    for (int ch = 0; ch < VT_COMM_CHANNELS; ch++)
      VT_CUDA_CHECK(cudaStreamCreateWithFlags(&st->links[k].sends[ch], cudaStreamNonBlocking));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&st->sends_ready, cudaEventDisableTiming));
  for (int s = 0; s < VT_NCCL_SEND_STREAMS; s++)
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&st->sends_done[s], cudaEventDisableTiming));
#endif
}

// Every NCCL communicator of the state: the comm, then its links' in the order they were made.
static int state_comms(const nccl_state *st, ncclComm_t out[VT_NCCL_MAX_COMMS]) {
  out[0] = st->comm;
  for (int i = 0; i < st->nsplit; i++) out[1 + i] = st->split[i];
  return 1 + st->nsplit;
}

// For the watchdog thread: NCCL reports network failures and remote aborts asynchronously.
extern "C" int vt_comm_nccl_async_error(void *state, char *err, size_t errlen) {
  ncclComm_t comms[VT_NCCL_MAX_COMMS];
  const int n = state_comms((nccl_state *)state, comms);
  for (int i = 0; i < n; i++) {
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(comms[i], &st) != ncclSuccess || st == ncclSuccess ||
        st == ncclInProgress)
      continue;
    snprintf(err, errlen, "NCCL asynchronous error: %s (NCCL result %d); last NCCL message: %s",
             ncclGetErrorString(st), (int)st, ncclGetLastError(comms[i]));
    return 1;
  }
  return 0;
}

// Ends the communicators' pending operations so a stream stuck in a collective is released.
extern "C" void vt_comm_nccl_abort(void *state) {
  ncclComm_t comms[VT_NCCL_MAX_COMMS];
  const int n = state_comms((nccl_state *)state, comms);
  for (int i = 0; i < n; i++) ncclCommAbort(comms[i]);
}

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

// The index of the link to peer.
static int link_to(const nccl_state *st, int peer) {
  for (int k = 0; k < st->nlinks; k++)
    if (st->links[k].peer == peer) return k;
  vt_fatal(__FILE__, __LINE__, "the pipeline comm has no link to rank %d (only neighbours)", peer);
}

// Deferred sends of `key` were just posted on send stream s: its event marks them (the events
// grow with the keys, which are small: from the executor's slots).
static void mark_sent(nccl_state *st, int key, int s) {
  if (key >= st->nkeys) {
    const int nk = key + 8, ns = VT_NCCL_SEND_STREAMS;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(st->sent, (size_t)nk * ns * sizeof *ev);
    int *uw = ev ? (int *)realloc(st->unwaited, (size_t)nk * ns * sizeof *uw) : NULL;
    VT_CHECK(ev && uw, "out of memory for the events of deferred sends");
    for (int k = st->nkeys * ns; k < nk * ns; k++) {
      VT_CUDA_CHECK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
      uw[k] = 0;
    }
    st->sent = ev, st->unwaited = uw, st->nkeys = nk;
  }
  const int e = key * VT_NCCL_SEND_STREAMS + s;
  VT_CUDA_CHECK(cudaEventRecord(st->sent[e], st->links[s / VT_COMM_CHANNELS].sends[s % VT_COMM_CHANNELS]));
  st->unwaited[e] = 1;
}

// The backend's stream waits for key's deferred sends, if any are unwaited.
static void wait_sent(nccl_state *st, int key) {
  for (int s = 0; key < st->nkeys && s < VT_NCCL_SEND_STREAMS; s++) {
    const int e = key * VT_NCCL_SEND_STREAMS + s;
    if (!st->unwaited[e]) continue;
    VT_CUDA_CHECK(cudaStreamWaitEvent(vt_cuda_stream(), st->sent[e], 0));
    st->unwaited[e] = 0;
  }
}

// Over the links: each send goes alone on the send stream of its link and channel, which first
// waits for the backend's stream (the data sent); the receives go in one group on the backend's
// stream, so the host and the backend's stream go on while a send waits for its receiver, and a
// channel's send waiting for its receiver holds up no other channel's. A deferred send's buffer
// is protected by its key's events (nccl_wait_sends); a send with defer 0 has the backend's
// stream wait for it behind the exchange's receives.
static void exchange_links(nccl_state *st, const vt_comm_p2p *ops, int n) {
  int nsend = 0, ready = 0, undeferred[VT_NCCL_SEND_STREAMS] = {0};
  for (int i = 0; i < n; i++) {
    if (ops[i].recv) continue;
    nsend++;
    const int k = link_to(st, ops[i].peer), ch = ops[i].channel, s = k * VT_COMM_CHANNELS + ch;
    cudaStream_t stream = st->links[k].sends[ch];
    if (!ready) VT_CUDA_CHECK(cudaEventRecord(st->sends_ready, vt_cuda_stream()));
    ready = 1;
    VT_CUDA_CHECK(cudaStreamWaitEvent(stream, st->sends_ready, 0));
    VT_NCCL_CHECK(ncclGroupStart());  // a group of one: queued, the host goes on
    VT_NCCL_CHECK(ncclSend(ops[i].buf, (size_t)ops[i].count, ncclFloat, 1, st->links[k].to[ch],
                           stream));
    VT_NCCL_CHECK(ncclGroupEnd());
    if (ops[i].defer > 0) {
      mark_sent(st, ops[i].defer, s);
    } else {
      VT_CUDA_CHECK(cudaEventRecord(st->sends_done[s], stream));
      undeferred[s] = 1;
    }
  }
  if (nsend < n) {
    VT_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < n; i++)
      if (ops[i].recv)
        VT_NCCL_CHECK(ncclRecv(ops[i].buf, (size_t)ops[i].count, ncclFloat, 0,
                               st->links[link_to(st, ops[i].peer)].from[ops[i].channel],
                               vt_cuda_stream()));
    VT_NCCL_CHECK(ncclGroupEnd());
  }
  // The backend's stream waits for the sends with defer 0 only after the receives are queued on
  // it: before them, a symmetric exchange (each rank sending to the other, as vt_comm_sendrecv)
  // would deadlock, each send waiting for a receive queued behind the other rank's send.
  for (int s = 0; s < VT_NCCL_SEND_STREAMS; s++)
    if (undeferred[s]) VT_CUDA_CHECK(cudaStreamWaitEvent(vt_cuda_stream(), st->sends_done[s], 0));
}

// The backend's stream waits for the deferred sends of `key` (0: all of them); the host does not.
static void nccl_wait_sends(void *s, int key) {
  nccl_state *st = (nccl_state *)s;
  if (key > 0) wait_sent(st, key);
  for (int k = 1; key <= 0 && k < st->nkeys; k++) wait_sent(st, k);
}

// A group lets NCCL progress every message at once, which is what makes a pipeline step that
// sends and receives in both directions deadlock-free. A pipeline comm's go over its links.
static void nccl_exchange(void *s, const vt_comm_p2p *ops, int n) {
  join_side(s);
  if (((nccl_state *)s)->nlinks) {
    exchange_links((nccl_state *)s, ops, n);
    return;
  }
  // Without links (an NCCL before 2.18) a pair's messages share one order: a second channel
  // (zb-v's) would pair the wrong buffers.
  for (int i = 0; i < n; i++)
    VT_CHECK(ops[i].channel == 0, "the zb-v pipeline schedule needs NCCL 2.18 or later "
             "(ncclCommSplit: a link per direction and message kind); this is NCCL %d.%d: use "
             "--pp-schedule zb-h1 or a newer NCCL", NCCL_MAJOR, NCCL_MINOR);
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

// The side stream, made to wait for everything queued on the backend's stream so far (the
// gradients a started operation reduces), so that it reduces while later ops run.
static cudaStream_t side_after_main(nccl_state *st) {
  if (!st->side) {
    VT_CUDA_CHECK(cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking));
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming));
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
  }
  VT_CUDA_CHECK(cudaEventRecord(st->ready, vt_cuda_stream()));
  VT_CUDA_CHECK(cudaStreamWaitEvent(st->side, st->ready, 0));
  st->pending++;
  return st->side;
}

static void nccl_all_reduce_start(void *s, float *buf, int64_t count) {
  nccl_state *st = (nccl_state *)s;
  cudaStream_t side = side_after_main(st);
  VT_NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, st->comm, side));
}

// In place at the root (NCCL's sendbuff == recvbuff); the others' buf is only read.
static void nccl_reduce_start(void *s, float *buf, int64_t count, int root) {
  nccl_state *st = (nccl_state *)s;
  cudaStream_t side = side_after_main(st);
  VT_NCCL_CHECK(ncclReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, root, st->comm, side));
}

static void nccl_wait_all(void *s) { join_side(s); }

// Finalize first: it waits for operations still queued on the stream, which Destroy alone may
// cut short. The links after the comm, in the one order in which every rank made them.
static void nccl_free(void *s) {
  nccl_state *st = (nccl_state *)s;
  ncclComm_t comms[VT_NCCL_MAX_COMMS];
  const int n = state_comms(st, comms);
  for (int i = 0; i < n; i++) VT_NCCL_CHECK(ncclCommFinalize(comms[i]));
  for (int i = 0; i < n; i++) VT_NCCL_CHECK(ncclCommDestroy(comms[i]));
  if (st->nlinks) {
    for (int k = 0; k < st->nlinks; k++)
      for (int ch = 0; ch < VT_COMM_CHANNELS; ch++)
        VT_CUDA_CHECK(cudaStreamDestroy(st->links[k].sends[ch]));
    VT_CUDA_CHECK(cudaEventDestroy(st->sends_ready));
    for (int s = 0; s < VT_NCCL_SEND_STREAMS; s++) VT_CUDA_CHECK(cudaEventDestroy(st->sends_done[s]));
    for (int k = 0; k < st->nkeys * VT_NCCL_SEND_STREAMS; k++)
      VT_CUDA_CHECK(cudaEventDestroy(st->sent[k]));
    free(st->sent);
    free(st->unwaited);
  }
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
    nccl_wait_all,  nccl_wait_sends, nccl_reduce_start};
