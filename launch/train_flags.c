// train_flags.c: the flags of vit3d train, eval and plan (train_flags.h): the defaults, --help,
// parsing and the conversion of the flags' text into the options. The table itself is
// train_flags_model.c and train_flags_run.c.
#include "train_flags.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "dataset.h"
#include "fault.h"
#include "safetensors.h"
#include "train_flags_internal.h"

static const char *const kRunNames[] = {"train", "eval", "plan"};

// A refusal's message, kept for vt_train_flags_agree (one per process: the flags are parsed once).
static char g_refusal[900];
// The flags vt_train_flags_from_file took from a file's metadata ("--a --b "), and the file.
static char g_file_flags[512], g_file[256];

// Whether why names word as a whole word.
static int names_word(const char *why, const char *word) {
  const size_t len = strlen(word);
  for (const char *at = strstr(why, word); at; at = strstr(at + 1, word))
    if ((at == why || (!isalnum((unsigned char)at[-1]) && at[-1] != '-')) &&
        !isalnum((unsigned char)at[len]) && at[len] != '-' && at[len] != '_')
      return 1;
  return 0;
}

// The flags of g_file_flags that why names (as "--heads" or "heads"), "--a and --b" in list;
// the number of them.
static int file_flags_named(const char *why, char *list, size_t size) {
  int count = 0;
  list[0] = '\0';
  for (const char *p = g_file_flags, *sp; (sp = strchr(p, ' ')); p = sp + 1) {
    char flag[40];
    snprintf(flag, sizeof flag, "%.*s", (int)(sp - p), p);
    if (!names_word(why, flag) && !names_word(why, flag + 2)) continue;
    const size_t at = strlen(list);
    snprintf(list + at, size - at, "%s%s", count ? " and " : "", flag);
    count++;
  }
  return count;
}

int vt_train_flags_refuse(vt_comm *world, vt_run_mode mode, const char *why) {
  const int rank = vt_comm_rank(world);
  char flags[160], from[480] = "";
  const int named = file_flags_named(why, flags, sizeof flags);
  if (named)  // (the user gave none of these flags: say where they came from)
    snprintf(from, sizeof from, " (%s %s from the metadata of %.200s, which vit3d inspect "
             "prints: a flag given on the command line replaces the file's)", flags,
             named > 1 ? "are" : "is", g_file);
  if (rank == 0)
    snprintf(g_refusal, sizeof g_refusal, "vit3d %s: %s%s", kRunNames[mode], why, from);
  else snprintf(g_refusal, sizeof g_refusal, "vit3d %s (world rank %d): %s%s", kRunNames[mode],
                rank, why, from);
  return 2;
}

// Ranks parse the same arguments, but an @FILE or VT_FAULT is each rank's own: a rank that
// refused alone would leave the others waiting in the first collective, before any watchdog.
int vt_train_flags_agree(vt_comm *world, int rc) {
  const vt_status st = vt_comm_agree(world, rc == 2 ? VT_ERR_INPUT : VT_OK, g_refusal,
                                     sizeof g_refusal);
  if (st == VT_OK) return rc;
  if (vt_comm_rank(world) == 0) fprintf(stderr, "%s\n", g_refusal);
  return 2;
}

enum { MAX_FLAGS = 192 };  // the table has 132 rows

static size_t type_size(vt_opt_type type) {
  switch (type) {
    case VT_OPT_INT: return sizeof(int);
    case VT_OPT_I64: return sizeof(int64_t);
    case VT_OPT_U64: return sizeof(uint64_t);
    case VT_OPT_FLOAT: return sizeof(float);
    case VT_OPT_DOUBLE: return sizeof(double);
    default: return 0;
  }
}

// The parser's flags from the table's rows, each pointing into o or x; returns how many. A row
// whose type does not fit its destination would write past it: that is a fatal error.
static int flag_table(vt_opt opts[MAX_FLAGS], vt_train_text *x, vt_train_options *o) {
  const vt_train_flag *const parts[] = {vt_train_flags_model, vt_train_flags_run};
  int n = 0;
  for (int p = 0; p < 2; p++)
    for (const vt_train_flag *f = parts[p]; f->flag; f++) {
      VT_CHECK(n < MAX_FLAGS, "the flag table has room for %d flags", MAX_FLAGS);
      VT_CHECK(f->type == VT_OPT_STR || f->size == type_size(f->type),
               "%s: its destination is not of its type", f->flag);
      char *base = f->in_text ? (char *)x : (char *)o;
      opts[n++] = (vt_opt){f->flag, f->type, base + f->offset,
                           f->type == VT_OPT_STR ? f->size : 0, f->min, f->max, f->metavar,
                           f->help, f->choices};
    }
  return n;
}

