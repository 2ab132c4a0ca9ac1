// ckpt_manifest.c: a checkpoint's manifest.txt as text, written and parsed (checkpoint.h), and
// the names of what it records. Must not depend on MPI or the model.
#include "checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(status, ...) return (snprintf(err, errlen, __VA_ARGS__), (status))

// The settings that change the computation but not the files (checkpoint.h): key, kind ('f' a
// float, 'd' a double, 'i' an int, 's' text, 'e' --remode's word), the field, its absent value
// (the flag's default: a key is written only where the value differs, and a manifest without
// it reads as that) and, for numbers, the range a parse accepts.
// ALWAYS: a setting written in every manifest that records them (norm_recorded), so that its
// absence says an older vit3d wrote the manifest, not that the flag had its default.
#define SETTING(key, kind, field, absent, lo, hi)                                              \
  {key, kind, offsetof(vt_ckpt_manifest, field), sizeof(((vt_ckpt_manifest *)0)->field), absent, \
   lo, hi, 0}
#define ALWAYS(key, kind, field, absent, lo, hi)                                               \
  {key, kind, offsetof(vt_ckpt_manifest, field), sizeof(((vt_ckpt_manifest *)0)->field), absent, \
   lo, hi, 1}
static const struct setting {
  const char *key;
  char kind;
  size_t off, size;
  double absent, lo, hi;
  int always;
} k_settings[] = {
    SETTING("drop_path", 'f', drop_path, 0, 0, 1),
    SETTING("drop_path_uniform", 'i', drop_path_uniform, 0, 0, 1),
    SETTING("proj_drop", 'f', proj_drop, 0, 0, 1),
    SETTING("attn_drop", 'f', attn_drop, 0, 0, 1),
    SETTING("pos_drop", 'f', pos_drop, 0, 0, 1),
    SETTING("head_drop", 'f', head_drop, 0, 0, 1),
    SETTING("mixup", 'f', mixup, 0, 0, 1000),
    SETTING("cutmix", 'f', cutmix, 0, 0, 1000),
    SETTING("mix_prob", 'f', mix_prob, 1, 0, 1),
    SETTING("mix_switch_prob", 'f', mix_switch_prob, 0.5, 0, 1),
    SETTING("reprob", 'f', reprob, 0, 0, 1),
    SETTING("remode", 'e', remode, 2, 0, 2),
    SETTING("aa", 's', aa, 0, 0, 0),
    SETTING("label_smoothing", 'f', label_smoothing, 0.1, 0, 1),
    SETTING("bce_loss", 'i', bce_loss, 0, 0, 1),
    SETTING("bce_thresh", 'f', bce_thresh, -1, -1, 1),
    SETTING("hflip", 'f', hflip, 0.5, 0, 1),
    SETTING("crop_scale_min", 'f', crop_scale_min, 0.08, 0, 1),
    SETTING("train_interp", 'i', train_interp, 0, 0, 2),
    SETTING("simple_crop", 'i', simple_crop, 0, 0, 1),
    SETTING("three_augment", 'i', three_augment, 0, 0, 1),
    SETTING("color_jitter", 'f', color_jitter, 0.3, 0, 1),
    SETTING("color_jitter_alone", 'f', color_jitter_alone, 0, 0, 1),
    SETTING("jpeg_reduce", 'i', jpeg_reduce, 1, 0, 1),
    SETTING("aa_interp", 'i', aa_interp, 1, 0, 1),
    SETTING("precision", 'i', precision, -1, 0, 1),  // (absent: not recorded, not compared)
    ALWAYS("mean_r", 'f', mean[0], 0.485, -1e6, 1e6),
    ALWAYS("mean_g", 'f', mean[1], 0.456, -1e6, 1e6),
    ALWAYS("mean_b", 'f', mean[2], 0.406, -1e6, 1e6),
    ALWAYS("std_r", 'f', std[0], 0.229, 1e-45, 1e6),
    ALWAYS("std_g", 'f', std[1], 0.224, 1e-45, 1e6),
    ALWAYS("std_b", 'f', std[2], 0.225, 1e-45, 1e6),
    ALWAYS("eval_crop_pct", 'd', eval_crop_pct, 0.875, 0.05, 1),
    ALWAYS("eval_squash", 'i', eval_squash, 0, 0, 1),
    ALWAYS("eval_interp", 'i', eval_interp, 0, 0, 2),
    ALWAYS("evaluated", 'i', evaluated, -1, 0, 1),
    SETTING("ema_decay", 'f', ema_decay, 0, 0, 1),
    SETTING("ema_warmup", 'i', ema_warmup, 0, 0, 1),
    SETTING("freeze", 's', freeze, 0, 0, 0),
    SETTING("trainable", 's', trainable, 0, 0, 0),
};
#define N_SETTINGS ((int)(sizeof k_settings / sizeof k_settings[0]))

