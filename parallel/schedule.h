// schedule.h: pipeline schedules (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V) as pure functions that give one
// pipeline rank's ordered list of compute and point-to-point actions, which the executor runs
// literally; plus a printer, a message-order check and a rendezvous simulator, so that every
// list is proven deadlock-free and correctly paired without any communication.
// Must not depend on MPI, NCCL, CUDA or the model: it only computes lists of integers.
#ifndef VT_SCHEDULE_H
#define VT_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

#include "vt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

// Model chunks and virtual stages: with `chunks` = v model chunks per rank (interleaved and ZB-V;
// 1 otherwise) the model is cut into p * v virtual stages. Interleaved: rank r holds chunks
// c = 0..v-1, which are virtual stages c * p + r; activations flow from virtual stage s to s + 1:
// to the next rank, and from the last rank back to rank 0 (its next chunk), so the pipeline ranks
// form a ring. ZB-V: two chunks in a V, chunk 0 of rank r is virtual stage r and chunk 1 virtual
// stage 2p-1-r, so activations go down the ranks through chunk 0, turn on rank p-1 (from its
// chunk 0 to its chunk 1, a local copy) and come back up through chunk 1: rank 0 holds both the
// embedding (virtual stage 0) and the head (2p-1), and only neighbours talk.
//
// GPIPE: all forwards (micro-batch 0..m-1), then all backwards in FORWARD order (0..m-1), so every
// stage accumulates weight gradients in the same micro-batch order as 1F1B and as a pp=1 run; the
// gpipe and 1f1b runs then differ only in timing, not in floating-point summation order.
// ONE_F_ONE_B: non-interleaved 1F1B (PipeDream-flush): stage s runs w = min(pp-s-1, m) warmup
// forwards, then m-w steps of (forward w+k, backward k), then w cooldown backwards.
// INTERLEAVED: 1F1B over (micro-batch, chunk) units (Megatron's virtual pipeline): forwards take
// micro-batches in groups of p (m must be a multiple of p), each group through chunk 0, then chunk 1, ...; backwards the same
// with the chunks reversed; rank r runs (p - r - 1) * 2 + (v - 1) * p warmup forwards (all of
// them when that reaches m * v), then alternates forward and backward, then cools down. The idle
// fraction falls from (p-1)/(m+p-1) to (p-1)/(v*m+p-1), for about (1 + (p-1)/(p*v)) times the
// activation memory of 1F1B on rank 0. Every chunk still sums its weight gradients over the
// micro-batches in increasing order, as one rank does.
// ZB_H1: zero-bubble 1F1B (Qi et al. 2023, "ZB-H1"): 1F1B's order of forwards and backwards with
// each backward split in two, B (the input gradient, on the critical path: its gradient is sent
// as soon as B ends) and W (the weight gradients, which nothing downstream waits for), and rank r
// running the W of micro-batch k after the B of k + r, so the W's fill the time rank r would
// otherwise wait for gradients in the cooldown. With equal F, B and W and m >= p the idle fraction
// falls from (p-1)/(m+p-1) to (p-1)/(3m+p-1). Memory: every rank keeps up to p units' activations
// (1F1B: p - r; the same peak, rank 0's) plus r + 1 units' weight-pass inputs. It needs deferred
// sends (vt_schedule_simulate): with blocking ones a rank's send waits for its neighbour's next
// step and ZB-H1 idles more than 1F1B.
// ZB_V: zero-bubble with V-shaped chunks (Qi et al. 2024, "ZB-V"): the V layout above with each
// backward split into B and W as in ZB-H1. The order comes from a greedy simulation of all ranks
// with equal F, B and W per chunk, in which a free rank runs, of the passes ready, the first of: F
// of chunk 1, F of chunk 0 (either only while fewer than 2p units are in flight: 1F1B's peak on
// rank 0, here on every rank), B then W of chunk 0, B then W of chunk 1; where a second rule (the
// ready B, else F, else W of the lowest micro-batch) gives a shorter step, which happens only with
// fewer micro-batches than ranks, its order instead. Every chunk runs its forwards, backwards and
// weight passes in micro-batch order (the same sums as one rank). A step takes 6m + p - 1 chunk
// passes where 1F1B takes 6m + 6(p - 1) and ZB-H1 6m + 2(p - 1), so the idle fraction is
// (p-1)/(6m+p-1), about half of ZB-H1's (checked for p up to 8 and m from p to 16). The list is
// run literally, so passes that are not equal stall it (docs/ARCHITECTURE.md has the figures).
// Memory: up to 2p units' activations (p micro-batches of a whole stage, 1F1B's rank-0 peak, on
// every rank) plus the weight-pass inputs of the units between B and W. Messages of the two kinds cross each neighbour pair in both
// directions in orders that differ between sender and receiver, so the transports keep one
// channel per kind (vt_comm_p2p.channel: an MPI tag, an NCCL link with its own send stream) and
// the pair check compares each kind's messages on its own; it needs deferred sends.
typedef enum {
  VT_SCHEDULE_GPIPE = 0,
  VT_SCHEDULE_1F1B = 1,
  VT_SCHEDULE_INTERLEAVED = 2,
  VT_SCHEDULE_ZB_H1 = 3,
  VT_SCHEDULE_ZB_V = 4,
} vt_schedule_kind;

