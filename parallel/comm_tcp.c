// comm_tcp.c: a world without MPI. Ranks come from the launcher's environment (torchrun's
// RANK/WORLD_SIZE, Open MPI's or PMI's variables, or a Slurm step's), meet at rank 0's
// MASTER_ADDR:MASTER_PORT, and talk over TCP sockets: the float transport for CPU comms and the
// host side of every comm (splitting, host control, NCCL unique ids, the watchdog's side
// channel). So `srun --mpi=none`, torchrun or a plain loop of processes start a mesh where MPI or
// PMIx is missing. Must not depend on CUDA or the model; comm.c is its only caller.
//
// Links: within a comm, member 0 has a socket to every member (the star that host control and
// splitting use) and each member one to each ring neighbour (float collectives run as rings;
// point to point goes to ring neighbours only, which is all a pipeline needs), plus one socket
// per message channel to each ring neighbour. The lower comm rank connects, the higher accepts
// on its listener, so a connect never waits for the other side's program. Every message carries
// a header (what it is and its length) that the receiver checks, so ranks that disagree on a
// collective or a shape stop with a message instead of reading garbage. Only the main thread
// uses the comms' sockets; the side channel's are the watchdog thread's alone.
#define _GNU_SOURCE  // accept4
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "vt_rng.h"

enum { MAGIC = 0x76743364, VERSION = 1 };  // "vt3d"
enum { KIND_HELLO = 0, KIND_COLL = 1, KIND_CH0 = 2, KIND_SIDE = 2 + VT_COMM_CHANNELS };
enum { MSG_RING = 1, MSG_P2P, MSG_DOUBLE, MSG_BYTES, MSG_TABLE };
enum { HOST_LEN = 64 };

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

// ---- The world: addresses, the listener, connections waiting to be claimed -------------------

typedef struct {
  struct sockaddr_storage addr;  // where its listener is
  socklen_t addrlen;
  char host[HOST_LEN];
} peer_addr;

typedef struct {
  int fd, seq, from, kind;
} pending_conn;

static struct {
  int listen_fd;
  int size, rank;
  peer_addr *table;  // per world rank
  int seq;           // comms created so far (every rank creates them in the same order)
  pending_conn *stash;
  int nstash, capstash;
  double timeout_s;  // for connecting and accepting
} g = {-1, 0, 0, NULL, 0, NULL, 0, 0, 300.0};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *host_of(int world_rank) {
  return g.table && world_rank >= 0 && world_rank < g.size ? g.table[world_rank].host : "?";
}

// ---- Blocking helpers for start-up (with a deadline) -----------------------------------------

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  VT_CHECK(fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl O_NONBLOCK: %s",
           strerror(errno));
}

// Waits until fd is ready for events or the deadline passes (0: it passed).
static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    const double left = deadline - now_s();
    if (left <= 0) return 0;
    struct pollfd p = {fd, events, 0};
    const int rc = poll(&p, 1, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return 0;
  }
}

// Reads or writes all of n bytes on a non-blocking fd before the deadline. Returns 0 on
// success, else -1 (closed, error or time).
static int io_all(int fd, void *buf, size_t n, int writing, double deadline) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k > 0) {
      p += k, n -= (size_t)k;
      continue;
    }
    if (k == 0 && !writing) return -1;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (!wait_fd(fd, writing ? POLLOUT : POLLIN, deadline)) return -1;
  }
  return 0;
}

typedef struct {
  uint32_t magic, version, kind, seq;
  int32_t from, size, port;
  uint32_t run;  // the hello's run key (vt_comm_tcp_env.run_key); 0 in other handshakes
  char host[HOST_LEN];
} handshake;

static int open_listener(int family, int port) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  VT_CHECK(fd >= 0, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage a;
  memset(&a, 0, sizeof a);
  socklen_t len;
  if (family == AF_INET6) {
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&a;
    s->sin6_family = AF_INET6, s->sin6_addr = in6addr_any, s->sin6_port = htons((uint16_t)port);
    len = sizeof *s;
  } else {
    struct sockaddr_in *s = (struct sockaddr_in *)&a;
    s->sin_family = AF_INET, s->sin_addr.s_addr = htonl(INADDR_ANY);
    s->sin_port = htons((uint16_t)port);
    len = sizeof *s;
  }
  if (bind(fd, (struct sockaddr *)&a, len) != 0) {
    const int e = errno;
    close(fd);
    return -e;
  }
  VT_CHECK(listen(fd, SOMAXCONN) == 0, "listen: %s", strerror(errno));
  set_nonblocking(fd);
  return fd;
}

