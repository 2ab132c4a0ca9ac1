// comm_mpi.c: the MPI transport (float operations on host buffers) and the MPI side of the comm
// registry: start-up, splitting, host control, abort. Built only with MPI, so it needs no #ifdef.
// Must not depend on CUDA or the model; comm.c is its only caller.
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

// Communicators return errors (set at init) so that a failure prints where and why with the rank
// tag, and then the abort hook ends every rank.
#define VT_MPI_CHECK(call)                                                          \
  do {                                                                              \
    int vt_rc_ = (call);                                                            \
    if (vt_rc_ != MPI_SUCCESS) {                                                    \
      char vt_msg_[MPI_MAX_ERROR_STRING];                                           \
      int vt_len_ = 0;                                                              \
      MPI_Error_string(vt_rc_, vt_msg_, &vt_len_);                                  \
      vt_fatal(__FILE__, __LINE__, "%s failed: %s", #call, vt_msg_);                \
    }                                                                               \
  } while (0)

// One tag for point-to-point traffic, and one more per further channel of vt_comm_exchange
// (VT_MPI_TAG + channel): MPI keeps the messages of a tag between two ranks of a comm in order,
// which is all the pipeline executor relies on.
enum { VT_MPI_TAG = 7 };

static int g_we_initialized = 0;
static int g_thread_multiple = 0;  // the watchdog's side channel may be used from its thread

// A communicator and the requests of its operations started but not yet waited for: collectives
// (vt_comm_all_reduce_start) and deferred sends with their keys.
typedef struct {
  MPI_Comm comm;
  MPI_Request *req;
  int npending, cap;
  MPI_Request *sreq;
  int *skey;
  int nsends, scap;
} mpi_state;

static MPI_Comm comm_of(void *state) { return ((mpi_state *)state)->comm; }

static void *wrap(MPI_Comm comm) {
  mpi_state *s = calloc(1, sizeof *s);
  VT_CHECK(s, "out of memory for an MPI communicator");
  s->comm = comm;
  return s;
}

void vt_comm_mpi_world_init(int *argc, char ***argv, void **world_state, int *size, int *rank) {
  int initialized = 0;
  VT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    // Multiple: the main thread runs every collective of training, and the watchdog thread
    // talks on its own side channel while the main thread may be stuck inside one.
    int provided = 0;
    VT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    g_we_initialized = 1;
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  } else {
    int provided = 0;
    VT_MPI_CHECK(MPI_Query_thread(&provided));
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  }
  VT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  // Our own copy of the world, so our messages never meet those of another library.
  MPI_Comm world;
  VT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  VT_MPI_CHECK(MPI_Comm_size(world, size));
  VT_MPI_CHECK(MPI_Comm_rank(world, rank));
  *world_state = wrap(world);
}

static void *mpi_split(void *state, int color, int key, const char *name, int *size,
                       int *rank) {
  (void)name;
  MPI_Comm comm;
  VT_MPI_CHECK(MPI_Comm_split(comm_of(state), color, key, &comm));
  VT_MPI_CHECK(MPI_Comm_size(comm, size));
  VT_MPI_CHECK(MPI_Comm_rank(comm, rank));
  return wrap(comm);
}

void vt_comm_mpi_node(void *state, int *local_rank, int *local_size) {
  MPI_Comm node;
  VT_MPI_CHECK(MPI_Comm_split_type(comm_of(state), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  VT_MPI_CHECK(MPI_Comm_rank(node, local_rank));
  VT_MPI_CHECK(MPI_Comm_size(node, local_size));
  VT_MPI_CHECK(MPI_Comm_free(&node));
}

static void mpi_barrier(void *state) { VT_MPI_CHECK(MPI_Barrier(comm_of(state))); }

static void mpi_all_reduce_double(void *state, double *buf, int64_t count, vt_reduce_op op) {
  MPI_Op mop = op == VT_REDUCE_MAX ? MPI_MAX : op == VT_REDUCE_MIN ? MPI_MIN : MPI_SUM;
  VT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_DOUBLE, mop, comm_of(state)));
}

static void mpi_broadcast_bytes(void *state, void *buf, int64_t nbytes, int root) {
  const int64_t chunk = (int64_t)1 << 30;  // MPI counts are int
  for (int64_t at = 0; at < nbytes; at += chunk)
    VT_MPI_CHECK(MPI_Bcast((char *)buf + at, (int)(nbytes - at < chunk ? nbytes - at : chunk),
                           MPI_BYTE, root, comm_of(state)));
}

void vt_comm_mpi_finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized && !finalized) MPI_Finalize();
}

void vt_comm_mpi_abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

