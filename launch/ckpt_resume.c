// ckpt_resume.c: resuming from a checkpoint on the mesh (ckpt.h's vt_ckpt_resume and
// vt_ckpt_check_optim): finds the checkpoint, checks its manifest against the run's options
// (every difference named by its flag), and has every rank read and verify its part of each
// file, falling back to an older checkpoint where one is damaged. Saving is ckpt.c.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_internal.h"
#include "comm.h"
#include "export.h"
#include "fault.h"
#include "inspect.h"
#include "partfile.h"
#include "safetensors.h"
#include "savehook.h"
#include "watchdog.h"

static char g_resumed[1400];  // the last resume's line (vt_ckpt_resumed_line)

typedef struct {
  char was[1200], now[1200];  // (room for two freeze patterns of 255 bytes each)
  int n;
} diff_list;

static void differs(diff_list *d, int same, const char *flag, const char *was, const char *now) {
  if (same) return;
  const size_t a = strlen(d->was), b = strlen(d->now);
  snprintf(d->was + a, sizeof d->was - a, "%s%s %s", d->n ? " " : "", flag, was);
  snprintf(d->now + b, sizeof d->now - b, "%s%s %s", d->n ? " " : "", flag, now);
  d->n++;
}

static void differs_real(diff_list *d, double was, double now, const char *flag) {
  char a[32], b[32];
  differs(d, was == now, flag, vt_ckpt_double_text(was, a, sizeof a),
          vt_ckpt_double_text(now, b, sizeof b));
}

// A float setting (the manifest holds it widened to double, exactly).
static void differs_float(diff_list *d, double was, double now, const char *flag) {
  char a[32], b[32];
  snprintf(a, sizeof a, "%.7g", (float)was);
  snprintf(b, sizeof b, "%.7g", (float)now);
  differs(d, (float)was == (float)now, flag, a, b);
}

static void differs_int(diff_list *d, int64_t was, int64_t now, const char *flag) {
  char a[32], b[32];
  snprintf(a, sizeof a, "%" PRId64, was);
  snprintf(b, sizeof b, "%" PRId64, now);
  differs(d, was == now, flag, a, b);
}

vt_status vt_ckpt_check_optim(const vt_ckpt_manifest *saved, const vt_optim_config *now,
                              const vt_vit_config *model, const char *dir, char *err,
                              size_t errlen) {
  if (!saved->has_optim) return VT_OK;
  vt_ckpt_manifest cur;
  vt_ckpt_manifest_optim(&cur, now, model);
  diff_list d = {"", "", 0};
  differs_float(&d, saved->lr, cur.lr, "--lr");
  differs_float(&d, saved->min_lr, cur.min_lr, "--min-lr");
  differs_float(&d, saved->warmup_lr, cur.warmup_lr, "--warmup-lr");
  differs_int(&d, saved->warmup_steps, cur.warmup_steps, "--warmup-steps");
  differs_int(&d, saved->total_steps, cur.total_steps, "--steps");
  differs(&d, saved->sched == cur.sched, "--sched", vt_sched_name(saved->sched),
          vt_sched_name(cur.sched));
  differs(&d, saved->sched_epochs == cur.sched_epochs, "--sched-on",
          saved->sched_epochs ? "epochs" : "steps", cur.sched_epochs ? "epochs" : "steps");
  if (saved->sched_epochs && cur.sched_epochs) {
    differs_real(&d, saved->warmup_epochs, cur.warmup_epochs, "--warmup-epochs");
    differs_real(&d, saved->cycle_epochs, cur.cycle_epochs, "--epochs");
    differs_int(&d, saved->epoch_images, cur.epoch_images, "training images");
  }
  differs_float(&d, saved->weight_decay, cur.weight_decay, "--weight-decay");
  differs_float(&d, saved->opt_eps, cur.opt_eps, "--opt-eps");
  differs_float(&d, saved->clip_grad, cur.clip_grad, "--clip-grad");
  differs_float(&d, saved->layer_decay, cur.layer_decay, "--layer-decay");
  if (vt_opt_state_buffers(now->kind) == 1)  // SGD, LARS
    differs_float(&d, saved->momentum, now->momentum, "--momentum");
  // The frozen set by its names' hash (other patterns that freeze the same tensors are the same
  // run), said with the patterns where the manifest records them.
  vt_optim_config pat = {0};
  snprintf(pat.freeze, sizeof pat.freeze, "%s", saved->freeze);
  snprintf(pat.trainable, sizeof pat.trainable, "%s", saved->trainable);
  char was[600], is[600], flags[560];
  snprintf(was, sizeof was, "freezing %d tensors (names %08" PRIx64 ")%s%s", saved->frozen,
           saved->frozen_hash, saved->freeze[0] || saved->trainable[0] ? ": " : "",
           vt_freeze_flags(&pat, flags, sizeof flags));
  snprintf(is, sizeof is, "freezing %d tensors (names %08" PRIx64 ")%s%s", cur.frozen,
           cur.frozen_hash, now->freeze[0] || now->trainable[0] ? ": " : "",
           vt_freeze_flags(now, flags, sizeof flags));
  differs(&d, saved->frozen == cur.frozen && saved->frozen_hash == cur.frozen_hash,
          "--freeze/--trainable", was, is);
  // The weights' EMA goes on under the same decay, or the EMA a run evaluates and exports
  // (DeiT's result) silently becomes another average: refused as the optimizer's settings are.
  // Where either run has no EMA there is nothing to continue (vt_ckpt_resume: a warning, or an
  // EMA started from the weights); an older manifest with ema.safetensors and no ema_decay
  // does not say its decay.
  if (saved->ema_decay > 0 && cur.ema_decay > 0) {
    differs_float(&d, saved->ema_decay, cur.ema_decay, "--model-ema");
    differs_int(&d, saved->ema_warmup, cur.ema_warmup, "--model-ema-warmup");
  }
  if (d.n == 0) return VT_OK;
  snprintf(err, errlen, "%s was saved by a run with %s, and this one has %s", dir, d.was, d.now);
  return VT_ERR_INPUT;
}

