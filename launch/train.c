// train.c: the training loop on a tp x pp x dp mesh: each rank runs its pipeline stage's
// schedule (forward and backward per micro-batch, activations and gradients to its neighbours),
// then the optimizer step reduces gradients over dp and updates. Rank 0 prints the progress line
// and writes metrics.jsonl with the global loss. A run goes through run_start (mesh, schedule,
// model, optimizer), run_open (checkpoint, data, files), run_steps (train_step.c's
// vt_train_step each step) and run_end; the options' checks are train_check.c's.
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include "train.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
#include "inspect.h"
#include "export.h"
#include "mesh.h"
#include "model.h"
#include "plan.h"
#include "report.h"
#include "savehook.h"
#include "schedule.h"
#include "stage.h"
#include "timeline.h"
#include "train_internal.h"
#include "watchdog.h"

// Whether another world rank picked this rank's GPU (by UUID, 4 x 32 bits per rank over the
// world): said by this rank, naming the other. Collective.
static int gpu_shared(vt_comm *world, const unsigned char id[16], const char *device) {
  const int n = vt_comm_size(world), me = vt_comm_rank(world);
  double *all = calloc((size_t)4 * n, sizeof *all);
  VT_CHECK(all != NULL, "out of host memory for %d ranks' GPU ids", n);
  for (int k = 0; k < 4; k++)
    all[4 * me + k] = (double)(((uint32_t)id[4 * k] << 24) | ((uint32_t)id[4 * k + 1] << 16) |
                               ((uint32_t)id[4 * k + 2] << 8) | id[4 * k + 3]);
  vt_comm_all_reduce_double(world, all, 4 * n, VT_REDUCE_SUM);
  int other = -1;
  const int known = all[4 * me] || all[4 * me + 1] || all[4 * me + 2] || all[4 * me + 3];
  for (int q = 0; known && q < n && other < 0; q++)  // (a driver without UUIDs: not checked)
    if (q != me && !memcmp(&all[4 * q], &all[4 * me], 4 * sizeof *all)) other = q;
  if (other >= 0)
    vt_log_error("--device cuda: world rank %d has the GPU this rank picked (%s): each rank "
                 "needs a GPU of its own; start at most as many ranks per node as it has GPUs, "
                 "or show each rank its own (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES)",
                 other, device);
  free(all);
  double shared = other >= 0;
  vt_comm_all_reduce_double(world, &shared, 1, VT_REDUCE_MAX);
  return shared != 0;
}

// This rank's backend: its device (the GPU of its local rank), described in device; NULL on
// every rank when any rank has none, or two share one (all stop together).
static const vt_backend *open_backend(const vt_train_options *o, vt_comm *world, char *device,
                                      size_t size) {
  unsigned char id[16];
  double picked =
      vt_backend_select(o->device, vt_comm_local_rank(world), device, size, id) == 0;
  const char *hint =
      o->device == VT_DEVICE_CUDA ? "; to train on the CPU instead, give --device cpu" : "";
  if (!picked)
    vt_log_error("--device %s: %s%s", o->device == VT_DEVICE_CUDA ? "cuda" : "cpu", device, hint);
  vt_comm_all_reduce_double(world, &picked, 1, VT_REDUCE_MIN);
  if (!picked) return NULL;
  if (o->device == VT_DEVICE_CUDA && vt_comm_size(world) > 1 && gpu_shared(world, id, device))
    return NULL;
  const char *why = NULL;
  const vt_backend *be = vt_backend_get(o->device, &why);
  double have = be != NULL;
  if (!be) vt_log_error("--device cuda is not available: %s%s", why, hint);
  char err[512];
  if (be && !vt_train_device_fits(o, err, sizeof err)) {
    vt_log_error("--device cuda (%s): %s", device, err);
    have = 0;
  }
  vt_comm_all_reduce_double(world, &have, 1, VT_REDUCE_MIN);
  return have ? be : NULL;
}