// ---- The watchdog's side channel -------------------------------------------------------------
// A duplicate of the world used only by the watchdog thread: small fixed-size messages, sent
// without waiting (MPI_Isend, request freed: the caller keeps the buffer alive) and received by
// polling, so that the thread never blocks behind a stuck main thread.

enum { VT_MPI_SIDE_TAG = 11 };

static void *mpi_side_open(void *world_state) {
  if (!g_thread_multiple) return NULL;
  MPI_Comm side;
  VT_MPI_CHECK(MPI_Comm_dup(comm_of(world_state), &side));
  return wrap(side);
}

static void mpi_side_send(void *side, const void *buf, int nbytes, int dst) {
  MPI_Request req;
  if (MPI_Isend(buf, nbytes, MPI_BYTE, dst, VT_MPI_SIDE_TAG, comm_of(side), &req) == MPI_SUCCESS)
    MPI_Request_free(&req);
}

static int mpi_side_poll(void *side, void *buf, int nbytes, int *src) {
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, VT_MPI_SIDE_TAG, comm_of(side), &flag, &st) != MPI_SUCCESS ||
      !flag)
    return 0;
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if (got != nbytes) {  // not ours to read: take it off the queue and ignore it
    char sink[4096];
    MPI_Recv(sink, got < (int)sizeof sink ? got : (int)sizeof sink, MPI_BYTE, st.MPI_SOURCE,
             VT_MPI_SIDE_TAG, comm_of(side), MPI_STATUS_IGNORE);
    return 0;
  }
  MPI_Recv(buf, nbytes, MPI_BYTE, st.MPI_SOURCE, VT_MPI_SIDE_TAG, comm_of(side),
           MPI_STATUS_IGNORE);
  *src = st.MPI_SOURCE;
  return 1;
}

// ---- The transport ---------------------------------------------------------------------------

static void mpi_all_reduce(void *s, float *buf, int64_t count) {
  VT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, comm_of(s)));
}

static void mpi_reduce_scatter(void *s, float *out, const float *inp, int64_t out_count) {
  int rank = 0;
  VT_MPI_CHECK(MPI_Comm_rank(comm_of(s), &rank));
  if (out != inp + (int64_t)rank * out_count) {
    VT_MPI_CHECK(
        MPI_Reduce_scatter_block(inp, out, (int)out_count, MPI_FLOAT, MPI_SUM, comm_of(s)));
    return;
  }
  // In place, MPI takes the input from the receive buffer and leaves the sum at its start.
  float *all = (float *)inp;
  VT_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, all, (int)out_count, MPI_FLOAT, MPI_SUM,
                                        comm_of(s)));
  if (rank > 0) memmove(out, all, (size_t)out_count * sizeof *out);
}

static void mpi_all_gather(void *s, float *out, const float *inp, int64_t inp_count) {
  int rank = 0;
  VT_MPI_CHECK(MPI_Comm_rank(comm_of(s), &rank));
  // The in-place form (a shard inside the full buffer) must be spelled MPI_IN_PLACE for MPI.
  const void *send = inp == out + (int64_t)rank * inp_count ? MPI_IN_PLACE : (const void *)inp;
  VT_MPI_CHECK(MPI_Allgather(send, (int)inp_count, MPI_FLOAT, out, (int)inp_count, MPI_FLOAT,
                             comm_of(s)));
}

static void mpi_broadcast(void *s, float *buf, int64_t count, int root) {
  VT_MPI_CHECK(MPI_Bcast(buf, (int)count, MPI_FLOAT, root, comm_of(s)));
}

static void mpi_send(void *s, const float *buf, int64_t count, int peer) {
  VT_MPI_CHECK(MPI_Send(buf, (int)count, MPI_FLOAT, peer, VT_MPI_TAG, comm_of(s)));
}

// A shorter message than expected means the two sides disagree on a shape: stop right there.
static void check_received(const MPI_Status *st, int64_t count, int peer) {
  int got = 0;
  VT_MPI_CHECK(MPI_Get_count(st, MPI_FLOAT, &got));
  VT_CHECK(got == count, "recv from comm rank %d: got %d floats, expected %lld", peer, got,
           (long long)count);
}

static void mpi_recv(void *s, float *buf, int64_t count, int peer) {
  MPI_Status st;
  VT_MPI_CHECK(MPI_Recv(buf, (int)count, MPI_FLOAT, peer, VT_MPI_TAG, comm_of(s), &st));
  check_received(&st, count, peer);
}

