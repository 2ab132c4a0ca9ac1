// comm_tcp.c: a world without MPI. Ranks come from the launcher's environment and meet at rank
// 0's MASTER_ADDR:MASTER_PORT (comm_tcp_launch.c), and talk over TCP sockets: the float
// transport for CPU comms and the host side of every comm (splitting, host control, NCCL unique
// ids, the watchdog's side channel). So `srun --mpi=none`, torchrun or a plain loop of processes
// start a mesh where MPI or PMIx is missing. This file holds the comms: their links, the progress
// engine, the collectives, point to point, splitting; comm_tcp_socket.c the sockets, the world's
// addresses and the side channel; comm_tcp_internal.h what the three share. Must not depend on
// CUDA or the model; comm.c is its only outside caller.
//
// Links: within a comm, member 0 has a socket to every member (the star that host control and
// splitting use) and each member one to each ring neighbour (float collectives run as rings;
// point to point goes to ring neighbours only, which is all a pipeline needs), plus one socket
// per message channel to each ring neighbour. The lower comm rank connects, the higher accepts
// on its listener, so a connect never waits for the other side's program. Every message carries
// a header (what it is and its length) that the receiver checks, so ranks that disagree on a
// collective or a shape stop with a message instead of reading garbage. Only the main thread
// uses the comms' sockets; the side channel's are the watchdog thread's alone.
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_tcp_internal.h"

static const char *msg_name(uint32_t m) {
  switch (m) {
    case MSG_RING: return "a float collective";
    case MSG_P2P: return "a point-to-point message";
    case MSG_DOUBLE: return "a host reduction";
    case MSG_BYTES: return "a broadcast";
    case MSG_TABLE: return "a split";
    default: return "an unknown message";
  }
}

// ---- Comms and the progress engine -----------------------------------------------------------

struct op {
  op *next;
  int recv;
  uint32_t hdr[4];  // magic, message kind, bytes (low, high)
  size_t hdr_done;
  char *buf;
  size_t nbytes, done;
  int complete;
  uint32_t expect;  // receives: the message kind the header must say
  int key;          // deferred sends: vt_comm_wait_sends's key
  op *later;        // deferred sends: the comm's list
};

// Links with queued work, over every comm: a blocked call keeps them all moving, as MPI's
// progress engine does, so a deferred send is never stuck behind a collective on another comm.
static link_t **g_active;
static int g_nactive, g_capactive;

static void activate(link_t *l) {
  for (int i = 0; i < g_nactive; i++)
    if (g_active[i] == l) return;
  if (g_nactive == g_capactive) {
    g_capactive = g_capactive ? 2 * g_capactive : 16;
    g_active = realloc(g_active, (size_t)g_capactive * sizeof *g_active);
    VT_CHECK(g_active, "out of memory for active links");
  }
  g_active[g_nactive++] = l;
}

static void enqueue(link_t *l, op *o) {
  op **head = o->recv ? &l->recvq : &l->sendq, **tail = o->recv ? &l->recvq_tail : &l->sendq_tail;
  o->next = NULL;
  if (*tail)
    (*tail)->next = o;
  else
    *head = o;
  *tail = o;
  activate(l);
}

static void make_op(op *o, int recv, uint32_t kind, void *buf, size_t nbytes) {
  memset(o, 0, sizeof *o);
  o->recv = recv, o->buf = buf, o->nbytes = nbytes;
  o->hdr[0] = MAGIC, o->hdr[1] = kind, o->expect = kind;
  o->hdr[2] = (uint32_t)nbytes, o->hdr[3] = (uint32_t)((uint64_t)nbytes >> 32);
}

static VT_NORETURN void lost(const link_t *l, const char *why) {
  const tcp_comm *c = l->comm;
  const int w = c->world[l->peer];
  vt_fatal(__FILE__, __LINE__,
           "lost the connection to world rank %d (host %s) on the %s comm (%s): that rank "
           "ended or died; its own log says why. Ending this rank too", w, vt_tcp_host_of(w),
           c->axis, why);
}

