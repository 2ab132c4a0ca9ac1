// comm_tcp_internal.h: what the TCP world's files share: comm_tcp_socket.c (sockets, the world's
// addresses, connections, the side channel), comm_tcp.c (links, the progress engine, the comm
// operations) and comm_tcp_launch.c (where ranks come from and meet). Not a public header:
// nothing outside these files includes it; comm.c reaches them through comm.h. Must not depend
// on CUDA or the model.
#ifndef VT_COMM_TCP_INTERNAL_H
#define VT_COMM_TCP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "comm.h"

enum { MAGIC = 0x76743364, VERSION = 1 };  // "vt3d"
enum { KIND_HELLO = 0, KIND_COLL = 1, KIND_CH0 = 2, KIND_SIDE = 2 + VT_COMM_CHANNELS };
enum { MSG_RING = 1, MSG_P2P, MSG_DOUBLE, MSG_BYTES, MSG_TABLE };
enum { HOST_LEN = 64 };

// ---- The world: addresses, the listener, connections waiting to be claimed -------------------

typedef struct {
  struct sockaddr_storage addr;  // where its listener is
  socklen_t addrlen;
  char host[HOST_LEN];
} peer_addr;

typedef struct {
  int fd, seq, from, kind;
} pending_conn;

typedef struct {
  int listen_fd;
  int size, rank;
  peer_addr *table;  // per world rank
  int seq;           // comms created so far (every rank creates them in the same order)
  pending_conn *stash;
  int nstash, capstash;
  double timeout_s;  // for connecting and accepting
} tcp_world;

extern tcp_world vt_tcp_world;  // comm_tcp_socket.c's

typedef struct {
  uint32_t magic, version, kind, seq;
  int32_t from, size, port;
  uint32_t run;  // the hello's run key (vt_comm_tcp_env.run_key); 0 in other handshakes
  char host[HOST_LEN];
} handshake;

// ---- A comm and its links (comm_tcp.c) --------------------------------------------------------

typedef struct op op;  // a queued send or receive: comm_tcp.c's alone
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

// comm_tcp_socket.c: start-up helpers (with deadlines), connections, the side channel.
double vt_tcp_now_s(void);
const char *vt_tcp_host_of(int world_rank);
int vt_tcp_wait_fd(int fd, short events, double deadline);
// vt_tcp_wait_fd while connecting: in slices, calling the launcher's connect check between them.
int vt_tcp_wait_connecting(int fd, short events, double deadline);
int vt_tcp_io_all(int fd, void *buf, size_t n, int writing, double deadline);
int vt_tcp_open_listener(int family, int port);
int vt_tcp_port_of(const struct sockaddr_storage *a);
void vt_tcp_set_port(struct sockaddr_storage *a, int port);
int vt_tcp_connect_to(const struct sockaddr_storage *a, socklen_t len, double deadline);
int vt_tcp_accept_one(handshake *h, int *fd_out, double deadline);
int vt_tcp_claim(int seq, int from, int kind, const char *axis);
int vt_tcp_dial(int to, int seq, int kind, const char *axis);
void *vt_tcp_side_open(void *world_state);
void vt_tcp_side_send(void *s, const void *buf, int nbytes, int dst);
int vt_tcp_side_poll(void *s, void *buf, int nbytes, int *src);
void vt_tcp_side_free(void *s);
void vt_tcp_side_abort(void *s, int code);

// comm_tcp.c: comms, their links, messages on the coll links, the progress engine's end.
tcp_comm *vt_tcp_new_comm(int size, int rank, int seq, const char *axis);
void vt_tcp_attach(const tcp_comm *c, link_t *l, int q, int fd);
void vt_tcp_open_links(tcp_comm *c);
void vt_tcp_duplex(tcp_comm *c, uint32_t kind, int to, const void *sbuf, size_t sn, int from,
                   void *rbuf, size_t rn);
void vt_tcp_active_free(void);

#endif
