// ckpt.c: checkpoint save and resume on the mesh (ckpt.h).
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "export.h"
#include "fault.h"
#include "partfile.h"
#include "safetensors.h"
#include "savehook.h"
#include "watchdog.h"

// The checkpoint being saved: every rank writes its part of each file (its slice of its local
// table: vit/export.h), then world rank 0 commits it once all have. At most one exists at a
// time; in the background each rank writes on a thread of its own while training goes on.
typedef struct {
  int active;          // files created, not yet committed or abandoned (the same on every rank)
  int background;      // committed later (--async-save): written on the thread, if it started
  int threaded;
  pthread_t thread;
  atomic_int writing;  // the thread has not finished this rank's part
  char save_dir[512], tmp[1100];
  char hook[1024];  // --save-hook, run by rank 0 after the commit
  double hook_limit;  // --save-hook-timeout (0: none)
  int keep_last, nfiles;
  int64_t keep_every;
  vt_ckpt_manifest man;  // world rank 0
  vt_model_file files[3];
  float *bufs[4];        // this rank's slice of the weights, two moments and the EMA
  int rank;        // world rank, for messages
  double t_start;  // CLOCK_MONOTONIC seconds when the save began
  vt_status st;
  char err[1024];
} ckpt_writer;

static ckpt_writer g_writer;

// This rank's part of every file (on the main thread, or on the writer's own: no MPI here).
static void *write_parts(void *arg) {
  ckpt_writer *w = arg;
  for (int f = 0; w->st == VT_OK && f < w->nfiles; f++) {
    if (vt_fault_at(VT_FAULT_SAVE_IO, w->man.step))  // test-only: a failing disk on this rank
      w->st = VT_ERR_IO, snprintf(w->err, sizeof w->err, "writing its part of %s "
                                  "failed: Input/output error (VT_FAULT save-io)", w->files[f].path);
    else
      w->st = vt_model_file_write(&w->files[f], w->err, sizeof w->err);
  }
  if (w->st != VT_OK) {  // the message travels to rank 0: say whose it is
    char mine[sizeof w->err];
    snprintf(mine, sizeof mine, "rank %d: %.990s", w->rank, w->err);
    memcpy(w->err, mine, sizeof mine);
  }
  atomic_store(&w->writing, 0);
  return NULL;
}

// The optimizer's state tensors per parameter in optim.safetensors, torch.optim's names:
// AdamW's (and LAMB's) two moments, SGD's (and LARS's) one momentum buffer.
static const char *const k_adam_state[2] = {"exp_avg.", "exp_avg_sq."};
static const char *const k_sgd_state[1] = {"momentum_buffer."};

int64_t vt_ckpt_nbytes(const vt_train_options *o, int frozen_layers, int64_t files[3]) {
  static const char *const plain[1] = {""};
  const int one = vt_opt_state_buffers(o->optim.kind) == 1;
  files[0] = vt_model_file_nbytes(&o->model, plain, 1, 0);
  files[1] = vt_model_file_nbytes(&o->model, one ? k_sgd_state : k_adam_state, one ? 1 : 2,
                                  frozen_layers);
  files[2] = o->optim.ema_decay > 0 ? files[0] : 0;
  return files[0] + files[1] + files[2];
}

// bytes as "12.3 MiB" below a GiB, else "1.2 GiB"
static const char *size_str(double bytes, char *buf, size_t n) {
  if (bytes < (double)(1 << 30)) snprintf(buf, n, "%.1f MiB", bytes / (1 << 20));
  else snprintf(buf, n, "%.1f GiB", bytes / (1 << 30));
  return buf;
}

