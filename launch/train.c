// train.c: the training loop on a tp x pp x dp mesh: each rank runs its pipeline stage's
// schedule (forward and backward per micro-batch, activations and gradients to its neighbours),
// then the optimizer step reduces gradients over dp and updates. Rank 0 prints the progress line
// and writes metrics.jsonl with the global loss.
#include "train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "checklog.h"
#include "ckpt.h"
#include "comm.h"
#include "data.h"
#include "eval.h"
#include "fault.h"
#include "health.h"
#include "label.h"
#include "export.h"
#include "mesh.h"
#include "model.h"
#include "plan.h"
#include "report.h"
#include "savehook.h"
#include "schedule.h"
#include "stage.h"
#include "watchdog.h"

#define REFUSE(...) return (snprintf(err, errlen, __VA_ARGS__), VT_ERR_INPUT)

int vt_train_pass_times(const char *text, double costs[3]) {
  costs[0] = costs[1] = costs[2] = 0.0;
  if (strcmp(text, "auto") == 0) return 1;
  if (strcmp(text, "equal") == 0) return 0;
  char tail;
  if (sscanf(text, "%lf:%lf:%lf%c", &costs[0], &costs[1], &costs[2], &tail) != 3) return -1;
  for (int k = 0; k < 3; k++)
    if (!(costs[k] > 0.0 && costs[k] < 1e6)) return -1;
  return 2;
}

// The files a run writes at its end, each with its flag ("" where not asked for).
enum { N_OUTPUTS = 4 };
static void output_files(const vt_train_options *o, const char *out[N_OUTPUTS][2]) {
  const char *const all[N_OUTPUTS][2] = {{"--final-weights", o->final_weights},
                                         {"--final-ema", o->final_ema},
                                         {"--predictions", o->predictions},
                                         {"--logits-out", o->logits_out}};
  memcpy(out, all, sizeof all);
}

