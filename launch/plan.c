// plan.c: memory plans (plan.h).
#include "plan.h"

#include <stdio.h>
#include <string.h>

#include "data.h"
#include "mix.h"
#include "schedule.h"

// A rank's blocks as ranges, "0-3" or, with chunks, "0-1,4-5".
static void blocks_str(int depth, const vt_shard *s, char *buf, size_t size) {
  size_t k = 0;
  buf[0] = '\0';
  for (int c = 0; c < s->pp_chunks && k < size; c++) {
    int first, end;
    vt_chunk_blocks(depth, s, c, &first, &end);
    k += (size_t)snprintf(buf + k, size - k, "%s%d-%d", c ? "," : "", first, end - 1);
  }
}

static double plan_mib(const vt_model *m, const vt_optimizer *opt) {
  const double p = (double)m->table.total * 4;  // parameters, and as many gradients
  return (2 * p + (double)vt_optimizer_nbytes(opt) + (double)m->act_nbytes) / (1 << 20);
}

double vt_plan_input_mib(const vt_train_options *o, int has_embed, int eval) {
  if (!has_embed) return 0.0;
  // The rank's share of each micro-batch (all of it without the TP decode split)
  const int share = vt_data_share(o, 1, o->tp, eval ? 0 : vt_mix_enabled(&o->mix));
  const double batch = (double)share * 3 * o->model.img_size * o->model.img_size * 4;
  const int synthetic = strcmp(o->data, "synthetic") == 0;
  const double batches = eval ? (o->val_data[0] ? o->prefetch + 1 + (o->eval_hflip != 0) : 0)
                              : (synthetic ? 1 : o->prefetch + 1);
  return batches * batch / (1 << 20);
}

// Host memory a rank holds from a checkpoint save until its part is written: its 1/dp slice
// of its local table's weights, Adam moments and EMA (launch/ckpt.c).
static double save_mib(int64_t total, int dp, int ema) {
  return (double)((total + dp - 1) / dp) * 4.0 * (ema ? 4 : 3) / (1 << 20);
}

void vt_plan_print(const vt_model *m, const vt_optimizer *opt, int n_micro, size_t base,
                   const vt_train_options *o) {
  const double mib = 1.0 / (1 << 20), p = (double)m->table.total * 4 * mib;
  const double om = (double)vt_optimizer_nbytes(opt) * mib, a = (double)m->act_nbytes * mib;
  char extra[160] = "", recompute[96] = "", blocks[256], wsets[64] = "";
  blocks_str(m->cfg.depth, &m->shard, blocks, sizeof blocks);
  if (m->nwsets)
    snprintf(wsets, sizeof wsets, " and %d weight-pass input sets", m->nwsets);
  if (m->recompute)
    snprintf(recompute, sizeof recompute, ", %d of %d blocks recomputed%s", m->recompute,
             m->slot_blocks, m->nchunks > 1 ? " in each chunk" : "");
  if (m->be->device != VT_DEVICE_CPU)
    snprintf(extra, sizeof extra, "; the GPU held %.0f MiB before (context, libraries, "
             "communicators); op scratch comes on the first step", (double)base * mib);
  char host[224] = "";
  const double in = vt_plan_input_mib(o, m->has_embed, 0);
  const double ev = vt_plan_input_mib(o, m->has_embed, 1);
  if (in > 0)
    snprintf(host, sizeof host, "; on the host%s: input batches %.1f MiB",
             m->be->device != VT_DEVICE_CPU ? " (pinned)" : "", in);
  if (ev > 0)
    snprintf(host + strlen(host), sizeof host - strlen(host), ", %.1f MiB more while evaluating",
             ev);
  if (o->save_dir[0])
    snprintf(host + strlen(host), sizeof host - strlen(host), "%s%.1f MiB at each checkpoint "
             "save", host[0] ? ", " : "; on the host: ",
             save_mib(m->table.total, o->dp, opt->ema != NULL));
  vt_log_all_ranks(1);
  vt_log_info("memory plan (%s): blocks %s%s%s, parameters %.1f MiB, gradients %.1f MiB, "
              "optimizer %.1f MiB, activations %.1f MiB (%d of %d %s in flight%s%s); "
              "total %.1f MiB%s%s",
              m->be->name, blocks, m->has_embed ? " + embeddings" : "",
              m->has_head ? " + head" : "", p, p, om, a, m->nslots, n_micro * m->nchunks,
              m->nchunks > 1 ? "(micro-batch, chunk) units" : "micro-batches", wsets, recompute,
              plan_mib(m, opt), extra, host);
  vt_log_all_ranks(0);
}

void vt_plan_report_memory(const vt_model *m, const vt_optimizer *opt, vt_device device,
                           size_t base) {
  if (device == VT_DEVICE_CPU) return;
  const double mib = 1.0 / (1 << 20), used = (double)vt_backend_device_memory_used(device) * mib;
  const double plan = plan_mib(m, opt), scratch = (double)m->be->scratch_bytes() * mib;
  const double mine = used - (double)base * mib;  // what this process allocated since
  vt_log_all_ranks(1);
  vt_log_info("memory after the first step (%s): %.0f MiB in use, %.0f MiB of it since start-up "
              "against the plan's %.0f MiB (%+.1f%%); op scratch %.0f MiB of that, the rest "
              "allocator and library overhead",
              m->be->name, used, mine, plan, plan > 0 ? 100.0 * (mine - plan) / plan : 0.0,
              scratch);
  vt_log_all_ranks(0);
}