static const char *const k_remode[3] = {"const", "rand", "pixel"};

const char *vt_ckpt_remode_name(int remode) {
  return remode >= 0 && remode < 3 ? k_remode[remode] : "?";
}

const char *vt_ckpt_unknown_more(const vt_ckpt_manifest *m) {
  int names = m->unknown[0] != '\0';
  for (const char *p = m->unknown; *p; p++) names += *p == ' ';
  return names < m->nunknown ? " ..." : "";
}

const char *vt_ckpt_double_text(double v, char *buf, size_t size) {
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

const char *vt_ckpt_weights_file(int ema) {
  return ema ? "ema.safetensors" : "model.safetensors";
}

const char *vt_ckpt_interp_name(int interp) {
  static const char *const names[3] = {"sample", "bilinear", "bicubic"};
  return interp >= 0 && interp < 3 ? names[interp] : "?";
}

void vt_ckpt_file_meta_make(vt_ckpt_file_meta *fm, const vt_ckpt_manifest *m, int ema,
                            const char *model_flags) {
  char (*t)[112] = fm->text, a[3][32];
  int n = 0;
#define PAIR(k, v) (fm->kv[2 * n] = (k), fm->kv[2 * n + 1] = (v), n++)
  PAIR("format", "pt");
  snprintf(t[0], sizeof t[0], "%lld", (long long)m->step);
  PAIR("vit3d_step", t[0]);
  PAIR("vit3d_weights", ema ? "ema" : "model");
  PAIR("vit3d_model_flags", model_flags);
  snprintf(t[1], sizeof t[1], "3,%d,%d", m->img_size, m->img_size);
  PAIR("input_size", t[1]);
  snprintf(t[2], sizeof t[2], "%d", m->num_classes);
  PAIR("num_classes", t[2]);
  if (m->norm_recorded) {
    snprintf(t[3], sizeof t[3], "%s,%s,%s", vt_float_text(m->mean[0], a[0], 32),
             vt_float_text(m->mean[1], a[1], 32), vt_float_text(m->mean[2], a[2], 32));
    snprintf(t[4], sizeof t[4], "%s,%s,%s", vt_float_text(m->std[0], a[0], 32),
             vt_float_text(m->std[1], a[1], 32), vt_float_text(m->std[2], a[2], 32));
    PAIR("mean", t[3]);
    PAIR("std", t[4]);
  }
  if (m->norm_recorded && m->evaluated) {
    PAIR("crop_pct", vt_ckpt_double_text(m->eval_crop_pct, t[5], sizeof t[5]));
    PAIR("crop_mode", m->eval_squash ? "squash" : "center");
    PAIR("interpolation", vt_ckpt_interp_name(m->eval_interp));
  }
  if (!m->jpeg_reduce) PAIR("vit3d_jpeg_reduce", "0");  // (given only where it is off)
#undef PAIR
  fm->n = n;
}

int vt_ckpt_parse_rgb(const char *s, float v[3], int std) {
  for (int i = 0; i < 3; i++) {
    char *end;
    v[i] = strtof(s, &end);
    if (end == s || !(fabsf(v[i]) < 1e6f) || (std && !(v[i] >= 1e-6f))) return 0;
    while (isspace((unsigned char)*end)) end++;
    if (*end != (i < 2 ? ',' : '\0')) return 0;
    s = end + 1;
  }
  return 1;
}

int vt_ckpt_file_meta_parse(vt_ckpt_manifest *m, const char *mean, const char *std,
                            const char *crop_pct, const char *crop_mode, const char *interp,
                            char *err, size_t errlen) {
  if (!mean) return 0;
  if (!vt_ckpt_parse_rgb(mean, m->mean, 0) || !std || !vt_ckpt_parse_rgb(std, m->std, 1)) {
    snprintf(err, errlen, "its metadata's mean \"%.40s\" and std \"%.40s\" are not three "
             "numbers each below 1e6 in size (the std's at least 1e-6)", mean,
             std ? std : "(absent)");
    return -1;
  }
  m->norm_recorded = 1, m->evaluated = 0;
  if (!crop_pct && !crop_mode && !interp) return 1;  // (its run never evaluated)
  char *end = NULL;
  m->eval_crop_pct = crop_pct ? strtod(crop_pct, &end) : 0;
  m->eval_squash = crop_mode && !strcmp(crop_mode, "squash");
  m->eval_interp = -1;
  for (int i = 0; i < 3; i++)
    if (interp && !strcmp(interp, vt_ckpt_interp_name(i))) m->eval_interp = i;
  if (!crop_pct || end == crop_pct || *end || !(m->eval_crop_pct > 0 && m->eval_crop_pct <= 1) ||
      !crop_mode || (!m->eval_squash && strcmp(crop_mode, "center")) || m->eval_interp < 0) {
    snprintf(err, errlen, "its metadata's crop_pct \"%.40s\", crop_mode \"%.20s\" and "
             "interpolation \"%.20s\" are not a number in (0, 1], center or squash, and "
             "sample, bilinear or bicubic", crop_pct ? crop_pct : "(absent)",
             crop_mode ? crop_mode : "(absent)", interp ? interp : "(absent)");
    m->evaluated = 0;
    return 2;
  }
  m->evaluated = 1;
  return 1;
}

// Every setting at its absent value (a manifest without them: the flags' defaults).
static void settings_absent(vt_ckpt_manifest *m) {
  for (int i = 0; i < N_SETTINGS; i++) {
    char *p = (char *)m + k_settings[i].off;
    if (k_settings[i].kind == 'f') *(float *)p = (float)k_settings[i].absent;
    else if (k_settings[i].kind == 'd') *(double *)p = k_settings[i].absent;
    else if (k_settings[i].kind == 's') p[0] = '\0';
    else *(int *)p = (int)k_settings[i].absent;
  }
}

// One setting's line where its value differs from the absent one ("" otherwise). Text is one
// word: '%', spaces, control and non-ASCII bytes as %XX (a regex may hold any of them).
static int setting_line(const vt_ckpt_manifest *m, const struct setting *s, char *buf,
                        size_t n) {
  const char *p = (const char *)m + s->off;
  if (s->always && !m->norm_recorded) return 0;  // (not known: a manifest of an older vit3d)
  if (s->kind == 'f') {
    const float v = *(const float *)p;
    return v == (float)s->absent && !s->always ? 0
                                               : snprintf(buf, n, "%s %.9g\n", s->key, (double)v);
  }
  if (s->kind == 'd') {
    const double v = *(const double *)p;
    return v == s->absent && !s->always ? 0 : snprintf(buf, n, "%s %.17g\n", s->key, v);
  }
  if (s->kind == 'i' || s->kind == 'e') {
    const int v = *(const int *)p;
    if (v == (int)s->absent && !s->always) return 0;
    if (s->kind == 'i') return snprintf(buf, n, "%s %d\n", s->key, v);
    return snprintf(buf, n, "%s %s\n", s->key, vt_ckpt_remode_name(v));
  }
  if (!p[0]) return 0;
  int k = snprintf(buf, n, "%s ", s->key);
  for (size_t i = 0; i < s->size && p[i] && k < (int)n; i++) {
    const unsigned char c = (unsigned char)p[i];
    k += c <= ' ' || c == '%' || c >= 127 ? snprintf(buf + k, n - (size_t)k, "%%%02X", c)
                                          : snprintf(buf + k, n - (size_t)k, "%c", c);
  }
  if (k < (int)n) k += snprintf(buf + k, n - (size_t)k, "\n");
  return k;
}

// A setting's value v from a manifest line into m: 1, or 0 where it is malformed or out of its
// range (text: a bad %XX, a NUL, or longer than its field).
static int setting_parse(const struct setting *s, const char *v, vt_ckpt_manifest *m) {
  char *p = (char *)m + s->off, *e;
  if (s->kind == 'f') {
    errno = 0;
    const float x = strtof(v, &e);  // (a subnormal value sets ERANGE: it reads back exactly)
    if (e == v || *e || (errno && !(isfinite(x) && x != 0)) || !(x >= s->lo && x <= s->hi))
      return 0;
    *(float *)p = x;
    return 1;
  }
  if (s->kind == 'd') {
    errno = 0;
    const double x = strtod(v, &e);
    if (e == v || *e || (errno && !(isfinite(x) && x != 0)) || !(x >= s->lo && x <= s->hi))
      return 0;
    *(double *)p = x;
    return 1;
  }
  if (s->kind == 'i') {
    errno = 0;
    const long x = strtol(v, &e, 10);
    if (e == v || *e || errno || x < (long)s->lo || x > (long)s->hi) return 0;
    *(int *)p = (int)x;
    return 1;
  }
  if (s->kind == 'e') {
    for (int i = 0; i < 3; i++)
      if (strcmp(v, k_remode[i]) == 0) return *(int *)p = i, 1;
    return 0;
  }
  size_t k = 0;
  for (; *v; k++) {
    if (k + 1 >= s->size) return 0;
    unsigned c = (unsigned char)*v;
    if (c == '%') {
      char hex[3] = {v[1], v[1] ? v[2] : 0, 0};
      if (!isxdigit((unsigned char)hex[0]) || !isxdigit((unsigned char)hex[1])) return 0;
      c = (unsigned)strtoul(hex, NULL, 16);
      if (c == 0) return 0;
      v += 2;
    }
    p[k] = (char)c;
    v++;
  }
  p[k] = '\0';
  return 1;
}

int vt_ckpt_mlp_hidden(const vt_ckpt_manifest *m) {
  return m->mlp_dim > 0 ? m->mlp_dim : (int)((float)m->width * m->mlp_ratio);
}

int vt_ckpt_manifest_format(const vt_ckpt_manifest *m, char *buf, size_t nbytes) {
  int k = snprintf(buf, nbytes,
                   "format vit3d-checkpoint-1\nstep %" PRId64 "\nstream_position %" PRId64
                   "\nglobal_batch %" PRId64 "\nadam_t %" PRId64 "\nlamb %d\nseed %" PRIu64
                   "\nimg_size %d\npatch_size %d\nwidth %d\ndepth %d\nheads %d\nmlp_ratio %.9g"
                   "\nnum_classes %d\nglobal_pool %d\naug_repeats %d\nlayer_scale %d"
                   "\nno_embed_class %d\nreg_tokens %d\nqk_norm %d\nqkv_bias %d\nparallel %d"
                   "\nclass_token %d\ngelu_tanh %d\npos_sincos %d\npre_logits %d\nmlp_dim %d"
                   "\npre_norm %d\nnorm_eps %.9g\nquick_gelu %d\ntp %d\npp %d\ndp %d"
                   "\nzero %d\nsequence_parallel %d\n",
                   m->step, m->stream_position, m->global_batch, m->adam_t, m->lamb, m->seed,
                   m->img_size,
                   m->patch_size, m->width, m->depth, m->heads, (double)m->mlp_ratio,
                   m->num_classes, m->global_pool, m->aug_repeats > 1 ? m->aug_repeats : 1,
                   m->layer_scale, m->no_embed_class, m->reg_tokens, m->qk_norm, m->qkv_bias,
                   m->parallel, m->class_token, m->gelu_tanh, m->pos_sincos, m->pre_logits,
                   m->mlp_dim, m->pre_norm, (double)m->norm_eps, m->quick_gelu, m->tp, m->pp,
                   m->dp, m->zero, m->sequence_parallel);
  if (m->has_optim && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k,
                  "lr %.17g\nmin_lr %.17g\nwarmup_lr %.17g\nweight_decay %.17g\nopt_eps %.17g"
                  "\nclip_grad %.17g\nlayer_decay %.17g\nwarmup_steps %" PRId64
                  "\ntotal_steps %" PRId64 "\nsched_epochs %d\nepoch_images %" PRId64
                  "\nwarmup_epochs %.17g\ncycle_epochs %.17g\nsched %d\n",
                  m->lr, m->min_lr, m->warmup_lr, m->weight_decay, m->opt_eps, m->clip_grad,
                  m->layer_decay, m->warmup_steps, m->total_steps, m->sched_epochs,
                  m->epoch_images, m->warmup_epochs, m->cycle_epochs, m->sched);
  if (m->frozen && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "frozen %d\nfrozen_hash %" PRId64 "\n",
                  m->frozen, m->frozen_hash);
  if (m->sgd && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "sgd %d\nmomentum %.17g\n", m->sgd, m->momentum);
  if (m->lars && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "lars %d\nmomentum %.17g\n", m->lars, m->momentum);
  if (m->drop_last && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "drop_last %d\n", m->drop_last);
  if (m->data_images && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "data_images %" PRId64 "\ndata_classes %" PRId64
                  "\n", m->data_images, m->data_classes);
  if (m->adam_t0 && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "adam_t0 %" PRId64 "\n", m->adam_t0);
  if (m->optim_from_layer && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "optim_from_layer %d\n", m->optim_from_layer);
  if (m->bad_images && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "bad_images %" PRId64 "\n", m->bad_images);
  for (int i = 0; i < N_SETTINGS && k < (int)nbytes; i++)
    k += setting_line(m, &k_settings[i], buf + k, nbytes - (size_t)k);
  for (int w = 0; w < 2; w++)  // %.17g: the doubles' very bits back
    if (m->spike_n[w] > 0 && k < (int)nbytes)
      k += snprintf(buf + k, nbytes - (size_t)k, "%s %" PRId64 " %.17g %.17g\n",
                    w ? "spike_norm" : "spike_loss", m->spike_n[w], m->spike_mean[w],
                    m->spike_var[w]);
  for (int i = 0; i < m->nfiles && k < (int)nbytes; i++)
    k += snprintf(buf + k, nbytes - (size_t)k, "file %s %" PRId64 " %08x\n", m->file[i],
                  m->file_nbytes[i], m->file_crc[i]);
  // The seal, the second line: the CRC-32 of every byte after it (a manifest cut short, or
  // one whose value was changed, is damage).
  const char *body = memchr(buf, '\n', (size_t)k);
  char seal[32];
  const int n = snprintf(seal, sizeof seal, "manifest_crc32 %08x\n",
                         body ? (unsigned)vt_crc32(0, body + 1, (size_t)(buf + k - body - 1)) : 0u);
  if (body && k + n < (int)nbytes) {
    memmove((char *)body + 1 + n, body + 1, (size_t)(buf + k - body - 1) + 1);
    memcpy((char *)body + 1, seal, (size_t)n);
    k += n;
  }
  return k;
}

// One "key value" line: the value as a whole number in [lo, hi].
static int int_value(const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

vt_status vt_ckpt_manifest_parse(const char *text, size_t nbytes, vt_ckpt_manifest *m, char *err,
                                 size_t errlen) {
  // optional: a key added after the format (older manifests lack it; the default stands); 2: one
  // of the optimizer's settings (with reals below: all or none).
  struct { const char *key; int64_t lo, hi; void *dst; int size, optional, seen; } keys[] = {
      {"step", 0, INT64_MAX / 2, &m->step, 8, 0, 0},
      {"stream_position", 0, INT64_MAX / 2, &m->stream_position, 8, 0, 0},
      {"global_batch", 1, 1 << 30, &m->global_batch, 8, 0, 0},
      {"adam_t", 0, INT64_MAX / 2, &m->adam_t, 8, 0, 0},
      {"adam_t0", 0, INT64_MAX / 2, &m->adam_t0, 8, 1, 0},  // absent: 0
      {"bad_images", 0, INT64_MAX / 2, &m->bad_images, 8, 1, 0},  // absent: 0
      {"lamb", 0, 1, &m->lamb, 4, 1, 0},  // absent: 0 (AdamW)
      {"sgd", 0, 2, &m->sgd, 4, 1, 0},    // absent: 0 (not SGD)
      {"lars", 0, 4, &m->lars, 4, 1, 0},  // absent: 0 (not LARS)
      {"img_size", 1, 1 << 16, &m->img_size, 4, 0, 0},
      {"patch_size", 1, 1 << 16, &m->patch_size, 4, 0, 0},
      {"width", 1, 1 << 20, &m->width, 4, 0, 0},
      {"depth", 1, 1 << 16, &m->depth, 4, 0, 0},
      {"heads", 1, 1 << 16, &m->heads, 4, 0, 0},
      {"num_classes", 1, 1 << 24, &m->num_classes, 4, 0, 0},
      {"global_pool", 0, 3, &m->global_pool, 4, 1, 0},  // absent: 0
      {"aug_repeats", 1, 64, &m->aug_repeats, 4, 1, 0},  // absent: 1
      {"drop_last", 0, 1, &m->drop_last, 4, 1, 0},      // absent: 0
      {"data_images", 0, INT64_MAX / 2, &m->data_images, 8, 1, 0},  // absent: 0 (unknown)
      {"data_classes", 0, UINT32_MAX, &m->data_classes, 8, 1, 0},
      {"layer_scale", 0, 1, &m->layer_scale, 4, 1, 0},  // absent: 0
      {"no_embed_class", 0, 1, &m->no_embed_class, 4, 1, 0},
      {"reg_tokens", 0, 256, &m->reg_tokens, 4, 1, 0},
      {"qk_norm", 0, 1, &m->qk_norm, 4, 1, 0},
      {"qkv_bias", 0, 1, &m->qkv_bias, 4, 1, 0},  // absent: 1
      {"parallel", 0, 1, &m->parallel, 4, 1, 0},
      {"class_token", 0, 1, &m->class_token, 4, 1, 0},  // absent: 1
      {"gelu_tanh", 0, 1, &m->gelu_tanh, 4, 1, 0},  // absent: 0
      {"pos_sincos", 0, 1, &m->pos_sincos, 4, 1, 0},  // absent: 0
      {"pre_logits", 0, 65536, &m->pre_logits, 4, 1, 0},  // absent: 0
      {"mlp_dim", 0, 1 << 20, &m->mlp_dim, 4, 1, 0},  // absent: 0 (from mlp_ratio)
      {"pre_norm", 0, 1, &m->pre_norm, 4, 1, 0},  // absent: 0
      {"quick_gelu", 0, 1, &m->quick_gelu, 4, 1, 0},  // absent: 0
      {"tp", 1, 1 << 20, &m->tp, 4, 0, 0},
      {"pp", 1, 1 << 20, &m->pp, 4, 0, 0},
      {"dp", 1, 1 << 20, &m->dp, 4, 0, 0},
      {"zero", 0, 1, &m->zero, 4, 0, 0},
      {"sequence_parallel", 0, 1, &m->sequence_parallel, 4, 0, 0},
      {"warmup_steps", 0, INT64_MAX / 2, &m->warmup_steps, 8, 2, 0},
      {"total_steps", 0, INT64_MAX / 2, &m->total_steps, 8, 2, 0},
      {"sched_epochs", 0, 1, &m->sched_epochs, 4, 2, 0},
      {"epoch_images", 0, INT64_MAX / 2, &m->epoch_images, 8, 2, 0},
      {"sched", 0, 2, &m->sched, 4, 1, 0},  // absent: 0 (cosine)
      {"frozen", 0, 1 << 24, &m->frozen, 4, 1, 0},  // absent: 0 (none)
      {"frozen_hash", 0, UINT32_MAX, &m->frozen_hash, 8, 1, 0},
      {"optim_from_layer", 0, 1 << 16, &m->optim_from_layer, 4, 1, 0},  // absent: 0 (all)
  };
  // The optimizer's settings (all optional, all or none): finite numbers.
  struct { const char *key; double *dst; int seen; } reals[] = {
      {"lr", &m->lr, 0}, {"min_lr", &m->min_lr, 0}, {"warmup_lr", &m->warmup_lr, 0},
      {"weight_decay", &m->weight_decay, 0}, {"opt_eps", &m->opt_eps, 0},
      {"clip_grad", &m->clip_grad, 0}, {"layer_decay", &m->layer_decay, 0},
      {"warmup_epochs", &m->warmup_epochs, 0}, {"cycle_epochs", &m->cycle_epochs, 0},
  };
  const int nreals = (int)(sizeof reals / sizeof reals[0]);
  const int nkeys = (int)(sizeof keys / sizeof keys[0]);
  memset(m, 0, sizeof *m);
  m->aug_repeats = 1, m->qkv_bias = 1, m->class_token = 1, m->norm_eps = 1e-6f;
  settings_absent(m);
  int format = 0, ratio = 0, seed = 0, line_no = 0, unknown_cut = 0, sealed = 0;
  const char *p = text, *end = text + nbytes;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    // (a line holds at most a setting's text: 255 bytes, each as %XX)
    char line[1024], key[64], v1[128], v2[64], v3[64], extra[8];
    line_no++;
    if (len >= sizeof line) FAIL(VT_ERR_INPUT, "manifest line %d is too long", line_no);
    memcpy(line, p, len);
    line[len] = '\0';
    p += len + (nl != NULL);
    if (len == 0) continue;
    int n = sscanf(line, "%63s %127s %63s %63s %7s", key, v1, v2, v3, extra);
    if (n < 2) FAIL(VT_ERR_INPUT, "manifest line %d: expected 'key value'", line_no);
    if (strcmp(key, "manifest_crc32") == 0) {  // the seal (absent in those before 2026-12-07)
      const uint32_t have = vt_crc32(0, p, (size_t)(end - p));  // (every byte after its line)
      char *e;
      const unsigned long said = strtoul(v1, &e, 16);
      if (n != 2 || strlen(v1) != 8 || *e || sealed)
        FAIL(VT_ERR_INPUT, "manifest line %d: malformed manifest_crc32", line_no);
      if (said != have)
        FAIL(VT_ERR_INPUT, "the manifest's text after its manifest_crc32 line has CRC-32 %08x "
             "and that line says %08lx: it was changed, cut short or damaged on disk",
             (unsigned)have, said);
      sealed = 1;
      continue;
    }
    int si = 0;
    while (si < N_SETTINGS && strcmp(k_settings[si].key, key) != 0) si++;
    if (si < N_SETTINGS) {  // (text as one word of any length: from the line, not v1)
      const char *v = line + strspn(line, " \t");
      v += strlen(key);
      v += strspn(v, " \t");
      if (v[strcspn(v, " \t\r")] != '\0' || !setting_parse(&k_settings[si], v, m))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad value for %s", line_no, key);
      m->recorded++;
      if (k_settings[si].always) m->norm_recorded = 1;
      continue;
    }
    if (strcmp(key, "format") == 0) {
      if (strcmp(v1, "vit3d-checkpoint-1") != 0)
        FAIL(VT_ERR_INPUT, "not a vit3d checkpoint manifest (format '%s')", v1);
      format = 1;
      continue;
    }
    if (strcmp(key, "file") == 0) {
      int64_t nb;
      unsigned crc;
      char *e;
      if (n != 4 || m->nfiles == VT_CKPT_MAX_FILES || strlen(v1) >= sizeof m->file[0] ||
          strchr(v1, '/') || v1[0] == '.' || !int_value(v2, 0, INT64_MAX / 2, &nb) ||
          strlen(v3) != 8 || (crc = (unsigned)strtoul(v3, &e, 16), *e))
        FAIL(VT_ERR_INPUT, "manifest line %d: malformed file entry", line_no);
      snprintf(m->file[m->nfiles], sizeof m->file[0], "%s", v1);
      m->file_nbytes[m->nfiles] = nb;
      m->file_crc[m->nfiles++] = crc;
      continue;
    }
    if (strcmp(key, "spike_loss") == 0 || strcmp(key, "spike_norm") == 0) {
      const int w = key[6] == 'n';
      int64_t count;
      char *e1 = v2, *e2 = v3;
      double mean = 0, var = 0;
      errno = 0;
      if (n == 4) mean = strtod(v2, &e1), var = strtod(v3, &e2);
      if (n != 4 || !int_value(v1, 1, INT64_MAX / 2, &count) || e1 == v2 || *e1 || e2 == v3 ||
          *e2 || errno || !isfinite(mean) || !isfinite(var) || var < 0)
        FAIL(VT_ERR_INPUT, "manifest line %d: malformed %s (want N MEAN VAR)", line_no, key);
      m->spike_n[w] = count, m->spike_mean[w] = mean, m->spike_var[w] = var;
      continue;
    }
    int r = 0, k = 0;
    while (r < nreals && strcmp(reals[r].key, key) != 0) r++;
    while (k < nkeys && strcmp(keys[k].key, key) != 0) k++;
    if (r == nreals && k == nkeys && strcmp(key, "momentum") != 0 && strcmp(key, "seed") != 0 &&
        strcmp(key, "mlp_ratio") != 0 && strcmp(key, "norm_eps") != 0) {
      // A newer vit3d's optional key, with whatever values (one that older binaries must not
      // skip comes with a new format line, refused above): skipped and named for the caller's
      // warning, so that its checkpoint still resumes, is inspected and exported here.
      // (the first names that fit, in order: a caller tells a cut list by its count)
      const size_t at = strlen(m->unknown);
      if (at + strlen(key) + 2 < sizeof m->unknown && !unknown_cut)
        snprintf(m->unknown + at, sizeof m->unknown - at, "%s%s", at ? " " : "", key);
      else unknown_cut = 1;
      m->nunknown++;
      continue;
    }
    if (n != 2) FAIL(VT_ERR_INPUT, "manifest line %d: expected 'key value'", line_no);
    if (strcmp(key, "momentum") == 0) {  // SGD's, beside the optimizer's other settings
      char *e;
      errno = 0;
      m->momentum = strtod(v1, &e);
      if (*e || errno || !(m->momentum >= 0 && m->momentum < 1))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad momentum", line_no);
      continue;
    }
    if (strcmp(key, "seed") == 0) {  // all of uint64 (--seed's range)
      char *e;
      errno = 0;
      m->seed = strtoull(v1, &e, 10);
      if (e == v1 || *e || errno || v1[0] == '-')
        FAIL(VT_ERR_INPUT, "manifest line %d: bad value '%s' for seed", line_no, v1);
      seed = 1;
      continue;
    }
    if (strcmp(key, "mlp_ratio") == 0) {
      char *e;
      m->mlp_ratio = strtof(v1, &e);
      if (*e || !(m->mlp_ratio > 0 && m->mlp_ratio < 1024))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad mlp_ratio", line_no);
      ratio = 1;
      continue;
    }
    if (strcmp(key, "norm_eps") == 0) {  // absent: timm's 1e-6
      char *e;
      m->norm_eps = strtof(v1, &e);
      if (*e || !(m->norm_eps > 0 && m->norm_eps <= 0.1f))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad norm_eps", line_no);
      continue;
    }
    if (r < nreals) {
      char *e;
      errno = 0;
      *reals[r].dst = strtod(v1, &e);
      if (*e || errno || !isfinite(*reals[r].dst))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad value '%s' for %s", line_no, v1, key);
      reals[r].seen = 1;
      continue;
    }
    int64_t x;
    if (!int_value(v1, keys[k].lo, keys[k].hi, &x))
      FAIL(VT_ERR_INPUT, "manifest line %d: bad value '%s' for %s", line_no, v1, key);
    if (keys[k].size == 8) *(int64_t *)keys[k].dst = x;
    else *(int *)keys[k].dst = (int)x;
    keys[k].seen = 1;
  }
  if (!format) FAIL(VT_ERR_INPUT, "not a vit3d checkpoint manifest (no format line)");
  for (int k = 0; k < nkeys; k++)
    if (!keys[k].seen && !keys[k].optional) FAIL(VT_ERR_INPUT, "manifest lacks '%s'", keys[k].key);
  if (!ratio) FAIL(VT_ERR_INPUT, "manifest lacks 'mlp_ratio'");
  if (!seed) FAIL(VT_ERR_INPUT, "manifest lacks 'seed'");
  int nseen = 0;
  for (int r = 0; r < nreals; r++) nseen += reals[r].seen;
  for (int k = 0; k < nkeys; k++) nseen += keys[k].seen && keys[k].optional == 2;
  m->has_optim = nseen > 0;
  if (nseen != 0 && nseen != nreals + 4)
    FAIL(VT_ERR_INPUT, "manifest has %d of the %d optimizer settings (lr ... cycle_epochs): all "
         "or none", nseen, nreals + 4);
  if (m->nfiles == 0) FAIL(VT_ERR_INPUT, "manifest lists no files");
  // (every vit3d wrote step x global_batch: another is a damaged or edited manifest)
  if (m->step > INT64_MAX / 2 / m->global_batch ||
      m->stream_position != m->step * m->global_batch)
    FAIL(VT_ERR_INPUT, "the manifest's stream_position %" PRId64 " is not its step %" PRId64
         " times its global_batch %" PRId64 ": it was changed or damaged", m->stream_position,
         m->step, m->global_batch);
  m->sealed = sealed;
  return VT_OK;
}

const char *vt_ckpt_opt_name(const vt_ckpt_manifest *m) {
  return m->lamb ? "lamb" : m->sgd == 2 ? "sgd" : m->sgd == 1 ? "momentum"
         : m->lars == 4 ? "nlarc" : m->lars == 3 ? "larc"
         : m->lars == 2 ? "nlars" : m->lars == 1 ? "lars" : "adamw";
}

const char *vt_ckpt_act_name(const vt_ckpt_manifest *m) {
  return m->quick_gelu ? "quick_gelu" : m->gelu_tanh ? "gelu_tanh" : "gelu";
}

int vt_ckpt_manifest_lists(const vt_ckpt_manifest *m, const char *file) {
  for (int i = 0; i < m->nfiles; i++)
    if (strcmp(m->file[i], file) == 0) return 1;
  return 0;
}