static void train_defaults(vt_train_options *o) {
  memset(o, 0, sizeof *o);
  char err[256];
  vt_config_preset("vit-ti16", &o->model, err, sizeof err);
  snprintf(o->data, sizeof o->data, "synthetic");
  o->loader_threads = 0;
  o->decode_split = 1;
  o->prefetch = 2;
  o->max_image_pixels = 100000000;
  o->transform = vt_transform_defaults();
  o->transform.color_jitter = 0.3f;  // (3-Augment's, DeiT III's; alone only where given: derive)
  o->aug_repeats = 1;
  o->micro_batch = 8;
  o->global_batch = 0;
  o->steps = 100;
  o->optim = (vt_optim_config){.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = -1,
                               .total_steps = 100, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                               .momentum = 0.9f, .weight_decay = 0.05f, .clip_grad = 1.0f,
                               .layer_decay = 1.0f, .spike_window = 100};
  o->label_smoothing = 0.1f;
  snprintf(o->label_key, sizeof o->label_key, "%s", VT_LABEL_KEY);
  o->bce_thresh = -1.0f;  // soft BCE targets
  o->mix = (vt_mix_config){.mixup_alpha = 0, .cutmix_alpha = 0, .prob = 1, .switch_prob = 0.5f};
  o->seed = 0;
  o->device = VT_DEVICE_CPU;
  o->threads = 0;
  o->log_interval = 10;
  o->tensorboard = 1;
  o->tp = o->pp = 1;
  o->timeout_s = 600;
  o->plan_gpu_mem = 80;
  o->plan_node_gpus = 8;
  o->async_save = 1;
  o->max_nonfinite = 5;
  o->straggler_interval = 100;
  o->dp = 0;
  snprintf(o->mesh_order, sizeof o->mesh_order, "tp-dp-pp");
  snprintf(o->pp_schedule, sizeof o->pp_schedule, "1f1b");
  snprintf(o->pp_pass_times, sizeof o->pp_pass_times, "auto");
}

// --mean or --std (std set) into out.
static vt_status parse_triple(const char *flag, const char *s, float *out, int std, char *err,
                              size_t errlen) {
  float v[3];
  if (!vt_ckpt_parse_rgb(s, v, std)) {
    snprintf(err, errlen, "%s %s: give three numbers below 1e6 in size%s, separated by commas, "
             "like 0.5,0.5,0.5", flag, s, std ? " and at least 1e-6" : "");
    return VT_ERR_INPUT;
  }
  memcpy(out, v, sizeof v);
  return VT_OK;
}

static vt_interp interp_of(const char *name) {
  return !strcmp(name, "bicubic")    ? VT_INTERP_BICUBIC
         : !strcmp(name, "bilinear") ? VT_INTERP_BILINEAR
                                     : VT_INTERP_SAMPLE;
}

// Where flag last appears in argv (as "--flag VALUE" or "--flag=VALUE"), or -1.
static int last_at(int argc, char **argv, const char *flag) {
  const size_t n = strlen(flag);
  int at = -1;
  for (int i = 0; i < argc; i++)
    if (strncmp(argv[i], flag, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '=')) at = i;
  return at;
}

