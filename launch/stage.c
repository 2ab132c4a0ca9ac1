// stage.c: the executor of a pipeline stage's schedule (stage.h).
#include "stage.h"

static void grads_ready(void *ctx, int layer) {
  vt_stage_ctx *x = ctx;
  vt_optimizer_grads_ready(x->opt, x->m->grads, layer);
}

// Loads micro-batch mb of this DP rank's share of step `step` into a slot, unless it is there
// already. The images go up with upload_ahead: only the forward reads them, and every forward
// issued so far is followed by inputs_read, so the copy need not wait for the backward passes
// queued since. The labels, read by the backward too, go up in stream order.
static void load_batch(vt_stage_ctx *x, int64_t step, int mb, int slot) {
  if (x->ahead_step == step && x->ahead_mb == mb) {
    x->ahead_step = -1;
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
  if (m->has_embed) {
    // This rank's share of the images goes up; with a split (data.h) the TP group then
    // all-gathers the shares in place, in stream order after the upload.
    const vt_data *d = x->data;
    const size_t plane = (size_t)3 * S * S, first = (size_t)d->pixel_first * plane;
    m->be->upload_ahead(sl->img + first, img, d->pixel_count * plane * sizeof(float));
    if (d->pixel_count < B)
      vt_comm_all_gather(m->tp, sl->img, sl->img + first, (int64_t)d->pixel_count * plane);
  }
  if (m->has_head) m->be->upload(sl->labels, labels, (size_t)B * sizeof(int32_t));
  if (m->has_head && mix) m->be->upload(sl->mix, mix, (size_t)B * sizeof *mix);
}

static int slot_of(const vt_stage_ctx *x, int mb, int chunk) {
  return x->unit_slot[chunk * x->n_micro + mb];
}

static void count_pass(vt_stage_ctx *x, int pass, double seconds) {
  x->pass_s[pass] += seconds, x->passes[pass] += 1;
}

static int wset_of(const vt_stage_ctx *x, int mb, int chunk) {
  return x->unit_wset[chunk * x->n_micro + mb];
}

// The buffer a transfer half reads (send) or fills (recv), in the unit's slot. Sends are
// deferred under the slot's key (slot + 1): the next forward or backward in that slot, which
// writes the buffers sent from it, waits for them first (vt_comm_wait_sends).
static vt_comm_p2p transfer_op(const vt_stage_ctx *x, int is_send, vt_schedule_xfer t, int64_t n) {
  const int slot = slot_of(x, t.mb, t.chunk);
  const vt_model_slot *sl = &x->m->slots[slot];
  float *buf;
  if (t.kind == VT_XFER_ACT) buf = is_send ? vt_model_chunk_output(x->m, t.chunk, slot) : sl->res[0];
  else buf = is_send ? sl->dinput : sl->dout;
  const int peer = is_send ? vt_schedule_send_peer(&x->spec, x->pp_rank, t.kind)
                           : vt_schedule_recv_peer(&x->spec, x->pp_rank, t.kind);
  return (vt_comm_p2p){!is_send, buf, n, peer, is_send ? slot + 1 : 0};
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
  for (int i = 0; i < nacts; i++) {
    if (acts[i].op == VT_SCHEDULE_BACKWARD) last_backward[acts[i].chunk] = i;
    if (acts[i].op == VT_SCHEDULE_WEIGHT) last_weight[acts[i].chunk] = i;
    if (acts[i].op == VT_SCHEDULE_FORWARD && acts[i].chunk == x->data_chunk && first_mb < 0)
      first_mb = acts[i].mb;
  }
  for (int i = 0; i < nacts; i++) {
    const vt_schedule_action a = acts[i];
    const double t0 = vt_seconds();
    const int pass = a.op == VT_SCHEDULE_FORWARD ? 0 : a.op == VT_SCHEDULE_BACKWARD ? 1 : 2;
    if (a.op == VT_SCHEDULE_FORWARD || a.op == VT_SCHEDULE_BACKWARD)
      vt_comm_wait_sends(x->pp, slot_of(x, a.mb, a.chunk) + 1);
    if (a.op == VT_SCHEDULE_FORWARD) {
      const int slot = slot_of(x, a.mb, a.chunk);
      if (a.chunk == x->data_chunk) load_batch(x, step, a.mb, slot);
      vt_model_forward(m, a.chunk, slot, B, ls, vt_data_position(x->data, step, a.mb));
      m->be->inputs_read();
      if (m->has_head && a.chunk == m->nchunks - 1)
        m->be->copy(x->step_losses + (int64_t)a.mb * B, m->slots[slot].losses,
                    (size_t)B * sizeof(float));
      count_pass(x, pass, vt_seconds() - t0);
    } else if (a.op == VT_SCHEDULE_BACKWARD) {
      m->grads_ready = i == last_backward[a.chunk] && x->opt->overlap ? grads_ready : NULL;
      m->grads_ready_ctx = x;
      vt_model_backward(m, a.chunk, slot_of(x, a.mb, a.chunk), wset_of(x, a.mb, a.chunk), B, ls,
                        scale);
      m->grads_ready = NULL;
      count_pass(x, pass, vt_seconds() - t0);
    } else if (a.op == VT_SCHEDULE_WEIGHT) {
      m->grads_ready = i == last_weight[a.chunk] && x->opt->overlap ? grads_ready : NULL;
      vt_model_backward_weight(m, a.chunk, slot_of(x, a.mb, a.chunk), wset_of(x, a.mb, a.chunk),
                               B);
      m->grads_ready = NULL;
      count_pass(x, pass, vt_seconds() - t0);
    } else {
      vt_comm_p2p ops[4];
      int k = 0;
      for (int h = 0; h < a.nsend; h++) ops[k++] = transfer_op(x, 1, a.send[h], n);
      for (int h = 0; h < a.nrecv; h++) ops[k++] = transfer_op(x, 0, a.recv[h], n);
      vt_comm_exchange(x->pp, ops, k);
    }
  }
  vt_comm_wait_sends(x->pp, 0);
  if (x->prefetch_next && first_mb >= 0) {  // after every backward: the labels' slot is free
    load_batch(x, step + 1, first_mb, slot_of(x, first_mb, x->data_chunk));
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

