// nccl_emu_comm.cpp: NCCL for the CUDA emulation (tests/cuda_emu/include/nccl.h), so that
// vit3d_emu runs the trainer's NCCL transport (parallel/comm_nccl.cu) where no GPU is, under
// whatever started its ranks (mpirun, srun, launch/spawn.sh): like NCCL, it needs no MPI. A
// unique id names a listening socket of the rank that made it; ncclCommInitRank meets there
// (rank 0 of the communicator must have made the id, as comm.c does), hands every member the
// others' addresses, and each pair of members opens a TCP link (the higher rank dials). A split
// asks the parent's rank 0 for the groups, and the new members link up the same way.
//
// This file: ids, the meeting, splits, the links and the progress thread that moves every
// link's messages; the operations that post them are nccl_emu.cpp's.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "nccl_emu_internal.h"

namespace nccl_emu {

const uint32_t kMagic = 0x6e63656dU;  // "mecn"
const double kConnectSeconds = 120;   // how long a member waits for the others to arrive

// Where a communicator met: the maker's listening address and its serial there.
struct emu_key {
  uint32_t ip, port, serial;
  bool operator==(const emu_key &o) const {
    return ip == o.ip && port == o.port && serial == o.serial;
  }
};

// What a dialling member sends first.
struct emu_hello {
  uint32_t magic;
  emu_key key;
  int32_t rank, nranks;
  uint32_t ip, port;  // its own listening address
};


const char *kind_name(uint32_t k) {
  return k == KIND_COLLECTIVE ? "collective" : k == KIND_P2P ? "send" : "control message";
}



// The thread's state outlives static destruction at exit (the thread is never joined).
std::mutex &g_mu = *new std::mutex;
std::condition_variable &g_cv = *new std::condition_variable;
std::vector<emu_link *> &g_links = *new std::vector<emu_link *>;  // progressed by the thread
int g_wake[2] = {-1, -1};         // a byte here wakes the thread's poll
bool g_thread_started;
int g_listen = -1;
emu_addr g_self;     // g_listen's address
uint32_t g_serial;   // ids made here
thread_local char g_error[512];

struct stashed {
  emu_key key;
  int rank, fd;
  emu_addr addr;
};
std::vector<stashed> g_stash;  // accepted links not yet claimed by their communicator

}  // namespace

namespace nccl_emu {

ncclResult_t fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  fprintf(stderr, "emulated NCCL: %s\n", g_error);
  return ncclSystemError;
}

