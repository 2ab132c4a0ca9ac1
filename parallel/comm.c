// comm.c: the comm registry. It checks arguments once, counts traffic per axis and dispatches to
// a transport (MPI or TCP on host buffers, NCCL on device buffers, or "local" for a world of one
// process) and to the world's host side (MPI or TCP). The only file of parallel/ that knows,
// through #ifdef, which were built. Must not depend on the model.
#include "comm.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watchdog.h"

struct vt_comm {
  vt_axis axis;
  int size, rank;
  int local_rank, local_size;          // world only: place among the ranks on this host
  const vt_comm_transport *transport;  // float operations
  void *state;                         // the transport's handle
  void *host;  // the host side's handle (barrier, doubles, NCCL id); NULL for a world of one
  void *side;  // world only: the watchdog's side channel, or NULL
};

// The world's host side (MPI or TCP), or NULL for a single process without either.
static const vt_comm_host *g_host;

// Device (NCCL) comms alive in this process, for the watchdog's error polling and abort.
enum { VT_MAX_DEVICE_COMMS = 16 };
static void *g_device_comms[VT_MAX_DEVICE_COMMS];

// ---- The local transport: a comm of one process ----------------------------------------------
// Its state is NULL for host buffers, or the backend whose memory the buffers are in (a device
// comm of one rank in a build without NCCL), whose copy then moves them.

static void local_copy(void *s, float *out, const float *inp, int64_t count) {
  if (s)
    ((const vt_backend *)s)->copy(out, inp, (size_t)count * sizeof(float));
  else
    memcpy(out, inp, (size_t)count * sizeof(float));
}
static void local_all_reduce(void *s, float *buf, int64_t count) {
  (void)s, (void)buf, (void)count;
}
static void local_reduce_scatter(void *s, float *out, const float *inp, int64_t out_count) {
  if (out != inp) local_copy(s, out, inp, out_count);
}
static void local_all_gather(void *s, float *out, const float *inp, int64_t inp_count) {
  if (out != inp) local_copy(s, out, inp, inp_count);
}
static void local_broadcast(void *s, float *buf, int64_t count, int root) {
  (void)s, (void)buf, (void)count, (void)root;
}
// comm.c refuses a peer equal to the caller, and a comm of one has no other peer.
static void local_send(void *s, const float *buf, int64_t count, int peer) {
  (void)s, (void)buf, (void)count;
  VT_CHECK(0, "send to rank %d in a single-process comm", peer);
}
static void local_recv(void *s, float *buf, int64_t count, int peer) {
  (void)s, (void)buf, (void)count;
  VT_CHECK(0, "recv from rank %d in a single-process comm", peer);
}
static void local_exchange(void *s, const vt_comm_p2p *ops, int n) {
  (void)s, (void)n;
  VT_CHECK(0, "exchange with rank %d in a single-process comm", ops[0].peer);
}
static void local_free(void *s) { (void)s; }

static const vt_comm_transport k_local_transport = {
    "local",    local_all_reduce, local_reduce_scatter, local_all_gather, local_broadcast,
    local_send, local_recv,       local_exchange,       local_free,       NULL,
    NULL,       NULL,             NULL};

// ---- Host control through the world's host side, or nothing to do for a single process ------

static void host_barrier(vt_comm *c) {
  if (c->host) g_host->barrier(c->host);
}

static void host_all_reduce_double(vt_comm *c, double *buf, int64_t count, vt_reduce_op op) {
  if (c->host) g_host->all_reduce_double(c->host, buf, count, op);
}

static void *host_split(vt_comm *parent, int color, int key, const char *name, int *size,
                        int *rank) {
  if (parent->host) return g_host->split(parent->host, color, key, name, size, rank);
  *size = 1, *rank = 0;
  return NULL;
}

static void host_free(void *host) {
  if (host) g_host->free(host);
}

static void abort_hook(int code) { vt_comm_abort(code); }

static vt_comm *g_world;  // the world vt_comm_world_init made (its side channel, for the abort)