// --threads 0: the CPUs this rank may run on (its affinity: a Slurm task's --cpus-per-task, an
// mpirun binding, a container's cpuset; the host's online CPUs counted it, whatever the
// binding), shared among the ranks of its host whose set is the same (collective over world).
// The FNV-1a of this process's host name: the key of the ranks on one host.
static uint64_t host_key(void) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return vt_fnv64(VT_FNV_START, host, strlen(host));
}

static int default_threads(vt_comm *world) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (mine < 1) mine = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const int same = vt_comm_same_keys(world, vt_fnv64(host_key(), &set, sizeof set), NULL);
  const int per = mine / (same > 0 ? same : 1);
  return per > 0 ? per : 1;
}

// A TP group whose ranks are on more than one host (--tp above a node's ranks, or ranks placed
// across nodes out of the mesh's order) runs every block's all-reduces over the network: said
// once, by rank 0, with the groups' count (collective over world).
static void warn_tp_across_hosts(train_run *r) {
  if (r->mesh.tp_size == 1) return;
  int other = -1;
  vt_comm_same_keys(r->tp, host_key(), &other);
  double spans = other >= 0 && r->me.tp_rank == 0;  // (counted once per group)
  vt_comm_all_reduce_double(r->world, &spans, 1, VT_REDUCE_SUM);
  if (spans > 0 && r->world_rank == 0)
    vt_log_warn("%.0f of the %d tensor-parallel groups span more than one host: their "
                "all-reduces in every block go over the network. Give --tp a divisor of the "
                "ranks per node (with --mesh-order tp-dp-pp, the default, a group is --tp "
                "consecutive world ranks: place the ranks by node, as mpirun and srun do)",
                spans, r->world_size / r->mesh.tp_size);
}