#define VT_SCHEDULE_MAX_CHUNKS 64  // the message in schedule.c names it

// A unit's forward, input-gradient (B) and weight-gradient (W) times; a BACKWARD in a list
// without WEIGHT actions does both, b + w.
typedef struct {
  double f, b, w;
} vt_schedule_costs;

typedef struct {
  vt_schedule_kind kind;
  int pp_size;  // p >= 1
  int n_micro;  // m >= 1 micro-batches per step
  int chunks;   // v: 1 for gpipe, 1f1b and zb-h1, 2..VT_SCHEDULE_MAX_CHUNKS for interleaved, 2 for zb-v
  // The leading virtual stages (0 .. frozen_stages - 1, fewer than p * v) whose layers are all
  // frozen (a linear probe's backbone): no gradient message goes to them (the lists leave those
  // halves out, and transfers left empty), and the executor skips their backward and weight
  // actions, which stay in the lists where they were so that every unit keeps its slot as long
  // as before. 0: none.
  int frozen_stages;
  // ZB-V only: the pass times (per chunk unit) its order is built for; all 0: equal passes, the
  // order of unit steps above. Otherwise an event-driven greedy simulation of all ranks with
  // these times (a pass starts when its inputs have arrived, transfers free, F only under 2p
  // units in flight), each rank choosing among its ready passes by a fixed order of the six
  // kinds; of the 720 orders the one whose simulated step is shortest (the first found on a
  // tie, the equal-pass order's kinds first of all) among those that need on no rank more
  // activation or weight sets than the equal-pass order (so the memory planned holds), and the
  // equal-pass order itself where that one, simulated at these times, is no longer. Every chunk
  // still runs its passes in micro-batch order, so the step's bits are those of any other
  // order.
  vt_schedule_costs costs;
} vt_schedule_spec;

// A list holds compute actions (the forward or backward of one unit: micro-batch `mb` through
// chunk `chunk`) and transfer actions. A transfer action holds up to two sends and two receives
// and runs as one call that posts them all and returns when all are done (the executor's
// vt_comm_exchange: non-blocking MPI calls and a wait, or one NCCL group), issued sends first, in
// array order. GPipe and 1F1B are built in "plain" order, a unit's receive right
// before its compute and its send right after, and every send directly followed by a receive is
// fused into one action: without that, 1F1B's steady state deadlocks under rendezvous sends
// (stage s sends ACT(w+k) to s+1 while s+1 sends GRAD(k) to s, both blocking). Fusing never
// removes progress: posting a receive earlier can only let more transfers complete. Interleaved
// runs in lockstep like Megatron's: after each forward (warmup), each forward-backward pair
// (steady state) or backward (cooldown) one action sends what they produced and receives the
// inputs of the next forward and the next backward; plain order would deadlock there (two ranks
// each sending the other a gradient first).
typedef enum {
  VT_SCHEDULE_FORWARD = 0,   // forward of (mb, chunk)
  VT_SCHEDULE_BACKWARD = 1,  // backward of (mb, chunk); in a list with WEIGHT actions (ZB-H1)
                             // only its input gradient (B)
  VT_SCHEDULE_TRANSFER = 2,  // send[0..nsend) and recv[0..nrecv)
  VT_SCHEDULE_WEIGHT = 3,    // the weight gradients of (mb, chunk) (W), after its BACKWARD
} vt_schedule_op;

// What travels: ACT, the output activation of a unit (to the next virtual stage), or GRAD, the
// gradient of a unit's input (to the previous one).
typedef enum { VT_XFER_ACT = 1, VT_XFER_GRAD = 2 } vt_schedule_xfer_kind;