void vt_comm_abort(int code) {
#ifdef VT_HAVE_MPI
  if (g_host == &vt_comm_mpi_host) vt_comm_mpi_abort(code);
#endif
  fflush(stdout);
  fflush(stderr);
  // Over TCP the sockets close with the process: the other ranks find it gone, and rank 0's
  // watchdog learns from the side channel that it ended on an error, and with which code.
  if (g_host && g_host->side_abort && g_world && g_world->side)
    g_host->side_abort(g_world->side, code);
  _Exit(code);
}

// ---- Creation --------------------------------------------------------------------------------

vt_comm *vt_comm_world_init(int *argc, char ***argv) {
  vt_comm *c = calloc(1, sizeof *c);
  VT_CHECK(c, "out of memory for the world communicator");
  c->axis = VT_AXIS_WORLD;
  c->size = 1, c->rank = 0;
  c->local_rank = 0, c->local_size = 1;
  c->transport = &k_local_transport;
  vt_comm_tcp_env env;
  char err[512];
#ifdef VT_HAVE_MPI
  const int have_mpi = 1;
#else
  const int have_mpi = 0;
#endif
  const int tcp = vt_comm_tcp_launch(have_mpi, &env, err, sizeof err);
  if (tcp < 0) {
    fprintf(stderr, "error: %s\n", err);
    exit(2);
  }
  if (tcp) {
    vt_rank_tag early = {env.rank, -1, -1, -1};  // for what the meeting may have to say
    vt_set_rank_tag(early);
    g_host = &vt_comm_tcp_host;
    vt_set_abort_hook(abort_hook);
    c->host = vt_comm_tcp_world_init(&env, &c->local_rank, &c->local_size);
    c->size = env.size, c->rank = env.rank;
  }
#ifdef VT_HAVE_MPI
  if (!tcp) {
    g_host = &vt_comm_mpi_host;
    vt_set_abort_hook(abort_hook);
    vt_comm_mpi_world_init(argc, argv, &c->host, &c->size, &c->rank);
    vt_comm_mpi_node(c->host, &c->local_rank, &c->local_size);
  }
#else
  (void)argc, (void)argv;
#endif
  if (g_host) c->transport = g_host->transport, c->state = c->host;
  g_world = c;
  vt_rank_tag tag = {c->rank, -1, -1, -1};
  vt_set_rank_tag(tag);
  return c;
}

// The float transport of an axis comm whose host side (c->host, size, rank) is already set.
static void attach_transport(vt_comm *c, vt_device device) {
  if (device == VT_DEVICE_CUDA) {
#ifdef VT_HAVE_NCCL
    const char *why = "";
    VT_CHECK(vt_backend_get(VT_DEVICE_CUDA, &why), "the NCCL transport needs the CUDA backend: %s",
             why);
    unsigned char id[VT_COMM_NCCL_ID_NBYTES];
    if (c->rank == 0) vt_comm_nccl_unique_id(id);
    if (c->host) g_host->broadcast_bytes(c->host, id, VT_COMM_NCCL_ID_NBYTES, 0);
    c->transport = &vt_comm_nccl_transport;
    c->state = vt_comm_nccl_init(id, c->size, c->rank);
    if (c->axis == VT_AXIS_PP && c->size > 1) vt_comm_nccl_open_links(c->state, c->size, c->rank);
    for (int i = 0; i < VT_MAX_DEVICE_COMMS; i++)
      if (!g_device_comms[i]) {
        g_device_comms[i] = c->state;
        break;
      }
    return;
#else
    // One rank needs no transport, only device copies.
    VT_CHECK(c->size == 1, "comms of several ranks on device buffers need NCCL, and this vit3d "
             "was built without it (configure with -DVT_CUDA=ON -DVT_NCCL=ON where libnccl is "
             "installed)");
    const char *why = "";
    c->transport = &k_local_transport;
    c->state = (void *)vt_backend_get(VT_DEVICE_CUDA, &why);
    VT_CHECK(c->state, "a device comm needs the CUDA backend: %s", why);
    return;
#endif
  }
  // Host buffers: the world's host side moves them too (MPI or TCP), or nothing for one rank.
  if (c->host) {
    c->transport = g_host->transport;
    c->state = c->host;
  } else {
    c->transport = &k_local_transport;
    c->state = NULL;
  }
}

