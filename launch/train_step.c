// train_step.c: one training step of a run (train.c's run_steps calls it): the stage's
// schedule of passes, the world's sums (loss, bad images, signals, checkpoint writers, loader
// waits), the optimizer step or its skip, then the evaluation, checkpoint save and reports
// that are due, and the stop verdict (non-finite steps in a row, a preemption signal, SIGINT).
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "eval.h"
#include "fault.h"
#include "health.h"
#include "plan.h"
#include "report.h"
#include "savehook.h"
#include "train_internal.h"
#include "vt_trace.h"
#include "watchdog.h"

// Whether the validation set is evaluated after step n (numbered from 1).
static int eval_due(const vt_train_options *o, const vt_data *d, int64_t n) {
  return d->has_val && (n == o->steps || (o->eval_interval > 0 && n % o->eval_interval == 0));
}

// The validation set's figures after step n, and the EMA's where there is one.
static void step_evaluate(train_run *r, int64_t n, vt_step_log *l) {
  const vt_backend *be = r->be;
  vt_model *m = &r->m;
  vt_watchdog_phase("evaluation", n, r->slow_limit);
  vt_range_push(be, "evaluation");
  l->ev = vt_evaluate(m, &r->data, r->world, r->pp, r->me, NULL, NULL);
  if (r->opt.ema) {
    // The EMA in the weights' place; the gradient buffer holds the weights from grad_first
    // on meanwhile (before it, the frozen prefix's EMA is its weights: they stay).
    const size_t nbytes = (size_t)(m->table.total - m->grad_first) * sizeof(float);
    be->copy(m->grads, m->params + m->grad_first, nbytes);
    vt_optimizer_ema_full(&r->opt, m->params, m->params);
    l->ev_ema = vt_evaluate(m, &r->data, r->world, r->pp, r->me, NULL, NULL);
    be->copy(m->params + m->grad_first, m->grads, nbytes);
    l->eval_ema = 1;
  }
  vt_range_pop(be);
}

// A checkpoint of step n (the last of the run when stop); a failed save leaves the previous
// one intact and, where the run ends here (a stop, or its last step), makes its exit code a
// failure: the steps since the previous checkpoint are not saved.
static void step_save(train_run *r, int64_t n, int stop) {
  char err[1024];
  vt_watchdog_phase("checkpoint save", n, r->slow_limit);
  vt_range_push(r->be, "checkpoint save");
  const int saved = vt_ckpt_save(&r->o, &r->m, &r->opt, r->world, &r->mesh, n, r->bad_images,
                                 n == r->end_step || stop, err, sizeof err);
  vt_range_pop(r->be);
  if (saved == VT_OK) {
    r->saved_step = n;
    return;
  }
  if (r->world_rank == 0)
    vt_log_error("checkpoint of step %lld failed, any earlier one is intact: %s", (long long)n,
                 err);
  if (!stop && n == r->end_step) r->last_save_failed = 1;
  if (stop || n == r->end_step) r->rc = VT_EXIT_FAILED;
}

// Too many non-finite steps in a row: the run stops after step n with VT_EXIT_NONFINITE.
static void stop_nonfinite_run(train_run *r, int64_t n) {
  const vt_train_options *o = &r->o;
  if (r->world_rank == 0)
    vt_log_error("steps %lld-%lld: %lld non-finite steps in a row (--max-nonfinite-steps %d); "
                 "stopping. The parameters are those after step %lld%s. Lower --lr or "
                 "--clip-grad, or look for bad data in these steps.",
                 (long long)(n - r->nonfinite_run + 1), (long long)n,
                 (long long)r->nonfinite_run,
                 o->max_nonfinite, (long long)(n - r->nonfinite_run),
                 o->save_dir[0] ? "; resume from the newest checkpoint in --save" : "");
  r->rc = VT_EXIT_NONFINITE;
}

