// schedule_check.c: what is read from built schedule lists: unit lifetimes, activation slots
// and weight sets, in-flight counts, the bubble formulas, the printer, the message-order check
// and the rendezvous simulator (with vt_schedule_verify) that prove the lists deadlock-free and
// predict the bubble.
// Must not depend on MPI, NCCL, CUDA or the model: it only reads lists of integers.
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

// Calls fn(ctx, mb, chunk, +1) at each unit's first use (the receive of its input, or its
// forward) and (.., -1) at its backward, or at its weight action in a list that has them.
static void walk_lifetimes(const vt_schedule_action *actions, int count,
                           void (*fn)(void *ctx, int mb, int chunk, int delta), void *ctx) {
  int mmax = 1, vmax = 1;  // micro-batches and chunks the list names (any list works)
  vt_schedule_op last = VT_SCHEDULE_BACKWARD;
  for (int i = 0; i < count; i++) {
    if (actions[i].op == VT_SCHEDULE_WEIGHT) last = VT_SCHEDULE_WEIGHT;
    if (actions[i].op == VT_SCHEDULE_FORWARD) {
      if (actions[i].mb + 1 > mmax) mmax = actions[i].mb + 1;
      if (actions[i].chunk + 1 > vmax) vmax = actions[i].chunk + 1;
    }
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
    if (a->op == last) fn(ctx, a->mb, a->chunk, -1);
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

int vt_schedule_assign_weight_sets(const vt_schedule_spec *spec, const vt_schedule_action *actions,
                                   int count, int *unit_set) {
  const int units = spec->n_micro * spec->chunks;
  unsigned char *busy = calloc((size_t)units + 1, 1);
  VT_CHECK(busy != NULL, "schedule: out of memory");
  int used = 0;
  for (int u = 0; u < units; u++) unit_set[u] = -1;
  for (int i = 0; i < count; i++) {
    const vt_schedule_action *a = &actions[i];
    if (a->op != VT_SCHEDULE_BACKWARD && a->op != VT_SCHEDULE_WEIGHT) continue;
    int *u = &unit_set[a->chunk * spec->n_micro + a->mb];
    if (a->op == VT_SCHEDULE_WEIGHT) {
      if (*u >= 0) busy[*u] = 0;
      continue;
    }
    if (!vt_schedule_splits_backward(spec->kind)) continue;
    int k = 0;
    while (busy[k]) k++;
    busy[k] = 1, *u = k;
    if (k + 1 > used) used = k + 1;
  }
  free(busy);
  return used;
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

int vt_schedule_stage_in_flight(const vt_schedule_spec *s, int r, int *weight_sets) {
  const int cap = vt_schedule_max_actions(s);
  vt_schedule_action *a = malloc((size_t)cap * sizeof *a);
  int *unit_set = malloc((size_t)s->n_micro * s->chunks * sizeof *unit_set);
  VT_CHECK(a && unit_set, "schedule: out of memory for %d actions", cap);
  const int n = vt_schedule_build(s, r, a, cap);
  const int peak = vt_schedule_max_in_flight(a, n);
  if (weight_sets) *weight_sets = vt_schedule_assign_weight_sets(s, a, n, unit_set);
  free(a);
  free(unit_set);
  return peak;
}

double vt_schedule_bubble_formula(const vt_schedule_spec *s) {
  const int p = s->pp_size, v = s->kind == VT_SCHEDULE_INTERLEAVED ? s->chunks : 1;
  // ZB-H1's steps are counted in passes (F, B, W each one), ZB-V's in chunk passes, the others'
  // in forward-backward pairs
  if (s->kind == VT_SCHEDULE_ZB_H1) return (double)(p - 1) / (double)(3 * s->n_micro + p - 1);
  if (s->kind == VT_SCHEDULE_ZB_V) return (double)(p - 1) / (double)(6 * s->n_micro + p - 1);
  return (double)(p - 1) / (double)(v * s->n_micro + p - 1);
}

const char *vt_schedule_bubble_formula_text(vt_schedule_kind kind) {
  return kind == VT_SCHEDULE_ZB_H1  ? "(p-1)/(3m+p-1)"
         : kind == VT_SCHEDULE_ZB_V ? "(p-1)/(6m+p-1)"
                                    : "(p-1)/(v*m+p-1)";
}

static void xfer_str(char *buf, size_t size, int is_send, vt_schedule_xfer x) {
  const char *k = x.kind == VT_XFER_ACT ? "A" : "G";
  if (x.chunk > 0) snprintf(buf, size, "%s%s%d.%d", is_send ? "S" : "R", k, x.mb, x.chunk);
  else snprintf(buf, size, "%s%s%d", is_send ? "S" : "R", k, x.mb);
}

const char *vt_schedule_action_str(vt_schedule_action a, char *buf, size_t size) {
  if (a.op != VT_SCHEDULE_TRANSFER) {
    const char *t = a.op == VT_SCHEDULE_FORWARD ? "F" : a.op == VT_SCHEDULE_BACKWARD ? "B" : "W";
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
  for (int i = 0; i < count; i++)
    fprintf(f, " %s", vt_schedule_action_str(actions[i], tok, sizeof tok));
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
  const int vs = vt_schedule_vstage(s, r, x.chunk);
  // ACT crosses (vs, vs+1) when sent, (vs-1, vs) when received; GRAD the other way round.
  const int boundary = (x.kind == VT_XFER_ACT) == is_send ? vs : vs - 1;
  return (message){x.kind, x.mb, boundary};
}

static int same_message(message a, message b) {
  return a.kind == b.kind && a.mb == b.mb && a.boundary == b.boundary;
}

// The n-th message of a kind (in issue order: an action's sends, then its receives) that rank a
// sends to rank b (is_send) or that b receives from a; 0 when there is none. *at: where to go on
// from.
static int next_message(const vt_schedule_spec *s, const vt_schedule_action *list, int count,
                        int me, int peer, int kind, int is_send, int *at, message *out) {
  for (; *at < count * 4; (*at)++) {
    const vt_schedule_action *x = &list[*at / 4];
    const int h = *at % 4;  // halves: send 0, send 1, recv 0, recv 1
    if (x->op != VT_SCHEDULE_TRANSFER || (h < 2) != is_send) continue;
    if (is_send ? h >= x->nsend : h - 2 >= x->nrecv) continue;
    const vt_schedule_xfer y = is_send ? x->send[h] : x->recv[h - 2];
    const int other = is_send ? vt_schedule_send_peer(s, me, y) : vt_schedule_recv_peer(s, me, y);
    if (other != peer || (int)y.kind != kind) continue;
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
    for (int b = 0; b < p; b++)
      for (int kind = VT_XFER_ACT; kind <= VT_XFER_GRAD; kind++) {
        int i = 0, j = 0;
        for (int n = 0;; n++) {  // a's sends to b and b's receives from a, side by side
          message ms = {0, 0, 0}, mr = {0, 0, 0};
          const int have_s = next_message(s, lists[a], counts[a], a, b, kind, 1, &i, &ms);
          const int have_r = next_message(s, lists[b], counts[b], b, a, kind, 0, &j, &mr);
          if (!have_s && !have_r) break;
          if (have_s != have_r || !same_message(ms, mr)) {
            if (err)
              snprintf(err, size, "%s schedule (pp %d, %d micro-batches, %d chunks): %s message "
                       "%d from rank %d to rank %d differs between sender and receiver",
                       vt_schedule_name(s->kind), p, s->n_micro, s->chunks,
                       kind == VT_XFER_ACT ? "activation" : "gradient", n, a, b);
            return VT_ERR_INPUT;
          }
        }
      }
  return VT_OK;
}

// A send posted by a deferred-send transfer (the executor's MPI_Isend), from its posting until the
// rank waits for it (the executor's vt_comm_wait_sends).
typedef struct {
  message msg;
  int slot;        // the slot of the unit whose buffer it reads
  double posted;   // when it was posted
  double matched;  // when the receiver took it, or -1
} sim_send;

typedef struct {
  int pc;
  double arrive;  // when the rank reached its current action
  double done;    // latest completion among the current action's finished halves
  int pending;    // halves of the current action not yet matched: bit h (send 0, 1, recv 0, 1)
  sim_send *out;  // deferred sends not waited for yet
  int nout;
  int *unit_slot;  // vt_schedule_assign_slots of the rank's list
} sim_rank;

// Enters the current action: a transfer's halves become pending, or with deferred sends its sends
// are posted and only its receives are pending.
static void enter(const vt_schedule_spec *s, int r, sim_rank *st, const vt_schedule_action *list,
                  int count, int deferred) {
  st->done = st->arrive;
  st->pending = 0;
  if (st->pc >= count || list[st->pc].op != VT_SCHEDULE_TRANSFER) return;
  const vt_schedule_action *x = &list[st->pc];
  for (int h = 0; h < x->nsend; h++)
    if (deferred)
      st->out[st->nout++] = (sim_send){message_of(s, r, 1, x->send[h]),
                                       st->unit_slot[x->send[h].chunk * s->n_micro + x->send[h].mb],
                                       st->arrive, -1.0};
    else
      st->pending |= 1 << h;
  for (int h = 0; h < x->nrecv; h++) st->pending |= 1 << (2 + h);
}

// The executor's wait for its deferred sends from one slot (slot -1: all of them, at the end),
// only the activations' (a forward's: it writes the chunk's output, not its input's gradient)
// or both kinds (a backward's): 0 while one is not yet received, else 1 with arrive moved past
// them and the sends retired.
static int wait_sends(sim_rank *st, int slot, int act_only) {
#define WAITED(o) (slot < 0 || ((o).slot == slot && (!act_only || (o).msg.kind == VT_XFER_ACT)))
  double t = st->arrive;
  for (int i = 0; i < st->nout; i++) {
    if (!WAITED(st->out[i])) continue;
    if (st->out[i].matched < 0) return 0;
    if (st->out[i].matched > t) t = st->out[i].matched;
  }
  st->arrive = t;
  int kept = 0;
  for (int i = 0; i < st->nout; i++)
    if (!WAITED(st->out[i])) st->out[kept++] = st->out[i];
  st->nout = kept;
  return 1;
#undef WAITED
}

static double later(double a, double b) { return a > b ? a : b; }

vt_schedule_sim_result vt_schedule_simulate(const vt_schedule_spec *s,
                                            const vt_schedule_action *const *lists,
                                            const int *counts, vt_schedule_costs costs,
                                            int deferred_sends, double *busy) {
  const int p = s->pp_size, units = s->n_micro * s->chunks;
  sim_rank *st = calloc((size_t)p, sizeof *st);
  VT_CHECK(st != NULL, "schedule sim: out of memory");
  for (int r = 0; r < p; r++) {
    st[r].out = malloc((size_t)(2 * units + 1) * sizeof *st[r].out);
    st[r].unit_slot = malloc((size_t)units * sizeof(int));
    VT_CHECK(st[r].out && st[r].unit_slot, "schedule sim: out of memory");
    vt_schedule_assign_slots(s, lists[r], counts[r], st[r].unit_slot);
    enter(s, r, &st[r], lists[r], counts[r], deferred_sends);
    if (busy) busy[r] = 0.0;
  }
  int progress = 1;
  while (progress) {
    progress = 0;
    // Match every pending receive half against the sender: blocking, its current action (a rank
    // only ever offers its current action, which is exactly what blocking calls allow); deferred,
    // the sends it has posted.
    for (int q = 0; q < p; q++)
      for (int g = 0; g < 2; g++) {
        if (!(st[q].pending & 1 << (2 + g))) continue;
        const vt_schedule_xfer y = lists[q][st[q].pc].recv[g];
        const int r = vt_schedule_recv_peer(s, q, y);
        const message want = message_of(s, q, 0, y);
        double t = -1.0;
        for (int i = 0; deferred_sends && i < st[r].nout && t < 0; i++)
          if (st[r].out[i].matched < 0 && same_message(st[r].out[i].msg, want))
            t = st[r].out[i].matched = later(st[r].out[i].posted, st[q].arrive);
        for (int h = 0; !deferred_sends && h < 2 && t < 0; h++) {
          if (!(st[r].pending & 1 << h)) continue;
          const vt_schedule_xfer x = lists[r][st[r].pc].send[h];
          if (vt_schedule_send_peer(s, r, x) != q || !same_message(message_of(s, r, 1, x), want))
            continue;
          t = later(st[r].arrive, st[q].arrive);
          st[r].pending &= ~(1 << h);
          st[r].done = later(st[r].done, t);
        }
        if (t < 0) continue;
        st[q].pending &= ~(1 << (2 + g));
        st[q].done = later(st[q].done, t);
        progress = 1;
      }
    for (int r = 0; r < p; r++) {
      while (st[r].pc < counts[r] && !st[r].pending) {
        const vt_schedule_action *a = &lists[r][st[r].pc];
        if (a->op != VT_SCHEDULE_TRANSFER) {
          // A forward writes its slot's output that earlier units sent from, a backward also
          // the input gradient.
          if (a->op != VT_SCHEDULE_WEIGHT &&
              !wait_sends(&st[r], st[r].unit_slot[a->chunk * s->n_micro + a->mb],
                          a->op == VT_SCHEDULE_FORWARD))
            break;
          // (a wholly frozen virtual stage's backward and weight passes are not run)
          const int skipped = a->op != VT_SCHEDULE_FORWARD &&
                              vt_schedule_vstage(s, r, a->chunk) < s->frozen_stages;
          const double d = skipped                       ? 0.0
                           : a->op == VT_SCHEDULE_FORWARD  ? costs.f
                           : a->op == VT_SCHEDULE_WEIGHT ? costs.w
                           : vt_schedule_splits_backward(s->kind) ? costs.b
                                                                  : costs.b + costs.w;
          st[r].arrive += d;
          if (busy) busy[r] += d;
        } else {
          st[r].arrive = st[r].done;
        }
        st[r].pc++;
        enter(s, r, &st[r], lists[r], counts[r], deferred_sends);
        progress = 1;
      }
      if (st[r].pc == counts[r] && st[r].nout > 0 && wait_sends(&st[r], -1, 0)) progress = 1;
    }
  }
  vt_schedule_sim_result res = {1, -1, -1, 0.0};
  for (int r = 0; r < p; r++) {
    if ((st[r].pc < counts[r] || st[r].nout > 0) && res.completed) {
      res.completed = 0;
      res.stuck_stage = r;
      res.stuck_index = st[r].pc;
    }
    if (st[r].arrive > res.makespan) res.makespan = st[r].arrive;
    free(st[r].out);
    free(st[r].unit_slot);
  }
  if (!res.completed) res.makespan = 0.0;
  free(st);
  return res;
}

double vt_schedule_simulated_idle(const vt_schedule_spec *s, vt_schedule_costs costs,
                                  int deferred_sends) {
  int *counts = malloc((size_t)s->pp_size * sizeof *counts);
  double *busy = malloc((size_t)s->pp_size * sizeof *busy);
  VT_CHECK(counts && busy, "schedule: out of memory");
  vt_schedule_action **lists = build_all(s, counts);
  const vt_schedule_sim_result r = vt_schedule_simulate(
      s, (const vt_schedule_action *const *)lists, counts, costs, deferred_sends, busy);
  double idle = -1.0;
  if (r.completed && r.makespan > 0) {
    idle = 0.0;
    for (int k = 0; k < s->pp_size; k++) idle += (1.0 - busy[k] / r.makespan) / s->pp_size;
  }
  free_all(lists);
  free(counts);
  free(busy);
  return idle;
}

vt_status vt_schedule_verify(const vt_schedule_spec *s, char *err, size_t size) {
  if (vt_schedule_spec_check(s, err, size) != VT_OK) return VT_ERR_INPUT;
  int *counts = malloc((size_t)s->pp_size * sizeof *counts);
  VT_CHECK(counts != NULL, "schedule: out of memory");
  vt_schedule_action **lists = build_all(s, counts);
  const vt_schedule_action *const *cl = (const vt_schedule_action *const *)lists;
  vt_status rc = vt_schedule_check_pairs(s, cl, counts, err, size);
  if (rc == VT_OK) {
    const vt_schedule_costs unit = {1.0, 1.0, 1.0};
    // ZB-V's transports defer every send (schedule.h): blocking ones would deadlock it.
    for (int deferred = s->kind == VT_SCHEDULE_ZB_V; deferred < 2 && rc == VT_OK; deferred++) {
      const vt_schedule_sim_result r = vt_schedule_simulate(s, cl, counts, unit, deferred, NULL);
      if (!r.completed) {
        if (err)
          snprintf(err, size, "%s schedule (pp %d, %d micro-batches, %d chunks) would deadlock "
                   "with %s sends: rank %d waits forever at action %d", vt_schedule_name(s->kind),
                   s->pp_size, s->n_micro, s->chunks, deferred ? "deferred" : "blocking",
                   r.stuck_stage, r.stuck_index);
        rc = VT_ERR_INPUT;
      }
    }
  }
  free_all(lists);
  free(counts);
  return rc;
}
