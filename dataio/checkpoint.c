// checkpoint.c: checkpoint directories, manifests, CRC-32 and the atomic commit (checkpoint.h).
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL(status, ...) return (snprintf(err, errlen, __VA_ARGS__), (status))

// CRC-32 (zlib's, reflected polynomial 0xEDB88320) eight bytes per step ("slicing by 8"):
// t[0] is the byte-at-a-time table, t[k][i] the CRC of byte i followed by k zero bytes, so the
// eight bytes of a step are looked up independently and XORed. Several times the speed of the
// byte loop, which was most of a checkpoint's CPU time (0.78 of 2.2 s for 260 MB).
static uint32_t g_crc_table[8][256];

static void crc_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    g_crc_table[0][i] = c;
  }
  for (int k = 1; k < 8; k++)
    for (int i = 0; i < 256; i++) {
      const uint32_t c = g_crc_table[k - 1][i];
      g_crc_table[k][i] = g_crc_table[0][c & 0xFF] ^ (c >> 8);
    }
}

uint32_t vt_crc32(uint32_t crc, const void *data, size_t nbytes) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;  // the save thread may be the first caller
  pthread_once(&once, crc_tables);
  const uint32_t(*t)[256] = (const uint32_t(*)[256])g_crc_table;
  const uint8_t *p = data;
  crc = ~crc;
  for (; nbytes >= 8; p += 8, nbytes -= 8) {
    // The bytes in stream order, so this holds on any byte order.
    const uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 24);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; nbytes > 0; p++, nbytes--) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

vt_status vt_file_crc32(const char *path, int64_t *nbytes, uint32_t *crc, char *err,
                        size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) FAIL(VT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  const size_t cap = 1 << 20;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    FAIL(VT_ERR_IO, "out of memory reading %s", path);
  }
  size_t n;
  *nbytes = 0, *crc = 0;
  while ((n = fread(buf, 1, cap, f)) > 0) *crc = vt_crc32(*crc, buf, n), *nbytes += (int64_t)n;
  int bad = ferror(f);
  fclose(f);
  free(buf);
  if (bad) FAIL(VT_ERR_IO, "cannot read %s", path);
  return VT_OK;
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
  if (m->optim_from_layer && k < (int)nbytes)
    k += snprintf(buf + k, nbytes - (size_t)k, "optim_from_layer %d\n", m->optim_from_layer);
  for (int w = 0; w < 2; w++)  // %.17g: the doubles' very bits back
    if (m->spike_n[w] > 0 && k < (int)nbytes)
      k += snprintf(buf + k, nbytes - (size_t)k, "%s %" PRId64 " %.17g %.17g\n",
                    w ? "spike_norm" : "spike_loss", m->spike_n[w], m->spike_mean[w],
                    m->spike_var[w]);
  for (int i = 0; i < m->nfiles && k < (int)nbytes; i++)
    k += snprintf(buf + k, nbytes - (size_t)k, "file %s %" PRId64 " %08x\n", m->file[i],
                  m->file_nbytes[i], m->file_crc[i]);
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
      {"lamb", 0, 1, &m->lamb, 4, 1, 0},  // absent: 0 (AdamW)
      {"sgd", 0, 2, &m->sgd, 4, 1, 0},    // absent: 0 (not SGD)
      {"lars", 0, 4, &m->lars, 4, 1, 0},  // absent: 0 (not LARS)
      {"seed", 0, INT64_MAX, &m->seed, 8, 0, 0},
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
  int format = 0, ratio = 0, line_no = 0;
  const char *p = text, *end = text + nbytes;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char line[256], key[64], v1[128], v2[64], v3[64], extra[8];
    line_no++;
    if (len >= sizeof line) FAIL(VT_ERR_INPUT, "manifest line %d is too long", line_no);
    memcpy(line, p, len);
    line[len] = '\0';
    p += len + (nl != NULL);
    if (len == 0) continue;
    int n = sscanf(line, "%63s %127s %63s %63s %7s", key, v1, v2, v3, extra);
    if (n < 2) FAIL(VT_ERR_INPUT, "manifest line %d: expected 'key value'", line_no);
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
    if (n != 2) FAIL(VT_ERR_INPUT, "manifest line %d: expected 'key value'", line_no);
    if (strcmp(key, "momentum") == 0) {  // SGD's, beside the optimizer's other settings
      char *e;
      errno = 0;
      m->momentum = strtod(v1, &e);
      if (*e || errno || !(m->momentum >= 0 && m->momentum < 1))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad momentum", line_no);
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
    int r = 0;
    while (r < nreals && strcmp(reals[r].key, key) != 0) r++;
    if (r < nreals) {
      char *e;
      errno = 0;
      *reals[r].dst = strtod(v1, &e);
      if (*e || errno || !isfinite(*reals[r].dst))
        FAIL(VT_ERR_INPUT, "manifest line %d: bad value '%s' for %s", line_no, v1, key);
      reals[r].seen = 1;
      continue;
    }
    int k = 0;
    while (k < nkeys && strcmp(keys[k].key, key) != 0) k++;
    int64_t x;
    if (k == nkeys) FAIL(VT_ERR_INPUT, "manifest line %d: unknown key '%s'", line_no, key);
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
  int nseen = 0;
  for (int r = 0; r < nreals; r++) nseen += reals[r].seen;
  for (int k = 0; k < nkeys; k++) nseen += keys[k].seen && keys[k].optional == 2;
  m->has_optim = nseen > 0;
  if (nseen != 0 && nseen != nreals + 4)
    FAIL(VT_ERR_INPUT, "manifest has %d of the %d optimizer settings (lr ... cycle_epochs): all "
         "or none", nseen, nreals + 4);
  if (m->nfiles == 0) FAIL(VT_ERR_INPUT, "manifest lists no files");
  return VT_OK;
}