[[noreturn]] void die(const char *fmt, ...) {
  char m[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  fprintf(stderr, "emulated NCCL: %s\n", m);
  _Exit(1);
}

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

uint64_t fnv1a(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
  return h;
}

// Blocking whole reads and writes for the meeting (before a link goes to the thread).
bool write_all(int fd, const void *p, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t k = send(fd, (const char *)p + done, n - done, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}
bool read_all(int fd, void *p, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t k = recv(fd, (char *)p + done, n - done, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

// This process's listening socket, on every interface; its address is the host name's IPv4
// address (127.0.0.1 where the name does not resolve).
ncclResult_t ensure_listener() {
  if (g_listen >= 0) return ncclSuccess;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (sockaddr *)&a, sizeof a) != 0 || listen(fd, 256) != 0 ||
      getsockname(fd, (sockaddr *)&a, &len) != 0)
    return fail("cannot open a listening socket: %s", strerror(errno));
  g_self.port = ntohs(a.sin_port);
  g_self.ip = htonl(INADDR_LOOPBACK);
  char host[256];
  addrinfo hints = {}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (gethostname(host, sizeof host) == 0 && getaddrinfo(host, nullptr, &hints, &res) == 0) {
    g_self.ip = ((sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
  }
  g_listen = fd;
  return ncclSuccess;
}

// A link of the communicator `key` as rank `rank` to the member listening at `to`.
ncclResult_t dial(emu_addr to, const emu_key &key, int rank, int nranks, int *out) {
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = to.ip;
  a.sin_port = htons((uint16_t)to.port);
  const double until = now() + kConnectSeconds;
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail("socket: %s", strerror(errno));
    if (connect(fd, (sockaddr *)&a, sizeof a) == 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const emu_hello h = {kMagic, key, rank, nranks, g_self.ip, g_self.port};
      if (!write_all(fd, &h, sizeof h)) {
        close(fd);
        return fail("rank %d could not greet the member at port %u", rank, to.port);
      }
      *out = fd;
      return ncclSuccess;
    }
    const int e = errno;
    close(fd);
    if (now() > until)
      return fail("rank %d of %d could not reach a member at port %u for %.0f s: %s", rank,
                  nranks, to.port, kConnectSeconds, strerror(e));
    usleep(20000);
  }
}

// The link that rank `from` of communicator `key` dialled here (accepting others meanwhile).
ncclResult_t accept_from(const emu_key &key, int from, int *fd, emu_addr *addr) {
  const double until = now() + kConnectSeconds;
  for (;;) {
    for (size_t i = 0; i < g_stash.size(); i++)
      if (g_stash[i].key == key && g_stash[i].rank == from) {
        *fd = g_stash[i].fd;
        if (addr) *addr = g_stash[i].addr;
        g_stash.erase(g_stash.begin() + (long)i);
        return ncclSuccess;
      }
    pollfd p = {g_listen, POLLIN, 0};
    const double left = until - now();
    if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) < 0)
      return fail("rank %d of a communicator never arrived within %.0f s: did it start, and "
                  "does every rank create its communicators in the same order?", from,
                  kConnectSeconds);
    if (!(p.revents & POLLIN)) continue;
    const int c = accept4(g_listen, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    emu_hello h;
    if (!read_all(c, &h, sizeof h) || h.magic != kMagic) {
      close(c);  // not one of ours
      continue;
    }
    const int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    g_stash.push_back({h.key, h.rank, c, {h.ip, h.port}});
  }
}

// The progress thread: moves each link's oldest send and oldest receive along.
bool advance(emu_link *l, emu_msg *m) {
  const size_t total = sizeof m->head + m->bytes;
  while (m->moved < total) {
    const bool in_head = m->moved < sizeof m->head;
    char *p = in_head ? (char *)m->head + m->moved : m->buf + (m->moved - sizeof m->head);
    const size_t n = in_head ? sizeof m->head - m->moved : total - m->moved;
    const ssize_t k = m->send ? send(l->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                              : recv(l->fd, p, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (k <= 0)
      die("the link to rank %d of a communicator was lost (%s): that rank ended; this one ends "
          "too", l->peer,
          k == 0 ? "closed" : strerror(errno));
    m->moved += (size_t)k;
    if (!m->send && m->moved == sizeof m->head) {  // the header in: is it the one expected?
      const uint64_t bytes = m->head[2] | (uint64_t)m->head[3] << 32;
      if (m->head[0] != kMagic || m->head[1] != m->kind || bytes != m->bytes)
        die("rank %d sent a %s of %llu bytes where a %s of %zu bytes was expected: the ranks "
            "issue this communicator's operations in different orders", l->peer,
            kind_name(m->head[1]), (unsigned long long)bytes, kind_name(m->kind), m->bytes);
    }
  }
  return true;
}

void progress_loop() {
  std::vector<pollfd> fds;
  std::unique_lock<std::mutex> lk(g_mu);
  for (;;) {
    bool moved = false;
    for (emu_link *l : g_links) {
      for (std::deque<emu_msg *> *q : {&l->sends, &l->recvs})
        while (!q->empty() && advance(l, q->front())) {
          q->front()->complete = true;
          q->pop_front();
          moved = true;
        }
    }
    if (moved) g_cv.notify_all();
    fds.assign(1, pollfd{g_wake[0], POLLIN, 0});
    for (emu_link *l : g_links) {
      const short ev = (short)((l->sends.empty() ? 0 : POLLOUT) | (l->recvs.empty() ? 0 : POLLIN));
      if (ev) fds.push_back({l->fd, ev, 0});
    }
    lk.unlock();
    poll(fds.data(), fds.size(), -1);
    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (read(g_wake[0], drain, sizeof drain) > 0) {
      }
    }
    lk.lock();
  }
}

void wake() {
  const char b = 1;
  if (write(g_wake[1], &b, 1) < 0) {
  }  // the pipe is full: the thread wakes anyway
}

// Hands a communicator's links to the thread (non-blocking from now on).
void adopt(emu_nccl *c) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_thread_started) {
    if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) die("pipe: %s", strerror(errno));
    std::thread(progress_loop).detach();
    g_thread_started = true;
  }
  for (emu_link *l : c->links)
    if (l) g_links.push_back(l);
}