// The manifest of the checkpoint vit3d eval --checkpoint names (a --save folder: its newest
// whose manifest and the size of the weights it evaluates check; the CRC-32s are checked as
// they are read): 1, or 0 where there is none (the load then says why), -1 with err where it
// names one checkpoint that is damaged (refused before a model is built).
// Its folder goes to o->eval_adopted: the load that finds it damaged and takes an older one
// refuses the evaluation, whose flags were this one's (launch/train.c).
static int eval_manifest(vt_train_options *o, vt_ckpt_manifest *m, char *err, size_t errlen) {
  const char *path = strcmp(o->resume, "auto") == 0 ? o->save_dir : o->resume;
  if (!path[0]) return 0;
  int64_t steps[64];
  const int one = vt_ckpt_is_checkpoint(path);
  const int n = one ? 1 : vt_ckpt_candidates(path, steps, 64);
  for (int i = 0; i < n; i++) {
    char dir[1100];
    if (one) snprintf(dir, sizeof dir, "%s", path);
    else vt_ckpt_step_dir(path, steps[i], dir, sizeof dir);
    if (vt_ckpt_check(dir, m, 0, vt_ckpt_weights_file(o->use_ema), err, errlen) == VT_OK) {
      snprintf(o->eval_adopted, sizeof o->eval_adopted, "%s", dir);
      return 1;
    }
  }
  return one ? -1 : 0;
}

// The model's name: its preset's where the flags kept the preset's shape (another --img-size or
// --num-classes is a fine-tune of it), else "custom" (the start-up line named vit-ti16, the
// default, for a model whose sizes all came from flags or an --init-from file's metadata).
static void model_name(vt_vit_config *c) {
  vt_vit_config p;
  char err[160];
  if (vt_config_preset(c->name, &p, err, sizeof err) != VT_OK) return;
  if (p.patch_size != c->patch_size || p.width != c->width || p.depth != c->depth ||
      p.heads != c->heads || vt_cfg_mlp_hidden(&p) != vt_cfg_mlp_hidden(c))
    snprintf(c->name, sizeof c->name, "custom");
}

// vit3d eval --checkpoint: what the command line leaves out is the checkpoint's: without
// --model its model's flags (each size or variant flag given still counts), and its
// normalisation and, where its run evaluated, its evaluation transform (the flags given count:
// a difference from the run's is warned about). Returns 1 where it took any, -1 with err where
// the checkpoint named is damaged.
static int eval_adopt(int argc, char **argv, vt_train_options *o, char *err, size_t errlen) {
  vt_ckpt_manifest m;
  const int got = eval_manifest(o, &m, err, errlen);
  if (got <= 0) return got;
#define GIVEN(flag) (last_at(argc, argv, flag) >= 0)
  vt_vit_config *c = &o->model;
  const int model = !GIVEN("--model");
  if (model) {
    snprintf(c->name, sizeof c->name, "checkpoint");
    if (!GIVEN("--img-size")) c->img_size = m.img_size;
    if (!GIVEN("--patch-size")) c->patch_size = m.patch_size;
    if (!GIVEN("--width")) c->width = m.width;
    if (!GIVEN("--depth")) c->depth = m.depth;
    if (!GIVEN("--heads")) c->heads = m.heads;
    if (!GIVEN("--mlp-dim") && !GIVEN("--mlp-ratio")) c->mlp_dim = vt_ckpt_mlp_hidden(&m);
    if (!GIVEN("--num-classes")) c->num_classes = m.num_classes;
    if (!GIVEN("--global-pool")) c->global_pool = m.global_pool;
    if (!GIVEN("--class-token")) c->no_class_token = !m.class_token;
    if (!GIVEN("--layer-scale")) c->layer_scale = m.layer_scale ? 1e-6f : 0.0f;  // (loaded)
    if (!GIVEN("--no-embed-class")) c->no_embed_class = m.no_embed_class;
    if (!GIVEN("--reg-tokens")) c->reg_tokens = m.reg_tokens;
    if (!GIVEN("--qk-norm")) c->qk_norm = m.qk_norm;
    if (!GIVEN("--qkv-bias")) c->no_qkv_bias = !m.qkv_bias;
    if (!GIVEN("--parallel-blocks")) c->parallel = m.parallel;
    if (!GIVEN("--act")) c->gelu_tanh = m.gelu_tanh, c->quick_gelu = m.quick_gelu;
    if (!GIVEN("--pre-logits")) c->pre_logits = m.pre_logits;
    if (!GIVEN("--pos-embed")) c->pos_sincos = m.pos_sincos;
    if (!GIVEN("--pre-norm")) c->pre_norm = m.pre_norm;
    if (!GIVEN("--norm-eps")) c->norm_eps = m.norm_eps;
  }
  vt_transform_config *tc = &o->transform;
  if (m.norm_recorded && !GIVEN("--mean")) memcpy(tc->mean, m.mean, sizeof tc->mean);
  if (m.norm_recorded && !GIVEN("--std")) memcpy(tc->std, m.std, sizeof tc->std);
  if (!GIVEN("--jpeg-reduce")) tc->jpeg_reduce = m.jpeg_reduce;  // (1 where not recorded)
  if (m.norm_recorded && m.evaluated) {
    if (!GIVEN("--eval-crop-pct")) tc->crop_pct = m.eval_crop_pct;
    if (!GIVEN("--eval-crop-mode")) tc->eval_squash = m.eval_squash;
    if (!GIVEN("--eval-interpolation")) tc->eval_interp = (vt_interp)m.eval_interp;
  }
#undef GIVEN
  if (!model && !m.norm_recorded) o->eval_adopted[0] = '\0';  // (it took nothing)
  return model || m.norm_recorded;
}