void vt_ckpt_step_dir(const char *save_dir, int64_t step, char *dir, size_t size) {
  snprintf(dir, size, "%s/step-%08" PRId64, save_dir, step);
}

int vt_mkdir_p(const char *dir) {
  char path[1024];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int sync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[1300];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  closedir(d);
  rmdir(dir);
}

vt_status vt_ckpt_begin(const char *save_dir, int64_t step, char *tmp_dir, size_t tmp_len,
                        char *err, size_t errlen) {
  if (vt_mkdir_p(save_dir) != 0) FAIL(VT_ERR_IO, "cannot create --save %s: %s", save_dir, strerror(errno));
  snprintf(tmp_dir, tmp_len, "%s/.tmp-step-%08" PRId64, save_dir, step);
  remove_dir(tmp_dir);
  if (mkdir(tmp_dir, 0755) != 0) FAIL(VT_ERR_IO, "cannot create %s: %s", tmp_dir, strerror(errno));
  return VT_OK;
}

void vt_ckpt_abandon(const char *tmp_dir) { remove_dir(tmp_dir); }

// The step-* directories of save_dir, newest first. Returns how many (at most cap).
static int list_steps(const char *save_dir, int64_t *steps, int cap) {
  DIR *d = opendir(save_dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    int64_t s;
    char tail;
    if (sscanf(e->d_name, "step-%" SCNd64 "%c", &s, &tail) == 1 && s >= 0) steps[n++] = s;
  }
  closedir(d);
  for (int i = 1; i < n; i++)  // insertion sort, newest first
    for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
      int64_t t = steps[j];
      steps[j] = steps[j - 1], steps[j - 1] = t;
    }
  return n;
}

void vt_ckpt_clean(const char *save_dir) {
  DIR *d = opendir(save_dir);
  if (!d) return;
  struct dirent *e;
  char path[1300];
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, ".tmp-", 5) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", save_dir, e->d_name);
    vt_log_warn("removing %s, left by an interrupted save", path);
    remove_dir(path);
  }
  closedir(d);
}

