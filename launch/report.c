// report.c: what a training run tells its user (report.h).
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checklog.h"
#include "checkpoint.h"
#include "comm.h"
#include "params.h"

// The optimizer, its weight decay and clipping, and the loss: one line each, every run.
static void report_basics(const vt_train_options *o, const vt_optim_config *oc) {
  const int adam = oc->kind == VT_OPT_ADAMW || oc->kind == VT_OPT_LAMB;
  const char *name = oc->kind == VT_OPT_ADAMW  ? "AdamW"
                     : oc->kind == VT_OPT_LAMB ? "LAMB"
                     : oc->kind == VT_OPT_SGD  ? (oc->nesterov ? "SGD, Nesterov" : "SGD")
                     : oc->trust_clip          ? "LARC"
                                               : "LARS";
  char hyper[80], clip[64] = "no gradient clipping";
  if (adam) snprintf(hyper, sizeof hyper, "betas %g, %g, eps %g", oc->beta1, oc->beta2, oc->eps);
  else snprintf(hyper, sizeof hyper, "momentum %g", oc->momentum);
  if (oc->clip_grad > 0)
    snprintf(clip, sizeof clip, "gradients clipped to a global norm of %g", oc->clip_grad);
  vt_log_info("optimizer %s (%s), peak lr %g, weight decay %g (not on biases, norms, LayerScale, "
              "positions and tokens), %s", name, hyper, oc->lr, oc->weight_decay, clip);
  if (o->bce_loss)
    vt_log_info("loss: binary cross-entropy over the %d classes%s, label smoothing %g",
                o->model.num_classes,
                o->bce_thresh >= 0 ? " (targets above the threshold count 1)" : "",
                o->label_smoothing);
  else
    vt_log_info("loss: softmax cross-entropy over the %d classes, label smoothing %g",
                o->model.num_classes, o->label_smoothing);
}

void vt_report_schedule(const vt_optim_config *oc) {
  if (oc->epoch_images > 0) return;  // (said per epoch with the epochs' steps)
  // (the decay reaches its end after the last step, which trains a little above it)
  char last[64] = "";
  if (oc->sched != VT_SCHED_CONSTANT && oc->total_steps > oc->warmup_steps)
    snprintf(last, sizeof last, " (step %lld trains at %.3g)", (long long)oc->total_steps,
             vt_lr_at(oc, oc->total_steps - 1));
  char warmup[128] = "no warmup: from";
  if (oc->warmup_steps > 0)
    snprintf(warmup, sizeof warmup, "%lld step%s of warmup from %g (step 1) to",
             (long long)oc->warmup_steps, oc->warmup_steps == 1 ? "" : "s", vt_lr_at(oc, 0));
  vt_log_info("learning rate per step: %s %g, then %s to %g after step %lld%s", warmup, oc->lr,
              oc->sched == VT_SCHED_COSINE   ? "a cosine"
              : oc->sched == VT_SCHED_LINEAR ? "a straight line"
                                             : "held",
              oc->sched == VT_SCHED_CONSTANT ? oc->lr : oc->min_lr, (long long)oc->total_steps,
              last);
}