// A received header must announce the message this rank waits for.
static void check_header(const link_t *l, const op *o) {
  const tcp_comm *c = l->comm;
  const int w = c->world[l->peer];
  VT_CHECK(o->hdr[0] == MAGIC, "the %s comm: world rank %d (host %s) sent bytes that are not a "
           "vit3d message", c->axis, w, vt_tcp_host_of(w));
  const uint64_t got = (uint64_t)o->hdr[2] | ((uint64_t)o->hdr[3] << 32);
  VT_CHECK(o->hdr[1] == o->expect && got == o->nbytes,
           "the %s comm: world rank %d (host %s) sent %s of %llu bytes where this rank expected "
           "%s of %llu bytes: the ranks disagree on a shape or on the order of operations",
           c->axis, w, vt_tcp_host_of(w), msg_name(o->hdr[1]), (unsigned long long)got,
           msg_name(o->expect), (unsigned long long)o->nbytes);
}

// Moves the head of l's receive queue (in) or send queue as far as the socket takes it: the
// header, then the payload. 1 if anything moved.
static int advance(link_t *l, int in) {
  op **head = in ? &l->recvq : &l->sendq, **tail = in ? &l->recvq_tail : &l->sendq_tail;
  int moved = 0;
  while (*head) {
    op *o = *head;
    const int in_hdr = o->hdr_done < sizeof o->hdr;
    char *at = in_hdr ? (char *)o->hdr + o->hdr_done : o->buf + o->done;
    const size_t left = in_hdr ? sizeof o->hdr - o->hdr_done : o->nbytes - o->done;
    const ssize_t k =
        in ? recv(l->fd, at, left, MSG_DONTWAIT)
           : send(l->fd, at, left,
                  MSG_NOSIGNAL | MSG_DONTWAIT | (in_hdr && o->nbytes ? MSG_MORE : 0));
    if (k == 0 && in) lost(l, "closed");
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return moved;
      lost(l, strerror(errno));
    }
    moved = 1;
    if (in_hdr) {
      o->hdr_done += (size_t)k;
      if (in && o->hdr_done == sizeof o->hdr) check_header(l, o);
    } else {
      o->done += (size_t)k;
    }
    if (o->hdr_done == sizeof o->hdr && o->done == o->nbytes) {
      o->complete = 1;
      *head = o->next;
      if (!*head) *tail = NULL;
    }
  }
  return moved;
}

// Runs every active link until each of the n ops is complete.
static void progress(op **ops, int n) {
  struct pollfd *pf = NULL;
  int cap = 0;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++) left += !ops[i]->complete;
    // Drop idle links, try the rest without waiting, then wait on those still blocked.
    int k = 0;
    for (int i = 0; i < g_nactive; i++)
      if (g_active[i]->sendq || g_active[i]->recvq) g_active[k++] = g_active[i];
    g_nactive = k;
    if (!left) break;
    int moved = 0;
    for (int i = 0; i < g_nactive; i++) moved |= advance(g_active[i], 0) | advance(g_active[i], 1);
    if (moved) continue;
    if (cap < g_nactive) {
      cap = g_nactive;
      pf = realloc(pf, (size_t)cap * sizeof *pf);
      VT_CHECK(pf, "out of memory for poll");
    }
    for (int i = 0; i < g_nactive; i++) {
      pf[i].fd = g_active[i]->fd;
      const link_t *l = g_active[i];
      pf[i].events = (short)((l->sendq ? POLLOUT : 0) | (l->recvq ? POLLIN : 0));
      pf[i].revents = 0;
    }
    if (poll(pf, (nfds_t)g_nactive, -1) < 0 && errno != EINTR)
      vt_fatal(__FILE__, __LINE__, "poll: %s", strerror(errno));
  }
  free(pf);
}

// The world's end (vt_comm_tcp_finalize): no link is active any more.
void vt_tcp_active_free(void) { free(g_active), g_active = NULL, g_nactive = g_capactive = 0; }

// ---- Building a comm's links -----------------------------------------------------------------

static int ring_neighbour(const tcp_comm *c, int q) {
  const int n = c->size, r = c->rank;
  return n > 1 && (q == (r + 1) % n || q == (r + n - 1) % n);
}

static int needs_coll(const tcp_comm *c, int q) {
  return q != c->rank && (c->rank == 0 || q == 0 || ring_neighbour(c, q));
}

void vt_tcp_attach(const tcp_comm *c, link_t *l, int q, int fd) {
  l->fd = fd, l->peer = q, l->comm = c;
}

