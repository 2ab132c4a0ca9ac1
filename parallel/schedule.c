// schedule.c: GPipe, 1F1B and interleaved 1F1B action lists, their printer, the message-order
// check and the rendezvous simulator that the trainer, the tests and the pipeline benchmark use to
// prove the lists deadlock-free and to predict the bubble.
// Must not depend on MPI, NCCL, CUDA or the model: the executor in launch/ does the transfers.
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

static const char *const g_names[] = {"gpipe", "1f1b", "interleaved"};

vt_status vt_schedule_parse(const char *name, vt_schedule_kind *kind) {
  for (int k = 0; name && k < 3; k++)
    if (strcmp(name, g_names[k]) == 0) {
      *kind = (vt_schedule_kind)k;
      return VT_OK;
    }
  return VT_ERR_INPUT;
}

const char *vt_schedule_name(vt_schedule_kind kind) {
  return (int)kind >= 0 && (int)kind < 3 ? g_names[kind] : "?";
}

vt_status vt_schedule_spec_check(const vt_schedule_spec *s, char *err, size_t size) {
  const char *why = NULL;
  if (s->pp_size < 1 || s->n_micro < 1 || s->chunks < 1)
    why = "pipeline ranks, micro-batches and chunks must each be at least 1";
  else if (s->chunks > VT_SCHEDULE_MAX_CHUNKS)
    why = "too many model chunks per pipeline rank (at most 64)";
  else if ((int)s->kind < 0 || (int)s->kind > 2)
    why = "unknown schedule kind";
  else if (s->kind != VT_SCHEDULE_INTERLEAVED && s->chunks != 1)
    why = "more than one model chunk per pipeline rank needs the interleaved schedule";
  else if (s->kind == VT_SCHEDULE_INTERLEAVED && s->pp_size < 2)
    why = "the interleaved schedule needs at least 2 pipeline ranks";
  else if (s->kind == VT_SCHEDULE_INTERLEAVED && s->chunks < 2)
    why = "the interleaved schedule needs at least 2 model chunks per pipeline rank";
  else if (s->kind == VT_SCHEDULE_INTERLEAVED && s->n_micro % s->pp_size != 0)
    why = "the interleaved schedule needs the micro-batches per step to be a multiple of the "
          "pipeline ranks (it takes them in groups of pp)";
  if (why && err) snprintf(err, size, "%s", why);
  return why ? VT_ERR_INPUT : VT_OK;
}

// Each unit (m * v of them) has one forward and one backward, each with at most one receive
// before and one send after (plain order; fusing only shrinks the list) or one transfer action
// after it (lockstep), plus the first receive.
int vt_schedule_max_actions(const vt_schedule_spec *s) {
  const int units = (s->n_micro > 0 ? s->n_micro : 0) * (s->chunks > 0 ? s->chunks : 1);
  return 6 * units;
}

int vt_schedule_send_peer(const vt_schedule_spec *s, int r, vt_schedule_xfer_kind kind) {
  const int p = s->pp_size;
  return kind == VT_XFER_ACT ? (r + 1) % p : (r + p - 1) % p;
}

int vt_schedule_recv_peer(const vt_schedule_spec *s, int r, vt_schedule_xfer_kind kind) {
  return vt_schedule_send_peer(s, r, kind == VT_XFER_ACT ? VT_XFER_GRAD : VT_XFER_ACT);
}

typedef struct {
  vt_schedule_action *out;
  int count, capacity;
} builder;

static void push(builder *b, vt_schedule_action a) {
  VT_CHECK(b->count < b->capacity, "schedule: action buffer of %d is too small", b->capacity);
  b->out[b->count++] = a;
}

static vt_schedule_action compute(vt_schedule_op op, int mb, int chunk) {
  return (vt_schedule_action){op, mb, chunk, 0, 0, {{0}}, {{0}}};
}

static vt_schedule_action transfer(void) { return compute(VT_SCHEDULE_TRANSFER, -1, -1); }

static void add_xfer(vt_schedule_action *a, int is_send, vt_schedule_xfer_kind kind, int mb,
                     int chunk) {
  int *n = is_send ? &a->nsend : &a->nrecv;
  VT_CHECK(*n < 2, "schedule: more than two %s in one action", is_send ? "sends" : "receives");
  (is_send ? a->send : a->recv)[(*n)++] = (vt_schedule_xfer){kind, mb, chunk};
}