static int port_of(const struct sockaddr_storage *a) {
  return a->ss_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)a)->sin6_port)
                                  : ntohs(((const struct sockaddr_in *)a)->sin_port);
}

static void set_port(struct sockaddr_storage *a, int port) {
  if (a->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
}

static void addr_text(const struct sockaddr_storage *a, char *out, size_t n) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a->ss_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, ip, sizeof ip);
  else
    inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, ip, sizeof ip);
  snprintf(out, n, "%s:%d", ip, port_of(a));
}

// Connects to a, retrying while nobody listens there yet, until the deadline (a host that does
// not answer at all is given up at the deadline too). Returns the connected, non-blocking fd or
// -errno.
static int connect_to(const struct sockaddr_storage *a, socklen_t len, double deadline) {
  int last = ETIMEDOUT;
  double pause = 0.01;
  for (;;) {
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    VT_CHECK(fd >= 0, "socket: %s", strerror(errno));
    int rc = connect(fd, (const struct sockaddr *)a, len);
    if (rc != 0 && errno == EINPROGRESS) {
      int e = ETIMEDOUT;
      socklen_t elen = sizeof e;
      if (wait_fd(fd, POLLOUT, deadline) &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0)
        e = errno;
      rc = e ? -1 : 0;
      errno = e;
    }
    if (rc == 0) {
      set_nodelay(fd);
      return fd;
    }
    last = errno;
    close(fd);
    if (last != ECONNREFUSED && last != ETIMEDOUT && last != EINTR && last != ENETUNREACH &&
        last != EHOSTUNREACH && last != ECONNRESET && last != EAGAIN)
      return -last;
    if (now_s() + pause > deadline) return -last;
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, NULL);
    pause = pause < 0.5 ? 2 * pause : 1.0;
  }
}

// Accepts one connection and reads its handshake; 0 when the deadline passed first.
static int accept_one(handshake *h, int *fd_out, double deadline) {
  for (;;) {
    if (!wait_fd(g.listen_fd, POLLIN, deadline)) return 0;
    int fd = accept4(g.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;  // EAGAIN, EINTR, or a connection reset before we took it
    set_nodelay(fd);
    // A vit3d rank sends its handshake right after connecting; anything else is dropped.
    if (io_all(fd, h, sizeof *h, 0, now_s() + 30.0) != 0 || h->magic != MAGIC) {
      close(fd);
      continue;
    }
    VT_CHECK(h->version == VERSION,
             "a process connected with comm protocol version %u, this vit3d speaks %u: every "
             "rank must run the same vit3d build", h->version, VERSION);
    *fd_out = fd;
    return 1;
  }
}

// The connection from world rank `from` for comm seq and link kind: from the stash, or accepted
// now (others that arrive first are stashed for their own comm).
static int claim(int seq, int from, int kind, const char *axis) {
  const double deadline = now_s() + g.timeout_s;
  for (;;) {
    for (int i = 0; i < g.nstash; i++) {
      pending_conn *p = &g.stash[i];
      if (p->seq == seq && p->from == from && p->kind == kind) {
        const int fd = p->fd;
        *p = g.stash[--g.nstash];
        return fd;
      }
    }
    handshake h;
    int fd = -1;
    VT_CHECK(accept_one(&h, &fd, deadline),
             "the %s comm: world rank %d (host %s) did not connect within %.0f s; it may have "
             "died or be stuck (see its log); VT_CONNECT_TIMEOUT sets the limit", axis, from,
             host_of(from), g.timeout_s);
    if (g.nstash == g.capstash) {
      g.capstash = g.capstash ? 2 * g.capstash : 16;
      g.stash = realloc(g.stash, (size_t)g.capstash * sizeof *g.stash);
      VT_CHECK(g.stash, "out of memory for pending connections");
    }
    g.stash[g.nstash++] = (pending_conn){fd, (int)h.seq, h.from, (int)h.kind};
  }
}

static int dial(int to, int seq, int kind, const char *axis) {
  const peer_addr *a = &g.table[to];
  int fd = connect_to(&a->addr, a->addrlen, now_s() + g.timeout_s);
  char where[96];
  addr_text(&a->addr, where, sizeof where);
  VT_CHECK(fd >= 0, "the %s comm: cannot connect to world rank %d at %s (host %s): %s", axis, to,
           where, a->host, strerror(-fd));
  handshake h = {MAGIC, VERSION, (uint32_t)kind, (uint32_t)seq, g.rank, g.size, 0, 0, ""};
  VT_CHECK(io_all(fd, &h, sizeof h, 1, now_s() + 30.0) == 0,
           "the %s comm: world rank %d (host %s) closed the connection at once", axis, to,
           a->host);
  return fd;
}

// ---- Comms and the progress engine -----------------------------------------------------------

typedef struct op op;
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

typedef struct tcp_comm tcp_comm;

typedef struct {
  int fd;
  int peer;              // comm rank
  const tcp_comm *comm;  // for messages
  op *sendq, *sendq_tail, *recvq, *recvq_tail;
} link_t;

struct tcp_comm {
  int size, rank;
  int *world;  // world rank of each member
  int seq;
  const char *axis;       // for messages
  link_t *coll;           // per member (fd -1 where there is no link)
  link_t *chan[VT_COMM_CHANNELS];  // per member, ring neighbours only
  op *deferred;           // deferred sends not yet waited for
  float *scratch;
  size_t scratch_n;
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
           "ended or died; its own log says why. Ending this rank too", w, host_of(w), c->axis,
           why);
}