void vt_ckpt_disk_plan(const vt_train_options *o, int frozen_layers, int64_t start_step,
                       int64_t end_step) {
  int64_t files[3];
  const double each = (double)vt_ckpt_nbytes(o, frozen_layers, files);
  // This invocation's saves: every save_interval-th step and its last.
  int64_t saves = 0;
  for (int64_t n = start_step + 1; n <= end_step; n++)
    saves += n == end_step || (o->save_interval > 0 && n % o->save_interval == 0);
  // At once: the kept ones and the one being written (--keep-last), or all of them.
  int64_t cand[4096];
  const int64_t existing = vt_ckpt_candidates(o->save_dir, cand, 4096);
  const int64_t at_once = o->keep_last > 0 ? o->keep_last + 1 : existing + saves;
  const int64_t more = at_once > existing ? at_once - existing : 0;
  struct statvfs fs;
  const int known = statvfs(o->save_dir, &fs) == 0;
  const double avail = known ? (double)fs.f_bavail * (double)fs.f_frsize : 0.0;
  char milestones[96] = "", a[5][32];
  if (o->keep_last > 0 && o->keep_every > 0)
    snprintf(milestones, sizeof milestones, " and every %lld-th step's",
             (long long)o->keep_every);
  vt_log_info("checkpoints: %s each (model %s, optimizer %s, EMA %s); this run saves %lld, "
              "%s keeps %lld at once%s (%lld there now); %s has %s free",
              size_str(each, a[0], 32), size_str((double)files[0], a[1], 32),
              size_str((double)files[1], a[2], 32), size_str((double)files[2], a[3], 32),
              (long long)saves, o->keep_last > 0 ? "--keep-last" : "--keep-last 0 (all)",
              (long long)at_once, milestones, (long long)existing, o->save_dir,
              known ? size_str(avail, a[4], 32) : "unknown space");
  if (known && (double)more * each > avail)
    vt_log_warn("--save %s: %lld more checkpoints of %s need %s and the disk has %s free: a "
                "save will fail when it fills (the previous checkpoint stays and training goes "
                "on); keep fewer (--keep-last) or free space", o->save_dir, (long long)more,
                size_str(each, a[0], 32), size_str((double)more * each, a[1], 32),
                size_str(avail, a[2], 32));
}

static void release(ckpt_writer *w) {
  for (int f = 0; f < 3; f++) vt_model_file_free(&w->files[f]);
  for (int k = 0; k < 4; k++) free(w->bufs[k]), w->bufs[k] = NULL;
  w->active = 0;
}

// Collective over world: waits for every rank's part, agrees, and has rank 0 commit the
// checkpoint from the ranks' checksums (or remove it). Returns the agreed status, with the
// first failing rank's message in err; a failure of one written in the background is also
// logged here by rank 0, with its step.
static vt_status finish(vt_comm *world, char *err, size_t errlen) {
  ckpt_writer *w = &g_writer;
  if (!w->active) return VT_OK;
  if (w->threaded) pthread_join(w->thread, NULL);
  vt_status st = vt_comm_agree(world, w->st, w->err, sizeof w->err);
  uint32_t crc[3];
  vt_model_file_crcs(world, w->files, w->nfiles, crc);
  const int64_t step = w->man.step;
  if (vt_comm_rank(world) == 0) {
    // Test-only fault switch: die between writing the files and committing them.
    if (st == VT_OK && vt_fault_at(VT_FAULT_KILL_IN_SAVE, step)) {
      vt_log_warn("VT_FAULT: killing this rank in the middle of the save of step %lld",
                  (long long)step);
      raise(SIGKILL);
    }
    vt_ckpt_manifest *man = &w->man;
    man->nfiles = w->nfiles;
    for (int f = 0; f < w->nfiles; f++) {
      const char *slash = strrchr(w->files[f].path, '/');
      snprintf(man->file[f], sizeof man->file[f], "%s", slash + 1);
      man->file_nbytes[f] = w->files[f].layout.file_nbytes, man->file_crc[f] = crc[f];
    }
    if (st == VT_OK && w->hook[0]) {  // the previous hook's checkpoint may be rotated away
      const char *phase = vt_watchdog_rename("waiting for the save hook");
      const double t = vt_seconds();
      vt_save_hook_wait(step);
      w->t_start += vt_seconds() - t;  // the save's time below leaves the wait out
      vt_watchdog_rename(phase);
    }
    if (st == VT_OK)
      st = vt_ckpt_commit(w->save_dir, w->tmp, man, w->keep_last, w->keep_every, w->err,
                          sizeof w->err);
    if (st != VT_OK) vt_ckpt_abandon(w->tmp);
    if (st == VT_OK) {
      double all = 0, mine = 0;
      for (int f = 0; f < w->nfiles; f++) {
        all += (double)w->files[f].layout.file_nbytes;
        for (int64_t j = 0; j < w->files[f].nparts; j++) mine += (double)w->files[f].parts[j].nbytes;
      }
      char dir[1100];
      vt_ckpt_step_dir(w->save_dir, step, dir, sizeof dir);
      vt_log_info("saved %s in %.2f s%s: this rank wrote %.1f of the checkpoint's %.1f MiB",
                  dir, vt_seconds() - w->t_start, w->background ? " (in the background)" : "",
                  mine / 1048576.0, all / 1048576.0);
      if (w->hook[0]) vt_save_hook_start(w->hook, w->save_dir, dir, step, w->hook_limit);
    }
  }
  st = vt_comm_agree(world, st, w->err, sizeof w->err);
  if (st != VT_OK && w->background && vt_comm_rank(world) == 0)
    vt_log_error("checkpoint of step %lld (written in the background) failed, the previous one "
                 "is intact: %s", (long long)step, w->err);
  if (err) snprintf(err, errlen, "%s", w->err);
  release(w);
  return st;
}

