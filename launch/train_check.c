// train_check.c: the options of `vit3d train|eval|plan` checked before anything starts
// (vt_train_validate: one message for what is wrong and what to do), and the checks and
// resolutions a run makes once its world and data are known: the output folders, --epochs made
// steps, a resumed run's schedule and optimizer against its checkpoint's. Must not depend on the
// CLI parser or the model's passes.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "ckpt.h"
#include "comm.h"
#include "data.h"
#include "label.h"
#include "mesh.h"
#include "schedule.h"
#include "train.h"
#include "train_internal.h"

#define REFUSE(...) return (snprintf(err, errlen, __VA_ARGS__), VT_ERR_INPUT)

// Whether paths a and b name the same folder: the same file where both exist, else the same
// words but for trailing slashes (a --save folder a run has yet to make).
static int same_folder(const char *a, const char *b) {
  if (vt_ckpt_continues(a, b)) return 1;
  size_t na = strlen(a), nb = strlen(b);
  while (na > 1 && a[na - 1] == '/') na--;
  while (nb > 1 && b[nb - 1] == '/') nb--;
  return na == nb && strncmp(a, b, na) == 0;
}

int vt_train_device_fits(const vt_train_options *o, char *err, size_t errlen) {
  const vt_vit_config *c = &o->model;
  const int bf16 = o->precision == VT_PRECISION_BF16, D = vt_cfg_head_dim(c);
  size_t need, limit;
  if (!vt_backend_attention_fits(o->device, bf16, D, &need, &limit)) {
    // The most heads' dims that fit: the fewest heads (a multiple of --tp) that divide the width
    // into a dim that fits.
    int h = c->heads + 1, d = 0;
    for (; h <= c->width; h++) {
      size_t n, l;
      if (c->width % h == 0 && h % o->tp == 0 &&
          vt_backend_attention_fits(o->device, bf16, c->width / h, &n, &l))
        break;
    }
    for (int k = D - 1; k > 0 && !d; k--) {
      size_t n, l;
      if (vt_backend_attention_fits(o->device, bf16, k, &n, &l)) d = k;
    }
    char fix[64] = "another --width";  // (no head count a multiple of --tp gives a dim that fits)
    if (h <= c->width) snprintf(fix, sizeof fix, "more heads (--heads %d)", h);
    snprintf(err, errlen, "width %d over %d heads is a head dim of %d: this GPU's attention "
             "kernels need %zu bytes of shared memory per block for it in %s, more than the %zu "
             "it allows a block (head dims up to %d fit here); use %s%s",
             c->width, c->heads, D, need, bf16 ? "bf16" : "fp32", limit, d, fix,
             bf16 ? "" : " or --precision bf16");
    return 0;
  }
  // Tensors every TP rank holds whole (patch embedding, positions, norms, the MAP head) are
  // computed on each and never reduced over TP: the same bits only from the same GEMM
  // algorithms, which timing picks per process.
  const char *tune = getenv("VT_CUBLASLT_TUNE");
  if (o->device == VT_DEVICE_CUDA && o->tp > 1 && tune && atoi(tune) > 1) {
    snprintf(err, errlen, "VT_CUBLASLT_TUNE=%s times cuBLASLt's algorithms on each rank, so the "
             "%d TP ranks may pick different ones and compute the tensors they all hold in "
             "different bits, drifting apart unseen: unset it with --tp > 1 (a diagnosis for "
             "one process)", tune, o->tp);
    return 0;
  }
  const int64_t most = vt_backend_latent_max_tokens(o->device);
  if (c->global_pool == 3 && vt_cfg_tokens(c) > most) {
    snprintf(err, errlen, "--global-pool map over %d tokens: this GPU's MAP head takes at most "
             "%lld (its scores in one block's shared memory, %zu bytes a block here); use a "
             "larger --patch-size or another --global-pool", vt_cfg_tokens(c), (long long)most,
             limit);
    return 0;
  }
  return 1;
}

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
  if (o->eval_only && o->log_dir[0])
    REFUSE("--log-dir is a training run's: an evaluation prints its figures and writes no log "
           "(--predictions FILE writes each image's classes); drop --log-dir");
  if (o->eval_only && o->resume[0] && o->init_from[0])
    REFUSE("vit3d eval takes its weights from --checkpoint DIR or --init-from FILE: give one");
  vt_mesh_order order;
  vt_mesh mesh;
  if (vt_mesh_order_parse(o->mesh_order, &order, err, errlen) != VT_OK) return VT_ERR_INPUT;
  if (vt_mesh_init(&mesh, o->tp, o->pp, o->dp, order, world_size, err, errlen) != VT_OK)
    return VT_ERR_INPUT;
  o->dp = mesh.dp_size;
  if ((int64_t)o->dp * o->micro_batch > (1 << 24))  // (--global-batch-size's bound)
    REFUSE("dp %d x --micro-batch-size %d = %lld images a step, more than 16777216: choose "
           "fewer ranks or a smaller micro-batch", o->dp, o->micro_batch,
           (long long)o->dp * o->micro_batch);
  if (o->predictions[0] && !o->eval_only)
    REFUSE("--predictions is for vit3d eval (on any mesh)");
  if (o->comm_stats && !o->log_dir[0])
    REFUSE("--comm-stats writes LOG_DIR/comm.rank<R>.json: give --log-dir DIR too");
  if (o->trace_steps > 0 && !o->log_dir[0])
    REFUSE("--trace-steps writes its timeline to LOG_DIR/trace.json: give --log-dir DIR too");
  if (o->global_batch == 0) o->global_batch = o->dp * o->micro_batch;
  // The CUDA attention kernels' shared-memory tiles at the most any GPU gives a block (an
  // H100/H200's 227 KiB: fp32 up to 96, bf16's WMMA kernels up to 128 by their own limit), so
  // that `vit3d plan` without a GPU says so too; the GPU a run picks may give less (an A100 163
  // KiB, sm_86/89 99 KiB), which vt_train_device_fits checks at start-up.
  const int D = vt_cfg_head_dim(c), dmax = o->precision == VT_PRECISION_BF16 ? 128 : 96;
  if ((o->device == VT_DEVICE_CUDA || o->plan_gpus > 0) && D > dmax) {
    int h = (c->width + dmax - 1) / dmax;  // the fewest heads that divide the width and fit
    while (c->width % h) h++;
    REFUSE("width %d over %d heads is a head dim of %d: the CUDA attention kernels take up to "
           "%d in %s; use more heads (--heads %d)", c->width, c->heads, D, dmax,
           o->precision == VT_PRECISION_BF16 ? "bf16" : "fp32 (128 in bf16)", h);
  }
  // The MAP head's latent attention keeps a block's N scores in shared memory
  // (latent_attention.cu): at most 57856 tokens in an H100/H200's 227 KiB, less on other GPUs
  // (vt_train_device_fits).
  const int64_t map_max = (232448 - 1024) / 16 * 4;
  if ((o->device == VT_DEVICE_CUDA || o->plan_gpus > 0) && c->global_pool == 3 &&
      vt_cfg_tokens(c) > map_max)
    REFUSE("--global-pool map over %d tokens: the CUDA MAP head takes at most %lld (its scores in "
           "one block's shared memory on an H100/H200); use a larger --patch-size or another "
           "--global-pool", vt_cfg_tokens(c), (long long)map_max);
  if (c->heads % o->tp != 0)
    REFUSE("--tp %d does not divide the %d attention heads; use a TP size that divides them",
           o->tp, c->heads);
  if (vt_cfg_mlp_hidden(c) % o->tp != 0)
    REFUSE("--tp %d does not divide the MLP width %d", o->tp, vt_cfg_mlp_hidden(c));
  if (o->sequence_parallel && o->tp > 1 && o->precision == VT_PRECISION_BF16 && c->width % 2)
    REFUSE("--sequence-parallel 1 in bf16 gathers the bf16 rows two to a float: it needs an "
           "even --width (have %d); use an even width or --precision fp32", c->width);
  if (o->eval_only)  // (an evaluation takes a micro-batch at a time: inspect's line has one)
    o->global_batch = o->dp * o->micro_batch;
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
  // (before the schedule's check, whose cost grows with pp squared: vit3d plan --gpus tries
  // every pp)
  if (c->depth < o->pp * o->pp_chunks && o->pp_chunks == 1)
    REFUSE("--pp %d stages but only %d blocks: every stage needs at least one block", o->pp,
           c->depth);
  if (c->depth < o->pp * o->pp_chunks)
    REFUSE("--pp %d x --pp-chunks %d = %d virtual pipeline stages but only %d blocks: every "
           "one needs at least one block", o->pp, o->pp_chunks, o->pp * o->pp_chunks, c->depth);
  char why[400];
  if (vt_schedule_verify(&spec, why, sizeof why) != VT_OK)
    REFUSE("--pp-schedule %s with --pp %d, --pp-chunks %d and %d micro-batches per step "
           "(--global-batch-size / (dp x --micro-batch-size)): %s", o->pp_schedule, o->pp,
           o->pp_chunks, spec.n_micro, why);
  if (!o->eval_only && !o->plan_only && strcmp(o->data, "synthetic") == 0 &&
      (o->transform.ra.layers > 0 || o->transform.three_aug || o->transform.simple_crop ||
       o->transform.color_jitter > 0 || o->aug_repeats > 1 || o->drop_last))
    REFUSE("--aa, --three-augment, --color-jitter, --simple-crop, --aug-repeats and --drop-last "
           "act on the image loader's crops and epochs; --data synthetic has none: give "
           "--data DIR");
  if (o->transform.simple_crop && o->transform.train_interp == VT_INTERP_SAMPLE)
    REFUSE("--simple-crop resizes the whole image as torchvision's Resize does: it needs "
           "--train-interpolation bilinear or bicubic");
  if (o->transform.simple_crop && c->img_size < 2 * VT_SIMPLE_CROP_PAD + 1)
    REFUSE("--simple-crop pads by %d mirrored pixels: it needs --img-size %d or more",
           VT_SIMPLE_CROP_PAD, 2 * VT_SIMPLE_CROP_PAD + 1);
  if (o->transform.ra.layers > 0 && o->transform.three_aug)
    REFUSE("--aa and --three-augment are two augmentation policies (DeiT III's 3-Augment "
           "replaces RandAugment): pick one");
  // (timm's transforms leave the colour jitter out where RandAugment is on: a recipe's would do
  // nothing)
  if (o->transform.color_jitter > 0 && !o->transform.three_aug && o->transform.ra.layers > 0)
    REFUSE("--color-jitter %g with --aa: timm applies no colour jitter where RandAugment is on "
           "(nor does vit3d): drop --color-jitter, or --aa", (double)o->transform.color_jitter);
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
  if (o->optim.min_lr > o->optim.lr && o->optim.sched != VT_SCHED_CONSTANT)  // (unused there)
    REFUSE("--min-lr %g is above --lr %g: the schedule would rise; give a lower --min-lr (its "
           "default is 1e-5)", o->optim.min_lr, o->optim.lr);
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
    frozen.frozen_stages = vt_frozen_vstages(c->depth, o->pp * o->pp_chunks,
                                             kind == VT_SCHEDULE_ZB_V, fz.leading_layers);
    if (!o->eval_only && frozen.frozen_stages > 0 &&
        vt_schedule_verify(&frozen, why, sizeof why) != VT_OK)
      REFUSE("--pp-schedule %s with %s (frozen virtual stages 0-%d): %s", o->pp_schedule, flags,
             frozen.frozen_stages - 1, why);
  }
  const char *outputs[N_OUTPUTS][2];
  output_files(o, outputs);
  for (int i = 0; i < N_OUTPUTS; i++) {  // (their folders: outputs_writable, on every rank)
    if (outputs[i][1][0] &&
        vt_output_file_check(outputs[i][1], outputs[i][0], err, errlen) != VT_OK)
      return VT_ERR_INPUT;
    for (int j = 0; j < i; j++)
      if (outputs[i][1][0] && !strcmp(outputs[i][1], outputs[j][1]))
        REFUSE("%s and %s name one file, %s: the second would overwrite the first; give each "
               "its own", outputs[j][0], outputs[i][0], outputs[i][1]);
  }
  if (o->optim.ema_warmup && o->optim.ema_decay <= 0)
    REFUSE("--model-ema-warmup warms up the weights' EMA: give --model-ema DECAY too");
  if (o->final_ema[0] && o->optim.ema_decay <= 0)
    REFUSE("--final-ema writes the weights' EMA: give --model-ema DECAY too");
  if (o->use_ema && (!o->eval_only || !o->resume[0]))
    REFUSE("--use-ema is for vit3d eval --checkpoint DIR (training keeps an EMA with "
           "--model-ema)");
  if (strcmp(o->resume, "auto") == 0 && !o->save_dir[0] && o->eval_only)
    REFUSE("--checkpoint auto evaluates the newest checkpoint in --save DIR; give --save too (or "
           "name the checkpoint, or its --save folder, with --checkpoint)");
  if (strcmp(o->resume, "auto") == 0 && !o->save_dir[0])
    REFUSE("--resume auto looks for checkpoints in --save DIR; give --save too");
  if (o->resume_fallback[0] && o->eval_only)
    REFUSE("vit3d eval does not take --resume-fallback: name the checkpoint with --checkpoint");
  if (o->resume_fallback[0] && strcmp(o->resume, "auto") != 0)
    REFUSE("--resume-fallback DIR is where training starts when --resume auto finds no "
           "checkpoint in --save, and this run's --resume is '%s': give --resume auto, or "
           "drop --resume-fallback", o->resume);
  if (strcmp(o->resume_fallback, "auto") == 0)
    REFUSE("--resume-fallback names a checkpoint (or a --save folder, for its newest), not "
           "auto");
  if (o->resume_fallback[0] && o->save_dir[0] && same_folder(o->resume_fallback, o->save_dir))
    REFUSE("--resume-fallback names --save itself, where --resume auto already looks: give "
           "the checkpoint to start from where --save holds none");
  if (c->init_jax && c->head_init_std > 0)
    REFUSE("--weight-init jax starts the head at zero: drop --head-init-std");
  if (o->keep_every > 0 && !o->keep_last)
    REFUSE("--keep-every N keeps milestones among the checkpoints that --keep-last K rotates "
           "away; without --keep-last every checkpoint is kept: give --keep-last, or drop "
           "--keep-every");
  if (o->save_hook[0] && !o->save_dir[0])
    REFUSE("--save-hook runs after each checkpoint is saved: give --save DIR too");
  if (o->save_hook_timeout > 0 && !o->save_hook[0])
    REFUSE("--save-hook-timeout limits the --save-hook command: give --save-hook CMD too");
  if (o->check_tol > 0 && !o->check_log[0])
    REFUSE("--check-tol is --check-log's tolerance: give --check-log FILE too");
  return VT_OK;
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
  if (o->optim.warmup_steps > o->steps && o->warmup_epochs > 0)  // (a recipe's, cut by --steps)
    REFUSE("the warmup of --warmup-epochs %g (%lld steps) is longer than the run (%lld steps): "
           "give a shorter --warmup-epochs or --warmup-steps after it", o->warmup_epochs,
           (long long)o->optim.warmup_steps, (long long)o->steps);
  if (o->optim.warmup_steps > o->steps)
    REFUSE("the warmup (%lld steps) is longer than the run (%lld steps)",
           (long long)o->optim.warmup_steps, (long long)o->steps);
  return VT_OK;
}