// Start-up: the backend, the mesh and its communicators, the watchdog, this stage's schedule,
// the model and the optimizer; logs the run and prints the memory plan. 0 when the backend
// cannot open (logged; nothing is held then).
static int run_start(train_run *r) {
  const vt_train_options *o = &r->o;
  vt_comm *world = r->world;
  r->world_rank = vt_comm_rank(world), r->world_size = vt_comm_size(world);
  char device[320];
  if (r->o.threads == 0) r->o.threads = default_threads(world);
  if (r->o.loader_threads == 0) r->o.loader_threads = r->o.threads;
  const vt_backend *be = r->be = open_backend(o, world, device, sizeof device);
  if (!be) return 0;
  vt_backend_set_threads(o->threads);
  be->set_precision(o->precision);
  vt_mesh_order order;
  char err[1024];
  vt_mesh_order_parse(o->mesh_order, &order, err, sizeof err);
  VT_CHECK(vt_mesh_init(&r->mesh, o->tp, o->pp, o->dp, order, r->world_size, err,
                        sizeof err) == VT_OK,
           "%s", err);
  const vt_mesh *mesh = &r->mesh;
  const vt_mesh_coord me = r->me = vt_mesh_coords(mesh, r->world_rank);
  r->slow_limit = 10.0 * o->timeout_s;
  if (o->save_hook[0]) {  // a hook (rank 0's) does not outlive the trainer ending without it
    vt_watchdog_at_end(vt_save_hook_kill);
    atexit(vt_save_hook_kill);
  }
  // The watchdog before the axes' communicators: making them may hang too (NCCL's init).
  vt_watchdog_resumable(o->save_dir[0] != 0);
  vt_watchdog_start(world, o->timeout_s, me.tp_rank, me.pp_rank, me.dp_rank, device);
  vt_watchdog_phase("startup", 0, r->slow_limit);
  vt_comm_split_mesh(world, mesh, o->device, &r->tp, &r->pp, &r->dp);
  warn_tp_across_hosts(r);
  r->mem_base = vt_backend_device_memory_used(o->device);
  vt_report_placement(world, me, device, o->threads);
  vt_schedule_parse(o->pp_schedule, &r->kind);
  const vt_shard shard = {me.tp_rank, mesh->tp_size, me.pp_rank, mesh->pp_size,
                         o->sequence_parallel, o->pp_chunks, r->kind == VT_SCHEDULE_ZB_V};
  const int B = o->micro_batch, n_micro = r->n_micro = o->global_batch / (mesh->dp_size * B);
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
  r->pass_times = vt_train_pass_times(o->pp_pass_times, times);  // (validated)
  vt_schedule_spec spec = {
      r->kind, mesh->pp_size, o->eval_only ? mesh->pp_size : n_micro, o->pp_chunks,
      o->eval_only ? 0
                   : vt_frozen_vstages(c->depth, mesh->pp_size * o->pp_chunks,
                                       r->kind == VT_SCHEDULE_ZB_V, frozen_layers),
      {0, 0, 0}};
  if (r->pass_times == 2 && !o->eval_only)
    spec.costs = (vt_schedule_costs){times[0], times[1], times[2]};
  r->cap = vt_schedule_max_actions(&spec);
  r->acts = malloc((size_t)r->cap * sizeof *r->acts);
  r->unit_slot = malloc((size_t)spec.n_micro * spec.chunks * sizeof *r->unit_slot);
  r->unit_wset = malloc((size_t)spec.n_micro * spec.chunks * sizeof *r->unit_wset);
  VT_CHECK(r->acts && r->unit_slot && r->unit_wset, "out of host memory for the schedule");
  r->nacts = vt_schedule_build(&spec, me.pp_rank, r->acts, r->cap);
  const int assigned = vt_schedule_assign_slots(&spec, r->acts, r->nacts, r->unit_slot);
  r->nslots = o->eval_only ? 1 : assigned;
  const int wsets = vt_schedule_assign_weight_sets(&spec, r->acts, r->nacts, r->unit_wset);
  r->nwsets = o->eval_only ? 0 : wsets;

  vt_model *m = &r->m;
  vt_model_init(m, c, shard, r->tp, B, r->nslots, r->nwsets, o->recompute_blocks, frozen_layers,
                be, o->seed);
  m->drop_path = o->drop_path;
  m->drop_path_uniform = o->drop_path_uniform;
  m->proj_drop = o->proj_drop;
  m->attn_drop = o->attn_drop;
  m->pos_drop = o->pos_drop;
  m->head_drop = o->head_drop;
  m->mix = vt_mix_enabled(&o->mix);
  m->bce = o->bce_loss;
  if (o->bce_loss) m->bce_thresh = o->bce_thresh;
  if (r->world_rank == 0 && !o->eval_only) vt_report_recipe(o, &oc);
  if (r->world_rank == 0 && !o->transform.jpeg_reduce)  // (training and evaluation)
    vt_log_info("JPEGs decoded at full size (--jpeg-reduce 0: Pillow's pixels, no DCT-reduced "
                "decode)");
  vt_optimizer_init(&r->opt, &oc, be, &m->table, mesh->tp_size > 1 ? r->tp : NULL,
                    mesh->pp_size > 1 ? r->pp : NULL, mesh->dp_size > 1 ? r->dp : NULL, o->zero,
                    m->grad_first);
  if (r->world_rank == 0) {
    char table[8192], extras[256];
    vt_mesh_format(mesh, table, sizeof table);
    vt_config_extras(c, extras, sizeof extras);
    vt_log_info("model %s: img %d patch %d width %d depth %d heads %d mlp %d classes %d%s; "
                "%s backend, %s GEMMs, %d threads per rank; %.3g GFLOP per training image",
                c->name, c->img_size, c->patch_size, c->width, c->depth, c->heads,
                vt_cfg_mlp_hidden(c), c->num_classes, extras, be->name,
                o->precision == VT_PRECISION_BF16 ? "bf16" : "fp32", o->threads,
                vt_config_train_flops(c, m->frozen_layers) / 1e9);
    vt_log_info("mesh tp %d x pp %d x dp %d (%s), %s schedule (%d model chunks per stage), %d "
                "micro-batches of %d per DP rank, ZeRO-%d, sequence parallel %s\n%s",
                mesh->tp_size, mesh->pp_size, mesh->dp_size, o->mesh_order, o->pp_schedule,
                o->pp_chunks, n_micro, B, r->opt.zero, m->sp ? "on" : "off", table);
  }
  vt_plan_print(m, &r->opt, o->eval_only ? 1 : n_micro, r->mem_base, o);  // eval: a batch at a time
  // ZB-V's rank 0 loads the images at chunk 0 and keeps the labels for the head's chunk 1.
  const int data_chunk = m->has_embed ? 0 : m->has_head ? m->nchunks - 1 : 0;
  r->x = (vt_stage_ctx){.o = o, .m = m, .pp = r->pp, .pp_rank = me.pp_rank, .B = B, .spec = spec,
                        .unit_slot = r->unit_slot, .unit_wset = r->unit_wset,
                        .data_chunk = data_chunk,
                        .label_chunk = m->has_head ? m->nchunks - 1 : data_chunk,
                        .data = &r->data, .opt = &r->opt, .n_micro = n_micro, .ahead_step = -1};
  return 1;
}

