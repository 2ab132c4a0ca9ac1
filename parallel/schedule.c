// schedule.c: GPipe, 1F1B, interleaved 1F1B, ZB-H1 and ZB-V action lists, their printer, the message-order
// check and the rendezvous simulator that the trainer, the tests and the pipeline benchmark use to
// prove the lists deadlock-free and to predict the bubble.
// Must not depend on MPI, NCCL, CUDA or the model: the executor in launch/ does the transfers.
#include "schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"};
#define NKINDS 5

vt_status vt_schedule_parse(const char *name, vt_schedule_kind *kind) {
  for (int k = 0; name && k < NKINDS; k++)
    if (strcmp(name, g_names[k]) == 0) {
      *kind = (vt_schedule_kind)k;
      return VT_OK;
    }
  return VT_ERR_INPUT;
}

const char *vt_schedule_name(vt_schedule_kind kind) {
  return (int)kind >= 0 && (int)kind < NKINDS ? g_names[kind] : "?";
}

int vt_schedule_splits_backward(vt_schedule_kind kind) {
  return kind == VT_SCHEDULE_ZB_H1 || kind == VT_SCHEDULE_ZB_V;
}

vt_status vt_schedule_spec_check(const vt_schedule_spec *s, char *err, size_t size) {
  const char *why = NULL;
  if (s->pp_size < 1 || s->n_micro < 1 || s->chunks < 1)
    why = "pipeline ranks, micro-batches and chunks must each be at least 1";
  else if (s->chunks > VT_SCHEDULE_MAX_CHUNKS)
    why = "too many model chunks per pipeline rank (at most 64)";
  else if ((int)s->kind < 0 || (int)s->kind >= NKINDS)
    why = "unknown schedule kind";
  else if (s->kind == VT_SCHEDULE_ZB_V && s->pp_size < 2)
    why = "the zb-v schedule needs at least 2 pipeline ranks";
  else if (s->kind == VT_SCHEDULE_ZB_V && s->chunks != 2)
    why = "the zb-v schedule holds exactly 2 model chunks per pipeline rank (its V)";
  else if (s->kind != VT_SCHEDULE_INTERLEAVED && s->kind != VT_SCHEDULE_ZB_V && s->chunks != 1)
    why = "more than one model chunk per pipeline rank needs the interleaved or zb-v schedule";
  else if (s->kind == VT_SCHEDULE_INTERLEAVED && s->pp_size < 2)
    why = "the interleaved schedule needs at least 2 pipeline ranks";
  else if (s->kind == VT_SCHEDULE_INTERLEAVED && s->chunks < 2)
    why = "the interleaved schedule needs at least 2 model chunks per pipeline rank";
  else if (s->kind == VT_SCHEDULE_INTERLEAVED && s->n_micro % s->pp_size != 0)
    why = "the interleaved schedule needs the micro-batches per step to be a multiple of the "
          "pipeline ranks (it takes them in groups of pp)";
  else if (s->frozen_stages < 0 || s->frozen_stages >= s->pp_size * s->chunks)
    why = "the frozen virtual stages must leave the last one (the head's) trained";
  else if (!(s->costs.f == 0 && s->costs.b == 0 && s->costs.w == 0) &&
           !(s->costs.f > 0 && s->costs.b > 0 && s->costs.w > 0 && isfinite(s->costs.f) &&
             isfinite(s->costs.b) && isfinite(s->costs.w)))
    why = "pass times must all be positive (or all 0: equal passes)";
  else if (s->costs.f > 0 && s->kind != VT_SCHEDULE_ZB_V)
    why = "only the zb-v schedule builds its order for given pass times";
  if (why && err) snprintf(err, size, "%s", why);
  return why ? VT_ERR_INPUT : VT_OK;
}

// Each unit (m * v of them) has one forward and one backward, each with at most one receive
// before and one send after (plain order; fusing only shrinks the list) or one transfer action
// after it (lockstep), plus the first receive; ZB-H1 and ZB-V add a weight action per unit.
int vt_schedule_max_actions(const vt_schedule_spec *s) {
  const int units = (s->n_micro > 0 ? s->n_micro : 0) * (s->chunks > 0 ? s->chunks : 1);
  return 7 * units;
}

