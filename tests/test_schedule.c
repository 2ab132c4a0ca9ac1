// test_schedule.c: the GPipe, 1F1B, interleaved, ZB-H1 and ZB-V action lists without any
// communication: every rank's list is well formed, each pair's messages are posted in the same
// order on both sides, a rendezvous simulation of all ranks completes, and the simulated bubble is
// printed beside its formula. Must not depend on MPI or the model (label unit).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "vt_check.h"

#define MAX_PP 8
#define MAX_M 16
#define MAX_V 4

typedef struct {
  vt_schedule_spec spec;
  vt_schedule_action *lists[MAX_PP];
  int counts[MAX_PP];
} schedule_set;

static void build_set(schedule_set *set, vt_schedule_kind kind, int pp, int m, int v) {
  set->spec = (vt_schedule_spec){kind, pp, m, v, 0, {0, 0, 0}};
  const int cap = vt_schedule_max_actions(&set->spec);
  for (int s = 0; s < pp; s++) {
    set->lists[s] = malloc((size_t)cap * sizeof(vt_schedule_action));
    set->counts[s] = vt_schedule_build(&set->spec, s, set->lists[s], cap);
  }
}

static void free_set(schedule_set *set) {
  for (int s = 0; s < set->spec.pp_size; s++) free(set->lists[s]);
}

static const vt_schedule_action *const *lists_of(const schedule_set *set) {
  return (const vt_schedule_action *const *)set->lists;
}

#define NAME_FMT "%s pp %d m %d v %d"
#define NAME_ARGS(sp) vt_schedule_name((sp)->kind), (sp)->pp_size, (sp)->n_micro, (sp)->chunks

// Where each unit's compute and transfers sit in a rank's list (-1: absent; -2: more than once).
typedef struct {
  int fwd, bwd, wgt, recv_act, send_act, recv_grad, send_grad;
} unit_pos;

static void note(int *slot, int i) { *slot = *slot == -1 ? i : -2; }