// The basics, then the training recipe's options that are off by default, when on: one line each.
void vt_report_recipe(const vt_train_options *o, const vt_optim_config *oc) {
  const int depth = o->model.depth;
  vt_schedule_kind sched = VT_SCHEDULE_1F1B;
  vt_schedule_parse(o->pp_schedule, &sched);  // (validated)
  report_basics(o, oc);
  if (oc->kind == VT_OPT_LAMB)
    vt_log_info("optimizer LAMB: each tensor with weight decay steps by lr * ||w|| / ||u|| along "
                "u = Adam's direction + %g * w; the others by lr along Adam's direction",
                oc->weight_decay);
  if (oc->kind == VT_OPT_LARS)
    vt_log_info("optimizer %s (timm's Lars, %s momentum %g): each tensor with weight decay "
                "takes the gradient + %g * w scaled by %s%g ||w|| / (||g|| + %g ||w|| + %g)%s, "
                "the others the gradient", oc->trust_clip ? "LARC" : "LARS",
                oc->nesterov ? "Nesterov" : "plain", oc->momentum, oc->weight_decay,
                oc->trust_clip ? "min(1, " : "", VT_LARS_TRUST, oc->weight_decay, oc->eps,
                oc->trust_clip ? " / its lr)" : "");
  if (o->drop_path > 0 && o->drop_path_uniform)
    vt_log_info("drop path: each residual branch of every block dropped per image with "
                "probability %g", o->drop_path);
  else if (o->drop_path > 0)
    vt_log_info("drop path: each residual branch of block i of %d dropped per image with "
                "probability %g * i / %d", depth, o->drop_path, depth > 1 ? depth - 1 : 1);
  if (o->proj_drop > 0 || o->pos_drop > 0 || o->head_drop > 0)
    vt_log_info("dropout: each element of the blocks' attention outputs, MLP hidden units and "
                "MLP outputs dropped with probability %g, of the embedding's output with %g, of "
                "the head's input with %g", o->proj_drop, o->pos_drop, o->head_drop);
  if (o->attn_drop > 0)
    vt_log_info("attention dropout: each attention probability of every block dropped with "
                "probability %g", o->attn_drop);
  if (vt_layer_lr_scale(oc, 0) < 1.0)
    vt_log_info("layer-wise lr decay %g: the head and final norm step with lr, block i with lr * "
                "%g^(%d - i), the embeddings with lr * %.3g", oc->layer_decay, oc->layer_decay,
                depth, vt_layer_lr_scale(oc, 0));
  vt_freeze_summary fz;
  char err[320], flags[600], skip[96] = "their gradients are computed, not applied", pipe[160] = "";
  if ((oc->freeze[0] || oc->trainable[0]) &&
      vt_freeze_summarize(oc, &o->model, &fz, err, sizeof err) == VT_OK) {
    if (fz.leading_layers == 1) snprintf(skip, sizeof skip, "the backward skips the embeddings");
    if (fz.leading_layers > 1)
      snprintf(skip, sizeof skip, "the backward skips the embeddings and blocks 0-%d",
               fz.leading_layers - 2);
    const int nvs = o->pp * o->pp_chunks,
              fvs = vt_frozen_vstages(o->model.depth, nvs, sched == VT_SCHEDULE_ZB_V,
                                      fz.leading_layers);
    if (o->pp > 1 && fvs == 1)
      snprintf(pipe, sizeof pipe, "; virtual pipeline stage 0 of %d, wholly frozen, runs no "
               "backward and gets no gradient", nvs);
    if (o->pp > 1 && fvs > 1)
      snprintf(pipe, sizeof pipe, "; virtual pipeline stages 0-%d of %d, wholly frozen, run no "
               "backward and get no gradient", fvs - 1, nvs);
    vt_log_info("frozen (%s): %d of %d tensors, %lld of %lld parameters (%.2f%%): they keep "
                "their values; %s%s", vt_freeze_flags(oc, flags, sizeof flags), fz.tensors,
                fz.all_tensors, (long long)fz.elements, (long long)fz.all_elements,
                100.0 * (double)fz.elements / (double)(fz.all_elements ? fz.all_elements : 1),
                skip, pipe);
  }
  static const char *const interp[] = {"sample", "bilinear", "bicubic"};
  if (o->transform.train_interp || o->transform.eval_interp)
    vt_log_info("interpolation: training crops %s, evaluation resize %s (bilinear, bicubic: "
                "Pillow's antialiased resize)", interp[o->transform.train_interp],
                interp[o->transform.eval_interp]);
  if (o->transform.ra.layers > 0) {
    char spec[96];
    vt_randaug_describe(&o->transform.ra, spec, sizeof spec);
    vt_log_info("RandAugment %s: %d of timm's 15 operations per training crop, each with "
                "probability %g, %s resampling", spec, o->transform.ra.layers, o->transform.ra.prob,
                o->transform.ra.interp == VT_RA_BICUBIC ? "bicubic" : "bilinear");
  }
  if (o->transform.color_jitter > 0 && !o->transform.three_aug)
    vt_log_info("colour jitter %g of training crops (timm's: brightness, contrast and saturation "
                "in a random order)", (double)o->transform.color_jitter);
  if (o->transform.three_aug)
    vt_log_info("3-Augment: grayscale, solarize or a Gaussian blur per training crop, then colour "
                "jitter %g (brightness, contrast and saturation in a random order; 0: none)",
                o->transform.color_jitter);
  if (o->aug_repeats > 1)
    vt_log_info("repeated augmentation: each epoch holds %d-fold copies of 1/%d of the images, "
                "each copy augmented on its own", o->aug_repeats, o->aug_repeats);
  if (o->drop_last)
    vt_log_info("drop last: each epoch is the training set's whole global batches of %d, its "
                "order's last images (fewer than one batch) left out", o->global_batch);
  if (o->erase.prob > 0)
    vt_log_info("random erasing: probability %g, fill %s", o->erase.prob,
                o->erase.mode == VT_ERASE_PIXEL  ? "a normal value per element"
                : o->erase.mode == VT_ERASE_RAND ? "a normal value per channel"
                                                 : "zeros");
  if (vt_mix_enabled(&o->mix)) {
    const vt_mix_config *x = &o->mix;
    const double cut = x->cutmix_alpha <= 0 ? 0 : (x->mixup_alpha <= 0 ? 1 : x->switch_prob);
    vt_log_info("mixing pairs of images (stream positions 2k, 2k+1) with probability %g: CutMix "
                "(alpha %g) for %g of them, Mixup (alpha %g) for the rest", x->prob,
                x->cutmix_alpha, cut, x->mixup_alpha);
  }
  if (o->pp == 1 && o->steps > 0 && (sched == VT_SCHEDULE_GPIPE || sched == VT_SCHEDULE_ZB_H1))
    vt_log_warn("--pp-schedule %s on one pipeline stage only costs memory (%s): 1f1b, the "
                "default, computes the same", o->pp_schedule,
                sched == VT_SCHEDULE_GPIPE ? "every micro-batch's activations kept at once"
                                           : "the weight passes' inputs kept");
  if (oc->ema_decay > 0)
    vt_log_info("the weights' EMA: decay %g per step%s, evaluated beside the weights",
                oc->ema_decay,
                oc->ema_warmup ? " after a warmup (timm's ModelEmaV3: min(decay, 1 - t^(-2/3)) "
                                 "at update t, the first a copy)"
                               : "");
  if (o->recompute_blocks > 0)
    vt_log_info("activation recompute: the first %d blocks of each pipeline stage%s",
                o->recompute_blocks, o->pp_chunks > 1 ? "'s model chunks" : "");
}

