// stage.c: the executor of a pipeline stage's schedule (stage.h).
#include "stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "vt_trace.h"

static void grads_ready(void *ctx, int layer) {
  vt_stage_ctx *x = ctx;
  vt_optimizer_grads_ready(x->opt, x->m->grads, layer);
}

// Loads micro-batch mb of this DP rank's share of step `step` into a slot, unless it is there
// already. The images go up with upload_ahead: only the forward reads them, and every forward
// issued so far is followed by inputs_read, so the copy need not wait for the backward passes
// queued since. The labels, read by the backward too, go up in stream order.
// With the decoding split (data.h), the TP group all-gathers the shares of a micro-batch's
// images in place, in stream order after the upload.
static void gather_images(vt_stage_ctx *x, int slot) {
  const vt_data *d = x->data;
  if (!x->m->has_embed || d->pixel_count == x->B) return;
  const size_t plane = (size_t)3 * x->o->model.img_size * x->o->model.img_size;
  float *img = x->m->slots[slot].img;
  vt_comm_all_gather(x->m->tp, img, img + (size_t)d->pixel_first * plane,
                     (int64_t)d->pixel_count * plane);
}

// ahead: the next step's micro-batch, loaded at this step's end, whose all-gather (collective)
// waits for that step, so that a rank may leave the load out alone (a stop signal pending).
static void load_batch(vt_stage_ctx *x, int64_t step, int mb, int slot, int ahead) {
  if (x->ahead_step == step && x->ahead_mb == mb) {
    x->ahead_step = -1;
    gather_images(x, slot);
    return;
  }
  const vt_model *m = x->m;
  const int S = x->o->model.img_size, B = x->B;
  const vt_model_slot *sl = &m->slots[slot];
  const float *img;
  const int32_t *labels;
  const vt_mix_target *mix;
  // The previous micro-batch's host buffers go back to the loader with the next call: its
  // uploads must be done (they normally are: the host runs a micro-batch ahead of the device).
  m->be->upload_wait();
  vt_data_next(x->data, step, mb, &img, &labels, &mix);
  if (x->label_chunk != x->data_chunk) {
    // ZB-V: the head's chunk is another unit with a slot of its own, maybe not yet taken: the
    // labels wait on the host for its forward (stash_labels).
    memcpy(x->stash_labels + (size_t)mb * B, labels, (size_t)B * sizeof *labels);
    if (mix) memcpy(x->stash_mix + (size_t)mb * B, mix, (size_t)B * sizeof *mix);
    x->stash_has_mix = mix != NULL;
    labels = NULL, mix = NULL;
  }
  if (m->has_embed) {  // this rank's share of the images goes up, then the group's gather
    const vt_data *d = x->data;
    const size_t plane = (size_t)3 * S * S, first = (size_t)d->pixel_first * plane;
    m->be->upload_ahead(sl->img + first, img, d->pixel_count * plane * sizeof(float));
    if (!ahead) gather_images(x, slot);
  }
  if (m->has_head && labels) m->be->upload(sl->labels, labels, (size_t)B * sizeof(int32_t));
  if (m->has_head && mix) m->be->upload(sl->mix, mix, (size_t)B * sizeof *mix);
}

// ZB-V: the labels (and mix targets) of micro-batch mb, loaded with its images, go up into the
// head chunk's slot right before its forward.
static void upload_labels(vt_stage_ctx *x, int mb, int slot) {
  const vt_model_slot *sl = &x->m->slots[slot];
  const int B = x->B;
  x->m->be->upload(sl->labels, x->stash_labels + (size_t)mb * B, (size_t)B * sizeof(int32_t));
  if (x->stash_has_mix)
    x->m->be->upload(sl->mix, x->stash_mix + (size_t)mb * B, (size_t)B * sizeof(vt_mix_target));
}

static int slot_of(const vt_stage_ctx *x, int mb, int chunk) {
  return x->unit_slot[chunk * x->n_micro + mb];
}

static int wset_of(const vt_stage_ctx *x, int mb, int chunk) {
  return x->unit_wset[chunk * x->n_micro + mb];
}

