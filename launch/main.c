// main.c: the vit3d program: subcommand dispatch and the flags of `vit3d train`.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "comm.h"
#include "train.h"

static void usage(FILE *f) {
  fprintf(f,
          "vit3d: train Vision Transformers in C and CUDA with tensor, pipeline and data "
          "parallelism.\n\n"
          "usage: vit3d <command> [flags]\n\n"
          "commands:\n"
          "  train      train a ViT (see vit3d train --help)\n"
          "  version    print the version and what this build contains\n\n"
          "example:\n"
          "  vit3d train --model tiny --data synthetic --steps 50 --log-dir runs/demo\n");
}

static void train_defaults(vt_train_options *o) {
  memset(o, 0, sizeof *o);
  char err[256];
  vt_config_preset("vit-ti16", &o->model, err, sizeof err);
  snprintf(o->data, sizeof o->data, "synthetic");
  o->micro_batch = 8;
  o->global_batch = 0;
  o->steps = 100;
  o->optim = (vt_optim_config){.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = -1,
                               .total_steps = 100, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                               .weight_decay = 0.05f, .clip_grad = 1.0f};
  o->label_smoothing = 0.1f;
  o->seed = 0;
  o->device = VT_DEVICE_CPU;
  o->threads = 0;
  o->log_interval = 10;
  o->tp = o->pp = 1;
  o->dp = 0;
  snprintf(o->mesh_order, sizeof o->mesh_order, "tp-dp-pp");
  snprintf(o->pp_schedule, sizeof o->pp_schedule, "1f1b");
}