// value when flag (a length in epochs) comes after steps_flag (the same length in steps), else
// 0: the later of the two counts, as flags after an @FILE do.
static double if_later(int argc, char **argv, const char *flag, const char *steps_flag,
                       double value) {
  return last_at(argc, argv, flag) > last_at(argc, argv, steps_flag) ? value : 0;
}

static int wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  return 0;
}

static void print_help(vt_run_mode mode, const vt_opt *opts, int n) {
  static const char *const what[] = {
      "Trains a ViT and prints a progress line per --log-interval steps.",
      "Evaluates a checkpoint (--checkpoint DIR) or weights (--init-from FILE) on "
      "--val-data; the flags are train's.",
      "Prints each pipeline stage's memory and traffic for the --tp --pp --dp mesh, or with "
      "--gpus N compares every mesh of N GPUs; allocates nothing; the flags are train's."};
  printf("usage: vit3d %s [flags] [@FILE ...]\n\n%s @FILE reads flags from FILE (words "
         "separated by spaces or lines, '#' comments; a recipe in docs/recipes.md); later "
         "flags win.\n\nflags [default]:\n", kRunNames[mode], what[mode]);
  vt_cli_help(stdout, opts, n);
}

// The words of x as the options' enums and switches, then the lists of numbers.
static vt_status convert_text(const vt_train_text *x, vt_train_options *o, char *err,
                              size_t errlen) {
  o->device = strcmp(x->device, "cuda") == 0 ? VT_DEVICE_CUDA : VT_DEVICE_CPU;
  // (vit3d plan --gpus sizes GPUs: their default too)
  o->precision = strcmp(x->precision, "bf16") == 0 ||
                         (!x->precision[0] && (o->device == VT_DEVICE_CUDA || o->plan_gpus > 0))
                     ? VT_PRECISION_BF16
                     : VT_PRECISION_FP32;
  // An H100/H200's dense bf16 peak, or its fp32 one (the fp32 GEMMs use no TF32)
  if (o->peak_tflops == 0 && o->device == VT_DEVICE_CUDA)
    o->peak_tflops = o->precision == VT_PRECISION_BF16 ? 989 : 67;
  o->bad_image_fail = strcmp(x->bad_image, "fail") == 0;
  // (opt_name is one of --opt's words)
  const char *opt = x->opt_name;
  const int larc = strcmp(opt, "larc") == 0 || strcmp(opt, "nlarc") == 0;
  const int lars = larc || strcmp(opt, "lars") == 0 || strcmp(opt, "nlars") == 0;
  o->optim.kind = strcmp(opt, "lamb") == 0    ? VT_OPT_LAMB
                  : strcmp(opt, "adamw") == 0 ? VT_OPT_ADAMW
                  : lars                      ? VT_OPT_LARS
                                              : VT_OPT_SGD;
  o->optim.nesterov = strcmp(opt, "sgd") == 0 || (lars && opt[0] == 'n');
  o->optim.trust_clip = larc;
  o->sched_epochs = strcmp(x->sched_on, "epochs") == 0;
  o->optim.sched = strcmp(x->sched, "linear") == 0     ? VT_SCHED_LINEAR
                   : strcmp(x->sched, "constant") == 0 ? VT_SCHED_CONSTANT
                                                       : VT_SCHED_COSINE;
  o->model.global_pool = strcmp(x->pool, "avg") == 0   ? 1
                         : strcmp(x->pool, "gap") == 0 ? 2
                         : strcmp(x->pool, "map") == 0 ? 3
                                                       : 0;
  o->model.no_class_token = !x->class_token;
  o->model.gelu_tanh = strcmp(x->act, "gelu_tanh") == 0;
  o->model.quick_gelu = strcmp(x->act, "quick_gelu") == 0;
  o->model.init_jax = strcmp(x->weight_init, "jax") == 0;
  o->transform.eval_squash = strcmp(x->eval_crop_mode, "squash") == 0;
  o->model.pos_sincos = strcmp(x->pos_embed, "sincos2d") == 0;
  o->model.no_qkv_bias = !x->qkv_bias;
  o->erase.mode = strcmp(x->remode, "const") == 0  ? VT_ERASE_CONST
                  : strcmp(x->remode, "rand") == 0 ? VT_ERASE_RAND
                                                   : VT_ERASE_PIXEL;
  if ((x->mean[0] &&
       parse_triple("--mean", x->mean, o->transform.mean, 0, err, errlen) != VT_OK) ||
      (x->std[0] && parse_triple("--std", x->std, o->transform.std, 1, err, errlen) != VT_OK))
    return VT_ERR_INPUT;
  o->transform.train_interp = interp_of(x->train_interp);
  o->transform.eval_interp = interp_of(x->eval_interp);
  // RandAugment's fill is the dataset's mean colour, as timm's img_mean.
  o->transform.ra = vt_randaug_defaults(o->transform.mean);
  o->transform.ra.interp =
      strcmp(x->aa_interp, "bilinear") == 0 ? VT_RA_BILINEAR : VT_RA_BICUBIC;
  if (x->aa[0] && vt_randaug_parse(x->aa, &o->transform.ra, err, errlen) != VT_OK)
    return VT_ERR_INPUT;
  return VT_OK;
}

