// schedule.c: GPipe and 1F1B action lists, their printer and the rendezvous simulator that the
// tests and the pipeline benchmark use to prove the lists deadlock-free and to predict the bubble.
// Must not depend on MPI, NCCL, CUDA or the model: the executor in parallel/ does the transfers.
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

vt_status vt_schedule_parse(const char *name, vt_schedule_kind *kind) {
  if (name && strcmp(name, "gpipe") == 0) {
    *kind = VT_SCHEDULE_GPIPE;
    return VT_OK;
  }
  if (name && strcmp(name, "1f1b") == 0) {
    *kind = VT_SCHEDULE_1F1B;
    return VT_OK;
  }
  return VT_ERR_INPUT;
}

const char *vt_schedule_name(vt_schedule_kind kind) {
  switch (kind) {
    case VT_SCHEDULE_GPIPE: return "gpipe";
    case VT_SCHEDULE_1F1B: return "1f1b";
  }
  return "?";
}

// Per microbatch at most: one forward, one backward and four transfers (fusing only shrinks it).
int vt_schedule_max_actions(int n_micro) { return 6 * (n_micro > 0 ? n_micro : 0); }

typedef struct {
  vt_schedule_action *out;
  int count, capacity;
} builder;

// Fusing at push time keeps the two generators simple: they emit the plain order, and any send
// followed directly by a receive from the same neighbour becomes one Sendrecv (see schedule.h).
static void push(builder *b, vt_schedule_op op, int mb) {
  if (b->count > 0) {
    vt_schedule_action *last = &b->out[b->count - 1];
    if (op == VT_SCHEDULE_RECV_GRAD && last->op == VT_SCHEDULE_SEND_ACT) {
      last->op = VT_SCHEDULE_SEND_ACT_RECV_GRAD;
      last->recv_mb = mb;
      return;
    }
    if (op == VT_SCHEDULE_RECV_ACT && last->op == VT_SCHEDULE_SEND_GRAD) {
      last->op = VT_SCHEDULE_SEND_GRAD_RECV_ACT;
      last->recv_mb = mb;
      return;
    }
  }
  VT_CHECK(b->count < b->capacity, "schedule: action buffer of %d is too small", b->capacity);
  b->out[b->count++] = (vt_schedule_action){op, mb, -1};
}

static void forward(builder *b, int first, int last, int mb) {
  if (!first) push(b, VT_SCHEDULE_RECV_ACT, mb);
  push(b, VT_SCHEDULE_FORWARD, mb);
  if (!last) push(b, VT_SCHEDULE_SEND_ACT, mb);
}

static void backward(builder *b, int first, int last, int mb) {
  if (!last) push(b, VT_SCHEDULE_RECV_GRAD, mb);
  push(b, VT_SCHEDULE_BACKWARD, mb);
  if (!first) push(b, VT_SCHEDULE_SEND_GRAD, mb);
}

int vt_schedule_build(vt_schedule_kind kind, int pp_size, int pp_rank, int n_micro,
                      vt_schedule_action *actions, int capacity) {
  VT_CHECK(pp_size >= 1, "schedule: pp_size %d must be at least 1", pp_size);
  VT_CHECK(pp_rank >= 0 && pp_rank < pp_size, "schedule: pp_rank %d outside [0, %d)", pp_rank,
           pp_size);
  VT_CHECK(n_micro >= 1, "schedule: n_micro %d must be at least 1", n_micro);
  VT_CHECK(kind == VT_SCHEDULE_GPIPE || kind == VT_SCHEDULE_1F1B, "schedule: unknown kind %d",
           (int)kind);
  builder b = {actions, 0, capacity};
  int first = pp_rank == 0, last = pp_rank == pp_size - 1;
  if (kind == VT_SCHEDULE_GPIPE) {
    for (int i = 0; i < n_micro; i++) forward(&b, first, last, i);
    for (int i = 0; i < n_micro; i++) backward(&b, first, last, i);
    return b.count;
  }
  // 1F1B: the warmup fills the pipe so that, in steady state, the backward of microbatch k
  // arrives from downstream just as this stage has finished forward w+k.
  int warmup = pp_size - pp_rank - 1;
  if (warmup > n_micro) warmup = n_micro;
  for (int i = 0; i < warmup; i++) forward(&b, first, last, i);
  for (int k = 0; k < n_micro - warmup; k++) {
    forward(&b, first, last, warmup + k);
    backward(&b, first, last, k);
  }
  for (int k = n_micro - warmup; k < n_micro; k++) backward(&b, first, last, k);
  return b.count;
}