static vt_status check_manifest(const vt_train_options *o, const vt_ckpt_manifest *man,
                                const char *dir, char *err, size_t errlen) {
  const vt_vit_config *c = &o->model;
  if (man->img_size != c->img_size || man->patch_size != c->patch_size ||
      man->width != c->width || man->depth != c->depth || man->heads != c->heads ||
      man->num_classes != c->num_classes || vt_ckpt_mlp_hidden(man) != vt_cfg_mlp_hidden(c)) {
    snprintf(err, errlen,
             "%s holds a model of img %d patch %d width %d depth %d heads %d MLP %d "
             "classes %d; pass the same sizes to %s it (--img-size %d --patch-size %d --width %d "
             "--depth %d --heads %d --mlp-dim %d --num-classes %d; vit3d inspect %s prints every "
             "flag)", dir, man->img_size, man->patch_size, man->width, man->depth, man->heads,
             vt_ckpt_mlp_hidden(man), man->num_classes, o->eval_only ? "evaluate" : "resume",
             man->img_size, man->patch_size, man->width, man->depth, man->heads,
             vt_ckpt_mlp_hidden(man), man->num_classes, dir);
    return VT_ERR_INPUT;
  }
  if (man->global_pool != c->global_pool || man->class_token != !c->no_class_token) {
    static const char *const heads[] = {"class-token", "mean-pooled (fc_norm)",
                                        "normalised-tokens mean (gap)",
                                        "attention-pooling (map)"};
    snprintf(err, errlen, "%s holds a model with the %s head and %s class token; resume it with "
             "--global-pool %s --class-token %d",
             dir, heads[man->global_pool], man->class_token ? "a" : "no",
             vt_config_pool_name(man->global_pool), man->class_token);
    return VT_ERR_INPUT;
  }
  if (man->layer_scale != (c->layer_scale > 0) || man->no_embed_class != c->no_embed_class ||
      man->reg_tokens != c->reg_tokens) {
    snprintf(err, errlen,
             "%s holds a model %s LayerScale, with %d register tokens and positions on %s; "
             "resume it with %s--reg-tokens %d --no-embed-class %d",
             dir, man->layer_scale ? "with" : "without", man->reg_tokens,
             man->no_embed_class ? "the patch tokens only" : "every token",
             man->layer_scale ? "--layer-scale G (any G > 0: the gammas are loaded) "
                              : "--layer-scale 0 ",
             man->reg_tokens, man->no_embed_class);
    return VT_ERR_INPUT;
  }
  if (man->qk_norm != c->qk_norm || man->qkv_bias != !c->no_qkv_bias ||
      man->parallel != c->parallel || man->gelu_tanh != c->gelu_tanh ||
      man->quick_gelu != c->quick_gelu) {
    snprintf(err, errlen, "%s holds a model %s QK-norm, %s qkv bias, %s blocks and the %s GELU; "
             "resume it with --qk-norm %d --qkv-bias %d --parallel-blocks %d --act %s", dir,
             man->qk_norm ? "with" : "without", man->qkv_bias ? "with a" : "without a",
             man->parallel ? "parallel" : "sequential",
             man->quick_gelu ? "quick" : man->gelu_tanh ? "tanh" : "erf", man->qk_norm,
             man->qkv_bias, man->parallel, vt_ckpt_act_name(man));
    return VT_ERR_INPUT;
  }
  if (man->pre_logits != c->pre_logits) {
    snprintf(err, errlen, "%s holds a model %s; resume it with --pre-logits %d", dir,
             man->pre_logits ? "with a pre-logits layer" : "without a pre-logits layer",
             man->pre_logits);
    return VT_ERR_INPUT;
  }
  if (man->pre_norm != c->pre_norm || man->norm_eps != vt_cfg_norm_eps(c)) {
    snprintf(err, errlen, "%s holds a model %s norm_pre and LayerNorm eps %g; resume it with "
             "--pre-norm %d --norm-eps %g", dir, man->pre_norm ? "with" : "without",
             (double)man->norm_eps, man->pre_norm, (double)man->norm_eps);
    return VT_ERR_INPUT;
  }
  if (man->pos_sincos != c->pos_sincos) {
    snprintf(err, errlen, "%s holds a model with %s positions; resume it with --pos-embed %s", dir,
             man->pos_sincos ? "fixed 2D sin-cos" : "learned",
             man->pos_sincos ? "sincos2d" : "learn");
    return VT_ERR_INPUT;
  }
  const vt_optim_config *oc = &o->optim;
  const int sgd_now = oc->kind == VT_OPT_SGD ? 1 + oc->nesterov : 0;
  const int lars_now = oc->kind == VT_OPT_LARS ? 1 + oc->nesterov + 2 * oc->trust_clip : 0;
  if (!o->eval_only && (man->lamb != (oc->kind == VT_OPT_LAMB) || man->sgd != sgd_now ||
                        man->lars != lars_now)) {
    snprintf(err, errlen, "%s was trained with --opt %s; resume it with --opt %s (another "
             "optimizer would go on from its state as a different run)", dir,
             vt_ckpt_opt_name(man), vt_ckpt_opt_name(man));
    return VT_ERR_INPUT;
  }
  if (!o->eval_only && (man->global_batch != o->global_batch ||
                        man->stream_position != man->step * o->global_batch)) {
    snprintf(err, errlen,
             "%s was saved with --global-batch-size %" PRId64 "; resume with the same global "
             "batch so the data stream continues where it stopped",
             dir, man->global_batch);
    return VT_ERR_INPUT;
  }
  return VT_OK;
}

// Reads this rank's part of DIR/NAME.safetensors: the tensors prefixes[k]<name> of its table
// from layer first_layer on into bufs[k]. With check, the CRC-32 share of the bytes read is
// added to it (and with head, of the bytes before the data too: one rank counts those).
static vt_status read_part(const char *dir, const char *name, const vt_param_table *t,
                           const char *const *prefixes, float **bufs, int n, int first_layer,
                           double nbytes[2], vt_read_check *check, int head, char *err,
                           size_t errlen) {
  char path[1300];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  vt_st_file f;
  vt_status st = vt_safetensors_open(path, &f, err, errlen);
  for (int k = 0; st == VT_OK && k < n; k++)
    st = vt_params_read_local(&f, path, t, prefixes[k], first_layer, bufs[k], check, err,
                              errlen);
  if (st == VT_OK && check && head) {
    const int64_t off = vt_st_data_offset(&f), size = off + f.data_nbytes;
    uint8_t *h = malloc((size_t)off);
    FILE *fp = h ? fopen(path, "rb") : NULL;
    if (fp && fread(h, 1, (size_t)off, fp) == (size_t)off) {
      check->share ^= vt_crc32_piece(0, h, (size_t)off, size);
      check->nbytes += off;
    }
    if (fp) fclose(fp);
    free(h);
  }
  nbytes[0] += (double)vt_st_bytes_read(&f), nbytes[1] += (double)f.data_nbytes;
  vt_safetensors_close(&f);
  return st;
}