static void check_stage(const schedule_set *set, int s) {
  const vt_schedule_spec *sp = &set->spec;
  const int p = sp->pp_size, m = sp->n_micro, v = sp->chunks, n = set->counts[s];
  const vt_schedule_action *a = set->lists[s];
  unit_pos pos[MAX_M][MAX_V];
  memset(pos, 0xff, sizeof pos);  // -1
  const int split = vt_schedule_splits_backward(sp->kind);
  int bad_index = 0, bad_transfer = 0, last_mb[2][MAX_V], bwd_order = 1, bad_op = 0;
  for (int c = 0; c < v; c++) last_mb[0][c] = last_mb[1][c] = -1;
  for (int i = 0; i < n; i++) {
    const vt_schedule_action x = a[i];
    if (x.op == VT_SCHEDULE_WEIGHT && !split) bad_op++;
    if (x.op != VT_SCHEDULE_TRANSFER) {
      if (x.mb < 0 || x.mb >= m || x.chunk < 0 || x.chunk >= v) { bad_index++; continue; }
      unit_pos *u = &pos[x.mb][x.chunk];
      note(x.op == VT_SCHEDULE_FORWARD ? &u->fwd : x.op == VT_SCHEDULE_BACKWARD ? &u->bwd : &u->wgt,
           i);
      if (x.op != VT_SCHEDULE_FORWARD) {  // every chunk sums its micro-batches in order
        const int w = x.op == VT_SCHEDULE_WEIGHT;
        if (x.mb < last_mb[w][x.chunk]) bwd_order = 0;
        last_mb[w][x.chunk] = x.mb;
      }
      continue;
    }
    if (x.nsend + x.nrecv == 0 || x.nsend > 2 || x.nrecv > 2) bad_transfer++;
    for (int h = 0; h < x.nsend + x.nrecv; h++) {
      const int is_send = h < x.nsend;
      const vt_schedule_xfer y = is_send ? x.send[h] : x.recv[h - x.nsend];
      if (y.mb < 0 || y.mb >= m || y.chunk < 0 || y.chunk >= v) { bad_index++; continue; }
      unit_pos *u = &pos[y.mb][y.chunk];
      if (y.kind == VT_XFER_ACT) note(is_send ? &u->send_act : &u->recv_act, i);
      else if (y.kind == VT_XFER_GRAD) note(is_send ? &u->send_grad : &u->recv_grad, i);
      else bad_transfer++;
    }
  }
  EXPECT(!bad_index, NAME_FMT " stage %d: %d micro-batch or chunk indices out of range",
         NAME_ARGS(sp), s, bad_index);
  EXPECT(!bad_transfer, NAME_FMT " stage %d: %d malformed transfer actions", NAME_ARGS(sp), s,
         bad_transfer);
  EXPECT(bwd_order, NAME_FMT " stage %d: a chunk's backwards not in micro-batch order",
         NAME_ARGS(sp), s);
  EXPECT(!bad_op, NAME_FMT " stage %d: weight actions in a list that does not split backwards",
         NAME_ARGS(sp), s);
  int once = 1, ordered = 1, transfers = 1, weights = 1;
  for (int mb = 0; mb < m; mb++)
    for (int c = 0; c < v; c++) {
      unit_pos *u = &pos[mb][c];
      const int vs = vt_schedule_vstage(sp, s, c), first = vs == 0, last = vs == p * v - 1;
      if (u->fwd < 0 || u->bwd < 0 || (split && u->wgt < 0)) { once = 0; continue; }
      if (u->fwd > u->bwd) ordered = 0;
      // ZB-H1: the weight pass after the input gradient left
      if (split && (u->wgt < u->bwd || (!first && u->wgt < u->send_grad))) weights = 0;
      if (!split) u->wgt = u->bwd;  // a unit's life ends with its last backward action
      // A transfer exists exactly where a virtual-stage boundary does; a receive comes before
      // the compute that reads it (a gradient after the unit's forward, whose slot holds it), a
      // send after the compute that made it.
      if (first ? u->recv_act != -1 : !(u->recv_act >= 0 && u->recv_act < u->fwd)) transfers = 0;
      if (last ? u->send_act != -1 : !(u->send_act > u->fwd)) transfers = 0;
      if (last ? u->recv_grad != -1 : !(u->recv_grad > u->fwd && u->recv_grad < u->bwd))
        transfers = 0;
      if (first ? u->send_grad != -1 : !(u->send_grad > u->bwd)) transfers = 0;
    }
  EXPECT(once, NAME_FMT " stage %d: a unit not run exactly once each way", NAME_ARGS(sp), s);
  EXPECT(ordered, NAME_FMT " stage %d: a backward before its forward", NAME_ARGS(sp), s);
  EXPECT(transfers, NAME_FMT " stage %d: a transfer missing, repeated or out of place",
         NAME_ARGS(sp), s);
  EXPECT(weights, NAME_FMT " stage %d: a weight pass before its gradient left", NAME_ARGS(sp), s);
  const int peak = vt_schedule_max_in_flight(a, n);
  int want = m;  // GPipe
  if (sp->kind == VT_SCHEDULE_1F1B) want = p - s < m ? p - s : m;
  if (split && m >= p) want = p;
  if (sp->kind == VT_SCHEDULE_ZB_V) want = 2 * m < 2 * p ? 2 * m : 2 * p;  // its cap
  if (sp->kind == VT_SCHEDULE_INTERLEAVED) {
    const int warmup = 2 * (p - s - 1) + (v - 1) * p;
    want = warmup < m * v ? warmup + 1 : m * v;
  }
  // ZB-V built for given pass times: at most its cap
  const int timed = sp->costs.f > 0;
  EXPECT(timed ? peak <= want : peak == want, NAME_FMT " stage %d: %d in flight, want %s%d",
         NAME_ARGS(sp), s, peak, timed ? "at most " : "", want);
  EXPECT(peak == vt_schedule_stage_in_flight(sp, s, NULL), NAME_FMT " stage %d: stage_in_flight",
         NAME_ARGS(sp), s);
  // Slots: as many as the peak, and two units share one only when their lives (first use to
  // last backward action) do not overlap.
  int unit_slot[MAX_M * MAX_V], clash = 0;
  const int used = vt_schedule_assign_slots(sp, a, n, unit_slot);
  EXPECT(used == peak, NAME_FMT " stage %d: %d slots for %d in flight", NAME_ARGS(sp), s, used,
         peak);
  for (int u = 0; u < m * v; u++)
    for (int w = u + 1; w < m * v; w++) {
      const unit_pos *x = &pos[u % m][u / m], *y = &pos[w % m][w / m];
      const int x0 = x->recv_act >= 0 ? x->recv_act : x->fwd;
      const int y0 = y->recv_act >= 0 ? y->recv_act : y->fwd;
      if (unit_slot[u] < 0 || unit_slot[u] >= used || unit_slot[w] < 0) clash++;
      else if (unit_slot[u] == unit_slot[w] && x0 < y->wgt && y0 < x->wgt) clash++;
    }
  EXPECT(!clash, NAME_FMT " stage %d: %d slot clashes", NAME_ARGS(sp), s, clash);
  // Weight sets (ZB-H1): from a unit's backward to its weight pass, no two units share one.
  int unit_set[MAX_M * MAX_V];
  const int sets = vt_schedule_assign_weight_sets(sp, a, n, unit_set);
  const int zbv = sp->kind == VT_SCHEDULE_ZB_V;
  EXPECT(zbv ? sets >= 1 && sets <= 2 * m : sets == (split ? (s + 1 < m ? s + 1 : m) : 0),
         NAME_FMT " stage %d: %d weight sets",
         NAME_ARGS(sp), s, sets);
  clash = 0;
  for (int u = 0; split && u < m * v; u++)
    for (int w = u + 1; w < m * v; w++) {
      const unit_pos *x = &pos[u % m][u / m], *y = &pos[w % m][w / m];
      if (unit_set[u] < 0 || unit_set[u] >= sets || unit_set[w] < 0) clash++;
      else if (unit_set[u] == unit_set[w] && x->bwd < y->wgt && y->bwd < x->wgt) clash++;
    }
  EXPECT(!clash, NAME_FMT " stage %d: %d weight set clashes", NAME_ARGS(sp), s, clash);
}