// Opens the comm's links (coll star and ring, channel ring); pre: world links already set.
void vt_tcp_open_links(tcp_comm *c) {
  const int n = c->size, r = c->rank;
  // Connect first (never waits on the other program), then accept.
  for (int pass = 0; pass < 2; pass++)
    for (int q = 0; q < n; q++) {
      if ((pass == 0) != (q > r)) continue;
      if (needs_coll(c, q) && c->coll[q].fd < 0)
        vt_tcp_attach(c, &c->coll[q],
                      q, pass == 0 ? vt_tcp_dial(c->world[q], c->seq, KIND_COLL, c->axis)
                                   : vt_tcp_claim(c->seq, c->world[q], KIND_COLL, c->axis));
      if (!ring_neighbour(c, q)) continue;
      for (int ch = 0; ch < VT_COMM_CHANNELS; ch++)
        vt_tcp_attach(c, &c->chan[ch][q], q,
                      pass == 0 ? vt_tcp_dial(c->world[q], c->seq, KIND_CH0 + ch, c->axis)
                                : vt_tcp_claim(c->seq, c->world[q], KIND_CH0 + ch, c->axis));
    }
}

tcp_comm *vt_tcp_new_comm(int size, int rank, int seq, const char *axis) {
  tcp_comm *c = calloc(1, sizeof *c);
  VT_CHECK(c, "out of memory for a comm");
  c->size = size, c->rank = rank, c->seq = seq, c->axis = axis;
  c->world = calloc((size_t)size, sizeof *c->world);
  c->coll = calloc((size_t)size, sizeof *c->coll);
  VT_CHECK(c->world && c->coll, "out of memory for a comm of %d", size);
  for (int ch = 0; ch < VT_COMM_CHANNELS; ch++) {
    c->chan[ch] = calloc((size_t)size, sizeof *c->chan[ch]);
    VT_CHECK(c->chan[ch], "out of memory for a comm of %d", size);
    for (int q = 0; q < size; q++) c->chan[ch][q].fd = -1;
  }
  for (int q = 0; q < size; q++) c->coll[q].fd = -1;
  return c;
}

// ---- Messages on a comm ----------------------------------------------------------------------

static link_t *coll_link(tcp_comm *c, int q) {
  VT_CHECK(c->coll[q].fd >= 0, "the %s comm: no link from rank %d to rank %d", c->axis, c->rank,
           q);
  return &c->coll[q];
}

// One send and/or one receive on the coll links, done together.
void vt_tcp_duplex(tcp_comm *c, uint32_t kind, int to, const void *sbuf, size_t sn, int from,
                   void *rbuf, size_t rn) {
  op s, r, *ops[2];
  int n = 0;
  if (to >= 0) {
    make_op(&s, 0, kind, (void *)sbuf, sn);
    enqueue(coll_link(c, to), &s);
    ops[n++] = &s;
  }
  if (from >= 0) {
    make_op(&r, 1, kind, rbuf, rn);
    enqueue(coll_link(c, from), &r);
    ops[n++] = &r;
  }
  progress(ops, n);
}

static float *scratch(tcp_comm *c, size_t n) {
  if (c->scratch_n < n) {
    free(c->scratch);
    c->scratch = malloc(n * sizeof *c->scratch);
    VT_CHECK(c->scratch, "out of memory for %zu floats of comm scratch", n);
    c->scratch_n = n;
  }
  return c->scratch;
}

static int64_t chunk_at(int64_t count, int n, int c) { return count * c / n; }

// Ring reduce-scatter in place over buf's n chunks (chunk c = [count c / n, count (c+1) / n)):
// afterwards chunk r of member r holds the sum, added in the fixed order of the ring starting
// after r (the same bits on every run).
static void ring_reduce_scatter(tcp_comm *c, float *buf, int64_t count) {
  const int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
  int64_t most = 0;
  for (int k = 0; k < n; k++) {
    const int64_t len = chunk_at(count, n, k + 1) - chunk_at(count, n, k);
    most = len > most ? len : most;
  }
  float *tmp = scratch(c, (size_t)most);
  for (int s = 0; s < n - 1; s++) {
    const int cs = ((r - s - 1) % n + n) % n, cr = ((r - s - 2) % n + n) % n;
    const int64_t s0 = chunk_at(count, n, cs), s1 = chunk_at(count, n, cs + 1);
    const int64_t r0 = chunk_at(count, n, cr), r1 = chunk_at(count, n, cr + 1);
    vt_tcp_duplex(c, MSG_RING, right, buf + s0, (size_t)(s1 - s0) * 4, left, tmp,
                  (size_t)(r1 - r0) * 4);
    for (int64_t i = 0; i < r1 - r0; i++) buf[r0 + i] = tmp[i] + buf[r0 + i];
  }
}