static vt_comm *split_axis(vt_comm *world, const vt_mesh *mesh, vt_axis axis, vt_device device) {
  // Color: the world rank of the group's first member, so every group gets a distinct color.
  // Key: the coordinate on the axis, so the comm's rank equals the coordinate.
  vt_mesh_coord me = vt_mesh_coords(mesh, world->rank);
  vt_mesh_coord first = me;
  int key = vt_mesh_axis_rank(mesh, world->rank, axis);
  if (axis == VT_AXIS_TP) first.tp_rank = 0;
  if (axis == VT_AXIS_PP) first.pp_rank = 0;
  if (axis == VT_AXIS_DP) first.dp_rank = 0;
  int color = vt_mesh_world_rank(mesh, first);

  vt_comm *c = calloc(1, sizeof *c);
  VT_CHECK(c, "out of memory for the %s communicator", vt_axis_name(axis));
  c->axis = axis;
  c->host = host_split(world, color, key, vt_axis_name(axis), &c->size, &c->rank);
  VT_CHECK(c->size == vt_mesh_axis_size(mesh, axis) && c->rank == key,
           "the %s communicator has rank %d of %d, but the mesh says %d of %d", vt_axis_name(axis),
           c->rank, c->size, key, vt_mesh_axis_size(mesh, axis));
  attach_transport(c, device);
  return c;
}

void vt_comm_split_mesh(vt_comm *world, const vt_mesh *mesh, vt_device device, vt_comm **tp,
                        vt_comm **pp, vt_comm **dp) {
  char err[256];
  VT_CHECK(vt_mesh_validate(mesh, world->size, err, sizeof err) == VT_OK, "%s", err);
  // Every rank creates the comms in the same order, as MPI_Comm_split and NCCL init require.
  *tp = split_axis(world, mesh, VT_AXIS_TP, device);
  *pp = split_axis(world, mesh, VT_AXIS_PP, device);
  *dp = split_axis(world, mesh, VT_AXIS_DP, device);
  vt_mesh_coord me = vt_mesh_coords(mesh, world->rank);
  vt_rank_tag tag = {world->rank, me.tp_rank, me.pp_rank, me.dp_rank};
  vt_set_rank_tag(tag);
}

void vt_comm_free(vt_comm *c) {
  if (!c) return;
  for (int i = 0; i < VT_MAX_DEVICE_COMMS; i++)
    if (g_device_comms[i] && g_device_comms[i] == c->state) g_device_comms[i] = NULL;
  if (c->transport != &k_local_transport && c->state != c->host) c->transport->free(c->state);
  if (c->side) g_host->side_free(c->side);
  host_free(c->host);
  free(c);
}

void vt_comm_finalize(vt_comm *world) {
  if (world == g_world) g_world = NULL;
  vt_comm_free(world);
  if (g_host == &vt_comm_tcp_host) vt_comm_tcp_finalize();
#ifdef VT_HAVE_MPI
  if (g_host == &vt_comm_mpi_host) vt_comm_mpi_finalize();
#endif
  g_host = NULL;
}

int vt_comm_local_rank(const vt_comm *world) { return world->local_rank; }
int vt_comm_local_size(const vt_comm *world) { return world->local_size; }

vt_axis vt_comm_axis(const vt_comm *c) { return c->axis; }
int vt_comm_size(const vt_comm *c) { return c->size; }
int vt_comm_rank(const vt_comm *c) { return c->rank; }
const char *vt_comm_transport_name(const vt_comm *c) { return c->transport->name; }

// ---- The watchdog's side channel and device comms -------------------------------------------

int vt_comm_side_open(vt_comm *world) {
  if (!world->side && world->host && world->size > 1) world->side = g_host->side_open(world->host);
  return world->side != NULL;
}

void vt_comm_side_send(vt_comm *world, const void *buf, int nbytes, int dst) {
  if (world->side) g_host->side_send(world->side, buf, nbytes, dst);
}

int vt_comm_side_poll(vt_comm *world, void *buf, int nbytes, int *src) {
  return world->side ? g_host->side_poll(world->side, buf, nbytes, src) : 0;
}

int vt_comm_device_error(char *err, size_t errlen) {
#ifdef VT_HAVE_NCCL
  for (int i = 0; i < VT_MAX_DEVICE_COMMS; i++)
    if (g_device_comms[i] && vt_comm_nccl_async_error(g_device_comms[i], err, errlen)) return 1;
#else
  (void)err, (void)errlen;
#endif
  return 0;
}