// Deferred sends are keyed by slot and kind: the next forward in a slot writes its output, which
// activations were sent from, and waits for those (send_key(slot, VT_XFER_ACT)); the next backward
// also writes the input gradient, sent as GRAD, and waits for both (vt_comm_wait_sends).
static int send_key(int slot, vt_schedule_xfer_kind kind) {
  return 2 * slot + (kind == VT_XFER_ACT ? 1 : 2);
}

// The buffer a transfer half reads (send) or fills (recv), in the unit's slot; activations go on
// channel 0, gradients on channel 1.
static vt_comm_p2p transfer_op(const vt_stage_ctx *x, int is_send, vt_schedule_xfer t, int64_t n) {
  const int slot = slot_of(x, t.mb, t.chunk);
  const vt_model_slot *sl = &x->m->slots[slot];
  float *buf;
  if (t.kind == VT_XFER_ACT)
    buf = is_send ? vt_model_chunk_output(x->m, t.chunk, slot) : sl->res[0];
  else buf = is_send ? sl->dinput : sl->dout;
  const int peer = is_send ? vt_schedule_send_peer(&x->spec, x->pp_rank, t)
                           : vt_schedule_recv_peer(&x->spec, x->pp_rank, t);
  return (vt_comm_p2p){!is_send, buf, n, peer, is_send ? send_key(slot, t.kind) : 0,
                       t.kind == VT_XFER_ACT ? 0 : 1};
}

// A transfer action: ZB-V's turn (a send to this rank itself and the receive it pairs with in
// the same action) is a copy on the device; the rest goes to the neighbours.
static void run_transfer(const vt_stage_ctx *x, const vt_schedule_action *a, int64_t n) {
  vt_comm_p2p ops[4];
  int k = 0;
  for (int h = 0; h < a->nsend + a->nrecv; h++) {
    const int is_send = h < a->nsend;
    const vt_schedule_xfer t = is_send ? a->send[h] : a->recv[h - a->nsend];
    ops[k] = transfer_op(x, is_send, t, n);
    if (ops[k].peer != x->pp_rank) {
      k++;
    } else if (!is_send) {  // from this action's send of the same kind
      int j = 0;
      while (j < a->nsend && a->send[j].kind != t.kind) j++;
      VT_CHECK(j < a->nsend, "schedule: a receive from this rank without its send in the action");
      x->m->be->copy(ops[k].buf, transfer_op(x, 1, a->send[j], n).buf, (size_t)n * sizeof(float));
    }
  }
  if (k > 0) vt_comm_exchange(x->pp, ops, k);
}

