// schedule_zbv.c: ZB-V's compute order: the greedy simulation in unit steps (two rules), the
// event-driven one for given pass times with its choice among the 720 orders of the six kinds,
// and the ZB-V list built from an order.
// Must not depend on MPI, NCCL, CUDA or the model: it only computes lists of integers.
#include "schedule_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  return vt_sched_compute(kind, mb, chunk);
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
        else AT(f_at, vt_sched_vstage_rank(s, vs + 1), mb, zbv_chunk(p, vs + 1)) = t + 1;
      } else if (op == 0) {  // B: the previous virtual stage's output gradient
        if (vs > 0) AT(b_at, vt_sched_vstage_rank(s, vs - 1), mb, zbv_chunk(p, vs - 1)) = t + 1;
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
      else AT(f_at, vt_sched_vstage_rank(s, vs + 1), mb, zbv_chunk(p, vs + 1)) = done;
    } else if (op == 0) {  // B: its W, and the previous virtual stage's output gradient
      AT(w_at, r, mb, c) = done;
      if (vs > 0) AT(b_at, vt_sched_vstage_rank(s, vs - 1), mb, zbv_chunk(p, vs - 1)) = done;
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
int vt_sched_build_zbv(const vt_schedule_spec *s, int r, vt_sched_builder *b,
                       const int (*kinds)[2]) {
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
      vt_sched_push(b, a);
      continue;
    }
    const int turn = r == p - 1 && a.chunk == 1, backward = a.op == VT_SCHEDULE_BACKWARD;
    const vt_schedule_xfer_kind kind = backward ? VT_XFER_GRAD : VT_XFER_ACT;
    // the turn: chunk 0 to chunk 1 forwards, back backwards
    vt_schedule_action x = vt_sched_transfer();
    vt_sched_add_xfer(&x, 1, kind, a.mb, backward ? 1 : 0);
    vt_sched_add_xfer(&x, 0, kind, a.mb, backward ? 0 : 1);
    if (turn && !backward) vt_sched_push(b, x);
    vt_sched_unit(b, s, r, backward, a.mb, a.chunk);
    if (turn && backward) vt_sched_push(b, x);
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
  vt_sched_builder b = {list, 0, cap, 0};
  const int count = vt_sched_build_zbv(s, r, &b, kinds);
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
    vt_sched_builder b = {lists[r], 0, cap, 0};
    counts[r] = vt_sched_build_zbv(s, r, &b, kinds);
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
int vt_sched_zbv_timed_choice(const vt_schedule_spec *s, int kinds[6][2]) {
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