// The first step's traffic of this rank per axis and op, with what the formulas need to
// predict it (tests/test_traffic.py).
void vt_report_comm_stats(const vt_train_options *o, const vt_model *m, const vt_optimizer *opt,
                          vt_mesh_coord me, int world_rank, int n_micro) {
  char path[600];
  snprintf(path, sizeof path, "%s/comm.rank%d.json", o->log_dir, world_rank);
  FILE *f = fopen(path, "w");
  if (!f) {
    vt_log_warn("cannot write %s: %s", path, strerror(errno));
    return;
  }
  int frozen_blocks = 0;  // whose backward the model skips (block i is layer i + 1)
  for (int l = 0; l < m->nblocks; l++) frozen_blocks += m->block_id[l] + 1 < m->frozen_layers;
  const int recomputed =
      vt_recomputed_blocks(m->cfg.depth, &m->shard, m->recompute, m->frozen_layers);
  fprintf(f, "{\"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, \"nblocks\": %d, "
             "\"chunks\": %d, \"micro_batches\": %d, \"B\": %d, \"N\": %d, \"C\": %d, \"params\": %lld, "
             "\"zero_part\": %lld, \"frozen_prefix\": %lld, \"frozen_layers\": %d, "
             "\"frozen_blocks\": %d, \"recomputed_blocks\": %d, \"frozen_vstages\": %d, "
             "\"dp_overlap\": %d, \"dp_reductions\": %d, "
             "\"dp_started_in_backward\": %d, \"parallel_blocks\": %d, \"vshape\": %d, "
             "\"sequence_parallel\": %d, \"axes\": {",
          me.tp_rank, me.pp_rank, me.dp_rank, m->nblocks, m->nchunks, n_micro, m->max_batch,
          vt_cfg_tokens(&m->cfg), m->cfg.width, (long long)m->table.total,
          (long long)(opt->zero ? opt->part : 0), (long long)opt->base, m->frozen_layers,
          frozen_blocks, recomputed,
          vt_frozen_vstages(m->cfg.depth, m->shard.pp_size * m->nchunks, m->shard.pp_vshape,
                            m->frozen_layers),
          opt->overlap, opt->reductions,
          opt->started_early, m->cfg.parallel, m->shard.pp_vshape, m->shard.sequence_parallel);
  for (int a = 0; a < VT_AXIS_COUNT; a++) {
    vt_comm_counts cc = vt_comm_counts_get((vt_axis)a);
    fprintf(f, "%s\"%s\": {", a ? ", " : "", vt_axis_name((vt_axis)a));
    for (int op = 0; op < VT_COMM_OP_COUNT; op++)
      fprintf(f, "%s\"%s\": [%lld, %lld]", op ? ", " : "", vt_comm_op_name((vt_comm_op)op),
              (long long)cc.op_calls[op], (long long)cc.op_nbytes[op]);
    fprintf(f, "}");
  }
  fprintf(f, "}}\n");
  const int ok = !ferror(f);
  if (fclose(f) != 0 || !ok) vt_log_warn("writing %s failed: %s", path, strerror(errno));
}