vt_status vt_ckpt_wait(vt_comm *world) { return finish(world, NULL, 0); }

int vt_ckpt_writing(void) { return g_writer.active && atomic_load(&g_writer.writing); }

int vt_ckpt_pending(void) { return g_writer.active; }

vt_status vt_ckpt_check_shared(const char *save_dir, vt_comm *world, char *err, size_t errlen) {
  // Rank 0 writes a file with a token in it; every rank must read the token back and be able to
  // open the file for writing.
  char path[1100], token[64] = "", seen[64] = "";
  vt_status st = VT_OK;
  if (vt_comm_rank(world) == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(token, sizeof token, "%ld.%09ld.%d", (long)ts.tv_sec, ts.tv_nsec, (int)getpid());
    snprintf(path, sizeof path, "%.1000s/.vit3d-shared-%s", save_dir, token);
    FILE *f = vt_mkdir_p(save_dir) == 0 ? fopen(path, "wb") : NULL;
    int ok = f && fputs(token, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    if (!ok) {
      snprintf(err, errlen, "cannot write in --save %s: %s", save_dir, strerror(errno));
      st = VT_ERR_IO;
    }
  }
  vt_comm_broadcast_bytes(world, token, sizeof token, 0);
  snprintf(path, sizeof path, "%.1000s/.vit3d-shared-%s", save_dir, token);
  if (st == VT_OK && vt_comm_rank(world) != 0) {
    FILE *f = fopen(path, "rb");
    const size_t n = f ? fread(seen, 1, sizeof seen - 1, f) : 0;
    if (f) fclose(f);
    const int fd = f ? open(path, O_WRONLY) : -1;
    if (fd >= 0) close(fd);
    if (!f || n != strlen(token) || strcmp(seen, token) != 0 || fd < 0) {
      char host[256] = "?";
      gethostname(host, sizeof host - 1);
      snprintf(err, errlen, "rank %d (host %s) cannot %s %s, which rank 0 has just written in "
               "--save %s%s%s. Every rank writes its part of each checkpoint and reads its part "
               "on resume: --save must be a folder that all ranks share (a network file "
               "system such as NFS, Lustre, FSx or EFS mounted at the same path on every node)",
               vt_comm_rank(world), host, !f ? "see" : fd < 0 ? "open for writing" : "read",
               path, save_dir, !f || fd < 0 ? ": " : "", !f || fd < 0 ? strerror(errno) : "");
      st = VT_ERR_INPUT;
    }
  }
  st = vt_comm_agree(world, st, err, errlen);
  if (vt_comm_rank(world) == 0 && token[0]) remove(path);
  return st;
}

// Layer-wise lr decay off, however it was said (0 or 1), as 1.
static double layer_decay_of(const vt_optim_config *c) {
  return vt_layer_lr_scale(c, 0) < 1.0 ? c->layer_decay : 1.0;
}

static void manifest_optim(vt_ckpt_manifest *man, const vt_optim_config *c,
                           const vt_vit_config *model) {
  man->has_optim = 1;
  vt_freeze_summary fz = {0};
  char err[320];
  if (c->freeze[0] || c->trainable[0])  // (validated at start-up)
    VT_CHECK(vt_freeze_summarize(c, model, &fz, err, sizeof err) == VT_OK, "%s", err);
  man->frozen = fz.tensors, man->frozen_hash = fz.names_hash;
  man->lr = c->lr, man->min_lr = c->min_lr, man->warmup_lr = c->warmup_lr;
  man->weight_decay = c->weight_decay, man->opt_eps = c->eps, man->clip_grad = c->clip_grad;
  man->layer_decay = layer_decay_of(c);
  man->warmup_steps = c->warmup_steps, man->total_steps = c->total_steps;
  man->sched_epochs = c->epoch_images > 0, man->epoch_images = c->epoch_images;
  man->sched = (int)c->sched;
  man->warmup_epochs = c->warmup_epochs, man->cycle_epochs = c->cycle_epochs;
}

vt_status vt_ckpt_save(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                       vt_comm *world, const vt_mesh *mesh, int64_t step, int wait, char *err,
                       size_t errlen) {
  finish(world, NULL, 0);  // its failure is said there; this save goes on regardless
  ckpt_writer *w = &g_writer;
  memset(w, 0, sizeof *w);
  const int rank = vt_comm_rank(world);
  w->rank = rank, w->t_start = vt_seconds();
  int64_t lo, count;
  vt_optimizer_write_range(opt, &lo, &count);
  // bufs: 0 the weights, 1 and 2 AdamW's (LAMB's) two moments or 1 SGD's momentum, 3 the EMA.
  // The moments of the leading wholly frozen layers are zeros that optim.safetensors leaves out
  // (the manifest's optim_from_layer): their buffers start at the first element it holds, the
  // first of those layers' successors (grad_first), skip elements into this rank's range.
  const int one = vt_opt_state_buffers(opt->cfg.kind) == 1;  // one momentum buffer (SGD, LARS)
  const int64_t skip = m->grad_first <= lo ? 0 : m->grad_first >= lo + count ? count
                                                                             : m->grad_first - lo;
  for (int k = 0; k < 4; k++) {
    if ((k == 2 && one) || (k == 3 && !opt->ema)) continue;
    const int64_t n = k == 1 || k == 2 ? count - skip : count;
    w->bufs[k] = malloc((size_t)(n + 1) * sizeof(float));
    VT_CHECK(w->bufs[k] != NULL, "out of host memory for a checkpoint");
  }
  m->be->to_host(w->bufs[0], m->params + lo, (size_t)count * sizeof(float));
  if (w->bufs[3]) memcpy(w->bufs[3], w->bufs[0], (size_t)skip * sizeof(float));  // EMA = weights
  vt_optimizer_get_range(opt, lo + skip, count - skip, w->bufs[0] + skip, w->bufs[1], w->bufs[2],
                         w->bufs[3] ? w->bufs[3] + skip : NULL);
  // The files and what each holds, under timm's names with a prefix: the weights, the
  // optimizer's state (torch.optim's names: AdamW's exp_avg and exp_avg_sq, SGD's
  // momentum_buffer) but for the leading wholly frozen layers (zeros: the manifest's
  // optim_from_layer), the EMA (whole, a model of its own).
  static const char *const names[3] = {"model.safetensors", "optim.safetensors",
                                       "ema.safetensors"};
  static const char *const plain[1] = {""};
  const char *const *prefixes[3] = {plain, one ? k_sgd_state : k_adam_state, plain};
  const int kinds[3] = {1, vt_opt_state_buffers(opt->cfg.kind), 1}, first[3] = {0, 1, 3};
  vt_status st = VT_OK;
  if (rank == 0) st = vt_ckpt_begin(o->save_dir, step, w->tmp, sizeof w->tmp, err, errlen);
  vt_comm_broadcast_bytes(world, w->tmp, sizeof w->tmp, 0);
  w->nfiles = opt->ema ? 3 : 2;
  for (int f = 0; f < w->nfiles; f++) {
    char path[1100];
    snprintf(path, sizeof path, "%.1000s/%s", w->tmp, names[f]);
    vt_model_file *file = &w->files[f];
    const int64_t from = f == 1 ? skip : 0;  // the moments' buffers start skip elements on
    if (st == VT_OK)
      st = vt_model_file_plan(file, m, path, prefixes[f],
                              (const float *const *)w->bufs + first[f], kinds[f], lo + from,
                              count - from, f == 1 ? m->frozen_layers : 0, err, errlen);
    if (st == VT_OK && rank == 0)
      st = vt_partfile_create(path, file->layout.head, file->layout.head_nbytes,
                              file->layout.file_nbytes, &file->share, err, errlen);
  }
  w->active = 1;  // from here on, finish() ends it (commits or removes it) on every rank
  st = vt_comm_agree(world, st, err, errlen);
  if (st != VT_OK) {
    if (rank == 0) vt_ckpt_abandon(w->tmp);
    release(w);
    return st;
  }
  snprintf(w->save_dir, sizeof w->save_dir, "%s", o->save_dir);
  snprintf(w->hook, sizeof w->hook, "%s", o->save_hook);
  w->hook_limit = o->save_hook_timeout;
  w->keep_last = o->keep_last, w->keep_every = o->keep_every;
  const vt_vit_config *c = &m->cfg;
  w->man = (vt_ckpt_manifest){
      .step = step, .stream_position = step * o->global_batch,
      .global_batch = o->global_batch, .adam_t = opt->t, .seed = o->seed,
      .lamb = opt->cfg.kind == VT_OPT_LAMB,
      .sgd = opt->cfg.kind == VT_OPT_SGD ? 1 + opt->cfg.nesterov : 0,
      .lars = opt->cfg.kind == VT_OPT_LARS ? 1 + opt->cfg.nesterov + 2 * opt->cfg.trust_clip : 0,
      .momentum = vt_opt_state_buffers(opt->cfg.kind) == 1 ? opt->cfg.momentum : 0.0,
      .img_size = c->img_size, .patch_size = c->patch_size, .width = c->width,
      .depth = c->depth, .heads = c->heads, .num_classes = c->num_classes,
      .global_pool = c->global_pool, .aug_repeats = o->aug_repeats, .drop_last = o->drop_last,
      .data_images = o->data_images, .data_classes = o->data_classes,
      .layer_scale = c->layer_scale > 0, .no_embed_class = c->no_embed_class,
      .reg_tokens = c->reg_tokens, .qk_norm = c->qk_norm, .qkv_bias = !c->no_qkv_bias,
      .parallel = c->parallel, .class_token = !c->no_class_token, .gelu_tanh = c->gelu_tanh,
      .quick_gelu = c->quick_gelu,
      .pos_sincos = c->pos_sincos, .pre_logits = c->pre_logits,
      .mlp_ratio = c->mlp_ratio, .mlp_dim = vt_cfg_mlp_hidden(c), .pre_norm = c->pre_norm,
      .norm_eps = vt_cfg_norm_eps(c), .tp = mesh->tp_size,
      .pp = mesh->pp_size, .dp = mesh->dp_size, .zero = opt->zero, .sequence_parallel = m->sp,
      .optim_from_layer = m->frozen_layers};
  manifest_optim(&w->man, &opt->cfg, &o->model);
  // The slices are this rank's own now: training may go on while they are written.
  atomic_store(&w->writing, 1);
  if (!wait && o->async_save) {
    // Every rank takes this branch, so all finish the save later together, even one whose
    // thread could not start (it writes its part now).
    w->background = 1;
    w->threaded = pthread_create(&w->thread, NULL, write_parts, w) == 0;
    if (!w->threaded) write_parts(w);
    return VT_OK;  // a later step, the next save or vt_ckpt_wait commits it and says how it went
  }
  write_parts(w);
  return finish(world, err, errlen);
}

typedef struct {
  char was[512], now[512];
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
  snprintf(a, sizeof a, "%.9g", was);
  snprintf(b, sizeof b, "%.9g", now);
  differs(d, was == now, flag, a, b);
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
  manifest_optim(&cur, now, model);
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
  char was[48], is[48];
  snprintf(was, sizeof was, "freezing %d tensors (names %08" PRIx64 ")", saved->frozen,
           saved->frozen_hash);
  snprintf(is, sizeof is, "freezing %d tensors (names %08" PRIx64 ")", cur.frozen,
           cur.frozen_hash);
  differs(&d, saved->frozen == cur.frozen && saved->frozen_hash == cur.frozen_hash,
          "--freeze/--trainable", was, is);
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
             "classes %d; pass the same sizes to resume it (--mlp-dim %d)",
             dir, man->img_size, man->patch_size, man->width, man->depth, man->heads,
             vt_ckpt_mlp_hidden(man), man->num_classes, vt_ckpt_mlp_hidden(man));
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
  if (!o->eval_only &&
      (man->global_batch != o->global_batch || man->stream_position != man->step * o->global_batch)) {
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

// Collective over world: the CRC-32 of each file the ranks read together, from their shares,
// against the manifest (rank 0's); a file they did not read whole (the EMA without
// --model-ema, the moments in an evaluation) rank 0 reads itself. VT_ERR_INPUT with "DIR is
// damaged: ..." in err on rank 0 when one differs; the verdict is every rank's.
static vt_status check_files(vt_comm *world, const char *dir, const vt_ckpt_manifest *man,
                             const vt_read_check *checks, char *err, size_t errlen) {
  uint32_t share[3];
  double bytes[3];
  for (int i = 0; i < 3; i++) share[i] = checks[i].share, bytes[i] = (double)checks[i].nbytes;
  vt_comm_all_xor(world, share, 3);
  vt_comm_all_reduce_double(world, bytes, 3, VT_REDUCE_SUM);
  vt_status st = VT_OK;
  for (int j = 0; vt_comm_rank(world) == 0 && st == VT_OK && j < man->nfiles; j++) {
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

vt_status vt_ckpt_resume(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                         vt_comm *world, const vt_mesh *mesh, int64_t *start_step,
                         vt_ckpt_manifest *saved, char *err, size_t errlen) {
  *start_step = 0;
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
  // with auto, newest first, as vit3d inspect reads one, but none is an error, and nothing in it
  // is cleaned up (a run may be saving there now).
  int64_t cand[4096];
  int ncand = 0, next = 0, skipped = 0;
  const char *folder = auto_mode ? o->save_dir : o->resume;
  int in_folder = auto_mode;  // (rank 0's finding, shared with its first proposal)
  if (rank0 && auto_mode) vt_ckpt_clean(o->save_dir);
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
    double found = rank0 ? -1 : -1e300;  // step of the chosen checkpoint; -1: none; -2: refused
    if (rank0) {
      if (in_folder) {
        char why[600];
        while (found < 0 && next < ncand) {
          vt_ckpt_step_dir(folder, cand[next++], dir, sizeof dir);
          if (vt_ckpt_check(dir, &man, 0, why, sizeof why) == VT_OK) found = (double)man.step;
          else vt_log_warn("%s; trying older checkpoints", why), skipped++;
        }
        if (found < 0 && auto_mode)
          vt_log_info("--resume auto: no complete checkpoint in %s; starting from step 0",
                      o->save_dir);
        if (found < 0 && !auto_mode) {
          snprintf(err, errlen, "%s holds no complete checkpoint (its step-N folders are all "
                   "damaged or unfinished)", o->resume);
          found = -2;
        }
      } else {
        snprintf(dir, sizeof dir, "%s", o->resume);
        found = vt_ckpt_check(dir, &man, 0, err, errlen) == VT_OK ? (double)man.step : -2;
      }
      if (found >= 0 && check_manifest(o, &man, dir, err, errlen) != VT_OK) found = -2;
    }
    int has_ema = rank0 && found >= 0 && vt_ckpt_manifest_lists(&man, "ema.safetensors");
    double choice[5] = {found, rank0 && found >= 0 ? (double)man.adam_t : -1e300,
                        rank0 ? has_ema : -1e300,
                        rank0 && found >= 0 ? (double)man.optim_from_layer : -1e300,
                        rank0 ? in_folder : -1e300};
    vt_comm_all_reduce_double(world, choice, 5, VT_REDUCE_MAX);
    has_ema = choice[2] > 0;
    in_folder = choice[4] > 0;
    if (choice[0] == -2) {
      result = VT_ERR_INPUT;
      break;
    }
    if (choice[0] < 0) break;  // a fresh start
    if (in_folder) vt_ckpt_step_dir(folder, (int64_t)choice[0], dir, sizeof dir);
    else snprintf(dir, sizeof dir, "%s", o->resume);
    if (!rank0) {
      memset(&man, 0, sizeof man);
      man.step = (int64_t)choice[0];
      man.adam_t = (int64_t)choice[1];
      man.optim_from_layer = (int)choice[3];
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
    // The weights: vit3d eval --use-ema 1 evaluates the EMA in their place.
    static const char *const plain[1] = {""};
    const int wfile = o->use_ema ? 2 : 0;
    vt_status st = read_part(dir, k_files[wfile], &m->table, plain, &local[0], 1, 0, nbytes,
                             count[wfile], rank0, err, errlen);
    if (st == VT_OK && load_ema)
      st = read_part(dir, "ema", &m->table, plain, &local[3], 1, 0, nbytes, count[2], rank0,
                     err, errlen);
    // The moments: zeros where the file has none (an evaluation reads none; the layers before
    // optim_from_layer were frozen when it was saved).
    memset(local[1], 0, (size_t)total * sizeof(float));
    memset(local[2], 0, (size_t)total * sizeof(float));
    if (st == VT_OK && !o->eval_only) {
      // (SGD's older two-tensor layout predates optim_from_layer)
      const int one = (opt->cfg.kind == VT_OPT_SGD &&
                       (man.optim_from_layer > 0 || !sgd_adam_layout(dir, &m->table))) ||
                      opt->cfg.kind == VT_OPT_LARS;
      st = read_part(dir, "optim", &m->table, one ? k_sgd_state : k_adam_state, &local[1],
                     one ? 1 : 2, man.optim_from_layer, nbytes, count[1], rank0, err, errlen);
    }
    double bad[2] = {st != VT_OK, 0};  // a read failed; the checkpoint is damaged
    vt_comm_all_reduce_double(world, bad, 1, VT_REDUCE_MAX);
    if (bad[0]) {  // a damaged file (a header that does not parse) or an I/O error
      vt_ckpt_manifest again;
      char why[600];
      if (rank0 && vt_ckpt_verify(dir, &again, why, sizeof why) != VT_OK)
        bad[1] = 1, snprintf(err, errlen, "%s", why);
      vt_comm_all_reduce_double(world, bad + 1, 1, VT_REDUCE_MAX);
      if (!bad[1]) {
        if (st == VT_OK) snprintf(err, errlen, "another rank could not load %s", dir);
        result = VT_ERR_INPUT;
        break;
      }
    }
    if (bad[1] || check_files(world, dir, &man, checks, err, errlen) != VT_OK) {
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
    // Allowed (reshuffling after a loss spike is a known remedy), but no longer the same run.
    if (rank0 && !o->eval_only && man.seed != o->seed)
      vt_log_warn("%s was saved by a run with --seed %" PRIu64 " and this one has --seed %" PRIu64
                  ": from here the data order and the augmentations differ from that run's",
                  dir, man.seed, o->seed);
    if (rank0 && !o->eval_only && man.aug_repeats != o->aug_repeats)
      vt_log_warn("%s was saved by a run with --aug-repeats %d and this one has %d: the data "
                  "stream holds other images from here", dir, man.aug_repeats, o->aug_repeats);
    if (rank0 && !o->eval_only && man.drop_last != o->drop_last)
      vt_log_warn("%s was saved by a run with --drop-last %d and this one has %d: the epochs, "
                  "and so the data stream, differ from here", dir, man.drop_last, o->drop_last);
    m->be->to_device(m->params, local[0], (size_t)total * sizeof(float));
    vt_optimizer_set_state(opt, local[1], local[2], man.adam_t);
    if (load_ema) {
      vt_optimizer_set_ema(opt, local[3]);
    } else if (opt->ema) {
      vt_optimizer_ema_reset(opt, m->params);
      vt_log_info("%s has no EMA weights: the EMA starts from its weights", dir);
    } else if (has_ema && !o->eval_only) {
      vt_log_info("%s has EMA weights; without --model-ema they are not kept", dir);
    }
    *start_step = man.step;
    if (saved && rank0) *saved = man;
    vt_log_info("%s %s: %" PRId64 " steps done, data stream at sample %" PRId64
                " (saved on tp %d x pp %d x dp %d); this rank read %.1f of the checkpoint's %.1f MiB",
                o->eval_only ? "loaded" : "resumed from", dir, man.step, man.stream_position,
                man.tp, man.pp, man.dp, nbytes[0] / 1048576.0,
                nbytes[1] / 1048576.0);
    break;
  }
  for (int k = 0; k < 4; k++) free(local[k]);
  return result;
}