int vt_schedule_max_in_flight(const vt_schedule_action *actions, int count) {
  int live = 0, peak = 0;
  for (int i = 0; i < count; i++) {
    if (actions[i].op == VT_SCHEDULE_FORWARD && ++live > peak) peak = live;
    if (actions[i].op == VT_SCHEDULE_BACKWARD) live--;
  }
  return peak;
}

int vt_schedule_stage_in_flight(vt_schedule_kind kind, int pp_size, int pp_rank, int n_micro) {
  int cap = vt_schedule_max_actions(n_micro);
  vt_schedule_action *a = malloc((size_t)cap * sizeof *a);
  VT_CHECK(a != NULL, "schedule: out of memory for %d actions", cap);
  int n = vt_schedule_build(kind, pp_size, pp_rank, n_micro, a, cap);
  int peak = vt_schedule_max_in_flight(a, n);
  free(a);
  return peak;
}

double vt_schedule_bubble_formula(int pp_size, int n_micro) {
  return (double)(pp_size - 1) / (double)(n_micro + pp_size - 1);
}

const char *vt_schedule_action_str(vt_schedule_action a, char *buf, size_t size) {
  static const char *tok[] = {"F", "B", "SA", "RA", "SG", "RG"};
  if (a.op == VT_SCHEDULE_SEND_ACT_RECV_GRAD)
    snprintf(buf, size, "SA%d+RG%d", a.mb, a.recv_mb);
  else if (a.op == VT_SCHEDULE_SEND_GRAD_RECV_ACT)
    snprintf(buf, size, "SG%d+RA%d", a.mb, a.recv_mb);
  else if ((int)a.op >= 0 && a.op <= VT_SCHEDULE_RECV_GRAD)
    snprintf(buf, size, "%s%d", tok[a.op], a.mb);
  else
    snprintf(buf, size, "?%d", (int)a.op);
  return buf;
}

void vt_schedule_print_stage(FILE *f, int pp_rank, const vt_schedule_action *actions, int count) {
  char tok[32];
  fprintf(f, "stage %d (%d actions):", pp_rank, count);
  for (int i = 0; i < count; i++) fprintf(f, " %s", vt_schedule_action_str(actions[i], tok, sizeof tok));
  fprintf(f, "\n");
}

void vt_schedule_print(FILE *f, vt_schedule_kind kind, int pp_size, int n_micro) {
  int cap = vt_schedule_max_actions(n_micro);
  vt_schedule_action *a = malloc((size_t)cap * sizeof *a);
  VT_CHECK(a != NULL, "schedule: out of memory for %d actions", cap);
  fprintf(f, "%s schedule, pp %d, %d microbatches (SA/RA: activation send/recv, SG/RG: gradient)\n",
          vt_schedule_name(kind), pp_size, n_micro);
  for (int s = 0; s < pp_size; s++) {
    int n = vt_schedule_build(kind, pp_size, s, n_micro, a, cap);
    vt_schedule_print_stage(f, s, a, n);
  }
  free(a);
}

// ---- simulator ----

enum { CHAN_ACT = 0, CHAN_GRAD = 1 };

// The send half of an action: channel and microbatch; 0 if it sends nothing.
static int send_half(vt_schedule_action a, int *chan, int *mb) {
  switch (a.op) {
    case VT_SCHEDULE_SEND_ACT:
    case VT_SCHEDULE_SEND_ACT_RECV_GRAD: *chan = CHAN_ACT; *mb = a.mb; return 1;
    case VT_SCHEDULE_SEND_GRAD:
    case VT_SCHEDULE_SEND_GRAD_RECV_ACT: *chan = CHAN_GRAD; *mb = a.mb; return 1;
    default: return 0;
  }
}

