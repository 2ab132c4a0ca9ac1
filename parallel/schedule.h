// schedule.h: pipeline schedules (GPipe, 1F1B) as pure functions that give one stage's ordered
// list of compute and point-to-point actions, which the executor runs literally; plus a printer
// and a rendezvous simulator so the lists can be proven deadlock-free without any communication.
// Must not depend on MPI, NCCL, CUDA or the model: it only computes lists of integers.
#ifndef VT_SCHEDULE_H
#define VT_SCHEDULE_H

#include <stdio.h>

#include "vt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

// GPIPE: all forwards (microbatch 0..m-1), then all backwards in FORWARD order (0..m-1), so every
// stage accumulates weight gradients in the same microbatch order as 1F1B and as a pp=1 run; the
// gpipe and 1f1b runs then differ only in timing, not in floating-point summation order.
// ONE_F_ONE_B: non-interleaved 1F1B (PipeDream-flush): stage s runs w = min(pp-s-1, m) warmup
// forwards, then m-w steps of (forward w+k, backward k), then w cooldown backwards.
typedef enum { VT_SCHEDULE_GPIPE = 0, VT_SCHEDULE_1F1B = 1 } vt_schedule_kind;

// "ACT" travels from stage s to s+1 (activations), "GRAD" from s+1 to s (their gradients).
// Stage 0 never receives ACT or sends GRAD; the last stage never sends ACT or receives GRAD.
// A receive sits immediately before the compute that consumes it, a send immediately after the
// compute that produced it.
//
// Combined actions: whenever a send would be immediately followed by a receive from the SAME
// neighbour, the two are fused into one action that the executor must run as a single
// MPI_Sendrecv (or isend + irecv + wait both; NCCL: one group with send and recv). Without this,
// 1F1B's steady state deadlocks under rendezvous sends: stage s sends ACT(w+k) to s+1 while s+1
// sends GRAD(k) to s, both blocking. Fusing is always safe: posting a receive earlier can only
// let more transfers complete. The peer may face a fused action with a fused action or with a
// plain receive and a plain send, in either order; both complete.
typedef enum {
  VT_SCHEDULE_FORWARD = 0,          // forward of microbatch mb
  VT_SCHEDULE_BACKWARD,             // backward of microbatch mb
  VT_SCHEDULE_SEND_ACT,             // output activation of mb to stage+1
  VT_SCHEDULE_RECV_ACT,             // input activation of mb from stage-1
  VT_SCHEDULE_SEND_GRAD,            // gradient w.r.t. this stage's input of mb to stage-1
  VT_SCHEDULE_RECV_GRAD,            // gradient w.r.t. this stage's output of mb from stage+1
  VT_SCHEDULE_SEND_ACT_RECV_GRAD,   // one Sendrecv with stage+1: send ACT(mb), recv GRAD(recv_mb)
  VT_SCHEDULE_SEND_GRAD_RECV_ACT,   // one Sendrecv with stage-1: send GRAD(mb), recv ACT(recv_mb)
} vt_schedule_op;

typedef struct {
  vt_schedule_op op;
  int mb;       // the microbatch computed, sent, or received (for combined ops: the one SENT)
  int recv_mb;  // combined ops only: the microbatch RECEIVED; -1 for every other op
} vt_schedule_action;

// Names accepted by vt_schedule_parse, for CLI messages.
#define VT_SCHEDULE_NAMES "gpipe|1f1b"

// "gpipe" or "1f1b" (exact, lowercase). VT_ERR_INPUT for anything else, *kind untouched.
vt_status vt_schedule_parse(const char *name, vt_schedule_kind *kind);
const char *vt_schedule_name(vt_schedule_kind kind);

// Upper bound on the list length of any stage, any kind: size the action buffer with it.
int vt_schedule_max_actions(int n_micro);

// Writes stage pp_rank's list into actions[0..count) and returns count. Fatal (VT_CHECK) on
// pp_size < 1, pp_rank outside [0, pp_size), n_micro < 1 or capacity too small.
int vt_schedule_build(vt_schedule_kind kind, int pp_size, int pp_rank, int n_micro,
                      vt_schedule_action *actions, int capacity);

// Peak number of microbatches forwarded but not yet backwarded in a list: the number of
// activation sets the stage must keep, for the memory plan. 1F1B: min(pp_size - pp_rank, m);
// GPipe: m.
int vt_schedule_max_in_flight(const vt_schedule_action *actions, int count);
int vt_schedule_stage_in_flight(vt_schedule_kind kind, int pp_size, int pp_rank, int n_micro);

// (p-1)/(m+p-1): the idle fraction of an ideal GPipe or 1F1B step with equal stages.
double vt_schedule_bubble_formula(int pp_size, int n_micro);

// Short token: F3 B3 SA3 RA3 SG3 RG3, combined SA3+RG1 and SG1+RA4. Returns buf.
const char *vt_schedule_action_str(vt_schedule_action action, char *buf, size_t size);
// One line "stage s (n actions): tokens...".
void vt_schedule_print_stage(FILE *f, int pp_rank, const vt_schedule_action *actions, int count);
// Every stage of a schedule, one line each, under a header line.
void vt_schedule_print(FILE *f, vt_schedule_kind kind, int pp_size, int n_micro);

// Simulates all stages at once under blocking rendezvous semantics: a send half completes only
// when the peer's current action has the matching receive half (same direction and microbatch),
// at the later of the two arrival times; a combined action posts both halves together and
// finishes when both are done. Compute takes t_fwd or t_bwd, transfers take no time.
typedef struct {
  int completed;    // 1 when every stage reached the end of its list
  int stuck_stage;  // deadlock: the lowest stage that did not finish, else -1
  int stuck_index;  // the index of the action it is blocked on, else -1
  double makespan;  // time at which the last stage finished (when completed)
} vt_schedule_sim_result;

// lists[s], counts[s]: stage s's list. busy (pp_size entries, may be NULL) receives each
// stage's compute time, so its idle fraction is 1 - busy[s] / makespan.
vt_schedule_sim_result vt_schedule_simulate(int pp_size, const vt_schedule_action *const *lists,
                                            const int *counts, double t_fwd, double t_bwd,
                                            double *busy);

#ifdef __cplusplus
}
#endif

#endif