// Whether the checkpoints in dirs a and b (each rank reads them) record the same model, the
// same normalisation and the same evaluation transform: an evaluation whose flags came from a
// that loaded b (a damaged) evaluates as a's flags say.
static int same_flags(const char *a, const char *b) {
  vt_ckpt_manifest ma, mb;
  char err[1200], fa[700], fb[700];
  if (vt_ckpt_manifest_read(a, &ma, err, sizeof err) != VT_OK ||
      vt_ckpt_manifest_read(b, &mb, err, sizeof err) != VT_OK)
    return 0;
  vt_inspect_model_flags(&ma, fa, sizeof fa);
  vt_inspect_model_flags(&mb, fb, sizeof fb);
  return !strcmp(fa, fb) && ma.norm_recorded == mb.norm_recorded &&
         !memcmp(ma.mean, mb.mean, sizeof ma.mean) && !memcmp(ma.std, mb.std, sizeof ma.std) &&
         ma.evaluated == mb.evaluated &&
         (ma.evaluated != 1 || (ma.eval_crop_pct == mb.eval_crop_pct &&
                                ma.eval_squash == mb.eval_squash &&
                                ma.eval_interp == mb.eval_interp));
}

// What the run reads and writes: --init-from, the output folders, --save's folder, the
// checkpoint resumed from, the data (--epochs made steps), the loss buffers, --check-log, the
// metrics and TensorBoard files. Collective: 0 on every rank when any failed (logged; r->rc
// says how to exit).
static int run_open(train_run *r) {
  const vt_train_options *o = &r->o;
  vt_comm *world = r->world;
  const int world_rank = r->world_rank, B = o->micro_batch, n_micro = r->n_micro;
  vt_model *m = &r->m;
  vt_stage_ctx *x = &r->x;
  const vt_backend *be = r->be;
  char err[1024];
  if (o->init_from[0] &&
      vt_model_init_from(m, world, o->init_from, o->eval_only, err, sizeof err) != VT_OK) {
    if (world_rank == 0) vt_log_error("--init-from: %s", err);
    r->rc = VT_EXIT_USAGE;
  }
  vt_optimizer_ema_reset(&r->opt, m->params);  // the EMA starts at the initial weights
  if (!r->rc && !vt_train_outputs_writable(o, world)) r->rc = VT_EXIT_USAGE;
  if (!r->rc && o->save_dir[0] && !o->eval_only &&
      (vt_ckpt_check_shared(o->save_dir, world, err, sizeof err) != VT_OK ||
       vt_ckpt_claim(o, world, err, sizeof err) != VT_OK)) {
    if (world_rank == 0) vt_log_error("--save: %s", err);
    r->rc = VT_EXIT_USAGE;
  }
  vt_status resumed = VT_OK;
  if (!r->rc && o->resume[0] &&
      (resumed = vt_ckpt_resume(o, m, &r->opt, world, &r->mesh, &r->start_step, &r->saved,
                                r->resumed_from, sizeof r->resumed_from, err,
                                sizeof err)) != VT_OK) {
    if (world_rank == 0)
      vt_log_error("cannot %s: %s", o->eval_only ? "load the checkpoint" : "resume", err);
    // (an interrupted save that could not be recovered for the disk: a runtime failure)
    r->rc = resumed == VT_ERR_IO ? VT_EXIT_FAILED : VT_EXIT_USAGE;
  }
  // vit3d eval that took its flags from the newest checkpoint of a --save folder and loaded an
  // older one, that one damaged: refused, its model and normalisation may be another's.
  struct stat sa, sb;
  if (o->eval_adopted[0] && resumed != VT_OK && world_rank == 0)  // (the refusal above)
    vt_log_info("the flags this evaluation was not given came from %s", o->eval_adopted);
  if (o->eval_adopted[0] && !r->rc &&
      (stat(o->eval_adopted, &sa) != 0 || stat(r->resumed_from, &sb) != 0 ||
       sa.st_dev != sb.st_dev || sa.st_ino != sb.st_ino) &&
      !same_flags(o->eval_adopted, r->resumed_from)) {
    if (world_rank == 0)
      vt_log_error("this evaluation took the model's and the normalisation's flags it was not "
                   "given from %s, which is damaged (above): name the checkpoint to evaluate "
                   "(--checkpoint SAVE/step-N), or give its flags", o->eval_adopted);
    r->rc = VT_EXIT_USAGE;
  }
  const int64_t start_step = r->start_step;
  // The steps skipped before the checkpoint: each one left the optimizer's count where it was.
  r->skipped = start_step > r->opt.t ? start_step - r->opt.t : 0;
  const vt_ckpt_manifest *saved = &r->saved;
  // (--init-from's weights are the run's where no checkpoint replaced them)
  if (!r->rc && o->init_from[0] && !r->resumed_from[0] && world_rank == 0)
    vt_ckpt_warn_init_from(o, o->init_from);
  // A run that evaluates nothing keeps recording the evaluation of the run it resumed, where that
  // one evaluated: its checkpoints then still say how their line of training was evaluated.
  // (rank 0's: it writes the manifests; the fields are unused without --val-data)
  // (evaluated -1, not known, is not carried on as a fact)
  if (!r->rc && !o->eval_only && !o->val_data[0] && saved->norm_recorded && saved->evaluated == 1) {
    r->o.transform.crop_pct = saved->eval_crop_pct;
    r->o.transform.eval_squash = saved->eval_squash;
    r->o.transform.eval_interp = (vt_interp)saved->eval_interp;
    r->o.eval_resumed = 1;
  }
  int ok = !r->rc && vt_data_open(&r->data, o, be, world, m->has_embed, m->has_head,
                                  r->me.tp_rank, r->mesh.tp_size, r->me.dp_rank,
                                  r->mesh.dp_size, n_micro, start_step, err,
                                  sizeof err) == VT_OK;
  if (!r->rc && !ok && world_rank == 0) vt_log_error("%s", err);
  // The stream position of a resumed run counts in the training set it was saved with; another
  // is allowed (a new dataset to go on with), but the stream then holds other images.
  int64_t numbered = 0;  // (the same shards, named by numbers when that run read them)
  if (ok && !o->eval_only)
    vt_data_identity(&r->data, &r->o.data_images, &r->o.data_classes, &numbered);
  if (ok && world_rank == 0 && start_step > 0 && !o->eval_only && saved->data_images > 0 &&
      o->data_images > 0 &&
      (saved->data_images != o->data_images ||
       (saved->data_classes != o->data_classes && saved->data_classes != numbered)))
    vt_log_warn("the checkpoint of step %lld was saved by a run whose --data held %lld images "
                "(class names %08llx) and this one's holds %lld (%08llx): from here the data "
                "stream holds other images than that run's", (long long)start_step,
                (long long)saved->data_images, (long long)saved->data_classes,
                (long long)o->data_images, (long long)o->data_classes);
  if (ok && !o->eval_only &&
      (o->epochs > 0 || o->warmup_epochs > 0 || o->eval_epochs > 0 || o->save_epochs > 0 ||
       o->sched_epochs))
    ok = vt_train_epochs_to_steps(&r->o, &r->opt, r->data.train_ds.count, world_rank);
  // A resumed run goes on with the schedule and optimizer it was saved with, unless told: its
  // lengths are known only now.
  if (ok && world_rank == 0 && start_step > 0 && !o->eval_only)
    ok = vt_train_resume_ok(o, saved, &r->opt.cfg, r->resumed_from);
  if (ok && world_rank == 0 && start_step > 0 && !o->eval_only)
    vt_log_info("%s", vt_ckpt_resumed_line());
  if (m->has_head) {
    x->step_losses = be->alloc((size_t)n_micro * B * sizeof(float));
    x->host_step_losses = malloc((size_t)n_micro * B * sizeof(float));
    VT_CHECK(x->step_losses && x->host_step_losses, "out of memory for %d x %d losses", n_micro,
             B);
  }
  if (x->label_chunk != x->data_chunk) {
    // (uploaded from: pinned on CUDA, as the loader's; load_batch's upload_wait guards a slot)
    x->stash_labels = be->host_alloc((size_t)n_micro * B * sizeof *x->stash_labels);
    x->stash_mix = be->host_alloc((size_t)n_micro * B * sizeof *x->stash_mix);
    VT_CHECK(x->stash_labels && x->stash_mix, "out of memory for %d x %d labels", n_micro, B);
  }
  // The reference first: it may be this run's own log, which a fresh start truncates.
  if (ok && world_rank == 0 && o->check_log[0] &&
      vt_checklog_open(&r->check, o->check_log, o->check_tol, err, sizeof err) != VT_OK) {
    vt_log_error("%s", err);
    ok = 0;
  }
  char own[1200];
  struct stat sc, so;
  snprintf(own, sizeof own, "%s/metrics.jsonl", o->log_dir);
  if (ok && world_rank == 0 && o->check_log[0] && o->log_dir[0] && start_step > 0 &&
      stat(o->check_log, &sc) == 0 && stat(own, &so) == 0 && sc.st_dev == so.st_dev &&
      sc.st_ino == so.st_ino)
    vt_log_warn("--check-log %s is this run's own log: it is checked as it was, and this run "
                "replaces its lines past step %lld with its own, so a later check against it "
                "compares with this run (copy it first to keep the reference)", o->check_log,
                (long long)start_step);
  if (ok && world_rank == 0 && o->log_dir[0])
    ok = vt_metrics_open(&r->metrics, o->log_dir, start_step);
  if (ok && world_rank == 0 && o->log_dir[0] && o->tensorboard && !o->eval_only) {
    r->tb = vt_tfevents_open(o->log_dir, start_step + 1, err, sizeof err);
    if (!r->tb) vt_log_warn("no TensorBoard events: %s", err);
  }
  double all_ok = ok;  // every rank learns whether any failed, so all stop together
  vt_comm_all_reduce_double(world, &all_ok, 1, VT_REDUCE_MIN);
  if (!all_ok) r->rc = r->rc ? r->rc : VT_EXIT_USAGE;
  return all_ok != 0;
}