#ifdef VT_HAVE_NCCL
static atomic_int g_aborted;  // the helper thread's abort returned

static void *abort_device_comms(void *arg) {
  (void)arg;
  for (int i = 0; i < VT_MAX_DEVICE_COMMS; i++)
    if (g_device_comms[i]) vt_comm_nccl_abort(g_device_comms[i]);
  atomic_store(&g_aborted, 1);
  return NULL;
}
#endif

// ncclCommAbort frees the comms' memory and so waits for the device: behind a kernel that never
// ends it never returns, and the job would never end. So it runs on a helper thread that the
// caller waits for at most limit_s; the process then exits with the helper still blocked.
int vt_comm_device_abort(double limit_s) {
#ifdef VT_HAVE_NCCL
  int any = 0;
  for (int i = 0; i < VT_MAX_DEVICE_COMMS; i++) any |= g_device_comms[i] != NULL;
  if (!any) return 1;
  pthread_t helper;
  if (pthread_create(&helper, NULL, abort_device_comms, NULL) != 0) {
    fprintf(stderr, "warning: could not start a thread to abort the NCCL comms; ending the job "
                    "without aborting them (the driver releases them with the process)\n");
    return 0;
  }
  pthread_detach(helper);
  const double t0 = vt_seconds();
  while (!atomic_load(&g_aborted)) {
    if (vt_seconds() - t0 > limit_s) {
      fprintf(stderr, "warning: ncclCommAbort did not return within %.0f s (the GPU is probably "
                      "stuck in a kernel); ending the job without it\n", limit_s);
      return 0;
    }
    const struct timespec tick = {0, 10 * 1000 * 1000};
    nanosleep(&tick, NULL);
  }
#else
  (void)limit_s;
#endif
  return 1;
}

// ---- Counters --------------------------------------------------------------------------------

// Only the main thread runs these operations, so plain counters suffice.
static vt_comm_counts g_counts[VT_AXIS_COUNT];
static int64_t g_seq[VT_AXIS_COUNT];  // operations per axis since start (never reset)
static double g_seconds;              // time inside operations since start

static void tally(const vt_comm *c, vt_comm_op op, int64_t nbytes) {
  vt_comm_counts *k = &g_counts[c->axis];
  k->calls++, k->nbytes += nbytes;
  k->op_calls[op]++, k->op_nbytes[op] += nbytes;
}

// Every operation: counted, numbered on its axis, shown to the watchdog and timed.
static double op_begin(const vt_comm *c, vt_comm_op op, int64_t nbytes) {
  tally(c, op, nbytes);
  vt_watchdog_comm_enter(c->axis, (int)op, ++g_seq[c->axis]);
  return vt_seconds();
}

static void op_end(double t0) {
  g_seconds += vt_seconds() - t0;
  vt_watchdog_comm_leave();
}

double vt_comm_seconds(void) { return g_seconds; }

vt_comm_counts vt_comm_counts_get(vt_axis axis) {
  VT_CHECK((int)axis >= 0 && (int)axis < VT_AXIS_COUNT, "unknown axis %d", (int)axis);
  return g_counts[axis];
}

void vt_comm_counts_reset(void) { memset(g_counts, 0, sizeof g_counts); }

const char *vt_comm_op_name(vt_comm_op op) {
  static const char *const names[VT_COMM_OP_COUNT] = {
      "all_reduce", "reduce_scatter", "all_gather", "broadcast",
      "send",       "recv",           "barrier",    "reduce_double", "reduce"};
  return (int)op >= 0 && op < VT_COMM_OP_COUNT ? names[op] : "?";
}

