// comm.h: the comm API (design.md "One comm API, two transports"): a communicator per mesh axis,
// float collectives and point-to-point, host scalar reductions, and per-axis traffic counters.
// Buffers live where the comm's transport says: host memory for MPI and TCP, device memory for
// NCCL. Must not depend on the model; only comm.c (the registry) knows whether MPI or NCCL were
// built.
#ifndef VT_COMM_H
#define VT_COMM_H

#include <stdint.h>
#include <stdio.h>

#include "mesh.h"
#include "vt_backend.h"
#include "vt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vt_comm vt_comm;

typedef enum { VT_REDUCE_SUM = 0, VT_REDUCE_MAX = 1, VT_REDUCE_MIN = 2 } vt_reduce_op;

// ---- Creation --------------------------------------------------------------------------------

// Starts the world and returns its communicator (axis WORLD, host buffers): MPI
// (MPI_Init_thread; only the main thread communicates) when an MPI launcher started this
// process, or when nothing says otherwise and MPI was built; TCP (comm_tcp*.c) when a launcher
// without MPI did (torchrun's RANK/WORLD_SIZE, `srun --mpi=none`, Open MPI's or PMI's variables
// in a build without MPI), meeting at MASTER_ADDR:MASTER_PORT; VT_WORLD=mpi|tcp forces one.
// Installs an abort hook so that a VT_CHECK on any rank ends the whole job (MPI_Abort; over TCP
// this rank exits and the others stop when they find it gone), and tags logs with the world
// rank. A bad launch environment is reported and the process exits with 2. Without MPI and
// without launcher variables: a world of size 1 whose collectives are local copies.
vt_comm *vt_comm_world_init(int *argc, char ***argv);

// Splits the world by the mesh's coordinates into one communicator per axis; a comm's rank is
// the caller's coordinate on that axis and its members are vt_mesh_group's list. Collective over
// the world. device says where the axis comms' float buffers live: VT_DEVICE_CPU -> the world's
// host transport (MPI or TCP) on host buffers; VT_DEVICE_CUDA -> NCCL on device buffers, on the
// CUDA backend's stream (its unique id is broadcast over the host transport). A mesh that does
// not fit the world is fatal: validate it first with vt_mesh_validate at the input boundary. Sets the log tag to "[rank R tp T pp P dp D]".
void vt_comm_split_mesh(vt_comm *world, const vt_mesh *mesh, vt_device device, vt_comm **tp,
                        vt_comm **pp, vt_comm **dp);

void vt_comm_free(vt_comm *comm);  // an axis comm (NULL is fine); collective over its members
void vt_comm_finalize(vt_comm *world);  // frees the world comm and ends MPI

// Ends every rank of the job with `code` (MPI_Abort), or this process otherwise (over TCP the
// other ranks then find it gone at their next operation with it and end too).
VT_NORETURN void vt_comm_abort(int code);

vt_axis vt_comm_axis(const vt_comm *comm);
int vt_comm_size(const vt_comm *comm);
int vt_comm_rank(const vt_comm *comm);
const char *vt_comm_transport_name(const vt_comm *comm);  // "mpi", "tcp", "nccl" or "local"
// World comm only: this rank's place among the ranks sharing its host (MPI shared-memory
// groups, or over TCP the ranks whose host name is this one's; not environment variables, which
// lie under mpirun inside sbatch). Picks the GPU and the share of the host's cores.
int vt_comm_local_rank(const vt_comm *world);
int vt_comm_local_size(const vt_comm *world);

// ---- Float operations (buffers in the transport's memory; count = elements) ------------------
// Every member calls each collective in the same order with the same count. NCCL transports
// enqueue on the CUDA stream and return before the data moved; MPI transports return when done.

// buf (count) <- sum over members of buf.
void vt_comm_all_reduce(vt_comm *comm, float *buf, int64_t count);

// out (out_count) <- sum over members of inp[rank*out_count, (rank+1)*out_count).
// inp has size*out_count elements. In place is allowed when out == inp + rank*out_count (this
// rank's shard inside the input); inp's other elements are undefined afterwards. Otherwise out
// must not overlap inp.
void vt_comm_reduce_scatter(vt_comm *comm, float *out, const float *inp, int64_t out_count);

// out[r*inp_count, (r+1)*inp_count) <- inp of member r; out has size*inp_count elements.
// In place is allowed when inp == out + rank*inp_count (a shard inside the full buffer).
void vt_comm_all_gather(vt_comm *comm, float *out, const float *inp, int64_t inp_count);