// Rank 0 prints each pipeline stage's idle fraction (1 - compute / step time, steps after the
// first) beside the ideal bubble and the simulated one. Collective over world.
void vt_report_pipeline_idle(vt_comm *world, const vt_mesh *mesh, vt_mesh_coord me,
                             double idle, const double pass_ms[3], const vt_schedule_spec *spec,
                             int depth, int frozen_layers) {
  const int p = mesh->pp_size;
  double *per_stage = calloc((size_t)p * 4, sizeof(double));  // idle, then F, B, W per stage
  VT_CHECK(per_stage != NULL, "out of host memory");
  if (me.tp_rank == 0 && me.dp_rank == 0) {
    per_stage[me.pp_rank] = idle;
    for (int k = 0; k < 3; k++) per_stage[p + 3 * me.pp_rank + k] = pass_ms[k];
  }
  vt_comm_all_reduce_double(world, per_stage, 4 * p, VT_REDUCE_SUM);
  if (vt_comm_rank(world) == 0) {
    char line[1024];
    int k = snprintf(line, sizeof line, "pipeline idle fraction per stage:");
    for (int s = 0; s < p && k < (int)sizeof line; s++)
      k += snprintf(line + k, sizeof line - (size_t)k, " %.3f", per_stage[s]);
    // mean pass times over the stages that ran them (a wholly frozen one runs no backward)
    double c[3] = {0, 0, 0}, ran[3] = {0, 0, 0};
    for (int s = 0; s < p; s++)
      for (int k = 0; k < 3; k++)
        if (per_stage[p + 3 * s + k] > 0) c[k] += per_stage[p + 3 * s + k], ran[k]++;
    for (int k = 0; k < 3; k++) c[k] = ran[k] > 0 ? c[k] / ran[k] : 0.0;
    const vt_schedule_costs costs = {c[0], c[1], c[2]};
    char passes[96];
    snprintf(passes, sizeof passes, "forward %.2f ms, backward %.2f ms", c[0], c[1]);
    if (vt_schedule_splits_backward(spec->kind))
      snprintf(passes + strlen(passes), sizeof passes - strlen(passes), " + weight %.2f ms", c[2]);
    vt_log_info("%s; ideal bubble %s = %.3f for p %d, m %d, v %d (%s); simulated idle %.3f at "
                "this run's mean pass times per unit (%s)",
                line, vt_schedule_bubble_formula_text(spec->kind),
                vt_schedule_bubble_formula(spec), p, spec->n_micro, spec->chunks,
                vt_schedule_name(spec->kind),
                vt_schedule_simulated_idle(spec, costs, 1), passes);
    // Which schedule suits these pass times: the others simulated at the same whole-stage times
    // (a unit of v chunks takes 1/v of them). Without a weight pass of its own the run cannot
    // tell how a backward would split, so then only the schedules that do not split it.
    const int split = vt_schedule_splits_backward(spec->kind);
    const double v = spec->chunks;
    k = snprintf(line, sizeof line, "the same stage pass times under other schedules, simulated:");
    int others = 0;
    const vt_schedule_kind kinds[] = {VT_SCHEDULE_1F1B, VT_SCHEDULE_INTERLEAVED, VT_SCHEDULE_ZB_H1,
                                      VT_SCHEDULE_ZB_V};
    for (int i = 0; i < 4 && k < (int)sizeof line; i++) {
      const int vk = kinds[i] == VT_SCHEDULE_INTERLEAVED || kinds[i] == VT_SCHEDULE_ZB_V ? 2 : 1;
      const vt_schedule_spec other = {kinds[i], p, spec->n_micro, vk,
                                      vt_frozen_vstages(depth, p * vk,
                                                        kinds[i] == VT_SCHEDULE_ZB_V,
                                                        frozen_layers),
                                      {0, 0, 0}};
      if (kinds[i] == spec->kind || (!split && vt_schedule_splits_backward(kinds[i])) ||
          vt_schedule_spec_check(&other, NULL, 0) != VT_OK)
        continue;
      const vt_schedule_costs oc = {c[0] * v / vk, c[1] * v / vk, c[2] * v / vk};
      k += snprintf(line + k, sizeof line - (size_t)k, " %s %.3f", vt_schedule_name(kinds[i]),
                    vt_schedule_simulated_idle(&other, oc, 1));
      others++;
    }
    if (others) vt_log_info("%s", line);  // (none where the others cannot run these settings)
  }
  free(per_stage);
}