emu_msg *post(emu_nccl *c, int peer, uint32_t kind, bool is_send, const void *buf, size_t bytes) {
  emu_msg *m = new emu_msg;
  m->buf = (char *)buf, m->bytes = bytes, m->kind = kind, m->send = is_send;
  m->head[0] = kMagic, m->head[1] = kind;
  m->head[2] = (uint32_t)bytes, m->head[3] = (uint32_t)((uint64_t)bytes >> 32);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    emu_link *l = c->links[peer];
    (is_send ? l->sends : l->recvs).push_back(m);
  }
  wake();
  return m;
}

void wait_for(emu_msg *m) {
  std::unique_lock<std::mutex> lk(g_mu);
  g_cv.wait(lk, [m] { return m->complete; });
  lk.unlock();
  delete m;
}

void wait_all(const std::vector<emu_msg *> &ms) {
  for (emu_msg *m : ms) wait_for(m);
}

// Each pair of members links up: each dials its lower ranks (a dial needs nothing of the other
// side but its listening socket), then accepts its higher ranks' dials.
ncclResult_t link_up(emu_nccl *c, const emu_key &key) {
  c->links.assign(c->size, nullptr);
  std::vector<int> fds(c->size, -1);
  for (int j = 0; j < c->rank; j++)
    if (ncclResult_t r = dial(c->addrs[j], key, c->rank, c->size, &fds[j])) return r;
  for (int j = c->rank + 1; j < c->size; j++)
    if (ncclResult_t r = accept_from(key, j, &fds[j], nullptr)) return r;
  for (int j = 0; j < c->size; j++)
    if (j != c->rank) c->links[j] = new emu_link{fds[j], j, {}, {}};
  adopt(c);
  return ncclSuccess;
}

}  // namespace

using namespace nccl_emu;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  if (ncclResult_t r = ensure_listener()) return r;
  const emu_key key = {g_self.ip, g_self.port, g_serial++};
  memcpy(id->internal, &kMagic, sizeof kMagic);
  memcpy(id->internal + sizeof kMagic, &key, sizeof key);
  return ncclSuccess;
}

// The members meet at the id's maker, rank 0, which sends each the table of addresses.
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  emu_nccl *c = new emu_nccl{rank, nranks, {}, {}};
  if (nranks == 1) {
    *comm = c;
    return ncclSuccess;
  }
  uint32_t magic;
  emu_key key;
  memcpy(&magic, id.internal, sizeof magic);
  memcpy(&key, id.internal + sizeof magic, sizeof key);
  if (magic != kMagic) return fail("rank %d was given an id that ncclGetUniqueId did not make",
                                   rank);
  if (ncclResult_t r = ensure_listener()) return r;
  c->addrs.assign(nranks, emu_addr{0, 0});
  if (rank == 0) {
    if (key.ip != g_self.ip || key.port != g_self.port || key.serial >= g_serial)
      return fail("rank 0 of a communicator must be the rank that made its id");
    c->addrs[0] = g_self;
    std::vector<int> fds(nranks, -1);
    for (int j = 1; j < nranks; j++)
      if (ncclResult_t r = accept_from(key, j, &fds[j], &c->addrs[j])) return r;
    for (int j = 1; j < nranks; j++) {
      if (!write_all(fds[j], c->addrs.data(), nranks * sizeof(emu_addr)))
        return fail("rank %d left before the meeting ended", j);
      close(fds[j]);
    }
  } else {
    int fd = -1;
    if (ncclResult_t r = dial({key.ip, key.port}, key, rank, nranks, &fd)) return r;
    const bool ok = read_all(fd, c->addrs.data(), nranks * sizeof(emu_addr));
    close(fd);
    if (!ok) return fail("rank 0 of a communicator of %d left before the meeting ended", nranks);
  }
  // The pairs' links: a key of its own (serial's top bit), so that they never meet the meeting's.
  emu_key links = key;
  links.serial |= 0x80000000U;
  if (ncclResult_t r = link_up(c, links)) return r;
  *comm = c;
  return ncclSuccess;
}