// Virtual stage vs = chunk * p + rank: the first one (0) has no input to receive, the last
// (p*v - 1) no output to send.
static int first_vs(const vt_schedule_spec *s, int r, int chunk) {
  return chunk * s->pp_size + r == 0;
}
static int last_vs(const vt_schedule_spec *s, int r, int chunk) {
  return chunk * s->pp_size + r == s->pp_size * s->chunks - 1;
}

// Plain order with fusing (GPipe, 1F1B): a send directly followed by a receive becomes one action.
static void push_xfer(builder *b, int is_send, vt_schedule_xfer_kind kind, int mb, int chunk) {
  if (!is_send && b->count > 0) {
    vt_schedule_action *last = &b->out[b->count - 1];
    if (last->op == VT_SCHEDULE_TRANSFER && last->nsend == 1 && last->nrecv == 0) {
      add_xfer(last, 0, kind, mb, chunk);
      return;
    }
  }
  vt_schedule_action a = transfer();
  add_xfer(&a, is_send, kind, mb, chunk);
  push(b, a);
}

// A unit's compute with its transfers in plain order.
static void unit(builder *b, const vt_schedule_spec *s, int r, int backward, int mb, int chunk) {
  const int first = first_vs(s, r, chunk), last = last_vs(s, r, chunk);
  if (backward ? !last : !first) push_xfer(b, 0, backward ? VT_XFER_GRAD : VT_XFER_ACT, mb, chunk);
  push(b, compute(backward ? VT_SCHEDULE_BACKWARD : VT_SCHEDULE_FORWARD, mb, chunk));
  if (backward ? !first : !last) push_xfer(b, 1, backward ? VT_XFER_GRAD : VT_XFER_ACT, mb, chunk);
}

// Interleaved: the k-th forward (or backward) unit of a rank: micro-batches in groups of p, each
// group through every chunk in turn; backwards visit the chunks in reverse.
static void nth_unit(const vt_schedule_spec *s, int k, int backward, int *mb, int *chunk) {
  const int p = s->pp_size, v = s->chunks, within = k % (p * v);
  *mb = k / (p * v) * p + within % p;
  *chunk = backward ? v - 1 - within / p : within / p;
}

// Interleaved, lockstep: the compute of forward unit f (or -1) and backward unit k (or -1), then
// one action with their outputs' sends and the receives for forward unit f_next and backward unit
// k_next (-1: none).
static void lockstep(builder *b, const vt_schedule_spec *s, int r, int f, int k, int f_next,
                     int k_next) {
  const int units = s->n_micro * s->chunks;
  int mb, chunk;
  vt_schedule_action x = transfer();
  if (f >= 0) {
    nth_unit(s, f, 0, &mb, &chunk);
    push(b, compute(VT_SCHEDULE_FORWARD, mb, chunk));
    if (!last_vs(s, r, chunk)) add_xfer(&x, 1, VT_XFER_ACT, mb, chunk);
  }
  if (k >= 0) {
    nth_unit(s, k, 1, &mb, &chunk);
    push(b, compute(VT_SCHEDULE_BACKWARD, mb, chunk));
    if (!first_vs(s, r, chunk)) add_xfer(&x, 1, VT_XFER_GRAD, mb, chunk);
  }
  if (f_next >= 0 && f_next < units) {
    nth_unit(s, f_next, 0, &mb, &chunk);
    if (!first_vs(s, r, chunk)) add_xfer(&x, 0, VT_XFER_ACT, mb, chunk);
  }
  if (k_next >= 0 && k_next < units) {
    nth_unit(s, k_next, 1, &mb, &chunk);
    if (!last_vs(s, r, chunk)) add_xfer(&x, 0, VT_XFER_GRAD, mb, chunk);
  }
  if (x.nsend + x.nrecv > 0) push(b, x);
}