void vt_comm_counts_print(FILE *f) {
  vt_rank_tag t = vt_get_rank_tag();
  for (int a = 0; a < VT_AXIS_COUNT; a++) {
    const vt_comm_counts *k = &g_counts[a];
    if (k->calls == 0) continue;
    char line[1024];
    int len = snprintf(line, sizeof line, "comm %-5s %lld calls %lld bytes:",
                       vt_axis_name((vt_axis)a), (long long)k->calls, (long long)k->nbytes);
    for (int op = 0; op < VT_COMM_OP_COUNT && len < (int)sizeof line; op++) {
      if (k->op_calls[op] == 0) continue;
      len += snprintf(line + len, sizeof line - (size_t)len, " %s %lld/%lld",
                      vt_comm_op_name((vt_comm_op)op), (long long)k->op_calls[op],
                      (long long)k->op_nbytes[op]);
    }
    // One fprintf per line so lines of different ranks do not interleave mid-line.
    if (t.tp_rank >= 0)
      fprintf(f, "[rank %d tp %d pp %d dp %d] %s\n", t.world_rank, t.tp_rank, t.pp_rank,
              t.dp_rank, line);
    else
      fprintf(f, "[rank %d] %s\n", t.world_rank, line);
  }
  fflush(f);
}

// ---- Operations: check once, count, dispatch -------------------------------------------------

static void check_buf(const vt_comm *c, const char *what, const void *buf, int64_t count) {
  // MPI counts are int; a larger message is a sizing bug long before it is a real need.
  VT_CHECK(count >= 0 && count <= INT_MAX, "comm %s %s: count %lld is outside [0, %d]",
           vt_axis_name(c->axis), what, (long long)count, INT_MAX);
  VT_CHECK(buf || count == 0, "comm %s %s: NULL buffer for %lld elements", vt_axis_name(c->axis),
           what, (long long)count);
}

static void check_peer(const vt_comm *c, const char *what, int peer) {
  VT_CHECK(peer >= 0 && peer < c->size && peer != c->rank,
           "comm %s %s: peer %d is not another rank of this comm (rank %d of %d)",
           vt_axis_name(c->axis), what, peer, c->rank, c->size);
}

void vt_comm_all_reduce(vt_comm *c, float *buf, int64_t count) {
  check_buf(c, "all_reduce", buf, count);
  const double t0 = op_begin(c, VT_COMM_OP_ALL_REDUCE, count * 4);
  c->transport->all_reduce(c->state, buf, count);
  op_end(t0);
}

void vt_comm_all_reduce_start(vt_comm *c, float *buf, int64_t count) {
  check_buf(c, "all_reduce_start", buf, count);
  const double t0 = op_begin(c, VT_COMM_OP_ALL_REDUCE, count * 4);
  if (c->transport->all_reduce_start)
    c->transport->all_reduce_start(c->state, buf, count);
  else
    c->transport->all_reduce(c->state, buf, count);
  op_end(t0);
}

void vt_comm_reduce_start(vt_comm *c, float *buf, int64_t count, int root) {
  check_buf(c, "reduce_start", buf, count);
  VT_CHECK(root >= 0 && root < c->size, "comm %s reduce_start: root %d is not a rank of this "
           "comm (of %d)", vt_axis_name(c->axis), root, c->size);
  const double t0 = op_begin(c, VT_COMM_OP_REDUCE, count * 4);
  if (c->transport->reduce_start)
    c->transport->reduce_start(c->state, buf, count, root);
  else
    c->transport->all_reduce(c->state, buf, count);
  op_end(t0);
}

void vt_comm_wait_all(vt_comm *c) {
  if (!c->transport->wait_all) return;
  // Shown to the watchdog as the axis's last operation, which a stuck rank is waiting for.
  vt_watchdog_comm_enter(c->axis, (int)VT_COMM_OP_ALL_REDUCE, g_seq[c->axis]);
  const double t0 = vt_seconds();
  c->transport->wait_all(c->state);
  op_end(t0);
}

void vt_comm_reduce_scatter(vt_comm *c, float *out, const float *inp, int64_t out_count) {
  check_buf(c, "reduce_scatter", out, out_count);
  check_buf(c, "reduce_scatter", inp, out_count);
  uintptr_t o = (uintptr_t)out, i = (uintptr_t)inp;
  uintptr_t o_end = o + (uintptr_t)out_count * 4, i_end = i + (uintptr_t)(out_count * c->size) * 4;
  VT_CHECK(out_count == 0 || o_end <= i || i_end <= o || out == inp + (int64_t)c->rank * out_count,
           "comm %s reduce_scatter: out overlaps inp other than as this rank's shard "
           "(inp + rank * out_count)", vt_axis_name(c->axis));
  const double t0 = op_begin(c, VT_COMM_OP_REDUCE_SCATTER, out_count * c->size * 4);
  c->transport->reduce_scatter(c->state, out, inp, out_count);
  op_end(t0);
}