vt_status vt_train_validate(vt_train_options *o, int world_size, char *err, size_t errlen) {
  const vt_vit_config *c = &o->model;
  if (vt_config_validate(c, err, errlen) != VT_OK) return VT_ERR_INPUT;
  if (o->logits_out[0] && (!o->eval_only || world_size != 1))
    REFUSE("--logits-out is for vit3d eval on one rank");
  if (o->eval_only && (!o->val_data[0] || !(o->resume[0] || o->init_from[0])))
    REFUSE("vit3d eval needs --val-data and the weights: --checkpoint DIR or --init-from FILE");
  vt_mesh_order order;
  vt_mesh mesh;
  if (vt_mesh_order_parse(o->mesh_order, &order, err, errlen) != VT_OK) return VT_ERR_INPUT;
  if (vt_mesh_init(&mesh, o->tp, o->pp, o->dp, order, world_size, err, errlen) != VT_OK)
    return VT_ERR_INPUT;
  o->dp = mesh.dp_size;
  if (o->predictions[0] && !o->eval_only)
    REFUSE("--predictions is for vit3d eval (on any mesh)");
  if (o->global_batch == 0) o->global_batch = o->dp * o->micro_batch;
  if (c->heads % o->tp != 0)
    REFUSE("--tp %d does not divide the %d attention heads; use a TP size that divides them",
           o->tp, c->heads);
  if (vt_cfg_mlp_hidden(c) % o->tp != 0)
    REFUSE("--tp %d does not divide the MLP width %d", o->tp, vt_cfg_mlp_hidden(c));
  if (o->global_batch % (o->dp * o->micro_batch) != 0)
    REFUSE("--global-batch-size %d is not a multiple of dp %d x --micro-batch-size %d = %d",
           o->global_batch, o->dp, o->micro_batch, o->dp * o->micro_batch);
  vt_schedule_kind kind;
  if (vt_schedule_parse(o->pp_schedule, &kind) != VT_OK)
    REFUSE("--pp-schedule %s: use one of %s", o->pp_schedule, VT_SCHEDULE_NAMES);
  if (o->pp_chunks == 0)
    o->pp_chunks = kind == VT_SCHEDULE_INTERLEAVED || kind == VT_SCHEDULE_ZB_V ? 2 : 1;
  if (kind == VT_SCHEDULE_ZB_V && o->pp_chunks != 2)
    REFUSE("--pp-schedule zb-v holds exactly 2 model chunks per stage (its V): drop "
           "--pp-chunks %d", o->pp_chunks);
  if (vt_schedule_splits_backward(kind) && o->recompute_blocks > 0)
    REFUSE("--pp-schedule %s splits the backward into input and weight gradients, whose "
           "weight pass reads the stored activations again: it does not go with "
           "--recompute-blocks; use one or the other", o->pp_schedule);
  vt_schedule_spec spec = {kind, o->pp, o->global_batch / (o->dp * o->micro_batch), o->pp_chunks,
                           0, {0, 0, 0}};
  double times[3];
  const int pass_times = vt_train_pass_times(o->pp_pass_times, times);
  if (pass_times < 0)
    REFUSE("--pp-pass-times %s: give auto, equal or F:B:W, three positive relative times of the "
           "forward, input-gradient and weight passes (e.g. 1:1:0.35)", o->pp_pass_times);
  if (pass_times == 2 && kind != VT_SCHEDULE_ZB_V)
    REFUSE("--pp-pass-times %s: only --pp-schedule zb-v builds its order for pass times",
           o->pp_pass_times);
  if (pass_times == 2) spec.costs = (vt_schedule_costs){times[0], times[1], times[2]};
  if (o->eval_only) spec.n_micro = o->pp;  // evaluation runs no schedule, only the chunks' layout
  char why[400];
  if (vt_schedule_verify(&spec, why, sizeof why) != VT_OK)
    REFUSE("--pp-schedule %s with --pp %d, --pp-chunks %d and %d micro-batches per step "
           "(--global-batch-size / (dp x --micro-batch-size)): %s", o->pp_schedule, o->pp,
           o->pp_chunks, spec.n_micro, why);
  if (c->depth < o->pp * o->pp_chunks && o->pp_chunks == 1)
    REFUSE("--pp %d stages but only %d blocks: every stage needs at least one block", o->pp,
           c->depth);
  if (c->depth < o->pp * o->pp_chunks)
    REFUSE("--pp %d x --pp-chunks %d = %d virtual pipeline stages but only %d blocks: every "
           "one needs at least one block", o->pp, o->pp_chunks, o->pp * o->pp_chunks, c->depth);
  if (!o->eval_only && !o->plan_only && strcmp(o->data, "synthetic") == 0 &&
      (o->transform.ra.layers > 0 || o->transform.three_aug || o->transform.simple_crop ||
       o->aug_repeats > 1 || o->drop_last))
    REFUSE("--aa, --three-augment, --simple-crop, --aug-repeats and --drop-last act on the image "
           "loader's crops and epochs; --data synthetic has none: give --data DIR");
  if (o->transform.simple_crop && o->transform.train_interp == VT_INTERP_SAMPLE)
    REFUSE("--simple-crop resizes the whole image as torchvision's Resize does: it needs "
           "--train-interpolation bilinear or bicubic");
  if (o->transform.simple_crop && c->img_size < 2 * VT_SIMPLE_CROP_PAD + 1)
    REFUSE("--simple-crop pads by %d mirrored pixels: it needs --img-size %d or more",
           VT_SIMPLE_CROP_PAD, 2 * VT_SIMPLE_CROP_PAD + 1);
  if (o->transform.ra.layers > 0 && o->transform.three_aug)
    REFUSE("--aa and --three-augment are two augmentation policies (DeiT III's 3-Augment "
           "replaces RandAugment): pick one");
  if (vt_label_key_check(o->label_key, err, errlen) != VT_OK) return VT_ERR_INPUT;
  if (o->bce_thresh >= 0 && !o->bce_loss)
    REFUSE("--bce-target-thresh %g makes binary targets for --bce-loss 1, which is off",
           (double)o->bce_thresh);
  if (vt_mix_enabled(&o->mix) && o->micro_batch % 2 != 0)
    REFUSE("--mixup and --cutmix mix pairs of images (stream positions 2k and 2k+1), so "
           "--micro-batch-size must be even (have %d)", o->micro_batch);
  if (o->drop_path > 0 && o->micro_batch > VT_DROP_PATH_MAX_SAMPLES)
    REFUSE("--drop-path works on micro-batches of at most %d images (have %d); lower "
           "--micro-batch-size and raise the accumulation instead", VT_DROP_PATH_MAX_SAMPLES,
           o->micro_batch);
  if (o->optim.warmup_steps > o->steps && o->epochs <= 0)  // (with --epochs: once resolved)
    REFUSE("--warmup-steps %lld is longer than --steps %lld", (long long)o->optim.warmup_steps,
           (long long)o->steps);
  if ((o->epochs > 0 || o->warmup_epochs > 0 || o->eval_epochs > 0 || o->save_epochs > 0) &&
      !o->eval_only && !o->plan_only && strcmp(o->data, "synthetic") == 0)
    REFUSE("--epochs, --warmup-epochs, --eval-epochs and --save-epochs count passes over a "
           "dataset; --data synthetic has no size: give steps");
  if (o->sched_epochs && !o->eval_only && !o->plan_only && strcmp(o->data, "synthetic") == 0)
    REFUSE("--sched-on epochs steps the learning rate once per pass over a dataset; --data "
           "synthetic has no size: use --sched-on steps");
  if (o->optim.min_lr > o->optim.lr)
    REFUSE("--min-lr %g is above --lr %g", o->optim.min_lr, o->optim.lr);
  if (o->optim.warmup_lr > o->optim.lr)
    REFUSE("--warmup-lr %g is above --lr %g (the warmup climbs to --lr)", o->optim.warmup_lr,
           o->optim.lr);
  if (o->optim.freeze[0] || o->optim.trainable[0]) {
    vt_freeze_summary fz;
    if (vt_freeze_summarize(&o->optim, c, &fz, err, errlen) != VT_OK) return VT_ERR_INPUT;
    char flags[600];
    vt_freeze_flags(&o->optim, flags, sizeof flags);
    if (fz.tensors == 0)
      REFUSE("%s freezes no tensor of this model; the patterns match timm's names "
             "(blocks.0.attn.qkv.weight, patch_embed.proj.weight, head.bias, ...; vit3d export "
             "writes them)", flags);
    if (fz.tensors == fz.all_tensors)
      REFUSE("%s freezes all %d tensors of this model: nothing would train", flags,
             fz.all_tensors);
    // The pipeline's lists without the gradients of wholly frozen stages: verified as well.
    vt_schedule_spec frozen = spec;
    frozen.frozen_stages = vt_frozen_vstages(c->depth, o->pp * o->pp_chunks, fz.leading_layers);
    if (!o->eval_only && frozen.frozen_stages > 0 &&
        vt_schedule_verify(&frozen, why, sizeof why) != VT_OK)
      REFUSE("--pp-schedule %s with %s (frozen virtual stages 0-%d): %s", o->pp_schedule, flags,
             frozen.frozen_stages - 1, why);
  }
  const char *outputs[N_OUTPUTS][2];
  output_files(o, outputs);
  for (int i = 0; i < N_OUTPUTS; i++)  // (their folders: outputs_writable, on every rank)
    if (outputs[i][1][0] &&
        vt_output_file_check(outputs[i][1], outputs[i][0], err, errlen) != VT_OK)
      return VT_ERR_INPUT;
  if (o->optim.ema_warmup && o->optim.ema_decay <= 0)
    REFUSE("--model-ema-warmup warms up the weights' EMA: give --model-ema DECAY too");
  if (o->final_ema[0] && o->optim.ema_decay <= 0)
    REFUSE("--final-ema writes the weights' EMA: give --model-ema DECAY too");
  if (o->use_ema && (!o->eval_only || !o->resume[0]))
    REFUSE("--use-ema is for vit3d eval --checkpoint DIR (training keeps an EMA with "
           "--model-ema)");
  if (strcmp(o->resume, "auto") == 0 && !o->save_dir[0])
    REFUSE("--resume auto looks for checkpoints in --save DIR; give --save too");
  if (c->init_jax && c->head_init_std > 0)
    REFUSE("--weight-init jax starts the head at zero: drop --head-init-std");
  if (o->save_hook[0] && !o->save_dir[0])
    REFUSE("--save-hook runs after each checkpoint is saved: give --save DIR too");
  if (o->save_hook_timeout > 0 && !o->save_hook[0])
    REFUSE("--save-hook-timeout limits the --save-hook command: give --save-hook CMD too");
  return VT_OK;
}

