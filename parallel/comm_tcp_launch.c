// comm_tcp_launch.c: where the TCP world's ranks come from and where they meet. Ranks come from
// the launcher's environment (torchrun's RANK/WORLD_SIZE, Open MPI's or PMI's variables, or a
// Slurm step's) and meet at rank 0's MASTER_ADDR:MASTER_PORT, which sends every rank the table
// of addresses; then the world comm opens its links (comm_tcp.c). Must not depend on CUDA or
// the model; comm.c is its only caller.
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_tcp_internal.h"
#include "vt_rng.h"

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
  const double deadline = vt_tcp_now_s() + vt_tcp_world.timeout_s;
  int arrived = 1;
  while (arrived < e->size) {
    handshake h;
    int fd = -1;
    if (!vt_tcp_accept_one(&h, &fd, deadline)) {
      char missing[256] = "";
      int len = 0;
      for (int q = 1; q < e->size && len < 200; q++)
        if (w->coll[q].fd < 0)
          len += snprintf(missing + len, sizeof missing - (size_t)len, " %d", q);
      refuse("only %d of %d ranks reached %s:%d within %.0f s (missing:%s%s): check that every "
             "rank has the same MASTER_ADDR, MASTER_PORT and world size, and that they were all "
             "started; VT_CONNECT_TIMEOUT sets the limit", arrived, e->size, e->addr, e->port,
             vt_tcp_world.timeout_s, missing, len >= 200 ? " ..." : "");
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
    peer_addr *a = &vt_tcp_world.table[h.from];
    a->addrlen = sizeof a->addr;
    VT_CHECK(getpeername(fd, (struct sockaddr *)&a->addr, &a->addrlen) == 0, "getpeername: %s",
             strerror(errno));
    vt_tcp_set_port(&a->addr, h.port);
    memcpy(a->host, h.host, HOST_LEN);
    a->host[HOST_LEN - 1] = '\0';
    vt_tcp_attach(w, &w->coll[h.from], h.from, fd);
    arrived++;
  }
  (void)listen_fd;
  for (int q = 1; q < e->size; q++)
    vt_tcp_duplex(w, MSG_TABLE, q, vt_tcp_world.table,
                  (size_t)e->size * sizeof *vt_tcp_world.table, -1, NULL, 0);
}