static int recv_half(vt_schedule_action a, int *chan, int *mb) {
  switch (a.op) {
    case VT_SCHEDULE_RECV_ACT: *chan = CHAN_ACT; *mb = a.mb; return 1;
    case VT_SCHEDULE_RECV_GRAD: *chan = CHAN_GRAD; *mb = a.mb; return 1;
    case VT_SCHEDULE_SEND_ACT_RECV_GRAD: *chan = CHAN_GRAD; *mb = a.recv_mb; return 1;
    case VT_SCHEDULE_SEND_GRAD_RECV_ACT: *chan = CHAN_ACT; *mb = a.recv_mb; return 1;
    default: return 0;
  }
}

typedef struct {
  int pc;
  double arrive;     // when the stage reached its current action
  double done;       // latest completion among the current action's finished halves
  int send_pending, recv_pending;
} sim_stage;

static void enter(sim_stage *st, const vt_schedule_action *list, int count) {
  int chan, mb;
  st->done = st->arrive;
  st->send_pending = st->pc < count && send_half(list[st->pc], &chan, &mb);
  st->recv_pending = st->pc < count && recv_half(list[st->pc], &chan, &mb);
}

vt_schedule_sim_result vt_schedule_simulate(int pp_size, const vt_schedule_action *const *lists,
                                            const int *counts, double t_fwd, double t_bwd,
                                            double *busy) {
  VT_CHECK(pp_size >= 1, "schedule sim: pp_size %d must be at least 1", pp_size);
  sim_stage *st = calloc((size_t)pp_size, sizeof *st);
  VT_CHECK(st != NULL, "schedule sim: out of memory");
  for (int s = 0; s < pp_size; s++) {
    enter(&st[s], lists[s], counts[s]);
    if (busy) busy[s] = 0.0;
  }
  int progress = 1;
  while (progress) {
    progress = 0;
    // Match every pending send half against the peer's current action. A stage only ever
    // offers its current action, which is exactly what blocking MPI calls allow.
    for (int s = 0; s < pp_size; s++) {
      if (!st[s].send_pending) continue;
      int chan = -1, mb = -1, pchan = -1, pmb = -1;
      send_half(lists[s][st[s].pc], &chan, &mb);
      int q = chan == CHAN_ACT ? s + 1 : s - 1;
      if (q < 0 || q >= pp_size || !st[q].recv_pending) continue;
      recv_half(lists[q][st[q].pc], &pchan, &pmb);
      if (pchan != chan || pmb != mb) continue;
      double t = st[s].arrive > st[q].arrive ? st[s].arrive : st[q].arrive;
      st[s].send_pending = st[q].recv_pending = 0;
      if (t > st[s].done) st[s].done = t;
      if (t > st[q].done) st[q].done = t;
      progress = 1;
    }
    for (int s = 0; s < pp_size; s++) {
      while (st[s].pc < counts[s] && !st[s].send_pending && !st[s].recv_pending) {
        vt_schedule_op op = lists[s][st[s].pc].op;
        if (op == VT_SCHEDULE_FORWARD || op == VT_SCHEDULE_BACKWARD) {
          double d = op == VT_SCHEDULE_FORWARD ? t_fwd : t_bwd;
          st[s].arrive += d;
          if (busy) busy[s] += d;
        } else {
          st[s].arrive = st[s].done;
        }
        st[s].pc++;
        enter(&st[s], lists[s], counts[s]);
        progress = 1;
      }
    }
  }
  vt_schedule_sim_result r = {1, -1, -1, 0.0};
  for (int s = 0; s < pp_size; s++) {
    if (st[s].pc < counts[s] && r.completed) {
      r.completed = 0;
      r.stuck_stage = s;
      r.stuck_index = st[s].pc;
    }
    if (st[s].arrive > r.makespan) r.makespan = st[s].arrive;
  }
  if (!r.completed) r.makespan = 0.0;
  free(st);
  return r;
}