// A slot freed by a backward may take the next unit's input in the very action that sends that
// backward's input gradient: res[0] and dinput are separate buffers.
double vt_stage_run(vt_stage_ctx *x, const vt_schedule_action *acts, int nacts, int64_t step) {
  vt_model *m = x->m;
  const int B = x->B;
  const int64_t n = vt_model_local_rows(m, B) * m->cfg.width;  // this rank's rows of the stream
  const float scale = 1.0f / (float)x->o->global_batch, ls = x->o->label_smoothing;
  double loss = 0.0;
  // A chunk's layers' gradients are final as its last backward goes (the head's and embedding's)
  // and its last weight pass under ZB-H1 (the blocks'); the first forward of the data chunk is
  // the micro-batch loaded ahead for the next step.
  int last_backward[VT_SCHEDULE_MAX_CHUNKS], last_weight[VT_SCHEDULE_MAX_CHUNKS], first_mb = -1;
  for (int c = 0; c < m->nchunks; c++) last_backward[c] = last_weight[c] = -1;
  vt_model_hold_weights(m);  // unchanged until the optimizer's step, after this
  for (int i = 0; i < nacts; i++) {
    if (acts[i].op == VT_SCHEDULE_BACKWARD) last_backward[acts[i].chunk] = i;
    if (acts[i].op == VT_SCHEDULE_WEIGHT) last_weight[acts[i].chunk] = i;
    if (acts[i].op == VT_SCHEDULE_FORWARD && acts[i].chunk == x->data_chunk && first_mb < 0)
      first_mb = acts[i].mb;
  }
  for (int i = 0; i < nacts; i++) {
    const vt_schedule_action a = acts[i];
    // A wholly frozen virtual stage has no backward: nothing of it trains, no gradient comes.
    if (a.op != VT_SCHEDULE_FORWARD && a.op != VT_SCHEDULE_TRANSFER &&
        vt_schedule_vstage(&x->spec, x->pp_rank, a.chunk) < x->spec.frozen_stages)
      continue;
    const int pass = a.op == VT_SCHEDULE_FORWARD ? 0 : a.op == VT_SCHEDULE_BACKWARD ? 1 : 2;
    static const char *const pass_name[] = {"forward", "backward", "weight"};
    char label[64] = "send-recv";  // a range per action, for a profiler's timeline
    if (a.op != VT_SCHEDULE_TRANSFER)
      snprintf(label, sizeof label, "%s mb %d chunk %d", pass_name[pass], a.mb, a.chunk);
    vt_range_push(m->be, "%s", label);
    if (a.op == VT_SCHEDULE_FORWARD || a.op == VT_SCHEDULE_BACKWARD)
      vt_comm_wait_sends(x->pp, send_key(slot_of(x, a.mb, a.chunk), VT_XFER_ACT));
    if (a.op == VT_SCHEDULE_BACKWARD)
      vt_comm_wait_sends(x->pp, send_key(slot_of(x, a.mb, a.chunk), VT_XFER_GRAD));
    // The pass's time on the device, after any wait for its slot's sends (idle, not work);
    // taken after the step (train.c).
    if (a.op != VT_SCHEDULE_TRANSFER) m->be->interval_begin();
    if (a.op == VT_SCHEDULE_FORWARD) {
      const int slot = slot_of(x, a.mb, a.chunk);
      if (a.chunk == x->data_chunk) load_batch(x, step, a.mb, slot, 0);
      if (a.chunk == x->label_chunk && x->label_chunk != x->data_chunk)
        upload_labels(x, a.mb, slot);
      vt_model_forward(m, a.chunk, slot, B, ls, vt_data_position(x->data, step, a.mb));
      m->be->inputs_read();
      if (m->has_head && a.chunk == m->nchunks - 1)
        m->be->copy(x->step_losses + (int64_t)a.mb * B, m->slots[slot].losses,
                    (size_t)B * sizeof(float));
    } else if (a.op == VT_SCHEDULE_BACKWARD) {
      m->grads_ready = i == last_backward[a.chunk] && x->opt->overlap ? grads_ready : NULL;
      m->grads_ready_ctx = x;
      vt_model_backward(m, a.chunk, slot_of(x, a.mb, a.chunk), wset_of(x, a.mb, a.chunk), B, ls,
                        scale);
      m->grads_ready = NULL;
    } else if (a.op == VT_SCHEDULE_WEIGHT) {
      m->grads_ready = i == last_weight[a.chunk] && x->opt->overlap ? grads_ready : NULL;
      vt_model_backward_weight(m, a.chunk, slot_of(x, a.mb, a.chunk), wset_of(x, a.mb, a.chunk),
                               B);
      m->grads_ready = NULL;
    } else {
      run_transfer(x, &acts[i], n);
    }
    if (a.op != VT_SCHEDULE_TRANSFER) {
      m->be->interval_end(pass);
      if (m->be->interval_origin) vt_trace_device_name(label);  // (the device's own timeline)
    }
    vt_range_pop(m->be);
  }
  vt_comm_wait_sends(x->pp, 0);
  vt_model_release_weights(m);
  if (x->data) x->loaded_bad = x->data->bad;
  // After every backward (the labels' slot is free); not where a stop signal came to this rank
  // (the run stops after this step, said in its sums: a decode of large images would only
  // delay the stop's checkpoint).
  if (x->prefetch_next && first_mb >= 0 && !vt_health_preempt_signal() &&
      !vt_health_interrupted()) {
    load_batch(x, step + 1, first_mb, slot_of(x, first_mb, x->data_chunk), 1);
    x->ahead_step = step + 1, x->ahead_mb = first_mb;
  }
  if (m->has_head) {  // summed per micro-batch in order, in double
    m->be->to_host(x->host_step_losses, x->step_losses, (size_t)x->n_micro * B * sizeof(float));
    for (int mb = 0; mb < x->n_micro; mb++) {
      double sum = 0.0;
      for (int b = 0; b < B; b++) sum += x->host_step_losses[(int64_t)mb * B + b];
      loss += sum;
    }
  }
  return loss;
}