int vt_schedule_build(const vt_schedule_spec *s, int r, vt_schedule_action *actions,
                      int capacity) {
  char err[160];
  VT_CHECK(vt_schedule_spec_check(s, err, sizeof err) == VT_OK, "schedule: %s", err);
  VT_CHECK(r >= 0 && r < s->pp_size, "schedule: pp_rank %d outside [0, %d)", r, s->pp_size);
  builder b = {actions, 0, capacity};
  const int p = s->pp_size, m = s->n_micro, units = m * s->chunks;
  int mb, chunk;
  if (s->kind == VT_SCHEDULE_GPIPE) {
    for (int i = 0; i < m; i++) unit(&b, s, r, 0, i, 0);
    for (int i = 0; i < m; i++) unit(&b, s, r, 1, i, 0);
    return b.count;
  }
  // 1F1B: the warmup fills the pipe so that, in steady state, the backward of unit k arrives from
  // downstream just as this rank has finished forward w+k. Interleaved: the first backward is of
  // the last chunk, which the first (v - 1) * p forwards lead up to, and each rank downstream
  // both forwards and backwards before its gradient comes back, hence twice (p - r - 1).
  int warmup = s->kind == VT_SCHEDULE_1F1B ? p - r - 1 : 2 * (p - r - 1) + (s->chunks - 1) * p;
  if (warmup > units) warmup = units;
  if (s->kind == VT_SCHEDULE_1F1B) {
    for (int k = 0; k < warmup; k++) unit(&b, s, r, 0, k, 0);
    for (int k = 0; k < units - warmup; k++) {
      unit(&b, s, r, 0, warmup + k, 0);
      unit(&b, s, r, 1, k, 0);
    }
    for (int k = units - warmup; k < units; k++) unit(&b, s, r, 1, k, 0);
    return b.count;
  }
  nth_unit(s, 0, 0, &mb, &chunk);
  if (!first_vs(s, r, chunk)) {  // the first forward's input
    vt_schedule_action x = transfer();
    add_xfer(&x, 0, VT_XFER_ACT, mb, chunk);
    push(&b, x);
  }
  // The last forward before the first backward also receives that backward's gradient.
  for (int k = 0; k < warmup; k++) lockstep(&b, s, r, k, -1, k + 1, k == warmup - 1 ? 0 : -1);
  for (int k = 0; k < units - warmup; k++) lockstep(&b, s, r, warmup + k, k, warmup + k + 1, k + 1);
  for (int k = units - warmup; k < units; k++) lockstep(&b, s, r, -1, k, -1, k + 1);
  return b.count;
}

// Calls fn(ctx, mb, chunk, +1) at each unit's first use (the receive of its input, or its
// forward) and (.., -1) at its backward.
static void walk_lifetimes(const vt_schedule_action *actions, int count,
                           void (*fn)(void *ctx, int mb, int chunk, int delta), void *ctx) {
  int mmax = 1, vmax = 1;  // micro-batches and chunks the list names (any list works)
  for (int i = 0; i < count; i++)
    if (actions[i].op == VT_SCHEDULE_FORWARD) {
      if (actions[i].mb + 1 > mmax) mmax = actions[i].mb + 1;
      if (actions[i].chunk + 1 > vmax) vmax = actions[i].chunk + 1;
    }
  const int stride = mmax;
  unsigned char *started = calloc((size_t)vmax * mmax, 1);
  VT_CHECK(started != NULL, "schedule: out of memory");
  for (int i = 0; i < count; i++) {
    const vt_schedule_action *a = &actions[i];
    for (int h = 0; a->op == VT_SCHEDULE_TRANSFER && h < a->nrecv; h++) {
      const vt_schedule_xfer x = a->recv[h];
      if (x.kind != VT_XFER_ACT || started[x.chunk * stride + x.mb]) continue;
      started[x.chunk * stride + x.mb] = 1;
      fn(ctx, x.mb, x.chunk, +1);
    }
    if (a->op == VT_SCHEDULE_FORWARD && !started[a->chunk * stride + a->mb]) {
      started[a->chunk * stride + a->mb] = 1;
      fn(ctx, a->mb, a->chunk, +1);
    }
    if (a->op == VT_SCHEDULE_BACKWARD) fn(ctx, a->mb, a->chunk, -1);
  }
  free(started);
}

typedef struct {
  int live, peak;
} live_count;

static void count_live(void *ctx, int mb, int chunk, int delta) {
  (void)mb, (void)chunk;
  live_count *c = ctx;
  c->live += delta;
  if (c->live > c->peak) c->peak = c->live;
}

int vt_schedule_max_in_flight(const vt_schedule_action *actions, int count) {
  live_count c = {0, 0};
  walk_lifetimes(actions, count, count_live, &c);
  return c.peak;
}

