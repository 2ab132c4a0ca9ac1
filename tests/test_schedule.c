// test_schedule.c: the GPipe and 1F1B action lists without any communication: every stage's list
// is well formed, neighbours' sends and receives pair up in order, a rendezvous simulation of all
// stages completes, and the simulated bubble is printed beside (p-1)/(m+p-1).
// Must not depend on MPI or the model (label unit).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "vt_check.h"

#define MAX_PP 8
#define MAX_M 16


typedef struct {
  int pp, m;
  vt_schedule_kind kind;
  vt_schedule_action *lists[MAX_PP];
  int counts[MAX_PP];
} schedule_set;

static void build_set(schedule_set *set, vt_schedule_kind kind, int pp, int m) {
  set->pp = pp;
  set->m = m;
  set->kind = kind;
  int cap = vt_schedule_max_actions(m);
  for (int s = 0; s < pp; s++) {
    set->lists[s] = malloc((size_t)cap * sizeof(vt_schedule_action));
    set->counts[s] = vt_schedule_build(kind, pp, s, m, set->lists[s], cap);
  }
}

static void free_set(schedule_set *set) {
  for (int s = 0; s < set->pp; s++) free(set->lists[s]);
}

static int is_compute(vt_schedule_op op) {
  return op == VT_SCHEDULE_FORWARD || op == VT_SCHEDULE_BACKWARD;
}

// Which compute a receive half feeds, and which compute a send half needs before it: this is
// the "receive right before its consumer, send right after its producer" rule.
static int recv_act_mb(vt_schedule_action a) {
  if (a.op == VT_SCHEDULE_RECV_ACT) return a.mb;
  if (a.op == VT_SCHEDULE_SEND_GRAD_RECV_ACT) return a.recv_mb;
  return -1;
}
static int recv_grad_mb(vt_schedule_action a) {
  if (a.op == VT_SCHEDULE_RECV_GRAD) return a.mb;
  if (a.op == VT_SCHEDULE_SEND_ACT_RECV_GRAD) return a.recv_mb;
  return -1;
}
static int send_act_mb(vt_schedule_action a) {
  return a.op == VT_SCHEDULE_SEND_ACT || a.op == VT_SCHEDULE_SEND_ACT_RECV_GRAD ? a.mb : -1;
}
static int send_grad_mb(vt_schedule_action a) {
  return a.op == VT_SCHEDULE_SEND_GRAD || a.op == VT_SCHEDULE_SEND_GRAD_RECV_ACT ? a.mb : -1;
}