void *vt_comm_tcp_world_init(const vt_comm_tcp_env *e, int *local_rank, int *local_size) {
  vt_tcp_world.size = e->size, vt_tcp_world.rank = e->rank, vt_tcp_world.timeout_s = e->timeout_s;
  // A rank may hold a socket per peer on some comms: make sure the descriptor limit allows it.
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  vt_tcp_world.table = calloc((size_t)e->size, sizeof *vt_tcp_world.table);
  VT_CHECK(vt_tcp_world.table, "out of memory for a world of %d", e->size);
  tcp_comm *w = vt_tcp_new_comm(e->size, e->rank, 0, "world");
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
  peer_addr *root = &vt_tcp_world.table[0];
  memcpy(&root->addr, res->ai_addr, res->ai_addrlen);
  root->addrlen = (socklen_t)res->ai_addrlen;
  const int family = res->ai_family;
  freeaddrinfo(res);

  char host[HOST_LEN] = "";
  gethostname(host, sizeof host - 1);
  if (e->rank == 0) {
    vt_tcp_world.listen_fd = vt_tcp_open_listener(family, e->port);
    // torchrun (torch 2.4 on, c10d rendezvous) serves its own store on MASTER_PORT and says so
    // to its workers: vit3d's rank 0 cannot listen there.
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    const int torchrun = agent && strcasecmp(agent, "true") == 0;
    REFUSE_IF(vt_tcp_world.listen_fd < 0, "rank 0 cannot listen on port %d (MASTER_PORT): %s; "
              "%s", e->port, strerror(-vt_tcp_world.listen_fd),
              torchrun ? "torchrun's agent serves its store there (TORCHELASTIC_USE_AGENT_STORE): "
                         "start vit3d with launch/spawn.sh, srun or mpirun, or run torchrun "
                         "with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
                       : "pick a free port");
    memcpy(root->host, host, HOST_LEN);
    meet_as_root(w, e, vt_tcp_world.listen_fd);
  } else {
    vt_tcp_world.listen_fd = vt_tcp_open_listener(family, 0);
    VT_CHECK(vt_tcp_world.listen_fd >= 0, "cannot listen for peers: %s",
             strerror(-vt_tcp_world.listen_fd));
    struct sockaddr_storage mine;
    socklen_t len = sizeof mine;
    VT_CHECK(getsockname(vt_tcp_world.listen_fd, (struct sockaddr *)&mine, &len) == 0,
             "getsockname: %s", strerror(errno));
    const int fd =
        vt_tcp_connect_to(&root->addr, root->addrlen, vt_tcp_now_s() + vt_tcp_world.timeout_s);
    REFUSE_IF(fd < 0, "cannot reach rank 0 at %s:%d within %.0f s (%s): is rank 0 running, and "
              "do all ranks have the same MASTER_ADDR and MASTER_PORT? VT_CONNECT_TIMEOUT sets "
              "the limit", e->addr, e->port, vt_tcp_world.timeout_s, strerror(-fd));
    handshake h = {MAGIC, VERSION, KIND_HELLO, 0, e->rank, e->size, vt_tcp_port_of(&mine),
                   e->run_key, ""};
    memcpy(h.host, host, HOST_LEN);
    VT_CHECK(vt_tcp_io_all(fd, &h, sizeof h, 1, vt_tcp_now_s() + 30.0) == 0,
             "rank 0 at %s:%d closed the connection at once", e->addr, e->port);
    // Rank 0 sends the table when every rank has arrived, within VT_CONNECT_TIMEOUT of its own
    // start (before this rank could connect), or ends; a listener that is not rank 0 (another
    // program on MASTER_PORT, which rank 0 then could not take) does neither.
    const double table_s =
        vt_tcp_world.timeout_s + fmin(vt_tcp_world.timeout_s, 10.0);  // (a margin for rank 0)
    REFUSE_IF(!vt_tcp_wait_connecting(fd, POLLIN, vt_tcp_now_s() + table_s),
              "%s:%d (MASTER_ADDR:MASTER_PORT) took the connection but sent no table of ranks "
              "within %.0f s: is another program listening there (rank 0's log says whether it "
              "could), or did rank 0 stop? VT_CONNECT_TIMEOUT sets the limit", e->addr, e->port,
              table_s);
    char peek;  // closed, or reset (rank 0 ended with this rank's hello still unread)
    const ssize_t got = recv(fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
    REFUSE_IF(got == 0 || (got < 0 && errno == ECONNRESET),
              "the rank 0 at %s:%d (MASTER_ADDR:MASTER_PORT) closed the connection before sending "
              "the table of ranks: it turned this rank away or ended, and its log says why (a "
              "rank 0 of another run on this port: this run's id is %s; a world size or a rank "
              "it does not expect)", e->addr, e->port, e->run_id[0] ? e->run_id : "unset");
    vt_tcp_attach(w, &w->coll[0], 0, fd);
    // Rank 0's entry keeps the address this rank dialled (MASTER_ADDR as this host resolves
    // it): the table holds rank 0's own lookup, which may be a loopback address of its host.
    const peer_addr dialled = *root;
    vt_tcp_duplex(w, MSG_TABLE, -1, NULL, 0, 0, vt_tcp_world.table,
                  (size_t)e->size * sizeof *vt_tcp_world.table);
    root->addr = dialled.addr, root->addrlen = dialled.addrlen;
  }
  // Rank 0's port in its entry is MASTER_PORT (the side channel dials it).
  vt_tcp_open_links(w);
  // This host's ranks, in world order: the share of cores and the GPU.
  *local_rank = 0, *local_size = 0;
  for (int q = 0; q < e->size; q++)
    if (!strncmp(vt_tcp_world.table[q].host, vt_tcp_world.table[e->rank].host, HOST_LEN)) {
      if (q < e->rank) ++*local_rank;
      ++*local_size;
    }
  return w;
}

void vt_comm_tcp_finalize(void) {
  if (vt_tcp_world.listen_fd >= 0) close(vt_tcp_world.listen_fd);
  vt_tcp_world.listen_fd = -1;
  for (int i = 0; i < vt_tcp_world.nstash; i++) close(vt_tcp_world.stash[i].fd);
  vt_tcp_world.nstash = 0;
  free(vt_tcp_world.stash), vt_tcp_world.stash = NULL, vt_tcp_world.capstash = 0;
  free(vt_tcp_world.table), vt_tcp_world.table = NULL;
  vt_tcp_active_free();
}