// The checkpoint's files in the order of vt_read_check arrays.
static const char *const k_files[3] = {"model", "optim", "ema"};

// Whether DIR's optim.safetensors holds SGD's momentum the twentieth session's way: as
// "exp_avg." beside an all-zero "exp_avg_sq." (now "momentum_buffer." alone).
static int sgd_adam_layout(const char *dir, const vt_param_table *t) {
  char path[1300], name[128], why[256];
  snprintf(path, sizeof path, "%s/optim.safetensors", dir);
  snprintf(name, sizeof name, "exp_avg_sq.%s", t->p[0].name);
  vt_st_file f;
  if (vt_safetensors_open(path, &f, why, sizeof why) != VT_OK) return 0;  // said by the read
  const int adam = vt_st_find(&f, name) != NULL;
  vt_safetensors_close(&f);
  return adam;
}

// The one file of a checkpoint an evaluation reads (the weights, or with --use-ema the EMA),
// whose other files may be damaged; NULL for a training run, which needs them all.
static const char *eval_reads(const vt_train_options *o) {
  return o->eval_only ? vt_ckpt_weights_file(o->use_ema) : NULL;
}

// Collective over world: the CRC-32 of each file the ranks read together, from their shares,
// against the manifest (rank 0's); a file they did not read whole (the EMA without
// --model-ema) rank 0 reads itself; of the one file named only where that is not NULL.
// VT_ERR_INPUT with "DIR is damaged: ..." in err on rank 0 when one differs; the verdict is
// every rank's.
static vt_status check_files(vt_comm *world, const char *dir, const vt_ckpt_manifest *man,
                             const vt_read_check *checks, const char *only, char *err,
                             size_t errlen) {
  uint32_t share[3];
  double bytes[3];
  for (int i = 0; i < 3; i++) share[i] = checks[i].share, bytes[i] = (double)checks[i].nbytes;
  vt_comm_all_xor(world, share, 3);
  vt_comm_all_reduce_double(world, bytes, 3, VT_REDUCE_SUM);
  vt_status st = VT_OK;
  for (int j = 0; vt_comm_rank(world) == 0 && st == VT_OK && j < man->nfiles; j++) {
    if (only && strcmp(man->file[j], only) != 0) continue;
    char name[64];
    int i = 0;
    for (; i < 3; i++) {
      snprintf(name, sizeof name, "%s.safetensors", k_files[i]);
      if (strcmp(man->file[j], name) == 0) break;
    }
    uint32_t crc = 0;
    if (i < 3 && bytes[i] == (double)man->file_nbytes[j]) {
      crc = vt_crc32_of_shares(&share[i], 1, man->file_nbytes[j]);
    } else {  // not read whole by the ranks: rank 0 reads it
      char path[1300], why[400];
      int64_t nb = 0;
      snprintf(path, sizeof path, "%s/%s", dir, man->file[j]);
      if (vt_file_crc32(path, &nb, &crc, why, sizeof why) != VT_OK) {
        snprintf(err, errlen, "%s is damaged: %s", dir, why);
        st = VT_ERR_INPUT;
        break;
      }
    }
    if (crc != man->file_crc[j]) {
      snprintf(err, errlen, "%s is damaged: %s has CRC-32 %08x, the manifest says %08x", dir,
               man->file[j], crc, man->file_crc[j]);
      st = VT_ERR_INPUT;
    }
  }
  double bad = st != VT_OK;
  vt_comm_all_reduce_double(world, &bad, 1, VT_REDUCE_MAX);
  return bad ? VT_ERR_INPUT : VT_OK;
}

// Rank 0's proposal: the step of the next checkpoint whose manifest and file sizes are sound
// and match the run (its folder in dir, its manifest in man), -1 for none (a fresh start:
// --resume auto with no step-N folder at all), -2 for a refusal (err says why). In a folder
// (in_folder) the candidates cand[*next..ncand) are tried newest first, each damaged one
// warned about and counted in *skipped; otherwise --resume names the checkpoint itself.
static double propose(const vt_train_options *o, const char *folder, int in_folder,
                      const int64_t *cand, int ncand, int *next, int *skipped, char *dir,
                      size_t dirlen, vt_ckpt_manifest *man, char *err, size_t errlen) {
  const int auto_mode = strcmp(o->resume, "auto") == 0;
  double found = -1;
  if (in_folder) {
    char why[600];
    while (found < 0 && *next < ncand) {
      vt_ckpt_step_dir(folder, cand[(*next)++], dir, dirlen);
      if (vt_ckpt_check(dir, man, 0, eval_reads(o), why, sizeof why) == VT_OK)
        found = (double)man->step;
      else vt_log_warn("%s; trying older checkpoints", why), (*skipped)++;
    }
    if (found < 0 && auto_mode && ncand == 0 && o->resume_fallback[0])
      vt_log_info("--resume auto: no checkpoint in %s; starting from --resume-fallback %s",
                  o->save_dir, o->resume_fallback);
    else if (found < 0 && auto_mode && ncand == 0)
      vt_log_info("--resume auto: no checkpoint in %s; starting from step 0", o->save_dir);
    if (found < 0 && auto_mode && ncand > 0) {  // (a fresh start's saves would retire them)
      snprintf(err, errlen, "none of the %d checkpoints in %s can be resumed (each said above): "
               "mend them, or move them away to start from %s, or name one with --resume",
               ncand, o->save_dir, o->resume_fallback[0] ? "--resume-fallback" : "step 0");
      found = -2;
    }
    if (found < 0 && !auto_mode) {
      snprintf(err, errlen, "%s holds no complete checkpoint (its step-N folders are all "
               "damaged or unfinished)", o->resume);
      found = -2;
    }
  } else {
    snprintf(dir, dirlen, "%s", o->resume);
    found = vt_ckpt_check(dir, man, 0, eval_reads(o), err, errlen) == VT_OK ? (double)man->step
                                                                             : -2;
  }
  if (found >= 0 && check_manifest(o, man, dir, err, errlen) != VT_OK) found = -2;
  return found;
}

