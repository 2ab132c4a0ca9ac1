// inspect.c: `vit3d inspect DIR` (inspect.h). A resume must repeat the model flags of the run
// that saved the checkpoint (the manifest refuses others): this prints them from the manifest.
#include "inspect.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "config.h"
#include "optim.h"
#include "safetensors.h"

// The optimizer's and the schedule's flags of a manifest that has them ("" otherwise). A length
// given in epochs is said in epochs (where a float flag can say it exactly), else in steps.
static void optim_flags(const vt_ckpt_manifest *m, char *out, size_t size) {
  out[0] = '\0';
  if (!m->has_optim) return;
  char a[7][32];
  int k = snprintf(out, size,
                   " --lr %s --min-lr %s --warmup-lr %s --weight-decay %s --opt-eps %s "
                   "--clip-grad %s --layer-decay %s",
                   vt_float_text(m->lr, a[0], 32), vt_float_text(m->min_lr, a[1], 32),
                   vt_float_text(m->warmup_lr, a[2], 32), vt_float_text(m->weight_decay, a[3], 32),
                   vt_float_text(m->opt_eps, a[4], 32), vt_float_text(m->clip_grad, a[5], 32),
                   vt_float_text(m->layer_decay, a[6], 32));
  const int in_epochs = m->sched_epochs && m->cycle_epochs == (double)(float)m->cycle_epochs;
  const int warm_epochs = m->sched_epochs && m->warmup_epochs > 0 &&
                          m->warmup_epochs == (double)(float)m->warmup_epochs;
  if (k < (int)size && in_epochs)
    k += snprintf(out + k, size - (size_t)k, " --epochs %s",
                  vt_float_text(m->cycle_epochs, a[0], 32));
  else if (k < (int)size)
    k += snprintf(out + k, size - (size_t)k, " --steps %" PRId64, m->total_steps);
  if (k < (int)size && warm_epochs)
    k += snprintf(out + k, size - (size_t)k, " --warmup-epochs %s",
                  vt_float_text(m->warmup_epochs, a[0], 32));
  else if (k < (int)size)
    k += snprintf(out + k, size - (size_t)k, " --warmup-steps %" PRId64, m->warmup_steps);
  if (k < (int)size && (m->sgd || m->lars))
    k += snprintf(out + k, size - (size_t)k, " --momentum %s",
                  vt_float_text(m->momentum, a[0], 32));
  if (k < (int)size && m->sched > 0)
    k += snprintf(out + k, size - (size_t)k, " --sched %s", vt_sched_name(m->sched));
  if (k < (int)size && m->sched_epochs) snprintf(out + k, size - (size_t)k, " --sched-on epochs");
}

// text as one shell word: in single quotes, each ' as '\'' (a regex may hold any byte).
static const char *shell_word(const char *text, char *buf, size_t size) {
  size_t k = 0;
  buf[k++] = '\'';
  for (const char *c = text; *c && k + 6 < size; c++) {
    if (*c == '\'') memcpy(buf + k, "'\\''", 4), k += 4;
    else buf[k++] = *c;
  }
  buf[k++] = '\'';
  buf[k] = '\0';
  return buf;
}

