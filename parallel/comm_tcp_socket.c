// comm_tcp_socket.c: the TCP world's sockets (comm_tcp.c has the design): blocking helpers with
// deadlines for start-up, the world's listener and table of addresses, the connection each comm
// link dials or claims (those that arrive early wait in a stash), and the watchdog's side
// channel, a star of plain sockets outside the progress engine. Must not depend on CUDA or the
// model; only comm_tcp.c and comm_tcp_launch.c call it.
#define _GNU_SOURCE  // accept4
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm_tcp_internal.h"

// ---- The world: addresses, the listener, connections waiting to be claimed -------------------

tcp_world vt_tcp_world = {-1, 0, 0, NULL, 0, NULL, 0, 0, 300.0};

double vt_tcp_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *vt_tcp_host_of(int world_rank) {
  return vt_tcp_world.table && world_rank >= 0 && world_rank < vt_tcp_world.size
             ? vt_tcp_world.table[world_rank].host
             : "?";
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

static void (*g_connect_check)(void) = NULL;
void vt_comm_tcp_set_connect_check(void (*check)(void)) { g_connect_check = check; }

int vt_tcp_wait_connecting(int fd, short events, double deadline) {
  for (;;) {
    if (g_connect_check) g_connect_check();
    const double slice = fmin(deadline, vt_tcp_now_s() + 0.25);
    if (vt_tcp_wait_fd(fd, events, slice)) return 1;
    if (vt_tcp_now_s() >= deadline) return 0;
  }
}

// Waits until fd is ready for events or the deadline passes (0: it passed).
int vt_tcp_wait_fd(int fd, short events, double deadline) {
  for (;;) {
    const double left = deadline - vt_tcp_now_s();
    if (left <= 0) return 0;
    struct pollfd p = {fd, events, 0};
    const int rc = poll(&p, 1, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return 0;
  }
}

// Reads or writes all of n bytes on a non-blocking fd before the deadline. Returns 0 on
// success, else -1 (closed, error or time).
int vt_tcp_io_all(int fd, void *buf, size_t n, int writing, double deadline) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k > 0) {
      p += k, n -= (size_t)k;
      continue;
    }
    if (k == 0 && !writing) return -1;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (!vt_tcp_wait_fd(fd, writing ? POLLOUT : POLLIN, deadline)) return -1;
  }
  return 0;
}

int vt_tcp_open_listener(int family, int port) {
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

int vt_tcp_port_of(const struct sockaddr_storage *a) {
  return a->ss_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)a)->sin6_port)
                                  : ntohs(((const struct sockaddr_in *)a)->sin_port);
}

void vt_tcp_set_port(struct sockaddr_storage *a, int port) {
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
  snprintf(out, n, "%s:%d", ip, vt_tcp_port_of(a));
}

// Whether a connection's two ends are one socket: dialling a port of this host in the ephemeral
// range nobody listens on yet (spawn.sh's MASTER_PORT is one the kernel handed out) can meet
// itself (TCP's simultaneous open) when the kernel picks that port as the source.
static int connected_to_itself(int fd) {
  struct sockaddr_storage a, b;
  socklen_t la = sizeof a, lb = sizeof b;
  if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
      getpeername(fd, (struct sockaddr *)&b, &lb) != 0)
    return 0;
  return la == lb && !memcmp(&a, &b, la);
}

// Connects to a, retrying while nobody listens there yet, until the deadline (a host that does
// not answer at all is given up at the deadline too). Returns the connected, non-blocking fd or
// -errno.
int vt_tcp_connect_to(const struct sockaddr_storage *a, socklen_t len, double deadline) {
  int last = ETIMEDOUT;
  double pause = 0.01;
  for (;;) {
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    VT_CHECK(fd >= 0, "socket: %s", strerror(errno));
    int rc = connect(fd, (const struct sockaddr *)a, len);
    if (rc != 0 && errno == EINPROGRESS) {
      int e = ETIMEDOUT;
      socklen_t elen = sizeof e;
      if (vt_tcp_wait_connecting(fd, POLLOUT, deadline) &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0)
        e = errno;
      rc = e ? -1 : 0;
      errno = e;
    }
    if (rc == 0 && connected_to_itself(fd)) rc = -1, errno = ECONNREFUSED;
    if (rc == 0) {
      set_nodelay(fd);
      return fd;
    }
    last = errno;
    close(fd);
    if (last != ECONNREFUSED && last != ETIMEDOUT && last != EINTR && last != ENETUNREACH &&
        last != EHOSTUNREACH && last != ECONNRESET && last != EAGAIN)
      return -last;
    const double left = deadline - vt_tcp_now_s();
    if (left <= 0) return -last;
    if (g_connect_check) g_connect_check();
    // (up to the deadline, then one more try; a whole second's pause is {1, 0}: tv_nsec 1e9
    // is EINVAL, which made the wait spin)
    const double nap = pause < left ? pause : left;
    struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
    nanosleep(&ts, NULL);
    pause = pause < 0.5 ? 2 * pause : 1.0;
  }
}