// The lengths in epochs that count, and the defaults that follow from other flags.
static void derive(int argc, char **argv, const vt_train_text *x, vt_comm *world,
                   vt_train_options *o) {
  o->epochs = if_later(argc, argv, "--epochs", "--steps", x->epochs);
  o->warmup_epochs = if_later(argc, argv, "--warmup-epochs", "--warmup-steps", x->warmup_epochs);
  o->eval_epochs = if_later(argc, argv, "--eval-epochs", "--eval-interval", x->eval_epochs);
  o->save_epochs = if_later(argc, argv, "--save-epochs", "--save-interval", x->save_epochs);
  // --color-jitter's 0.3 is 3-Augment's: without it, the jitter (timm's) is on only where given.
  if (!o->transform.three_aug && last_at(argc, argv, "--color-jitter") < 0)
    o->transform.color_jitter = 0;
  // (not the transform's flags, which vit3d inspect's line gives every resume)
  static const char *const eval_flags[] = {"--eval-interval", "--eval-epochs", "--eval-hflip"};
  o->eval_unused[0] = '\0';
  const int trains = !o->eval_only && !o->plan_only && !o->val_data[0];
  for (size_t i = 0; trains && i < sizeof eval_flags / sizeof *eval_flags; i++)
    if (last_at(argc, argv, eval_flags[i]) >= 0)
      snprintf(o->eval_unused + strlen(o->eval_unused), sizeof o->eval_unused -
               strlen(o->eval_unused), "%s%s", o->eval_unused[0] ? " " : "", eval_flags[i]);
  // With --epochs the steps (and the default warmup) follow once the dataset is open.
  o->optim.total_steps = o->steps;
  if (o->optim.warmup_steps < 0 && o->epochs <= 0 && o->warmup_epochs <= 0)
    o->optim.warmup_steps = o->steps / 20;
  (void)world;  // (--threads 0 is resolved at start, after the ranks agree: train.c)
}