static void check_stage(const schedule_set *set, int s) {
  const char *kn = vt_schedule_name(set->kind);
  int pp = set->pp, m = set->m, n = set->counts[s];
  const vt_schedule_action *a = set->lists[s];
  int first = s == 0, last = s == pp - 1;
  int fwd_at[MAX_M], bwd_at[MAX_M], fwd_n[MAX_M] = {0}, bwd_n[MAX_M] = {0};
  int bad_neighbour = 0, bad_place = 0, bad_mb = 0;
  for (int i = 0; i < n; i++) {
    vt_schedule_action x = a[i];
    int mbs[2] = {x.mb, x.recv_mb};
    for (int k = 0; k < 2; k++)
      if (mbs[k] < -1 || mbs[k] >= m || (k == 0 && mbs[k] < 0)) bad_mb++;
    if (bad_mb) break;
    if (x.op == VT_SCHEDULE_FORWARD) fwd_at[x.mb] = i, fwd_n[x.mb]++;
    if (x.op == VT_SCHEDULE_BACKWARD) bwd_at[x.mb] = i, bwd_n[x.mb]++;
    int ra = recv_act_mb(x), rg = recv_grad_mb(x), sa = send_act_mb(x), sg = send_grad_mb(x);
    if ((first && (ra >= 0 || sg >= 0)) || (last && (sa >= 0 || rg >= 0))) bad_neighbour++;
    // Receives feed the very next action; sends follow the very action that produced them.
    const vt_schedule_action *next = i + 1 < n ? &a[i + 1] : NULL;
    const vt_schedule_action *prev = i > 0 ? &a[i - 1] : NULL;
    if (ra >= 0 && !(next && next->op == VT_SCHEDULE_FORWARD && next->mb == ra)) bad_place++;
    if (rg >= 0 && !(next && next->op == VT_SCHEDULE_BACKWARD && next->mb == rg)) bad_place++;
    if (sa >= 0 && !(prev && prev->op == VT_SCHEDULE_FORWARD && prev->mb == sa)) bad_place++;
    if (sg >= 0 && !(prev && prev->op == VT_SCHEDULE_BACKWARD && prev->mb == sg)) bad_place++;
    // Conversely, every compute that needs or produces a transfer has it next to it.
    if (x.op == VT_SCHEDULE_FORWARD && !first && !(prev && recv_act_mb(*prev) == x.mb)) bad_place++;
    if (x.op == VT_SCHEDULE_FORWARD && !last && !(next && send_act_mb(*next) == x.mb)) bad_place++;
    if (x.op == VT_SCHEDULE_BACKWARD && !last && !(prev && recv_grad_mb(*prev) == x.mb)) bad_place++;
    if (x.op == VT_SCHEDULE_BACKWARD && !first && !(next && send_grad_mb(*next) == x.mb)) bad_place++;
    if (!is_compute(x.op) && x.op > VT_SCHEDULE_SEND_GRAD_RECV_ACT) bad_place++;
  }
  EXPECT(!bad_mb, "%s pp %d m %d stage %d: microbatch index out of range", kn, pp, m, s);
  if (bad_mb) return;
  EXPECT(!bad_neighbour, "%s pp %d m %d stage %d: transfer with a stage that does not exist", kn,
         pp, m, s);
  EXPECT(!bad_place, "%s pp %d m %d stage %d: %d transfers not next to their compute", kn, pp, m,
         s, bad_place);
  int once = 1, ordered = 1;
  for (int i = 0; i < m; i++) {
    if (fwd_n[i] != 1 || bwd_n[i] != 1) once = 0;
    else if (fwd_at[i] > bwd_at[i]) ordered = 0;
  }
  EXPECT(once, "%s pp %d m %d stage %d: a microbatch not run exactly once each way", kn, pp, m, s);
  EXPECT(ordered, "%s pp %d m %d stage %d: a backward before its forward", kn, pp, m, s);
  int peak = vt_schedule_max_in_flight(a, n);
  int want = set->kind == VT_SCHEDULE_1F1B ? (pp - s < m ? pp - s : m) : m;
  EXPECT(peak == want, "%s pp %d m %d stage %d: %d in flight, want %d", kn, pp, m, s, peak, want);
  if (set->kind == VT_SCHEDULE_1F1B)
    EXPECT(peak <= pp - s && peak <= pp, "1f1b pp %d m %d stage %d: %d in flight > %d", pp, m, s,
           peak, pp - s);
}

// The sequence of microbatches sent on one channel by one stage must equal the sequence its
// peer receives: MPI matches messages between a pair in posting order, whatever the tag.
static void check_channels(const schedule_set *set) {
  const char *kn = vt_schedule_name(set->kind);
  for (int s = 0; s + 1 < set->pp; s++) {
    int sent[MAX_M * 2], recvd[MAX_M * 2], ns = 0, nr = 0;
    for (int i = 0; i < set->counts[s]; i++) {
      int mb = send_act_mb(set->lists[s][i]);
      if (mb >= 0 && ns < MAX_M * 2) sent[ns++] = mb;
    }
    for (int i = 0; i < set->counts[s + 1]; i++) {
      int mb = recv_act_mb(set->lists[s + 1][i]);
      if (mb >= 0 && nr < MAX_M * 2) recvd[nr++] = mb;
    }
    EXPECT(ns == set->m && nr == ns && memcmp(sent, recvd, (size_t)ns * sizeof(int)) == 0,
           "%s pp %d m %d: activations %d->%d do not pair up in order", kn, set->pp, set->m, s,
           s + 1);
    ns = nr = 0;
    for (int i = 0; i < set->counts[s + 1]; i++) {
      int mb = send_grad_mb(set->lists[s + 1][i]);
      if (mb >= 0 && ns < MAX_M * 2) sent[ns++] = mb;
    }
    for (int i = 0; i < set->counts[s]; i++) {
      int mb = recv_grad_mb(set->lists[s][i]);
      if (mb >= 0 && nr < MAX_M * 2) recvd[nr++] = mb;
    }
    EXPECT(ns == set->m && nr == ns && memcmp(sent, recvd, (size_t)ns * sizeof(int)) == 0,
           "%s pp %d m %d: gradients %d->%d do not pair up in order", kn, set->pp, set->m, s + 1,
           s);
  }
}