// Collective: whether every rank can make files in the folders of the output files written at
// the run's end (every rank writes its part of --final-weights), checked at its start, where a
// missing or read-only folder costs nothing; the lowest rank that cannot says why.
int vt_train_outputs_writable(const vt_train_options *o, vt_comm *world) {
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

// The lengths given in epochs made steps of this training set's n images (every rank holds the
// index, so every rank reaches the same verdict), into the options and the optimizer's
// schedule; rank 0 logs them. 0 (logged) when they make no valid run.
int vt_train_epochs_to_steps(vt_train_options *o, vt_optimizer *opt, int64_t n, int world_rank) {
  char err[512];
  const int ok = resolve_epochs(o, n, err, sizeof err) == VT_OK;
  if (!ok && world_rank == 0) vt_log_error("%s", err);
  opt->cfg.total_steps = o->optim.total_steps, opt->cfg.warmup_steps = o->optim.warmup_steps;
  opt->cfg.epoch_images = o->optim.epoch_images, opt->cfg.step_images = o->optim.step_images;
  opt->cfg.warmup_epochs = o->optim.warmup_epochs, opt->cfg.cycle_epochs = o->optim.cycle_epochs;
  if (!ok || world_rank != 0) return ok;
  if (o->sched_epochs)
    vt_log_info("learning rate per epoch (timm's): %g epochs of warmup from %g, then %s over "
                "%g epochs to %g", o->optim.warmup_epochs,
                o->optim.warmup_lr > 0 ? o->optim.warmup_lr
                                       : o->optim.lr * fmin(1.0, 1.0 / o->optim.warmup_epochs),
                o->optim.sched == VT_SCHED_COSINE   ? "a cosine"
                : o->optim.sched == VT_SCHED_LINEAR ? "a straight line"
                                                    : "constant",
                o->optim.cycle_epochs,
                o->optim.sched == VT_SCHED_CONSTANT ? o->optim.lr : o->optim.min_lr);
  const int64_t epoch = vt_epoch_images(o, n);
  // (per epoch, every step of an epoch e < warmup_epochs trains at a warmup rate: whole epochs)
  int64_t warm = o->optim.warmup_steps;
  if (o->sched_epochs && o->optim.warmup_epochs > 0) {
    const int64_t whole = (int64_t)ceil(o->optim.warmup_epochs);
    warm = (whole * epoch + o->global_batch - 1) / o->global_batch;
    warm = warm < o->steps ? warm : o->steps;
  }
  vt_log_info("%g epochs of %lld images at %d per step: %lld steps, %lld of warmup; "
              "evaluation every %d, saves every %d (0: at the end)",
              o->epochs > 0 ? o->epochs : (double)o->steps * o->global_batch / (double)epoch,
              (long long)epoch, o->global_batch, (long long)o->steps,
              (long long)warm, o->eval_interval, o->save_interval);
  return ok;
}

// Rank 0 of a resumed run: whether the checkpoint in dir (its manifest saved) was made
// with this run's learning-rate schedule and optimizer settings (cfg), or --resume-override 1
// lets this run's replace them (warned); 0 (logged, with what to do) otherwise.
int vt_train_resume_ok(const vt_train_options *o, const vt_ckpt_manifest *saved,
                       const vt_optim_config *cfg, const char *dir) {
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
