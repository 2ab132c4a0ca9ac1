// main.c: the vit3d program: subcommand dispatch; the flags of train, eval and plan are
// train_flags.c's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "health.h"
#include "image.h"
#include "inspect.h"
#include "plan.h"
#include "prepare.h"
#include "safetensors.h"
#include "train.h"
#include "train_flags.h"

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
          "             (timm names, the run's model flags and normalisation as metadata)\n"
          "  inspect    vit3d inspect DIR: what a checkpoint (or a --save folder's newest) holds\n"
          "             and the model flags that resume it; vit3d inspect FILE.safetensors: its\n"
          "             tensors and metadata (an export's: the flags that evaluate it)\n"
          "  prepare    prepare a dataset: vit3d prepare fashion-mnist OUT_DIR, or\n"
          "             vit3d prepare shards SRC OUT_DIR [SAMPLES_PER_SHARD] (tar shards)\n"
          "  version    print the version and what this build contains\n\n"
          "example:\n"
          "  vit3d train --model tiny --data synthetic --steps 50 --log-dir runs/demo\n");
}

// Whether every rank runs the same words (after their @FILEs): a rank started with others (an
// MPMD launch, a script that builds the flags per rank) failed later on an internal check of
// the mesh, or finished early while the others waited for it until the watchdog. Collective;
// rank 0 says which rank differs.
static int same_command(vt_comm *world, int argc, char **argv, vt_run_mode mode) {
  // (the subcommand too: a train rank beside a plan rank hung where plan has no collectives)
  uint64_t h = vt_fnv64(VT_FNV_START, &mode, sizeof mode);
  for (int i = 0; i < argc; i++) h = vt_fnv64(h, argv[i], strlen(argv[i]) + 1);  // (with NULs)
  int other = -1;
  vt_comm_same_keys(world, h, &other);
  if (other >= 0 && vt_comm_rank(world) == 0)
    fprintf(stderr, "vit3d %s: world rank %d was started with another command or other "
            "flags than rank 0 (or @FILEs of other contents): every rank of a job runs the same "
            "command\n",
            mode == VT_RUN_EVAL ? "eval" : mode == VT_RUN_PLAN ? "plan" : "train", other);
  return other < 0;
}

// The flags are train_flags.c's; what is left is which of the three the command runs.
static int run_train(int argc, char **argv, vt_comm *world, vt_run_mode mode) {
  vt_train_options o;
  int rc = vt_train_flags_parse(argc, argv, mode, world, &o);
  // vit3d plan sizes the mesh the flags describe, whatever this process's world.
  const int64_t size = rc < 0 && mode == VT_RUN_PLAN ? (int64_t)o.tp * o.pp * (o.dp > 0 ? o.dp : 1)
                                                     : vt_comm_size(world);
  char err[512];
  if (rc < 0 && o.plan_gpus <= 0 && size > (1 << 24)) {
    snprintf(err, sizeof err, "tp %d x pp %d x dp %d = %lld ranks: at most 16777216", o.tp, o.pp,
             o.dp, (long long)size);
    rc = vt_train_flags_refuse(world, mode, err);
  }
  if (rc < 0 && o.plan_gpus <= 0 && vt_train_validate(&o, (int)size, err, sizeof err) != VT_OK)
    rc = vt_train_flags_refuse(world, mode, err);
  rc = vt_train_flags_agree(world, rc);
  if (rc >= 0) return rc;
  if (!same_command(world, argc, argv, mode)) return 2;
  const int rank0 = vt_comm_rank(world) == 0;
  if (o.plan_gpus > 0) return rank0 ? vt_plan_search(&o) : 0;
  if (mode == VT_RUN_PLAN) return rank0 ? vt_plan_run(&o) : 0;
  return vt_train_run(&o, world);
}