// Ring all-gather in place: member q's chunk q goes round to everyone.
static void ring_all_gather(tcp_comm *c, float *buf, int64_t count) {
  const int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
  for (int s = 0; s < n - 1; s++) {
    const int cs = ((r - s) % n + n) % n, cr = ((r - s - 1) % n + n) % n;
    const int64_t s0 = chunk_at(count, n, cs), s1 = chunk_at(count, n, cs + 1);
    const int64_t r0 = chunk_at(count, n, cr), r1 = chunk_at(count, n, cr + 1);
    vt_tcp_duplex(c, MSG_RING, right, buf + s0, (size_t)(s1 - s0) * 4, left, buf + r0,
                  (size_t)(r1 - r0) * 4);
  }
}

// Bytes from root to every member down the ring, in 4 MiB pieces so that each member forwards
// one piece while the next arrives.
static void ring_broadcast(tcp_comm *c, void *buf, size_t nbytes, int root, uint32_t kind) {
  const int n = c->size, r = c->rank;
  if (n == 1) return;
  const int pos = (r - root + n) % n;
  const size_t piece = (size_t)4 << 20;
  const size_t pieces = nbytes ? (nbytes + piece - 1) / piece : 1;
  char *p = buf;
  for (size_t k = 0; k <= pieces; k++) {
    const int take = pos > 0 && k < pieces, give = pos < n - 1 && k > 0;
    const size_t tk = k * piece, gk = (k - 1) * piece;
    vt_tcp_duplex(c, kind, give ? (r + 1) % n : -1, give ? p + gk : NULL,
                  give ? (nbytes - gk < piece ? nbytes - gk : piece) : 0,
                  take ? (r + n - 1) % n : -1, take ? p + tk : NULL,
                  take ? (nbytes - tk < piece ? nbytes - tk : piece) : 0);
  }
}

// ---- The float transport ---------------------------------------------------------------------

static void tcp_all_reduce(void *s, float *buf, int64_t count) {
  tcp_comm *c = s;
  if (c->size == 1) return;
  ring_reduce_scatter(c, buf, count);
  ring_all_gather(c, buf, count);
}

// The ring's reduce-scatter, then the summed chunks carried round the ring to root (the links
// are the ring's): the member p places after root (root p = n) sends the chunks of the members
// p, p - 1, ..., 1 places after root, one a step, having received all but its own from its left.
// Half an all-reduce's bytes, in as many steps. At once (nothing is left for a wait); the other
// members' buf keeps partial sums.
static void tcp_reduce(void *s, float *buf, int64_t count, int root) {
  tcp_comm *c = s;
  const int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
  if (n == 1) return;
  ring_reduce_scatter(c, buf, count);
  const int p = r == root ? n : (r - root + n) % n;
  for (int step = 1; step < n && step <= p; step++) {
    const int give = r != root, take = step < p;  // sends chunk p - step + 1, gets p - step
    const int gq = (root + p - step + 1) % n, tq = (root + p - step) % n;  // (their members)
    const int64_t g0 = chunk_at(count, n, gq), g1 = chunk_at(count, n, gq + 1);
    const int64_t t0 = chunk_at(count, n, tq), t1 = chunk_at(count, n, tq + 1);
    vt_tcp_duplex(c, MSG_RING, give ? right : -1, give ? buf + g0 : NULL,
                  give ? (size_t)(g1 - g0) * 4 : 0, take ? left : -1, take ? buf + t0 : NULL,
                  take ? (size_t)(t1 - t0) * 4 : 0);
  }
}

static void tcp_reduce_scatter(void *s, float *out, const float *inp, int64_t out_count) {
  tcp_comm *c = s;
  const int n = c->size;
  if (out == inp + (int64_t)c->rank * out_count) {  // in place: the ring's chunks are the shards
    if (n > 1) ring_reduce_scatter(c, (float *)inp, out_count * n);
    return;
  }
  // Through a copy, so that the ring's chunks are the comm's shards.
  float *all = malloc((size_t)(out_count * n) * sizeof *all + 1);
  VT_CHECK(all, "out of memory for a reduce-scatter of %lld floats", (long long)(out_count * n));
  memcpy(all, inp, (size_t)(out_count * n) * sizeof *all);
  if (n > 1) ring_reduce_scatter(c, all, out_count * n);
  memcpy(out, all + (int64_t)c->rank * out_count, (size_t)out_count * sizeof *out);
  free(all);
}