// This rank's parts of the checkpoint in dir into local (weights, first and second moments,
// EMA where load_ema), adding the bytes read and in the files to nbytes and the CRC-32 shares
// to count[] (model, optim, ema; NULL where this rank's share is not counted).
static vt_status read_parts(const vt_train_options *o, const vt_param_table *table,
                            vt_opt_kind kind, const char *dir, const vt_ckpt_manifest *man,
                            int load_ema, float *local[4], double nbytes[2],
                            vt_read_check *count[3], int rank0, char *err, size_t errlen) {
  // The weights: vit3d eval --use-ema 1 evaluates the EMA in their place.
  static const char *const plain[1] = {""};
  const int wfile = o->use_ema ? 2 : 0;
  vt_status st = read_part(dir, k_files[wfile], table, plain, &local[0], 1, 0, nbytes,
                           count[wfile], rank0, err, errlen);
  if (st == VT_OK && load_ema)
    st = read_part(dir, "ema", table, plain, &local[3], 1, 0, nbytes, count[2], rank0, err,
                   errlen);
  // The moments: zeros where the file has none (an evaluation reads none; the layers before
  // optim_from_layer were frozen when it was saved).
  memset(local[1], 0, (size_t)table->total * sizeof(float));
  memset(local[2], 0, (size_t)table->total * sizeof(float));
  if (st == VT_OK && !o->eval_only) {
    // (SGD's older two-tensor layout predates optim_from_layer)
    const int one = (kind == VT_OPT_SGD &&
                     (man->optim_from_layer > 0 || !sgd_adam_layout(dir, table))) ||
                    kind == VT_OPT_LARS;
    st = read_part(dir, "optim", table, one ? vt_ckpt_sgd_state : vt_ckpt_adam_state, &local[1],
                   one ? 1 : 2, man->optim_from_layer, nbytes, count[1], rank0, err, errlen);
  }
  return st;
}

// --mean or --std (the normalisation), as "R,G,B".
static void differs_triple(diff_list *d, const float was[3], const float now[3],
                           const char *flag) {
  char a[3][32], b[3][32], ta[100], tb[100];
  snprintf(ta, sizeof ta, "%s,%s,%s", vt_float_text(was[0], a[0], 32),
           vt_float_text(was[1], a[1], 32), vt_float_text(was[2], a[2], 32));
  snprintf(tb, sizeof tb, "%s,%s,%s", vt_float_text(now[0], b[0], 32),
           vt_float_text(now[1], b[1], 32), vt_float_text(now[2], b[2], 32));
  differs(d, was[0] == now[0] && was[1] == now[1] && was[2] == now[2], flag, ta, tb);  // (-0 is 0)
}

// The normalisation: --mean and --std.
static void differs_norm(diff_list *d, const vt_ckpt_manifest *man, const vt_ckpt_manifest *cur) {
  differs_triple(d, man->mean, cur->mean, "--mean");
  differs_triple(d, man->std, cur->std, "--std");
}

// The evaluation's transform: the centre crop and its resize.
static void differs_eval(diff_list *d, const vt_ckpt_manifest *man, const vt_ckpt_manifest *cur) {
  differs_real(d, man->eval_crop_pct, cur->eval_crop_pct, "--eval-crop-pct");
  differs(d, man->eval_squash == cur->eval_squash, "--eval-crop-mode",
          man->eval_squash ? "squash" : "center", cur->eval_squash ? "squash" : "center");
  differs(d, man->eval_interp == cur->eval_interp, "--eval-interpolation",
          vt_ckpt_interp_name(man->eval_interp), vt_ckpt_interp_name(cur->eval_interp));
}

// vit3d eval (rank 0): a warning where its normalisation differs from the training's, or its
// evaluation transform from that of the run that saved man where that run evaluated, whose
// evaluations its figures then do not repeat. where: what says the run's flags.
static void warn_eval(const vt_train_options *o, const char *dir, const vt_ckpt_manifest *man,
                      const char *where) {
  vt_ckpt_manifest cur;
  vt_ckpt_manifest_settings(&cur, o);
  if (!man->norm_recorded) {  // (an older vit3d's manifest)
    char a[3][32], b[3][32], c[32];
    vt_log_warn("%s does not record its run's normalisation or evaluation transform (an older "
                "vit3d wrote it); this evaluation has --mean %s,%s,%s --std %s,%s,%s "
                "--eval-crop-pct %s --eval-crop-mode %s --eval-interpolation %s: give the "
                "training run's where they differ", dir, vt_float_text(cur.mean[0], a[0], 32),
                vt_float_text(cur.mean[1], a[1], 32),
                vt_float_text(cur.mean[2], a[2], 32), vt_float_text(cur.std[0], b[0], 32),
                vt_float_text(cur.std[1], b[1], 32), vt_float_text(cur.std[2], b[2], 32),
                vt_ckpt_double_text(cur.eval_crop_pct, c, sizeof c),
                cur.eval_squash ? "squash" : "center", vt_ckpt_interp_name(cur.eval_interp));
    return;
  }
  diff_list d = {"", "", 0};
  differs_norm(&d, man, &cur);
  if (man->evaluated) differs_eval(&d, man, &cur);  // (-1, not known, counts as yes)
  if (d.n)
    vt_log_warn("%s was trained with %s and this evaluation has %s: %s (%s)", dir, d.was, d.now,
                man->evaluated ? "its figures are not those of that run's evaluations"
                               : "the images are not normalised as in its training", where);
}

// The flags of the file's model (its metadata's vit3d_model_flags, "--flag value" words) that
// differ from the run's, but for --img-size and --num-classes, as "--a X --b Y" in was and now.
static void differs_model(diff_list *d, const char *file_flags, const vt_vit_config *c) {
  vt_ckpt_manifest cur;
  memset(&cur, 0, sizeof cur);
  vt_ckpt_manifest_model(&cur, c);
  char mine[1024], text[1024], *save = NULL;
  vt_inspect_model_flags(&cur, mine, sizeof mine);
  snprintf(text, sizeof text, "%s", file_flags);
  for (char *w = strtok_r(text, " ", &save), *val; w; w = strtok_r(NULL, " ", &save)) {
    if (!(val = strtok_r(NULL, " ", &save))) break;
    if (!strcmp(w, "--img-size") || !strcmp(w, "--num-classes")) continue;
    char key[64], now[64], shown[64];
    snprintf(key, sizeof key, " %s ", w);  // (mine starts with --img-size: each other flag
    const char *at = strstr(mine, key);   // follows a space; one this vit3d does not write,
    if (!at || sscanf(at + strlen(key), "%63s", now) != 1) continue;  // not compared)
    differs(d, !strcmp(val, now), w, vt_printable(val, shown, sizeof shown), now);
  }
}