// vit3d plan --gpus N tries every mesh of N ranks: the flags that fix a mesh do not go with it,
// nor does the search's sizing go without it. Writes why into why, or leaves it empty.
static void check_search(int argc, char **argv, vt_run_mode mode, const vt_train_options *o,
                         char *why, size_t whylen) {
  const char *mesh_flag = vt_cli_find(argc, argv, "--tp")   ? "--tp"
                          : vt_cli_find(argc, argv, "--pp") ? "--pp"
                          : vt_cli_find(argc, argv, "--dp") ? "--dp"
                                                            : NULL;
  const int sizes = vt_cli_find(argc, argv, "--gpu-mem") || vt_cli_find(argc, argv, "--node-gpus");
  char err[512];
  why[0] = '\0';
  if ((sizes || vt_cli_find(argc, argv, "--gpus")) && mode != VT_RUN_PLAN)
    snprintf(why, whylen, "--gpus, --gpu-mem and --node-gpus are for vit3d plan");
  else if (sizes && o->plan_gpus == 0)
    snprintf(why, whylen, "--gpu-mem and --node-gpus size the search of --gpus N: give "
             "--gpus");
  else if (o->plan_gpus > 0 && mesh_flag)
    snprintf(why, whylen, "--gpus N tries every --tp, --pp and --dp: drop %s", mesh_flag);
  else if (o->plan_gpus > 0 && !o->global_batch)
    snprintf(why, whylen, "--gpus N compares meshes at one global batch: give "
             "--global-batch-size");
  else if (o->plan_gpus > 0 && vt_config_validate(&o->model, err, sizeof err) != VT_OK)
    snprintf(why, whylen, "bad model configuration: %.120s", err);
}

int vt_train_flags_from_file(int *argc, char ***argv, int eval) {
  static const char *const model_flags[] = {
      "--img-size", "--patch-size", "--width", "--depth", "--heads", "--mlp-dim", "--num-classes",
      "--global-pool", "--class-token", "--layer-scale", "--reg-tokens", "--no-embed-class",
      "--qk-norm", "--qkv-bias", "--parallel-blocks", "--act", "--pos-embed", "--pre-logits",
      "--pre-norm", "--norm-eps"};
  const int n = *argc;
  char **v = *argv, err[300];
  const char *path = vt_cli_find(n, v, "--init-from");
  vt_st_file f;
  // (an evaluation of a checkpoint takes the checkpoint's; a training run's resume compares the
  // checkpoint's model with the one the file's flags build, as its first start did)
  if (!path || vt_cli_find(n, v, "--checkpoint") || (eval && vt_cli_find(n, v, "--resume")) ||
      vt_safetensors_open(path, &f, err, sizeof err) != VT_OK)
    return 0;
  char *words[64];
  int k = 0;
#define ADD(w) (words[k++] = strdup(w))
  // The model's, as "--flag value" pairs, each of the known flags only (the file's text is not
  // trusted to name others) and not given here (--mlp-ratio given: not --mlp-dim).
  const char *model =
      vt_cli_find(n, v, "--model") ? NULL : vt_st_metadata(&f, "vit3d_model_flags");
  char text[1024], *save = NULL;
  snprintf(text, sizeof text, "%s", model ? model : "");
  for (char *w = strtok_r(text, " ", &save), *val; w && k + 2 <= 40;
       w = strtok_r(NULL, " ", &save)) {
    if (!(val = strtok_r(NULL, " ", &save))) break;
    int known = 0;
    for (size_t i = 0; i < sizeof model_flags / sizeof *model_flags; i++)
      known |= !strcmp(w, model_flags[i]);
    const int ratio = !strcmp(w, "--mlp-dim") && vt_cli_find(n, v, "--mlp-ratio");
    if (known && !ratio && !vt_cli_find(n, v, w)) ADD(w), ADD(val);
    const char *input = vt_st_metadata(&f, "input_size");  // (export writes "3,S,S" beside it)
    char want[48];
    snprintf(want, sizeof want, "3,%s,%s", val, val);
    if (!strcmp(w, "--img-size") && !vt_cli_find(n, v, w) && input && strcmp(input, want) &&
        vt_get_rank_tag().world_rank == 0)  // (every rank reads the file)
      vt_log_warn("--init-from %s: its metadata's vit3d_model_flags say --img-size %.20s and its "
                  "input_size %.40s: the model flags' is used (give --img-size to choose)",
                  path, val, input);
  }
  vt_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  const char *mean = vt_st_metadata(&f, "mean"), *std = vt_st_metadata(&f, "std");
  const int got = eval ? vt_ckpt_file_meta_parse(&m, mean, std, vt_st_metadata(&f, "crop_pct"),
                                                  vt_st_metadata(&f, "crop_mode"),
                                                  vt_st_metadata(&f, "interpolation"), err,
                                                  sizeof err)
                       : 0;
  if (got > 0) ADD("--mean"), ADD(mean), ADD("--std"), ADD(std);
  if (got == 1 && m.evaluated) {
    char pct[32];
    ADD("--eval-crop-pct"), ADD(vt_ckpt_double_text(m.eval_crop_pct, pct, sizeof pct));
    ADD("--eval-crop-mode"), ADD(m.eval_squash ? "squash" : "center");
    ADD("--eval-interpolation"), ADD(vt_ckpt_interp_name(m.eval_interp));
  }
  const char *reduce = vt_st_metadata(&f, "vit3d_jpeg_reduce");  // (the decode of its run's)
  if (eval && reduce && !strcmp(reduce, "0") && !vt_cli_find(n, v, "--jpeg-reduce"))
    ADD("--jpeg-reduce"), ADD("0");
#undef ADD
  vt_safetensors_close(&f);
  if (k == 0) return 0;
  snprintf(g_file, sizeof g_file, "%s", path);
  for (int i = 0; i < k; i += 2) {  // (words[i] is a flag, words[i + 1] its value)
    const size_t at = strlen(g_file_flags);
    snprintf(g_file_flags + at, sizeof g_file_flags - at, "%s ", words[i]);
  }
  char **all = malloc((size_t)(k + n + 1) * sizeof *all);
  VT_CHECK(all != NULL, "out of host memory");
  memcpy(all, words, (size_t)k * sizeof *all);
  memcpy(all + k, v, (size_t)n * sizeof *all);
  all[k + n] = NULL;
  free(v);  // (its words now all's)
  *argc = n + k, *argv = all;
  return k;
}