// What to do to go on after a stop at a step whose save ran (failed: it failed): resume with
// --resume auto where the save was made; where it failed, --resume auto takes an older
// checkpoint in --save (this run's, or the one it started from there), else the checkpoint it
// started from elsewhere is where to go on from, or there is none. In buf where it names one.
static const char *resume_advice(const train_run *r, int failed, char *buf, size_t size) {
  const vt_train_options *o = &r->o;
  if (!o->save_dir[0]) return "run it again";
  if (!failed) return "resume with --resume auto";
  const size_t n = strlen(o->save_dir);
  const int in_save = !strncmp(r->resumed_from, o->save_dir, n) && r->resumed_from[n] == '/';
  if (r->saved_step > 0 || (r->start_step > 0 && in_save))
    return "--resume auto continues from the newest complete checkpoint in --save (vit3d "
           "inspect names it), running the steps after it again";
  if (r->start_step > 0) {
    snprintf(buf, size, "nothing of this run was saved: go on from where it started, with "
             "--resume auto --resume-fallback %.600s", r->resumed_from);
    return buf;
  }
  return "nothing was saved to resume from: run it again";
}

// A preemption signal (preempt) or SIGINT on some rank: the run stops after step n, saved by
// step_save where --save is given, with the exit code that says which.
static void stop_signalled(train_run *r, int64_t n, int preempt) {
  const vt_train_options *o = &r->o;
  char what[sizeof o->save_dir + 64];
  if (!o->save_dir[0]) snprintf(what, sizeof what, "no --save directory, nothing was saved");
  else if (r->rc) snprintf(what, sizeof what, "the checkpoint FAILED (see above)");
  else snprintf(what, sizeof what, "checkpoint step-%08lld saved in %.*s", (long long)n,
                (int)sizeof o->save_dir, o->save_dir);
  const int failed = r->rc != 0;
  r->rc = r->rc ? r->rc : preempt ? VT_EXIT_PREEMPTED : VT_EXIT_INTERRUPTED;
  if (r->world_rank != 0) return;
  const int sig = vt_health_preempt_signal();  // rank 0's own, if it had one
  char advice[800] = "", buf[700];
  if (o->save_dir[0])
    snprintf(advice, sizeof advice, " %s.", resume_advice(r, failed, buf, sizeof buf));
  advice[1] = (char)toupper((unsigned char)advice[1]);
  if (preempt)
    vt_log_warn("preempted (signal %s on some rank) at step %lld: %s; exiting with %d.%s",
                sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR1 or SIGTERM",
                (long long)n, what, r->rc, advice);
  else
    vt_log_warn("interrupted (SIGINT on some rank) at step %lld: %s; exiting with %d.%s",
                (long long)n, what, r->rc, advice);
}

// A bad file under --bad-image fail, a class whose every file is bad, or a file of a kind this
// build cannot decode (no_decoder; each named on the rank that read it): in a micro-batch of
// step n, whose passes ran on zero images, the step is not kept and the steps before it are
// saved; in the validation set (step n kept and saved, by the caller), the run stops after
// step n.
static int stop_bad_image(train_run *r, int64_t n, int in_step, int no_decoder) {
  const vt_train_options *o = &r->o;
  const int64_t kept = in_step ? n - 1 : n;
  if (in_step) {
    r->be->synchronize();
    // (a checkpoint of step `kept` exists where a save interval ended there and its save did
    // not fail; one written in the background is committed at the run's end, run_end)
    if (o->save_dir[0] && r->saved_step != kept && kept > r->start_step) step_save(r, kept, 1);
  }
  char what[sizeof o->save_dir + 96];
  if (!o->save_dir[0]) snprintf(what, sizeof what, "no --save directory, nothing was saved");
  else if (r->rc) snprintf(what, sizeof what, "the checkpoint FAILED (see above)");
  else if (kept == r->start_step)
    snprintf(what, sizeof what, "no step done since the start at step %lld, nothing to save",
             (long long)kept);
  else snprintf(what, sizeof what, "checkpoint step-%08lld in %.*s", (long long)kept,
                (int)sizeof o->save_dir, o->save_dir);
  const int failed = r->rc != 0, done = kept > r->start_step;
  char buf[700];
  r->rc = VT_EXIT_FAILED;
  if (r->world_rank == 0)
    vt_log_error("%s (named above, on the rank that read it): the run stops %s step %lld; "
                 "%s; exiting with %d. %s, and %s.",
                 no_decoder ? "a file of a kind this vit3d cannot decode"
                 : !in_step ? "a bad validation file under --bad-image fail"
                 : o->bad_image_fail ? "a bad training file under --bad-image fail"
                                     : "a class whose every file is bad",
                 done ? "after" : "before", (long long)(done ? kept : kept + 1), what, r->rc,
                 no_decoder ? "Build vit3d with that library (install it and configure again), "
                              "or convert the files"
                 : o->bad_image_fail ? "Mend or remove the file, or train with --bad-image skip"
                                     : "Mend the class's files or remove its folder",
                 done ? resume_advice(r, failed, buf, sizeof buf) : "run it again");
  return 1;
}