static double simulate_bubble(const schedule_set *set, vt_schedule_costs c, int deferred,
                              int *ok) {
  double busy[MAX_PP];
  const vt_schedule_spec *sp = &set->spec;
  // A stage's passes take c in all: each of its v chunks a v-th of that.
  const double v = sp->chunks;
  const vt_schedule_costs per_unit = {c.f / v, c.b / v, c.w / v};
  vt_schedule_sim_result r =
      vt_schedule_simulate(sp, lists_of(set), set->counts, per_unit, deferred, busy);
  *ok = r.completed;
  EXPECT(r.completed, NAME_FMT " (F %g B %g W %g, %s sends): deadlock at stage %d action %d",
         NAME_ARGS(sp), c.f, c.b, c.w, deferred ? "deferred" : "blocking", r.stuck_stage,
         r.stuck_index);
  if (!r.completed) return -1.0;
  double idle = 0.0;
  for (int s = 0; s < sp->pp_size; s++) idle += 1.0 - busy[s] / r.makespan;
  return idle / sp->pp_size;
}

// Why the fused and lockstep actions exist: split each back into its sends, then its receives,
// one action each, and the simulator must find the deadlock (1F1B: the classic steady state;
// interleaved: two ranks sending each other a gradient first).
static void test_split_deadlocks(vt_schedule_kind kind, int pp, int m, int v) {
  schedule_set set;
  build_set(&set, kind, pp, m, v);
  vt_schedule_action *split[MAX_PP];
  int counts[MAX_PP];
  for (int s = 0; s < pp; s++) {
    split[s] = malloc((size_t)set.counts[s] * 4 * sizeof(vt_schedule_action));
    counts[s] = 0;
    for (int i = 0; i < set.counts[s]; i++) {
      const vt_schedule_action x = set.lists[s][i];
      if (x.op != VT_SCHEDULE_TRANSFER) {
        split[s][counts[s]++] = x;
        continue;
      }
      for (int h = 0; h < x.nsend + x.nrecv; h++) {
        vt_schedule_action y = x;
        y.nsend = h < x.nsend, y.nrecv = h >= x.nsend;
        if (h < x.nsend) y.send[0] = x.send[h];
        else y.recv[0] = x.recv[h - x.nsend];
        split[s][counts[s]++] = y;
      }
    }
  }
  const vt_schedule_costs unit = {1.0, 1.0, 1.0};
  vt_schedule_sim_result r =
      vt_schedule_simulate(&set.spec, (const vt_schedule_action *const *)split, counts, unit, 0, NULL);
  EXPECT(!r.completed, NAME_FMT " with every transfer on its own should deadlock",
         NAME_ARGS(&set.spec));
  printf(NAME_FMT " with every transfer on its own: %s (stage %d blocked at action %d)\n",
         NAME_ARGS(&set.spec), r.completed ? "completed (unexpected)" : "deadlock, as expected",
         r.stuck_stage, r.stuck_index);
  for (int s = 0; s < pp; s++) free(split[s]);
  free_set(&set);
}

// Swapping two of a rank's sends to the same peer (in different actions) must be caught by the
// pair check: MPI and NCCL would hand each buffer to the other's receive.
static void test_pair_order_caught(void) {
  schedule_set set;
  build_set(&set, VT_SCHEDULE_INTERLEAVED, 2, 4, 2);
  char err[256] = "";
  EXPECT(vt_schedule_check_pairs(&set.spec, lists_of(&set), set.counts, err, sizeof err) == VT_OK,
         "interleaved pp 2 m 4 v 2: pairs in order (%s)", err);
  int first = -1, second = -1;
  for (int i = 0; i < set.counts[1] && second < 0; i++) {
    const vt_schedule_action *x = &set.lists[1][i];
    if (x->op == VT_SCHEDULE_TRANSFER && x->nsend == 1 && x->send[0].kind == VT_XFER_ACT) {
      if (first < 0) first = i;
      else second = i;
    }
  }
  EXPECT(first >= 0 && second >= 0, "stage 1 has two activation sends");
  if (second >= 0) {
    const vt_schedule_xfer t = set.lists[1][first].send[0];
    set.lists[1][first].send[0] = set.lists[1][second].send[0];
    set.lists[1][second].send[0] = t;
    EXPECT(vt_schedule_check_pairs(&set.spec, lists_of(&set), set.counts, err, sizeof err) ==
               VT_ERR_INPUT,
           "two swapped sends pass the pair check");
    printf("two swapped activation sends on stage 1: %s\n", err);
  }
  free_set(&set);
}