// Accepts one connection and reads its handshake; 0 when the deadline passed first.
int vt_tcp_accept_one(handshake *h, int *fd_out, double deadline) {
  for (;;) {
    if (!vt_tcp_wait_connecting(vt_tcp_world.listen_fd, POLLIN, deadline)) return 0;
    int fd = accept4(vt_tcp_world.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    // Out of descriptors or memory the connection stays queued and poll returns at once: a
    // spin that would end in blaming the peer. EAGAIN, EINTR or a connection reset before it
    // was taken: wait for the next.
    VT_CHECK(fd >= 0 || (errno != EMFILE && errno != ENFILE && errno != ENOBUFS &&
                         errno != ENOMEM),
             "cannot accept a peer's connection: %s (raise the limit on open files, ulimit -n: "
             "a rank may hold a socket per peer)", strerror(errno));
    if (fd < 0) continue;
    set_nodelay(fd);
    // A vit3d rank sends its handshake right after connecting; anything else is dropped.
    if (vt_tcp_io_all(fd, h, sizeof *h, 0, vt_tcp_now_s() + 30.0) != 0 || h->magic != MAGIC) {
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
int vt_tcp_claim(int seq, int from, int kind, const char *axis) {
  const double deadline = vt_tcp_now_s() + vt_tcp_world.timeout_s;
  for (;;) {
    for (int i = 0; i < vt_tcp_world.nstash; i++) {
      pending_conn *p = &vt_tcp_world.stash[i];
      if (p->seq == seq && p->from == from && p->kind == kind) {
        const int fd = p->fd;
        *p = vt_tcp_world.stash[--vt_tcp_world.nstash];
        return fd;
      }
    }
    handshake h;
    int fd = -1;
    VT_CHECK(vt_tcp_accept_one(&h, &fd, deadline),
             "the %s comm: world rank %d (host %s) did not connect within %.0f s; it may have "
             "died or be stuck (see its log); VT_CONNECT_TIMEOUT sets the limit", axis, from,
             vt_tcp_host_of(from), vt_tcp_world.timeout_s);
    if (vt_tcp_world.nstash == vt_tcp_world.capstash) {
      vt_tcp_world.capstash = vt_tcp_world.capstash ? 2 * vt_tcp_world.capstash : 16;
      vt_tcp_world.stash =
          realloc(vt_tcp_world.stash, (size_t)vt_tcp_world.capstash * sizeof *vt_tcp_world.stash);
      VT_CHECK(vt_tcp_world.stash, "out of memory for pending connections");
    }
    vt_tcp_world.stash[vt_tcp_world.nstash++] = (pending_conn){fd, (int)h.seq, h.from, (int)h.kind};
  }
}

int vt_tcp_dial(int to, int seq, int kind, const char *axis) {
  const peer_addr *a = &vt_tcp_world.table[to];
  int fd = vt_tcp_connect_to(&a->addr, a->addrlen, vt_tcp_now_s() + vt_tcp_world.timeout_s);
  char where[96];
  addr_text(&a->addr, where, sizeof where);
  VT_CHECK(fd >= 0, "the %s comm: cannot connect to world rank %d at %s (host %s): %s", axis, to,
           where, a->host, strerror(-fd));
  handshake h = {MAGIC, VERSION, (uint32_t)kind, (uint32_t)seq, vt_tcp_world.rank,
                 vt_tcp_world.size, 0, 0, ""};
  VT_CHECK(vt_tcp_io_all(fd, &h, sizeof h, 1, vt_tcp_now_s() + 30.0) == 0,
           "the %s comm: world rank %d (host %s) closed the connection at once", axis, to,
           a->host);
  return fd;
}

// ---- The watchdog's side channel: a star of its own, used by the watchdog thread only -------

typedef struct {
  int n, rank;
  int *fd;  // per world rank: rank 0 has one to every rank, the others one to rank 0
  char (*in)[4100];
  int *have;
} side_t;

void *vt_tcp_side_open(void *world_state) {
  tcp_comm *w = world_state;
  side_t *sd = calloc(1, sizeof *sd);
  VT_CHECK(sd, "out of memory for the side channel");
  sd->n = w->size, sd->rank = w->rank;
  sd->fd = malloc((size_t)w->size * sizeof *sd->fd);
  sd->in = calloc((size_t)w->size, sizeof *sd->in);
  sd->have = calloc((size_t)w->size, sizeof *sd->have);
  VT_CHECK(sd->fd && sd->in && sd->have, "out of memory for the side channel");
  const int seq = ++vt_tcp_world.seq;
  for (int q = 0; q < w->size; q++) sd->fd[q] = -1;
  if (w->rank != 0)
    sd->fd[0] = vt_tcp_dial(0, seq, KIND_SIDE, "watchdog");
  else
    for (int q = 1; q < w->size; q++) sd->fd[q] = vt_tcp_claim(seq, q, KIND_SIDE, "watchdog");
  return sd;
}

void vt_tcp_side_send(void *s, const void *buf, int nbytes, int dst) {
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
    vt_tcp_io_all(sd->fd[dst], msg + k, (size_t)(nbytes + 4 - k), 1, vt_tcp_now_s() + 5.0);
}

int vt_tcp_side_poll(void *s, void *buf, int nbytes, int *src) {
  side_t *sd = s;
  for (int q = 0; q < sd->n; q++) {
    if (sd->fd[q] < 0) continue;
    for (;;) {
      int32_t len = 0;
      if (sd->have[q] >= 4) memcpy(&len, sd->in[q], 4);
      if (len == -2 && sd->have[q] >= 8) {  // an end on a reported error, and its exit code
        int32_t code;
        memcpy(&code, sd->in[q] + 4, 4);
        close(sd->fd[q]);
        sd->fd[q] = -1;
        if (nbytes >= (int)sizeof code) memcpy(buf, &code, sizeof code);
        *src = q;
        return -2;
      }
      if ((len < 0 && len != -2) || len > 4096) {  // a goodbye (-1), or not ours: stop there
        close(sd->fd[q]);
        sd->fd[q] = -1;
        break;
      }
      const int want = sd->have[q] < 4 ? 4 - sd->have[q]
                       : len == -2      ? 8 - sd->have[q]
                                        : 4 + len - sd->have[q];
      if (want == 0) {
        sd->have[q] = 0;
        if (len != nbytes) continue;
        memcpy(buf, sd->in[q] + 4, (size_t)nbytes);
        *src = q;
        return 1;
      }
      ssize_t k = recv(sd->fd[q], sd->in[q] + sd->have[q], (size_t)want, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close(sd->fd[q]);  // closed without the goodbye of vt_tcp_side_free: that rank is gone
        sd->fd[q] = -1;
        *src = q;
        return -1;
      }
      if (k <= 0) break;
      sd->have[q] += (int)k;
    }
  }
  return 0;
}

void vt_tcp_side_abort(void *s, int code) {
  side_t *sd = s;
  const int32_t msg[2] = {-2, code};  // (one small send: not split among the watchdog's)
  for (int q = 0; sd && q < sd->n; q++)
    if (sd->fd[q] >= 0) (void)send(sd->fd[q], msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void vt_tcp_side_free(void *s) {
  side_t *sd = s;
  if (!sd) return;
  const int32_t bye = -1;  // an end, not a crash, for the watchdogs still running (side_poll)
  for (int q = 0; q < sd->n; q++)
    if (sd->fd[q] >= 0) {
      (void)send(sd->fd[q], &bye, sizeof bye, MSG_NOSIGNAL | MSG_DONTWAIT);  // (or gone)
      close(sd->fd[q]);
    }
  free(sd->fd);
  free(sd->in);
  free(sd->have);
  free(sd);
}