// The step's figures as TensorBoard scalars: metrics.jsonl's, under train/, eval/, eval_ema/
// (a skipped step's loss and norm, null there, are left out).
static void tensorboard_step(vt_tfevents *tb, const vt_step_log *l, double tflops, double mfu,
                             int with_mfu) {
  const char *tags[16];
  float values[16];
  int n = 0;
#define SCALAR(tag, v)                                        \
  do {                                                        \
    if (isfinite((double)(v))) tags[n] = tag, values[n++] = (float)(v); \
  } while (0)
  SCALAR("train/loss", l->loss);
  SCALAR("train/lr", l->lr);
  SCALAR("train/grad_norm", l->gnorm);
  SCALAR("train/img_per_s", l->img_s);
  SCALAR("train/step_ms", l->step_ms);
  SCALAR("train/model_tflops", tflops);
  if (with_mfu) SCALAR("train/mfu", mfu);
  SCALAR("train/skipped_steps", (double)l->skipped);
  SCALAR("train/bad_images", (double)l->bad_images);
  if (l->data_wait_ms >= 0) SCALAR("train/data_wait_ms", l->data_wait_ms);
  if (l->eval_now) {
    SCALAR("eval/loss", l->ev.loss);
    SCALAR("eval/top1", l->ev.top1);
    SCALAR("eval/top5", l->ev.top5);
  }
  if (l->eval_ema) {
    SCALAR("eval_ema/loss", l->ev_ema.loss);
    SCALAR("eval_ema/top1", l->ev_ema.top1);
    SCALAR("eval_ema/top5", l->ev_ema.top5);
  }
#undef SCALAR
  vt_tfevents_scalars(tb, l->step, n, tags, values);  // (a failure said there, the file kept)
}

