// train.h: the options and the loop of `vit3d train` on a tp x pp x dp mesh of ranks.
// Must not depend on the CLI parser (train_flags.c fills the options).
#ifndef VT_TRAIN_H
#define VT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "erase.h"
#include "mix.h"
#include "optim.h"
#include "transform.h"
#include "vt_backend.h"

typedef struct vt_comm vt_comm;

typedef struct {
  vt_vit_config model;
  char data[512];           // "synthetic", an ImageFolder directory or a list file
  char val_data[512];       // validation set (same forms); empty: none
  char index_cache[512];    // folder of dataset index cache entries (index_cache.h); "": none
  char label_key[48];       // tar shards: the label member (KEY.cls by default; label.h)
  char label_names[512];    // tar shards: class names file (label.h); empty: numbers only
  int eval_interval;        // evaluate every N steps (and at the end); 0: only at the end
  int eval_hflip;           // 1: score the mean logits of each image and its mirror image
  int loader_threads;       // decoder threads per rank that decodes
  int decode_split;         // 1: the first stage's TP ranks each make 1/tp of a micro-batch's
                            // images and all-gather them (data.h); 0: each makes them all
  int prefetch;             // ready micro-batches the loader keeps ahead
  int64_t max_image_pixels; // larger images are refused as bad (decompression bombs)
  int bad_image_fail;       // 0: skip bad images (replace, warn, count); 1: stop the run
  vt_transform_config transform;  // crops, flips, RandAugment (transform.ra), normalisation
  int aug_repeats;          // repeated augmentation: each image R times an epoch (dataset.h)
  // Set once the training set is open (0: synthetic data): its images and the hash of its class
  // names (vt_data_identity), for the checkpoints' manifests.
  int64_t data_images, data_classes;
  int drop_last;            // 1: an epoch of the training set is its whole global batches (timm's
                            // drop_last; vt_epoch_images), the rest of its images left out
  int micro_batch;          // images per forward/backward
  int global_batch;         // images per optimizer step, over all DP ranks
  int64_t steps;            // length of the run (the schedule spans it)
  // > 0: steps (and with warmup_epochs the warmup, with eval_epochs and save_epochs the
  // intervals) from the training set's size, once it is open: round(E * images / global batch)
  // (vt_train_run)
  double epochs, warmup_epochs, eval_epochs, save_epochs;
  int sched_epochs;         // --sched-on epochs: timm's per-epoch rate (vt_optim_config)
  int tensorboard;          // 1: TensorBoard events beside metrics.jsonl in log_dir (tfevents.h)
  int resume_override;      // 1: resume even where the optimizer or schedule differ (ckpt_resume.c)
  int64_t run_steps;        // steps to run in this invocation, then stop; 0: until the end
  char eval_adopted[1100];  // vit3d eval --checkpoint: the checkpoint whose manifest gave the
                            // flags the command line left out ("": none)
  int eval_resumed;         // 1: the run resumed evaluated and this one does not: transform's
                            // evaluation fields are that run's, which its manifests record
  char eval_unused[64];     // a training run's --eval-interval, --eval-epochs or --eval-hflip
                            // given without --val-data (a warning names them: they do nothing)
  vt_optim_config optim;
  float label_smoothing;
  int bce_loss;             // 1: binary cross-entropy over the classes (vt_bce_fwd) in training
  float bce_thresh;         // its binary targets' threshold (vt_model.bce_thresh); < 0: soft
  float drop_path;          // stochastic depth rate of the last block (timm's drop_path_rate)
  int drop_path_uniform;    // 1: of every block (DeiT III's models_v2), not a ramp from 0
  float proj_drop, attn_drop, pos_drop, head_drop;  // dropout: timm's proj_drop, attn_drop,
                                                    // pos_drop and drop rates
  vt_mix_config mix;        // Mixup/CutMix of pairs of the stream (dataio/mix.h)
  vt_erase_config erase;    // random erasing of training images (dataio/erase.h)
  int recompute_blocks;     // activation recompute of each stage's first N blocks (vt_model_init)
  uint64_t seed;
  vt_device device;
  vt_precision precision;   // GEMM precision (vt_backend.h); bf16 by default on CUDA, fp32 on CPU
  int threads;              // 0: the rank's CPUs / the host's ranks sharing them (at start)
  char log_dir[512];        // metrics.jsonl goes here when set
  char check_log[512];      // an earlier run's metrics.jsonl each step is compared with
  float check_tol;          // 0: the same printed figures; else this relative difference
  int log_interval;         // progress line every N steps
  int tp, pp, dp;           // mesh sizes; dp 0 = world / (tp * pp)
  char mesh_order[16];      // tp-dp-pp | tp-pp-dp
  char pp_schedule[16];     // 1f1b | gpipe | interleaved | zb-h1 | zb-v
  int pp_chunks;            // model chunks per pipeline rank (interleaved, zb-v); 0: 2 with
                            // those two, else 1
  // zb-v: the pass times its order is built for: "auto" (on CPU ranks measured in the run's
  // second step, then the order rebuilt for them; on GPUs equal), "equal", or "F:B:W" (relative
  // times per unit)
  char pp_pass_times[48];
  int zero;                 // 0 | 1
  int sequence_parallel;    // 0 | 1
  char final_weights[512];  // write the full, unsharded weights here at the end (safetensors)
  char final_ema[512];      // ... and their EMA (--model-ema) here
  int use_ema;              // vit3d eval: the checkpoint's EMA weights instead of its weights
  char save_dir[512];       // checkpoints go here (empty: none)
  int save_interval;        // save every N steps (and after the last); 0: only after the last
  int async_save;           // 1: every rank writes its part of each checkpoint but the last on
                            // a thread of its own (ckpt.c)
  int keep_last;            // complete checkpoints kept; 0: all
  int64_t keep_every;       // with keep_last: checkpoints of steps that are multiples are kept too
  char save_hook[1024];     // shell command world rank 0 runs after each commit (savehook.h)
  float save_hook_timeout;  // seconds a save hook may run before it is stopped; 0: no limit
  char resume[512];         // "auto", a checkpoint directory, or empty
  char resume_fallback[512];  // with --resume auto: the checkpoint where --save holds none
  char init_from[512];      // start from these timm-format weights (safetensors)
  int eval_only;            // `vit3d eval`: load, evaluate --val-data once, stop
  int plan_only;            // `vit3d plan`: size the memory, run nothing
  int plan_gpus;            // vit3d plan --gpus N: search the meshes of N ranks (0: the flags')
  float plan_gpu_mem;       // --gpu-mem: GiB per GPU for the search
  int plan_node_gpus;       // --node-gpus: GPUs per node, TP's upper bound in the search
  char logits_out[512];     // vit3d eval on one rank: write the inputs and logits (safetensors)
  char predictions[512];    // vit3d eval with one DP replica: each image's top-5 (CSV)
  int comm_stats;           // 1: each rank writes its first step's traffic per axis (log-dir)
  int trace_steps;          // a timeline of this many steps in LOG_DIR/trace.json (timeline.h)
  float timeout_s;          // watchdog: a step or collective may take this long; 0: off
  int max_nonfinite;        // stop after this many non-finite steps in a row
  int straggler_interval;   // per-rank step times and memory every N steps; 0: never
  float peak_tflops;        // per rank, for MFU; 0: 989 (bf16) or 67 (fp32) on CUDA, none on
                            // CPU
} vt_train_options;