// Every member's 64-bit key, all its bits compared (collective, by host control: any comm, a
// device one's too): the number of members whose key equals this one's, and in *first_other
// (where given) the lowest member whose key differs from member 0's, or -1.
int vt_comm_same_keys(vt_comm *comm, uint64_t key, int *first_other);
// FNV-1a of n bytes, continuing from h (start with VT_FNV_START): such a key.
#define VT_FNV_START 1469598103934665603ull
uint64_t vt_fnv64(uint64_t h, const void *data, size_t n);

// Overlap (DP gradients reduced while the backward pass goes on): starts buf (count) <- sum over
// members and returns; buf must not be read or written until vt_comm_wait_all(comm). NCCL: on
// the comm's own stream, after the work already queued on the backend's stream, so it runs
// beside later ops; MPI: MPI_Iallreduce; one rank: nothing to do. Every member starts the same
// operations in the same order; other operations on the same comm may come in between (NCCL
// runs them after the started ones).
void vt_comm_all_reduce_start(vt_comm *comm, float *buf, int64_t count);
// The same for a reduction to one member (ZeRO-1's gradient shards, each reduced to its owner
// while the backward pass goes on): starts root's buf (count) <- sum over members of buf; the
// other members' buf is undefined afterwards (MPI and NCCL leave it as it was, TCP partial
// sums; a transport without the operation runs an all-reduce at start).
void vt_comm_reduce_start(vt_comm *comm, float *buf, int64_t count, int root);
// Completes every operation started on comm. NCCL: the backend's stream waits for them (the host
// does not); MPI: the host waits.
void vt_comm_wait_all(vt_comm *comm);

// buf (count) on every member <- buf of member `root`.
void vt_comm_broadcast(vt_comm *comm, float *buf, int64_t count, int root);
// The same for nbytes of host memory, on the host side of any comm (MPI or TCP; one member:
// nothing to do): what one rank read for all of them, as the dataset index.
void vt_comm_broadcast_bytes(vt_comm *comm, void *buf, int64_t nbytes, int root);

// Point to point; peer is a rank within the comm, never the caller itself. Messages between two
// members arrive in the order they were sent. Blocking on MPI: pair them so that no two ranks
// wait to send to each other at once, or use vt_comm_sendrecv.
void vt_comm_send(vt_comm *comm, const float *buf, int64_t count, int peer);
void vt_comm_recv(vt_comm *comm, float *buf, int64_t count, int peer);
// Sends to dst and receives from src in one deadlock-free step (a pipeline stage that passes an
// activation forward while taking a gradient back). Counted as one send plus one recv.
void vt_comm_sendrecv(vt_comm *comm, const float *sendbuf, int64_t send_count, int dst,
                      float *recvbuf, int64_t recv_count, int src);

// One message of vt_comm_exchange: a send of buf (count floats; only read) to peer, or a
// receive into buf from peer. defer (sends only): 0, the send is complete when the call returns;
// k > 0, it may still be in flight (MPI) until vt_comm_wait_sends(comm, k or 0): buf must stay
// unchanged until then. channel (0 or 1, VT_COMM_CHANNELS): messages between two ranks are
// matched in posting order within a channel, independently of the other channel (an MPI tag
// each; NCCL: a link communicator and send stream each), so a pipeline can send activations and
// gradients the same way in orders its sender and receiver see differently (ZB-V).
#define VT_COMM_CHANNELS 2
typedef struct {
  int recv;
  float *buf;
  int64_t count;
  int peer;
  int defer;
  int channel;
} vt_comm_p2p;
#define VT_COMM_MAX_P2P 8
// Posts up to VT_COMM_MAX_P2P sends and receives together, in array order, and returns when all
// are done but the deferred sends: the pipeline's step, which sends to and receives from both
// neighbours at once. Messages between a pair are matched in posting order per channel. MPI:
// non-blocking calls and one wait. NCCL, on the pipeline comm: each send on the send stream of
// its link and channel, the receives in one group on the backend's stream, over its links to its
// neighbours (the only peers it has there; vt_comm_nccl_open_links); "done" is "ordered before
// the backend's later work".
// Counted as one op per message.
void vt_comm_exchange(vt_comm *comm, const vt_comm_p2p *ops, int n);
// Completes the deferred sends posted under key (0: all of them). NCCL: the backend's stream
// waits for them; the host does not.
void vt_comm_wait_sends(vt_comm *comm, int key);

// ---- Host control (host buffers whatever the transport) --------------------------------------