// The regularisation, loss, EMA and freeze flags of a manifest (its settings, checkpoint.h),
// every one spelt out, as a resume must repeat them to train as the run that saved it: a
// resume warns about the first kind and refuses another EMA decay or frozen set.
static void settings_flags(const vt_ckpt_manifest *m, char *out, size_t size) {
  char a[12][32], q[3][800];
  int k = snprintf(out, size,
                   " --drop-path %s --drop-path-uniform %d --proj-drop %s --attn-drop %s "
                   "--pos-drop %s --drop %s --mixup %s --cutmix %s --mix-prob %s "
                   "--mix-switch-prob %s --reprob %s --remode %s --aa %s --label-smoothing %s "
                   "--bce-loss %d",
                   vt_float_text(m->drop_path, a[0], 32), m->drop_path_uniform,
                   vt_float_text(m->proj_drop, a[1], 32), vt_float_text(m->attn_drop, a[2], 32),
                   vt_float_text(m->pos_drop, a[3], 32), vt_float_text(m->head_drop, a[4], 32),
                   vt_float_text(m->mixup, a[5], 32), vt_float_text(m->cutmix, a[6], 32),
                   vt_float_text(m->mix_prob, a[7], 32),
                   vt_float_text(m->mix_switch_prob, a[8], 32),
                   vt_float_text(m->reprob, a[9], 32), vt_ckpt_remode_name(m->remode),
                   shell_word(m->aa, q[0], sizeof q[0]),
                   vt_float_text(m->label_smoothing, a[10], 32), m->bce_loss);
  if (k < (int)size)
    k += snprintf(out + k, size - (size_t)k, " --hflip %s --train-interpolation %s "
                  "--simple-crop %d --three-augment %d", vt_float_text(m->hflip, a[0], 32),
                  vt_ckpt_interp_name(m->train_interp), m->simple_crop, m->three_augment);
  if (k < (int)size && !m->simple_crop)  // (unused with it)
    k += snprintf(out + k, size - (size_t)k, " --crop-scale-min %s",
                  vt_float_text(m->crop_scale_min, a[0], 32));
  if (k < (int)size && (m->three_augment || m->color_jitter_alone > 0))
    k += snprintf(out + k, size - (size_t)k, " --color-jitter %s",
                  vt_float_text(m->three_augment ? m->color_jitter : m->color_jitter_alone, a[0],
                             32));
  if (k < (int)size && !m->jpeg_reduce)  // (a flag of 2026-12-07: given only where it is off)
    k += snprintf(out + k, size - (size_t)k, " --jpeg-reduce 0");
  if (k < (int)size && m->aa[0])
    k += snprintf(out + k, size - (size_t)k, " --aa-interpolation %s",
                  m->aa_interp ? "bicubic" : "bilinear");
  if (k < (int)size && m->precision >= 0)  // (not recorded before 2026-12-07)
    k += snprintf(out + k, size - (size_t)k, " --precision %s", m->precision ? "bf16" : "fp32");
  if (k < (int)size && m->norm_recorded)  // the normalisation and the evaluation's transform
    k += snprintf(out + k, size - (size_t)k, " --mean %s,%s,%s --std %s,%s,%s --eval-crop-pct "
                  "%s --eval-crop-mode %s --eval-interpolation %s",
                  vt_float_text(m->mean[0], a[0], 32), vt_float_text(m->mean[1], a[1], 32),
                  vt_float_text(m->mean[2], a[2], 32), vt_float_text(m->std[0], a[3], 32),
                  vt_float_text(m->std[1], a[4], 32), vt_float_text(m->std[2], a[5], 32),
                  vt_ckpt_double_text(m->eval_crop_pct, a[6], 32),
                  m->eval_squash ? "squash" : "center",
                  vt_ckpt_interp_name(m->eval_interp));
  if (k < (int)size && m->bce_loss)  // (refused without --bce-loss 1)
    k += snprintf(out + k, size - (size_t)k, " --bce-target-thresh %s",
                  vt_float_text(m->bce_thresh, a[11], 32));
  if (k < (int)size && m->ema_decay > 0)
    k += snprintf(out + k, size - (size_t)k, " --model-ema %s --model-ema-warmup %d",
                  vt_float_text(m->ema_decay, a[0], 32), m->ema_warmup);
  else if (k < (int)size)
    k += snprintf(out + k, size - (size_t)k, " --model-ema 0");
  if (k < (int)size)
    snprintf(out + k, size - (size_t)k, " --freeze %s --trainable %s",
             shell_word(m->freeze, q[1], sizeof q[1]),
             shell_word(m->trainable, q[2], sizeof q[2]));
}

// A --save folder's interrupted save past its newest complete checkpoint (newest; -1: none),
// which the run's --resume auto recovers where every rank wrote its part: said to f.
static void say_leftover(FILE *f, const char *path, int64_t newest) {
  const int64_t left = vt_ckpt_is_checkpoint(path) ? -1 : vt_ckpt_leftover(path);
  if (left >= 0 && left >= newest)
    fprintf(f, "%s %sholds an interrupted save of step %" PRId64 " (.tmp-step-%08" PRId64
            "), not checked here: the run's --resume auto recovers it where every rank had "
            "written its part, else removes it\n", path, newest >= 0 ? "also " : "", left,
            left);
}