// Whether the validation set is evaluated after step n (numbered from 1).
static int eval_due(const vt_train_options *o, const vt_data *d, int64_t n, int64_t end_step) {
  return d->has_val && (n == end_step || (o->eval_interval > 0 && n % o->eval_interval == 0));
}

// --epochs and --warmup-epochs in steps, from the training set's n images (every rank has the
// index): round(epochs * n / global batch), the default warmup 5% of the steps as with --steps;
// under --drop-last n is the epoch's whole global batches (vt_epoch_images).
static vt_status resolve_epochs(vt_train_options *o, int64_t n, char *err, size_t errlen) {
  n = vt_epoch_images(o, n);  // (--drop-last: whole global batches)
  const double per_epoch = (double)n / (double)o->global_batch;
  if (o->epochs > 0) o->steps = (int64_t)llround(o->epochs * per_epoch);
  if (o->warmup_epochs > 0) o->optim.warmup_steps = (int64_t)llround(o->warmup_epochs * per_epoch);
  else if (o->optim.warmup_steps < 0) o->optim.warmup_steps = o->steps / 20;
  // (intervals of at least one step; an interval past the run means at its end only)
  if (o->eval_epochs > 0)
    o->eval_interval = (int)fmin(fmax(llround(o->eval_epochs * per_epoch), 1), 1 << 30);
  if (o->save_epochs > 0)
    o->save_interval = (int)fmin(fmax(llround(o->save_epochs * per_epoch), 1), 1 << 30);
  o->optim.total_steps = o->steps;
  if (o->sched_epochs) {  // timm's schedule counts epochs: the lengths as given, or in epochs
    o->optim.epoch_images = n;
    o->optim.step_images = o->global_batch;
    o->optim.warmup_epochs =
        o->warmup_epochs > 0 ? o->warmup_epochs : (double)o->optim.warmup_steps / per_epoch;
    o->optim.cycle_epochs = o->epochs > 0 ? o->epochs : (double)o->steps / per_epoch;
  }
  if (o->steps < 1)
    REFUSE("--epochs %g of %lld images at %d per step is no step: give more epochs",
           o->epochs, (long long)n, o->global_batch);
  if (o->optim.warmup_steps > o->steps)
    REFUSE("the warmup (%lld steps) is longer than the run (%lld steps)",
           (long long)o->optim.warmup_steps, (long long)o->steps);
  return VT_OK;
}

// Collective: whether every rank can make files in the folders of the output files written at
// the run's end (every rank writes its part of --final-weights), checked at its start, where a
// missing or read-only folder costs nothing; the lowest rank that cannot says why.
static int outputs_writable(const vt_train_options *o, vt_comm *world) {
  const char *outputs[N_OUTPUTS][2];
  output_files(o, outputs);
  char err[1400];
  const int rank = vt_comm_rank(world);
  double first = vt_comm_size(world);  // the lowest rank that cannot
  for (int i = 0; i < N_OUTPUTS && first == vt_comm_size(world); i++)
    if (outputs[i][1][0] &&
        vt_output_dir_check(outputs[i][1], outputs[i][0], err, sizeof err) != VT_OK)
      first = rank;
  const double mine = first;
  vt_comm_all_reduce_double(world, &first, 1, VT_REDUCE_MIN);
  if (mine == rank && first == rank) vt_log_error("%s", err);
  return first == vt_comm_size(world);
}

// This rank's backend: its device (the GPU of its local rank), described in device; NULL on
// every rank when any rank has none (all stop together).
static const vt_backend *open_backend(const vt_train_options *o, vt_comm *world, char *device,
                                      size_t size) {
  double picked = vt_backend_select(o->device, vt_comm_local_rank(world), device, size) == 0;
  const char *hint =
      o->device == VT_DEVICE_CUDA ? "; to train on the CPU instead, give --device cpu" : "";
  if (!picked)
    vt_log_error("--device %s: %s%s", o->device == VT_DEVICE_CUDA ? "cuda" : "cpu", device, hint);
  vt_comm_all_reduce_double(world, &picked, 1, VT_REDUCE_MIN);
  if (!picked) return NULL;
  const char *why = NULL;
  const vt_backend *be = vt_backend_get(o->device, &why);
  double have = be != NULL;
  if (!be) vt_log_error("--device cuda is not available: %s%s", why, hint);
  vt_comm_all_reduce_double(world, &have, 1, VT_REDUCE_MIN);
  return have ? be : NULL;
}