// Arguments files (@FILE) are expanded first, so a recipe's flags can live in a file.
static int cmd_train(int argc, char **argv, vt_comm *world, vt_run_mode mode) {
  int n;
  char **v, err[600];
  if (vt_cli_expand(argc, argv, &n, &v, err, sizeof err) != VT_OK)
    return vt_train_flags_agree(world, vt_train_flags_refuse(world, mode, err));
  // (a training run, and its plan, take the file's model flags; its normalisation is compared:
  // a warning)
  const int eval = mode == VT_RUN_EVAL;
  if (vt_train_flags_from_file(&n, &v, eval) > 0 && vt_comm_rank(world) == 0)
    vt_log_info("the model%s the command line leaves out are the --init-from file's (its "
                "metadata; vit3d inspect FILE prints them)",
                eval ? ", normalisation and evaluation transform" : "'s flags");
  const int rc = run_train(n, v, world, mode);
  vt_cli_free(n, v);
  return rc;
}

// vit3d export --checkpoint DIR --out FILE: the checkpoint's model.safetensors holds the full,
// unsharded weights with timm's names already; verify the checkpoint and copy its tensors
// atomically, with metadata that says how to feed them (vt_ckpt_file_meta).
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
  static const char usage_line[] =
      "usage: vit3d export --checkpoint DIR --out FILE.safetensors [--use-ema 1]\n";
  if (argc == 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
    printf("%s", usage_line);
    return 0;
  }
  const vt_status parsed = vt_cli_parse(opts, 3, argc, argv, err, sizeof err);
  if (parsed != VT_OK || !ckpt[0] || !out[0]) {
    fprintf(stderr, "vit3d export: %s\n%s", parsed != VT_OK ? err
                                             : !ckpt[0] ? "--checkpoint DIR is missing"
                                                        : "--out FILE is missing", usage_line);
    return 2;
  }
  vt_ckpt_manifest man;
  char dir[1100];
  // (exit codes as train's, docs/operations.md: 2 for what the user gave, 1 for a failed write)
  const char *file = vt_ckpt_weights_file(use_ema);
  if (vt_ckpt_open(ckpt, dir, sizeof dir, &man, err, sizeof err) != VT_OK) {
    // A checkpoint whose other files are damaged (its optimizer state lost) still gives its
    // weights where their file verifies.
    char why[1200];
    if (!vt_ckpt_is_checkpoint(ckpt) ||
        vt_ckpt_verify_file(ckpt, &man, file, why, sizeof why) != VT_OK) {
      fprintf(stderr, "vit3d export: %s\n", err);
      return 2;
    }
    snprintf(dir, sizeof dir, "%s", ckpt);
    fprintf(stderr, "vit3d export: warning: %s; its %s verifies (size and CRC-32), and is "
            "what is exported\n", err, file);
  }
  if (!vt_ckpt_manifest_lists(&man, file)) {  // (--use-ema: model.safetensors is always there)
    fprintf(stderr, "vit3d export: %s has no EMA weights (it was saved without --model-ema)\n",
            dir);
    return 2;
  }
  char src[1200];
  snprintf(src, sizeof src, "%s/%s", dir, file);
  vt_ckpt_file_meta fm;
  char model[600];
  vt_inspect_model_flags(&man, model, sizeof model);
  vt_ckpt_file_meta_make(&fm, &man, use_ema, model);
  // (its folder made where missing, as a training run's output files')
  if (vt_output_file_check(out, "--out", err, sizeof err) != VT_OK ||
      vt_output_dir_check(out, "--out", err, sizeof err) != VT_OK) {
    fprintf(stderr, "vit3d export: %s\n", err);
    return 2;
  }
  // (a path in a checkpoint's folder, this one's or another's, would replace one of its files,
  // or add one to it)
  char parent[600];
  snprintf(parent, sizeof parent, "%s", out);
  char *slash = strrchr(parent, '/');
  if (slash) slash[slash == parent] = '\0';
  else snprintf(parent, sizeof parent, ".");
  if (vt_ckpt_is_checkpoint(parent)) {
    fprintf(stderr, "vit3d export: --out %s is in the checkpoint folder %s, whose files it "
            "would change: give a path outside it\n", out, parent);
    return 2;
  }
  const vt_status st = vt_safetensors_copy_meta(src, out, fm.kv, fm.n, err, sizeof err);
  if (st != VT_OK) {
    fprintf(stderr, "vit3d export: %s\n", err);
    return st == VT_ERR_INPUT ? 2 : 1;
  }
  printf("vit3d export: wrote %s (%s, step %lld%s, timm names, fp32)\n", out, dir,
         (long long)man.step, use_ema ? ", EMA weights" : "");
  printf("vit3d export: its metadata:");
  for (int i = 0; i < fm.n; i++) printf(" %s=%s", fm.kv[2 * i], fm.kv[2 * i + 1]);
  printf("%s\n", man.norm_recorded ? "" : " (the checkpoint, of an older vit3d, does not record "
         "its normalisation)");
  return 0;
}