vt_status vt_ckpt_commit(const char *save_dir, const char *tmp_dir, const vt_ckpt_manifest *m,
                         int keep_last, int64_t keep_every, char *err, size_t errlen) {
  char path[1300], final_dir[1100], text[4096];
  for (int i = 0; i < m->nfiles; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp_dir, m->file[i]);
    if (sync_path(path) != 0) FAIL(VT_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
  }
  int len = vt_ckpt_manifest_format(m, text, sizeof text);
  snprintf(path, sizeof path, "%s/manifest.txt", tmp_dir);
  FILE *f = fopen(path, "wb");
  if (!f) FAIL(VT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  int ok = fwrite(text, 1, (size_t)len, f) == (size_t)len;
  ok = (fflush(f) == 0) && ok && fsync(fileno(f)) == 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok) FAIL(VT_ERR_IO, "writing %s failed: %s (is the disk full?)", path, strerror(errno));
  vt_ckpt_step_dir(save_dir, m->step, final_dir, sizeof final_dir);
  remove_dir(final_dir);  // a checkpoint of the same step from an earlier attempt
  if (sync_path(tmp_dir) != 0 || rename(tmp_dir, final_dir) != 0 || sync_path(save_dir) != 0)
    FAIL(VT_ERR_IO, "cannot move %s into place: %s", tmp_dir, strerror(errno));
  snprintf(path, sizeof path, "%s/latest.tmp", save_dir);
  f = fopen(path, "wb");
  ok = f && fprintf(f, "step-%08" PRId64 "\n", m->step) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (f) ok = (fclose(f) == 0) && ok;
  char latest[1100];
  snprintf(latest, sizeof latest, "%s/latest", save_dir);
  if (!ok || rename(path, latest) != 0 || sync_path(save_dir) != 0)
    FAIL(VT_ERR_IO, "cannot update %s: %s", latest, strerror(errno));
  if (keep_last > 0) {
    int64_t steps[4096];
    int n = list_steps(save_dir, steps, 4096);
    for (int i = keep_last; i < n; i++) {
      if (keep_every > 0 && steps[i] % keep_every == 0) continue;  // a milestone stays
      vt_ckpt_step_dir(save_dir, steps[i], final_dir, sizeof final_dir);
      remove_dir(final_dir);
    }
  }
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

vt_status vt_ckpt_check(const char *dir, vt_ckpt_manifest *m, int crc, char *err,
                        size_t errlen) {
  char path[1300], text[8192];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *f = fopen(path, "rb");
  if (!f) FAIL(VT_ERR_INPUT, "%s is not a complete checkpoint: no manifest.txt", dir);
  size_t n = fread(text, 1, sizeof text, f);
  fclose(f);
  if (n == sizeof text) FAIL(VT_ERR_INPUT, "%s: manifest.txt is too long", dir);
  char why[400];
  if (vt_ckpt_manifest_parse(text, n, m, why, sizeof why) != VT_OK)
    FAIL(VT_ERR_INPUT, "%s: %s", dir, why);
  for (int i = 0; i < m->nfiles; i++) {
    int64_t nb = 0;
    uint32_t sum = 0;
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, m->file[i]);
    if (crc) {
      if (vt_file_crc32(path, &nb, &sum, why, sizeof why) != VT_OK)
        FAIL(VT_ERR_INPUT, "%s is damaged: %s", dir, why);
    } else {
      if (stat(path, &sb) != 0)
        FAIL(VT_ERR_INPUT, "%s is damaged: cannot open %s: %s", dir, path, strerror(errno));
      nb = (int64_t)sb.st_size;
    }
    if (nb != m->file_nbytes[i])
      FAIL(VT_ERR_INPUT, "%s is damaged: %s has %" PRId64 " bytes, the manifest says %" PRId64,
           dir, m->file[i], nb, m->file_nbytes[i]);
    if (crc && sum != m->file_crc[i])
      FAIL(VT_ERR_INPUT, "%s is damaged: %s has CRC-32 %08x, the manifest says %08x", dir,
           m->file[i], sum, m->file_crc[i]);
  }
  return VT_OK;
}

vt_status vt_ckpt_verify(const char *dir, vt_ckpt_manifest *m, char *err, size_t errlen) {
  return vt_ckpt_check(dir, m, 1, err, errlen);
}