// The lengths given in epochs made steps of this training set's n images (every rank holds the
// index, so every rank reaches the same verdict), into the options and the optimizer's
// schedule; rank 0 logs them. 0 (logged) when they make no valid run.
static int epochs_to_steps(vt_train_options *o, vt_optimizer *opt, int64_t n, int world_rank) {
  char err[512];
  const int ok = resolve_epochs(o, n, err, sizeof err) == VT_OK;
  if (!ok && world_rank == 0) vt_log_error("%s", err);
  opt->cfg.total_steps = o->optim.total_steps, opt->cfg.warmup_steps = o->optim.warmup_steps;
  opt->cfg.epoch_images = o->optim.epoch_images, opt->cfg.step_images = o->optim.step_images;
  opt->cfg.warmup_epochs = o->optim.warmup_epochs, opt->cfg.cycle_epochs = o->optim.cycle_epochs;
  if (!ok || world_rank != 0) return ok;
  if (o->sched_epochs)
    vt_log_info("learning rate per epoch (timm's): %g epochs of warmup from %g, then %s over "
                "%g epochs to %g", o->optim.warmup_epochs, o->optim.warmup_lr,
                o->optim.sched == VT_SCHED_COSINE   ? "a cosine"
                : o->optim.sched == VT_SCHED_LINEAR ? "a straight line"
                                                    : "constant",
                o->optim.cycle_epochs,
                o->optim.sched == VT_SCHED_CONSTANT ? o->optim.lr : o->optim.min_lr);
  const int64_t epoch = vt_epoch_images(o, n);
  vt_log_info("%g epochs of %lld images at %d per step: %lld steps, %lld of warmup; "
              "evaluation every %d, saves every %d (0: at the end)",
              o->epochs > 0 ? o->epochs : (double)o->steps * o->global_batch / (double)epoch,
              (long long)epoch, o->global_batch, (long long)o->steps,
              (long long)o->optim.warmup_steps, o->eval_interval, o->save_interval);
  return ok;
}

// Rank 0 of a resumed run: whether the checkpoint of start_step (its manifest saved) was made
// with this run's learning-rate schedule and optimizer settings (cfg), or --resume-override 1
// lets this run's replace them (warned); 0 (logged, with what to do) otherwise.
static int resume_settings_ok(const vt_train_options *o, const vt_ckpt_manifest *saved,
                              const vt_optim_config *cfg, int64_t start_step) {
  char dir[4200];
  if (strcmp(o->resume, "auto") == 0)
    vt_ckpt_step_dir(o->save_dir, start_step, dir, sizeof dir);
  else
    snprintf(dir, sizeof dir, "%s", o->resume);
  char why[6000];
  if (vt_ckpt_check_optim(saved, cfg, &o->model, dir, why, sizeof why) == VT_OK) return 1;
  if (o->resume_override) {
    vt_log_warn("%s: --resume-override 1, so training goes on with this run's", why);
    return 1;
  }
  vt_log_error("cannot resume: %s; the learning-rate schedule or the optimizer would change "
               "mid-run. Give the checkpoint's values (vit3d inspect %s prints them), or "
               "--resume-override 1 to train on with this command's (a longer run, a new rate)",
               why, dir);
  return 0;
}