static void test_parse(void) {
  vt_schedule_kind k = VT_SCHEDULE_GPIPE;
  EXPECT(vt_schedule_parse("1f1b", &k) == VT_OK && k == VT_SCHEDULE_1F1B, "parse 1f1b");
  EXPECT(vt_schedule_parse("gpipe", &k) == VT_OK && k == VT_SCHEDULE_GPIPE, "parse gpipe");
  EXPECT(vt_schedule_parse("interleaved", &k) == VT_OK && k == VT_SCHEDULE_INTERLEAVED,
         "parse interleaved");
  EXPECT(vt_schedule_parse("GPipe", &k) == VT_ERR_INPUT && k == VT_SCHEDULE_INTERLEAVED,
         "parse GPipe");
  EXPECT(vt_schedule_parse("", &k) == VT_ERR_INPUT, "parse empty");
  EXPECT(vt_schedule_parse(NULL, &k) == VT_ERR_INPUT, "parse NULL");
  EXPECT(strcmp(vt_schedule_name(VT_SCHEDULE_1F1B), "1f1b") == 0, "name 1f1b");
  EXPECT(strcmp(vt_schedule_name(VT_SCHEDULE_GPIPE), "gpipe") == 0, "name gpipe");
  EXPECT(strcmp(vt_schedule_name(VT_SCHEDULE_INTERLEAVED), "interleaved") == 0, "name");
  EXPECT(vt_schedule_parse("zb-h1", &k) == VT_OK && k == VT_SCHEDULE_ZB_H1, "parse zb-h1");
  EXPECT(strcmp(vt_schedule_name(VT_SCHEDULE_ZB_H1), "zb-h1") == 0, "name zb-h1");
  const vt_schedule_spec bad[] = {
      {VT_SCHEDULE_1F1B, 4, 8, 2, 0, {0, 0, 0}},         // chunks without interleaving
      {VT_SCHEDULE_INTERLEAVED, 1, 8, 2, 0, {0, 0, 0}},  // one rank
      {VT_SCHEDULE_INTERLEAVED, 4, 8, 1, 0, {0, 0, 0}},  // one chunk
      {VT_SCHEDULE_INTERLEAVED, 4, 6, 2, 0, {0, 0, 0}},  // m not a multiple of p
      {VT_SCHEDULE_ZB_H1, 4, 8, 2, 0, {0, 0, 0}},        // chunks without interleaving
      {VT_SCHEDULE_GPIPE, 0, 8, 1, 0, {0, 0, 0}},
      {VT_SCHEDULE_GPIPE, 2, 0, 1, 0, {0, 0, 0}},
  };
  char err[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    EXPECT(vt_schedule_spec_check(&bad[i], err, sizeof err) == VT_ERR_INPUT && err[0],
           "spec %zu refused", i);
    EXPECT(vt_schedule_verify(&bad[i], err, sizeof err) == VT_ERR_INPUT, "spec %zu unverified", i);
    printf("refused: %s\n", err);
  }
}

static void expect_list(vt_schedule_kind kind, int pp, int m, int v, int stage, const char *want) {
  const vt_schedule_spec sp = {kind, pp, m, v, 0, {0, 0, 0}};
  vt_schedule_action a[256];
  char buf[2048] = "", tok[48];
  const int n = vt_schedule_build(&sp, stage, a, 256);
  for (int i = 0; i < n; i++) {
    strcat(buf, i ? " " : "");
    strcat(buf, vt_schedule_action_str(a[i], tok, sizeof tok));
  }
  EXPECT(strcmp(buf, want) == 0, NAME_FMT " stage %d:\n got  %s\n want %s", NAME_ARGS(&sp), stage,
         buf, want);
}