static void mpi_exchange(void *s, const vt_comm_p2p *ops, int n) {
  mpi_state *ms = s;
  MPI_Request req[VT_COMM_MAX_P2P];
  MPI_Status st[VT_COMM_MAX_P2P];
  int waited[VT_COMM_MAX_P2P], nw = 0;  // the ops this call completes
  for (int i = 0; i < n; i++) {
    MPI_Request r;
    if (ops[i].recv)
      VT_MPI_CHECK(MPI_Irecv(ops[i].buf, (int)ops[i].count, MPI_FLOAT, ops[i].peer,
                             VT_MPI_TAG + ops[i].channel, ms->comm, &r));
    else
      VT_MPI_CHECK(MPI_Isend(ops[i].buf, (int)ops[i].count, MPI_FLOAT, ops[i].peer,
                             VT_MPI_TAG + ops[i].channel, ms->comm, &r));
    if (ops[i].recv || ops[i].defer <= 0) {
      waited[nw] = i, req[nw++] = r;
      continue;
    }
    if (ms->nsends == ms->scap) {
      const int cap = ms->scap ? 2 * ms->scap : 16;
      MPI_Request *q = realloc(ms->sreq, (size_t)cap * sizeof *q);
      int *k = q ? realloc(ms->skey, (size_t)cap * sizeof *k) : NULL;
      VT_CHECK(q && k, "out of memory for %d deferred MPI sends", cap);
      ms->sreq = q, ms->skey = k, ms->scap = cap;
    }
    ms->sreq[ms->nsends] = r, ms->skey[ms->nsends++] = ops[i].defer;
  }
  VT_MPI_CHECK(MPI_Waitall(nw, req, st));
  for (int j = 0; j < nw; j++)
    if (ops[waited[j]].recv) check_received(&st[j], ops[waited[j]].count, ops[waited[j]].peer);
}

static void mpi_wait_sends(void *s, int key) {
  mpi_state *ms = s;
  int kept = 0;
  for (int i = 0; i < ms->nsends; i++) {
    if (key == 0 || ms->skey[i] == key)
      VT_MPI_CHECK(MPI_Wait(&ms->sreq[i], MPI_STATUS_IGNORE));
    else
      ms->sreq[kept] = ms->sreq[i], ms->skey[kept++] = ms->skey[i];
  }
  ms->nsends = kept;
}

// A free slot for one more started operation's request.
static MPI_Request *next_request(mpi_state *st) {
  if (st->npending == st->cap) {
    const int cap = st->cap ? 2 * st->cap : 64;
    MPI_Request *r = realloc(st->req, (size_t)cap * sizeof *r);
    VT_CHECK(r, "out of memory for %d MPI requests", cap);
    st->req = r, st->cap = cap;
  }
  return &st->req[st->npending++];
}

static void mpi_all_reduce_start(void *s, float *buf, int64_t count) {
  mpi_state *st = s;
  VT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, st->comm,
                              next_request(st)));
}

// In place at the root (MPI_IN_PLACE); the others' buf is only read (their receive buffer,
// not significant, none: no aliased arguments).
static void mpi_reduce_start(void *s, float *buf, int64_t count, int root) {
  mpi_state *st = s;
  int rank = 0;
  VT_MPI_CHECK(MPI_Comm_rank(st->comm, &rank));
  const int me = rank == root;
  VT_MPI_CHECK(MPI_Ireduce(me ? MPI_IN_PLACE : (const void *)buf, me ? buf : NULL, (int)count,
                           MPI_FLOAT, MPI_SUM, root, st->comm, next_request(st)));
}

static void mpi_wait_all(void *s) {
  mpi_state *st = s;
  if (st->npending) VT_MPI_CHECK(MPI_Waitall(st->npending, st->req, MPI_STATUSES_IGNORE));
  st->npending = 0;
}

static void mpi_free(void *s) {
  mpi_state *st = s;
  VT_CHECK(st->npending == 0 && st->nsends == 0,
           "an MPI communicator freed with %d operations in flight", st->npending + st->nsends);
  VT_MPI_CHECK(MPI_Comm_free(&st->comm));
  free(st->req);
  free(st->sreq);
  free(st->skey);
  free(st);
}

const vt_comm_transport vt_comm_mpi_transport = {
    "mpi",    mpi_all_reduce, mpi_reduce_scatter, mpi_all_gather,       mpi_broadcast,
    mpi_send, mpi_recv,       mpi_exchange,       mpi_free,             mpi_all_reduce_start,
    mpi_wait_all,  mpi_wait_sends, mpi_reduce_start};

const vt_comm_host vt_comm_mpi_host = {
    "mpi",         &vt_comm_mpi_transport, mpi_split,     mpi_barrier,   mpi_all_reduce_double,
    mpi_broadcast_bytes, mpi_free,         mpi_side_open, mpi_side_send, mpi_side_poll,
    mpi_free,            NULL};  // (no abort notice: mpirun ends every rank)
