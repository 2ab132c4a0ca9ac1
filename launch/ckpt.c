// ckpt.c: checkpoint saving on the mesh (ckpt.h), in the foreground or on a writer thread, and
// the checks before a run saves; resuming is ckpt_resume.c.
#include "ckpt.h"
#include "ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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
  if (w->st == VT_OK) {  // marked done, for a recovery where the commit does not come
    uint32_t shares[3];
    int64_t bytes[3];
    for (int f = 0; f < w->nfiles; f++) {
      shares[f] = w->files[f].share;  // (rank 0's has the head's)
      bytes[f] = w->rank == 0 ? w->files[f].layout.head_nbytes : 0;
      for (int64_t j = 0; j < w->files[f].nparts; j++) bytes[f] += w->files[f].parts[j].nbytes;
    }
    w->st = vt_ckpt_mark_part(w->tmp, w->rank, w->nfiles, shares, bytes, w->err,
                              sizeof w->err);
  }
  if (w->st != VT_OK) {  // the message travels to rank 0: say whose it is
    char mine[sizeof w->err];
    snprintf(mine, sizeof mine, "rank %d: %.990s", w->rank, w->err);
    memcpy(w->err, mine, sizeof mine);
  }
  atomic_store(&w->writing, 0);
  return NULL;
}

const char *const vt_ckpt_adam_state[2] = {"exp_avg.", "exp_avg_sq."};
const char *const vt_ckpt_sgd_state[1] = {"momentum_buffer."};