// The unit named is always this rank's own: a sent ACT is the output of (mb, chunk), a received
// ACT the input of (mb, chunk); a sent GRAD the gradient of (mb, chunk)'s input, a received GRAD
// that of its output. ACT goes to the rank of the next virtual stage, GRAD to that of the
// previous one (vt_schedule_send_peer). ZB-V's turn on rank p-1 is a transfer to the rank itself:
// one action sends chunk 0's output and receives chunk 1's input (right before chunk 1's forward),
// another sends chunk 1's input gradient and receives chunk 0's output gradient (right after
// chunk 1's backward); the executor copies.
typedef struct {
  vt_schedule_xfer_kind kind;
  int mb, chunk;
} vt_schedule_xfer;

typedef struct {
  vt_schedule_op op;
  int mb, chunk;  // FORWARD and BACKWARD
  int nsend, nrecv;
  vt_schedule_xfer send[2], recv[2];  // TRANSFER
} vt_schedule_action;

// Names accepted by vt_schedule_parse, for CLI messages.
#define VT_SCHEDULE_NAMES "gpipe|1f1b|interleaved|zb-h1|zb-v"

// "gpipe", "1f1b", "interleaved", "zb-h1" or "zb-v" (exact, lowercase). VT_ERR_INPUT otherwise, *kind untouched.
vt_status vt_schedule_parse(const char *name, vt_schedule_kind *kind);
const char *vt_schedule_name(vt_schedule_kind kind);

// VT_OK when the spec can be built (p, m, v >= 1; v == 1 unless interleaved or zb-v; interleaved
// needs p >= 2, v >= 2 and m a multiple of p, as Megatron's; zb-v p >= 2 and v == 2), else VT_ERR_INPUT with the reason in err. Says nothing about deadlock:
// vt_schedule_verify does.
vt_status vt_schedule_spec_check(const vt_schedule_spec *spec, char *err, size_t size);

// Upper bound on the list length of any rank: size the action buffer with it.
int vt_schedule_max_actions(const vt_schedule_spec *spec);

// Writes rank pp_rank's list into actions[0..count) and returns count. Fatal (VT_CHECK) on a
// spec that vt_schedule_spec_check refuses, pp_rank outside [0, p) or capacity too small.
int vt_schedule_build(const vt_schedule_spec *spec, int pp_rank, vt_schedule_action *actions,
                      int capacity);

// The virtual stage of chunk `chunk` of rank pp_rank: chunk * p + pp_rank, or ZB-V's V.
int vt_schedule_vstage(const vt_schedule_spec *spec, int pp_rank, int chunk);
// The rank a transfer half of rank pp_rank goes to (send) or comes from (recv): pp_rank itself
// for ZB-V's turn.
int vt_schedule_send_peer(const vt_schedule_spec *spec, int pp_rank, vt_schedule_xfer x);
int vt_schedule_recv_peer(const vt_schedule_spec *spec, int pp_rank, vt_schedule_xfer x);

// Whether the schedule splits the backward into BACKWARD (B) and WEIGHT (W) actions (ZB-H1, ZB-V).
int vt_schedule_splits_backward(vt_schedule_kind kind);

// Peak number of units in flight in a list, from their first use (the receive of their input, or
// their forward) to their backward (to their WEIGHT action where the list has them): the number
// of activation sets ("slots") the rank must keep. 1F1B: min(p - r, m); ZB-H1: min(p, m) where
// m >= p; GPipe: m; interleaved: the warmup count + 1 (at most m * v).
int vt_schedule_max_in_flight(const vt_schedule_action *actions, int count);
// The same for rank pp_rank's list; *weight_sets (may be NULL) receives the weight sets it needs
// (vt_schedule_assign_weight_sets).
int vt_schedule_stage_in_flight(const vt_schedule_spec *spec, int pp_rank, int *weight_sets);
// Gives each unit a slot for the whole step: at its first use the lowest slot free then, freed
// after its backward (its WEIGHT action). unit_slot[chunk * n_micro + mb] (m * v entries); returns the number of
// slots used, which is vt_schedule_max_in_flight.
int vt_schedule_assign_slots(const vt_schedule_spec *spec, const vt_schedule_action *actions,
                             int count, int *unit_slot);
