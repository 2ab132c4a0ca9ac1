// main.c: the vit3d program: subcommand dispatch and the flags of `vit3d train`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "dataset.h"
#include "fault.h"
#include "health.h"
#include "image.h"
#include "inspect.h"
#include "prepare.h"
#include "plan.h"
#include "train.h"

static void usage(FILE *f) {
  fprintf(f,
          "vit3d: train Vision Transformers in C and CUDA with tensor, pipeline and data "
          "parallelism.\n\n"
          "usage: vit3d <command> [flags]\n\n"
          "commands:\n"
          "  train      train a ViT (see vit3d train --help)\n"
          "  eval       evaluate a checkpoint or weights on --val-data (flags of train)\n"
          "  plan       print each pipeline stage's memory and traffic for the mesh and batch\n"
          "             of the flags of train (--tp, --pp, --dp, ...), allocating nothing; with\n"
          "             --gpus N compare every mesh of N GPUs and suggest one\n"
          "  export     vit3d export --checkpoint DIR --out FILE.safetensors [--use-ema 1]\n"
          "             (timm names)\n"
          "  inspect    vit3d inspect DIR: what a checkpoint (or a --save folder's newest) holds\n"
          "             and the model flags that resume it\n"
          "  prepare    prepare a dataset: vit3d prepare fashion-mnist OUT_DIR, or\n"
          "             vit3d prepare shards SRC OUT_DIR [SAMPLES_PER_SHARD] (tar shards)\n"
          "  version    print the version and what this build contains\n\n"
          "example:\n"
          "  vit3d train --model tiny --data synthetic --steps 50 --log-dir runs/demo\n");
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
  o->aug_repeats = 1;
  o->micro_batch = 8;
  o->global_batch = 0;
  o->steps = 100;
  o->optim = (vt_optim_config){.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = -1,
                               .total_steps = 100, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                               .momentum = 0.9f, .weight_decay = 0.05f, .clip_grad = 1.0f,
                               .layer_decay = 1.0f};
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

// "a,b,c": three numbers (positive ones when positive is set).
static vt_status parse_triple(const char *flag, const char *s, float *out, int positive, char *err,
                              size_t errlen) {
  char tail;
  float v[3];
  if (sscanf(s, "%f,%f,%f%c", &v[0], &v[1], &v[2], &tail) != 3 ||
      (positive && !(v[0] > 0 && v[1] > 0 && v[2] > 0))) {
    snprintf(err, errlen, "%s %s: give three %snumbers separated by commas, like 0.5,0.5,0.5",
             flag, s, positive ? "positive " : "");
    return VT_ERR_INPUT;
  }
  memcpy(out, v, sizeof v);
  return VT_OK;
}

// Every rank parses the same arguments and reaches the same verdict, so every rank exits with
// the same code; only rank 0 prints, so the user reads the message once.
enum { RUN_TRAIN, RUN_EVAL, RUN_PLAN };  // the commands that take the flags of train
static const char *const kRunNames[] = {"train", "eval", "plan"};

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

// value when flag (a length in epochs) comes after steps_flag (the same length in steps), else
// 0: the later of the two counts, as flags after an @FILE do.
static double if_later(int argc, char **argv, const char *flag, const char *steps_flag,
                       double value) {
  return last_at(argc, argv, flag) > last_at(argc, argv, steps_flag) ? value : 0;
}

static int run_train(int argc, char **argv, vt_comm *world, int mode) {
  const int rank0 = vt_comm_rank(world) == 0;
  vt_train_options o;
  train_defaults(&o);
  o.eval_only = mode == RUN_EVAL;
  o.plan_only = mode == RUN_PLAN;
  char model[32], device[8] = "cpu", precision[8] = "", err[512], bad_image[8] = "skip";
  char remode[8] = "pixel", aa[128] = "", aa_interp[12] = "bicubic", pool[8] = "token";
  char act[16] = "gelu", pos_embed[16] = "learn", weight_init[8] = "timm";
  char train_interp[12] = "sample", eval_interp[12] = "sample";
  char mean[64] = "", std[64] = "", opt_name[12] = "adamw", sched_on[8] = "steps";
  char sched[12] = "cosine", eval_crop_mode[8] = "center";
  float epochs = 0, warmup_epochs = 0, eval_epochs = 0, save_epochs = 0;
  int qkv_bias = 1, class_token = 1;
  snprintf(model, sizeof model, "%s", o.model.name);
  // --model picks the preset first; the size flags then override its fields.
  const char *preset = vt_cli_find(argc, argv, "--model");
  if (preset && vt_config_preset(preset, &o.model, err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  const double BIG = 1e9;
  const vt_opt opts[] = {
      {"--model", VT_OPT_STR, model, sizeof model, 0, 0, "NAME",
       "model preset: vit-ti16, vit-s16, vit-b16, vit-l16, vit-h14, tiny", NULL},
      {"--img-size", VT_OPT_INT, &o.model.img_size, 0, 1, 8192, "PX", "image side in pixels",
       NULL},
      {"--patch-size", VT_OPT_INT, &o.model.patch_size, 0, 1, 8192, "PX", "patch side", NULL},
      {"--width", VT_OPT_INT, &o.model.width, 0, 1, 16384, "C", "embedding width", NULL},
      {"--depth", VT_OPT_INT, &o.model.depth, 0, 1, 1024, "L", "transformer blocks", NULL},
      {"--heads", VT_OPT_INT, &o.model.heads, 0, 1, 1024, "H", "attention heads", NULL},
      {"--mlp-ratio", VT_OPT_FLOAT, &o.model.mlp_ratio, 0, 0.01, 64, "R",
       "MLP hidden width / width", NULL},
      {"--mlp-dim", VT_OPT_INT, &o.model.mlp_dim, 0, 0, 1 << 20, "F",
       "the MLP's hidden width, in place of width x --mlp-ratio (big_vision's mlp_dim: SigLIP "
       "So400m's 4304 over width 1152); 0: from --mlp-ratio", NULL},
      {"--num-classes", VT_OPT_INT, &o.model.num_classes, 0, 2, 1000000, "K", "classes", NULL},
      {"--global-pool", VT_OPT_STR, pool, sizeof pool, 0, 0, "POOL",
       "what the head sees: token (the class token after `norm`, timm's default), avg (the "
       "mean of the patch tokens after `fc_norm`: MAE's fine-tuning head, timm's "
       "global_pool='avg'), gap (the mean of the patch tokens each after `norm`: timm's "
       "global_pool='avg' with fc_norm=False, big_vision's gap head) or map (attention "
       "pooling of every token after `norm` by a learned latent query, then an MLP: timm's "
       "global_pool='map' (attn_pool), big_vision's MAP head, SigLIP)", "token|avg|gap|map"},
      {"--class-token", VT_OPT_INT, &class_token, 0, 0, 1, "0|1",
       "0: no class token (timm's class_token=False, the *_gap_* ViTs and SigLIP; needs "
       "--global-pool avg, gap or map)", NULL},
      {"--head-init-std", VT_OPT_FLOAT, &o.model.head_init_std, 0, 0, 1, "S",
       "std of the head weight's truncated normal initialisation, also of a head --init-from "
       "starts fresh (MAE's fine-tuning: 2e-5); 0: timm's 0.02", NULL},
      {"--weight-init", VT_OPT_STR, weight_init, sizeof weight_init, 0, 0, "KIND",
       "timm (timm's default: Linear weights truncated normal 0.02, biases 0) or jax (timm's "
       "weight_init='jax', Flax's initialisers as big_vision's: Linear weights Xavier-uniform, "
       "MLP biases normal 1e-6, the head all zero, the patch embedding LeCun-normal)",
       "timm|jax"},
      {"--layer-scale", VT_OPT_FLOAT, &o.model.layer_scale, 0, 0, 1e6, "G",
       "LayerScale (timm's init_values; CaiT, DeiT III 1e-6, DINOv2 1e-5): each block scales "
       "its attention and MLP outputs per channel by learned gammas (blocks.i.ls1.gamma, "
       "ls2.gamma) that start at G; 0: off", NULL},
      {"--no-embed-class", VT_OPT_INT, &o.model.no_embed_class, 0, 0, 1, "0|1",
       "1: pos_embed covers the patch tokens only, not the class and register tokens (timm's "
       "no_embed_class: DeiT III, DINOv2)", NULL},
      {"--reg-tokens", VT_OPT_INT, &o.model.reg_tokens, 0, 0, 256, "R",
       "register tokens after the class token (timm's reg_tokens, DINOv2 with registers: 4); "
       "mean pooling skips them", NULL},
      {"--qk-norm", VT_OPT_INT, &o.model.qk_norm, 0, 0, 1, "0|1",
       "1: LayerNorm over each head's queries and keys before attention (timm's qk_norm, "
       "ViT-22B): blocks.i.attn.q_norm and k_norm", NULL},
      {"--qkv-bias", VT_OPT_INT, &qkv_bias, 0, 0, 1, "0|1",
       "0: the qkv Linear has no bias (timm's qkv_bias=False, ViT-22B)", NULL},
      {"--parallel-blocks", VT_OPT_INT, &o.model.parallel, 0, 0, 1, "0|1",
       "1: each block adds attention and MLP of one LayerNorm's output, x + attn(n) + mlp(n) "
       "(ViT-22B, timm's ParallelScalingBlock; no norm2, one LayerScale blocks.i.ls.gamma and "
       "one drop path on the sum): one tensor-parallel all-reduce per block each way instead of "
       "two", NULL},
      {"--act", VT_OPT_STR, act, sizeof act, 0, 0, "ACT",
       "the MLPs' activation (timm's act_layer): gelu (the exact erf form, timm's and PyTorch's "
       "default), gelu_tanh (the tanh approximation: Flax's default, so the JAX ViTs of "
       "big_vision and SigLIP; cuBLASLt's GELU epilogue) or quick_gelu (x sigmoid(1.702 x): "
       "OpenAI's CLIP towers)", "gelu|gelu_tanh|quick_gelu"},
      {"--pre-logits", VT_OPT_INT, &o.model.pre_logits, 0, 0, 65536, "R",
       "a pre-logits layer of width R between the pooled features and the head: Linear then "
       "tanh (big_vision's rep_size, the original ViT's representation layer; pre_logits.fc); "
       "0: none", NULL},
      {"--pos-embed", VT_OPT_STR, pos_embed, sizeof pos_embed, 0, 0, "KIND",
       "learn (timm's learned pos_embed, default) or sincos2d (big_vision's fixed 2D sin-cos "
       "table of \"Better plain ViT baselines\", never trained; positions on the patch tokens "
       "only)", "learn|sincos2d"},
      {"--pre-norm", VT_OPT_INT, &o.model.pre_norm, 0, 0, 1, "0|1",
       "1: a LayerNorm of the embedding's output before the first block, and no patch "
       "embedding bias (timm's pre_norm, norm_pre: the CLIP image towers, with --norm-eps 1e-5)",
       NULL},
      {"--norm-eps", VT_OPT_FLOAT, &o.model.norm_eps, 0, 1e-12, 0.1, "E",
       "every LayerNorm's eps: timm's ViT 1e-6, or nn.LayerNorm's 1e-5 (the CLIP image towers, "
       "timm's vit_*_clip_*)", NULL},
      {"--data", VT_OPT_STR, o.data, sizeof o.data, 0, 0, "SOURCE",
       "training data: synthetic (a deterministic, learnable image task), an ImageFolder "
       "directory (root/<class>/<image>), a list file (path<TAB>label per line) or tar shards "
       "in webdataset's layout (KEY.jpg, .png or .webp with KEY.cls, or --label-key's member: a .tar "
       "file, a folder of them or a numbered range 'train-{000..146}.tar')", NULL},
      {"--val-data", VT_OPT_STR, o.val_data, sizeof o.val_data, 0, 0, "SOURCE",
       "validation data (same forms), evaluated on the same mesh", NULL},
      {"--label-key", VT_OPT_STR, o.label_key, sizeof o.label_key, 0, 0, "KIND",
       "tar shards: the member that holds a sample's class number, KEY.KIND as decimal text "
       "(timm's and webdataset's cls; e.g. label, target), or json:FIELD for an integer "
       "field of KEY.json (json:A.B: field B of the object in field A)", NULL},
      {"--label-names", VT_OPT_STR, o.label_names, sizeof o.label_names, 0, 0, "FILE",
       "tar shards: the class names, line c naming class c (or 'c<TAB>name', as vit3d prepare "
       "writes classes.txt): a label member (or JSON field) may then hold a class's name, and "
       "the classes are the file's", NULL},
      {"--index-cache", VT_OPT_STR, o.index_cache, sizeof o.index_cache, 0, 0, "DIR",
       "keep the datasets' indexes in DIR between runs: a start then stats each shard, class "
       "folder or list file instead of listing every image or reading every tar header (for "
       "large datasets on network file systems); an entry is rebuilt when its sources changed "
       "size or time", NULL},
      {"--eval-interval", VT_OPT_INT, &o.eval_interval, 0, 0, 1 << 30, "N",
       "evaluate every N steps; 0: only after the last step", NULL},
      {"--decode-split", VT_OPT_INT, &o.decode_split, 0, 0, 1, "0|1",
       "1: the first pipeline stage's TP ranks each decode 1/tp of every micro-batch and "
       "all-gather the images (when tp divides the micro-batch, and with Mixup or CutMix "
       "into even shares); 0: every TP rank decodes the whole micro-batch", NULL},
      {"--check-log", VT_OPT_STR, o.check_log, sizeof o.check_log, 0, 0, "FILE",
       "compare each step's loss and grad norm (and evaluation figures) with FILE, an earlier "
       "run's metrics.jsonl (after "
       "a resume, on another mesh or machine): the first differences are logged, and the run "
       "ends with exit code 5 if a step differed or none was in FILE", NULL},
      {"--check-tol", VT_OPT_FLOAT, &o.check_tol, 0, 0, 1, "T",
       "--check-log's relative tolerance; 0: the same figures as metrics.jsonl prints them", NULL},
      {"--loader-threads", VT_OPT_INT, &o.loader_threads, 0, 0, 1024, "N",
       "image decoder threads per rank that needs pixels; 0: as many as --threads", NULL},
      {"--prefetch", VT_OPT_INT, &o.prefetch, 0, 1, 1024, "N",
       "ready micro-batches the loader keeps ahead", NULL},
      {"--max-image-pixels", VT_OPT_I64, &o.max_image_pixels, 0, 1, 1e12, "N",
       "images with more pixels are bad (decompression bombs)", NULL},
      {"--bad-image", VT_OPT_STR, bad_image, sizeof bad_image, 0, 0, "POLICY",
       "unreadable or corrupt images: skip (warn and count; training replaces the image by "
       "another of the same class, evaluation leaves it out of its figures and predictions) or "
       "fail (stop the run)", "skip|fail"},
      {"--crop-scale-min", VT_OPT_FLOAT, &o.transform.scale_min, 0, 0.001, 1, "F",
       "random-resized crop: smallest fraction of the image area", NULL},
      {"--eval-crop-mode", VT_OPT_STR, eval_crop_mode, sizeof eval_crop_mode, 0, 0, "MODE",
       "evaluation's resize before the centre crop: center (the shorter side to img-size / "
       "--eval-crop-pct, aspect kept: torchvision's Resize + CenterCrop) or squash (both sides, "
       "aspect not kept: timm's --crop-mode squash; the ViT paper's and big_vision's resize)",
       "center|squash"},
      {"--eval-crop-pct", VT_OPT_FLOAT, &o.transform.crop_pct, 0, 0.05, 1, "F",
       "evaluation: resize the shorter side to img-size / F, then centre-crop (1: no zoom, for "
       "images already at img-size)", NULL},
      {"--eval-hflip", VT_OPT_INT, &o.eval_hflip, 0, 0, 1, "N",
       "1: evaluation scores the mean logits of each image and its mirror image (test-time "
       "flip; twice the evaluation cost)", NULL},
      {"--hflip", VT_OPT_FLOAT, &o.transform.flip_prob, 0, 0, 1, "P",
       "probability of a horizontal flip", NULL},
      {"--mean", VT_OPT_STR, mean, sizeof mean, 0, 0, "R,G,B",
       "per-channel mean for normalisation (pixels in [0, 1]; default ImageNet's)", NULL},
      {"--std", VT_OPT_STR, std, sizeof std, 0, 0, "R,G,B",
       "per-channel standard deviation for normalisation (default ImageNet's)", NULL},
      {"--micro-batch-size", VT_OPT_INT, &o.micro_batch, 0, 1, 65536, "B",
       "images per forward/backward pass", NULL},
      {"--global-batch-size", VT_OPT_INT, &o.global_batch, 0, 0, 1 << 24, "G",
       "images per optimizer step, a multiple of dp x micro-batch (gradient accumulation); "
       "0: dp x micro-batch", NULL},
      {"--steps", VT_OPT_I64, &o.steps, 0, 1, BIG, "N", "optimizer steps to run", NULL},
      {"--epochs", VT_OPT_FLOAT, &epochs, 0, 0, 1e6, "E",
       "the run's length in passes over the training set: round(E x images / global batch) "
       "steps, known once the dataset is open (so a recipe fits any copy of its dataset); of "
       "--epochs and --steps the later one counts", NULL},
      {"--warmup-epochs", VT_OPT_FLOAT, &warmup_epochs, 0, 0, 1e6, "E",
       "the warmup in passes over the training set; of it and --warmup-steps the later one "
       "counts", NULL},
      {"--eval-epochs", VT_OPT_FLOAT, &eval_epochs, 0, 0, 1e6, "E",
       "evaluate every E passes over the training set (at least every step); of it and "
       "--eval-interval the later one counts", NULL},
      {"--save-epochs", VT_OPT_FLOAT, &save_epochs, 0, 0, 1e6, "E",
       "save every E passes over the training set; of it and --save-interval the later one "
       "counts", NULL},
      {"--run-steps", VT_OPT_I64, &o.run_steps, 0, 0, BIG, "N",
       "stop after N steps of this invocation (the schedule still spans --steps; resume later "
       "with --resume); 0: run to the end", NULL},
      {"--opt", VT_OPT_STR, opt_name, sizeof opt_name, 0, 0, "NAME",
       "optimizer: adamw (torch.optim.AdamW), lamb (timm's Lamb, DeiT III and large batches: "
       "Adam's direction plus weight decay, scaled per tensor by ||weights|| / ||direction||; "
       "tensors without weight decay take Adam's step), sgd (timm's: torch.optim.SGD with "
       "Nesterov momentum), momentum (SGD with plain momentum: the ViT paper's and "
       "big_vision's fine-tuning; SGD's weight decay is L2, added to the gradient), lars or "
       "nlars (timm's Lars, plain or Nesterov momentum: large batches and linear probes; each "
       "tensor with weight decay steps along its gradient plus weight decay, scaled by 0.001 "
       "||w|| / (||g|| + weight decay ||w|| + eps); the others plain momentum SGD), larc or nlarc "
       "(timm's: LARS with that ratio clipped to min(ratio / lr, 1))",
       "adamw|lamb|sgd|momentum|lars|nlars|larc|nlarc"},
      {"--momentum", VT_OPT_FLOAT, &o.optim.momentum, 0, 0, 0.9999, "M",
       "SGD's and LARS's momentum (timm's --momentum)", NULL},
      {"--opt-eps", VT_OPT_FLOAT, &o.optim.eps, 0, 1e-12, 1, "EPS",
       "the optimizer's epsilon (timm's --opt-eps)", NULL},
      {"--lr", VT_OPT_FLOAT, &o.optim.lr, 0, 0, 10, "LR", "peak learning rate", NULL},
      {"--min-lr", VT_OPT_FLOAT, &o.optim.min_lr, 0, 0, 10, "LR",
       "learning rate at the end of the decay (cosine or linear)", NULL},
      {"--warmup-steps", VT_OPT_I64, &o.optim.warmup_steps, 0, -1, BIG, "N",
       "steps of linear warmup; -1: 5% of --steps", NULL},
      {"--resume-override", VT_OPT_INT, &o.resume_override, 0, 0, 1, "N",
       "1: resume a checkpoint even where this command's learning-rate schedule or optimizer "
       "settings (--lr, --steps, --warmup-steps, --weight-decay, ...) differ from the run that "
       "saved it, training on with this command's (a longer run, a new rate); 0: refuse, "
       "naming the differences", NULL},
      {"--sched", VT_OPT_STR, sched, sizeof sched, 0, 0, "KIND",
       "the decay after the warmup: cosine (timm's default: a half cosine from --lr to "
       "--min-lr), linear (a straight line from --lr to --min-lr: timm's --sched poly "
       "--decay-rate 1) or constant (--lr to the end)", "cosine|linear|constant"},
      {"--sched-on", VT_OPT_STR, sched_on, sizeof sched_on, 0, 0, "UNIT",
       "when the learning rate changes: steps (every step; the cosine from the warmup's end) "
       "or epochs (once per pass over the training set, timm's train.py default and DeiT's: "
       "timm's CosineLRScheduler counted in epochs, the cosine from epoch 0, the warmup from "
       "--warmup-lr)", "steps|epochs"},
      {"--warmup-lr", VT_OPT_FLOAT, &o.optim.warmup_lr, 0, 0, 10, "LR",
       "the warmup's learning rate at step 0, rising linearly to --lr (timm's --warmup-lr, "
       "DeiT: 1e-6); 0: step s of W takes lr * (s + 1) / W", NULL},
      {"--weight-decay", VT_OPT_FLOAT, &o.optim.weight_decay, 0, 0, 10, "WD",
       "decoupled weight decay (not on biases, norms, LayerScale, pos_embed, cls_token, "
       "reg_token)", NULL},
      {"--layer-decay", VT_OPT_FLOAT, &o.optim.layer_decay, 0, 0.01, 1, "D",
       "layer-wise lr decay (BEiT/MAE fine-tuning): block i (from 0) steps with lr * "
       "D^(depth - i), the embeddings with lr * D^(depth + 1), the final norm and head with lr; "
       "1: off", NULL},
      {"--freeze", VT_OPT_STR, o.optim.freeze, sizeof o.optim.freeze, 0, 0, "REGEX",
       "freeze the tensors whose timm names match REGEX (POSIX extended, unanchored; e.g. "
       "'^(patch_embed|blocks\\.[0-5]\\.)' for the patch embedding and the first six blocks): "
       "they keep their values (no update, no weight decay, not in the gradient norm), as "
       "PyTorch's requires_grad=False; the backward skips a frozen prefix (the embeddings and "
       "the first blocks)", NULL},
      {"--trainable", VT_OPT_STR, o.optim.trainable, sizeof o.optim.trainable, 0, 0, "REGEX",
       "freeze every tensor whose timm name does not match REGEX (a linear probe: '^head\\.'; "
       "with --freeze, a tensor either one freezes is frozen)", NULL},
      {"--clip-grad", VT_OPT_FLOAT, &o.optim.clip_grad, 0, 0, 1e6, "NORM",
       "clip gradients to this global norm; 0 turns clipping off", NULL},
      {"--label-smoothing", VT_OPT_FLOAT, &o.label_smoothing, 0, 0, 0.999, "S",
       "label smoothing of the cross-entropy", NULL},
      {"--bce-loss", VT_OPT_INT, &o.bce_loss, 0, 0, 1, "0|1",
       "1: train with binary cross-entropy over the classes against the same (smoothed, mixed) "
       "targets, averaged over classes and images (timm's --bce-loss: DeiT III, ResNet strikes "
       "back); evaluation reports the softmax cross-entropy", NULL},
      {"--bce-target-thresh", VT_OPT_FLOAT, &o.bce_thresh, 0, -1, 0.999, "T",
       "with --bce-loss: targets of 1 where the (smoothed, mixed) target exceeds T, else 0 "
       "(timm's --bce-target-thresh; DeiT III: 0, both images of a mixed pair count fully); "
       "negative: the soft targets", NULL},
      {"--drop-path", VT_OPT_FLOAT, &o.drop_path, 0, 0, 0.99, "RATE",
       "stochastic depth as timm's drop_path_rate: block i of D drops each residual branch per "
       "image with probability RATE * i / (D - 1), keyed by the image's stream position", NULL},
      {"--proj-drop", VT_OPT_FLOAT, &o.proj_drop, 0, 0, 0.99, "P",
       "dropout as timm's proj_drop_rate: each element of every block's attention output, MLP "
       "hidden units and MLP output dropped with probability P (the rest scaled by 1 / (1 - P)), "
       "keyed by the image's stream position, token and channel (the original ViT, AugReg's "
       "regularised settings: 0.1 with --pos-drop 0.1); parallel blocks drop their MLP's hidden "
       "units only (timm's ParallelScalingBlock)", NULL},
      {"--attn-drop", VT_OPT_FLOAT, &o.attn_drop, 0, 0, 0.99, "P",
       "dropout as timm's attn_drop_rate: each attention probability (image, head, query, key) "
       "of every block dropped with probability P after the softmax, the rest scaled by "
       "1 / (1 - P), keyed by the image's stream position, head, query and key (drawn again in "
       "the backward, not stored); not in the MAP head's pooling (nor is it in timm's)", NULL},
      {"--pos-drop", VT_OPT_FLOAT, &o.pos_drop, 0, 0, 0.99, "P",
       "dropout as timm's pos_drop_rate: each element of the embedding's output (patches, prefix "
       "tokens and positions) dropped with probability P", NULL},
      {"--drop", VT_OPT_FLOAT, &o.head_drop, 0, 0, 0.99, "P",
       "dropout as timm's --drop (drop_rate): each element of the head's input (the pooled, "
       "normalised features) dropped with probability P", NULL},
      {"--mixup", VT_OPT_FLOAT, &o.mix.mixup_alpha, 0, 0, 100, "ALPHA",
       "Mixup: blend each pair of images (stream positions 2k, 2k+1) and their targets with "
       "lam ~ Beta(ALPHA, ALPHA) (DeiT: 0.8); 0: off", NULL},
      {"--cutmix", VT_OPT_FLOAT, &o.mix.cutmix_alpha, 0, 0, 100, "ALPHA",
       "CutMix: swap a box between the images of each pair, lam ~ Beta(ALPHA, ALPHA) (DeiT: 1.0); "
       "0: off", NULL},
      {"--mix-prob", VT_OPT_FLOAT, &o.mix.prob, 0, 0, 1, "P",
       "probability that a pair is mixed (Mixup or CutMix)", NULL},
      {"--mix-switch-prob", VT_OPT_FLOAT, &o.mix.switch_prob, 0, 0, 1, "P",
       "with both --mixup and --cutmix: probability of CutMix for a pair", NULL},
      {"--reprob", VT_OPT_FLOAT, &o.erase.prob, 0, 0, 1, "P",
       "random erasing: with probability P a box of 2% to 1/3 of a training image is filled "
       "(DeiT: 0.25); 0: off", NULL},
      {"--remode", VT_OPT_STR, remode, sizeof remode, 0, 0, "MODE",
       "random erasing's fill: pixel (a normal value per element), rand (per channel) or const "
       "(zeros)", "pixel|rand|const"},
      {"--aa", VT_OPT_STR, aa, sizeof aa, 0, 0, "SPEC",
       "RandAugment of the 8-bit training crop, timm's config string (DeiT: "
       "rand-m9-mstd0.5-inc1; keys m, n, mstd, mmax, inc, p); empty: off", NULL},
      {"--train-interpolation", VT_OPT_STR, train_interp, sizeof train_interp, 0, 0, "MODE",
       "how a training crop becomes the S x S input: sample (bilinear at the output pixels "
       "only, the fastest), or bilinear or bicubic (Pillow's antialiased resize of the crop, as "
       "torchvision's on PIL images; DeiT's and timm's ViT recipes: bicubic)",
       "sample|bilinear|bicubic"},
      {"--eval-interpolation", VT_OPT_STR, eval_interp, sizeof eval_interp, 0, 0, "MODE",
       "the same for evaluation's resize of the whole image before the centre crop (timm's "
       "ViT models: bicubic)", "sample|bilinear|bicubic"},
      {"--simple-crop", VT_OPT_INT, &o.transform.simple_crop, 0, 0, 1, "0|1",
       "1: training crops are DeiT III's simple random crop (its --src: the shorter side resized "
       "to --img-size, 4 mirrored pixels of padding, a random square of it, the flip) instead "
       "of the random-resized crop; needs --train-interpolation bilinear or bicubic", NULL},
      {"--three-augment", VT_OPT_INT, &o.transform.three_aug, 0, 0, 1, "0|1",
       "1: 3-Augment (DeiT III) of the 8-bit training crop instead of RandAugment: one of "
       "grayscale, solarize (128) and a Gaussian blur (radius 0.1 to 2), then the colour jitter, "
       "as Pillow and torchvision do them", NULL},
      {"--color-jitter", VT_OPT_FLOAT, &o.transform.color_jitter, 0, 0, 1, "J",
       "3-Augment's colour jitter: brightness, contrast and saturation factors in [1 - J, 1 + "
       "J], in a random order (DeiT III: 0.3); 0: none", NULL},
      {"--aa-interpolation", VT_OPT_STR, aa_interp, sizeof aa_interp, 0, 0, "MODE",
       "resampling of RandAugment's Rotate, Shear and Translate (DeiT: bicubic)",
       "bicubic|bilinear"},
      {"--aug-repeats", VT_OPT_INT, &o.aug_repeats, 0, 1, 64, "R",
       "repeated augmentation: an epoch holds 1/R of the images, each R times with its own "
       "augmentation, the copies within 128 R stream positions (DeiT: 3); 1: off", NULL},
      {"--drop-last", VT_OPT_INT, &o.drop_last, 0, 0, 1, "0|1",
       "1: an epoch is the training set's floor(images / global batch) whole steps, the other "
       "images of its order left out (a different few each epoch), as timm's and DeiT's "
       "training loader (drop_last); 0: the stream runs on into the next epoch's order, a step "
       "may hold the end of one epoch and the start of the next", NULL},
      {"--recompute-blocks", VT_OPT_INT, &o.recompute_blocks, 0, 0, 1000000, "N",
       "activation recompute: the first N blocks of each pipeline stage keep only their input and "
       "run their forward again in the backward (the same results, less memory, about a third "
       "more compute for them); N >= the stage's blocks: all", NULL},
      {"--seed", VT_OPT_U64, &o.seed, 0, 0, 1.8e19, "N",
       "seed of weights and data (same seed, same run)", NULL},
      {"--device", VT_OPT_STR, device, sizeof device, 0, 0, "DEV", "cpu or cuda", "cpu|cuda"},
      {"--precision", VT_OPT_STR, precision, sizeof precision, 0, 0, "P",
       "GEMM precision: bf16 (operands rounded to bfloat16, fp32 sums; LayerNorm, softmax, "
       "gradients and AdamW's master weights stay fp32) or fp32; default bf16 on cuda, fp32 on "
       "cpu", "bf16|fp32"},
      {"--threads", VT_OPT_INT, &o.threads, 0, 0, 4096, "N",
       "CPU threads per rank for OpenMP and BLAS together; 0: cores / ranks", NULL},
      {"--tp", VT_OPT_INT, &o.tp, 0, 1, 4096, "N", "tensor-parallel ranks (inside a node)", NULL},
      {"--pp", VT_OPT_INT, &o.pp, 0, 1, 4096, "N", "pipeline stages (across nodes)", NULL},
      {"--dp", VT_OPT_INT, &o.dp, 0, 0, 1 << 20, "N",
       "data-parallel replicas; 0: world size / (tp * pp)", NULL},
      {"--mesh-order", VT_OPT_STR, o.mesh_order, sizeof o.mesh_order, 0, 0, "ORDER",
       "how ranks map to the mesh, innermost axis first", "tp-dp-pp|tp-pp-dp"},
      {"--pp-schedule", VT_OPT_STR, o.pp_schedule, sizeof o.pp_schedule, 0, 0, "KIND",
       "pipeline schedule: 1f1b, gpipe, interleaved (1F1B over --pp-chunks model chunks per "
       "stage: idle (p-1)/(v*m+p-1) instead of (p-1)/(m+p-1), more activations in flight; "
       "micro-batches per step a multiple of --pp), zb-h1 (zero-bubble 1F1B: backward split "
       "into input and weight gradients, idle about (p-1)/(3m+p-1); no --recompute-blocks) or "
       "zb-v (zero-bubble with two chunks per stage in a V: stage s holds virtual stages s and "
       "2pp-1-s, so stage 0 has the embedding and the head; idle about (p-1)/(6m+p-1) with up "
       "to 2pp chunks' activations in flight on every stage; no --recompute-blocks)",
       "1f1b|gpipe|interleaved|zb-h1|zb-v"},
      {"--pp-pass-times", VT_OPT_STR, o.pp_pass_times, sizeof o.pp_pass_times, 0, 0, "T",
       "zb-v: the forward, input-gradient and weight pass times its order is built for: auto "
       "(measured in the run's second step on every rank, on GPUs by timing events, then the order "
       "rebuilt for them: the same bits, less idle where the passes differ), equal, or F:B:W "
       "(relative, e.g. 1:1:0.35)",
       NULL},
      {"--pp-chunks", VT_OPT_INT, &o.pp_chunks, 0, 0, 64, "V",
       "interleaved schedule: model chunks per pipeline stage (stage s holds virtual stages s, "
       "s + pp, ...); 0: 2 with interleaved and zb-v, 1 otherwise", NULL},
      {"--zero", VT_OPT_INT, &o.zero, 0, 0, 1, "N",
       "1: shard AdamW state (and the weights' EMA) over data-parallel ranks (ZeRO-1)", NULL},
      {"--sequence-parallel", VT_OPT_INT, &o.sequence_parallel, 0, 0, 1, "N",
       "1: split the stream and LayerNorms by tokens over the TP group (reduce-scatter + "
       "all-gather instead of all-reduce)", NULL},
      {"--save", VT_OPT_STR, o.save_dir, sizeof o.save_dir, 0, 0, "DIR",
       "write checkpoints to DIR (DIR/step-N, DIR/latest); atomic", NULL},
      {"--save-interval", VT_OPT_INT, &o.save_interval, 0, 0, 1 << 30, "N",
       "save every N steps and after the last; 0: only after the last", NULL},
      {"--keep-last", VT_OPT_INT, &o.keep_last, 0, 0, 1 << 20, "K",
       "keep the K newest checkpoints; 0: keep all", NULL},
      {"--keep-every", VT_OPT_I64, &o.keep_every, 0, 0, 1e15, "N",
       "with --keep-last: also keep every checkpoint whose step is a multiple of N (milestones "
       "for later evaluation or a restart from an earlier point); 0: none", NULL},
      {"--save-hook", VT_OPT_STR, o.save_hook, sizeof o.save_hook, 0, 0, "CMD",
       "after each checkpoint is committed, world rank 0 runs `sh -c CMD` in the background with "
       "VT_CKPT_DIR (the checkpoint's folder), VT_CKPT_STEP and VT_SAVE_DIR set, its output "
       "appended to SAVE_DIR/save-hook.log (e.g. 'aws s3 cp --recursive \"$VT_CKPT_DIR\" "
       "s3://bucket/run/$(basename \"$VT_CKPT_DIR\")'); one at a time: the next commit and the "
       "end of the run wait for it; the last checkpoint's hook failing exits 1", NULL},
      {"--save-hook-timeout", VT_OPT_FLOAT, &o.save_hook_timeout, 0, 0, 1e7, "SEC",
       "stop a save hook still running after SEC seconds (SIGTERM to its process group, SIGKILL "
       "min(10, SEC) s later), counted as failed, and train on; 0: no limit (a hook that hangs "
       "then holds the next commit until the watchdog's --timeout-s ends the job)", NULL},
      {"--async-save", VT_OPT_INT, &o.async_save, 0, 0, 1, "N",
       "1: rank 0 writes each checkpoint but the last (and a preemption's) on a background "
       "thread while training goes on, from a snapshot taken at its step; 0: every save in "
       "place", NULL},
      {"--resume", VT_OPT_STR, o.resume, sizeof o.resume, 0, 0, "auto|DIR",
       "auto: continue from the newest complete checkpoint in --save (or start fresh); DIR: "
       "from that checkpoint (on any mesh), or from a --save folder's newest complete one",
       NULL},
      {"--init-from", VT_OPT_STR, o.init_from, sizeof o.init_from, 0, 0, "FILE",
       "start from timm-format weights (safetensors); pos_embed resampled and head renewed "
       "when the image size or class count differ", NULL},
      {"--predictions", VT_OPT_STR, o.predictions, sizeof o.predictions, 0, 0, "FILE",
       "vit3d eval (any mesh): write each validation image's path, label and top-5 classes "
       "with their probabilities as CSV, in the set's order", NULL},
      {"--logits-out", VT_OPT_STR, o.logits_out, sizeof o.logits_out, 0, 0, "FILE",
       "vit3d eval on one rank: write the validation inputs, labels and logits (safetensors)",
       NULL},
      {"--checkpoint", VT_OPT_STR, o.resume, sizeof o.resume, 0, 0, "DIR",
       "vit3d eval: the checkpoint to evaluate, or a --save folder (its newest complete "
       "checkpoint); the same as --resume DIR", NULL},
      {"--use-ema", VT_OPT_INT, &o.use_ema, 0, 0, 1, "N",
       "vit3d eval: 1 evaluates the checkpoint's EMA weights (saved with --model-ema)", NULL},
      {"--model-ema", VT_OPT_FLOAT, &o.optim.ema_decay, 0, 0, 0.999999, "DECAY",
       "keep an exponential moving average of the weights (timm's ModelEmaV2, e.g. 0.9998): "
       "updated after every step, saved in checkpoints (ema.safetensors), evaluated beside the "
       "weights; 0: off", NULL},
      {"--model-ema-warmup", VT_OPT_INT, &o.optim.ema_warmup, 0, 0, 1, "0|1",
       "1: the EMA's decay warms up as timm's ModelEmaV3 (--model-ema-warmup): update t uses "
       "min(DECAY, 1 - t^(-2/3)) from t = 2, the first update copies the weights", NULL},
      {"--final-ema", VT_OPT_STR, o.final_ema, sizeof o.final_ema, 0, 0, "FILE",
       "at the end, write the EMA weights like --final-weights (needs --model-ema)", NULL},
      {"--gpus", VT_OPT_INT, &o.plan_gpus, 0, 0, 1 << 20, "N",
       "vit3d plan: compare every tp x pp x dp mesh of N GPUs for these flags (memory against "
       "--gpu-mem, pipeline idle fraction, traffic) and suggest one; 0: plan the --tp --pp --dp "
       "mesh", NULL},
      {"--gpu-mem", VT_OPT_FLOAT, &o.plan_gpu_mem, 0, 1, 1e6, "GIB",
       "vit3d plan --gpus: memory per GPU in GiB (H100: 80, H200: 141)", NULL},
      {"--node-gpus", VT_OPT_INT, &o.plan_node_gpus, 0, 1, 64, "K",
       "vit3d plan --gpus: GPUs per node (tensor parallelism stays inside one)", NULL},
      {"--comm-stats", VT_OPT_INT, &o.comm_stats, 0, 0, 1, "N",
       "1: every rank writes its first step's traffic per axis to LOG_DIR/comm.rank<R>.json",
       NULL},
      {"--final-weights", VT_OPT_STR, o.final_weights, sizeof o.final_weights, 0, 0, "FILE",
       "at the end, write the full unsharded weights (safetensors, timm names)", NULL},
      {"--log-dir", VT_OPT_STR, o.log_dir, sizeof o.log_dir, 0, 0, "DIR",
       "write DIR/metrics.jsonl, one JSON object per step, and TensorBoard's event file "
       "(tensorboard --logdir DIR; --tensorboard 0: not)", NULL},
      {"--tensorboard", VT_OPT_INT, &o.tensorboard, 0, 0, 1, "N",
       "1: with --log-dir, also write the step's figures as TensorBoard scalars (train/, eval/, "
       "eval_ema/) to DIR/events.out.tfevents.*", NULL},
      {"--log-interval", VT_OPT_INT, &o.log_interval, 0, 1, 1 << 30, "N",
       "print the progress line every N steps", NULL},
      {"--timeout-s", VT_OPT_FLOAT, &o.timeout_s, 0, 0, 1e7, "SEC",
       "watchdog: when a step or a collective takes longer (startup, evaluation and checkpoint "
       "saves: 10x), every rank stops with a report of where each rank is; 0: off", NULL},
      {"--max-nonfinite-steps", VT_OPT_INT, &o.max_nonfinite, 0, 1, 1 << 30, "K",
       "a step with a non-finite loss or gradient norm is skipped; K in a row stop the run", NULL},
      {"--straggler-interval", VT_OPT_INT, &o.straggler_interval, 0, 0, 1 << 30, "N",
       "every N steps print each rank's busy time per step and memory, naming ranks slower than "
       "1.2x the median; 0: never", NULL},
      {"--peak-tflops", VT_OPT_FLOAT, &o.peak_tflops, 0, 0, 1e6, "TF",
       "peak TFLOP/s of one rank's device, for MFU in the progress line and metrics; 0: 989 "
       "(H100/H200 dense bf16) on CUDA, no MFU on CPU", NULL},
  };
  const int nopts = (int)(sizeof opts / sizeof opts[0]);
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (!rank0) return 0;
      static const char *const what[] = {
          "Trains a ViT and prints a progress line per --log-interval steps.",
          "Evaluates a checkpoint (--checkpoint DIR) or weights (--init-from FILE) on "
          "--val-data; the flags are train's.",
          "Prints each pipeline stage's memory and traffic for the --tp --pp --dp mesh, or with "
          "--gpus N compares every mesh of N GPUs; allocates nothing; the flags are train's."};
      printf("usage: vit3d %s [flags] [@FILE ...]\n\n%s @FILE reads flags from FILE (words "
             "separated by spaces or lines, '#' comments; a recipe in docs/recipes.md); later "
             "flags win.\n\nflags [default]:\n", kRunNames[mode], what[mode]);
      vt_cli_help(stdout, opts, nopts);
      return 0;
    }
  if (vt_cli_parse(opts, nopts, argc, argv, err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  if (vt_fault_init(vt_comm_rank(world), err, sizeof err) != 0) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  o.device = strcmp(device, "cuda") == 0 ? VT_DEVICE_CUDA : VT_DEVICE_CPU;
  if (o.peak_tflops == 0 && o.device == VT_DEVICE_CUDA) o.peak_tflops = 989;
  o.precision = strcmp(precision, "bf16") == 0 ||
                        (!precision[0] && o.device == VT_DEVICE_CUDA)
                    ? VT_PRECISION_BF16
                    : VT_PRECISION_FP32;
  o.bad_image_fail = strcmp(bad_image, "fail") == 0;
  // (opt_name is one of --opt's words)
  const int larc = strcmp(opt_name, "larc") == 0 || strcmp(opt_name, "nlarc") == 0;
  const int lars = larc || strcmp(opt_name, "lars") == 0 || strcmp(opt_name, "nlars") == 0;
  o.optim.kind = strcmp(opt_name, "lamb") == 0    ? VT_OPT_LAMB
                 : strcmp(opt_name, "adamw") == 0 ? VT_OPT_ADAMW
                 : lars                           ? VT_OPT_LARS
                                                  : VT_OPT_SGD;
  o.optim.nesterov = strcmp(opt_name, "sgd") == 0 || (lars && opt_name[0] == 'n');
  o.optim.trust_clip = larc;
  o.sched_epochs = strcmp(sched_on, "epochs") == 0;
  o.optim.sched = strcmp(sched, "linear") == 0     ? VT_SCHED_LINEAR
                  : strcmp(sched, "constant") == 0 ? VT_SCHED_CONSTANT
                                                   : VT_SCHED_COSINE;
  o.model.global_pool = strcmp(pool, "avg") == 0   ? 1
                        : strcmp(pool, "gap") == 0 ? 2
                        : strcmp(pool, "map") == 0 ? 3
                                                   : 0;
  o.model.no_class_token = !class_token;
  o.model.gelu_tanh = strcmp(act, "gelu_tanh") == 0;
  o.model.quick_gelu = strcmp(act, "quick_gelu") == 0;
  o.model.init_jax = strcmp(weight_init, "jax") == 0;
  o.transform.eval_squash = strcmp(eval_crop_mode, "squash") == 0;
  o.model.pos_sincos = strcmp(pos_embed, "sincos2d") == 0;
  o.model.no_qkv_bias = !qkv_bias;
  o.erase.mode = strcmp(remode, "const") == 0  ? VT_ERASE_CONST
                 : strcmp(remode, "rand") == 0 ? VT_ERASE_RAND
                                               : VT_ERASE_PIXEL;
  if ((mean[0] && parse_triple("--mean", mean, o.transform.mean, 0, err, sizeof err) != VT_OK) ||
      (std[0] && parse_triple("--std", std, o.transform.std, 1, err, sizeof err) != VT_OK)) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  o.transform.train_interp = interp_of(train_interp);
  o.transform.eval_interp = interp_of(eval_interp);
  // RandAugment's fill is the dataset's mean colour, as timm's img_mean.
  o.transform.ra = vt_randaug_defaults(o.transform.mean);
  o.transform.ra.interp = strcmp(aa_interp, "bilinear") == 0 ? VT_RA_BILINEAR : VT_RA_BICUBIC;
  if (aa[0] && vt_randaug_parse(aa, &o.transform.ra, err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  o.epochs = if_later(argc, argv, "--epochs", "--steps", epochs);
  o.warmup_epochs = if_later(argc, argv, "--warmup-epochs", "--warmup-steps", warmup_epochs);
  o.eval_epochs = if_later(argc, argv, "--eval-epochs", "--eval-interval", eval_epochs);
  o.save_epochs = if_later(argc, argv, "--save-epochs", "--save-interval", save_epochs);
  // With --epochs the steps (and the default warmup) follow once the dataset is open.
  o.optim.total_steps = o.steps;
  if (o.optim.warmup_steps < 0 && o.epochs <= 0 && o.warmup_epochs <= 0)
    o.optim.warmup_steps = o.steps / 20;
  if (o.threads == 0) {  // share the cores: ranks of a job on one host must not oversubscribe
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per = cores > 0 ? (int)cores / vt_comm_local_size(world) : 1;
    o.threads = per > 0 ? per : 1;
  }
  if (o.loader_threads == 0) o.loader_threads = o.threads;
  // vit3d plan --gpus N: every mesh of N ranks.
  const char *mesh_flag = vt_cli_find(argc, argv, "--tp")   ? "--tp"
                          : vt_cli_find(argc, argv, "--pp") ? "--pp"
                          : vt_cli_find(argc, argv, "--dp") ? "--dp"
                                                            : NULL;
  const int sizes = vt_cli_find(argc, argv, "--gpu-mem") || vt_cli_find(argc, argv, "--node-gpus");
  char why[160] = "";
  if ((sizes || vt_cli_find(argc, argv, "--gpus")) && mode != RUN_PLAN)
    snprintf(why, sizeof why, "--gpus, --gpu-mem and --node-gpus are for vit3d plan");
  else if (sizes && o.plan_gpus == 0)
    snprintf(why, sizeof why, "--gpu-mem and --node-gpus size the search of --gpus N: give "
             "--gpus");
  else if (o.plan_gpus > 0 && mesh_flag)
    snprintf(why, sizeof why, "--gpus N tries every --tp, --pp and --dp: drop %s", mesh_flag);
  else if (o.plan_gpus > 0 && !o.global_batch)
    snprintf(why, sizeof why, "--gpus N compares meshes at one global batch: give "
             "--global-batch-size");
  else if (o.plan_gpus > 0 && vt_config_validate(&o.model, err, sizeof err) != VT_OK)
    snprintf(why, sizeof why, "bad model configuration: %.120s", err);
  if (why[0]) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], why);
    return 2;
  }
  if (o.plan_gpus > 0) return rank0 ? vt_plan_search(&o) : 0;
  // vit3d plan sizes the mesh the flags describe, whatever this process's world.
  const int world_size = mode == RUN_PLAN ? o.tp * o.pp * (o.dp > 0 ? o.dp : 1) : vt_comm_size(world);
  if (vt_train_validate(&o, world_size, err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  if (mode == RUN_PLAN) return rank0 ? vt_plan_run(&o) : 0;
  return vt_train_run(&o, world);
}

// Arguments files (@FILE) are expanded first, so a recipe's flags can live in a file.
static int cmd_train(int argc, char **argv, vt_comm *world, int mode) {
  int n;
  char **v, err[600];
  if (vt_cli_expand(argc, argv, &n, &v, err, sizeof err) != VT_OK) {
    if (vt_comm_rank(world) == 0) fprintf(stderr, "vit3d %s: %s\n", kRunNames[mode], err);
    return 2;
  }
  const int rc = run_train(n, v, world, mode);
  vt_cli_free(n, v);
  return rc;
}

// vit3d export --checkpoint DIR --out FILE: the checkpoint's model.safetensors holds the full,
// unsharded weights with timm's names already; verify the checkpoint and copy it atomically.
static int cmd_export(int argc, char **argv) {
  char ckpt[512] = "", out[512] = "", err[768];
  int use_ema = 0;
  const vt_opt opts[] = {
      {"--checkpoint", VT_OPT_STR, ckpt, sizeof ckpt, 0, 0, "DIR",
       "a checkpoint, or a --save folder (its newest complete checkpoint)", NULL},
      {"--out", VT_OPT_STR, out, sizeof out, 0, 0, "FILE", "safetensors file to write", NULL},
      {"--use-ema", VT_OPT_INT, &use_ema, 0, 0, 1, "N",
       "1: the EMA weights (saved with --model-ema) instead of the weights", NULL},
  };
  if (vt_cli_parse(opts, 3, argc, argv, err, sizeof err) != VT_OK || !ckpt[0] || !out[0]) {
    fprintf(stderr,
            "%s%susage: vit3d export --checkpoint DIR --out FILE.safetensors [--use-ema 1]\n",
            ckpt[0] && out[0] ? err : "", ckpt[0] && out[0] ? "\n" : "");
    return 2;
  }
  vt_ckpt_manifest man;
  char dir[1100];
  if (vt_ckpt_open(ckpt, dir, sizeof dir, &man, err, sizeof err) != VT_OK) {
    fprintf(stderr, "vit3d export: %s\n", err);
    return 1;
  }
  const char *file = use_ema ? "ema.safetensors" : "model.safetensors";
  if (!vt_ckpt_manifest_lists(&man, file)) {
    fprintf(stderr, "vit3d export: %s has no EMA weights (it was saved without --model-ema)\n",
            dir);
    return 1;
  }
  char src[1200];
  snprintf(src, sizeof src, "%s/%s", dir, file);
  if (vt_copy_file_atomic(src, out, err, sizeof err) != VT_OK) {
    fprintf(stderr, "vit3d export: %s\n", err);
    return 1;
  }
  printf("vit3d export: wrote %s (%s, step %lld%s, timm names, fp32)\n", out, dir,
         (long long)man.step, use_ema ? ", EMA weights" : "");
  return 0;
}

static int cmd_prepare(int argc, char **argv) {
  char err[1024];
  if (argc == 2 && strcmp(argv[0], "fashion-mnist") == 0) {
    if (vt_prepare_fashion_mnist(argv[1], err, sizeof err) != VT_OK) {
      fprintf(stderr, "vit3d prepare: %s\n", err);
      return 1;
    }
    printf("vit3d prepare: Fashion-MNIST is in %s/train and %s/val\n", argv[1], argv[1]);
    return 0;
  }
  char *end = NULL;
  long long per = argc == 4 ? strtoll(argv[3], &end, 10) : 5000;
  if ((argc == 3 || argc == 4) && strcmp(argv[0], "shards") == 0 && (!end || !*end) && per > 0) {
    int64_t samples;
    int shards;
    if (vt_prepare_shards(argv[1], argv[2], per, &samples, &shards, err, sizeof err) != VT_OK) {
      fprintf(stderr, "vit3d prepare: %s\n", err);
      return 1;
    }
    printf("vit3d prepare: %lld samples in %d shard%s in %s (class names in %s/classes.txt); "
           "train with --data %s\n", (long long)samples, shards, shards == 1 ? "" : "s", argv[2],
           argv[2], argv[2]);
    return 0;
  }
  fprintf(stderr, "usage: vit3d prepare fashion-mnist OUT_DIR\n"
                  "  converts Debian's dataset-fashion-mnist files into OUT_DIR/train and "
                  "OUT_DIR/val\n  (ImageFolder trees of PNG files, 10 classes)\n"
                  "usage: vit3d prepare shards SRC OUT_DIR [SAMPLES_PER_SHARD]\n"
                  "  rewrites the dataset SRC (a class folder tree, a list file or shards) as "
                  "tar shards in\n  webdataset's layout, 5000 samples each by default\n");
  return 2;
}

int main(int argc, char **argv) {
  vt_health_catch_preemption();  // before anything: an early SIGUSR1 must not kill a rank
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "train") == 0) {
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world, RUN_TRAIN);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "eval") == 0) {
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world, RUN_EVAL);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "plan") == 0) {
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world, RUN_PLAN);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "export") == 0) return cmd_export(argc - 2, argv + 2);
  if (strcmp(argv[1], "inspect") == 0) {
    if (argc != 3) {
      fprintf(stderr,
              "usage: vit3d inspect DIR   (a checkpoint, or a --save folder: its newest)\n");
      return 2;
    }
    return vt_inspect_run(argv[2]);
  }
  if (strcmp(argv[1], "prepare") == 0) return cmd_prepare(argc - 2, argv + 2);
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    char images[256];
    vt_image_decoders(images, sizeof images);
    printf("vit3d 0.1 (%s; images: %s)\n", vt_backend_build_info(), images);
    return 0;
  }
  fprintf(stderr, "vit3d: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
