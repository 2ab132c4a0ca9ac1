// plan.c: memory plans (plan.h).
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
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

// The weights (fp32, and their bf16 copy where the backend keeps one) and the rest.
static double plan_mib(const vt_model *m, const vt_optimizer *opt) {
  const double p = (double)m->table.total * 4 + (double)vt_model_weight_copy_nbytes(m);
  const double g = (double)vt_model_grad_nbytes(m);
  return (p + g + (double)vt_optimizer_nbytes(opt) + (double)m->act_nbytes) / (1 << 20);
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

// Host memory a DP rank holds from a checkpoint save until its part is written: the weights and
// EMA of the ranges of its local table it writes (vt_optim_write_ranges: a 1/dp slice, or under
// ZeRO-1 a 1/dp slice of the frozen prefix and its shard), and its optimizer state
// (Adam's two moments, SGD's one buffer) for the elements of that range from grad_first on
// (launch/ckpt.c: none for the leading wholly frozen layers). DP rank dp_rank's, or with -1 the
// most of any DP rank's.
static double save_mib(const vt_train_options *o, int64_t total, int64_t grad_first,
                       int64_t base, int dp_rank) {
  const int first = dp_rank < 0 ? 0 : dp_rank, last = dp_rank < 0 ? o->dp - 1 : dp_rank;
  double most = 0.0;
  for (int r = first; r <= last; r++) {
    int64_t lo[2], count[2];
    const int n = vt_optim_write_ranges(total, base, r, o->dp, o->zero, lo, count);
    double floats = 0.0;
    for (int j = 0; j < n; j++) {
      int64_t skip = grad_first - lo[j];  // the range's elements before grad_first
      skip = skip < 0 ? 0 : skip > count[j] ? count[j] : skip;
      floats += (double)count[j] * (1 + (o->optim.ema_decay > 0)) +
                (double)(count[j] - skip) * vt_opt_state_buffers(o->optim.kind);
    }
    most = floats > most ? floats : most;
  }
  return most * 4.0 / (1 << 20);
}

void vt_plan_print(const vt_model *m, const vt_optimizer *opt, int n_micro, size_t base,
                   const vt_train_options *o) {
  const double mib = 1.0 / (1 << 20), p = (double)m->table.total * 4 * mib;
  const double g = (double)vt_model_grad_nbytes(m) * mib;
  const double wc = (double)vt_model_weight_copy_nbytes(m) * mib;
  const double om = (double)vt_optimizer_nbytes(opt) * mib, a = (double)m->act_nbytes * mib;
  char extra[160] = "", recompute[96] = "", blocks[256], wsets[64] = "", copy[64] = "";
  if (wc > 0) snprintf(copy, sizeof copy, " (%.1f of it their bf16 copy)", wc);
  blocks_str(m->cfg.depth, &m->shard, blocks, sizeof blocks);
  if (m->nwsets)
    snprintf(wsets, sizeof wsets, " and %d weight-pass input sets", m->nwsets);
  // (the frozen prefix's blocks run no backward: none of them recomputed)
  const int again = vt_recomputed_blocks(m->cfg.depth, &m->shard, m->recompute, m->frozen_layers);
  if (m->recompute && again < m->recompute * m->nchunks)
    snprintf(recompute, sizeof recompute, ", %d of %d blocks recomputed (--recompute-blocks %d "
             "less the frozen prefix's)", again, m->slot_blocks * m->nchunks,
             o->recompute_blocks);
  else if (m->recompute)
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
             save_mib(o, m->table.total, m->grad_first, opt->base,
                      opt->dp ? vt_comm_rank(opt->dp) : 0));
  vt_log_all_ranks(1);
  vt_log_info("memory plan (%s): blocks %s%s%s, parameters %.1f MiB%s, gradients %.1f MiB, "
              "optimizer %.1f MiB, activations %.1f MiB (%d of %d %s in flight%s%s); "
              "total %.1f MiB%s%s",
              m->be->name, blocks, m->has_embed ? " + embeddings" : "",
              m->has_head ? " + head" : "", p + wc, copy, g, om, a, m->nslots,
              n_micro * m->nchunks,
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


// One pipeline stage's plan: what each of its ranks holds (MiB) and moves per step (payload
// bytes as --comm-stats counts them: an all-reduce's buffer, an all-gather's or
// reduce-scatter's whole buffer, a send's). The traffic is the blocks', the pipeline
// boundaries' and the gradients' (tests/check_traffic.py's formulas): the head's collectives,
// and under sequence parallelism the embeddings' gathers and the LayerNorm gradients' sums, are
// left out.
typedef struct {
  char blocks[256];
  int nslots, nwsets, recomputed;
  double params, grads, opt, acts, total, save;  // MiB per rank
  int frozen_prefix;  // elements before the optimizer's state (vt_optim_state_base)
  double tp, pp_send, pp_recv, dp_reduce, dp_gather;  // bytes per rank per step
} stage_plan;

static void plan_stage(const vt_train_options *o, const vt_backend *be, vt_schedule_kind kind,
                       int p, stage_plan *sp) {
  const vt_vit_config *c = &o->model;
  const double mib = 1.0 / (1 << 20);
  const int B = o->micro_batch, n_micro = o->global_batch / (o->dp * B);
  const vt_schedule_spec spec = {kind, o->pp, n_micro, o->pp_chunks, 0, {0, 0, 0}};
  const vt_shard shard = {0, o->tp, p, o->pp, o->sequence_parallel, o->pp_chunks,
                          kind == VT_SCHEDULE_ZB_V};
  vt_param_table t;
  vt_params_build(&t, c, shard);
  // the largest chunk's blocks; blocks in the frozen prefix (no backward); messages sent and
  // received per micro-batch
  int first, end, most = 0, nblocks = 0, sends = 0, recvs = 0, frozen = 0;
  const int leading = vt_freeze_leading_layers(&o->optim, c);
  const int last = o->pp * o->pp_chunks - 1;
  const int fvs = vt_frozen_vstages(c->depth, last + 1, kind == VT_SCHEDULE_ZB_V, leading);
  for (int ch = 0; ch < o->pp_chunks; ch++) {
    vt_chunk_blocks(c->depth, &shard, ch, &first, &end);
    most = end - first > most ? end - first : most;
    nblocks += end - first;
    for (int b = first; b < end; b++) frozen += b + 1 < leading;  // block b is layer b + 1
    // Each boundary with a virtual stage on another rank: the activation one way, its gradient
    // the other, but none to a wholly frozen virtual stage; ZB-V's turn stays on the rank.
    const int vs = vt_shard_vstage(&shard, ch);
    if (vs > 0 && vt_shard_vstage_rank(&shard, vs - 1) != p) recvs++, sends += vs > fvs;
    if (vs < last && vt_shard_vstage_rank(&shard, vs + 1) != p) sends++, recvs += vs + 1 > fvs;
  }
  *sp = (stage_plan){0};
  blocks_str(c->depth, &shard, sp->blocks, sizeof sp->blocks);
  sp->nslots = vt_schedule_stage_in_flight(&spec, p, &sp->nwsets);
  const int per_chunk = o->recompute_blocks < most ? o->recompute_blocks : most;
  const int again = vt_recomputed_blocks(c->depth, &shard, per_chunk, leading);
  sp->recomputed = again;  // (the stage's, not the frozen prefix's, which runs no backward)
  // with the weights' bf16 copy on CUDA in bf16 (vt_model_hold_weights)
  sp->params = (double)(t.total * 4 + vt_weight_copy_nbytes(t.total, o->device == VT_DEVICE_CUDA,
                                                             o->precision)) * mib;
  // no gradients for the frozen prefix's layers (vt_model.grad_first), nor their moments' host
  // copies at a save
  const int64_t grad_first = vt_params_grad_first(&t, leading);
  sp->grads = (double)vt_grad_buffer_nbytes(t.total, grad_first) * mib;
  const int64_t base = vt_optim_state_base(&o->optim, &t), trained = t.total - base;
  sp->opt = (double)vt_optimizer_plan_nbytes(trained, o->dp, o->zero,
                                             o->optim.ema_decay > 0,
                                             vt_opt_state_buffers(o->optim.kind)) * mib;
  sp->acts = (double)vt_model_act_nbytes(c, shard, B, sp->nslots, sp->nwsets,
                                         o->recompute_blocks, leading, be) * mib;
  sp->total = sp->params + sp->grads + sp->opt + sp->acts;
  sp->save = save_mib(o, t.total, grad_first, base, -1);
  sp->frozen_prefix = base > 0;
  // One micro-batch's stream: under sequence parallelism each TP rank holds ceil(B N / tp)
  // rows of it, sends only those to the next stage and gathers the padded whole.
  const int seq = o->sequence_parallel && o->tp > 1;
  const int64_t M = (int64_t)B * vt_cfg_tokens(c), rows = seq ? (M + o->tp - 1) / o->tp : M;
  const double act = (double)rows * (seq ? o->tp : 1) * c->width * 4;
  // Per block and micro-batch two all-reduces each way (one with parallel blocks); none back
  // through the frozen prefix; a recomputed block's forward ones again.
  if (o->tp > 1)
    sp->tp = (c->parallel ? 1 : 2) * (double)(2 * nblocks - frozen + again) * n_micro * act;
  sp->pp_send = (double)sends * n_micro * (double)rows * c->width * 4;
  sp->pp_recv = (double)recvs * n_micro * (double)rows * c->width * 4;
  if (o->dp > 1 && o->zero)
    sp->dp_reduce = sp->dp_gather = (double)trained * 4;  // (the gather's tail a broadcast)
  else if (o->dp > 1)
    sp->dp_reduce = (double)vt_optim_dp_reduced(&o->optim, &t) * 4;
  vt_params_free(&t);
}

// Bytes each rank puts on the wire for a payload over n ranks, by ring algorithms: an
// all-reduce 2 (n - 1) / n of its buffer, an all-gather or reduce-scatter (n - 1) / n.
static double ring(double payload, int n, int all_reduce) {
  return n > 1 ? payload * (all_reduce ? 2.0 : 1.0) * (n - 1) / n : 0.0;
}

int vt_plan_run(const vt_train_options *o) {
  const vt_vit_config *c = &o->model;
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  VT_CHECK(be != NULL, "no CPU backend");
  be->set_precision(o->precision);  // it sizes the bf16 activations as the device would
  vt_schedule_kind kind;
  VT_CHECK(vt_schedule_parse(o->pp_schedule, &kind) == VT_OK, "schedule %s", o->pp_schedule);
  const int B = o->micro_batch, n_micro = o->global_batch / (o->dp * B);
  const vt_schedule_spec spec = {kind, o->pp, n_micro, o->pp_chunks, 0, {0, 0, 0}};
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
  int worst_stage = 0, most_save_stage = 0, prefix = 0;
  stage_plan *stages = calloc((size_t)o->pp, sizeof *stages);
  VT_CHECK(stages != NULL, "out of memory");
  for (int p = 0; p < o->pp; p++) {
    stage_plan *sp = &stages[p];
    plan_stage(o, be, kind, p, sp);
    char inflight[32];
    snprintf(inflight, sizeof inflight, sp->nwsets ? "%d+%dw" : "%d", sp->nslots, sp->nwsets);
    printf("%5d  %-6s  %9s  %10d  %10.1f  %9.1f  %9.1f  %11.1f  %.1f\n", p, sp->blocks,
           inflight, sp->recomputed, sp->params, sp->grads, sp->opt, sp->acts, sp->total);
    if (sp->total > worst) worst = sp->total, worst_stage = p;
    if (sp->save > most_save) most_save = sp->save, most_save_stage = p;
    prefix |= o->zero && o->dp > 1 && sp->frozen_prefix;  // a slice of it per DP rank
  }
  if (vt_weight_copy_nbytes(1, o->device == VT_DEVICE_CUDA, o->precision))
    printf("parameters: the fp32 weights and the bf16 copy the GEMMs read (2 of every 6 "
           "bytes)\n");
  if (o->tp > 1 || o->pp > 1 || o->dp > 1) {
    printf("traffic per rank per step, payload MiB as --comm-stats counts it (the blocks' TP "
           "collectives, the pipeline's sends and receives, the gradients' DP reduction; not the "
           "head's%s), and on the wire by ring algorithms:\n",
           o->sequence_parallel && o->tp > 1
               ? ", the embeddings' or the LayerNorm gradients' collectives" : " collectives");
    for (int p = 0; p < o->pp; p++) {
      const stage_plan *sp = &stages[p];
      // Sequence parallelism turns each all-reduce into a reduce-scatter and an all-gather of
      // the same buffer: the same bytes on the wire.
      const int seq = o->sequence_parallel && o->tp > 1;
      printf("  stage %d: TP %s %.3f, PP send %.3f and receive %.3f, DP %s %.3f%s", p,
             seq ? "reduce-scatter and all-gather" : "all-reduce", sp->tp * mib,
             sp->pp_send * mib, sp->pp_recv * mib,
             o->zero && o->dp > 1 ? "reduce" : "all-reduce", sp->dp_reduce * mib,
             o->zero && o->dp > 1 ? " and all-gather" : "");
      if (o->zero && o->dp > 1) printf(" %.3f", sp->dp_gather * mib);
      printf("; wire TP %.1f, PP %.1f, DP %.1f\n", ring(sp->tp, o->tp, 1) * mib,
             sp->pp_send * mib,
             (ring(sp->dp_reduce, o->dp, !o->zero) + ring(sp->dp_gather, o->dp, 0)) * mib);
    }
  }
  free(stages);
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
         "rank's %s of its stage's %s, held until written); no rank holds the whole model\n",
         most_save, most_save_stage,
         !(o->zero && o->dp > 1) ? "1/dp slice"
         : prefix ? "1/dp slice of the frozen prefix and ZeRO-1 shard of the rest"
                  : "ZeRO-1 shard",
         vt_opt_state_buffers(o->optim.kind) == 1
             ? (o->optim.ema_decay > 0 ? "weights, momentum and EMA" : "weights and momentum")
             : (o->optim.ema_decay > 0 ? "weights, Adam moments and EMA"
                                       : "weights and Adam moments"));
  int64_t files[3];
  const double disk = (double)vt_ckpt_nbytes(o, vt_freeze_leading_layers(&o->optim, c), files);
  printf("disk per checkpoint (--save): %.1f MiB (weights %.1f, optimizer state %.1f%s, EMA "
         "%.1f); --keep-last K keeps K + 1 at once while one is written\n", disk * mib,
         files[0] * mib, files[1] * mib,
         vt_freeze_leading_layers(&o->optim, c) ? " without the frozen layers'" : "",
         files[2] * mib);
  if (o->pp > 1) {  // what the activations in flight buy: the ideal idle fraction of a step
    const vt_schedule_spec plain = {VT_SCHEDULE_1F1B, o->pp, n_micro, 1, 0, {0, 0, 0}};
    printf("pipeline: %s schedule, ideal idle fraction %s = %.3f with equal stages and free "
           "transfers (1f1b and gpipe: %.3f); measured at the end of a run\n",
           vt_schedule_name(kind),
           vt_schedule_bubble_formula_text(kind),
           vt_schedule_bubble_formula(&spec), vt_schedule_bubble_formula(&plain));
  }
  printf("largest: stage %d, %.2f GiB per rank. Not in the plan: on a GPU the CUDA context, "
         "cuBLAS and NCCL (their size is printed at start-up) and the ops' grow-only "
         "scratch (after the first step the run reports what the GPU holds against this "
         "plan); the input batches above.\n", worst_stage, worst / 1024);
  return 0;
}

// One candidate mesh of vt_plan_search.
typedef struct {
  int tp, pp, dp, ok;  // ok: valid for these flags
  char why[200];       // why not, when not ok
  double largest;      // MiB of the largest stage
  double idle;         // the schedule's ideal idle fraction
  double wire[3];      // bytes on the wire per rank per step, the busiest stage's: TP, PP, DP
} candidate;

int vt_plan_search(const vt_train_options *o) {
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  VT_CHECK(be != NULL, "no CPU backend");
  be->set_precision(o->precision);
  const int n = o->plan_gpus, per_node = o->plan_node_gpus;
  const double usable = 0.9 * o->plan_gpu_mem * 1024;  // MiB a plan may take
  // tp x pp pairs: tp up to per_node, pp among n's divisors (at most 240 below 10^6)
  candidate *cands = calloc((size_t)(per_node < n ? per_node : n) * 256, sizeof *cands);
  VT_CHECK(cands != NULL, "out of memory");
  int nc = 0;
  for (int tp = 1; tp <= n && tp <= per_node; tp++) {
    // TP's groups are consecutive ranks (the innermost axis of either --mesh-order): inside a
    // node only where tp divides the node's GPUs (or the job is one node)
    if (n % tp || (n > per_node && per_node % tp)) continue;
    for (int pp = 1; pp <= n / tp; pp++) {
      if ((n / tp) % pp) continue;
      candidate *k = &cands[nc++];
      vt_train_options m = *o;
      m.tp = tp, m.pp = pp, m.dp = n / (tp * pp);
      m.device = VT_DEVICE_CUDA;  // GPUs: in bf16 the weights' copy is in the plan
      *k = (candidate){tp, pp, m.dp, 0, "", 0, 0, {0, 0, 0}};
      if (vt_train_validate(&m, n, k->why, sizeof k->why) != VT_OK) continue;
      k->ok = 1;
      vt_schedule_kind kind;
      vt_schedule_parse(m.pp_schedule, &kind);
      const vt_schedule_spec spec = {kind, pp, m.global_batch / (m.dp * m.micro_batch),
                                     m.pp_chunks, 0, {0, 0, 0}};
      k->idle = pp > 1 ? vt_schedule_bubble_formula(&spec) : 0.0;
      for (int p = 0; p < pp; p++) {  // (each column's busiest stage: middle stages send
        stage_plan sp;                 // both ways, the largest is often an end stage)
        plan_stage(&m, be, kind, p, &sp);
        const double wire[3] = {ring(sp.tp, tp, 1), sp.pp_send,
                                ring(sp.dp_reduce, m.dp, !m.zero) + ring(sp.dp_gather, m.dp, 0)};
        for (int j = 0; j < 3; j++) k->wire[j] = fmax(k->wire[j], wire[j]);
        k->largest = fmax(k->largest, sp.total);
      }
    }
  }
  const vt_vit_config *c = &o->model;
  char extras[256];
  vt_config_extras(c, extras, sizeof extras);
  printf("mesh search for %d GPUs (%d per node: TP stays inside a node), %.0f GiB each; a mesh "
         "fits when its largest stage's plan takes at most 90%% of that (%.1f GiB: the rest for "
         "the CUDA context, libraries and op scratch)\n",
         n, per_node, (double)o->plan_gpu_mem, usable / 1024);
  printf("model %s (img %d patch %d width %d depth %d heads %d mlp %d%s), %s, global batch %d "
         "in micro-batches of %d, %s schedule%s%s\n",
         c->name, c->img_size, c->patch_size, c->width, c->depth, c->heads,
         vt_cfg_mlp_hidden(c), extras, o->precision == VT_PRECISION_BF16 ? "bf16" : "fp32",
         o->global_batch, o->micro_batch, o->pp_schedule, o->zero ? ", ZeRO-1" : "",
         o->recompute_blocks ? ", recomputation" : "");
  printf("  tp  pp   dp  largest stage  fits  pipeline idle  on the wire per GPU per step (MiB, "
         "the busiest stage's): TP, PP, DP\n");
  int best = -1, possible = 0;
  for (int i = 0; i < nc; i++) {
    const candidate *k = &cands[i];
    possible += k->ok;
    if (!k->ok) {
      printf("%4d %3d %4d  not possible: %s\n", k->tp, k->pp, k->dp, k->why);
      continue;
    }
    const int fits = k->largest <= usable;
    printf("%4d %3d %4d  %9.2f GiB  %4s  %13.3f  %9.1f %9.1f %9.1f\n", k->tp, k->pp, k->dp,
           k->largest / 1024, fits ? "yes" : "no", k->idle, k->wire[0] / (1 << 20),
           k->wire[1] / (1 << 20), k->wire[2] / (1 << 20));
    if (!fits) continue;
    // The fewest GPUs per model copy; among those TP (inside a node) before a pipeline, whose
    // idle time and stage boundaries cost more.
    const candidate *b = best >= 0 ? &cands[best] : NULL;
    if (!b || k->tp * k->pp < b->tp * b->pp ||
        (k->tp * k->pp == b->tp * b->pp && k->pp < b->pp))
      best = i;
  }
  int rc = 0;
  if (best < 0 && !possible) {
    printf("no mesh of %d GPUs is possible with these flags: each line says why\n", n);
    rc = 1;
  } else if (best < 0) {  // the remedies these flags leave open
    vt_schedule_kind kind;
    vt_schedule_parse(o->pp_schedule, &kind);
    const int recompute = !o->recompute_blocks && !vt_schedule_splits_backward(kind);
    // (ZeRO-1 shards over dp: only where some candidate has dp > 1; TP only within a node)
    int dp_some = 0;
    for (int i = 0; i < nc; i++) dp_some |= cands[i].dp > 1;
    printf("no mesh fits: try %s%s%s%smore GPUs, or GPUs with more memory (--gpu-mem)\n",
           recompute ? "--recompute-blocks, " : "", !o->zero && dp_some ? "--zero 1, " : "",
           o->micro_batch > 1 ? "a smaller --micro-batch-size, " : "",
           per_node < n ? "more GPUs per node for tensor parallelism (--node-gpus), " : "");
    rc = 1;
  } else {
    const candidate *b = &cands[best];
    printf("suggested: --tp %d --pp %d --dp %d (the fewest GPUs per model copy that fit, tensor "
           "parallelism before a pipeline; then `vit3d plan` with it shows each stage, and a "
           "short run measures the step)\n", b->tp, b->pp, b->dp);
  }
  free(cands);
  return rc;
}