uint64_t vt_fnv64(uint64_t h, const void *data, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)data)[i]) * 1099511628211ull;
  return h;
}

int vt_comm_same_keys(vt_comm *c, uint64_t key, int *first_other) {
  // Host control, so any comm's (a device comm's collectives take device buffers): each
  // member's key as four 16-bit parts in its own slots of a sum, exact in doubles.
  const int64_t size = c->size;
  double *all = calloc((size_t)size * 4, sizeof *all);
  VT_CHECK(all != NULL, "out of host memory for %d keys", c->size);
  double *k = all + 4 * c->rank;
  for (int j = 0; j < 4; j++) k[j] = (double)(key >> (16 * j) & 0xffff);
  vt_comm_all_reduce_double(c, all, size * 4, VT_REDUCE_SUM);
  int same = 0, other = -1;
  for (int64_t r = 0; r < size; r++) {
    same += !memcmp(all + 4 * r, k, 4 * sizeof *k);
    if (other < 0 && memcmp(all + 4 * r, all, 4 * sizeof *k)) other = (int)r;
  }
  free(all);
  if (first_other) *first_other = other;
  return same;
}

void vt_comm_all_gather(vt_comm *c, float *out, const float *inp, int64_t inp_count) {
  check_buf(c, "all_gather", out, inp_count);
  check_buf(c, "all_gather", inp, inp_count);
  uintptr_t o = (uintptr_t)out, i = (uintptr_t)inp;
  uintptr_t o_end = o + (uintptr_t)(inp_count * c->size) * 4, i_end = i + (uintptr_t)inp_count * 4;
  VT_CHECK(inp_count == 0 || o_end <= i || i_end <= o || inp == out + (int64_t)c->rank * inp_count,
           "comm %s all_gather: inp overlaps out other than as this rank's shard "
           "(out + rank * inp_count)", vt_axis_name(c->axis));
  const double t0 = op_begin(c, VT_COMM_OP_ALL_GATHER, inp_count * c->size * 4);
  c->transport->all_gather(c->state, out, inp, inp_count);
  op_end(t0);
}

void vt_comm_broadcast(vt_comm *c, float *buf, int64_t count, int root) {
  check_buf(c, "broadcast", buf, count);
  VT_CHECK(root >= 0 && root < c->size, "comm %s broadcast: root %d is outside [0, %d)",
           vt_axis_name(c->axis), root, c->size);
  const double t0 = op_begin(c, VT_COMM_OP_BROADCAST, count * 4);
  c->transport->broadcast(c->state, buf, count, root);
  op_end(t0);
}

void vt_comm_send(vt_comm *c, const float *buf, int64_t count, int peer) {
  check_buf(c, "send", buf, count);
  check_peer(c, "send", peer);
  const double t0 = op_begin(c, VT_COMM_OP_SEND, count * 4);
  c->transport->send(c->state, buf, count, peer);
  op_end(t0);
}

void vt_comm_recv(vt_comm *c, float *buf, int64_t count, int peer) {
  check_buf(c, "recv", buf, count);
  check_peer(c, "recv", peer);
  const double t0 = op_begin(c, VT_COMM_OP_RECV, count * 4);
  c->transport->recv(c->state, buf, count, peer);
  op_end(t0);
}

void vt_comm_exchange(vt_comm *c, const vt_comm_p2p *ops, int n) {
  VT_CHECK(n >= 1 && n <= VT_COMM_MAX_P2P, "comm %s exchange: %d messages (1 to %d)",
           vt_axis_name(c->axis), n, VT_COMM_MAX_P2P);
  for (int i = 0; i < n; i++) {
    check_buf(c, "exchange", ops[i].buf, ops[i].count);
    check_peer(c, "exchange", ops[i].peer);
    VT_CHECK(ops[i].channel >= 0 && ops[i].channel < VT_COMM_CHANNELS,
             "comm %s exchange: channel %d (0 to %d)", vt_axis_name(c->axis), ops[i].channel,
             VT_COMM_CHANNELS - 1);
    if (i + 1 < n) tally(c, ops[i].recv ? VT_COMM_OP_RECV : VT_COMM_OP_SEND, ops[i].count * 4);
  }
  const vt_comm_p2p *last = &ops[n - 1];
  const double t0 = op_begin(c, last->recv ? VT_COMM_OP_RECV : VT_COMM_OP_SEND, last->count * 4);
  c->transport->exchange(c->state, ops, n);
  op_end(t0);
}

