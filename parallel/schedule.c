// schedule.c: the schedule kinds' names, the spec check, virtual stages and peers, and the list
// builder with the GPipe, 1F1B, interleaved 1F1B and ZB-H1 lists (ZB-V's order is
// schedule_zbv.c's; memory, printing, the message-order check and the simulator
// schedule_check.c's).
// Must not depend on MPI, NCCL, CUDA or the model: the executor in launch/ does the transfers.
#include "schedule.h"

#include <math.h>
#include <string.h>

#include "schedule_internal.h"

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
int vt_sched_vstage_rank(const vt_schedule_spec *s, int vs) {
  const int p = s->pp_size;
  if (s->kind == VT_SCHEDULE_ZB_V) return vs < p ? vs : 2 * p - 1 - vs;
  return vs % p;
}

// ACT goes to the next virtual stage's rank, GRAD to the previous one's; a received ACT comes
// from the previous one, a received GRAD from the next.
int vt_schedule_send_peer(const vt_schedule_spec *s, int r, vt_schedule_xfer x) {
  return vt_sched_vstage_rank(
      s, vt_schedule_vstage(s, r, x.chunk) + (x.kind == VT_XFER_ACT ? 1 : -1));
}

int vt_schedule_recv_peer(const vt_schedule_spec *s, int r, vt_schedule_xfer x) {
  return vt_sched_vstage_rank(
      s, vt_schedule_vstage(s, r, x.chunk) + (x.kind == VT_XFER_ACT ? -1 : 1));
}

void vt_sched_push(vt_sched_builder *b, vt_schedule_action a) {
  VT_CHECK(b->count < b->capacity, "schedule: action buffer of %d is too small", b->capacity);
  b->out[b->count++] = a;
}

// ZB-H1: the weight passes of micro-batches up to `upto`, in order.
static void weights_upto(vt_sched_builder *b, int upto) {
  for (; b->weights <= upto; b->weights++)
    vt_sched_push(b, vt_sched_compute(VT_SCHEDULE_WEIGHT, b->weights, 0));
}

void vt_sched_add_xfer(vt_schedule_action *a, int is_send, vt_schedule_xfer_kind kind, int mb,
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
static void push_xfer(vt_sched_builder *b, int is_send, vt_schedule_xfer_kind kind, int mb,
                      int chunk) {
  if (!is_send && b->count > 0) {
    vt_schedule_action *last = &b->out[b->count - 1];
    if (last->op == VT_SCHEDULE_TRANSFER && last->nsend == 1 && last->nrecv == 0) {
      vt_sched_add_xfer(last, 0, kind, mb, chunk);
      return;
    }
  }
  vt_schedule_action a = vt_sched_transfer();
  vt_sched_add_xfer(&a, is_send, kind, mb, chunk);
  vt_sched_push(b, a);
}

// A unit's compute with its transfers in plain order.
// A transfer to the rank itself (ZB-V's turn) is left out: vt_sched_build_zbv pairs it in one
// action.
void vt_sched_unit(vt_sched_builder *b, const vt_schedule_spec *s, int r, int backward, int mb,
                   int chunk) {
  const int first = first_vs(s, r, chunk), last = last_vs(s, r, chunk);
  const vt_schedule_xfer x = {backward ? VT_XFER_GRAD : VT_XFER_ACT, mb, chunk};
  if ((backward ? !last : !first) && vt_schedule_recv_peer(s, r, x) != r)
    push_xfer(b, 0, x.kind, mb, chunk);
  vt_sched_push(
      b, vt_sched_compute(backward ? VT_SCHEDULE_BACKWARD : VT_SCHEDULE_FORWARD, mb, chunk));
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
static void lockstep(vt_sched_builder *b, const vt_schedule_spec *s, int r, int f, int k,
                     int f_next, int k_next) {
  const int units = s->n_micro * s->chunks;
  int mb, chunk;
  vt_schedule_action x = vt_sched_transfer();
  if (f >= 0) {
    nth_unit(s, f, 0, &mb, &chunk);
    vt_sched_push(b, vt_sched_compute(VT_SCHEDULE_FORWARD, mb, chunk));
    if (!last_vs(s, r, chunk)) vt_sched_add_xfer(&x, 1, VT_XFER_ACT, mb, chunk);
  }
  if (k >= 0) {
    nth_unit(s, k, 1, &mb, &chunk);
    vt_sched_push(b, vt_sched_compute(VT_SCHEDULE_BACKWARD, mb, chunk));
    if (!first_vs(s, r, chunk)) vt_sched_add_xfer(&x, 1, VT_XFER_GRAD, mb, chunk);
  }
  if (f_next >= 0 && f_next < units) {
    nth_unit(s, f_next, 0, &mb, &chunk);
    if (!first_vs(s, r, chunk)) vt_sched_add_xfer(&x, 0, VT_XFER_ACT, mb, chunk);
  }
  if (k_next >= 0 && k_next < units) {
    nth_unit(s, k_next, 1, &mb, &chunk);
    if (!last_vs(s, r, chunk)) vt_sched_add_xfer(&x, 0, VT_XFER_GRAD, mb, chunk);
  }
  if (x.nsend + x.nrecv > 0) vt_sched_push(b, x);
}

static int build_list(const vt_schedule_spec *s, int r, vt_schedule_action *actions,
                      int capacity) {
  vt_sched_builder b = {actions, 0, capacity, 0};
  const int p = s->pp_size, m = s->n_micro, units = m * s->chunks;
  int mb, chunk;
  if (s->kind == VT_SCHEDULE_ZB_V) {
    int kinds[6][2];
    const int timed = s->costs.f > 0 && vt_sched_zbv_timed_choice(s, kinds);
    return vt_sched_build_zbv(s, r, &b, timed ? (const int(*)[2])kinds : NULL);
  }
  if (s->kind == VT_SCHEDULE_GPIPE) {
    for (int i = 0; i < m; i++) vt_sched_unit(&b, s, r, 0, i, 0);
    for (int i = 0; i < m; i++) vt_sched_unit(&b, s, r, 1, i, 0);
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
    for (int k = 0; k < warmup; k++) vt_sched_unit(&b, s, r, 0, k, 0);
    for (int k = 0; k < units - warmup; k++) {
      vt_sched_unit(&b, s, r, 0, warmup + k, 0);
      vt_sched_unit(&b, s, r, 1, k, 0);
      weights_upto(&b, k - lag);
    }
    for (int k = units - warmup; k < units; k++) {
      vt_sched_unit(&b, s, r, 1, k, 0);
      weights_upto(&b, k - lag);
    }
    if (vt_schedule_splits_backward(s->kind)) weights_upto(&b, units - 1);
    return b.count;
  }
  nth_unit(s, 0, 0, &mb, &chunk);
  if (!first_vs(s, r, chunk)) {  // the first forward's input
    vt_schedule_action x = vt_sched_transfer();
    vt_sched_add_xfer(&x, 0, VT_XFER_ACT, mb, chunk);
    vt_sched_push(&b, x);
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