// A member's colour picks its new communicator (NCCL_SPLIT_NOCOLOR: none, *newcomm NULL), its key
// its rank there (ties by the parent's rank). Collective over comm: rank 0 gathers every member's
// colour and key and sends each its group; config is not read.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  (void)config;
  *newcomm = nullptr;
  const int n = comm->size;
  // To each member: its new rank (-1: none), the group's size, the new key, then the group's
  // parent ranks in the new order.
  std::vector<int32_t> mine(6 + n, -1);
  if (comm->rank == 0) {
    std::vector<int32_t> ck(2 * n);
    ck[0] = color, ck[1] = key;
    std::vector<emu_msg *> got;
    for (int j = 1; j < n; j++) got.push_back(post(comm, j, KIND_CONTROL, false, &ck[2 * j], 8));
    wait_all(got);
    std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(6 + n, -1));
    std::vector<bool> done(n, false);
    for (int a = 0; a < n; a++) {
      if (done[a] || ck[2 * a] == NCCL_SPLIT_NOCOLOR) continue;
      std::vector<int> group;
      for (int b = a; b < n; b++)
        if (ck[2 * b] == ck[2 * a]) group.push_back(b), done[b] = true;
      for (size_t x = 1; x < group.size(); x++)  // stable: by key, then by parent rank
        for (size_t y = x; y > 0 && ck[2 * group[y - 1] + 1] > ck[2 * group[y] + 1]; y--)
          std::swap(group[y - 1], group[y]);
      const emu_key k = {g_self.ip, g_self.port, g_serial++ | 0x80000000U};
      for (size_t r = 0; r < group.size(); r++) {
        std::vector<int32_t> &o = out[group[r]];
        o[0] = (int32_t)r, o[1] = (int32_t)group.size();
        memcpy(&o[2], &k, sizeof k);
        for (size_t q = 0; q < group.size(); q++) o[6 + q] = group[q];
      }
    }
    std::vector<emu_msg *> sent;
    for (int j = 1; j < n; j++)
      sent.push_back(post(comm, j, KIND_CONTROL, true, out[j].data(), out[j].size() * 4));
    wait_all(sent);
    mine = out[0];
  } else {
    const int32_t ck[2] = {color, key};
    wait_for(post(comm, 0, KIND_CONTROL, true, ck, sizeof ck));
    wait_for(post(comm, 0, KIND_CONTROL, false, mine.data(), mine.size() * 4));
  }
  if (mine[0] < 0) return ncclSuccess;
  emu_nccl *c = new emu_nccl{mine[0], mine[1], {}, {}};
  emu_key k;
  memcpy(&k, &mine[2], sizeof k);
  if (c->size > 1) {  // (a parent of one rank has no addresses)
    for (int r = 0; r < c->size; r++) c->addrs.push_back(comm->addrs[mine[6 + r]]);
    if (ncclResult_t r = link_up(c, k)) return r;
  }
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }

// The links leave the thread (their messages were all waited for) and close.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (emu_link *l : comm->links) {
      if (!l) continue;
      for (size_t i = 0; i < g_links.size(); i++)
        if (g_links[i] == l) g_links.erase(g_links.begin() + (long)i);
      close(l->fd);
      delete l;
    }
  }
  wake();
  delete comm;
  return ncclSuccess;
}
// The job is ending anyway. EMU_NCCL_ABORT_HANGS=1 (test-only) blocks for ever instead, as
// ncclCommAbort does on a GPU behind a kernel that never ends (it waits for the device).
ncclResult_t ncclCommAbort(ncclComm_t) {
  if (getenv("EMU_NCCL_ABORT_HANGS"))
    for (;;) pause();
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *result) {
  *result = ncclSuccess;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSystemError ? g_error : "emulated NCCL: a bad argument";
}
const char *ncclGetLastError(ncclComm_t) { return g_error; }