int vt_plan_run(const vt_train_options *o) {
  const vt_vit_config *c = &o->model;
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  VT_CHECK(be != NULL, "no CPU backend");
  be->set_precision(o->precision);  // it sizes the bf16 activations as the device would
  vt_schedule_kind kind;
  VT_CHECK(vt_schedule_parse(o->pp_schedule, &kind) == VT_OK, "schedule %s", o->pp_schedule);
  const int B = o->micro_batch, n_micro = o->global_batch / (o->dp * B);
  const vt_schedule_spec spec = {kind, o->pp, n_micro, o->pp_chunks};
  const double mib = 1.0 / (1 << 20);
  char extras[256];
  vt_config_extras(c, extras, sizeof extras);
  printf("memory plan of %s (img %d patch %d width %d depth %d heads %d mlp %d, %d classes%s), "
         "%s, tp %d x pp %d x dp %d, %s%s, %d micro-batches of %d per DP rank%s%s%s\n",
         c->name, c->img_size, c->patch_size, c->width, c->depth, c->heads, vt_cfg_mlp_hidden(c),
         c->num_classes, extras,
         o->precision == VT_PRECISION_BF16 ? "bf16" : "fp32", o->tp, o->pp, o->dp,
         o->pp_schedule, o->pp_chunks > 1 ? " (model chunks per stage: see blocks)" : "",
         n_micro, B, o->zero && o->dp > 1 ? ", ZeRO-1" : "",
         o->sequence_parallel && o->tp > 1 ? ", sequence parallel" : "",
         o->optim.ema_decay > 0 ? ", EMA" : "");
  printf("stage  blocks  in flight  recomputed  parameters  gradients  optimizer  activations  "
         "total (MiB per rank)\n");
  double worst = 0, most_save = 0;
  int worst_stage = 0, most_save_stage = 0;
  for (int p = 0; p < o->pp; p++) {
    const vt_shard shard = {0, o->tp, p, o->pp, o->sequence_parallel, o->pp_chunks,
                            kind == VT_SCHEDULE_ZB_V};
    vt_param_table t;
    vt_params_build(&t, c, shard);
    int first, end, most = 0;  // the largest chunk's blocks
    for (int ch = 0; ch < o->pp_chunks; ch++) {
      vt_chunk_blocks(c->depth, &shard, ch, &first, &end);
      most = end - first > most ? end - first : most;
    }
    char blocks[256];
    blocks_str(c->depth, &shard, blocks, sizeof blocks);
    int nwsets;
    const int nslots = vt_schedule_stage_in_flight(&spec, p, &nwsets);
    const int rc = o->recompute_blocks < most ? o->recompute_blocks : most;
    const double params = (double)t.total * 4 * mib;
    const double opt = (double)vt_optimizer_plan_nbytes(t.total, o->dp, o->zero,
                                                        o->optim.ema_decay > 0,
                                                        o->optim.kind == VT_OPT_SGD ? 1 : 2) *
                       mib;
    const double acts = (double)vt_model_act_nbytes(c, shard, B, nslots, nwsets,
                                                    o->recompute_blocks, be) * mib;
    const double total = 2 * params + opt + acts;
    char inflight[32];
    snprintf(inflight, sizeof inflight, nwsets ? "%d+%dw" : "%d", nslots, nwsets);
    printf("%5d  %-6s  %9s  %10d  %10.1f  %9.1f  %9.1f  %11.1f  %.1f\n", p, blocks, inflight, rc,
           params, params, opt, acts, total);
    if (total > worst) worst = total, worst_stage = p;
    const double saving = save_mib(t.total, o->dp, o->optim.ema_decay > 0);
    if (saving > most_save) most_save = saving, most_save_stage = p;
    vt_params_free(&t);
  }
  const double in = vt_plan_input_mib(o, 1, 0), ev = vt_plan_input_mib(o, 1, 1);
  const int synthetic = strcmp(o->data, "synthetic") == 0;
  const int share = vt_data_share(o, 1, o->tp, vt_mix_enabled(&o->mix));
  char of[64] = "";
  if (share < B) snprintf(of, sizeof of, " (each TP rank's share of %d)", B);
  printf("host memory for input batches: stage 0's ranks %.1f MiB (%d micro-batch%s of %d%s "
         "images: %s%s)", in, synthetic ? 1 : o->prefetch + 1, synthetic ? "" : "es", share, of,
         synthetic ? "synthetic data" : "--prefetch + 1",
         o->device == VT_DEVICE_CUDA ? ", pinned" : "");
  if (ev > 0) printf(", %.1f MiB more while evaluating", ev);
  printf(kind == VT_SCHEDULE_ZB_V ? "; with their labels (zb-v: the head is on stage 0 too)\n"
                                  : "; the other stages' labels need a few bytes\n");
  printf("host memory at each checkpoint save (--save): at most %.1f MiB per rank (stage %d; a "
         "rank's 1/dp slice of its stage's %s, held until written); no rank holds the whole "
         "model\n", most_save, most_save_stage,
         o->optim.ema_decay > 0 ? "weights, Adam moments and EMA" : "weights and Adam moments");
  if (o->pp > 1) {  // what the activations in flight buy: the ideal idle fraction of a step
    const vt_schedule_spec plain = {VT_SCHEDULE_1F1B, o->pp, n_micro, 1};
    printf("pipeline: %s schedule, ideal idle fraction %s = %.3f with equal stages and free "
           "transfers (1f1b and gpipe: %.3f); measured at the end of a run\n",
           vt_schedule_name(kind),
           vt_schedule_bubble_formula_text(kind),
           vt_schedule_bubble_formula(&spec), vt_schedule_bubble_formula(&plain));
  }
  printf("largest: stage %d, %.2f GiB per rank. Not in the plan: on a GPU the CUDA context, "
         "cuBLAS, cuDNN and NCCL (their size is printed at start-up) and the ops' grow-only "
         "scratch (after the first step the run reports what the GPU holds against this "
         "plan); the input batches above.\n", worst_stage, worst / 1024);
  return 0;
}