// The steps from start_step to the run's end (--steps, --run-steps; none for vit3d eval).
static void run_steps(train_run *r) {
  const vt_train_options *o = &r->o;
  r->t_start = vt_seconds();
  r->report_first = r->start_step + 1;
  r->json_len = 64 + 48 * (size_t)r->world_size;
  r->ranks_json = calloc(r->json_len, 1);
  VT_CHECK(r->ranks_json != NULL, "out of host memory");
  vt_comm_counts_reset();
  r->end_step = o->steps;
  if (o->run_steps > 0 && r->start_step + o->run_steps < o->steps)
    r->end_step = r->start_step + o->run_steps;
  if (o->eval_only) r->end_step = r->start_step;
  if (r->world_rank == 0 && !o->eval_only && !r->rc && r->end_step < o->steps) {
    vt_log_info("--run-steps %lld: this invocation stops after step %lld of %lld%s",
                (long long)o->run_steps, (long long)r->end_step, (long long)o->steps,
                o->save_dir[0] ? ", saved there, to be resumed with --resume auto" : "");
    if (!o->save_dir[0])
      vt_log_warn("--run-steps without --save: nothing is saved to resume the rest of the %lld "
                  "steps from; give --save DIR", (long long)o->steps);
  }
  if (r->world_rank == 0 && o->eval_unused[0] && !r->rc)
    vt_log_warn("%s without --val-data: this run evaluates nothing; give --val-data DIR",
                o->eval_unused);
  if (r->world_rank == 0 && !o->eval_only && !r->rc) vt_report_schedule(&r->opt.cfg);
  if (r->world_rank == 0 && o->save_dir[0] && !o->eval_only && !r->rc)
    vt_ckpt_disk_plan(o, r->m.frozen_layers, r->start_step, r->end_step);
  vt_timeline tl = vt_timeline_window(o->trace_steps, r->start_step, r->end_step);
  char trace_path[600];
  snprintf(trace_path, sizeof trace_path, "%s/trace.json", o->log_dir);
  for (int64_t step = r->start_step; step < r->end_step; step++) {
    vt_timeline_before(&tl, r->world, r->be, step);
    vt_range_push(r->be, "step %lld", (long long)(step + 1));  // (a profiler's timeline)
    const int done = vt_train_step(r, step);
    vt_range_pop(r->be);
    vt_timeline_after(&tl, r->world, &r->mesh, step, done, trace_path);
    if (done) break;
  }
}