void vt_ckpt_warn_init_from(const vt_train_options *o, const char *path) {
  vt_st_file f;
  char err[300];
  if (vt_safetensors_open(path, &f, err, sizeof err) != VT_OK) return;  // (read and refused)
  const char *flags = vt_st_metadata(&f, "vit3d_model_flags");
  diff_list dm = {"", "", 0};
  if (flags) differs_model(&dm, flags, &o->model);
  if (dm.n)
    vt_log_warn("--init-from %s holds a model of %s and this run's has %s: those are not all in "
                "the tensors' shapes, so its weights load into another model (leave the model "
                "flags out to take the file's)", path, dm.was, dm.now);
  vt_ckpt_manifest man;
  memset(&man, 0, sizeof man);
  const int got = vt_ckpt_file_meta_parse(
      &man, vt_st_metadata(&f, "mean"), vt_st_metadata(&f, "std"), vt_st_metadata(&f, "crop_pct"),
      vt_st_metadata(&f, "crop_mode"), vt_st_metadata(&f, "interpolation"), err, sizeof err);
  vt_safetensors_close(&f);
  if (got < 0) vt_log_warn("--init-from %s: %s; its normalisation is not compared", path, err);
  if (got <= 0) return;  // (no normalisation recorded: a file of timm's, or of another tool)
  if (got == 2 && o->eval_only)
    vt_log_warn("--init-from %s: %s; its evaluation transform is not compared", path, err);
  if (o->eval_only) {
    warn_eval(o, path, &man, "the file's metadata records the run's settings");
    return;
  }
  vt_ckpt_manifest cur;
  vt_ckpt_manifest_settings(&cur, o);
  diff_list d = {"", "", 0};
  differs_norm(&d, &man, &cur);
  if (d.n)
    vt_log_warn("%s was trained with %s and this run has %s: it starts from weights that saw "
                "other inputs (give the file's normalisation to keep them)", path, d.was, d.now);
}

// Rank 0: a warning naming every regularisation or loss setting (vt_ckpt_manifest_settings)
// in which this run differs from the one that saved man. Allowed, since some change them on
// purpose (less drop path for a fine-tune's last epochs), but no longer the same run.
static void warn_settings(const vt_train_options *o, const char *dir, const vt_ckpt_manifest *man) {
  vt_ckpt_manifest cur;
  vt_ckpt_manifest_settings(&cur, o);
  diff_list d = {"", "", 0};
  differs_float(&d, man->drop_path, cur.drop_path, "--drop-path");
  differs_int(&d, man->drop_path_uniform, cur.drop_path_uniform, "--drop-path-uniform");
  differs_float(&d, man->proj_drop, cur.proj_drop, "--proj-drop");
  differs_float(&d, man->attn_drop, cur.attn_drop, "--attn-drop");
  differs_float(&d, man->pos_drop, cur.pos_drop, "--pos-drop");
  differs_float(&d, man->head_drop, cur.head_drop, "--drop");
  differs_float(&d, man->mixup, cur.mixup, "--mixup");
  differs_float(&d, man->cutmix, cur.cutmix, "--cutmix");
  differs_float(&d, man->mix_prob, cur.mix_prob, "--mix-prob");
  differs_float(&d, man->mix_switch_prob, cur.mix_switch_prob, "--mix-switch-prob");
  differs_float(&d, man->reprob, cur.reprob, "--reprob");
  differs(&d, man->remode == cur.remode, "--remode", vt_ckpt_remode_name(man->remode),
          vt_ckpt_remode_name(cur.remode));
  differs(&d, strcmp(man->aa, cur.aa) == 0, "--aa", man->aa[0] ? man->aa : "''",
          cur.aa[0] ? cur.aa : "''");
  differs_float(&d, man->label_smoothing, cur.label_smoothing, "--label-smoothing");
  differs_int(&d, man->bce_loss, cur.bce_loss, "--bce-loss");
  differs_float(&d, man->bce_thresh, cur.bce_thresh, "--bce-target-thresh");
  differs_float(&d, man->hflip, cur.hflip, "--hflip");
  differs_float(&d, man->crop_scale_min, cur.crop_scale_min, "--crop-scale-min");
  differs(&d, man->train_interp == cur.train_interp, "--train-interpolation",
          vt_ckpt_interp_name(man->train_interp), vt_ckpt_interp_name(cur.train_interp));
  differs_int(&d, man->simple_crop, cur.simple_crop, "--simple-crop");
  differs_int(&d, man->three_augment, cur.three_augment, "--three-augment");
  differs_float(&d, man->color_jitter, cur.color_jitter, "--color-jitter");
  differs_float(&d, man->color_jitter_alone, cur.color_jitter_alone, "--color-jitter");
  differs_int(&d, man->jpeg_reduce, cur.jpeg_reduce, "--jpeg-reduce");
  differs(&d, man->aa_interp == cur.aa_interp, "--aa-interpolation",
          man->aa_interp ? "bicubic" : "bilinear", cur.aa_interp ? "bicubic" : "bilinear");
  differs(&d, man->precision < 0 || man->precision == cur.precision, "--precision",
          man->precision ? "bf16" : "fp32", cur.precision ? "bf16" : "fp32");
  if (man->norm_recorded) differs_norm(&d, man, &cur);  // (not known in an older manifest)
  if (d.n)
    vt_log_warn("%s was saved by a run with %s and this one has %s: from here the training "
                "differs from that run's%s", dir, d.was, d.now,
                man->recorded ? "" : " (its manifest records none of these settings: written "
                "by a vit3d before they were recorded, it reads as their defaults)");
  diff_list e = {"", "", 0};
  // (where both evaluate; evaluated -1, not known, counts as yes)
  if (man->norm_recorded && man->evaluated && o->val_data[0]) differs_eval(&e, man, &cur);
  if (e.n)
    vt_log_warn("%s was saved by a run with %s and this one has %s: from here its evaluations "
                "differ from that run's", dir, e.was, e.now);
}