// Hand-written expectations, so the generators are checked against more than their own rules.
static void test_known_lists(void) {
  expect_list(VT_SCHEDULE_1F1B, 4, 4, 1, 1,
              "RA0 F0 SA0+RA1 F1 SA1+RA2 F2 SA2+RG0 B0 SG0+RA3 F3 SA3+RG1 B1 SG1+RG2 B2 "
              "SG2+RG3 B3 SG3");
  // pp 2, v 2 (derived by hand from schedule.h's rules): virtual stages 0 (rank 0 chunk 0), 1
  // (rank 1 chunk 0), 2 (rank 0 chunk 1), 3 (rank 1 chunk 1, the head). Forward units in order
  // (mb.chunk) 0 1 0.1 1.1 2 3 2.1 3.1, backwards 0.1 1.1 0 1 2.1 3.1 2 3. Warmup: rank 0
  // 2 * 1 + 2 = 4 forwards, rank 1 2; the last warmup action also takes the first backward's
  // gradient; then each forward-backward pair ends with one action.
  expect_list(VT_SCHEDULE_INTERLEAVED, 2, 4, 2, 0,
              "F0 SA0 F1 SA1+RA0.1 F0.1 SA0.1+RA1.1 F1.1 SA1.1+RG0.1 F2 B0.1 SA2+SG0.1+RG1.1 "
              "F3 B1.1 SA3+SG1.1+RA2.1+RG0 F2.1 B0 SA2.1+RA3.1+RG1 F3.1 B1 SA3.1+RG2.1 B2.1 "
              "SG2.1+RG3.1 B3.1 SG3.1+RG2 B2 RG3 B3");
  expect_list(VT_SCHEDULE_INTERLEAVED, 2, 4, 2, 1,
              "RA0 F0 SA0+RA1 F1 SA1+RA0.1 F0.1 B0.1 SG0.1+RA1.1 F1.1 B1.1 SG1.1+RA2+RG0 F2 B0 "
              "SA2+SG0+RA3+RG1 F3 B1 SA3+SG1+RA2.1 F2.1 B2.1 SG2.1+RA3.1 F3.1 B3.1 SG3.1+RG2 B2 "
              "SG2+RG3 B3 SG3");
  // ZB-H1: 1F1B's order; each backward's gradient leaves before its weight pass, so the send is
  // no longer fused with the next receive.
  // ZB-H1: 1F1B's order of F and B; rank r runs W(k) after B(k + r): rank 1 of 4 after B(k+1)
  // (its first weight pass splits the send of B1's gradient from the next receive), rank 0 right
  // after each B.
  expect_list(VT_SCHEDULE_ZB_H1, 4, 4, 1, 1,
              "RA0 F0 SA0+RA1 F1 SA1+RA2 F2 SA2+RG0 B0 SG0+RA3 F3 SA3+RG1 B1 SG1 W0 RG2 B2 SG2 W1 "
              "RG3 B3 SG3 W2 W3");
  expect_list(VT_SCHEDULE_ZB_H1, 2, 3, 1, 0, "F0 SA0 F1 SA1+RG0 B0 W0 F2 SA2+RG1 B1 W1 RG2 B2 W2");
  // ZB-V, pp 2, m 2 (checked by hand, zbv_order's fixed order of kinds: F of chunk 1, F of
  // chunk 0, B and W of chunk 0, B and W of chunk 1): rank 0 holds virtual stages 0 and 3 (the
  // head), rank 1 stages 1 and 2, whose turn (SA0+RA0.1, SG0.1+RG0: to itself) pairs a send with
  // its receive. Rank 0 idles at step 2 (chunk 1's first input is still on rank 1); rank 1 runs
  // W0 at step 7, when B1.1's gradient is not there yet. 13 steps: 6m + p - 1.
  expect_list(VT_SCHEDULE_ZB_V, 2, 2, 2, 0,
              "F0 SA0 F1 SA1+RA0.1 F0.1 B0.1 SG0.1+RA1.1 F1.1 B1.1 SG1.1+RG0 B0 W0 W0.1 RG1 B1 W1 "
              "W1.1");
  expect_list(VT_SCHEDULE_ZB_V, 2, 2, 2, 1,
              "RA0 F0 SA0+RA0.1 F0.1 SA0.1+RA1 F1 SA1+RA1.1 F1.1 SA1.1+RG0.1 B0.1 SG0.1+RG0 B0 "
              "SG0 W0 RG1.1 B1.1 SG1.1+RG1 B1 SG1 W1 W0.1 W1.1");
  const vt_schedule_spec a = {VT_SCHEDULE_1F1B, 4, 16, 1, 0, {0, 0, 0}};
  const vt_schedule_spec g = {VT_SCHEDULE_GPIPE, 4, 16, 1, 0, {0, 0, 0}};
  const vt_schedule_spec il = {VT_SCHEDULE_INTERLEAVED, 4, 16, 2, 0, {0, 0, 0}};
  EXPECT(vt_schedule_stage_in_flight(&a, 0, NULL) == 4, "1f1b stage 0 in flight");
  EXPECT(vt_schedule_stage_in_flight(&g, 3, NULL) == 16, "gpipe in flight");
  EXPECT(vt_schedule_stage_in_flight(&il, 0, NULL) == 11 && vt_schedule_stage_in_flight(&il, 3, NULL) == 5,
         "interleaved in flight: 2*3+4+1 on stage 0, 4+1 on stage 3");
}