// A received header must announce the message this rank waits for.
static void check_header(const link_t *l, const op *o) {
  const tcp_comm *c = l->comm;
  const int w = c->world[l->peer];
  VT_CHECK(o->hdr[0] == MAGIC, "the %s comm: world rank %d (host %s) sent bytes that are not a "
           "vit3d message", c->axis, w, host_of(w));
  const uint64_t got = (uint64_t)o->hdr[2] | ((uint64_t)o->hdr[3] << 32);
  VT_CHECK(o->hdr[1] == o->expect && got == o->nbytes,
           "the %s comm: world rank %d (host %s) sent %s of %llu bytes where this rank expected "
           "%s of %llu bytes: the ranks disagree on a shape or on the order of operations",
           c->axis, w, host_of(w), msg_name(o->hdr[1]), (unsigned long long)got,
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

// ---- Building a comm's links -----------------------------------------------------------------

static int ring_neighbour(const tcp_comm *c, int q) {
  const int n = c->size, r = c->rank;
  return n > 1 && (q == (r + 1) % n || q == (r + n - 1) % n);
}

static int needs_coll(const tcp_comm *c, int q) {
  return q != c->rank && (c->rank == 0 || q == 0 || ring_neighbour(c, q));
}

static void attach(const tcp_comm *c, link_t *l, int q, int fd) {
  l->fd = fd, l->peer = q, l->comm = c;
}

// Opens the comm's links (coll star and ring, channel ring); pre: world links already set.
static void open_links(tcp_comm *c) {
  const int n = c->size, r = c->rank;
  // Connect first (never waits on the other program), then accept.
  for (int pass = 0; pass < 2; pass++)
    for (int q = 0; q < n; q++) {
      if ((pass == 0) != (q > r)) continue;
      if (needs_coll(c, q) && c->coll[q].fd < 0)
        attach(c, &c->coll[q],
               q, pass == 0 ? dial(c->world[q], c->seq, KIND_COLL, c->axis)
                            : claim(c->seq, c->world[q], KIND_COLL, c->axis));
      if (!ring_neighbour(c, q)) continue;
      for (int ch = 0; ch < VT_COMM_CHANNELS; ch++)
        attach(c, &c->chan[ch][q], q,
               pass == 0 ? dial(c->world[q], c->seq, KIND_CH0 + ch, c->axis)
                         : claim(c->seq, c->world[q], KIND_CH0 + ch, c->axis));
    }
}

static tcp_comm *new_comm(int size, int rank, int seq, const char *axis) {
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
static void duplex(tcp_comm *c, uint32_t kind, int to, const void *sbuf, size_t sn, int from,
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
    duplex(c, MSG_RING, right, buf + s0, (size_t)(s1 - s0) * 4, left, tmp, (size_t)(r1 - r0) * 4);
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
    duplex(c, MSG_RING, right, buf + s0, (size_t)(s1 - s0) * 4, left, buf + r0,
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
    duplex(c, kind, give ? (r + 1) % n : -1, give ? p + gk : NULL,
           give ? (nbytes - gk < piece ? nbytes - gk : piece) : 0, take ? (r + n - 1) % n : -1,
           take ? p + tk : NULL, take ? (nbytes - tk < piece ? nbytes - tk : piece) : 0);
  }
}

// ---- The float transport ---------------------------------------------------------------------

static void tcp_all_reduce(void *s, float *buf, int64_t count) {
  tcp_comm *c = s;
  if (c->size == 1) return;
  ring_reduce_scatter(c, buf, count);
  ring_all_gather(c, buf, count);
}

static void tcp_reduce_scatter(void *s, float *out, const float *inp, int64_t out_count) {
  tcp_comm *c = s;
  const int n = c->size;
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
    NULL,     tcp_wait_sends};

// ---- Host control: through member 0 ---------------------------------------------------------

// Gathers each member's nbytes at member 0 (all, in member order) and sends the whole back.
static void star_all_gather(tcp_comm *c, const void *mine, void *all, size_t nbytes,
                            uint32_t kind) {
  char *a = all;
  memcpy(a + (size_t)c->rank * nbytes, mine, nbytes);
  if (c->size == 1) return;
  if (c->rank != 0) {
    duplex(c, kind, 0, mine, nbytes, -1, NULL, 0);
    duplex(c, kind, -1, NULL, 0, 0, all, nbytes * (size_t)c->size);
    return;
  }
  for (int q = 1; q < c->size; q++) duplex(c, kind, -1, NULL, 0, q, a + (size_t)q * nbytes, nbytes);
  for (int q = 1; q < c->size; q++)
    duplex(c, kind, q, all, nbytes * (size_t)c->size, -1, NULL, 0);
}

static void tcp_all_reduce_double(void *s, double *buf, int64_t count, vt_reduce_op opr) {
  tcp_comm *c = s;
  const int n = c->size;
  if (n == 1) return;
  const size_t nb = (size_t)count * sizeof *buf;
  if (c->rank != 0) {
    duplex(c, MSG_DOUBLE, 0, buf, nb, -1, NULL, 0);
    duplex(c, MSG_DOUBLE, -1, NULL, 0, 0, buf, nb);
    return;
  }
  double *in = malloc(nb + 1);
  VT_CHECK(in, "out of memory for a host reduction of %lld", (long long)count);
  for (int q = 1; q < n; q++) {  // in member order: the same bits whoever arrives first
    duplex(c, MSG_DOUBLE, -1, NULL, 0, q, in, nb);
    for (int64_t i = 0; i < count; i++)
      buf[i] = opr == VT_REDUCE_SUM   ? buf[i] + in[i]
               : opr == VT_REDUCE_MAX ? (in[i] > buf[i] ? in[i] : buf[i])
                                      : (in[i] < buf[i] ? in[i] : buf[i]);
  }
  free(in);
  for (int q = 1; q < n; q++) duplex(c, MSG_DOUBLE, q, buf, nb, -1, NULL, 0);
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
  const int seq = ++g.seq;
  tcp_comm *c = new_comm(m, 0, seq, name);
  for (int i = 0; i < m; i++) {
    c->world[i] = parent->world[members[i]];
    if (members[i] == parent->rank) me = i;
  }
  c->rank = me;
  free(all);
  free(members);
  open_links(c);
  *size = c->size, *rank = c->rank;
  return c;
}

// ---- The watchdog's side channel: a star of its own, used by the watchdog thread only -------

typedef struct {
  int n, rank;
  int *fd;  // per world rank: rank 0 has one to every rank, the others one to rank 0
  char (*in)[4100];
  int *have;
} side_t;

static void *tcp_side_open(void *world_state) {
  tcp_comm *w = world_state;
  side_t *sd = calloc(1, sizeof *sd);
  VT_CHECK(sd, "out of memory for the side channel");
  sd->n = w->size, sd->rank = w->rank;
  sd->fd = malloc((size_t)w->size * sizeof *sd->fd);
  sd->in = calloc((size_t)w->size, sizeof *sd->in);
  sd->have = calloc((size_t)w->size, sizeof *sd->have);
  VT_CHECK(sd->fd && sd->in && sd->have, "out of memory for the side channel");
  const int seq = ++g.seq;
  for (int q = 0; q < w->size; q++) sd->fd[q] = -1;
  if (w->rank != 0)
    sd->fd[0] = dial(0, seq, KIND_SIDE, "watchdog");
  else
    for (int q = 1; q < w->size; q++) sd->fd[q] = claim(seq, q, KIND_SIDE, "watchdog");
  return sd;
}

static void tcp_side_send(void *s, const void *buf, int nbytes, int dst) {
  side_t *sd = s;
  if (dst < 0 || dst >= sd->n || sd->fd[dst] < 0 || nbytes < 0 || nbytes > 4096) return;
  char msg[4100];
  const int32_t len = nbytes;
  memcpy(msg, &len, 4);
  memcpy(msg + 4, buf, (size_t)nbytes);
  // Small messages: all or nothing where the socket has room; a partial one is finished so the
  // stream stays whole.
  ssize_t k = send(sd->fd[dst], msg, (size_t)nbytes + 4, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k > 0 && k < nbytes + 4)
    io_all(sd->fd[dst], msg + k, (size_t)(nbytes + 4 - k), 1, now_s() + 5.0);
}

static int tcp_side_poll(void *s, void *buf, int nbytes, int *src) {
  side_t *sd = s;
  for (int q = 0; q < sd->n; q++) {
    if (sd->fd[q] < 0) continue;
    for (;;) {
      int32_t len = 0;
      if (sd->have[q] >= 4) memcpy(&len, sd->in[q], 4);
      if (len < 0 || len > 4096) {  // not a message of ours: stop listening there
        close(sd->fd[q]);
        sd->fd[q] = -1;
        break;
      }
      const int want = sd->have[q] < 4 ? 4 - sd->have[q] : 4 + len - sd->have[q];
      if (want == 0) {
        sd->have[q] = 0;
        if (len != nbytes) continue;
        memcpy(buf, sd->in[q] + 4, (size_t)nbytes);
        *src = q;
        return 1;
      }
      ssize_t k = recv(sd->fd[q], sd->in[q] + sd->have[q], (size_t)want, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close(sd->fd[q]);  // that rank is gone; the watchdog notices by its silence
        sd->fd[q] = -1;
      }
      if (k <= 0) break;
      sd->have[q] += (int)k;
    }
  }
  return 0;
}

static void tcp_side_free(void *s) {
  side_t *sd = s;
  if (!sd) return;
  for (int q = 0; q < sd->n; q++)
    if (sd->fd[q] >= 0) close(sd->fd[q]);
  free(sd->fd);
  free(sd->in);
  free(sd->have);
  free(sd);
}

// ---- The launch: where ranks come from and where they meet ----------------------------------

// A launch that cannot work is said once and ends this process with 2 (nothing ran); ranks it
// already met find it gone and end too.
VT_NORETURN static void refuse(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vt_log_error("%s", msg);
  vt_comm_abort(2);
}
#define REFUSE_IF(cond, ...) \
  do {                       \
    if (cond) refuse(__VA_ARGS__); \
  } while (0)

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > 1 << 24) return -1;
  *out = (int)x;
  return 1;
}

// Reads one rank/size pair of variables: 1 found, 0 absent (either unset: a lone RANK or a batch
// script's SLURM_PROCID says nothing), -1 malformed (err says which).
static int env_pair(const char *rn, const char *sn, int *rank, int *size, char *err, size_t n) {
  const int a = env_int(rn, rank), b = env_int(sn, size);
  if (a == 0 || b == 0) return 0;
  if (a != 1 || b != 1 || *size < 1 || *rank >= *size) {
    snprintf(err, n, "%s=%s and %s=%s do not name a rank in a world of that size", rn,
             getenv(rn) ? getenv(rn) : "(unset)", sn, getenv(sn) ? getenv(sn) : "(unset)");
    return -1;
  }
  return 1;
}

int vt_comm_tcp_launch(int have_mpi, vt_comm_tcp_env *e, char *err, size_t errlen) {
  memset(e, 0, sizeof *e);
  e->size = 1;
  const char *mode = getenv("VT_WORLD");
  if (mode && *mode && strcmp(mode, "mpi") && strcmp(mode, "tcp") && strcmp(mode, "auto")) {
    snprintf(err, errlen, "VT_WORLD=%s: use mpi, tcp or auto (the default)", mode);
    return -1;
  }
  // Ranks from the environment, first found: torchrun's (which also runs inside srun steps,
  // whose own variables then count nodes), Open MPI's, PMI's (MPICH, Intel MPI), a Slurm step's.
  static const char *const pairs[][3] = {
      {"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI's OMPI_COMM_WORLD_*"},
      {"PMI_RANK", "PMI_SIZE", "PMI_RANK/PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "Slurm's SLURM_PROCID/SLURM_STEP_NUM_TASKS"}};
  int found = 0;
  for (int i = 0; i < 4 && !found; i++) {
    if (i == 3 && !getenv("SLURM_STEP_ID")) break;  // a batch script is not a step of ranks
    found = env_pair(pairs[i][0], pairs[i][1], &e->rank, &e->size, err, errlen);
    if (found < 0) return -1;
    if (found) snprintf(e->source, sizeof e->source, "%s", pairs[i][2]);
  }
  // An MPI launcher's variables choose MPI, except beside torchrun's full set (RANK, WORLD_SIZE
  // and LOCAL_RANK: `srun torchrun ...` under a PMIx default leaves srun's PMIX_RANK, which
  // names the launcher process, in every worker's environment).
  const int torchrun = found && !strcmp(e->source, "RANK/WORLD_SIZE") && getenv("LOCAL_RANK");
  const int mpi_launched = !torchrun && (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
                                         getenv("PMI_RANK"));
  int tcp;
  if (mode && !strcmp(mode, "tcp"))
    tcp = 1;
  else if (mode && !strcmp(mode, "mpi")) {
    if (!have_mpi) {
      snprintf(err, errlen, "VT_WORLD=mpi, but this vit3d was built without MPI; unset it to "
               "meet over TCP, or build with -DVT_MPI=ON");
      return -1;
    }
    tcp = 0;
  } else {
    tcp = found && e->size > 1 && (!have_mpi || !mpi_launched);
  }
  if (!tcp) return 0;
  if (!found) {
    snprintf(err, errlen, "VT_WORLD=tcp, but no launcher variables say this process's rank: set "
             "RANK and WORLD_SIZE (torchrun does), or start it with srun, mpirun or PMI");
    return -1;
  }
  if (e->size == 1) return 1;
  const char *addr = getenv("MASTER_ADDR");
  int port = 0;
  const int p = env_int("MASTER_PORT", &port);
  if (!addr || !*addr || p != 1 || port < 1 || port > 65535) {
    snprintf(err, errlen, "%d ranks from %s meet over TCP at rank 0, but MASTER_ADDR=%s "
             "MASTER_PORT=%s do not say where: export MASTER_ADDR (rank 0's host) and "
             "MASTER_PORT (a free port there) to every rank", e->size, e->source,
             addr ? addr : "(unset)", getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "(unset)");
    return -1;
  }
  snprintf(e->addr, sizeof e->addr, "%s", addr);
  e->port = port;
  double t = 0;
  const char *tv = getenv("VT_CONNECT_TIMEOUT");
  if (tv && *tv) {
    char *end = NULL;
    t = strtod(tv, &end);
    if (*end || !(t > 0) || t > 86400) {
      snprintf(err, errlen, "VT_CONNECT_TIMEOUT=%s: give seconds, more than 0", tv);
      return -1;
    }
  }
  e->timeout_s = t > 0 ? t : 300.0;
  const char *run = getenv("VT_RUN_ID");
  if (!run || !*run) run = getenv("TORCHELASTIC_RUN_ID");
  if (run && *run)
    snprintf(e->run_id, sizeof e->run_id, "%s", run);
  else if (getenv("SLURM_JOB_ID") && getenv("SLURM_STEP_ID"))
    snprintf(e->run_id, sizeof e->run_id, "%s.%s", getenv("SLURM_JOB_ID"),
             getenv("SLURM_STEP_ID"));
  else if (getenv("PMIX_NAMESPACE"))  // Open MPI's (PMIx's) job, under mpirun without MPI
    snprintf(e->run_id, sizeof e->run_id, "%s", getenv("PMIX_NAMESPACE"));
  const uint32_t h = vt_hash_name(e->run_id);
  e->run_key = e->run_id[0] ? (h ? h : 1) : 0;
  return 1;
}

// Rank 0's half of the meeting: every other rank's hello, checked, then the table to each.
static void meet_as_root(tcp_comm *w, const vt_comm_tcp_env *e, int listen_fd) {
  const double deadline = now_s() + g.timeout_s;
  int arrived = 1;
  while (arrived < e->size) {
    handshake h;
    int fd = -1;
    if (!accept_one(&h, &fd, deadline)) {
      char missing[256] = "";
      int len = 0;
      for (int q = 1; q < e->size && len < 200; q++)
        if (w->coll[q].fd < 0)
          len += snprintf(missing + len, sizeof missing - (size_t)len, " %d", q);
      refuse("only %d of %d ranks reached %s:%d within %.0f s (missing:%s%s): check that every "
             "rank has the same MASTER_ADDR, MASTER_PORT and world size, and that they were all "
             "started; VT_CONNECT_TIMEOUT sets the limit", arrived, e->size, e->addr, e->port,
             g.timeout_s, missing, len >= 200 ? " ..." : "");
    }
    if (h.kind != KIND_HELLO) {  // a link of a later comm cannot come before the table
      close(fd);
      continue;
    }
    if (h.run != e->run_key) {  // another run's rank on this port: closed, it names the cause
      vt_log_warn("world rank %d of %d ranks (host %.64s) of another run connected to "
                  "MASTER_PORT %d (its run id's hash %08x, this run's %08x: %s): turned away; "
                  "do two jobs share this port?", h.from, h.size, h.host, e->port, h.run,
                  e->run_key, e->run_id[0] ? e->run_id : "no run id");
      close(fd);
      continue;
    }
    REFUSE_IF(h.size != e->size,
              "world rank %d (host %.64s) says the world has %d ranks, rank 0 says %d (%s): the "
              "ranks were started with different world sizes", h.from, h.host, h.size, e->size,
              e->source);
    REFUSE_IF(h.from < 1 || h.from >= e->size || w->coll[h.from].fd >= 0,
              "two processes say they are world rank %d (one on host %.64s): check the "
              "launcher's rank variables (%s)", h.from, h.host, e->source);
    peer_addr *a = &g.table[h.from];
    a->addrlen = sizeof a->addr;
    VT_CHECK(getpeername(fd, (struct sockaddr *)&a->addr, &a->addrlen) == 0, "getpeername: %s",
             strerror(errno));
    set_port(&a->addr, h.port);
    memcpy(a->host, h.host, HOST_LEN);
    a->host[HOST_LEN - 1] = '\0';
    attach(w, &w->coll[h.from], h.from, fd);
    arrived++;
  }
  (void)listen_fd;
  for (int q = 1; q < e->size; q++)
    duplex(w, MSG_TABLE, q, g.table, (size_t)e->size * sizeof *g.table, -1, NULL, 0);
}

void *vt_comm_tcp_world_init(const vt_comm_tcp_env *e, int *local_rank, int *local_size) {
  g.size = e->size, g.rank = e->rank, g.timeout_s = e->timeout_s;
  // A rank may hold a socket per peer on some comms: make sure the descriptor limit allows it.
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  g.table = calloc((size_t)e->size, sizeof *g.table);
  VT_CHECK(g.table, "out of memory for a world of %d", e->size);
  tcp_comm *w = new_comm(e->size, e->rank, 0, "world");
  for (int q = 0; q < e->size; q++) w->world[q] = q;
  *local_rank = 0, *local_size = 1;
  if (e->size == 1) return w;  // nobody to meet

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
  char port[16];
  snprintf(port, sizeof port, "%d", e->port);
  const int gai = getaddrinfo(e->addr, port, &hints, &res);
  REFUSE_IF(gai != 0 || !res, "MASTER_ADDR=%s: %s: give rank 0's host name or address", e->addr,
            gai_strerror(gai));
  peer_addr *root = &g.table[0];
  memcpy(&root->addr, res->ai_addr, res->ai_addrlen);
  root->addrlen = (socklen_t)res->ai_addrlen;
  const int family = res->ai_family;
  freeaddrinfo(res);

  char host[HOST_LEN] = "";
  gethostname(host, sizeof host - 1);
  if (e->rank == 0) {
    g.listen_fd = open_listener(family, e->port);
    REFUSE_IF(g.listen_fd < 0, "rank 0 cannot listen on port %d (MASTER_PORT): %s; pick a free "
              "port", e->port, strerror(-g.listen_fd));
    memcpy(root->host, host, HOST_LEN);
    meet_as_root(w, e, g.listen_fd);
  } else {
    g.listen_fd = open_listener(family, 0);
    VT_CHECK(g.listen_fd >= 0, "cannot listen for peers: %s", strerror(-g.listen_fd));
    struct sockaddr_storage mine;
    socklen_t len = sizeof mine;
    VT_CHECK(getsockname(g.listen_fd, (struct sockaddr *)&mine, &len) == 0, "getsockname: %s",
             strerror(errno));
    const int fd = connect_to(&root->addr, root->addrlen, now_s() + g.timeout_s);
    REFUSE_IF(fd < 0, "cannot reach rank 0 at %s:%d within %.0f s (%s): is rank 0 running, and "
              "do all ranks have the same MASTER_ADDR and MASTER_PORT? VT_CONNECT_TIMEOUT sets "
              "the limit", e->addr, e->port, g.timeout_s, strerror(-fd));
    handshake h = {MAGIC, VERSION, KIND_HELLO, 0, e->rank, e->size, port_of(&mine), e->run_key,
                   ""};
    memcpy(h.host, host, HOST_LEN);
    VT_CHECK(io_all(fd, &h, sizeof h, 1, now_s() + 30.0) == 0,
             "rank 0 at %s:%d closed the connection at once", e->addr, e->port);
    // Rank 0 sends the table when every rank has arrived, within VT_CONNECT_TIMEOUT of its own
    // start (before this rank could connect), or ends; a listener that is not rank 0 (another
    // program on MASTER_PORT, which rank 0 then could not take) does neither.
    const double table_s = g.timeout_s + fmin(g.timeout_s, 10.0);  // (a margin for rank 0)
    REFUSE_IF(!wait_fd(fd, POLLIN, now_s() + table_s),
              "%s:%d (MASTER_ADDR:MASTER_PORT) took the connection but sent no table of ranks "
              "within %.0f s: is another program listening there (rank 0's log says whether it "
              "could), or did rank 0 stop? VT_CONNECT_TIMEOUT sets the limit", e->addr, e->port,
              table_s);
    char peek;
    REFUSE_IF(recv(fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0,
              "the rank 0 at %s:%d (MASTER_ADDR:MASTER_PORT) closed the connection before sending "
              "the table of ranks: it turned this rank away or ended, and its log says why (a "
              "rank 0 of another run on this port: this run's id is %s; a world size or a rank "
              "it does not expect)", e->addr, e->port, e->run_id[0] ? e->run_id : "unset");
    attach(w, &w->coll[0], 0, fd);
    duplex(w, MSG_TABLE, -1, NULL, 0, 0, g.table, (size_t)e->size * sizeof *g.table);
  }
  // Rank 0's entry keeps the address every rank dialled; its port is MASTER_PORT.
  open_links(w);
  // This host's ranks, in world order: the share of cores and the GPU.
  *local_rank = 0, *local_size = 0;
  for (int q = 0; q < e->size; q++)
    if (!strncmp(g.table[q].host, g.table[e->rank].host, HOST_LEN)) {
      if (q < e->rank) ++*local_rank;
      ++*local_size;
    }
  return w;
}

void vt_comm_tcp_finalize(void) {
  if (g.listen_fd >= 0) close(g.listen_fd);
  g.listen_fd = -1;
  for (int i = 0; i < g.nstash; i++) close(g.stash[i].fd);
  g.nstash = 0;
  free(g.stash), g.stash = NULL, g.capstash = 0;
  free(g.table), g.table = NULL;
  free(g_active), g_active = NULL, g_nactive = g_capactive = 0;
}

const vt_comm_host vt_comm_tcp_host = {
    "tcp",         &vt_comm_tcp_transport, tcp_split,     tcp_barrier,   tcp_all_reduce_double,
    tcp_broadcast_bytes, tcp_free,         tcp_side_open, tcp_side_send, tcp_side_poll,
    tcp_side_free};