void vt_inspect_model_flags(const vt_ckpt_manifest *m, char *out, size_t size) {
  snprintf(out, size,
           "--img-size %d --patch-size %d --width %d --depth %d --heads %d --mlp-dim %d "
           "--num-classes %d --global-pool %s --class-token %d --layer-scale %s --reg-tokens %d "
           "--no-embed-class %d --qk-norm %d --qkv-bias %d --parallel-blocks %d --act %s "
           "--pos-embed %s --pre-logits %d --pre-norm %d --norm-eps %g",
           m->img_size, m->patch_size, m->width, m->depth, m->heads, vt_ckpt_mlp_hidden(m),
           m->num_classes, vt_config_pool_name(m->global_pool), m->class_token,
           m->layer_scale ? "1" : "0", m->reg_tokens, m->no_embed_class, m->qk_norm, m->qkv_bias,
           m->parallel, vt_ckpt_act_name(m), m->pos_sincos ? "sincos2d" : "learn", m->pre_logits,
           m->pre_norm, (double)m->norm_eps);
}

// Dimension d of the named tensor, or 0 where f lacks it.
static int64_t dim_of(const vt_st_file *f, const char *name, int d) {
  const vt_st_entry *e = vt_st_find(f, name);
  return e && d < e->ndim ? e->shape[d] : 0;
}

// Whether the file path lies in a checkpoint folder (its path then in dir).
static int in_checkpoint(const char *path, char *dir, size_t size) {
  snprintf(dir, size, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, size, ".");
  return vt_ckpt_is_checkpoint(dir);
}

// vit3d inspect FILE.safetensors: its tensors, its metadata and, for vit3d export's file, the
// command that evaluates it as its run did; for another tool's, what the tensors say.
static int inspect_file(const char *path) {
  vt_st_file f;
  char err[1200], q[1200];
  if (vt_safetensors_open(path, &f, err, sizeof err) != VT_OK) {
    fprintf(stderr, "vit3d inspect: %s\n", err);
    return 2;
  }
  int64_t values = 0;
  char dtypes[80] = " ";  // " F32 BF16 ": each dtype once, a space either side
  for (int i = 0; i < f.count; i++) {
    const vt_st_entry *e = &f.entries[i];
    values += (e->end - e->begin) / vt_st_dtype_size(e->dtype);
    char word[16];
    snprintf(word, sizeof word, " %s ", e->dtype);
    if (!strstr(dtypes, word) && strlen(dtypes) + strlen(word) < sizeof dtypes)
      strcat(dtypes, word + 1);
  }
  dtypes[strlen(dtypes) - 1] = '\0';
  printf("safetensors file %s: %d tensors, %" PRId64 " values (%s)\n", path, f.count, values,
         dtypes[0] ? dtypes + 1 : "none");
  for (int i = 0; i < vt_st_metadata_count(&f); i++) {  // (the file's text: shown harmless)
    char key[100], value[400];
    printf("  %s: %s\n", vt_printable(vt_st_metadata_key(&f, i), key, sizeof key),
           vt_printable(vt_st_metadata(&f, vt_st_metadata_key(&f, i)), value, sizeof value));
  }
  const char *model = vt_st_metadata(&f, "vit3d_model_flags");
  vt_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  const int norm = vt_ckpt_file_meta_parse(
      &m, vt_st_metadata(&f, "mean"), vt_st_metadata(&f, "std"), vt_st_metadata(&f, "crop_pct"),
      vt_st_metadata(&f, "crop_mode"), vt_st_metadata(&f, "interpolation"), err, sizeof err);
  if (model) {  // (vit3d eval reads the flags from the metadata: none of its text is printed)
    printf("evaluate with: vit3d eval --init-from %s --val-data DIR\n",
           shell_word(path, q, sizeof q));
    printf("  (the model, normalisation and evaluation transform come from its metadata; "
           "fine-tuning from it takes its vit3d_model_flags: another --img-size resamples "
           "pos_embed, another --num-classes starts a new head)\n");
    char why[400];
    if (norm < 0 || norm == 2) printf("  (%s)\n", vt_printable(err, why, sizeof why));
    else if (norm == 0)
      printf("  (its normalisation is not recorded: its checkpoint came from an older vit3d)\n");
  } else if (in_checkpoint(path, q, sizeof q)) {
    char w[1200];
    printf("the weights of the checkpoint %s: vit3d inspect %s prints the flags that resume or "
           "evaluate it\n", q, shell_word(q, w, sizeof w));
  } else if (!vt_st_find(&f, "patch_embed.proj.weight")) {
    printf("no vit3d metadata, and no patch_embed.proj.weight: not a ViT of timm's layout, which "
           "--init-from loads (launch/convert_weights.py converts other layouts)\n");
  } else {  // (a file of timm's or another tool's: what its tensors say)
    const int64_t width = dim_of(&f, "patch_embed.proj.weight", 0);
    int depth = 0;
    char name[64];
    for (;; depth++) {
      snprintf(name, sizeof name, "blocks.%d.attn.qkv.weight", depth);
      if (!vt_st_find(&f, name)) break;
    }
    printf("no vit3d metadata (a file of timm's or another tool's): its tensors say width %" PRId64
           ", depth %d, patch %" PRId64 ", MLP %" PRId64 ", %" PRId64 " classes, %" PRId64
           " positions (the heads are not in the weights; --init-from names the flags a variant "
           "needs)\n", width, depth, dim_of(&f, "patch_embed.proj.weight", 2),
           dim_of(&f, "blocks.0.mlp.fc1.weight", 0), dim_of(&f, "head.weight", 0),
           dim_of(&f, "pos_embed", 1));
  }
  vt_safetensors_close(&f);
  return 0;
}