// Frozen virtual stages (spec.frozen_stages = F): every kind, pp 2-6, m pp and 2 pp, every F
// below the last virtual stage: the lists
// verify (pairs in order, simulations complete), and they hold exactly the full lists' actions
// but the gradient halves into virtual stages below F (transfers left empty gone): each such
// boundary across ranks loses its m gradient messages on both sides, nothing else changes.
static void test_frozen_stages(void) {
  const vt_schedule_kind kinds[5] = {VT_SCHEDULE_GPIPE, VT_SCHEDULE_1F1B, VT_SCHEDULE_INTERLEAVED,
                                     VT_SCHEDULE_ZB_H1, VT_SCHEDULE_ZB_V};
  int cases = 0;
  for (int k = 0; k < 5; k++)
    for (int pp = 2; pp <= 6; pp++)
      for (int mm = 1; mm <= 2; mm++) {
        const int v = kinds[k] == VT_SCHEDULE_INTERLEAVED || kinds[k] == VT_SCHEDULE_ZB_V ? 2 : 1;
        const int m = mm * pp;
        for (int f = 1; f < pp * v; f++) {
          schedule_set full, frz;
          build_set(&full, kinds[k], pp, m, v);
          frz.spec = full.spec;
          frz.spec.frozen_stages = f;
          const int cap = vt_schedule_max_actions(&frz.spec);
          int sent[2] = {0, 0}, dropped = 0;  // gradient messages sent: full, frozen
          for (int s = 0; s < pp; s++) {
            frz.lists[s] = malloc((size_t)cap * sizeof(vt_schedule_action));
            frz.counts[s] = vt_schedule_build(&frz.spec, s, frz.lists[s], cap);
            // walk both lists together: the frozen one is the full one with halves left out
            int j = 0, same = 1;
            for (int i = 0; i < full.counts[s] && same; i++) {
              const vt_schedule_action a = full.lists[s][i];
              int keep_send = 0, keep_recv = 0;
              for (int h = 0; h < a.nsend; h++) {
                const int vs = vt_schedule_vstage(&full.spec, s, a.send[h].chunk);
                const int drop = a.send[h].kind == VT_XFER_GRAD && vs <= f;
                keep_send += !drop;
                if (a.op == VT_SCHEDULE_TRANSFER && a.send[h].kind == VT_XFER_GRAD &&
                    vt_schedule_send_peer(&full.spec, s, a.send[h]) != s)
                  sent[0]++, dropped += drop;
              }
              for (int h = 0; h < a.nrecv; h++) {
                const int vs = vt_schedule_vstage(&full.spec, s, a.recv[h].chunk);
                keep_recv += !(a.recv[h].kind == VT_XFER_GRAD && vs + 1 <= f);
              }
              if (a.op == VT_SCHEDULE_TRANSFER && keep_send + keep_recv == 0) continue;
              const int xfer = a.op == VT_SCHEDULE_TRANSFER;
              same = j < frz.counts[s] && frz.lists[s][j].op == a.op &&
                     frz.lists[s][j].nsend == (xfer ? keep_send : a.nsend) &&
                     frz.lists[s][j].nrecv == (xfer ? keep_recv : a.nrecv);
              for (int h = 0; same && xfer && h < frz.lists[s][j].nsend; h++)
                sent[1] += frz.lists[s][j].send[h].kind == VT_XFER_GRAD &&
                           vt_schedule_send_peer(&frz.spec, s, frz.lists[s][j].send[h]) != s;
              j++;
            }
            EXPECT(same && j == frz.counts[s], NAME_FMT " frozen %d: stage %d's list is not the "
                   "full one without the frozen gradients", NAME_ARGS(&full.spec), f, s);
          }
          char err[256] = "";
          EXPECT(vt_schedule_verify(&frz.spec, err, sizeof err) == VT_OK, NAME_FMT " frozen %d: %s",
                 NAME_ARGS(&full.spec), f, err);
          EXPECT(vt_schedule_check_pairs(&frz.spec, lists_of(&frz), frz.counts, err, sizeof err) ==
                     VT_OK, NAME_FMT " frozen %d: %s", NAME_ARGS(&full.spec), f, err);
          // boundaries vs - 1 | vs for vs = 1..f across two ranks lose m messages each
          int cross = 0;
          for (int vs = 1; vs <= f; vs++) {
            int ra = -1, rb = -1;  // the ranks of vs - 1 and vs
            for (int r = 0; r < pp; r++)
              for (int c = 0; c < v; c++) {
                if (vt_schedule_vstage(&full.spec, r, c) == vs - 1) ra = r;
                if (vt_schedule_vstage(&full.spec, r, c) == vs) rb = r;
              }
            cross += ra != rb;
          }
          EXPECT(sent[1] == sent[0] - dropped && dropped == cross * m,
                 NAME_FMT " frozen %d: %d gradient messages of %d left, %d dropped, want %d",
                 NAME_ARGS(&full.spec), f, sent[1], sent[0], dropped, cross * m);
          // The simulator charges a frozen virtual stage its forwards only (the executor skips
          // its backward and weight passes): each rank's busy time is m (F + (B + W) per trained
          // chunk).
          const vt_schedule_costs at = {1.0, 1.75, 0.5};
          double busy[6];
          const vt_schedule_sim_result res =
              vt_schedule_simulate(&frz.spec, lists_of(&frz), frz.counts, at, 1, busy);
          for (int s = 0; s < pp; s++) {
            double want = 0.0;
            for (int c = 0; c < v; c++)
              want += m * (at.f + (vt_schedule_vstage(&frz.spec, s, c) >= f ? at.b + at.w : 0.0));
            EXPECT(res.completed && fabs(busy[s] - want) < 1e-9,
                   NAME_FMT " frozen %d: stage %d simulated busy %.3f, want %.3f",
                   NAME_ARGS(&full.spec), f, s, busy[s], want);
          }
          cases++;
          free_set(&full), free_set(&frz);
        }
      }
  printf("frozen virtual stages: %d (kind, pp, m, frozen) cases verified, the lists the full ones "
         "without the frozen stages' gradient messages\n", cases);
}