static double simulate_bubble(const schedule_set *set, double tf, double tb, int *ok) {
  double busy[MAX_PP];
  vt_schedule_sim_result r = vt_schedule_simulate(
      set->pp, (const vt_schedule_action *const *)set->lists, set->counts, tf, tb, busy);
  *ok = r.completed;
  EXPECT(r.completed, "%s pp %d m %d (tf %g tb %g): deadlock at stage %d action %d",
         vt_schedule_name(set->kind), set->pp, set->m, tf, tb, r.stuck_stage, r.stuck_index);
  if (!r.completed) return -1.0;
  double idle = 0.0;
  for (int s = 0; s < set->pp; s++) idle += 1.0 - busy[s] / r.makespan;
  return idle / set->pp;
}

// The reason the combined actions exist: split every one back into send-then-receive and the
// simulator must find the classic 1F1B steady-state deadlock.
static void test_unfused_deadlocks(void) {
  schedule_set set;
  build_set(&set, VT_SCHEDULE_1F1B, 2, 2);
  vt_schedule_action *split[2];
  int counts[2];
  for (int s = 0; s < 2; s++) {
    split[s] = malloc((size_t)set.counts[s] * 2 * sizeof(vt_schedule_action));
    counts[s] = 0;
    for (int i = 0; i < set.counts[s]; i++) {
      vt_schedule_action x = set.lists[s][i];
      if (x.op == VT_SCHEDULE_SEND_ACT_RECV_GRAD) {
        split[s][counts[s]++] = (vt_schedule_action){VT_SCHEDULE_SEND_ACT, x.mb, -1};
        split[s][counts[s]++] = (vt_schedule_action){VT_SCHEDULE_RECV_GRAD, x.recv_mb, -1};
      } else if (x.op == VT_SCHEDULE_SEND_GRAD_RECV_ACT) {
        split[s][counts[s]++] = (vt_schedule_action){VT_SCHEDULE_SEND_GRAD, x.mb, -1};
        split[s][counts[s]++] = (vt_schedule_action){VT_SCHEDULE_RECV_ACT, x.recv_mb, -1};
      } else {
        split[s][counts[s]++] = x;
      }
    }
  }
  vt_schedule_sim_result r =
      vt_schedule_simulate(2, (const vt_schedule_action *const *)split, counts, 1.0, 2.0, NULL);
  EXPECT(!r.completed, "1f1b pp 2 m 2 without combined actions should deadlock");
  printf("unfused 1f1b pp 2 m 2: %s (stage %d blocked at action %d)\n",
         r.completed ? "completed (unexpected)" : "deadlock, as expected", r.stuck_stage,
         r.stuck_index);
  for (int s = 0; s < 2; s++) free(split[s]);
  free_set(&set);
}

static void test_parse(void) {
  vt_schedule_kind k = VT_SCHEDULE_GPIPE;
  EXPECT(vt_schedule_parse("1f1b", &k) == VT_OK && k == VT_SCHEDULE_1F1B, "parse 1f1b");
  EXPECT(vt_schedule_parse("gpipe", &k) == VT_OK && k == VT_SCHEDULE_GPIPE, "parse gpipe");
  EXPECT(vt_schedule_parse("GPipe", &k) == VT_ERR_INPUT && k == VT_SCHEDULE_GPIPE, "parse GPipe");
  EXPECT(vt_schedule_parse("", &k) == VT_ERR_INPUT, "parse empty");
  EXPECT(vt_schedule_parse(NULL, &k) == VT_ERR_INPUT, "parse NULL");
  EXPECT(strcmp(vt_schedule_name(VT_SCHEDULE_1F1B), "1f1b") == 0, "name 1f1b");
  EXPECT(strcmp(vt_schedule_name(VT_SCHEDULE_GPIPE), "gpipe") == 0, "name gpipe");
}