// Of a damaged checkpoint folder whose manifest reads: which of its files verify, and how to
// export its weights where they do.
static void say_intact(const char *path) {
  vt_ckpt_manifest m, f;
  char why[1200];
  if (!vt_ckpt_is_checkpoint(path) || vt_ckpt_manifest_read(path, &m, why, sizeof why) != VT_OK)
    return;
  fprintf(stderr, "its files:\n");
  int weights = 0;
  for (int i = 0; i < m.nfiles; i++) {
    const int ok = vt_ckpt_verify_file(path, &f, m.file[i], why, sizeof why) == VT_OK;
    const char *damage = strstr(why, " is damaged: ");  // (without the folder's name again)
    fprintf(stderr, "  %-20s %s\n", m.file[i], ok ? "intact (size and CRC-32 verified)"
                                                  : damage ? damage + 13 : why);
    weights |= ok && !strcmp(m.file[i], "model.safetensors");
  }
  if (weights)
    fprintf(stderr, "its weights can still be exported: vit3d export --checkpoint %s --out "
            "FILE.safetensors\n", path);
}

int vt_inspect_run(const char *path) {
  char dir[1100], err[1200];
  vt_ckpt_manifest m;
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) return inspect_file(path);
  if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {  // (a FIFO, a device)
    fprintf(stderr, "vit3d inspect: %s is neither a folder (a checkpoint, or a --save folder) "
            "nor a regular file (a .safetensors file)\n", path);
    return 2;
  }
  if (vt_ckpt_open(path, dir, sizeof dir, &m, err, sizeof err) != VT_OK) {
    fprintf(stderr, "vit3d inspect: %s\n", err);
    say_leftover(stderr, path, -1);
    say_intact(path);
    return 2;  // (what the user named is no checkpoint: operations.md's exit codes)
  }
  printf("checkpoint %s: %d files, sizes and CRC-32 verified\n", dir, m.nfiles);
  for (int i = 0; i < m.nfiles; i++)
    printf("  %-20s %" PRId64 " bytes\n", m.file[i], m.file_nbytes[i]);
  char data[96] = "";
  if (m.data_images > 0)
    snprintf(data, sizeof data, " in a training set of %" PRId64 " images (class names %08llx)",
             m.data_images, (unsigned long long)m.data_classes);
  printf("step %" PRId64 " (%s step %" PRId64 "), data stream position %" PRId64
         "%s (global batch %" PRId64 "), seed %" PRIu64 "%s\n",
         m.step, vt_ckpt_opt_name(&m), m.adam_t, m.stream_position, data, m.global_batch, m.seed,
         vt_ckpt_manifest_lists(&m, "ema.safetensors") ? ", with the weights' EMA" : "");
  printf("saved on tp %d x pp %d x dp %d%s%s (it loads on any mesh)\n", m.tp, m.pp, m.dp,
         m.zero ? ", ZeRO-1" : "", m.sequence_parallel ? ", sequence parallel" : "");
  if (m.spike_n[0] > 0 || m.spike_n[1] > 0)
    printf("spike guard's moving statistics (--skip-spike-z): loss mean %.6g sd %.3g, gradient "
           "norm mean %.6g sd %.3g (over %" PRId64 " and %" PRId64 " steps)\n",
           m.spike_mean[0], sqrt(m.spike_var[0]), m.spike_mean[1], sqrt(m.spike_var[1]),
           m.spike_n[0], m.spike_n[1]);
  printf("model: img %d patch %d width %d depth %d heads %d MLP %d classes %d\n", m.img_size,
         m.patch_size, m.width, m.depth, m.heads, vt_ckpt_mlp_hidden(&m), m.num_classes);
  // The flags the manifest checks on a resume, every one spelt out (any --model preset then
  // has them overridden), then the data stream's.
  char repeats[32] = "", optim[512], settings[3000];
  if (m.aug_repeats > 1) snprintf(repeats, sizeof repeats, " --aug-repeats %d", m.aug_repeats);
  if (m.drop_last) snprintf(repeats + strlen(repeats), sizeof repeats - strlen(repeats),
                            " --drop-last 1");
  optim_flags(&m, optim, sizeof optim);
  settings_flags(&m, settings, sizeof settings);
  char model[600];
  vt_inspect_model_flags(&m, model, sizeof model);
  printf("resume with: %s --opt %s%s%s --global-batch-size %" PRId64 " --seed %" PRIu64
         "%s --resume %s\n", model, vt_ckpt_opt_name(&m), optim, settings, m.global_batch,
         m.seed, repeats, dir);
  if (m.layer_scale)
    printf("  (--layer-scale only has to be positive: the gammas come from the checkpoint)\n");
  if (!m.norm_recorded)  // (a manifest before they were recorded)
    printf("  (its normalisation and evaluation transform are not recorded, an older vit3d wrote "
           "it: give the training run's --mean, --std and --eval-* flags where they were not "
           "the defaults)\n");
  if (m.sched_epochs)
    printf("  (its epochs were passes over %" PRId64 " training images: the same data gives the "
           "same steps)\n", m.epoch_images);
  if (m.frozen && !m.freeze[0] && !m.trainable[0])  // (a manifest before the patterns)
    printf("  (it froze %d tensors: give the --freeze and --trainable patterns that freeze the "
           "same ones; their names' hash is %08" PRIx64 ")\n", m.frozen, m.frozen_hash);
  if (!m.recorded)
    printf("  (its manifest records no regularisation, loss, EMA or freeze setting: its run had "
           "their defaults, or a vit3d older than those keys saved it)\n");
  if (m.ema_decay <= 0 && vt_ckpt_manifest_lists(&m, "ema.safetensors"))
    printf("  (it has EMA weights, their decay not recorded: add --model-ema DECAY to keep "
           "them)\n");
  if (m.nunknown)
    printf("  (its manifest has %d key%s this vit3d does not know, written by a newer one: "
           "%s%s; a resume here neither applies nor checks them)\n", m.nunknown,
           m.nunknown > 1 ? "s" : "", m.unknown, vt_ckpt_unknown_more(&m));
  if (m.optim_from_layer)
    printf("  (optim.safetensors holds no state for its %d leading frozen layer%s: zeros, as "
           "they never trained)\n", m.optim_from_layer, m.optim_from_layer > 1 ? "s" : "");
  say_leftover(stdout, path, m.step);
  return 0;
}