// The stream positions of one epoch of a training set of n images: n, or under --drop-last its
// floor(n / G) whole global batches of G (timm's and DeiT's training loader, drop_last=True).
static inline int64_t vt_epoch_images(const vt_train_options *o, int64_t n) {
  return o->drop_last ? n / o->global_batch * o->global_batch : n;
}

// Exit codes of vit3d train and eval (docs/operations.md "Exit codes"); the watchdog's is
// VT_EXIT_WATCHDOG (3) in watchdog.h.
enum {
  VT_EXIT_FAILED = 1,      // a runtime failure (I/O, a failed export)
  VT_EXIT_USAGE = 2,       // bad flags, configuration, data or checkpoint: nothing ran
  VT_EXIT_NONFINITE = 4,   // --max-nonfinite-steps non-finite steps in a row
  VT_EXIT_CHECK = 5,       // --check-log: a step differed from the reference (or none compared)
  VT_EXIT_PREEMPTED = 75,  // SIGUSR1/SIGTERM: checkpoint saved, resume with --resume auto
  VT_EXIT_INTERRUPTED = 130,  // SIGINT (Ctrl-C): stopped at a step boundary, checkpoint saved
};


// Checks of options that single flags cannot see, against the job's world size. Every rank
// gets the same verdict; the caller prints it on rank 0 only.
vt_status vt_train_validate(vt_train_options *o, int world_size, char *err, size_t errlen);
// --pp-pass-times: 1 for "auto", 0 for "equal" (costs all 0), 2 for "F:B:W" (costs set, each
// positive), -1 otherwise.
int vt_train_pass_times(const char *text, double costs[3]);

// Runs the training loop on every rank of world. Returns the process exit code.
int vt_train_run(const vt_train_options *o, vt_comm *world);

#endif