int vt_train_run(const vt_train_options *o_given, vt_comm *world) {
  // A copy, so that --epochs can become steps once the dataset's size is known.
  vt_train_options own = *o_given;
  const vt_train_options *o = &own;
  const int world_rank = vt_comm_rank(world), world_size = vt_comm_size(world);
  char device[320];
  const vt_backend *be = open_backend(o, world, device, sizeof device);
  if (!be) return VT_EXIT_USAGE;
  vt_backend_set_threads(o->threads);
  be->set_precision(o->precision);
  vt_mesh mesh;
  vt_mesh_order order;
  char err[1024];
  vt_mesh_order_parse(o->mesh_order, &order, err, sizeof err);
  VT_CHECK(vt_mesh_init(&mesh, o->tp, o->pp, o->dp, order, world_size, err, sizeof err) == VT_OK,
           "%s", err);
  vt_comm *tp, *pp, *dp;
  vt_comm_split_mesh(world, &mesh, o->device, &tp, &pp, &dp);
  // Device memory held before the model: the CUDA context, cuBLAS, NCCL's communicators.
  const size_t mem_base = vt_backend_device_memory_used(o->device);
  const vt_mesh_coord me = vt_mesh_coords(&mesh, world_rank);
  vt_report_placement(world, me, device, o->threads);
  // Startup, checkpoint saves and the end of the run (loading, writing whole models) get ten
  // times the limit of a step.
  const double slow_limit = 10.0 * o->timeout_s;
  if (o->save_hook[0]) {  // a hook (rank 0's) does not outlive the trainer ending without it
    vt_watchdog_at_end(vt_save_hook_kill);
    atexit(vt_save_hook_kill);
  }
  vt_watchdog_start(world, o->timeout_s, me.tp_rank, me.pp_rank, me.dp_rank, device);
  vt_watchdog_phase("startup", 0, slow_limit);
  vt_schedule_kind kind;
  vt_schedule_parse(o->pp_schedule, &kind);
  const vt_shard shard = {me.tp_rank, mesh.tp_size, me.pp_rank, mesh.pp_size,
                         o->sequence_parallel, o->pp_chunks, kind == VT_SCHEDULE_ZB_V};
  const int B = o->micro_batch, n_micro = o->global_batch / (mesh.dp_size * B);
  // vit3d eval runs no schedule (vt_train_validate checked the chunks' layout), only slot 0.
  const vt_vit_config *c = &o->model;
  vt_optim_config oc = o->optim;
  oc.depth = c->depth;  // for --layer-decay
  // vit3d eval trains nothing: every tensor frozen, so it holds no gradients, optimizer state
  // or EMA, and its blocks keep no activations for a backward (the frozen prefix's one set).
  if (o->eval_only) {
    snprintf(oc.freeze, sizeof oc.freeze, ".");
    oc.trainable[0] = '\0';
    oc.ema_decay = 0;
  }
  const int frozen_layers = vt_freeze_leading_layers(&oc, c);
  // Wholly frozen virtual stages get no gradient messages and skip their backward passes.
  double times[3];
  const int pass_times = vt_train_pass_times(o->pp_pass_times, times);  // (validated)
  vt_schedule_spec spec = {
      kind, mesh.pp_size, o->eval_only ? mesh.pp_size : n_micro, o->pp_chunks,
      o->eval_only ? 0 : vt_frozen_vstages(c->depth, mesh.pp_size * o->pp_chunks, frozen_layers),
      {0, 0, 0}};
  if (pass_times == 2 && !o->eval_only)
    spec.costs = (vt_schedule_costs){times[0], times[1], times[2]};
  const int cap = vt_schedule_max_actions(&spec);
  vt_schedule_action *acts = malloc((size_t)cap * sizeof *acts);
  int *unit_slot = malloc((size_t)spec.n_micro * spec.chunks * sizeof *unit_slot);
  int *unit_wset = malloc((size_t)spec.n_micro * spec.chunks * sizeof *unit_wset);
  VT_CHECK(acts && unit_slot && unit_wset, "out of host memory for the schedule");
  int nacts = vt_schedule_build(&spec, me.pp_rank, acts, cap);
  const int assigned = vt_schedule_assign_slots(&spec, acts, nacts, unit_slot);
  const int nslots = o->eval_only ? 1 : assigned;
  const int wsets = vt_schedule_assign_weight_sets(&spec, acts, nacts, unit_wset);
  const int nwsets = o->eval_only ? 0 : wsets;

  vt_model m;
  vt_model_init(&m, c, shard, tp, B, nslots, nwsets, o->recompute_blocks, frozen_layers, be,
                o->seed);
  m.drop_path = o->drop_path;
  m.proj_drop = o->proj_drop;
  m.attn_drop = o->attn_drop;
  m.pos_drop = o->pos_drop;
  m.head_drop = o->head_drop;
  m.mix = vt_mix_enabled(&o->mix);
  m.bce = o->bce_loss;
  if (o->bce_loss) m.bce_thresh = o->bce_thresh;
  if (world_rank == 0 && !o->eval_only) vt_report_recipe(o, &oc);
  vt_optimizer opt;
  vt_optimizer_init(&opt, &oc, be, &m.table, mesh.tp_size > 1 ? tp : NULL,
                    mesh.pp_size > 1 ? pp : NULL, mesh.dp_size > 1 ? dp : NULL, o->zero,
                    m.grad_first);
  if (world_rank == 0) {
    char table[8192], extras[256];
    vt_mesh_format(&mesh, table, sizeof table);
    vt_config_extras(c, extras, sizeof extras);
    vt_log_info("model %s: img %d patch %d width %d depth %d heads %d mlp %d classes %d%s; "
                "%s backend, %s GEMMs, %d threads per rank; %.3g GFLOP per training image",
                c->name, c->img_size, c->patch_size, c->width, c->depth, c->heads,
                vt_cfg_mlp_hidden(c), c->num_classes, extras, be->name,
                o->precision == VT_PRECISION_BF16 ? "bf16" : "fp32", o->threads,
                vt_config_train_flops(c) / 1e9);
    vt_log_info("mesh tp %d x pp %d x dp %d (%s), %s schedule (%d model chunks per stage), %d "
                "micro-batches of %d per DP rank, ZeRO-%d, sequence parallel %s\n%s",
                mesh.tp_size, mesh.pp_size, mesh.dp_size, o->mesh_order, o->pp_schedule,
                o->pp_chunks, n_micro, B, opt.zero, m.sp ? "on" : "off", table);
  }
  vt_plan_print(&m, &opt, o->eval_only ? 1 : n_micro, mem_base, o);  // eval: a batch at a time

  int64_t start_step = 0;
  vt_ckpt_manifest saved;  // world rank 0: the manifest of the checkpoint resumed from
  int rc = 0;
  if (o->init_from[0] && vt_model_init_from(&m, world, o->init_from, err, sizeof err) != VT_OK) {
    if (world_rank == 0) vt_log_error("--init-from: %s", err);
    rc = VT_EXIT_USAGE;
  }
  vt_optimizer_ema_reset(&opt, m.params);  // the EMA starts at the initial weights
  if (!rc && !outputs_writable(o, world)) rc = VT_EXIT_USAGE;
  if (!rc && o->save_dir[0] && !o->eval_only &&
      vt_ckpt_check_shared(o->save_dir, world, err, sizeof err) != VT_OK) {
    if (world_rank == 0) vt_log_error("--save: %s", err);
    rc = VT_EXIT_USAGE;
  }
  if (!rc && o->resume[0] &&
      vt_ckpt_resume(o, &m, &opt, world, &mesh, &start_step, &saved, err, sizeof err) != VT_OK) {
    if (world_rank == 0)
      vt_log_error("cannot %s: %s", o->eval_only ? "load the checkpoint" : "resume", err);
    rc = VT_EXIT_USAGE;
  }
  vt_data data;
  memset(&data, 0, sizeof data);
  int ok = !rc && vt_data_open(&data, o, be, world, m.has_embed, m.has_head, me.tp_rank,
                               mesh.tp_size, me.dp_rank, mesh.dp_size, n_micro, start_step, err,
                               sizeof err) == VT_OK;
  if (!rc && !ok && world_rank == 0) vt_log_error("%s", err);
  // The stream position of a resumed run counts in the training set it was saved with; another
  // is allowed (a new dataset to go on with), but the stream then holds other images.
  if (ok && !o->eval_only) vt_data_identity(&data, &own.data_images, &own.data_classes);
  if (ok && world_rank == 0 && start_step > 0 && !o->eval_only && saved.data_images > 0 &&
      own.data_images > 0 &&
      (saved.data_images != own.data_images || saved.data_classes != own.data_classes))
    vt_log_warn("the checkpoint of step %lld was saved by a run whose --data held %lld images "
                "(class names %08llx) and this one's holds %lld (%08llx): from here the data "
                "stream holds other images than that run's", (long long)start_step,
                (long long)saved.data_images, (long long)saved.data_classes,
                (long long)own.data_images, (long long)own.data_classes);
  if (ok && !o->eval_only &&
      (own.epochs > 0 || own.warmup_epochs > 0 || own.eval_epochs > 0 || own.save_epochs > 0 ||
       own.sched_epochs))
    ok = epochs_to_steps(&own, &opt, data.train_ds.count, world_rank);
  // A resumed run goes on with the schedule and optimizer it was saved with, unless told: its
  // lengths are known only now.
  if (ok && world_rank == 0 && start_step > 0 && !o->eval_only)
    ok = resume_settings_ok(o, &saved, &opt.cfg, start_step);
  // ZB-V's rank 0 loads the images at chunk 0 and keeps the labels for the head's chunk 1.
  const int data_chunk = m.has_embed ? 0 : m.has_head ? m.nchunks - 1 : 0;
  vt_stage_ctx x = {.o = o, .m = &m, .pp = pp, .pp_rank = me.pp_rank, .B = B, .spec = spec,
                 .unit_slot = unit_slot, .unit_wset = unit_wset, .data_chunk = data_chunk,
                 .label_chunk = m.has_head ? m.nchunks - 1 : data_chunk,
                 .data = &data, .opt = &opt, .n_micro = n_micro, .ahead_step = -1};
  if (m.has_head) {
    x.step_losses = be->alloc((size_t)n_micro * B * sizeof(float));
    x.host_step_losses = malloc((size_t)n_micro * B * sizeof(float));
    VT_CHECK(x.step_losses && x.host_step_losses, "out of memory for %d x %d losses", n_micro, B);
  }
  if (x.label_chunk != x.data_chunk) {
    x.stash_labels = malloc((size_t)n_micro * B * sizeof *x.stash_labels);
    x.stash_mix = malloc((size_t)n_micro * B * sizeof *x.stash_mix);
    VT_CHECK(x.stash_labels && x.stash_mix, "out of memory for %d x %d labels", n_micro, B);
  }
  // The reference first: it may be this run's own log, which a fresh start truncates.
  vt_checklog check = {0};
  if (ok && world_rank == 0 && o->check_log[0] &&
      vt_checklog_open(&check, o->check_log, o->check_tol, err, sizeof err) != VT_OK) {
    vt_log_error("%s", err);
    ok = 0;
  }
  FILE *metrics = NULL;
  if (ok && world_rank == 0 && o->log_dir[0])
    ok = (metrics = vt_report_open_metrics(o->log_dir, start_step)) != NULL;
  vt_tfevents *tb = NULL;  // TensorBoard's event file beside metrics.jsonl; not needed to train
  if (ok && world_rank == 0 && o->log_dir[0] && o->tensorboard && !o->eval_only) {
    tb = vt_tfevents_open(o->log_dir, start_step + 1, err, sizeof err);
    if (!tb) vt_log_warn("no TensorBoard events: %s", err);
  }
  double all_ok = ok;  // every rank learns whether any failed, so all stop together
  vt_comm_all_reduce_double(world, &all_ok, 1, VT_REDUCE_MIN);
  if (!all_ok) {
    vt_checklog_free(&check);
    if (metrics) fclose(metrics);
    vt_tfevents_close(tb);
    vt_data_close(&data);
    if (x.step_losses) be->free(x.step_losses);
    free(x.host_step_losses);
    free(x.stash_labels);
    free(x.stash_mix);
    rc = rc ? rc : VT_EXIT_USAGE;
    goto done;
  }

  const double t_start = vt_seconds();
  double timed_s = 0.0;  // steps after the first, for the idle report
  double busy_s = 0.0;                          // since the last rank report
  int64_t report_first = start_step + 1, skipped = 0, nonfinite_run = 0;
  const size_t json_len = 64 + 48 * (size_t)world_size;
  char *ranks_json = calloc(json_len, 1);
  VT_CHECK(ranks_json != NULL, "out of host memory");
  vt_comm_counts_reset();
  int64_t end_step = o->steps;
  if (o->run_steps > 0 && start_step + o->run_steps < o->steps)
    end_step = start_step + o->run_steps;
  if (o->eval_only) end_step = start_step;
  if (world_rank == 0 && o->save_dir[0] && !o->eval_only && !rc)
    vt_ckpt_disk_plan(o, m.frozen_layers, start_step, end_step);
  for (int64_t step = start_step; step < end_step; step++) {
    const int64_t n = step + 1;  // the step's number as printed
    vt_watchdog_phase("step", n, o->timeout_s);
    const double t0 = vt_seconds(), comm0 = vt_comm_seconds();
    vt_fault_step_start(n);
    be->zero(m.grads, vt_model_grad_nbytes(&m));
    // A NaN planted before the backward passes add into it, so it reaches the DP reduction
    // like a real one (which starts during the last backward); in a trained tensor (a frozen
    // prefix's gradients are not looked at).
    const int plant_nan = vt_fault_at(VT_FAULT_NAN, n);
    if (plant_nan && opt.base < m.table.total) {  // (a stage with nothing trained: the loss's)
      const float nan = NAN;
      be->to_device(m.grads + (opt.base - m.grad_first), &nan, sizeof nan);
    }
    // The global loss: the last stage's TP rank 0 of every DP rank holds a share; the bad-image
    // count: the first stage's TP rank 0 of every DP rank, or each of its TP ranks when they
    // split the decoding (each counts its share); a preemption signal: any rank; the ranks
    // still writing their part of a checkpoint; the decoding ranks' waits for their loaders;
    // SIGINT: any rank.
    // Evaluation uses the training slots between steps: no prefetch into them before one.
    x.prefetch_next = n < end_step && !eval_due(o, &data, n, end_step);
    // The ranks that decode images: the time their loader kept them waiting this step, and
    // their count.
    const double wait0 = data.wait_s, loss_sum = vt_stage_run(&x, acts, nacts, step);
    const int decodes = data.train && data.need_pixels;
    double sums[7] = {loss_sum, (double)data.bad, vt_health_preempt_signal() != 0,
                      vt_ckpt_writing(), data.wait_s - wait0, decodes, vt_health_interrupted()};
    if (plant_nan) sums[0] = NAN;
    if (!(m.has_head && me.tp_rank == 0)) sums[0] = 0.0;
    if (!(m.has_embed && (me.tp_rank == 0 || data.pixel_count < B))) sums[1] = 0.0;
    vt_comm_all_reduce_double(world, sums, 7, VT_REDUCE_SUM);
    // A checkpoint written in the background is committed as soon as every rank's part is.
    if (vt_ckpt_pending() && sums[3] == 0) {
      vt_watchdog_phase("checkpoint commit", n, slow_limit);
      vt_ckpt_wait(world);
      vt_watchdog_phase("step", n, o->timeout_s);
    }
    const double loss = sums[0] / o->global_batch;
    // a preemption signal on any rank, else SIGINT (Ctrl-C) on any: save and stop
    const int preempt = sums[2] > 0, interrupt = !preempt && sums[6] > 0;
    const int stop = preempt || interrupt;
    const float lr = vt_lr_at(&o->optim, step);
    // A non-finite loss or gradient norm (the same verdict on every rank: both are global)
    // leaves the parameters and the optimizer state as they were.
    double gnorm = NAN;
    if (isfinite(loss))
      gnorm = vt_optimizer_step(&opt, m.params, m.grads, lr);
    else
      vt_optimizer_skip(&opt);
    be->synchronize();
    be->interval_take(x.pass_ms, x.passes);  // the step's passes' device times
    const int finite = isfinite(loss) && isfinite(gnorm);
    skipped += !finite;
    nonfinite_run = finite ? 0 : nonfinite_run + 1;
    if (!finite && world_rank == 0)
      vt_log_warn("step %lld: non-finite %s; the step is skipped (%lld in a row, %lld in all; "
                  "the run stops at %d in a row)",
                  (long long)n, isfinite(loss) ? "gradient norm" : "loss", (long long)nonfinite_run,
                  (long long)skipped, o->max_nonfinite);
    if (step == start_step && o->comm_stats && o->log_dir[0])
      vt_report_comm_stats(o, &m, &opt, me, world_rank, n_micro);
    if (step == start_step) vt_plan_report_memory(&m, &opt, o->device, mem_base);
    const double t1 = vt_seconds();
    busy_s += (t1 - t0) - (vt_comm_seconds() - comm0);
    if (step > start_step) timed_s += t1 - t0;
    if (step == start_step) {  // the idle report counts the steps after the first
      memset(x.pass_ms, 0, sizeof x.pass_ms);
      memset(x.passes, 0, sizeof x.passes);
    }
    // ZB-V, --pp-pass-times auto: the order built for the second step's pass times from here
    if (step == start_step + 1 && kind == VT_SCHEDULE_ZB_V && pass_times == 1 && n < end_step)
      vt_stage_retime(&x, world, acts, &nacts, cap, nslots, nwsets);
    vt_step_log l = {.step = n, .loss = loss, .gnorm = gnorm, .img_s = o->global_batch / (t1 - t0),
                  .step_ms = 1e3 * (t1 - t0), .lr = lr, .bad_images = (int64_t)sums[1],
                  .data_wait_ms = sums[5] > 0 ? 1e3 * sums[4] / sums[5] : -1.0,
                  .skipped = skipped, .ranks_json = ranks_json};
    l.eval_now = eval_due(o, &data, n, end_step);
    if (l.eval_now) {
      vt_watchdog_phase("evaluation", n, slow_limit);
      l.ev = vt_evaluate(&m, &data, world, pp, me, NULL, NULL);
      if (opt.ema) {
        // The EMA in the weights' place; the gradient buffer holds the weights from grad_first
        // on meanwhile (before it, the frozen prefix's EMA is its weights: they stay).
        const size_t nbytes = (size_t)(m.table.total - m.grad_first) * sizeof(float);
        be->copy(m.grads, m.params + m.grad_first, nbytes);
        vt_optimizer_ema_full(&opt, m.params, m.params);
        l.ev_ema = vt_evaluate(&m, &data, world, pp, me, NULL, NULL);
        be->copy(m.params + m.grad_first, m.grads, nbytes);
        l.eval_ema = 1;
      }
    }
    const int stop_nonfinite = nonfinite_run >= o->max_nonfinite;
    const int save_now = o->save_dir[0] && !stop_nonfinite &&
                         (n == end_step || stop ||
                          (o->save_interval > 0 && n % o->save_interval == 0));
    if (save_now) {
      vt_watchdog_phase("checkpoint save", n, slow_limit);
      if (vt_ckpt_save(o, &m, &opt, world, &mesh, n, n == end_step || stop, err,
                       sizeof err) != VT_OK) {
        if (world_rank == 0)
          vt_log_error("checkpoint of step %lld failed, the previous one is intact: %s",
                       (long long)n, err);
        if (stop) rc = VT_EXIT_FAILED;
      }
    }
    char summary[1024] = "";
    ranks_json[0] = '\0';
    if (o->straggler_interval > 0 && n % o->straggler_interval == 0) {
      vt_health_rank_report(world, &mesh, report_first, n,
                            1e3 * busy_s / (double)(n - report_first + 1),
                            (double)vt_backend_device_memory_used(o->device) / (1024.0 * 1024.0),
                            ranks_json, json_len, summary, sizeof summary);
      busy_s = 0.0, report_first = n + 1;
    }
    if (world_rank == 0)
      vt_report_step(o, metrics, &tb, &l, vt_seconds() - t_start, n - start_step, world_size);
    if (world_rank == 0) vt_save_hook_poll();
    const double ev[3] = {l.ev.loss, l.ev.top1, l.ev.top5};
    const double ema[3] = {l.ev_ema.loss, l.ev_ema.top1, l.ev_ema.top5};
    if (world_rank == 0 && o->check_log[0])
      vt_checklog_step(&check, n, l.loss, l.gnorm, l.eval_now ? ev : NULL,
                       l.eval_ema ? ema : NULL);
    if (summary[0]) vt_log_info("%s", summary);
    if (stop_nonfinite) {
      if (world_rank == 0)
        vt_log_error("steps %lld-%lld: %lld non-finite steps in a row (--max-nonfinite-steps %d); "
                     "stopping. The parameters are those after step %lld%s. Lower --lr or "
                     "--clip-grad, or look for bad data in these steps.",
                     (long long)(n - nonfinite_run + 1), (long long)n, (long long)nonfinite_run,
                     o->max_nonfinite, (long long)(n - nonfinite_run),
                     o->save_dir[0] ? "; resume from the newest checkpoint in --save" : "");
      rc = VT_EXIT_NONFINITE;
      break;
    }
    if (stop) {
      char what[sizeof o->save_dir + 64];
      if (!o->save_dir[0]) snprintf(what, sizeof what, "no --save directory, nothing was saved");
      else if (rc) snprintf(what, sizeof what, "the checkpoint FAILED (see above)");
      else snprintf(what, sizeof what, "checkpoint step-%08lld saved in %.*s", (long long)n,
                    (int)sizeof o->save_dir, o->save_dir);
      rc = rc ? rc : preempt ? VT_EXIT_PREEMPTED : VT_EXIT_INTERRUPTED;
      if (world_rank == 0 && preempt)
        vt_log_warn("preempted (signal %s on some rank) at step %lld: %s; exiting with %d. "
                    "Resume with --resume auto.",
                    vt_health_preempt_signal() == SIGTERM ? "SIGTERM" : "SIGUSR1", (long long)n,
                    what, rc);
      if (world_rank == 0 && interrupt)
        vt_log_warn("interrupted (SIGINT on some rank) at step %lld: %s; exiting with %d. "
                    "Resume with --resume auto.", (long long)n, what, rc);
      break;
    }
  }
  vt_watchdog_phase("end", end_step, slow_limit);
  // A run stopped early (non-finite steps) may leave a checkpoint being written: finish it.
  if (o->save_dir[0] && vt_ckpt_wait(world) != VT_OK && !rc) rc = VT_EXIT_FAILED;
  free(ranks_json);
  if (metrics) fclose(metrics);
  vt_tfevents_close(tb);
  // Rank 0's verdict sets the exit code only at the end: the exports below are collective.
  const int check_failed = world_rank == 0 && o->check_log[0] && vt_checklog_finish(&check);
  vt_checklog_free(&check);
  if (o->eval_only) {
    vt_eval_result ev =
        vt_evaluate(&m, &data, world, pp, me, o->logits_out[0] ? o->logits_out : NULL,
                    o->predictions[0] ? o->predictions : NULL);
    char left_out[64] = "";
    if (ev.bad > 0) snprintf(left_out, sizeof left_out, ", %lld bad left out", (long long)ev.bad);
    if (world_rank == 0)
      printf("eval: loss %.6f | top-1 %.4f%% | top-5 %.4f%% (%lld images%s%s)\n", ev.loss,
             100 * ev.top1, 100 * ev.top5, (long long)ev.count, left_out,
             o->eval_hflip ? ", each with its mirror" : "");
  }
  if (mesh.pp_size > 1 && timed_s > 0) {  // (a GPU's passes timed on the device)
    double pass_ms[3], compute_s = 0.0;
    for (int k = 0; k < 3; k++) {
      pass_ms[k] = x.passes[k] > 0 ? x.pass_ms[k] / x.passes[k] : 0;
      compute_s += 1e-3 * x.pass_ms[k];
    }
    vt_report_pipeline_idle(world, &mesh, me, 1.0 - compute_s / timed_s, pass_ms, &x.spec,
                            c->depth, m.frozen_layers);
  }
  if (!rc && o->final_weights[0] &&
      vt_export_safetensors(&m, m.params, world, &mesh, o->final_weights, err, sizeof err) !=
          VT_OK) {
    if (world_rank == 0) vt_log_error("%s", err);
    rc = VT_EXIT_FAILED;
  }
  if (!rc && o->final_ema[0])  // in the weights' place (exported above, not needed after)
    vt_optimizer_ema_full(&opt, m.params, m.params);
  if (!rc && o->final_ema[0] &&
      vt_export_safetensors(&m, m.params, world, &mesh, o->final_ema, err, sizeof err) != VT_OK) {
    if (world_rank == 0) vt_log_error("%s", err);
    rc = VT_EXIT_FAILED;
  }
  if (check_failed && !rc) rc = VT_EXIT_CHECK;
  // After the last collective: rank 0 waits for the last checkpoint's hook, without the
  // watchdog's limit (--save-hook-timeout still stops it).
  if (world_rank == 0 && o->save_hook[0]) {
    vt_watchdog_phase("waiting for the save hook", end_step, 0);
    vt_save_hook_wait(0);
    if (vt_save_hook_summary() && !rc) rc = VT_EXIT_FAILED;
  }
  be->upload_wait();  // no copy may still read the loader's buffers when they are freed
  vt_data_close(&data);
  if (x.step_losses) be->free(x.step_losses);
  free(x.host_step_losses);
  free(x.stash_labels);
  free(x.stash_mix);
done:
  vt_watchdog_stop();
  free(acts);
  free(unit_slot);
  free(unit_wset);
  vt_optimizer_free(&opt);
  vt_model_free(&m);
  vt_comm_free(tp);
  vt_comm_free(pp);
  vt_comm_free(dp);
  return rc;
}