// ZB-V built for unequal passes (spec.costs): pp 2-8, m pp, 2 pp, 8 and 16, pass times of the
// CPU stages (W a third of B), B longer and W shorter than F, and B and W half of F: every list
// is well formed and verifies, needs no more activation or weight sets on any stage than the
// equal-pass order's (the memory planned), and simulated with deferred sends at those times
// idles no more than the equal-pass order's list does (printed for pp 2, 4 and 8 at m 8 and
// 16); equal times given (1, 1, 1) keep the equal-pass order's step length.
static void test_timed_zbv(void) {
  const vt_schedule_costs times[] = {{1.0, 1.0, 1.0}, {1.0, 1.0, 0.33}, {1.0, 1.1, 0.8},
                                     {1.0, 1.3, 0.7}, {1.0, 0.5, 0.5}};
  int cases = 0;
  double gain_sum = 0.0;
  for (int t = 0; t < 5; t++)
    for (int pp = 2; pp <= MAX_PP; pp++)
      for (int mi = 0; mi < 4; mi++) {
        const int ms[4] = {pp, 2 * pp, 8, MAX_M}, m = ms[mi];
        int seen = 0;
        for (int j = 0; j < mi; j++) seen |= ms[j] == m;
        if (m > MAX_M || seen) continue;
        schedule_set equal, timed;
        build_set(&equal, VT_SCHEDULE_ZB_V, pp, m, 2);
        timed.spec = equal.spec;
        timed.spec.costs = times[t];
        const int cap = vt_schedule_max_actions(&timed.spec);
        for (int s = 0; s < pp; s++) {
          timed.lists[s] = malloc((size_t)cap * sizeof(vt_schedule_action));
          timed.counts[s] = vt_schedule_build(&timed.spec, s, timed.lists[s], cap);
          check_stage(&timed, s);
          int ws_e, ws_t;  // no more activation or weight sets than the equal-pass order's
          const int in_e = vt_schedule_stage_in_flight(&equal.spec, s, &ws_e);
          const int in_t = vt_schedule_stage_in_flight(&timed.spec, s, &ws_t);
          EXPECT(in_t <= in_e && ws_t <= ws_e, NAME_FMT " stage %d timed: %d units and %d weight "
                 "sets, the equal-pass order %d and %d", NAME_ARGS(&timed.spec), s, in_t, ws_t,
                 in_e, ws_e);
        }
        char err[256] = "";
        EXPECT(vt_schedule_verify(&timed.spec, err, sizeof err) == VT_OK, NAME_FMT " timed: %s",
               NAME_ARGS(&timed.spec), err);
        // whole-stage times: simulate_bubble divides by the 2 chunks
        const vt_schedule_costs stage = {2 * times[t].f, 2 * times[t].b, 2 * times[t].w};
        int ok_e, ok_t;
        const double idle_e = simulate_bubble(&equal, stage, 1, &ok_e);
        const double idle_t = simulate_bubble(&timed, stage, 1, &ok_t);
        EXPECT(ok_e && ok_t && idle_t <= idle_e + 1e-9, NAME_FMT " F %g B %g W %g: the timed "
               "order idles %.3f, the equal-pass one %.3f", NAME_ARGS(&timed.spec),
               times[t].f, times[t].b, times[t].w, idle_t, idle_e);
        if (t == 0)
          EXPECT(fabs(idle_t - idle_e) < 1e-9, NAME_FMT ": equal times given idle %.3f, the "
                 "equal-pass order %.3f", NAME_ARGS(&timed.spec), idle_t, idle_e);
        if (t > 0 && (pp == 2 || pp == 4 || pp == 8) && (m == 8 || m == 16))
          printf("zb-v pp %d m %2d, F %.2f B %.2f W %.2f: idle %.3f built for these times, %.3f "
                 "with the equal-pass order\n", pp, m, times[t].f, times[t].b, times[t].w, idle_t,
                 idle_e);
        gain_sum += idle_e - idle_t;
        cases++;
        free_set(&equal), free_set(&timed);
      }
  printf("zb-v for given pass times: %d cases verified, never idler than the equal-pass order "
         "(mean idle %.3f lower)\n", cases, gain_sum / cases);
}