// The checkpoint read (manifest man) made the run's state: the weights to the device, the
// moments and step count to the optimizer, the EMA (from the file, else from the weights); rank 0
// warns where the data stream or the training will differ from the saving run's.
// Whether tensors the checkpoint's run froze train in this one (--resume-override 1 with other
// --freeze/--trainable), collective: rank 0's manifest names the patterns (older ones do not:
// then said, and 0). Under AdamW or LAMB such a tensor would start with zero moments under the
// checkpoint's step count t, whose bias correction no longer scales them up: its first steps
// would be (1 - b1^t) / sqrt(1 - b2^t), about 3 to 6 times the rate, for hundreds of steps.
static int unfrozen_now(const vt_train_options *o, const vt_model *m, const vt_optimizer *opt,
                        const vt_ckpt_manifest *man, vt_comm *world, int rank0, const char *dir) {
  vt_optim_config was = o->optim;
  double known = -1e300;  // (MAX: rank 0's)
  if (rank0) {
    snprintf(was.freeze, sizeof was.freeze, "%s", man->freeze);
    snprintf(was.trainable, sizeof was.trainable, "%s", man->trainable);
    known = man->frozen == 0 || man->freeze[0] || man->trainable[0];
  }
  vt_comm_broadcast_bytes(world, was.freeze, sizeof was.freeze, 0);
  vt_comm_broadcast_bytes(world, was.trainable, sizeof was.trainable, 0);
  vt_comm_all_reduce_double(world, &known, 1, VT_REDUCE_MAX);
  if (!known) {
    vt_ckpt_manifest now;
    if (rank0) vt_ckpt_manifest_optim(&now, &o->optim, &o->model);
    const int changed = rank0 && (man->frozen != now.frozen || man->frozen_hash != now.frozen_hash);
    if (changed)
      vt_log_warn("%s does not record its --freeze/--trainable patterns (an older vit3d): if a "
                  "tensor it froze trains now, its first Adam steps are too large; to be sure, "
                  "start from its weights with --init-from %s/model.safetensors", dir, dir);
    return 0;
  }
  unsigned char *old = calloc((size_t)m->table.count + 1, 1);
  VT_CHECK(old != NULL, "out of host memory");
  char err[320], first[64] = "";
  int nold = 0;
  double newly = 0;
  if (vt_freeze_mark(&was, &m->table, old, &nold, err, sizeof err) == VT_OK)
    for (int i = 0; i < m->table.count; i++)
      if (old[i] && !opt->frozen[i] && m->table.p[i].local_count > 0 && newly++ == 0)
        snprintf(first, sizeof first, "%s", m->table.p[i].name);
  free(old);
  const double here = newly;
  vt_comm_all_reduce_double(world, &newly, 1, VT_REDUCE_MAX);
  if (rank0 && newly > 0)
    vt_log_warn("tensors that %s froze train from here%s%s%s: with its Adam step count of "
                "%" PRId64 " their moments, starting at zero, would make their first steps 3 "
                "to 6 times --lr, so every moment starts afresh, Adam's bias corrections "
                "counting from here, as a fine-tune from these weights does", dir,
                here > 0 ? " (such as " : "", first, here > 0 ? ")" : "", man->adam_t);
  return newly > 0;
}

static void install(const vt_train_options *o, vt_model *m, vt_optimizer *opt, const char *dir,
                    const vt_ckpt_manifest *man, float *local[4], int load_ema, int has_ema,
                    int rank0) {
  // Allowed (reshuffling after a loss spike is a known remedy), but no longer the same run.
  if (rank0 && !o->eval_only && man->seed != o->seed)
    vt_log_warn("%s was saved by a run with --seed %" PRIu64 " and this one has --seed %" PRIu64
                ": from here the data order and the augmentations differ from that run's",
                dir, man->seed, o->seed);
  if (rank0 && !o->eval_only && man->aug_repeats != o->aug_repeats)
    vt_log_warn("%s was saved by a run with --aug-repeats %d and this one has %d: the data "
                "stream holds other images from here", dir, man->aug_repeats, o->aug_repeats);
  if (rank0 && !o->eval_only && man->drop_last != o->drop_last)
    vt_log_warn("%s was saved by a run with --drop-last %d and this one has %d: the epochs, "
                "and so the data stream, differ from here", dir, man->drop_last, o->drop_last);
  if (rank0 && !o->eval_only) warn_settings(o, dir, man);
  if (rank0 && o->eval_only) {
    char where[1200];
    snprintf(where, sizeof where, "vit3d inspect %s prints the run's flags", dir);
    warn_eval(o, dir, man, where);
  }
  if (rank0 && man->nunknown)
    vt_log_warn("%s's manifest has %d key%s this vit3d does not know (%s%s): a newer vit3d "
                "wrote it, and what they record is neither applied nor checked here, so the run "
                "may differ from the one that saved it; resume it with that vit3d to be sure",
                dir, man->nunknown, man->nunknown > 1 ? "s" : "", man->unknown,
                vt_ckpt_unknown_more(man));
  m->be->to_device(m->params, local[0], (size_t)m->table.total * sizeof(float));
  vt_optimizer_set_state(opt, local[1], local[2], man->adam_t, man->adam_t0);
  if (load_ema) {
    vt_optimizer_set_ema(opt, local[3]);
  } else if (opt->ema) {
    vt_optimizer_ema_reset(opt, m->params);
    vt_log_info("%s has no EMA weights: the EMA starts from its weights", dir);
  } else if (has_ema && !o->eval_only && rank0) {
    char decay[48] = "";
    if (man->ema_decay > 0)
      snprintf(decay, sizeof decay, " %.7g%s", (double)man->ema_decay,
               man->ema_warmup ? " --model-ema-warmup 1" : "");
    vt_log_warn("%s has EMA weights; this run has no --model-ema, so they are dropped and its "
                "checkpoints hold none: give --model-ema%s to keep them", dir,
                decay[0] ? decay : " DECAY");
  }
}