void vt_comm_barrier(vt_comm *comm);
// buf (count) <- op over members of buf, in double: gradient norms, verdicts, agreement checks.
void vt_comm_all_reduce_double(vt_comm *comm, double *buf, int64_t count, vt_reduce_op op);
// buf (count) <- the XOR of the members' buf (checksum shares: dataio/partfile.h), exact: each
// member's values go into slots of their own of one double sum.
void vt_comm_all_xor(vt_comm *comm, uint32_t *buf, int64_t count);
// Every member learns the worst of the members' statuses, and err (errlen bytes, the same on
// every member) becomes the message of the lowest member that failed: a failure on any rank is
// said by rank 0, which logs. Returns the worst status.
vt_status vt_comm_agree(vt_comm *comm, vt_status st, char *err, size_t errlen);

// ---- For the watchdog (parallel/watchdog.c) ---------------------------------------------------

// The side channel: a duplicate of the world that the watchdog thread uses while the main
// thread may be stuck in a collective (over TCP: sockets of its own between rank 0 and each
// rank). Open is collective over world; it returns 0 where MPI cannot take calls from a second
// thread, and for a world of one. send does not wait (the caller keeps
// buf alive); poll receives one waiting message of exactly nbytes, if any (returns 1, *src), or
// returns -1 (once, *src) where the peer's side of the channel closed without the goodbye its
// comm's free sends (TCP: that process ended abnormally; MPI never says so: mpirun ends the job),
// or -2 (once, *src, the peer's exit code in buf's first int) where the peer ended on an error it
// reported (vt_comm_abort).
int vt_comm_side_open(vt_comm *world);
void vt_comm_side_send(vt_comm *world, const void *buf, int nbytes, int dst);
int vt_comm_side_poll(vt_comm *world, void *buf, int nbytes, int *src);
// Device (NCCL) comms: 1 and a message when one reports an asynchronous error; abort them all
// (any thread; then the job must end), waiting at most limit_s seconds for ncclCommAbort, which
// blocks behind a hung kernel: 1 when it returned (or there was nothing to abort), 0 and a
// warning on stderr when it did not.
int vt_comm_device_error(char *err, size_t errlen);
int vt_comm_device_abort(double limit_s);

// Seconds this process has spent inside comm operations since it started (waiting included):
// a step's time minus its change is the time the rank was busy, for the straggler report.
double vt_comm_seconds(void);

// ---- Traffic counters ------------------------------------------------------------------------
// Per process and per axis (all comms of one axis share a row). Payload = bytes of the buffer the
// caller passes: all_reduce count*4, reduce_scatter its input, all_gather its output, broadcast
// count*4 (on every member), send bytes sent, recv bytes received, double reductions count*8,
// barrier 0, reduce count*4 (on every member).

typedef enum {
  VT_COMM_OP_ALL_REDUCE = 0,
  VT_COMM_OP_REDUCE_SCATTER,
  VT_COMM_OP_ALL_GATHER,
  VT_COMM_OP_BROADCAST,
  VT_COMM_OP_SEND,
  VT_COMM_OP_RECV,
  VT_COMM_OP_BARRIER,
  VT_COMM_OP_REDUCE_DOUBLE,
  VT_COMM_OP_REDUCE,
  VT_COMM_OP_COUNT
} vt_comm_op;

typedef struct {
  int64_t calls, nbytes;  // all ops together
  int64_t op_calls[VT_COMM_OP_COUNT], op_nbytes[VT_COMM_OP_COUNT];
} vt_comm_counts;

vt_comm_counts vt_comm_counts_get(vt_axis axis);
void vt_comm_counts_reset(void);  // every axis
const char *vt_comm_op_name(vt_comm_op op);
// One rank-tagged line per axis that saw traffic: calls, bytes and the split by op.
void vt_comm_counts_print(FILE *f);

// ---- Transports (for comm.c and the transport files only) ------------------------------------
// A transport moves float buffers for one communicator; `state` is its own handle. Arguments are
// already checked by comm.c, counts fit in an int for MPI, and peer/root are ranks in the comm.

typedef struct {
  const char *name;
  void (*all_reduce)(void *state, float *buf, int64_t count);
  void (*reduce_scatter)(void *state, float *out, const float *inp, int64_t out_count);
  void (*all_gather)(void *state, float *out, const float *inp, int64_t inp_count);
  void (*broadcast)(void *state, float *buf, int64_t count, int root);
  void (*send)(void *state, const float *buf, int64_t count, int peer);
  void (*recv)(void *state, float *buf, int64_t count, int peer);
  void (*exchange)(void *state, const vt_comm_p2p *ops, int n);
  void (*free)(void *state);
  // Optional (NULL: comm.c runs all_reduce at start and wait_all does nothing).
  void (*all_reduce_start)(void *state, float *buf, int64_t count);
  void (*wait_all)(void *state);
  // Optional (NULL: exchange completes deferred sends too).
  void (*wait_sends)(void *state, int key);
  // Optional (NULL: comm.c runs all_reduce at start); completed by wait_all.
  void (*reduce_start)(void *state, float *buf, int64_t count, int root);
} vt_comm_transport;