void vt_comm_wait_sends(vt_comm *c, int key) {
  if (!c->transport->wait_sends) return;
  vt_watchdog_comm_enter(c->axis, (int)VT_COMM_OP_SEND, g_seq[c->axis]);
  const double t0 = vt_seconds();
  c->transport->wait_sends(c->state, key);
  op_end(t0);
}

void vt_comm_sendrecv(vt_comm *c, const float *sendbuf, int64_t send_count, int dst,
                      float *recvbuf, int64_t recv_count, int src) {
  const vt_comm_p2p ops[2] = {{0, (float *)sendbuf, send_count, dst, 0, 0},
                              {1, recvbuf, recv_count, src, 0, 0}};
  vt_comm_exchange(c, ops, 2);
}

void vt_comm_barrier(vt_comm *c) {
  const double t0 = op_begin(c, VT_COMM_OP_BARRIER, 0);
  host_barrier(c);
  op_end(t0);
}

void vt_comm_broadcast_bytes(vt_comm *c, void *buf, int64_t nbytes, int root) {
  VT_CHECK(root >= 0 && root < c->size, "comm %s broadcast_bytes: root %d is outside [0, %d)",
           vt_axis_name(c->axis), root, c->size);
  VT_CHECK(nbytes >= 0 && (buf || nbytes == 0), "comm %s broadcast_bytes: %lld bytes at %p",
           vt_axis_name(c->axis), (long long)nbytes, buf);
  const double t0 = op_begin(c, VT_COMM_OP_BROADCAST, nbytes);
  if (c->host && c->size > 1) g_host->broadcast_bytes(c->host, buf, nbytes, root);
  op_end(t0);
}

void vt_comm_all_reduce_double(vt_comm *c, double *buf, int64_t count, vt_reduce_op op) {
  check_buf(c, "all_reduce_double", buf, count);
  VT_CHECK(op == VT_REDUCE_SUM || op == VT_REDUCE_MAX || op == VT_REDUCE_MIN,
           "comm %s all_reduce_double: unknown op %d", vt_axis_name(c->axis), (int)op);
  const double t0 = op_begin(c, VT_COMM_OP_REDUCE_DOUBLE, count * 8);
  host_all_reduce_double(c, buf, count, op);
  op_end(t0);
}

void vt_comm_all_xor(vt_comm *c, uint32_t *buf, int64_t count) {
  const int64_t size = c->size;
  double *all = calloc((size_t)(size * count), sizeof *all);
  VT_CHECK(all != NULL, "comm %s all_xor: out of memory for %lld values", vt_axis_name(c->axis),
           (long long)(size * count));
  for (int64_t i = 0; i < count; i++) all[i * size + c->rank] = buf[i];
  vt_comm_all_reduce_double(c, all, size * count, VT_REDUCE_SUM);
  for (int64_t i = 0; i < count; i++) {
    buf[i] = 0;
    for (int64_t r = 0; r < size; r++) buf[i] ^= (uint32_t)all[i * size + r];
  }
  free(all);
}

vt_status vt_comm_agree(vt_comm *c, vt_status st, char *err, size_t errlen) {
  // The worst status and the lowest failing member in one reduction: MAX of -rank is -MIN.
  const int size = vt_comm_size(c);
  double v[2] = {st, -(double)(st != VT_OK ? vt_comm_rank(c) : size)};
  vt_comm_all_reduce_double(c, v, 2, VT_REDUCE_MAX);
  const int first = (int)-v[1];
  if (first < size && errlen > 0) {
    err[errlen - 1] = '\0';
    vt_comm_broadcast_bytes(c, err, (int64_t)errlen, first);
  }
  return (vt_status)(int)v[0];
}