int main(void) {
  test_parse();
  test_known_lists();
  test_frozen_stages();
  test_timed_zbv();
  const vt_schedule_kind kinds[5] = {VT_SCHEDULE_GPIPE, VT_SCHEDULE_1F1B, VT_SCHEDULE_INTERLEAVED,
                                     VT_SCHEDULE_ZB_H1, VT_SCHEDULE_ZB_V};
  // F B W: backward twice the forward (the ZB-H1 formula's case), then as long as the forward
  const vt_schedule_costs costs[2] = {{1.0, 1.0, 1.0}, {1.0, 0.5, 0.5}};
  int sims = 0, sim_ok = 0, lists = 0;
  double worst_gap = 0.0;
  for (int k = 0; k < 5; k++)
    for (int v = 1; v <= MAX_V; v++)
      for (int pp = 1; pp <= MAX_PP; pp++)
        for (int m = 1; m <= MAX_M; m++) {
          const vt_schedule_spec sp = {kinds[k], pp, m, v, 0, {0, 0, 0}};
          if (vt_schedule_spec_check(&sp, NULL, 0) != VT_OK) continue;
          schedule_set set;
          build_set(&set, kinds[k], pp, m, v);
          lists++;
          for (int s = 0; s < pp; s++) check_stage(&set, s);
          char err[256] = "";
          EXPECT(vt_schedule_check_pairs(&sp, lists_of(&set), set.counts, err, sizeof err) ==
                     VT_OK,
                 NAME_FMT ": %s", NAME_ARGS(&sp), err);
          EXPECT(vt_schedule_verify(&sp, err, sizeof err) == VT_OK, NAME_FMT ": %s",
                 NAME_ARGS(&sp), err);
          for (int c = 0; c < 2; c++)
            for (int deferred = 0; deferred < 2; deferred++) {
              int ok;
              if (kinds[k] == VT_SCHEDULE_ZB_V && !deferred) continue;  // needs deferred sends
              const double bubble = simulate_bubble(&set, costs[c], deferred, &ok);
              sims++;
              sim_ok += ok;
              // ZB-H1 needs deferred sends (a blocking send ties its sender to the receiver's
              // next step); its formula assumes equal F, B and W, otherwise it must still beat
              // 1F1B's.
              const int zb = vt_schedule_splits_backward(kinds[k]);
              if (zb && !deferred) continue;
              const vt_schedule_spec plain = {VT_SCHEDULE_1F1B, pp, m, 1, 0, {0, 0, 0}};
              const int zb_other = zb && (c == 1 || m < pp);
              const double formula = vt_schedule_bubble_formula(zb_other ? &plain : &sp);
              double gap = zb_other ? bubble - formula : fabs(bubble - formula);
              if (ok && !zb_other && gap > worst_gap) worst_gap = gap;
              // Equal stages and free transfers: rendezvous sends must add no stall beyond the
              // textbook bubble, or the list order makes a rank wait on a neighbour needlessly.
              EXPECT(!ok || gap < (zb_other && pp > 1 ? -1e-9 : 1e-9),
                     NAME_FMT " (F %g B %g W %g, %s sends): bubble %.6f, %s %.6f", NAME_ARGS(&sp),
                     costs[c].f, costs[c].b, costs[c].w, deferred ? "deferred" : "blocking",
                     bubble, zb_other ? "1f1b's formula" : "formula", formula);
            }
          free_set(&set);
        }
  printf("lists checked: %d (gpipe, 1f1b, zb-h1: pp 1..%d x m 1..%d; interleaved: v 2..%d, pp "
         "2..%d, m a multiple of pp up to %d; zb-v: v 2, pp 2..%d x m 1..%d); rendezvous "
         "simulations (blocking and deferred sends; zb-v deferred only) completed: %d/%d\n",
         lists, MAX_PP, MAX_M, MAX_V, MAX_PP, MAX_M, MAX_PP, MAX_M, sim_ok, sims);
  printf("largest |simulated bubble - formula| over all of them (zb-h1, zb-v: deferred sends, F = "
         "B = W): %.3g\n",
         worst_gap);

  printf("\nbubble (idle fraction of the step, mean over stages), simulated vs the formula "
         "(p-1)/(v*m+p-1), zb-h1 (p-1)/(3m+p-1)\n");
  printf("%-12s %3s %3s %3s  %14s %14s %14s %14s  %8s  %s\n", "kind", "p", "m", "v",
         "F1 B1 W1 block", "F1 B1 W1 defer", "F1 B.5 W.5 def", "B1.1 W.8 def", "formula",
         "in flight on stage 0, p-1 (units)");
  // Unequal passes (the last column: B 10% longer, W 20% shorter than F) stall a list built for
  // equal ones; zb-v's order of kinds keeps that near ZB-H1's.
  const vt_schedule_costs uneven = {1.0, 1.1, 0.8};
  const int show_p[] = {2, 4, 8}, show_m[] = {8, 16};
  for (int k = 0; k < 5; k++)
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 2; j++) {
        schedule_set set;
        int ok;
        const int zbv = kinds[k] == VT_SCHEDULE_ZB_V;
        const int v = kinds[k] == VT_SCHEDULE_INTERLEAVED || zbv ? 2 : 1;
        build_set(&set, kinds[k], show_p[i], show_m[j], v);
        // nan: zb-v needs deferred sends (its blocking simulation deadlocks)
        const double blocking = zbv ? NAN : simulate_bubble(&set, costs[0], 0, &ok);
        const double b12 = simulate_bubble(&set, costs[0], 1, &ok);
        const double b11 = simulate_bubble(&set, costs[1], 1, &ok);
        const double bu = simulate_bubble(&set, uneven, 1, &ok);
        const int last = show_p[i] - 1;
        printf("%-12s %3d %3d %3d  %14.4f %14.4f %14.4f %14.4f  %8.4f  %d, %d\n",
               vt_schedule_name(kinds[k]), show_p[i], show_m[j], v, blocking, b12, b11, bu,
               vt_schedule_bubble_formula(&set.spec),
               vt_schedule_max_in_flight(set.lists[0], set.counts[0]),
               vt_schedule_max_in_flight(set.lists[last], set.counts[last]));
        free_set(&set);
      }

  printf("\n");
  test_split_deadlocks(VT_SCHEDULE_1F1B, 2, 2, 1);
  test_split_deadlocks(VT_SCHEDULE_INTERLEAVED, 2, 4, 2);
  test_split_deadlocks(VT_SCHEDULE_INTERLEAVED, 4, 8, 2);
  test_split_deadlocks(VT_SCHEDULE_ZB_H1, 2, 2, 1);
  test_pair_order_caught();
  printf("\n");
  const vt_schedule_spec show[] = {{VT_SCHEDULE_1F1B, 4, 6, 1, 0, {0, 0, 0}},
                                   {VT_SCHEDULE_GPIPE, 3, 3, 1, 0, {0, 0, 0}},
                                   {VT_SCHEDULE_INTERLEAVED, 4, 4, 2, 0, {0, 0, 0}},
                                   {VT_SCHEDULE_ZB_H1, 4, 6, 1, 0, {0, 0, 0}},
                                   {VT_SCHEDULE_ZB_V, 3, 4, 2, 0, {0, 0, 0}}};
  for (int i = 0; i < 5; i++) vt_schedule_print(stdout, &show[i]);

  printf("\n%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