int vt_schedule_vstage(const vt_schedule_spec *s, int r, int chunk) {
  if (s->kind == VT_SCHEDULE_ZB_V) return chunk == 0 ? r : 2 * s->pp_size - 1 - r;
  return chunk * s->pp_size + r;
}

// The rank that holds virtual stage vs.
static int vstage_rank(const vt_schedule_spec *s, int vs) {
  const int p = s->pp_size;
  if (s->kind == VT_SCHEDULE_ZB_V) return vs < p ? vs : 2 * p - 1 - vs;
  return vs % p;
}

// ACT goes to the next virtual stage's rank, GRAD to the previous one's; a received ACT comes
// from the previous one, a received GRAD from the next.
int vt_schedule_send_peer(const vt_schedule_spec *s, int r, vt_schedule_xfer x) {
  return vstage_rank(s, vt_schedule_vstage(s, r, x.chunk) + (x.kind == VT_XFER_ACT ? 1 : -1));
}

int vt_schedule_recv_peer(const vt_schedule_spec *s, int r, vt_schedule_xfer x) {
  return vstage_rank(s, vt_schedule_vstage(s, r, x.chunk) + (x.kind == VT_XFER_ACT ? -1 : 1));
}

typedef struct {
  vt_schedule_action *out;
  int count, capacity;
  int weights;  // ZB-H1: weight passes placed so far (micro-batches 0..weights-1)
} builder;

static vt_schedule_action compute(vt_schedule_op op, int mb, int chunk) {
  return (vt_schedule_action){op, mb, chunk, 0, 0, {{0}}, {{0}}};
}

static void push(builder *b, vt_schedule_action a) {
  VT_CHECK(b->count < b->capacity, "schedule: action buffer of %d is too small", b->capacity);
  b->out[b->count++] = a;
}

// ZB-H1: the weight passes of micro-batches up to `upto`, in order.
static void weights_upto(builder *b, int upto) {
  for (; b->weights <= upto; b->weights++) push(b, compute(VT_SCHEDULE_WEIGHT, b->weights, 0));
}

static vt_schedule_action transfer(void) { return compute(VT_SCHEDULE_TRANSFER, -1, -1); }

static void add_xfer(vt_schedule_action *a, int is_send, vt_schedule_xfer_kind kind, int mb,
                     int chunk) {
  int *n = is_send ? &a->nsend : &a->nrecv;
  VT_CHECK(*n < 2, "schedule: more than two %s in one action", is_send ? "sends" : "receives");
  (is_send ? a->send : a->recv)[(*n)++] = (vt_schedule_xfer){kind, mb, chunk};
}