// The progress line every --log-interval steps, the step's metrics.jsonl line and its
// TensorBoard scalars.
void vt_report_step(const vt_train_options *o, vt_metrics_log *metrics, vt_tfevents **tb,
                    const vt_step_log *l, double t_elapsed, int64_t steps_done, int world_size) {
  const double tflops = l->image_flops * l->img_s / 1e12;
  const double mfu = o->peak_tflops > 0 ? tflops / (o->peak_tflops * world_size) : 0.0;
  if (tb && *tb) tensorboard_step(*tb, l, tflops, mfu, o->peak_tflops > 0);
  char *text = NULL;
  size_t text_len = 0;
  FILE *line = metrics && metrics->open ? open_memstream(&text, &text_len) : NULL;
  if (line) {  // written whole (vt_metrics_write)
    // JSON has no NaN: a skipped step's loss or norm is null.
    char loss[32], gnorm[32];
    vt_format_figure(loss, sizeof loss, l->loss);
    vt_format_figure(gnorm, sizeof gnorm, l->gnorm);
    fprintf(line,
            "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
            "\"img_per_s\": %.3f, \"step_ms\": %.3f, \"model_tflops\": %.6g",
            (long long)l->step, loss, l->lr, gnorm, l->img_s, l->step_ms, tflops);
    if (o->peak_tflops > 0) fprintf(line, ", \"mfu\": %.6g", mfu);
    fprintf(line, ", \"skipped_steps\": %lld, \"bad_images\": %lld", (long long)l->skipped,
            (long long)l->bad_images);
    if (l->data_wait_ms >= 0) fprintf(line, ", \"data_wait_ms\": %.3f", l->data_wait_ms);
    char ev[3][32];
    vt_format_eval(ev, l->ev.loss, l->ev.top1, l->ev.top5);
    if (l->eval_now)
      fprintf(line, ", \"eval_loss\": %s, \"eval_top1\": %s, \"eval_top5\": %s, "
              "\"eval_views\": %d, \"eval_images\": %lld, \"eval_bad_images\": %lld", ev[0],
              ev[1], ev[2], o->eval_hflip ? 2 : 1, (long long)l->ev.count, (long long)l->ev.bad);
    vt_format_eval(ev, l->ev_ema.loss, l->ev_ema.top1, l->ev_ema.top5);
    if (l->eval_ema)
      fprintf(line, ", \"eval_ema_loss\": %s, \"eval_ema_top1\": %s, \"eval_ema_top5\": %s",
              ev[0], ev[1], ev[2]);
    if (l->ranks_json[0]) fprintf(line, ", %s", l->ranks_json);
    fprintf(line, "}\n");
    if (fclose(line) == 0) vt_metrics_write(metrics, l->step, text, text_len);
    free(text);
  }
  // (every --log-interval steps, the first of this invocation, fresh or resumed, and the last)
  if (l->step % o->log_interval == 0 || steps_done == 1 || l->step == o->steps) {
    double eta = t_elapsed / (double)steps_done * (double)(o->steps - l->step);
    char mfu_s[32] = "", wait_s[48] = "";
    if (o->peak_tflops > 0) snprintf(mfu_s, sizeof mfu_s, " | mfu %.1f%%", 100 * mfu);
    // Said where the loader held up the step noticeably (input-bound: more --loader-threads).
    if (l->data_wait_ms > 0.05 * l->step_ms)
      snprintf(wait_s, sizeof wait_s, " | data wait %.0f%%", 100 * l->data_wait_ms / l->step_ms);
    printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.1f img/s | %.0f ms/step%s%s"
           " | eta %dm%02ds\n",
           (long long)l->step, (long long)o->steps, l->loss, l->lr, l->gnorm, l->img_s,
           l->step_ms, mfu_s, wait_s, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
  }
  if (l->eval_now) {
    char left_out[64] = "";
    if (l->ev.bad > 0)
      snprintf(left_out, sizeof left_out, ", %lld bad left out", (long long)l->ev.bad);
    if (l->ev.count == 0)
      printf("eval after step %lld: no figures (no image scored%s)\n", (long long)l->step,
             left_out);
    else
      printf("eval after step %lld: loss %.4f | top-1 %.2f%% | top-5 %.2f%% (%lld images%s%s)\n",
             (long long)l->step, l->ev.loss, 100 * l->ev.top1, 100 * l->ev.top5,
             (long long)l->ev.count, left_out, o->eval_hflip ? ", each with its mirror" : "");
  }
  if (l->eval_ema && l->ev_ema.count == 0)
    printf("eval after step %lld, EMA weights: no figures\n", (long long)l->step);
  else if (l->eval_ema)
    printf("eval after step %lld, EMA weights: loss %.4f | top-1 %.2f%% | top-5 %.2f%%\n",
           (long long)l->step, l->ev_ema.loss, 100 * l->ev_ema.top1, 100 * l->ev_ema.top5);
  if (l->eval_now || l->eval_ema) fflush(stdout);  // (in order with stderr's lines in one log)
}

// Every rank: host, world and local rank, mesh coordinates and device, one line each.
void vt_report_placement(vt_comm *world, vt_mesh_coord me, const char *device, int threads) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  vt_log_all_ranks(1);
  vt_log_info("host %s, pid %ld, world rank %d of %d (%s), local rank %d of %d, tp %d pp %d "
              "dp %d, device %s, %d CPU threads",
              host, (long)getpid(), vt_comm_rank(world), vt_comm_size(world),
              vt_comm_transport_name(world),
              vt_comm_local_rank(world), vt_comm_local_size(world), me.tp_rank, me.pp_rank,
              me.dp_rank, device, threads);
  vt_log_all_ranks(0);
}