typedef struct {
  int n_micro, used;
  int *unit_slot;
  unsigned char *busy;  // per slot; at most one per unit
} slot_state;

static void take_or_free(void *ctx, int mb, int chunk, int delta) {
  slot_state *s = ctx;
  int *u = &s->unit_slot[chunk * s->n_micro + mb];
  if (delta < 0) {
    s->busy[*u] = 0;
    return;
  }
  int k = 0;
  while (s->busy[k]) k++;
  s->busy[k] = 1, *u = k;
  if (k + 1 > s->used) s->used = k + 1;
}

int vt_schedule_assign_slots(const vt_schedule_spec *spec, const vt_schedule_action *actions,
                             int count, int *unit_slot) {
  const int units = spec->n_micro * spec->chunks;
  slot_state s = {spec->n_micro, 0, unit_slot, calloc((size_t)units + 1, 1)};
  VT_CHECK(s.busy != NULL, "schedule: out of memory");
  for (int u = 0; u < units; u++) unit_slot[u] = -1;
  walk_lifetimes(actions, count, take_or_free, &s);
  free(s.busy);
  return s.used;
}

// Every rank's list, allocated together (lists[r] points into one block); free(lists[0]) and
// free(lists) release them.
static vt_schedule_action **build_all(const vt_schedule_spec *s, int *counts) {
  const int cap = vt_schedule_max_actions(s), p = s->pp_size;
  vt_schedule_action **lists = malloc((size_t)p * sizeof *lists);
  vt_schedule_action *block = malloc((size_t)p * cap * sizeof *block);
  VT_CHECK(lists && block, "schedule: out of memory for %d x %d actions", p, cap);
  for (int r = 0; r < p; r++) {
    lists[r] = block + (size_t)r * cap;
    counts[r] = vt_schedule_build(s, r, lists[r], cap);
  }
  return lists;
}

static void free_all(vt_schedule_action **lists) {
  free(lists[0]);
  free(lists);
}

int vt_schedule_stage_in_flight(const vt_schedule_spec *s, int r) {
  const int cap = vt_schedule_max_actions(s);
  vt_schedule_action *a = malloc((size_t)cap * sizeof *a);
  VT_CHECK(a != NULL, "schedule: out of memory for %d actions", cap);
  const int peak = vt_schedule_max_in_flight(a, vt_schedule_build(s, r, a, cap));
  free(a);
  return peak;
}

double vt_schedule_bubble_formula(const vt_schedule_spec *s) {
  const int p = s->pp_size, v = s->kind == VT_SCHEDULE_INTERLEAVED ? s->chunks : 1;
  return (double)(p - 1) / (double)(v * s->n_micro + p - 1);
}

static void xfer_str(char *buf, size_t size, int is_send, vt_schedule_xfer x) {
  const char *k = x.kind == VT_XFER_ACT ? "A" : "G";
  if (x.chunk > 0) snprintf(buf, size, "%s%s%d.%d", is_send ? "S" : "R", k, x.mb, x.chunk);
  else snprintf(buf, size, "%s%s%d", is_send ? "S" : "R", k, x.mb);
}

const char *vt_schedule_action_str(vt_schedule_action a, char *buf, size_t size) {
  if (a.op == VT_SCHEDULE_FORWARD || a.op == VT_SCHEDULE_BACKWARD) {
    const char *t = a.op == VT_SCHEDULE_FORWARD ? "F" : "B";
    if (a.chunk > 0) snprintf(buf, size, "%s%d.%d", t, a.mb, a.chunk);
    else snprintf(buf, size, "%s%d", t, a.mb);
    return buf;
  }
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < a.nsend + a.nrecv && n + 1 < size; i++) {
    if (i > 0) buf[n++] = '+', buf[n] = '\0';
    const int is_send = i < a.nsend;
    xfer_str(buf + n, size - n, is_send, is_send ? a.send[i] : a.recv[i - a.nsend]);
    n += strlen(buf + n);
  }
  return buf;
}

void vt_schedule_print_stage(FILE *f, int pp_rank, const vt_schedule_action *actions, int count) {
  char tok[48];
  fprintf(f, "stage %d (%d actions):", pp_rank, count);
  for (int i = 0; i < count; i++) fprintf(f, " %s", vt_schedule_action_str(actions[i], tok, sizeof tok));
  fprintf(f, "\n");
}