int vt_ckpt_candidates(const char *save_dir, int64_t *steps, int cap) {
  char latest[1100], name[128] = "";
  snprintf(latest, sizeof latest, "%s/latest", save_dir);
  FILE *f = fopen(latest, "rb");
  if (f) {
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\n")] = '\0';
  }
  int64_t first = -1;
  char tail;
  if (sscanf(name, "step-%" SCNd64 "%c", &first, &tail) != 1 || first < 0) first = -1;
  int n = 0;
  if (first >= 0 && cap > 0) steps[n++] = first;
  int64_t *all = malloc(4096 * sizeof *all);
  if (!all) return n;
  const int found = list_steps(save_dir, all, 4096);
  for (int i = 0; i < found && n < cap; i++)
    if (all[i] != first) steps[n++] = all[i];
  free(all);
  return n;
}

vt_status vt_ckpt_find_latest(const char *save_dir, char *dir, size_t dir_len, vt_ckpt_manifest *m) {
  char err[600];
  int64_t steps[4096];
  const int n = vt_ckpt_candidates(save_dir, steps, 4096);
  for (int i = 0; i < n; i++) {
    vt_ckpt_step_dir(save_dir, steps[i], dir, dir_len);
    if (vt_ckpt_verify(dir, m, err, sizeof err) == VT_OK) {
      if (i > 0) vt_log_warn("using the previous complete checkpoint %s", dir);
      return VT_OK;
    }
    vt_log_warn("%s; trying older checkpoints", err);
  }
  return VT_ERR_INPUT;
}

int vt_ckpt_is_checkpoint(const char *path) {
  char manifest[1200];
  snprintf(manifest, sizeof manifest, "%s/manifest.txt", path);
  return access(manifest, F_OK) == 0;
}

vt_status vt_ckpt_open(const char *path, char *dir, size_t dir_len, vt_ckpt_manifest *m,
                       char *err, size_t errlen) {
  if (vt_ckpt_is_checkpoint(path)) {
    snprintf(dir, dir_len, "%s", path);
    return vt_ckpt_verify(dir, m, err, errlen);
  }
  if (vt_ckpt_find_latest(path, dir, dir_len, m) == VT_OK) return VT_OK;
  snprintf(err, errlen, "%s holds no complete checkpoint (neither a manifest.txt nor a step-N "
           "folder that verifies)", path);
  return VT_ERR_INPUT;
}

vt_status vt_output_file_check(const char *path, const char *what, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return VT_OK;
  FAIL(VT_ERR_INPUT, "%s %s is a %s, not a file: vit3d writes a new file and renames it into "
       "place, which would replace it; give the path of a file", what, path,
       S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "pipe" : "device or socket");
}

vt_status vt_output_dir_check(const char *path, const char *what, char *err, size_t errlen) {
  char dir[1100], probe[1200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';  // "/file"
  else *slash = '\0';
  snprintf(probe, sizeof probe, "%s/.vit3d-write-check-%ld", dir, (long)getpid());
  vt_mkdir_p(dir);  // (where it cannot, the probe says why)
  const int fd = open(probe, O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0 && errno != EEXIST)  // (another process's probe of the same name: it can write)
    FAIL(VT_ERR_INPUT, "%s %s: cannot make files in %s (%s); give a path in a writable folder",
         what, path, dir, strerror(errno));
  if (fd >= 0) close(fd), unlink(probe);
  return VT_OK;
}

vt_status vt_copy_file_atomic(const char *src, const char *dst, char *err, size_t errlen) {
  if (vt_output_file_check(dst, "the output file", err, errlen) != VT_OK) return VT_ERR_INPUT;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", dst);
  FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
  if (!in || !out) {
    int e = errno;
    if (in) fclose(in);
    FAIL(VT_ERR_IO, "cannot %s: %s", in ? "create the output" : "read the checkpoint", strerror(e));
  }
  char buf[1 << 16];
  size_t n;
  int ok = 1;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  ok = ok && !ferror(in) && fflush(out) == 0 && fsync(fileno(out)) == 0;
  int e = errno;
  fclose(in);
  ok = (fclose(out) == 0) && ok;
  if (!ok || rename(tmp, dst) != 0) {
    remove(tmp);
    FAIL(VT_ERR_IO, "writing %s failed: %s (is the disk full?)", dst, strerror(e));
  }
  return VT_OK;
}