int vt_stage_retime(vt_stage_ctx *x, vt_comm *world, vt_schedule_action *acts, int *nacts,
                    int cap, int nslots, int nwsets) {
  // Each rank's mean per unit and pass (a stage wholly frozen has no B or W), summed over ranks
  // with their counts; rank 0's figures then go to all, so every rank builds the same lists.
  double t[6] = {0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 3; k++)
    if (x->passes[k] > 0) t[k] = x->pass_ms[k] / x->passes[k], t[3 + k] = 1;
  vt_comm_all_reduce_double(world, t, 6, VT_REDUCE_SUM);
  vt_comm_broadcast_bytes(world, t, sizeof t, 0);
  if (!(t[3] > 0 && t[4] > 0 && t[5] > 0)) return 0;
  const double ms[3] = {t[0] / t[3], t[1] / t[4], t[2] / t[5]};
  if (!(ms[0] > 0 && ms[1] > 0 && ms[2] > 0)) return 0;
  vt_schedule_spec spec = x->spec;
  spec.costs = (vt_schedule_costs){1.0, fmax(0.01, round(100 * ms[1] / ms[0]) / 100),
                                   fmax(0.01, round(100 * ms[2] / ms[0]) / 100)};
  const int units = spec.n_micro * spec.chunks;
  vt_schedule_action *next = malloc((size_t)cap * sizeof *next);
  int *slot = malloc((size_t)units * sizeof *slot), *wset = malloc((size_t)units * sizeof *wset);
  VT_CHECK(next && slot && wset, "out of host memory for the schedule");
  char why[400] = "";
  int fits = vt_schedule_verify(&spec, why, sizeof why) == VT_OK;
  int count = 0;
  if (fits) {
    count = vt_schedule_build(&spec, x->pp_rank, next, cap);
    fits = vt_schedule_assign_slots(&spec, next, count, slot) <= nslots &&
           vt_schedule_assign_weight_sets(&spec, next, count, wset) <= nwsets;
    // the micro-batch loaded ahead for the next step must find itself in its slot
    const int c = x->data_chunk * x->n_micro + x->ahead_mb;
    if (x->ahead_step >= 0 && slot[c] != x->unit_slot[c]) fits = 0;
  }
  double all = fits;
  vt_comm_all_reduce_double(world, &all, 1, VT_REDUCE_MIN);
  const int same = count == *nacts && memcmp(next, acts, (size_t)count * sizeof *acts) == 0;
  if (vt_comm_rank(world) == 0) {
    const vt_schedule_costs at = spec.costs;
    vt_schedule_spec equal = spec;
    equal.costs = (vt_schedule_costs){0, 0, 0};
    vt_log_info("zb-v: this run's passes per unit took forward %.2f ms, input gradient %.2f ms, "
                "weight %.2f ms (1 : %.2f : %.2f); its order %s: simulated idle %.3f, %.3f with "
                "the order for equal passes", ms[0], ms[1], ms[2], at.b, at.w,
                all == 0 ? "stays (the one built for them does not fit the activation sets "
                           "allocated, or would move the micro-batch loaded ahead)"
                : same   ? "stays (the one for equal passes idles no more at them)"
                         : "is now the one built for them",
                vt_schedule_simulated_idle(&spec, at, 1),
                vt_schedule_simulated_idle(&equal, at, 1));
    if (!fits && why[0]) vt_log_warn("zb-v's order for the measured times: %s", why);
  }
  if (all > 0) {
    memcpy(acts, next, (size_t)count * sizeof *acts);
    *nacts = count;
    memcpy(x->unit_slot, slot, (size_t)units * sizeof *slot);
    memcpy(x->unit_wset, wset, (size_t)units * sizeof *wset);
    x->spec = spec;
  }
  free(next), free(slot), free(wset);
  return all > 0;
}