// The first virtual stage (0) has no input to receive, the last (p*v - 1) no output to send.
static int first_vs(const vt_schedule_spec *s, int r, int chunk) {
  return vt_schedule_vstage(s, r, chunk) == 0;
}
static int last_vs(const vt_schedule_spec *s, int r, int chunk) {
  return vt_schedule_vstage(s, r, chunk) == s->pp_size * s->chunks - 1;
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
// A transfer to the rank itself (ZB-V's turn) is left out: build_zbv pairs it in one action.
static void unit(builder *b, const vt_schedule_spec *s, int r, int backward, int mb, int chunk) {
  const int first = first_vs(s, r, chunk), last = last_vs(s, r, chunk);
  const vt_schedule_xfer x = {backward ? VT_XFER_GRAD : VT_XFER_ACT, mb, chunk};
  if ((backward ? !last : !first) && vt_schedule_recv_peer(s, r, x) != r)
    push_xfer(b, 0, x.kind, mb, chunk);
  push(b, compute(backward ? VT_SCHEDULE_BACKWARD : VT_SCHEDULE_FORWARD, mb, chunk));
  if ((backward ? !first : !last) && vt_schedule_send_peer(s, r, x) != r)
    push_xfer(b, 1, x.kind, mb, chunk);
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

// ZB-V's compute order: a greedy simulation of all ranks in steps of one chunk pass (F, B and W
// equal; a transfer takes no time), each rank choosing at each step by one of two rules (both
// take every chunk's passes in micro-batch order and start an F only while fewer than 2p units
// are in flight):
//   ZBV_LOWEST: the ready B of the lowest micro-batch (chunk 1 first), else the ready F likewise,
//     else the oldest pending W;
//   ZBV_KINDS: the first ready of F of chunk 1, F of chunk 0, B then W of chunk 0, B then W of
//     chunk 1 (a fixed order of the six kinds: 6m + p - 1 passes for every p up to 12 and
//     m >= p up to 40, where ZBV_LOWEST takes a few more from p 5 on).
// Writes rank `me`'s passes into out[0..6m) as compute actions (out may be NULL) and returns the
// simulated step's length in chunk passes.
typedef enum { ZBV_LOWEST, ZBV_KINDS } zbv_rule;

// The chunk of ZB-V's virtual stage vs on its rank, and the action of pass op (0 B, 1 F, 2 W).
static int zbv_chunk(int p, int vs) { return vs < p ? 0 : 1; }
static vt_schedule_action zbv_pass(int op, int mb, int chunk) {
  const vt_schedule_op kind = op == 1   ? VT_SCHEDULE_FORWARD
                              : op == 0 ? VT_SCHEDULE_BACKWARD
                                        : VT_SCHEDULE_WEIGHT;
  return compute(kind, mb, chunk);
}

static int zbv_order(const vt_schedule_spec *s, zbv_rule rule, int me, vt_schedule_action *out) {
  const int p = s->pp_size, m = s->n_micro, cap = 2 * p;
  const int never = 1 << 30;
  // ZBV_KINDS' order of the six kinds as {pass, chunk}, pass 0 B, 1 F, 2 W.
  static const int kinds[6][2] = {{1, 1}, {1, 0}, {0, 0}, {2, 0}, {0, 1}, {2, 1}};
  // Per rank and chunk: the next micro-batch to backward, to forward and to weight-pass (each
  // chunk takes them in order, so these are the only candidates), and per unit the step at which
  // its input (f_at) and its output's gradient (b_at) are there.
  int *f_at = malloc((size_t)2 * p * 2 * m * sizeof(int)), *b_at = f_at + (size_t)p * 2 * m;
  int(*next)[2][3] = malloc((size_t)p * sizeof *next);
  int *live = calloc((size_t)p, sizeof(int));
  VT_CHECK(f_at && next && live, "schedule: out of memory for zb-v's order");
#define AT(arr, r, mb, c) (arr)[((size_t)(r) * 2 + (c)) * m + (mb)]
  for (int i = 0; i < 2 * p * 2 * m; i++) f_at[i] = never;
  for (int mb = 0; mb < m; mb++) AT(f_at, 0, mb, 0) = 0;  // the images
  memset(next, 0, (size_t)p * sizeof *next);
  int n = 0, left = 6 * m * p, t = 0;
  for (; left > 0; t++) {
    VT_CHECK(t <= 12 * m * p + 4 * p, "schedule: zb-v's greedy order did not finish");
    for (int r = 0; r < p; r++) {
#define READY(pass, k, mb)                                                                  \
  ((mb) < m && ((pass) == 0   ? (mb) < next[r][k][1] && AT(b_at, r, mb, k) <= t             \
                : (pass) == 1 ? live[r] < cap && AT(f_at, r, mb, k) <= t                    \
                              : (mb) < next[r][k][0]))
      int op = -1, c = -1;
      if (rule == ZBV_KINDS) {
        for (int i = 0; i < 6 && op < 0; i++)
          if (READY(kinds[i][0], kinds[i][1], next[r][kinds[i][1]][kinds[i][0]]))
            op = kinds[i][0], c = kinds[i][1];
      } else {
        for (int pass = 0; pass < 3 && op < 0; pass++) {
          int best = never;
          for (int k = 1; k >= 0; k--) {
            const int mb = next[r][k][pass];
            if (READY(pass, k, mb) && mb < best) best = mb, c = k;
          }
          if (best < never) op = pass;
        }
      }
#undef READY
      if (op < 0) continue;
      const int mb = next[r][c][op]++;
      left--;
      const int vs = vt_schedule_vstage(s, r, c);
      if (op == 1) {  // F: the next virtual stage's input, or the loss's gradient at the head
        live[r]++;
        if (vs == 2 * p - 1) AT(b_at, r, mb, c) = t + 1;
        else AT(f_at, vstage_rank(s, vs + 1), mb, zbv_chunk(p, vs + 1)) = t + 1;
      } else if (op == 0) {  // B: the previous virtual stage's output gradient
        if (vs > 0) AT(b_at, vstage_rank(s, vs - 1), mb, zbv_chunk(p, vs - 1)) = t + 1;
      } else {
        live[r]--;
      }
      if (r == me && out) out[n++] = zbv_pass(op, mb, c);
    }
  }
#undef AT
  VT_CHECK(!out || n == 6 * m, "schedule: zb-v's order has %d passes on rank %d, want %d", n, me,
           6 * m);
  free(f_at);
  free(next);
  free(live);
  return t;
}

// ZB-V's order for unequal passes (vt_schedule_spec.costs): an event-driven greedy simulation of
// all ranks, each, when free, running the first of its ready passes in the order kinds[6]
// ({pass, chunk}, pass 0 B, 1 F, 2 W; F only under 2p units in flight); the rank that can start
// soonest goes first (the lowest on a tie), so every decision sees every arrival before it.
// Writes rank `me`'s passes into out[0..6m) when out is not NULL; returns the step's simulated
// length (INFINITY if it stalls, which a valid order never does).
static double zbv_timed(const vt_schedule_spec *s, const int kinds[6][2], int me,
                        vt_schedule_action *out) {
  const int p = s->pp_size, m = s->n_micro, cap = 2 * p;
  const double cost[3] = {s->costs.b, s->costs.f, s->costs.w};
  // per rank, chunk and micro-batch: when its input (f_at), its output's gradient (b_at) and its
  // own B (w_at: its weight pass may start) are there
  double *at = malloc((size_t)3 * p * 2 * m * sizeof(double));
  double *busy = malloc((size_t)p * sizeof(double));
  int(*next)[2][3] = calloc((size_t)p, sizeof *next);
  int *live = calloc((size_t)p, sizeof(int));
  VT_CHECK(at && busy && next && live, "schedule: out of memory for zb-v's order");
  double *f_at = at, *b_at = at + (size_t)p * 2 * m, *w_at = at + (size_t)2 * p * 2 * m;
#define AT(arr, r, mb, c) (arr)[((size_t)(r) * 2 + (c)) * m + (mb)]
  for (int i = 0; i < 3 * p * 2 * m; i++) at[i] = INFINITY;
  for (int mb = 0; mb < m; mb++) AT(f_at, 0, mb, 0) = 0.0;
  for (int r = 0; r < p; r++) busy[r] = 0.0;
  // when pass `pass` of chunk k's next micro-batch on rank r may start (INFINITY: not yet known)
#define READY_AT(r, pass, k)                                                                   \
  (next[r][k][pass] >= m ? INFINITY                                                            \
   : (pass) == 0 ? (next[r][k][0] < next[r][k][1] ? AT(b_at, r, next[r][k][0], k) : INFINITY) \
   : (pass) == 1 ? (live[r] < cap ? AT(f_at, r, next[r][k][1], k) : INFINITY)                  \
                 : (next[r][k][2] < next[r][k][0] ? AT(w_at, r, next[r][k][2], k) : INFINITY))
  double end = 0.0;
  int n = 0;
  for (int left = 6 * m * p; left > 0; left--) {
    int r = -1;
    double t = INFINITY;
    for (int q = 0; q < p; q++) {
      double soonest = INFINITY;
      for (int k = 0; k < 2; k++)
        for (int pass = 0; pass < 3; pass++) soonest = fmin(soonest, READY_AT(q, pass, k));
      soonest = fmax(soonest, busy[q]);
      if (soonest < t) t = soonest, r = q;
    }
    if (r < 0) {
      end = INFINITY;
      break;
    }
    int op = -1, c = -1;
    for (int i = 0; i < 6 && op < 0; i++)
      if (READY_AT(r, kinds[i][0], kinds[i][1]) <= t) op = kinds[i][0], c = kinds[i][1];
    const int mb = next[r][c][op]++, vs = vt_schedule_vstage(s, r, c);
    const double done = t + cost[op];
    busy[r] = done, end = fmax(end, done);
    if (op == 1) {  // F: the next virtual stage's input, or the loss's gradient at the head
      live[r]++;
      if (vs == 2 * p - 1) AT(b_at, r, mb, c) = done;
      else AT(f_at, vstage_rank(s, vs + 1), mb, zbv_chunk(p, vs + 1)) = done;
    } else if (op == 0) {  // B: its W, and the previous virtual stage's output gradient
      AT(w_at, r, mb, c) = done;
      if (vs > 0) AT(b_at, vstage_rank(s, vs - 1), mb, zbv_chunk(p, vs - 1)) = done;
    } else {
      live[r]--;
    }
    if (r == me && out) out[n++] = zbv_pass(op, mb, c);
  }
#undef READY_AT
#undef AT
  free(at), free(busy), free(next), free(live);
  return end;
}

// ZB-V in plain order: a unit's receive right before its compute, its send right after, fused
// where a send is followed by a receive. The turn on rank p-1 pairs its send and receive in one
// action: the activation right before chunk 1's forward, the gradient right after its backward
// (chunk 0's unit lives on until its weight pass, chunk 1's until its own, so both are alive).
// kinds: the timed order's (zbv_timed), or NULL for the equal-pass order.
static int build_zbv(const vt_schedule_spec *s, int r, builder *b, const int (*kinds)[2]) {
  const int m = s->n_micro, p = s->pp_size;
  vt_schedule_action *order = malloc((size_t)6 * m * sizeof *order);
  VT_CHECK(order != NULL, "schedule: out of memory for zb-v's order");
  if (kinds) {  // built for the given pass times
    zbv_timed(s, kinds, r, order);
  } else {
    // The shorter of the two rules' orders, ZBV_KINDS where they tie: its order stalls less
    // when the passes are not equal (see zbv_order).
    const zbv_rule rule = zbv_order(s, ZBV_LOWEST, 0, NULL) < zbv_order(s, ZBV_KINDS, 0, NULL)
                              ? ZBV_LOWEST : ZBV_KINDS;
    zbv_order(s, rule, r, order);
  }
  for (int i = 0; i < 6 * m; i++) {
    const vt_schedule_action a = order[i];
    if (a.op == VT_SCHEDULE_WEIGHT) {
      push(b, a);
      continue;
    }
    const int turn = r == p - 1 && a.chunk == 1, backward = a.op == VT_SCHEDULE_BACKWARD;
    const vt_schedule_xfer_kind kind = backward ? VT_XFER_GRAD : VT_XFER_ACT;
    vt_schedule_action x = transfer();  // the turn: chunk 0 to chunk 1 forwards, back backwards
    add_xfer(&x, 1, kind, a.mb, backward ? 1 : 0);
    add_xfer(&x, 0, kind, a.mb, backward ? 0 : 1);
    if (turn && !backward) push(b, x);
    unit(b, s, r, backward, a.mb, a.chunk);
    if (turn && backward) push(b, x);
  }
  free(order);
  return b->count;
}

// Rank r's activation sets and weight sets (vt_schedule_assign_slots and _weight_sets) under
// ZB-V's order for s (kinds: the timed order's, NULL: the equal-pass order's).
static void zbv_memory(const vt_schedule_spec *s, const int (*kinds)[2], int r, int *slots,
                       int *wsets) {
  const int cap = vt_schedule_max_actions(s);
  vt_schedule_action *list = malloc((size_t)cap * sizeof *list);
  int *unit = malloc((size_t)2 * s->n_micro * sizeof *unit);
  VT_CHECK(list && unit, "schedule: out of memory");
  builder b = {list, 0, cap, 0};
  const int count = build_zbv(s, r, &b, kinds);
  *slots = vt_schedule_assign_slots(s, list, count, unit);
  *wsets = vt_schedule_assign_weight_sets(s, list, count, unit);
  free(list), free(unit);
}

// The kinds' order (of the 720) whose timed order is shortest under s->costs and needs on no
// rank more activation or weight sets than the equal-pass order (whose memory the trainer
// planned), the equal-pass rule's kinds (zbv_order's) first; returns that length (INFINITY
// where none fits).
static double zbv_best_kinds(const vt_schedule_spec *s, int best[6][2]) {
  static const int base[6][2] = {{1, 1}, {1, 0}, {0, 0}, {2, 0}, {0, 1}, {2, 1}};
  const int p = s->pp_size;
  int *limit = malloc((size_t)2 * p * sizeof *limit);  // per rank: slots, weight sets
  VT_CHECK(limit != NULL, "schedule: out of memory");
  for (int r = 0; r < p; r++) zbv_memory(s, NULL, r, &limit[2 * r], &limit[2 * r + 1]);
  double shortest = INFINITY;
  for (int a = 0; a < 720; a++) {  // the a-th permutation in lexicographic order of indices
    int kinds[6][2], used[6] = {0}, x = a, fact = 120;
    for (int i = 0; i < 6; i++) {
      int q = x / fact, j = -1;
      x %= fact;
      fact = i < 5 ? fact / (5 - i) : 1;
      while (q >= 0) q -= !used[++j];
      used[j] = 1;
      kinds[i][0] = base[j][0], kinds[i][1] = base[j][1];
    }
    const double len = zbv_timed(s, (const int(*)[2])kinds, -1, NULL);
    if (!(len < shortest * (1 - 1e-12))) continue;
    int fits = 1;
    for (int r = 0; r < p && fits; r++) {
      int slots, wsets;
      zbv_memory(s, (const int(*)[2])kinds, r, &slots, &wsets);
      fits = slots <= limit[2 * r] && wsets <= limit[2 * r + 1];
    }
    if (fits) shortest = len, memcpy(best, kinds, sizeof kinds);
  }
  free(limit);
  return shortest;
}

// The step's length of ZB-V's lists for s (kinds: the timed order's, NULL: the equal-pass
// order's) simulated at s->costs (deferred sends).
static double zbv_simulated_length(const vt_schedule_spec *s, const int (*kinds)[2]) {
  const int p = s->pp_size, cap = vt_schedule_max_actions(s);
  vt_schedule_action **lists = calloc((size_t)p, sizeof *lists);
  int *counts = calloc((size_t)p, sizeof(int));
  VT_CHECK(lists && counts, "schedule: out of memory");
  for (int r = 0; r < p; r++) {
    lists[r] = malloc((size_t)cap * sizeof **lists);
    VT_CHECK(lists[r] != NULL, "schedule: out of memory");
    builder b = {lists[r], 0, cap, 0};
    counts[r] = build_zbv(s, r, &b, kinds);
  }
  const vt_schedule_sim_result res = vt_schedule_simulate(
      s, (const vt_schedule_action *const *)lists, counts, s->costs, 1, NULL);
  for (int r = 0; r < p; r++) free(lists[r]);
  free(lists), free(counts);
  return res.completed ? res.makespan : INFINITY;
}

// ZB-V's choice for s->costs: the kinds' order of the shortest timed order, or (returns 0) the
// equal-pass order where that one, simulated at the same times, is no longer. The search runs
// 720 simulations, so the last answer is kept (every rank asks for the same spec).
static int zbv_timed_choice(const vt_schedule_spec *s, int kinds[6][2]) {
  static struct {
    int valid, p, m, timed, kinds[6][2];
    vt_schedule_costs costs;
  } last;
  if (!(last.valid && last.p == s->pp_size && last.m == s->n_micro &&
        memcmp(&last.costs, &s->costs, sizeof last.costs) == 0)) {
    vt_schedule_spec plain = *s;  // (the gradients of frozen stages left out or not alike)
    plain.frozen_stages = 0;
    last.timed = isfinite(zbv_best_kinds(&plain, last.kinds)) &&
                 zbv_simulated_length(&plain, (const int(*)[2])last.kinds) <
                     zbv_simulated_length(&plain, NULL) * (1 - 1e-12);
    last.p = s->pp_size, last.m = s->n_micro, last.costs = s->costs, last.valid = 1;
  }
  memcpy(kinds, last.kinds, sizeof last.kinds);
  return last.timed;
}

static int build_list(const vt_schedule_spec *s, int r, vt_schedule_action *actions,
                      int capacity) {
  builder b = {actions, 0, capacity, 0};
  const int p = s->pp_size, m = s->n_micro, units = m * s->chunks;
  int mb, chunk;
  if (s->kind == VT_SCHEDULE_ZB_V) {
    int kinds[6][2];
    const int timed = s->costs.f > 0 && zbv_timed_choice(s, kinds);
    return build_zbv(s, r, &b, timed ? (const int(*)[2])kinds : NULL);
  }
  if (s->kind == VT_SCHEDULE_GPIPE) {
    for (int i = 0; i < m; i++) unit(&b, s, r, 0, i, 0);
    for (int i = 0; i < m; i++) unit(&b, s, r, 1, i, 0);
    return b.count;
  }
  // 1F1B: the warmup fills the pipe so that, in steady state, the backward of unit k arrives from
  // downstream just as this rank has finished forward w+k. Interleaved: the first backward is of
  // the last chunk, which the first (v - 1) * p forwards lead up to, and each rank downstream
  // both forwards and backwards before its gradient comes back, hence twice (p - r - 1).
  const int plain = s->kind != VT_SCHEDULE_INTERLEAVED;  // 1F1B, ZB-H1
  int warmup = plain ? p - r - 1 : 2 * (p - r - 1) + (s->chunks - 1) * p;
  if (warmup > units) warmup = units;
  if (plain) {
    // ZB-H1: rank r runs the weight pass of micro-batch k after the backward of k + r
    const int lag = vt_schedule_splits_backward(s->kind) ? r : units;
    for (int k = 0; k < warmup; k++) unit(&b, s, r, 0, k, 0);
    for (int k = 0; k < units - warmup; k++) {
      unit(&b, s, r, 0, warmup + k, 0);
      unit(&b, s, r, 1, k, 0);
      weights_upto(&b, k - lag);
    }
    for (int k = units - warmup; k < units; k++) {
      unit(&b, s, r, 1, k, 0);
      weights_upto(&b, k - lag);
    }
    if (vt_schedule_splits_backward(s->kind)) weights_upto(&b, units - 1);
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

// Whether a GRAD half of rank r's unit `x` goes to (send: the gradient of its input, to the
// virtual stage before) or comes from (recv: of its output) a boundary below the first trained
// virtual stage. Both ends of a message decide alike: the boundary between virtual stages
// vs - 1 and vs carries nothing when vs <= frozen_stages.
static int frozen_grad(const vt_schedule_spec *s, int r, int is_send, vt_schedule_xfer x) {
  const int vs = vt_schedule_vstage(s, r, x.chunk);
  return x.kind == VT_XFER_GRAD && (is_send ? vs : vs + 1) <= s->frozen_stages;
}

// Leaves out the gradient messages of the frozen virtual stages, and transfer actions left
// empty; the backward and weight actions stay (the executor skips those of frozen stages), so
// every unit keeps its slot as long as before.
static int drop_frozen_grads(const vt_schedule_spec *s, int r, vt_schedule_action *a, int count) {
  int n = 0;
  for (int i = 0; i < count; i++) {
    vt_schedule_action x = a[i];
    if (x.op == VT_SCHEDULE_TRANSFER) {
      int ns = 0, nr = 0;
      for (int h = 0; h < x.nsend; h++)
        if (!frozen_grad(s, r, 1, x.send[h])) x.send[ns++] = x.send[h];
      for (int h = 0; h < x.nrecv; h++)
        if (!frozen_grad(s, r, 0, x.recv[h])) x.recv[nr++] = x.recv[h];
      x.nsend = ns, x.nrecv = nr;
      if (ns + nr == 0) continue;
    }
    a[n++] = x;
  }
  return n;
}

int vt_schedule_build(const vt_schedule_spec *s, int r, vt_schedule_action *actions,
                      int capacity) {
  char err[160];
  VT_CHECK(vt_schedule_spec_check(s, err, sizeof err) == VT_OK, "schedule: %s", err);
  VT_CHECK(r >= 0 && r < s->pp_size, "schedule: pp_rank %d outside [0, %d)", r, s->pp_size);
  const int count = build_list(s, r, actions, capacity);
  return s->frozen_stages > 0 ? drop_frozen_grads(s, r, actions, count) : count;
}

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