static int cmd_prepare(int argc, char **argv) {
  char err[1024];
  for (int i = 1; i < argc; i++)
    if (!argv[i][0]) {  // "" would put OUT_DIR's files at the file system's root
      fprintf(stderr, "vit3d prepare: an empty path (\"\", argument %d after prepare): give a "
              "folder, such as data/fashion-mnist\n", i + 1);
      return 2;
    }
  if (argc == 2 && strcmp(argv[0], "fashion-mnist") == 0) {
    const vt_status st = vt_prepare_fashion_mnist(argv[1], err, sizeof err);
    if (st != VT_OK) {
      fprintf(stderr, "vit3d prepare: %s\n", err);
      return st == VT_ERR_INPUT ? 2 : 1;
    }
    printf("vit3d prepare: Fashion-MNIST is in %s/train and %s/val\n", argv[1], argv[1]);
    return 0;
  }
  char *end = NULL;
  long long per = argc == 4 ? strtoll(argv[3], &end, 10) : 5000;
  if (argc == 4 && strcmp(argv[0], "shards") == 0 && (*end || end == argv[3] || per <= 0)) {
    fprintf(stderr, "vit3d prepare shards: SAMPLES_PER_SHARD '%s' is not a whole number above 0 "
            "(5000 when left out)\n", argv[3]);
    return 2;
  }
  if ((argc == 3 || argc == 4) && strcmp(argv[0], "shards") == 0) {
    int64_t samples;
    int shards;
    const vt_status st = vt_prepare_shards(argv[1], argv[2], per, &samples, &shards, err,
                                           sizeof err);
    if (st != VT_OK) {
      fprintf(stderr, "vit3d prepare: %s\n", err);
      return st == VT_ERR_INPUT ? 2 : 1;
    }
    printf("vit3d prepare: %lld samples in %d shard%s in %s (class names in %s/classes.txt); "
           "train with --data %s (or, a validation set, --val-data %s)\n", (long long)samples,
           shards, shards == 1 ? "" : "s", argv[2], argv[2], argv[2], argv[2]);
    return 0;
  }
  const int help = argc == 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"));
  fprintf(help ? stdout : stderr, "usage: vit3d prepare fashion-mnist OUT_DIR\n"
                  "  converts Debian's dataset-fashion-mnist files into OUT_DIR/train and "
                  "OUT_DIR/val\n  (ImageFolder trees of PNG files, 10 classes)\n"
                  "usage: vit3d prepare shards SRC OUT_DIR [SAMPLES_PER_SHARD]\n"
                  "  rewrites the dataset SRC (a class folder tree, a list file or shards) as "
                  "tar shards in\n  webdataset's layout, 5000 samples each by default\n");
  return help ? 0 : 2;
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "train") == 0) {
    // Before anything: an early SIGUSR1 must not kill a rank. (Only training acts on these
    // signals; the other commands end on them as programs do.)
    vt_health_catch_preemption();
    vt_comm_tcp_set_connect_check(vt_health_exit_if_signalled);
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world, VT_RUN_TRAIN);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "eval") == 0) {
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world, VT_RUN_EVAL);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "plan") == 0) {
    vt_comm *world = vt_comm_world_init(&argc, &argv);
    int rc = cmd_train(argc - 2, argv + 2, world, VT_RUN_PLAN);
    vt_comm_finalize(world);
    return rc;
  }
  if (strcmp(argv[1], "export") == 0) return cmd_export(argc - 2, argv + 2);
  if (strcmp(argv[1], "inspect") == 0) {
    const int help = argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"));
    if (argc != 3 || help) {
      fprintf(help ? stdout : stderr,
              "usage: vit3d inspect DIR   (a checkpoint, or a --save folder: its newest)\n"
              "       vit3d inspect FILE.safetensors   (an export's or another tool's weights)\n");
      return help ? 0 : 2;
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
