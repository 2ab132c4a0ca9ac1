// nccl_emu.cpp: NCCL for the CUDA emulation (tests/cuda_emu/include/nccl.h), so that vit3d_emu
// runs the trainer's NCCL transport (parallel/comm_nccl.cu) where no GPU is, under whatever
// started its ranks (mpirun, srun, launch/spawn.sh): like NCCL, it needs no MPI. A unique id
// names a listening socket of the rank that made it; ncclCommInitRank meets there (rank 0 of
// the communicator must have made the id, as comm.c does), hands every member the others'
// addresses, and each pair of members opens a TCP link (the higher rank dials). A split asks
// the parent's rank 0 for the groups, and the new members link up the same way.
//
// Every operation starts at its call, after the work queued on its stream (the emulated device
// memory is host memory). Messages go through a progress thread, as NCCL's kernels and proxy
// progress without the host: collectives exchange theirs at the call and queue their results on
// their stream (finish_late: another stream sees them only once it waits for this one); sends
// and receives between ncclGroupStart and ncclGroupEnd are posted at their call, and the group's
// end queues their waits on the streams they were issued on: the next kernel on such a stream,
// or a stream waiting for an event recorded after them, completes them, as a GPU runs the
// group's kernel in its stream's order (so sends on a stream of their own go on while the host
// launches work on another). A pattern that would hang on GPUs (two ranks sending to each other
// outside a group) hangs here too. Every message carries a header (kind and size) that its
// receiver checks: ranks issuing a communicator's operations in different orders end with a
// message, where NCCL would hang. Sums run in rank order (an all-reduce at rank 0), the same on
// every rank.
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
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <nccl.h>

namespace {

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

// The addresses of a communicator's members, by rank.
struct emu_addr {
  uint32_t ip, port;
};

enum { KIND_COLLECTIVE = 1, KIND_P2P = 2, KIND_CONTROL = 3 };
const char *kind_name(uint32_t k) {
  return k == KIND_COLLECTIVE ? "collective" : k == KIND_P2P ? "send" : "control message";
}

// One send or receive on a link: its 16-byte header, then its payload.
struct emu_msg {
  char *buf;
  size_t bytes;
  uint32_t kind;
  bool send;
  uint32_t head[4];  // magic, kind, size (low, high)
  size_t moved = 0;  // of the header and payload together
  bool complete = false;
  // A group's send: its stream and the hash of its buffer when posted.
  cudaStream_t stream = nullptr;
  uint64_t hash = 0;
};

struct emu_link {
  int fd = -1, peer = -1;
  std::deque<emu_msg *> sends, recvs;
};

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

struct emu_nccl {
  int rank, size;
  std::vector<emu_addr> addrs;     // by rank
  std::vector<emu_link *> links;   // by rank; none to itself
};

namespace {

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

emu_msg *post(emu_nccl *c, int peer, uint32_t kind, bool is_send, const void *buf, size_t bytes,
              cudaStream_t stream = nullptr, uint64_t hash = 0) {
  emu_msg *m = new emu_msg;
  m->buf = (char *)buf, m->bytes = bytes, m->kind = kind, m->send = is_send;
  m->stream = stream, m->hash = hash;
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

// A collective exchanges its data at the call, after the work queued on its stream, and its
// result reaches the output as late as a GPU may write it: as the stream's next work, when the
// stream is next run (a later launch or operation on it, a wait for it, a synchronize). Until
// then the output holds what it held, so a kernel on another stream that reads it without
// waiting for this one reads the old values (on a GPU: either). Writing the input or the output
// while the collective is in flight (on a GPU it may read or overwrite them at any time) aborts.
struct emu_late {
  const void *in;
  void *out;
  size_t in_bytes;
  uint64_t in_hash, out_hash;
  std::vector<float> result;
};

static void complete_late(void *p) {
  emu_late *l = (emu_late *)p;
  const size_t out_bytes = l->result.size() * sizeof(float);
  const bool in_changed = fnv1a(l->in, l->in_bytes) != l->in_hash;
  if (in_changed || fnv1a(l->out, out_bytes) != l->out_hash)
    die("a collective's %s (%zu bytes at %p) changed between the collective's call and its "
        "completion: work on another stream wrote it without being ordered before or after the "
        "collective (a missing cudaStreamWaitEvent)", in_changed ? "input" : "output",
        in_changed ? l->in_bytes : out_bytes, in_changed ? l->in : (const void *)l->out);
  memcpy(l->out, l->result.data(), out_bytes);
  delete l;
}

static void finish_late(cudaStream_t st, const void *in, size_t in_bytes, void *out,
                        std::vector<float> &&result) {
  const size_t out_bytes = result.size() * sizeof(float);
  emu_late *l = new emu_late{in, out, in_bytes, fnv1a(in, in_bytes), fnv1a(out, out_bytes),
                             std::move(result)};
  vt_emu::defer_on_stream(st, complete_late, l);
}

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

// Rank 0 sums the members' buffers in rank order and sends every member the sum.
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                           ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  const size_t bytes = n * sizeof(float);
  std::vector<float> sum((const float *)s, (const float *)s + n);
  if (c->size > 1 && c->rank == 0) {
    std::vector<float> in(n * (size_t)(c->size - 1));
    std::vector<emu_msg *> got;
    for (int j = 1; j < c->size; j++)
      got.push_back(post(c, j, KIND_COLLECTIVE, false, &in[n * (j - 1)], bytes));
    wait_all(got);
    for (int j = 1; j < c->size; j++)
      for (size_t i = 0; i < n; i++) sum[i] += in[n * (j - 1) + i];
    std::vector<emu_msg *> sent;
    for (int j = 1; j < c->size; j++)
      sent.push_back(post(c, j, KIND_COLLECTIVE, true, sum.data(), bytes));
    wait_all(sent);
  } else if (c->size > 1) {
    wait_for(post(c, 0, KIND_COLLECTIVE, true, sum.data(), bytes));
    wait_for(post(c, 0, KIND_COLLECTIVE, false, sum.data(), bytes));
  }
  finish_late(st, s, bytes, r, std::move(sum));
  return ncclSuccess;
}

// recv (n) <- the sum, in rank order, of block `rank` of every rank's send (n * size); send may
// hold recv (NCCL's in-place form, recv = send + rank * n).
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  const size_t size = (size_t)c->size, me = (size_t)c->rank, bytes = n * sizeof(float);
  std::vector<float> send((const float *)s, (const float *)s + n * size), in(n * size);
  std::vector<emu_msg *> ops;
  for (size_t j = 0; j < size; j++) {
    if (j == me) continue;
    ops.push_back(post(c, (int)j, KIND_COLLECTIVE, true, &send[n * j], bytes));
    ops.push_back(post(c, (int)j, KIND_COLLECTIVE, false, &in[n * j], bytes));
  }
  wait_all(ops);
  memcpy(&in[n * me], &send[n * me], bytes);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i++) {
    float sum = in[i];
    for (size_t j = 1; j < size; j++) sum += in[n * j + i];
    out[i] = sum;
  }
  finish_late(st, s, bytes * size, r, std::move(out));
  return ncclSuccess;
}