// A hand-written expectation, so the generators are checked against more than their own rules.
static void test_known_list(void) {
  vt_schedule_action a[64];
  char buf[1024] = "", tok[32];
  int n = vt_schedule_build(VT_SCHEDULE_1F1B, 4, 1, 4, a, 64);
  for (int i = 0; i < n; i++) {
    strcat(buf, i ? " " : "");
    strcat(buf, vt_schedule_action_str(a[i], tok, sizeof tok));
  }
  const char *want = "RA0 F0 SA0 RA1 F1 SA1 RA2 F2 SA2+RG0 B0 SG0+RA3 F3 SA3+RG1 B1 SG1 RG2 B2 "
                     "SG2 RG3 B3 SG3";
  EXPECT(strcmp(buf, want) == 0, "1f1b pp 4 m 4 stage 1:\n got  %s\n want %s", buf, want);
  EXPECT(vt_schedule_stage_in_flight(VT_SCHEDULE_1F1B, 4, 0, 16) == 4, "1f1b stage 0 in flight");
  EXPECT(vt_schedule_stage_in_flight(VT_SCHEDULE_GPIPE, 4, 3, 16) == 16, "gpipe in flight");
}

int main(void) {
  test_parse();
  test_known_list();
  const vt_schedule_kind kinds[2] = {VT_SCHEDULE_GPIPE, VT_SCHEDULE_1F1B};
  const double costs[2][2] = {{1.0, 2.0}, {1.0, 1.0}};
  int sims = 0, sim_ok = 0;
  double worst_gap = 0.0;
  for (int k = 0; k < 2; k++)
    for (int pp = 1; pp <= MAX_PP; pp++)
      for (int m = 1; m <= MAX_M; m++) {
        schedule_set set;
        build_set(&set, kinds[k], pp, m);
        for (int s = 0; s < pp; s++) check_stage(&set, s);
        check_channels(&set);
        for (int c = 0; c < 2; c++) {
          int ok;
          double bubble = simulate_bubble(&set, costs[c][0], costs[c][1], &ok);
          sims++;
          sim_ok += ok;
          double gap = fabs(bubble - vt_schedule_bubble_formula(pp, m));
          if (ok && gap > worst_gap) worst_gap = gap;
          // Equal stages and free transfers: rendezvous sends must add no stall beyond the
          // textbook bubble, or the list order makes a stage wait on a neighbour needlessly.
          EXPECT(!ok || gap < 1e-9, "%s pp %d m %d (tf %g tb %g): bubble %.6f, formula %.6f",
                 vt_schedule_name(kinds[k]), pp, m, costs[c][0], costs[c][1], bubble,
                 vt_schedule_bubble_formula(pp, m));
        }
        free_set(&set);
      }
  printf("lists checked: 2 kinds x pp 1..%d x m 1..%d; rendezvous simulations completed: %d/%d\n",
         MAX_PP, MAX_M, sim_ok, sims);
  printf("largest |simulated bubble - (p-1)/(m+p-1)| over all of them: %.3g\n", worst_gap);

  printf("\nbubble (idle fraction of the step, mean over stages), simulated vs (p-1)/(m+p-1)\n");
  printf("%-6s %3s %3s  %12s %12s  %10s\n", "kind", "p", "m", "sim F1 B2", "sim F1 B1", "formula");
  const int show_p[] = {2, 4, 8}, show_m[] = {1, 4, 8, 16};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) {
        schedule_set set;
        int ok;
        build_set(&set, kinds[k], show_p[i], show_m[j]);
        double b12 = simulate_bubble(&set, 1.0, 2.0, &ok);
        double b11 = simulate_bubble(&set, 1.0, 1.0, &ok);
        printf("%-6s %3d %3d  %12.4f %12.4f  %10.4f\n", vt_schedule_name(kinds[k]), show_p[i],
               show_m[j], b12, b11, vt_schedule_bubble_formula(show_p[i], show_m[j]));
        free_set(&set);
      }

  printf("\n");
  test_unfused_deadlocks();
  printf("\n");
  vt_schedule_print(stdout, VT_SCHEDULE_1F1B, 4, 6);
  vt_schedule_print(stdout, VT_SCHEDULE_GPIPE, 3, 3);

  printf("\n%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