int64_t vt_ckpt_nbytes(const vt_train_options *o, int frozen_layers, int64_t files[3]) {
  static const char *const plain[1] = {""};
  const int one = vt_opt_state_buffers(o->optim.kind) == 1;
  files[0] = vt_model_file_nbytes(&o->model, plain, 1, 0);
  files[1] = vt_model_file_nbytes(&o->model, one ? vt_ckpt_sgd_state : vt_ckpt_adam_state, one ? 1 : 2,
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
  int64_t cand[4096];
  const int64_t existing = vt_ckpt_candidates(o->save_dir, cand, 4096);
  // The most on disk at once: all of them without --keep-last. With it, a commit keeps the
  // newest K and the older milestones (--keep-every); the counts only grow, so the last save
  // is the fullest moment: the checkpoints kept before it, plus the one it writes. The steps
  // in order are the folder's (older) then this run's saves; the milestones that count are
  // those older than the newest K + 1.
  const int64_t total = existing + saves, K = o->keep_last;
  int64_t at_once = total, milestones = 0;
  if (K > 0 && saves > 0) {
    int64_t index = 0;  // of the step in ascending order
    for (int64_t i = existing - 1; i >= 0; i--, index++)
      milestones += o->keep_every > 0 && index < total - (K + 1) && cand[i] % o->keep_every == 0;
    for (int64_t n = start_step + 1; n <= end_step; n++) {
      if (!(n == end_step || (o->save_interval > 0 && n % o->save_interval == 0))) continue;
      milestones += o->keep_every > 0 && index < total - (K + 1) && n % o->keep_every == 0;
      index++;
    }
    at_once = (total - 1 < K ? total - 1 : K) + milestones + 1;
  } else if (K > 0) {
    at_once = existing;
  }
  const int64_t more = at_once > existing ? at_once - existing : 0;
  struct statvfs fs;
  const int known = statvfs(o->save_dir, &fs) == 0;
  const double avail = known ? (double)fs.f_bavail * (double)fs.f_frsize : 0.0;
  char keeps[320], a[5][32];
  if (K > 0 && o->keep_every > 0)
    snprintf(keeps, sizeof keeps, "--keep-last %lld keeps the newest %lld and the older "
             "multiples of %lld (%lld of them while the last save is written), at most %lld at "
             "once with the one being written", (long long)K, (long long)K,
             (long long)o->keep_every, (long long)milestones, (long long)at_once);
  else if (K > 0)
    snprintf(keeps, sizeof keeps, "--keep-last %lld keeps the newest %lld, at most %lld at once "
             "with the one being written", (long long)K, (long long)K, (long long)at_once);
  else
    snprintf(keeps, sizeof keeps, "--keep-last 0 keeps all: %lld at once", (long long)at_once);
  vt_log_info("checkpoints: %s each (model %s, optimizer %s, EMA %s); this run saves %lld, "
              "%s (%lld there now); %s has %s free",
              size_str(each, a[0], 32), size_str((double)files[0], a[1], 32),
              size_str((double)files[1], a[2], 32), size_str((double)files[2], a[3], 32),
              (long long)saves, keeps, (long long)existing, o->save_dir,
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
    for (int f = 0; f < w->nfiles; f++) man->file_crc[f] = crc[f];
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
    vt_log_error("checkpoint of step %lld (written in the background) failed, any earlier one "
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
    if (!ok && errno == ENOTDIR) {  // (free space or permissions would not help)
      snprintf(err, errlen, "%s is a file, or a folder on its path is: give the path of a "
               "folder (made where missing)", save_dir);
      st = VT_ERR_INPUT;
    } else if (!ok) {
      snprintf(err, errlen, "cannot write in --save %s: %s; nothing in it was changed (its "
               "checkpoints and any interrupted save are kept): free space there or mend its "
               "permissions, and run again", save_dir, strerror(errno));
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

// The run's claim on --save: rank 0 holds an flock on SAVE/.vit3d-lock (with its host, pid and
// start time written in it) until it exits.
static int g_lock_fd = -1;

vt_status vt_ckpt_claim(const vt_train_options *o, vt_comm *world, char *err, size_t errlen) {
  vt_status st = VT_OK;
  if (vt_comm_rank(world) == 0 && g_lock_fd < 0) {
    char path[1100], host[256] = "?";
    snprintf(path, sizeof path, "%.1000s/.vit3d-lock", o->save_dir);
    gethostname(host, sizeof host - 1);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // (no save hook inherits it)
    if (fd < 0) {
      snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
      st = VT_ERR_IO;
    } else if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      char line[512], when[64] = "?";
      const time_t now = time(NULL);
      struct tm utc;
      if (gmtime_r(&now, &utc)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
      const int n = snprintf(line, sizeof line, "host %s, pid %d, since %s\n", host,
                             (int)getpid(), when);
      // (the holder's note, for another run's refusal: a courtesy, its failure harmless)
      const int noted = ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) == n;
      (void)noted;
      g_lock_fd = fd;
    } else if (errno == EWOULDBLOCK) {
      char holder[256] = "";
      const ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
      holder[n > 0 ? n : 0] = '\0';
      holder[strcspn(holder, "\n")] = '\0';
      snprintf(err, errlen, "another vit3d run (%s) is training with --save %s: two runs in one "
               "folder replace and rotate away each other's checkpoints; give this run another "
               "--save, or stop the other", holder[0] ? holder : "its details unreadable",
               o->save_dir);
      st = VT_ERR_INPUT;
      close(fd);
    } else {  // a file system without locks: said, not refused
      vt_log_warn("cannot lock %s (%s): make sure no other run trains with --save %s", path,
                  strerror(errno), o->save_dir);
      g_lock_fd = fd;
    }
    int64_t newest = -1, leftover = vt_ckpt_leftover(o->save_dir);
    if (st == VT_OK && !o->resume[0] && vt_ckpt_candidates(o->save_dir, &newest, 1) > 0) {
      snprintf(err, errlen, "--save %s holds checkpoints of an earlier run (the newest: "
               "step-%08lld) and this run does not resume: its saves would replace and rotate "
               "them away. Continue it with --resume auto, or give another --save (or move them "
               "away)", o->save_dir, (long long)newest);
      st = VT_ERR_INPUT;
    } else if (st == VT_OK && !o->resume[0] && leftover >= 0) {
      snprintf(err, errlen, "--save %s holds an interrupted save of an earlier run "
               "(.tmp-step-%08lld), which --resume auto recovers where every rank had written "
               "its part, and this run does not resume. Continue it with --resume auto, or give "
               "another --save (or remove it)", o->save_dir, (long long)leftover);
      st = VT_ERR_INPUT;
    }
  }
  return vt_comm_agree(world, st, err, errlen);
}

// Layer-wise lr decay off, however it was said (0 or 1), as 1.
static double layer_decay_of(const vt_optim_config *c) {
  return vt_layer_lr_scale(c, 0) < 1.0 ? c->layer_decay : 1.0;
}

void vt_ckpt_manifest_optim(vt_ckpt_manifest *man, const vt_optim_config *c,
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
  man->ema_decay = c->ema_decay, man->ema_warmup = c->ema_decay > 0 && c->ema_warmup;
  snprintf(man->freeze, sizeof man->freeze, "%s", c->freeze);
  snprintf(man->trainable, sizeof man->trainable, "%s", c->trainable);
}

void vt_ckpt_manifest_settings(vt_ckpt_manifest *man, const vt_train_options *o) {
  man->drop_path = o->drop_path, man->drop_path_uniform = o->drop_path > 0 && o->drop_path_uniform;
  man->proj_drop = o->proj_drop, man->attn_drop = o->attn_drop;
  man->pos_drop = o->pos_drop, man->head_drop = o->head_drop;
  const int mix = vt_mix_enabled(&o->mix);
  man->mixup = mix ? o->mix.mixup_alpha : 0, man->cutmix = mix ? o->mix.cutmix_alpha : 0;
  man->mix_prob = mix ? o->mix.prob : 1;
  man->mix_switch_prob = man->mixup > 0 && man->cutmix > 0 ? o->mix.switch_prob : 0.5f;
  man->reprob = o->erase.prob, man->remode = o->erase.prob > 0 ? (int)o->erase.mode : 2;
  // (each at its default where it does nothing: a manifest says what changes the run)
  const vt_transform_config *tc = &o->transform;
  man->hflip = tc->flip_prob;
  man->crop_scale_min = tc->simple_crop ? 0.08f : tc->scale_min;
  man->train_interp = (int)tc->train_interp;
  man->simple_crop = tc->simple_crop, man->three_augment = tc->three_aug;
  man->color_jitter = tc->three_aug ? tc->color_jitter : 0.3f;
  man->color_jitter_alone = tc->three_aug ? 0 : tc->color_jitter;
  man->jpeg_reduce = tc->jpeg_reduce;
  man->aa_interp = tc->ra.layers > 0 ? (int)tc->ra.interp : 1;
  memcpy(man->mean, tc->mean, sizeof man->mean);
  memcpy(man->std, tc->std, sizeof man->std);
  man->eval_crop_pct = tc->crop_pct, man->eval_squash = tc->eval_squash;
  man->eval_interp = (int)tc->eval_interp;
  man->norm_recorded = 1;
  man->evaluated = o->val_data[0] != '\0' || o->eval_resumed;
  man->aa[0] = '\0';
  const vt_randaug_config *ra = &o->transform.ra;
  if (ra->layers > 0)  // --aa's keys, each exactly (an infinite mstd as vt_randaug_parse's 101)
    snprintf(man->aa, sizeof man->aa, "rand-m%.9g-n%d-mstd%.9g-mmax%.9g-inc%d-p%.9g",
             (double)ra->magnitude, ra->layers,
             isinf(ra->magnitude_std) ? 101.0 : (double)ra->magnitude_std,
             (double)ra->magnitude_max, ra->increasing, (double)ra->prob);
  man->label_smoothing = o->label_smoothing, man->bce_loss = o->bce_loss;
  man->bce_thresh = o->bce_loss ? o->bce_thresh : -1;
  man->precision = o->precision == VT_PRECISION_BF16;
}

void vt_ckpt_manifest_model(vt_ckpt_manifest *man, const vt_vit_config *c) {
  man->img_size = c->img_size, man->patch_size = c->patch_size, man->width = c->width;
  man->depth = c->depth, man->heads = c->heads, man->num_classes = c->num_classes;
  man->global_pool = c->global_pool, man->layer_scale = c->layer_scale > 0;
  man->no_embed_class = c->no_embed_class, man->reg_tokens = c->reg_tokens;
  man->qk_norm = c->qk_norm, man->qkv_bias = !c->no_qkv_bias, man->parallel = c->parallel;
  man->class_token = !c->no_class_token, man->gelu_tanh = c->gelu_tanh;
  man->quick_gelu = c->quick_gelu, man->pos_sincos = c->pos_sincos;
  man->pre_logits = c->pre_logits, man->mlp_ratio = (float)c->mlp_ratio;
  man->mlp_dim = vt_cfg_mlp_hidden(c), man->pre_norm = c->pre_norm;
  man->norm_eps = vt_cfg_norm_eps(c);
}

vt_status vt_ckpt_save(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                       vt_comm *world, const vt_mesh *mesh, int64_t step, int64_t bad_images,
                       int wait, char *err, size_t errlen) {
  finish(world, NULL, 0);  // its failure is said there; this save goes on regardless
  ckpt_writer *w = &g_writer;
  memset(w, 0, sizeof *w);
  const int rank = vt_comm_rank(world);
  w->rank = rank, w->t_start = vt_seconds();
  // This rank's ranges of its table (one, or under ZeRO-1 a slice of the frozen prefix and its
  // shard), their values back to back in each of bufs: 0 the weights, 1 and 2 AdamW's (LAMB's)
  // two moments or 1 SGD's momentum, 3 the EMA. The moments of the leading wholly frozen layers
  // are zeros that optim.safetensors leaves out (the manifest's optim_from_layer): their ranges
  // (mlo, mcount) start at the first element it holds, the first of those layers' successors
  // (grad_first), skip[j] elements into range j.
  int64_t lo[2], count[2], mlo[2], mcount[2], skip[2], all = 0, mall = 0;
  const int nr = vt_optimizer_write_ranges(opt, lo, count);
  for (int j = 0; j < nr; j++) {
    skip[j] = m->grad_first - lo[j];
    skip[j] = skip[j] < 0 ? 0 : skip[j] > count[j] ? count[j] : skip[j];
    mlo[j] = lo[j] + skip[j], mcount[j] = count[j] - skip[j];
    all += count[j], mall += mcount[j];
  }
  const int one = vt_opt_state_buffers(opt->cfg.kind) == 1;  // one momentum buffer (SGD, LARS)
  for (int k = 0; k < 4; k++) {
    if ((k == 2 && one) || (k == 3 && !opt->ema)) continue;
    const int64_t n = k == 1 || k == 2 ? mall : all;
    w->bufs[k] = malloc((size_t)(n + 1) * sizeof(float));
    VT_CHECK(w->bufs[k] != NULL, "out of host memory for a checkpoint");
  }
  int64_t at = 0, mat = 0;  // range j's first element in the weights' and moments' buffers
  for (int j = 0; j < nr; at += count[j], mat += mcount[j], j++) {
    float *wj = w->bufs[0] + at, *ej = w->bufs[3] ? w->bufs[3] + at : NULL;
    m->be->to_host(wj, m->params + lo[j], (size_t)count[j] * sizeof(float));
    if (ej) memcpy(ej, wj, (size_t)skip[j] * sizeof(float));  // EMA = weights
    vt_optimizer_get_range(opt, mlo[j], mcount[j], wj + skip[j], w->bufs[1] + mat,
                           w->bufs[2] ? w->bufs[2] + mat : NULL, ej ? ej + skip[j] : NULL);
  }
  // The files and what each holds, under timm's names with a prefix: the weights, the
  // optimizer's state (torch.optim's names: AdamW's exp_avg and exp_avg_sq, SGD's
  // momentum_buffer) but for the leading wholly frozen layers (zeros: the manifest's
  // optim_from_layer), the EMA (whole, a model of its own).
  static const char *const names[3] = {"model.safetensors", "optim.safetensors",
                                       "ema.safetensors"};
  static const char *const plain[1] = {""};
  const char *const *prefixes[3] = {plain, one ? vt_ckpt_sgd_state : vt_ckpt_adam_state, plain};
  const int kinds[3] = {1, vt_opt_state_buffers(opt->cfg.kind), 1}, first[3] = {0, 1, 3};
  vt_status st = VT_OK;
  if (rank == 0) st = vt_ckpt_begin(o->save_dir, step, w->tmp, sizeof w->tmp, err, errlen);
  vt_comm_broadcast_bytes(world, w->tmp, sizeof w->tmp, 0);
  w->nfiles = opt->ema ? 3 : 2;
  for (int f = 0; f < w->nfiles; f++) {
    char path[1100];
    snprintf(path, sizeof path, "%.1000s/%s", w->tmp, names[f]);
    vt_model_file *file = &w->files[f];
    if (st == VT_OK)  // (the moments' ranges start skip elements on)
      st = vt_model_file_plan_ranges(file, m, path, prefixes[f],
                                     (const float *const *)w->bufs + first[f], kinds[f], nr,
                                     f == 1 ? mlo : lo, f == 1 ? mcount : count,
                                     f == 1 ? m->frozen_layers : 0, err, errlen);
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
  w->man = (vt_ckpt_manifest){
      .step = step, .stream_position = step * o->global_batch,
      .global_batch = o->global_batch, .adam_t = opt->t, .adam_t0 = opt->t0, .seed = o->seed,
      .bad_images = bad_images,
      .lamb = opt->cfg.kind == VT_OPT_LAMB,
      .sgd = opt->cfg.kind == VT_OPT_SGD ? 1 + opt->cfg.nesterov : 0,
      .lars = opt->cfg.kind == VT_OPT_LARS ? 1 + opt->cfg.nesterov + 2 * opt->cfg.trust_clip : 0,
      .momentum = vt_opt_state_buffers(opt->cfg.kind) == 1 ? opt->cfg.momentum : 0.0,
      .aug_repeats = o->aug_repeats, .drop_last = o->drop_last,
      .data_images = o->data_images, .data_classes = o->data_classes, .tp = mesh->tp_size,
      .pp = mesh->pp_size, .dp = mesh->dp_size, .zero = opt->zero, .sequence_parallel = m->sp,
      .optim_from_layer = m->frozen_layers};
  vt_ckpt_manifest_model(&w->man, &m->cfg);
  vt_ckpt_manifest_optim(&w->man, &opt->cfg, &o->model);
  vt_ckpt_manifest_settings(&w->man, o);
  for (int k = 0; k < 2; k++)  // the spike guard's statistics (the same on every rank)
    w->man.spike_n[k] = opt->spike.n[k], w->man.spike_mean[k] = opt->spike.mean[k],
    w->man.spike_var[k] = opt->spike.var[k];
  w->man.nfiles = w->nfiles;
  for (int f = 0; f < w->nfiles; f++) {  // (their CRC-32s at the commit)
    snprintf(w->man.file[f], sizeof w->man.file[f], "%s", names[f]);
    w->man.file_nbytes[f] = w->files[f].layout.file_nbytes;
  }
  // Rank 0's draft of the manifest, for a recovery where the commit does not come (checkpoint.h;
  // a failure ends the save as a failed write would).
  if (rank == 0) w->st = vt_ckpt_mark_draft(w->tmp, &w->man, w->err, sizeof w->err);
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