// recv (n * size) <- every rank's send (n) in rank order; send may be recv's block `rank`.
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t, ncclComm_t c,
                           cudaStream_t st) {
  vt_emu::flush_stream(st);
  const size_t bytes = n * sizeof(float);
  std::vector<float> out(n * (size_t)c->size);
  float *own = &out[n * (size_t)c->rank];
  memcpy(own, s, bytes);
  std::vector<emu_msg *> ops;
  for (int j = 0; j < c->size; j++) {
    if (j == c->rank) continue;
    ops.push_back(post(c, j, KIND_COLLECTIVE, true, own, bytes));
    ops.push_back(post(c, j, KIND_COLLECTIVE, false, &out[n * (size_t)j], bytes));
  }
  wait_all(ops);
  finish_late(st, s, bytes, r, std::move(out));
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t, int root,
                           ncclComm_t c, cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (root < 0 || root >= c->size) return ncclInvalidArgument;
  const size_t bytes = n * sizeof(float);
  std::vector<float> out(n);
  if (c->rank != root) {
    wait_for(post(c, root, KIND_COLLECTIVE, false, out.data(), bytes));
    finish_late(st, r, 0, r, std::move(out));
    return ncclSuccess;
  }
  memcpy(out.data(), s, bytes);
  std::vector<emu_msg *> sent;
  for (int j = 0; j < c->size; j++)
    if (j != root) sent.push_back(post(c, j, KIND_COLLECTIVE, true, out.data(), bytes));
  wait_all(sent);
  finish_late(st, s, bytes, r, std::move(out));
  return ncclSuccess;
}

static int g_group_depth;
static std::vector<emu_msg *> g_group;  // a group's sends and receives

// Queued on a stream by ncclGroupEnd: completes one message. A send whose buffer changed since
// it was posted (written before anything waited for the send) aborts: on a GPU the receiver
// could get either contents.
static void wait_request(void *p) {
  emu_msg *m = (emu_msg *)p;
  if (m->send && fnv1a(m->buf, m->bytes) != m->hash)
    die("a send's buffer (%zu bytes at %p) was written while the send was in flight, before its "
        "stream's work was waited for", m->bytes, (void *)m->buf);
  wait_for(m);
}

static ncclResult_t p2p(bool is_send, const void *buf, size_t n, int peer, ncclComm_t c,
                        cudaStream_t st) {
  vt_emu::flush_stream(st);
  if (peer < 0 || peer >= c->size || peer == c->rank) return ncclInvalidArgument;
  const size_t bytes = n * sizeof(float);
  const uint64_t hash = is_send ? fnv1a(buf, bytes) : 0;  // before the thread may move it
  emu_msg *m = post(c, peer, KIND_P2P, is_send, buf, bytes, st, hash);
  if (g_group_depth == 0)
    wait_for(m);
  else
    g_group.push_back(m);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t st) {
  return p2p(true, s, n, peer, c, st);
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t st) {
  return p2p(false, r, n, peer, c, st);
}

ncclResult_t ncclGroupStart(void) {
  g_group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth == 0) {
    for (emu_msg *m : g_group) vt_emu::defer_on_stream(m->stream, wait_request, m);
    g_group.clear();
  }
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
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }  // the job is ending anyway
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *result) {
  *result = ncclSuccess;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSystemError ? g_error : "emulated NCCL: a bad argument";
}
const char *ncclGetLastError(ncclComm_t) { return g_error; }