void vt_schedule_print(FILE *f, const vt_schedule_spec *s) {
  int *counts = malloc((size_t)s->pp_size * sizeof *counts);
  VT_CHECK(counts != NULL, "schedule: out of memory");
  vt_schedule_action **lists = build_all(s, counts);
  fprintf(f, "%s schedule, pp %d, %d micro-batches", vt_schedule_name(s->kind), s->pp_size,
          s->n_micro);
  if (s->chunks > 1) fprintf(f, ", %d chunks per rank (F3.1: micro-batch 3, chunk 1)", s->chunks);
  fprintf(f, " (SA/RA: activation send/recv, SG/RG: gradient)\n");
  for (int r = 0; r < s->pp_size; r++) vt_schedule_print_stage(f, r, lists[r], counts[r]);
  free_all(lists);
  free(counts);
}

// ---- messages, pairing and the simulator ----

// A message is named by its kind, micro-batch and the virtual-stage boundary it crosses (between
// stages b and b + 1), which the sender and the receiver both know from their own unit.
typedef struct {
  int kind, mb, boundary;
} message;

static message message_of(const vt_schedule_spec *s, int r, int is_send, vt_schedule_xfer x) {
  const int vs = x.chunk * s->pp_size + r;
  // ACT crosses (vs, vs+1) when sent, (vs-1, vs) when received; GRAD the other way round.
  const int boundary = (x.kind == VT_XFER_ACT) == is_send ? vs : vs - 1;
  return (message){x.kind, x.mb, boundary};
}

static int same_message(message a, message b) {
  return a.kind == b.kind && a.mb == b.mb && a.boundary == b.boundary;
}

// The n-th message (in issue order: an action's sends, then its receives) that rank a sends to
// rank b (is_send) or that b receives from a; 0 when there is none. *at: where to go on from.
static int next_message(const vt_schedule_spec *s, const vt_schedule_action *list, int count,
                        int me, int peer, int is_send, int *at, message *out) {
  for (; *at < count * 4; (*at)++) {
    const vt_schedule_action *x = &list[*at / 4];
    const int h = *at % 4;  // halves: send 0, send 1, recv 0, recv 1
    if (x->op != VT_SCHEDULE_TRANSFER || (h < 2) != is_send) continue;
    if (is_send ? h >= x->nsend : h - 2 >= x->nrecv) continue;
    const vt_schedule_xfer y = is_send ? x->send[h] : x->recv[h - 2];
    const int other = is_send ? vt_schedule_send_peer(s, me, y.kind)
                              : vt_schedule_recv_peer(s, me, y.kind);
    if (other != peer) continue;
    *out = message_of(s, me, is_send, y);
    (*at)++;
    return 1;
  }
  return 0;
}

vt_status vt_schedule_check_pairs(const vt_schedule_spec *s,
                                  const vt_schedule_action *const *lists, const int *counts,
                                  char *err, size_t size) {
  const int p = s->pp_size;
  for (int a = 0; a < p; a++)
    for (int dir = 0; dir < 2; dir++) {
      const int b = dir ? (a + 1) % p : (a + p - 1) % p;
      if (b == a || (dir == 0 && b == (a + 1) % p)) continue;  // p 2: one pair each way, once
      int i = 0, j = 0;
      for (int n = 0;; n++) {  // a's sends to b and b's receives from a, side by side
        message ms = {0, 0, 0}, mr = {0, 0, 0};
        const int have_s = next_message(s, lists[a], counts[a], a, b, 1, &i, &ms);
        const int have_r = next_message(s, lists[b], counts[b], b, a, 0, &j, &mr);
        if (!have_s && !have_r) break;
        if (have_s != have_r || !same_message(ms, mr)) {
          if (err)
            snprintf(err, size, "%s schedule (pp %d, %d micro-batches, %d chunks): message %d "
                     "from rank %d to rank %d differs between sender and receiver",
                     vt_schedule_name(s->kind), p, s->n_micro, s->chunks, n, a, b);
          return VT_ERR_INPUT;
        }
      }
    }
  return VT_OK;
}

typedef struct {
  int pc;
  double arrive;  // when the rank reached its current action
  double done;    // latest completion among the current action's finished halves
  int pending;    // halves of the current action not yet matched: bit h (send 0, 1, recv 0, 1)
} sim_rank;