static void tcp_all_gather(void *s, float *out, const float *inp, int64_t inp_count) {
  tcp_comm *c = s;
  float *mine = out + (int64_t)c->rank * inp_count;
  if (mine != inp) memmove(mine, inp, (size_t)inp_count * sizeof *out);
  if (c->size > 1) ring_all_gather(c, out, inp_count * c->size);
}

static void tcp_broadcast(void *s, float *buf, int64_t count, int root) {
  ring_broadcast(s, buf, (size_t)count * sizeof *buf, root, MSG_BYTES);
}

static link_t *p2p_link(tcp_comm *c, int peer, int channel) {
  VT_CHECK(c->chan[channel][peer].fd >= 0,
           "the %s comm: rank %d sends to or receives from rank %d, which is not its ring "
           "neighbour; over TCP a comm links each rank to its ring neighbours only", c->axis,
           c->rank, peer);
  return &c->chan[channel][peer];
}

static void tcp_exchange(void *s, const vt_comm_p2p *ops, int n) {
  tcp_comm *c = s;
  op now[VT_COMM_MAX_P2P], *wait[VT_COMM_MAX_P2P];
  int nw = 0;
  for (int i = 0; i < n; i++) {
    link_t *l = p2p_link(c, ops[i].peer, ops[i].channel);
    const size_t nbytes = (size_t)ops[i].count * sizeof(float);
    if (!ops[i].recv && ops[i].defer > 0) {
      op *o = malloc(sizeof *o);
      VT_CHECK(o, "out of memory for a deferred send");
      make_op(o, 0, MSG_P2P, ops[i].buf, nbytes);
      o->key = ops[i].defer;
      o->later = c->deferred, c->deferred = o;
      enqueue(l, o);
      continue;
    }
    make_op(&now[nw], ops[i].recv, MSG_P2P, ops[i].buf, nbytes);
    enqueue(l, &now[nw]);
    wait[nw] = &now[nw];
    nw++;
  }
  progress(wait, nw);
}

static void tcp_send(void *s, const float *buf, int64_t count, int peer) {
  const vt_comm_p2p op1 = {0, (float *)buf, count, peer, 0, 0};
  tcp_exchange(s, &op1, 1);
}

static void tcp_recv(void *s, float *buf, int64_t count, int peer) {
  const vt_comm_p2p op1 = {1, buf, count, peer, 0, 0};
  tcp_exchange(s, &op1, 1);
}

static void tcp_wait_sends(void *s, int key) {
  tcp_comm *c = s;
  op *wait[64];
  for (;;) {
    int n = 0;
    for (op *o = c->deferred; o && n < 64; o = o->later)
      if (key == 0 || o->key == key) wait[n++] = o;
    if (!n) break;
    progress(wait, n);
    op **pp = &c->deferred;
    while (*pp) {
      op *o = *pp;
      if (o->complete) {
        *pp = o->later;
        free(o);
      } else {
        pp = &o->later;
      }
    }
  }
}

static void close_links(link_t *ls, int n) {
  for (int q = 0; q < n; q++)
    if (ls[q].fd >= 0) close(ls[q].fd);
  free(ls);
}

static void tcp_free(void *s) {
  tcp_comm *c = s;
  if (!c) return;
  tcp_wait_sends(c, 0);
  for (int q = 0; q < c->size; q++)
    VT_CHECK(!c->coll[q].sendq && !c->coll[q].recvq,
             "the %s comm freed with messages in flight", c->axis);
  close_links(c->coll, c->size);
  for (int ch = 0; ch < VT_COMM_CHANNELS; ch++) close_links(c->chan[ch], c->size);
  free(c->world);
  free(c->scratch);
  free(c);
}

const vt_comm_transport vt_comm_tcp_transport = {
    "tcp",    tcp_all_reduce, tcp_reduce_scatter, tcp_all_gather, tcp_broadcast,
    tcp_send, tcp_recv,       tcp_exchange,       tcp_free,       NULL,
    NULL,     tcp_wait_sends, tcp_reduce};

// ---- Host control: through member 0 ---------------------------------------------------------