// Every rank parses the same arguments and reaches the same verdict, so every rank exits with
// the same code; only rank 0 prints, so the user reads the message once.
static int cmd_train(int argc, char **argv, vt_comm *world) {
  const int rank0 = vt_comm_rank(world) == 0;
  vt_train_options o;
  train_defaults(&o);
  char model[32], device[8] = "cpu", err[512];
  snprintf(model, sizeof model, "%s", o.model.name);
  // --model picks the preset first; the size flags then override its fields.
  const char *preset = vt_cli_find(argc, argv, "--model");
  if (preset && vt_config_preset(preset, &o.model, err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d train: %s\n", err);
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
      {"--num-classes", VT_OPT_INT, &o.model.num_classes, 0, 2, 1000000, "K", "classes", NULL},
      {"--data", VT_OPT_STR, o.data, sizeof o.data, 0, 0, "SOURCE",
       "training data: synthetic (a deterministic, learnable image task)", NULL},
      {"--micro-batch-size", VT_OPT_INT, &o.micro_batch, 0, 1, 65536, "B",
       "images per forward/backward pass", NULL},
      {"--global-batch-size", VT_OPT_INT, &o.global_batch, 0, 0, 1 << 24, "G",
       "images per optimizer step, a multiple of dp x micro-batch (gradient accumulation); "
       "0: dp x micro-batch", NULL},
      {"--steps", VT_OPT_I64, &o.steps, 0, 1, BIG, "N", "optimizer steps to run", NULL},
      {"--lr", VT_OPT_FLOAT, &o.optim.lr, 0, 0, 10, "LR", "peak learning rate", NULL},
      {"--min-lr", VT_OPT_FLOAT, &o.optim.min_lr, 0, 0, 10, "LR",
       "learning rate at the end of the cosine decay", NULL},
      {"--warmup-steps", VT_OPT_I64, &o.optim.warmup_steps, 0, -1, BIG, "N",
       "steps of linear warmup; -1: 5% of --steps", NULL},
      {"--weight-decay", VT_OPT_FLOAT, &o.optim.weight_decay, 0, 0, 10, "WD",
       "AdamW decoupled weight decay (not on biases, norms, pos_embed, cls_token)", NULL},
      {"--clip-grad", VT_OPT_FLOAT, &o.optim.clip_grad, 0, 0, 1e6, "NORM",
       "clip gradients to this global norm; 0 turns clipping off", NULL},
      {"--label-smoothing", VT_OPT_FLOAT, &o.label_smoothing, 0, 0, 0.999, "S",
       "label smoothing of the cross-entropy", NULL},
      {"--seed", VT_OPT_U64, &o.seed, 0, 0, 1.8e19, "N",
       "seed of weights and data (same seed, same run)", NULL},
      {"--device", VT_OPT_STR, device, sizeof device, 0, 0, "DEV", "cpu or cuda", "cpu|cuda"},
      {"--threads", VT_OPT_INT, &o.threads, 0, 0, 4096, "N",
       "CPU threads per rank for OpenMP and BLAS together; 0: cores / ranks", NULL},
      {"--tp", VT_OPT_INT, &o.tp, 0, 1, 4096, "N", "tensor-parallel ranks (inside a node)", NULL},
      {"--pp", VT_OPT_INT, &o.pp, 0, 1, 4096, "N", "pipeline stages (across nodes)", NULL},
      {"--dp", VT_OPT_INT, &o.dp, 0, 0, 1 << 20, "N",
       "data-parallel replicas; 0: world size / (tp * pp)", NULL},
      {"--mesh-order", VT_OPT_STR, o.mesh_order, sizeof o.mesh_order, 0, 0, "ORDER",
       "how ranks map to the mesh, innermost axis first", "tp-dp-pp|tp-pp-dp"},
      {"--pp-schedule", VT_OPT_STR, o.pp_schedule, sizeof o.pp_schedule, 0, 0, "KIND",
       "pipeline schedule", "1f1b|gpipe"},
      {"--zero", VT_OPT_INT, &o.zero, 0, 0, 1, "N",
       "1: shard AdamW state over data-parallel ranks (ZeRO-1)", NULL},
      {"--sequence-parallel", VT_OPT_INT, &o.sequence_parallel, 0, 0, 1, "N",
       "1: split the stream and LayerNorms by tokens over the TP group (reduce-scatter + "
       "all-gather instead of all-reduce)", NULL},
      {"--comm-stats", VT_OPT_INT, &o.comm_stats, 0, 0, 1, "N",
       "1: every rank writes its first step's traffic per axis to LOG_DIR/comm.rank<R>.json",
       NULL},
      {"--final-weights", VT_OPT_STR, o.final_weights, sizeof o.final_weights, 0, 0, "FILE",
       "at the end, write the full unsharded weights (safetensors, timm names)", NULL},
      {"--log-dir", VT_OPT_STR, o.log_dir, sizeof o.log_dir, 0, 0, "DIR",
       "write DIR/metrics.jsonl, one JSON object per step", NULL},
      {"--log-interval", VT_OPT_INT, &o.log_interval, 0, 1, 1 << 30, "N",
       "print the progress line every N steps", NULL},
  };
  const int nopts = (int)(sizeof opts / sizeof opts[0]);
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (!rank0) return 0;
      printf("usage: vit3d train [flags]\n\nTrains a ViT and prints a progress line per "
             "--log-interval steps.\n\nflags [default]:\n");
      vt_cli_help(stdout, opts, nopts);
      return 0;
    }
  if (vt_cli_parse(opts, nopts, argc, argv, err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d train: %s\n", err);
    return 2;
  }
  o.device = strcmp(device, "cuda") == 0 ? VT_DEVICE_CUDA : VT_DEVICE_CPU;
  o.optim.total_steps = o.steps;
  if (o.optim.warmup_steps < 0) o.optim.warmup_steps = o.steps / 20;
  if (o.threads == 0) {  // share the cores: ranks of a job on one host must not oversubscribe
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per = cores > 0 ? (int)cores / vt_comm_local_size(world) : 1;
    o.threads = per > 0 ? per : 1;
  }
  if (vt_train_validate(&o, vt_comm_size(world), err, sizeof err) != VT_OK) {
    if (rank0) fprintf(stderr, "vit3d train: %s\n", err);
    return 2;
  }
  return vt_train_run(&o, world);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "train") == 0) {
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("vit3d 0.1 (%s)\n", vt_backend_build_info());
    return 0;
  }
  fprintf(stderr, "vit3d: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