// The optimizer's step at the learning rate lr; returns the gradient norm. A non-finite loss
// or gradient norm, or a spike of either (--skip-spike-z; the same verdicts on every rank: both
// are global), leaves the parameters and the optimizer state as they were, and counts a skipped
// step.
static double step_update(train_run *r, int64_t n, double loss, float lr) {
  vt_optimizer *opt = &r->opt;
  double gnorm = NAN;
  vt_range_push(r->be, "optimizer");
  const vt_spike_stats before = opt->spike;  // (for the message)
  opt->spiked = 0;  // (a non-finite loss asks neither check)
  if (isfinite(loss) && !vt_optimizer_loss_spike(opt, loss))
    gnorm = vt_optimizer_step(opt, r->m.params, r->m.grads, lr);
  else
    vt_optimizer_skip(opt);
  vt_range_pop(r->be);
  const int finite = isfinite(loss) && (opt->spiked == VT_SPIKE_LOSS + 1 || isfinite(gnorm));
  r->skipped += !finite || opt->spiked;
  r->nonfinite_run = finite ? 0 : r->nonfinite_run + 1;
  if (!finite && r->world_rank == 0)
    vt_log_warn("step %lld: non-finite %s; the step is skipped (%lld in a row, %lld in all; "
                "the run stops at %d in a row)",
                (long long)n, isfinite(loss) ? "gradient norm" : "loss",
                (long long)r->nonfinite_run, (long long)r->skipped, r->o.max_nonfinite);
  if (opt->spiked && r->world_rank == 0) {
    const int w = opt->spiked - 1;
    const double x = w == VT_SPIKE_LOSS ? loss : gnorm;
    vt_log_warn("step %lld: %s %.6g is a spike, %.1f standard deviations above its moving mean "
                "%.6g (--skip-spike-z %g); the step is skipped (%lld skipped in all)",
                (long long)n, w == VT_SPIKE_LOSS ? "loss" : "gradient norm", x,
                vt_spike_z(&before, w, x), before.mean[w], (double)opt->cfg.spike_z,
                (long long)r->skipped);
  }
  return gnorm;
}

// Step n's record: the ranks' health report every --straggler-interval steps, the progress
// line and metrics (rank 0), the save hook's poll and the --check-log line.
static void step_report(train_run *r, int64_t n, const vt_step_log *l) {
  const vt_train_options *o = &r->o;
  char summary[1024] = "";
  r->ranks_json[0] = '\0';  // l->ranks_json: filled here on a report's steps
  if (o->straggler_interval > 0 && n % o->straggler_interval == 0) {
    vt_health_rank_report(r->world, &r->mesh, r->report_first, n,
                          1e3 * r->busy_s / (double)(n - r->report_first + 1),
                          (double)vt_backend_device_memory_used(o->device) / (1024.0 * 1024.0),
                          r->ranks_json, r->json_len, summary, sizeof summary);
    r->busy_s = 0.0, r->report_first = n + 1;
  }
  if (r->world_rank == 0) {
    vt_report_step(o, &r->metrics, &r->tb, l, vt_seconds() - r->t_start, n - r->start_step,
                   r->world_size);
    vt_save_hook_poll();
  }
  const double ev[3] = {l->ev.loss, l->ev.top1, l->ev.top5};
  const double ema[3] = {l->ev_ema.loss, l->ev_ema.top1, l->ev_ema.top5};
  if (r->world_rank == 0 && o->check_log[0])
    vt_checklog_step(&r->check, n, l->loss, l->gnorm, l->eval_now ? ev : NULL,
                     l->eval_ema ? ema : NULL);
  if (summary[0]) vt_log_info("%s", summary);
}