// The host side of a comm: splitting, host control (buffers in host memory) and the watchdog's
// side channel, over MPI (comm_mpi.c) or TCP sockets (comm_tcp*.c). A world has one; its comms'
// states are the host's own handles. split names the new comm ("tp", ...) for messages.
typedef struct {
  const char *name;
  const vt_comm_transport *transport;  // its float operations on host buffers, same states
  void *(*split)(void *state, int color, int key, const char *name, int *size, int *rank);
  void (*barrier)(void *state);
  void (*all_reduce_double)(void *state, double *buf, int64_t count, vt_reduce_op op);
  void (*broadcast_bytes)(void *state, void *buf, int64_t nbytes, int root);  // any size
  void (*free)(void *state);
  void *(*side_open)(void *world_state);  // NULL: no side channel here
  void (*side_send)(void *side, const void *buf, int nbytes, int dst);
  int (*side_poll)(void *side, void *buf, int nbytes, int *src);
  void (*side_free)(void *side);
  // Tells the side channel's peers that this process ends on an error it reported, with its
  // exit code (vt_comm_abort; any thread; NULL where the launcher ends the job: MPI).
  void (*side_abort)(void *side, int code);
} vt_comm_host;

// comm_mpi.c (built with MPI). States are MPI communicators behind a void pointer so that this
// header needs no mpi.h.
extern const vt_comm_transport vt_comm_mpi_transport;
extern const vt_comm_host vt_comm_mpi_host;
void vt_comm_mpi_world_init(int *argc, char ***argv, void **world_state, int *size, int *rank);
void vt_comm_mpi_node(void *state, int *local_rank, int *local_size);
void vt_comm_mpi_finalize(void);
VT_NORETURN void vt_comm_mpi_abort(int code);

// comm_tcp*.c (always built): a world without MPI, its ranks from the launcher's environment,
// meeting at MASTER_ADDR:MASTER_PORT. vt_comm_tcp_launch reads the environment (have_mpi: this
// build has MPI): 1 when this process starts a TCP world (e filled), 0 when it should not (MPI,
// or a single process), -1 when the environment is wrong (err says what to do).
typedef struct {
  int rank, size;
  char source[64];  // which variables gave the rank, for messages
  char addr[256];   // MASTER_ADDR
  int port;         // MASTER_PORT
  double timeout_s;  // VT_CONNECT_TIMEOUT, default 300
  // The run the ranks belong to (VT_RUN_ID, torchrun's TORCHELASTIC_RUN_ID, a Slurm step's
  // SLURM_JOB_ID.SLURM_STEP_ID, PMIx's PMIX_NAMESPACE; "" if none) and its hash (0 for ""):
  // rank 0 turns away ranks of another run that reach its MASTER_PORT.
  char run_id[96];
  uint32_t run_key;
} vt_comm_tcp_env;
int vt_comm_tcp_launch(int have_mpi, vt_comm_tcp_env *e, char *err, size_t errlen);
extern const vt_comm_transport vt_comm_tcp_transport;
extern const vt_comm_host vt_comm_tcp_host;
void *vt_comm_tcp_world_init(const vt_comm_tcp_env *e, int *local_rank, int *local_size);
// Called about four times a second while a TCP rank waits to connect or to be connected to (the
// meeting, a comm's links): the launcher's check for a stop signal, which may end the process.
void vt_comm_tcp_set_connect_check(void (*check)(void));
void vt_comm_tcp_finalize(void);

// comm_nccl.cu (built with NCCL): the unique id is opaque bytes, made by rank 0 of the comm and
// broadcast by the caller, so the CUDA file needs no MPI.
#define VT_COMM_NCCL_ID_NBYTES 128
extern const vt_comm_transport vt_comm_nccl_transport;
void vt_comm_nccl_unique_id(unsigned char id[VT_COMM_NCCL_ID_NBYTES]);
void *vt_comm_nccl_init(const unsigned char id[VT_COMM_NCCL_ID_NBYTES], int size, int rank);
// A pipeline comm of size > 1 (collective over it, right after init): communicators to and from
// each neighbour, ring included, per channel, and the send streams that vt_comm_exchange's sends
// run on (one per neighbour and channel).
void vt_comm_nccl_open_links(void *state, int size, int rank);
int vt_comm_nccl_async_error(void *state, char *err, size_t errlen);  // 1: an error, described
void vt_comm_nccl_abort(void *state);                                 // any thread

#ifdef __cplusplus
}
#endif

#endif