static void enter(sim_rank *st, const vt_schedule_action *list, int count) {
  st->done = st->arrive;
  st->pending = 0;
  if (st->pc >= count || list[st->pc].op != VT_SCHEDULE_TRANSFER) return;
  const vt_schedule_action *x = &list[st->pc];
  for (int h = 0; h < 4; h++)
    if (h < 2 ? h < x->nsend : h - 2 < x->nrecv) st->pending |= 1 << h;
}

vt_schedule_sim_result vt_schedule_simulate(const vt_schedule_spec *s,
                                            const vt_schedule_action *const *lists,
                                            const int *counts, double t_fwd, double t_bwd,
                                            double *busy) {
  const int p = s->pp_size;
  sim_rank *st = calloc((size_t)p, sizeof *st);
  VT_CHECK(st != NULL, "schedule sim: out of memory");
  for (int r = 0; r < p; r++) {
    enter(&st[r], lists[r], counts[r]);
    if (busy) busy[r] = 0.0;
  }
  int progress = 1;
  while (progress) {
    progress = 0;
    // Match every pending send half against the peer's current action. A rank only ever offers
    // its current action, which is exactly what blocking calls allow.
    for (int r = 0; r < p; r++)
      for (int h = 0; h < 2; h++) {
        if (!(st[r].pending & 1 << h)) continue;
        const vt_schedule_xfer x = lists[r][st[r].pc].send[h];
        const int q = vt_schedule_send_peer(s, r, x.kind);
        for (int g = 0; g < 2; g++) {
          if (!(st[q].pending & 1 << (2 + g))) continue;
          const vt_schedule_xfer y = lists[q][st[q].pc].recv[g];
          if (vt_schedule_recv_peer(s, q, y.kind) != r ||
              !same_message(message_of(s, r, 1, x), message_of(s, q, 0, y)))
            continue;
          const double t = st[r].arrive > st[q].arrive ? st[r].arrive : st[q].arrive;
          st[r].pending &= ~(1 << h);
          st[q].pending &= ~(1 << (2 + g));
          if (t > st[r].done) st[r].done = t;
          if (t > st[q].done) st[q].done = t;
          progress = 1;
          break;
        }
      }
    for (int r = 0; r < p; r++) {
      while (st[r].pc < counts[r] && !st[r].pending) {
        const vt_schedule_op op = lists[r][st[r].pc].op;
        if (op == VT_SCHEDULE_FORWARD || op == VT_SCHEDULE_BACKWARD) {
          const double d = op == VT_SCHEDULE_FORWARD ? t_fwd : t_bwd;
          st[r].arrive += d;
          if (busy) busy[r] += d;
        } else {
          st[r].arrive = st[r].done;
        }
        st[r].pc++;
        enter(&st[r], lists[r], counts[r]);
        progress = 1;
      }
    }
  }
  vt_schedule_sim_result res = {1, -1, -1, 0.0};
  for (int r = 0; r < p; r++) {
    if (st[r].pc < counts[r] && res.completed) {
      res.completed = 0;
      res.stuck_stage = r;
      res.stuck_index = st[r].pc;
    }
    if (st[r].arrive > res.makespan) res.makespan = st[r].arrive;
  }
  if (!res.completed) res.makespan = 0.0;
  free(st);
  return res;
}

vt_status vt_schedule_verify(const vt_schedule_spec *s, char *err, size_t size) {
  if (vt_schedule_spec_check(s, err, size) != VT_OK) return VT_ERR_INPUT;
  int *counts = malloc((size_t)s->pp_size * sizeof *counts);
  VT_CHECK(counts != NULL, "schedule: out of memory");
  vt_schedule_action **lists = build_all(s, counts);
  const vt_schedule_action *const *cl = (const vt_schedule_action *const *)lists;
  vt_status rc = vt_schedule_check_pairs(s, cl, counts, err, size);
  if (rc == VT_OK) {
    const vt_schedule_sim_result r = vt_schedule_simulate(s, cl, counts, 1.0, 2.0, NULL);
    if (!r.completed) {
      if (err)
        snprintf(err, size, "%s schedule (pp %d, %d micro-batches, %d chunks) would deadlock: "
                 "rank %d waits forever at action %d", vt_schedule_name(s->kind), s->pp_size,
                 s->n_micro, s->chunks, r.stuck_stage, r.stuck_index);
      rc = VT_ERR_INPUT;
    }
  }
  free_all(lists);
  free(counts);
  return rc;
}