int vt_train_step(train_run *r, int64_t step) {
  const vt_train_options *o = &r->o;
  vt_comm *world = r->world;
  const int world_rank = r->world_rank, B = o->micro_batch;
  const vt_backend *be = r->be;
  vt_model *m = &r->m;
  vt_optimizer *opt = &r->opt;
  vt_data *data = &r->data;
  vt_stage_ctx *x = &r->x;
  const int64_t n = step + 1;  // the step's number as printed
  vt_watchdog_phase("step", n, o->timeout_s);
  const double t0 = vt_seconds(), comm0 = vt_comm_seconds();
  vt_fault_step_start(n);
  be->zero(m->grads, vt_model_grad_nbytes(m));
  // A NaN planted before the backward passes add into it, so it reaches the DP reduction
  // like a real one (which starts during the last backward); in a trained tensor (a frozen
  // prefix's gradients are not looked at).
  const int plant_nan = vt_fault_at(VT_FAULT_NAN, n), plant_spike = vt_fault_at(VT_FAULT_SPIKE, n);
  if ((plant_nan || plant_spike) && opt->base < m->table.total) {  // (else only the loss's)
    const float bad = plant_nan ? NAN : 1e4f;
    be->to_device(m->grads + (opt->base - m->grad_first), &bad, sizeof bad);
  }
  // Evaluation uses the training slots between steps: no prefetch into them before one.
  x->prefetch_next = n < r->end_step && !eval_due(o, data, n);
  // (a micro-batch loaded ahead: its bad images count in the step that uses it, its wait for
  // the decoders in the step whose time it took, this one)
  const double wait0 = data->wait_s, loss_sum = vt_stage_run(x, r->acts, r->nacts, step);
  // Summed over the world: the global loss (the last stage's TP rank 0 of every DP rank holds
  // a share); the bad-image count (the first stage's TP rank 0 of every DP rank, or each of its
  // TP ranks when they split the decoding, each counting its share); a preemption signal (any
  // rank); the ranks still writing their part of a checkpoint; the time the decoding ranks'
  // loaders kept them waiting this step, and their count; SIGINT (any rank); a bad file of
  // this step under --bad-image fail (any rank: not one loaded ahead for the next step), and
  // of those the files this build cannot decode.
  const int decodes = data->train && data->need_pixels;
  const int failed = data->failed && data->fail_step <= step;
  double sums[9] = {loss_sum, (double)x->loaded_bad, vt_health_preempt_signal() != 0,
                    vt_ckpt_writing(), data->wait_s - wait0, decodes,
                    vt_health_interrupted(), failed, failed && data->failed == 2};
  if (plant_nan) sums[0] = NAN;
  if (plant_spike) sums[0] *= 100.0;
  if (!(m->has_head && r->me.tp_rank == 0)) sums[0] = 0.0;
  if (!(m->has_embed && (r->me.tp_rank == 0 || data->pixel_count < B))) sums[1] = 0.0;
  vt_comm_all_reduce_double(world, sums, 9, VT_REDUCE_SUM);
  // A checkpoint written in the background is committed as soon as every rank's part is.
  if (vt_ckpt_pending() && sums[3] == 0) {
    vt_watchdog_phase("checkpoint commit", n, r->slow_limit);
    vt_ckpt_wait(world);
    vt_watchdog_phase("step", n, o->timeout_s);
  }
  if (sums[7] > 0) return stop_bad_image(r, n, 1, sums[8] > 0);
  // (world rank 0: the total since the run began, counting those before its checkpoint)
  r->bad_images = r->saved.bad_images + (int64_t)sums[1];
  const double loss = sums[0] / o->global_batch;
  // a preemption signal on any rank, else SIGINT (Ctrl-C) on any: save and stop
  const int preempt = sums[2] > 0, interrupt = !preempt && sums[6] > 0;
  const int stop = preempt || interrupt;
  const float lr = vt_lr_at(&o->optim, step);
  const double gnorm = step_update(r, n, loss, lr);
  be->synchronize();
  // The step's passes' device times, and under --trace-steps on a GPU each pass's times
  const int named = vt_trace_device_named();
  double *spans = named > 0 ? malloc(2 * (size_t)named * sizeof *spans) : NULL;
  VT_CHECK(named == 0 || spans != NULL, "out of host memory for the trace");
  const int nspans = be->interval_take(x->pass_ms, x->passes, spans, named);
  if (named > 0) vt_trace_device_spans(spans, nspans);
  free(spans);
  if (step == r->start_step && o->comm_stats && o->log_dir[0])
    vt_report_comm_stats(o, m, opt, r->me, world_rank, r->n_micro);
  if (step == r->start_step) vt_plan_report_memory(m, opt, o->device, r->mem_base);
  const double t1 = vt_seconds();
  r->busy_s += (t1 - t0) - (vt_comm_seconds() - comm0);
  if (step > r->start_step) r->timed_s += t1 - t0;
  if (step == r->start_step) {  // the idle report counts the steps after the first
    memset(x->pass_ms, 0, sizeof x->pass_ms);
    memset(x->passes, 0, sizeof x->passes);
  }
  // ZB-V, --pp-pass-times auto: the order built for the second step's pass times from here
  if (step == r->start_step + 1 && r->kind == VT_SCHEDULE_ZB_V && r->pass_times == 1 &&
      n < r->end_step)
    vt_stage_retime(x, world, r->acts, &r->nacts, r->cap, r->nslots, r->nwsets);
  vt_step_log l = {.step = n, .loss = loss, .gnorm = gnorm, .img_s = o->global_batch / (t1 - t0),
                   .step_ms = 1e3 * (t1 - t0), .lr = lr, .bad_images = r->bad_images,
                   .image_flops = vt_config_train_flops(&o->model, r->m.frozen_layers),
                   .data_wait_ms = sums[5] > 0 ? 1e3 * sums[4] / sums[5] : -1.0,
                   .skipped = r->skipped, .ranks_json = r->ranks_json};
  const int stop_nonfinite = r->nonfinite_run >= o->max_nonfinite;
  const int save_now = o->save_dir[0] && !stop_nonfinite &&
                       (n == r->end_step || stop ||
                        (o->save_interval > 0 && n % o->save_interval == 0));
  // On a stop the checkpoint (written in place) comes before an evaluation that is due: the
  // preemption's grace may not last both. Otherwise the evaluation first, as the metrics line
  // is written: a background save reads the weights while an evaluation may swap the EMA in.
  if (save_now && stop) step_save(r, n, stop);
  l.eval_now = eval_due(o, data, n);
  if (l.eval_now) step_evaluate(r, n, &l);
  const int bad_val = l.eval_now && o->bad_image_fail && !stop && !stop_nonfinite &&
                      (l.ev.bad > 0 || l.ev_ema.bad > 0);
  if (!stop && (save_now || (bad_val && o->save_dir[0]))) step_save(r, n, bad_val);
  step_report(r, n, &l);
  if (bad_val) return stop_bad_image(r, n, 0, 0);
  if (stop_nonfinite) {
    stop_nonfinite_run(r, n);
    return 1;
  }
  if (stop && n < o->steps) {  // (at the run's last step it ends as it would have)
    stop_signalled(r, n, preempt);
    return 1;
  }
  return 0;
}