int vt_train_flags_parse(int argc, char **argv, vt_run_mode mode, vt_comm *world,
                         vt_train_options *o) {
  train_defaults(o);
  o->eval_only = mode == VT_RUN_EVAL;
  o->plan_only = mode == VT_RUN_PLAN;
  vt_train_text x = {.device = "cpu", .bad_image = "skip", .remode = "pixel",
                     .aa_interp = "bicubic", .pool = "token", .act = "gelu",
                     .pos_embed = "learn", .weight_init = "timm", .train_interp = "sample",
                     .eval_interp = "sample", .opt_name = "adamw", .sched_on = "steps",
                     .sched = "cosine", .eval_crop_mode = "center", .qkv_bias = 1,
                     .class_token = 1};
  char err[512], why[160];
  snprintf(x.model, sizeof x.model, "%s", o->model.name);
  // --model picks the preset first; the size flags then override its fields.
  const char *preset = vt_cli_find(argc, argv, "--model");
  if (preset && vt_config_preset(preset, &o->model, err, sizeof err) != VT_OK)
    return vt_train_flags_refuse(world, mode, err);
  vt_opt opts[MAX_FLAGS];
  const int n = flag_table(opts, &x, o);
  if (wants_help(argc, argv)) {
    if (vt_comm_rank(world) == 0) print_help(mode, opts, n);
    return 0;
  }
  if (vt_cli_parse(opts, n, argc, argv, err, sizeof err) != VT_OK ||
      vt_fault_init(vt_comm_rank(world), err, sizeof err) != 0 ||
      convert_text(&x, o, err, sizeof err) != VT_OK)
    return vt_train_flags_refuse(world, mode, err);
  model_name(&o->model);
  const int adopted =
      mode == VT_RUN_EVAL && o->resume[0] ? eval_adopt(argc, argv, o, err, sizeof err) : 0;
  if (adopted < 0) {  // (the checkpoint named is damaged: said before a model is built)
    char said[sizeof err + 300];
    snprintf(said, sizeof said, "%s; vit3d inspect %.200s says which of its files verify", err,
             o->resume);
    return vt_train_flags_refuse(world, mode, said);
  }
  if (adopted && vt_comm_rank(world) == 0)
    vt_log_info("the model, normalisation and evaluation transform the command line leaves out "
                "are the checkpoint's (vit3d inspect prints them)");
  derive(argc, argv, &x, world, o);
  check_search(argc, argv, mode, o, why, sizeof why);
  return why[0] ? vt_train_flags_refuse(world, mode, why) : -1;
}
