// nccl_emu_internal.h: what the emulated NCCL's two files share: the communicators and the
// messages that the progress thread of nccl_emu_comm.cpp moves over their links, which the
// operations of nccl_emu.cpp post and wait for.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <vector>

#include <nccl.h>

namespace nccl_emu {

enum { KIND_COLLECTIVE = 1, KIND_P2P = 2, KIND_CONTROL = 3 };

// The addresses of a communicator's members, by rank.
struct emu_addr {
  uint32_t ip, port;
};

// One send or receive on a link: its 16-byte header, then its payload.
struct emu_msg {
  char *buf;
  size_t bytes;
  uint32_t kind;
  bool send;
  uint32_t head[4];  // magic, kind, size (low, high)
  size_t moved = 0;  // of the header and payload together
  bool complete = false;
};

struct emu_link {
  int fd = -1, peer = -1;
  std::deque<emu_msg *> sends, recvs;
};

// Ends the process with the message (a mistake a GPU would not report, or not at once).
[[noreturn]] void die(const char *fmt, ...);
uint64_t fnv1a(const void *p, size_t n);

}  // namespace nccl_emu

struct emu_nccl {
  int rank, size;
  std::vector<nccl_emu::emu_addr> addrs;     // by rank
  std::vector<nccl_emu::emu_link *> links;   // by rank; none to itself
};

namespace nccl_emu {

// Queues a send or receive of `bytes` at buf to or from `peer` on the thread, which moves it in
// the link's order.
emu_msg *post(emu_nccl *c, int peer, uint32_t kind, bool is_send, const void *buf, size_t bytes);
// Waits until the thread has moved m (then frees it), or each of ms.
void wait_for(emu_msg *m);
void wait_all(const std::vector<emu_msg *> &ms);

}  // namespace nccl_emu