// The run's end: a checkpoint still being written, the files closed, vit3d eval's evaluation,
// the pipeline's idle report, --final-weights and --final-ema, --check-log's verdict, the last
// save hook.
static void run_end(train_run *r) {
  const vt_train_options *o = &r->o;
  vt_comm *world = r->world, *pp = r->pp;
  const int world_rank = r->world_rank;
  const vt_backend *be = r->be;
  vt_model *m = &r->m;
  vt_optimizer *opt = &r->opt;
  vt_data *data = &r->data;
  vt_stage_ctx *x = &r->x;
  char err[1024];
  vt_watchdog_phase("end", r->end_step, r->slow_limit);
  // A run stopped early (non-finite steps) may leave a checkpoint being written: finish it.
  if (o->save_dir[0] && vt_ckpt_wait(world) != VT_OK && !r->rc) r->rc = VT_EXIT_FAILED;
  free(r->ranks_json);
  vt_metrics_close(&r->metrics);
  vt_tfevents_close(r->tb);
  r->tb = NULL;  // (run_free closes what a failed run_open left open)
  // Rank 0's verdict sets the exit code only at the end: the exports below are collective.
  const int check_failed = world_rank == 0 && o->check_log[0] && vt_checklog_finish(&r->check);
  vt_checklog_free(&r->check);
  if (o->eval_only) {
    vt_eval_result ev =
        vt_evaluate(m, data, world, pp, r->me, o->logits_out[0] ? o->logits_out : NULL,
                    o->predictions[0] ? o->predictions : NULL);
    char left_out[64] = "";
    if (ev.bad > 0) snprintf(left_out, sizeof left_out, ", %lld bad left out", (long long)ev.bad);
    if (world_rank == 0 && ev.count == 0)
      printf("eval: no figures (no image scored%s)\n", left_out);
    else if (world_rank == 0)
      printf("eval: loss %.6f | top-1 %.4f%% | top-5 %.4f%% (%lld images%s%s)\n", ev.loss,
             100 * ev.top1, 100 * ev.top5, (long long)ev.count, left_out,
             o->eval_hflip ? ", each with its mirror" : "");
    if (ev.write_failed) r->rc = VT_EXIT_FAILED;  // (said where it failed)
  }
  if (r->mesh.pp_size > 1 && r->timed_s > 0) {  // (a GPU's passes timed on the device)
    double pass_ms[3], compute_s = 0.0;
    for (int k = 0; k < 3; k++) {
      pass_ms[k] = x->passes[k] > 0 ? x->pass_ms[k] / x->passes[k] : 0;
      compute_s += 1e-3 * x->pass_ms[k];
    }
    vt_report_pipeline_idle(world, &r->mesh, r->me, 1.0 - compute_s / r->timed_s, pass_ms,
                            &x->spec, o->model.depth, m->frozen_layers);
  }
  // The final weights of a run that finished; where only its last checkpoint failed (its
  // --save disk full), too: they may go to another disk, the one copy of its last steps.
  int final = !r->rc || (r->last_save_failed && r->rc == VT_EXIT_FAILED);
  if (!final && world_rank == 0 && (o->final_weights[0] || o->final_ema[0]))
    vt_log_warn("--final-weights and --final-ema not written: the run did not finish (exit %d)",
                r->rc);
  if (final && o->final_weights[0] &&
      vt_export_safetensors(m, m->params, world, &r->mesh, o->final_weights, err, sizeof err) !=
          VT_OK) {
    if (world_rank == 0) vt_log_error("%s", err);
    r->rc = VT_EXIT_FAILED, final = 0;
  }
  if (final && o->final_ema[0])  // in the weights' place (exported above, not needed after)
    vt_optimizer_ema_full(opt, m->params, m->params);
  if (final && o->final_ema[0] &&
      vt_export_safetensors(m, m->params, world, &r->mesh, o->final_ema, err, sizeof err) !=
          VT_OK) {
    if (world_rank == 0) vt_log_error("%s", err);
    r->rc = VT_EXIT_FAILED;
  }
  if (check_failed && !r->rc) r->rc = VT_EXIT_CHECK;
  if (world_rank == 0 && !r->rc && !o->eval_only && r->end_step < o->steps)
    vt_log_info("stopped after step %lld of %lld (--run-steps %lld)%s", (long long)r->end_step,
                (long long)o->steps, (long long)o->run_steps,
                o->save_dir[0] ? ": continue with --resume auto and the same --save" : "");
  // After the last collective: rank 0 waits for the last checkpoint's hook, without the
  // watchdog's limit (--save-hook-timeout still stops it).
  if (world_rank == 0 && o->save_hook[0]) {
    vt_watchdog_phase("waiting for the save hook", r->end_step, 0);
    vt_save_hook_wait(0);
    if (vt_save_hook_summary() && !r->rc) r->rc = VT_EXIT_FAILED;
  }
  be->upload_wait();  // no copy may still read the loader's buffers when they are freed
}