// ZB-H1: a unit keeps the inputs of its weight pass (the output gradients of its Linears) from its
// BACKWARD to its WEIGHT action, in a "weight set"; gives each unit the lowest set free at its
// BACKWARD (unit_set[chunk * n_micro + mb]) and returns the number used: min(r + 1, m) on rank r,
// whose weight pass of micro-batch k follows the backward of k + r. 0 (all -1) for a schedule that
// does not split its backwards.
int vt_schedule_assign_weight_sets(const vt_schedule_spec *spec, const vt_schedule_action *actions,
                                   int count, int *unit_set);

// The idle fraction of an ideal step with equal stages: (p-1)/(v*m+p-1) (v = 1: GPipe, 1F1B);
// ZB-H1 (p-1)/(3m+p-1), with a unit's forward, input-gradient and weight-gradient passes equal,
// deferred sends and m >= p (fewer micro-batches idle more, still less than 1F1B); ZB-V
// (p-1)/(6m+p-1) likewise.
double vt_schedule_bubble_formula(const vt_schedule_spec *spec);
// That formula as text: "(p-1)/(v*m+p-1)", "(p-1)/(3m+p-1)" or "(p-1)/(6m+p-1)".
const char *vt_schedule_bubble_formula_text(vt_schedule_kind kind);

// Short token: F3 B3 W3 (chunk 0) or F3.1 B3.1 (chunk 1); transfers SA3 RA3 SG3 RG3 (with .c
// likewise), joined by + in one action: SA3+RG1. Returns buf.
const char *vt_schedule_action_str(vt_schedule_action action, char *buf, size_t size);
// One line "stage s (n actions): tokens...".
void vt_schedule_print_stage(FILE *f, int pp_rank, const vt_schedule_action *actions, int count);
// Every rank's list, one line each, under a header line.
void vt_schedule_print(FILE *f, const vt_schedule_spec *spec);

// Simulates all ranks at once under rendezvous semantics: a message passes when the receiver's
// current action has its receive half (the same message: kind, micro-batch and virtual-stage
// boundary) and the sender has posted the send, at the later of the two times. Blocking sends
// (deferred_sends 0; NCCL, where a group completes as one): a transfer action posts all its
// halves together and finishes when all are done. Deferred sends (MPI's executor): a transfer
// action posts its sends and finishes when its receives are done; before a forward or backward
// the rank waits for the sends that read from its unit's slot (vt_schedule_assign_slots; a weight
// pass writes nothing that is sent), and for all of them at the end of its list. Computes take the times
// in costs (per unit: divide a stage's time by v for equal chunks), transfers take no time, and
// so do the backward and weight passes of virtual stages below spec->frozen_stages (not run).
typedef struct {
  int completed;    // 1 when every rank reached the end of its list
  int stuck_stage;  // deadlock: the lowest rank that did not finish, else -1
  int stuck_index;  // the index of the action it is blocked on, else -1
  double makespan;  // time at which the last rank finished (when completed)
} vt_schedule_sim_result;

// lists[r], counts[r]: rank r's list. busy (p entries, may be NULL) receives each rank's compute
// time, so its idle fraction is 1 - busy[r] / makespan.
vt_schedule_sim_result vt_schedule_simulate(const vt_schedule_spec *spec,
                                            const vt_schedule_action *const *lists,
                                            const int *counts, vt_schedule_costs costs,
                                            int deferred_sends, double *busy);

// The mean idle fraction over ranks (1 - busy / makespan) of the whole schedule simulated with
// these per-unit costs; -1 if it does not complete.
double vt_schedule_simulated_idle(const vt_schedule_spec *spec, vt_schedule_costs costs,
                                  int deferred_sends);

// Per ordered pair of ranks (a -> b) and kind (ACT, GRAD), the messages a sends to b, in a's list
// order, must be the messages b receives from a, in b's order: MPI (one tag per kind) and NCCL
// (one link per direction and kind) match a channel's messages in posting order, so any other
// order would pair the wrong buffers. (A rank's transfers to itself pair within their action.) VT_OK, or
// VT_ERR_INPUT with the first difference in err.
vt_status vt_schedule_check_pairs(const vt_schedule_spec *spec,
                                  const vt_schedule_action *const *lists, const int *counts,
                                  char *err, size_t size);

// Builds every rank's list and checks it: pairs in order and rendezvous simulations that complete,
// with blocking and with deferred sends. The trainer runs it on every rank before the first step, so a schedule that could
// hang is refused with a message instead. VT_OK, or VT_ERR_INPUT with the reason in err.
vt_status vt_schedule_verify(const vt_schedule_spec *spec, char *err, size_t size);

#ifdef __cplusplus
}
#endif

#endif