// The end of a training run's resume (rank 0), by its result. Where it recovered the checkpoint
// of `step`, --save-hook runs for it, as it would have after its commit, once the run goes on
// (else it is said that the hook has not run). Where it resumed from another checkpoint than
// its --save folder's own run (--resume DIR), that folder's interrupted saves belong to another
// line of training: removed, once the resume is sure.
static void resume_end(const vt_train_options *o, int64_t step, vt_status result) {
  if (result == VT_OK && o->save_dir[0] && !o->eval_only &&
      !vt_ckpt_continues(o->resume, o->save_dir)) {
    char why[1200];
    snprintf(why, sizeof why, "this run resumed from %.1000s, another line of training",
             o->resume);
    vt_ckpt_discard(o->save_dir, why);
  }
  if (step < 0 || !o->save_hook[0]) return;
  char dir[1100];
  vt_ckpt_step_dir(o->save_dir, step, dir, sizeof dir);
  if (result == VT_OK)
    vt_save_hook_start(o->save_hook, o->save_dir, dir, step, o->save_hook_timeout);
  else
    vt_log_warn("--save-hook has not run for the recovered %s (this run stops): run it by hand "
                "if it is needed", dir);
}

// One resume, as vt_ckpt_resume's but for --resume-fallback; *none: --resume auto found no
// checkpoint in --save (a fresh start).
static vt_status resume_from(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                             vt_comm *world, const vt_mesh *mesh, int64_t *start_step,
                             vt_ckpt_manifest *saved, char *from, size_t fromlen, int *none,
                             char *err, size_t errlen) {
  *start_step = 0;
  *none = 0;
  if (from && fromlen) from[0] = 0;
  if (saved) memset(saved, 0, sizeof *saved);
  const int auto_mode = strcmp(o->resume, "auto") == 0;
  const int rank0 = vt_comm_rank(world) == 0;
  const vt_mesh_coord me = vt_mesh_coords(mesh, vt_comm_rank(world));
  char dir[1100];
  vt_ckpt_manifest man;
  // Rank 0 proposes a checkpoint whose manifest and file sizes are sound (--resume auto: the
  // candidates in order, vt_ckpt_candidates); every rank reads its part of it, counting the
  // CRC-32 shares of what it read (the DP-rank-0 replica of each shard; replicated tensors on TP
  // rank 0), so the checksums are verified without any rank reading the whole checkpoint. A
  // damaged one is refused (--resume DIR) or skipped for the next candidate. --resume DIR (vit3d
  // eval's --checkpoint) may name a --save folder instead of a checkpoint: its candidates as
  // with auto, newest first, as vit3d inspect reads one, but none is an error, and its
  // interrupted saves are left alone (a run may be saving there now) unless it is this training
  // run's own --save (vt_ckpt_continues).
  int64_t cand[4096];
  int ncand = 0, next = 0, skipped = 0;
  const char *folder = auto_mode ? o->save_dir : o->resume;
  int in_folder = auto_mode;  // (rank 0's finding, shared with its first proposal)
  // A training run (which holds --save: vt_ckpt_claim) that continues its folder's run
  // (--resume auto, or the folder named) recovers or removes the interrupted saves there first;
  // vit3d eval leaves them to the run that owns them.
  int64_t recovered = -1;
  vt_status recovery = VT_OK;
  const int recovers =
      rank0 && !o->eval_only && o->save_dir[0] && vt_ckpt_continues(o->resume, o->save_dir);
  // Rank 0 reads the interrupted saves whole while the others wait for it: every rank's
  // start-up limit (10 x --timeout-s) grows by that reading's time at a slow disk's 20 MB/s.
  double leftover = recovers ? (double)vt_ckpt_leftover_bytes(o->save_dir) : 0.0;
  vt_comm_all_reduce_double(world, &leftover, 1, VT_REDUCE_MAX);
  vt_watchdog_extend(leftover / 20e6);
  if (recovers) {
    // (it reads a recovered checkpoint whole: a watchdog report says so)
    const char *phase = vt_watchdog_rename("recovering an interrupted checkpoint save");
    recovery = vt_ckpt_recover(o->save_dir, o->keep_last, o->keep_every, &recovered, err,
                               errlen);
    vt_watchdog_rename(phase);
  }
  if (rank0 && !auto_mode)
    in_folder = !vt_ckpt_is_checkpoint(o->resume) && vt_ckpt_candidates(o->resume, cand, 1) > 0;
  if (rank0 && in_folder) ncand = vt_ckpt_candidates(folder, cand, 4096);
  const int64_t total = m->table.total;
  float *local[4] = {NULL};  // weights, moments, EMA (kept only with --model-ema)
  for (int k = 0; k < 3 + (opt->ema != NULL); k++) {
    local[k] = malloc((size_t)(total + 1) * sizeof(float));
    VT_CHECK(local[k] != NULL, "out of host memory to load a checkpoint");
  }
  vt_status result = VT_OK;
  for (;;) {
    // Rank 0 chooses; the others follow: the step number names the directory, and the
    // optimizer's step count comes along. The others start at -inf so that the MAX reduction
    // hands everyone rank 0's values.
    // step of the chosen checkpoint; -1: none; -2: refused; -3: the recovery's I/O failed
    double found = -1e300;
    if (rank0 && recovery != VT_OK)
      found = -3;  // (its message in err)
    else if (rank0)
      found = propose(o, folder, in_folder, cand, ncand, &next, &skipped, dir, sizeof dir, &man,
                      err, errlen);
    int has_ema = rank0 && found >= 0 && vt_ckpt_manifest_lists(&man, "ema.safetensors");
    double choice[6] = {found, rank0 && found >= 0 ? (double)man.adam_t : -1e300,
                        rank0 ? has_ema : -1e300,
                        rank0 && found >= 0 ? (double)man.optim_from_layer : -1e300,
                        rank0 ? in_folder : -1e300,
                        rank0 && found >= 0 ? (double)man.adam_t0 : -1e300};
    vt_comm_all_reduce_double(world, choice, 6, VT_REDUCE_MAX);
    has_ema = choice[2] > 0;
    in_folder = choice[4] > 0;
    if (choice[0] == -2 || choice[0] == -3) {
      result = choice[0] == -2 ? VT_ERR_INPUT : VT_ERR_IO;
      break;
    }
    if (choice[0] < 0) {  // a fresh start
      *none = 1;
      break;
    }
    if (in_folder) vt_ckpt_step_dir(folder, (int64_t)choice[0], dir, sizeof dir);
    else snprintf(dir, sizeof dir, "%s", o->resume);
    if (!rank0) {
      memset(&man, 0, sizeof man);
      man.step = (int64_t)choice[0];
      man.adam_t = (int64_t)choice[1];
      man.optim_from_layer = (int)choice[3];
      man.adam_t0 = (int64_t)choice[5];
      man.stream_position = man.step * o->global_batch;
    }
    if (o->use_ema && !has_ema) {
      snprintf(err, errlen, "%s has no EMA weights (it was saved without --model-ema)", dir);
      result = VT_ERR_INPUT;
      break;
    }
    const int load_ema = opt->ema && has_ema && !o->eval_only;
    double nbytes[2] = {0, 0};  // read by this rank, in the files
    vt_read_check checks[3] = {{me.tp_rank == 0, 0, 0}, {me.tp_rank == 0, 0, 0},
                               {me.tp_rank == 0, 0, 0}};
    vt_read_check *count[3] = {NULL, NULL, NULL};  // model, optim, ema
    for (int i = 0; i < 3 && me.dp_rank == 0; i++) count[i] = &checks[i];
    const vt_status st = read_parts(o, &m->table, opt->cfg.kind, dir, &man, load_ema, local,
                                    nbytes, count, rank0, err, errlen);
    // The lowest rank's failure to read, if any (a damaged file, a header that does not parse,
    // an I/O error, a folder this rank cannot see), said on every rank.
    char read_err[700] = "";
    if (st != VT_OK) snprintf(read_err, sizeof read_err, "rank %d: %s", vt_comm_rank(world), err);
    double bad[2] = {vt_comm_agree(world, st, read_err, sizeof read_err) != VT_OK, 0};
    if (bad[0]) {  // the checkpoint is damaged, or a rank cannot read it
      vt_ckpt_manifest again;
      char why[600];
      if (rank0 && vt_ckpt_check(dir, &again, 1, eval_reads(o), why, sizeof why) != VT_OK)
        bad[1] = 1, snprintf(err, errlen, "%s", why);
      vt_comm_all_reduce_double(world, bad + 1, 1, VT_REDUCE_MAX);
      if (!bad[1]) {  // complete as rank 0 sees it: a rank's own trouble, said by rank 0
        snprintf(err, errlen, "%s", read_err);
        result = VT_ERR_INPUT;
        break;
      }
    }
    if (bad[1] || check_files(world, dir, &man, checks, eval_reads(o), err, errlen) != VT_OK) {
      if (!in_folder) {
        result = VT_ERR_INPUT;
        break;
      }
      if (rank0) vt_log_warn("%s; trying older checkpoints", err);
      skipped++;
      continue;
    }
    if (rank0 && in_folder && skipped)
      vt_log_warn("using the previous complete checkpoint %s", dir);
    vt_ckpt_manifest all;
    char why[600];
    if (rank0 && eval_reads(o) && vt_ckpt_check(dir, &all, 1, NULL, why, sizeof why) != VT_OK)
      vt_log_warn("%s; its %s verifies (size and CRC-32), and is what is evaluated (it cannot "
                  "be resumed: vit3d inspect %s says which of its files verify)", why,
                  eval_reads(o), dir);
    if (rank0 && in_folder) vt_ckpt_latest_differs(folder, man.step);
    // (without --resume-override another frozen set is refused: vt_ckpt_check_optim)
    if (!o->eval_only && o->resume_override && vt_opt_state_buffers(opt->cfg.kind) == 2 &&
        unfrozen_now(o, m, opt, &man, world, rank0, dir)) {
      memset(local[1], 0, (size_t)total * sizeof(float));
      memset(local[2], 0, (size_t)total * sizeof(float));
      man.adam_t0 = man.adam_t;  // (the step count goes on: the EMA's warmup, skipped steps)
    }
    install(o, m, opt, dir, &man, local, load_ema, has_ema, rank0);
    // The spike guard's statistics, rank 0's (the manifest's) to all.
    double spike[6] = {(double)man.spike_n[0], (double)man.spike_n[1], man.spike_mean[0],
                       man.spike_mean[1], man.spike_var[0], man.spike_var[1]};
    vt_comm_broadcast_bytes(world, spike, sizeof spike, 0);
    for (int k = 0; k < 2; k++)
      opt->spike.n[k] = (int64_t)spike[k], opt->spike.mean[k] = spike[2 + k],
      opt->spike.var[k] = spike[4 + k];
    *start_step = man.step;
    if (saved && rank0) *saved = man;
    if (from && fromlen) snprintf(from, fromlen, "%s", dir);
    snprintf(g_resumed, sizeof g_resumed, "%s %s: %" PRId64 " steps done, data stream at "
             "sample %" PRId64 " (saved on tp %d x pp %d x dp %d); this rank read %.1f of the "
             "checkpoint's %.1f MiB", o->eval_only ? "loaded" : "resumed from", dir, man.step,
             man.stream_position, man.tp, man.pp, man.dp, nbytes[0] / 1048576.0,
             nbytes[1] / 1048576.0);
    if (o->eval_only) vt_log_info("%s", g_resumed);
    break;
  }
  for (int k = 0; k < 4; k++) free(local[k]);
  if (rank0) resume_end(o, recovered, result);
  return result;
}

const char *vt_ckpt_resumed_line(void) { return g_resumed; }

vt_status vt_ckpt_resume(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                         vt_comm *world, const vt_mesh *mesh, int64_t *start_step,
                         vt_ckpt_manifest *saved, char *from, size_t fromlen, char *err,
                         size_t errlen) {
  int none = 0;
  vt_status st = resume_from(o, m, opt, world, mesh, start_step, saved, from, fromlen, &none,
                             err, errlen);
  if (st != VT_OK || !none || !o->resume_fallback[0]) return st;
  // --resume auto found nothing in --save (its interrupted saves recovered or removed first):
  // the run starts from --resume-fallback, as with --resume DIR.
  vt_train_options *f = malloc(sizeof *f);
  VT_CHECK(f != NULL, "out of host memory");
  *f = *o;
  snprintf(f->resume, sizeof f->resume, "%s", o->resume_fallback);
  st = resume_from(f, m, opt, world, mesh, start_step, saved, from, fromlen, &none, err, errlen);
  free(f);
  if (st != VT_OK) {  // (the flag named: the error may be about the fallback's folder)
    char why[1024];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, errlen, "--resume-fallback: %s", why);
  }
  return st;
}