// Gathers each member's nbytes at member 0 (all, in member order) and sends the whole back.
static void star_all_gather(tcp_comm *c, const void *mine, void *all, size_t nbytes,
                            uint32_t kind) {
  char *a = all;
  memcpy(a + (size_t)c->rank * nbytes, mine, nbytes);
  if (c->size == 1) return;
  if (c->rank != 0) {
    vt_tcp_duplex(c, kind, 0, mine, nbytes, -1, NULL, 0);
    vt_tcp_duplex(c, kind, -1, NULL, 0, 0, all, nbytes * (size_t)c->size);
    return;
  }
  for (int q = 1; q < c->size; q++)
    vt_tcp_duplex(c, kind, -1, NULL, 0, q, a + (size_t)q * nbytes, nbytes);
  for (int q = 1; q < c->size; q++)
    vt_tcp_duplex(c, kind, q, all, nbytes * (size_t)c->size, -1, NULL, 0);
}

static void tcp_all_reduce_double(void *s, double *buf, int64_t count, vt_reduce_op opr) {
  tcp_comm *c = s;
  const int n = c->size;
  if (n == 1) return;
  const size_t nb = (size_t)count * sizeof *buf;
  if (c->rank != 0) {
    vt_tcp_duplex(c, MSG_DOUBLE, 0, buf, nb, -1, NULL, 0);
    vt_tcp_duplex(c, MSG_DOUBLE, -1, NULL, 0, 0, buf, nb);
    return;
  }
  double *in = malloc(nb + 1);
  VT_CHECK(in, "out of memory for a host reduction of %lld", (long long)count);
  for (int q = 1; q < n; q++) {  // in member order: the same bits whoever arrives first
    vt_tcp_duplex(c, MSG_DOUBLE, -1, NULL, 0, q, in, nb);
    for (int64_t i = 0; i < count; i++)
      buf[i] = opr == VT_REDUCE_SUM   ? buf[i] + in[i]
               : opr == VT_REDUCE_MAX ? (in[i] > buf[i] ? in[i] : buf[i])
                                      : (in[i] < buf[i] ? in[i] : buf[i]);
  }
  free(in);
  for (int q = 1; q < n; q++) vt_tcp_duplex(c, MSG_DOUBLE, q, buf, nb, -1, NULL, 0);
}

static void tcp_barrier(void *s) { tcp_all_reduce_double(s, NULL, 0, VT_REDUCE_SUM); }

static void tcp_broadcast_bytes(void *s, void *buf, int64_t nbytes, int root) {
  ring_broadcast(s, buf, (size_t)nbytes, root, MSG_BYTES);
}

static void *tcp_split(void *s, int color, int key, const char *name, int *size, int *rank) {
  tcp_comm *parent = s;
  const int n = parent->size;
  int32_t mine[2] = {color, key}, *all = malloc((size_t)n * sizeof mine);
  VT_CHECK(all, "out of memory for a split of %d", n);
  star_all_gather(parent, mine, all, sizeof mine, MSG_TABLE);
  int m = 0, me = 0;
  int *members = malloc((size_t)n * sizeof *members);
  VT_CHECK(members, "out of memory for a split of %d", n);
  // Members with our color, ordered by key and then by parent rank (MPI_Comm_split's rule).
  for (int q = 0; q < n; q++) {
    if (all[2 * q] != color) continue;
    int at = m++;
    while (at > 0 && all[2 * members[at - 1] + 1] > all[2 * q + 1]) {
      members[at] = members[at - 1];
      at--;
    }
    members[at] = q;
  }
  const int seq = ++vt_tcp_world.seq;
  tcp_comm *c = vt_tcp_new_comm(m, 0, seq, name);
  for (int i = 0; i < m; i++) {
    c->world[i] = parent->world[members[i]];
    if (members[i] == parent->rank) me = i;
  }
  c->rank = me;
  free(all);
  free(members);
  vt_tcp_open_links(c);
  *size = c->size, *rank = c->rank;
  return c;
}

const vt_comm_host vt_comm_tcp_host = {
    "tcp",         &vt_comm_tcp_transport, tcp_split,     tcp_barrier,   tcp_all_reduce_double,
    tcp_broadcast_bytes, tcp_free,         vt_tcp_side_open, vt_tcp_side_send,
    vt_tcp_side_poll,    vt_tcp_side_free, vt_tcp_side_abort};