// What run_start and run_open made, freed (and the watchdog stopped).
static void run_free(train_run *r) {
  vt_stage_ctx *x = &r->x;
  vt_checklog_free(&r->check);
  vt_metrics_close(&r->metrics);
  vt_tfevents_close(r->tb);
  vt_data_close(&r->data);
  if (x->step_losses) r->be->free(x->step_losses);
  free(x->host_step_losses);
  if (x->stash_labels) r->be->host_free(x->stash_labels);
  if (x->stash_mix) r->be->host_free(x->stash_mix);
  vt_watchdog_stop();
  free(r->acts);
  free(r->unit_slot);
  free(r->unit_wset);
  vt_optimizer_free(&r->opt);
  vt_model_free(&r->m);
  vt_comm_free(r->tp);
  vt_comm_free(r->pp);
  vt_comm_free(r->dp);
}

int vt_train_run(const vt_train_options *o, vt_comm *world) {
  train_run *r = calloc(1, sizeof *r);
  VT_CHECK(r != NULL, "out of host memory");
  r->o = *o;
  r->world = world;
  int rc = VT_EXIT_USAGE;
  if (run_start(r)) {
    if (run_open(r)) {
      run_steps(r);
      run_end(r);
    }
    run_free(r);
    rc = r->rc;
  }
  free(r);
  return rc;
}
