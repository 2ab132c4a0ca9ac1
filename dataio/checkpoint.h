// checkpoint.h: the on-disk checkpoint directory and its atomic commit, without MPI or a model.
//
//   SAVE_DIR/latest                 name of the newest complete checkpoint, replaced by rename
//   SAVE_DIR/step-00000010/         one complete checkpoint
//       model.safetensors           full, unsharded parameters, timm names and shapes (fp32)
//       optim.safetensors           Adam moments "exp_avg.<name>", "exp_avg_sq.<name>" (fp32);
//                                   SGD's "momentum_buffer.<name>"
//       manifest.txt                "key value" lines: format, step, data position, seeds,
//                                   model config, the optimizer's settings and schedule, the
//                                   mesh it was saved on, and the size and CRC-32 of every
//                                   file, written last; its second line (manifest_crc32) the
//                                   CRC-32 of the text after it
//   SAVE_DIR/.tmp-step-00000010/    a checkpoint being written; never read, removed on start
//
// Files are written into the .tmp directory (by many ranks at once: partfile.h), synced, the
// directory is renamed into place and synced, then `latest` is replaced by rename. A crash at any moment leaves the previous
// checkpoint complete and `latest` pointing at a complete one (or at the new one, once whole).
#ifndef VT_CHECKPOINT_H
#define VT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

#define VT_CKPT_MAX_FILES 4

typedef struct {
  int64_t step;             // optimizer steps done
  int64_t stream_position;  // next sample of the data stream (design.md)
  int64_t global_batch;
  int64_t adam_t;           // optimizer steps taken (Adam's bias corrections)
  int64_t adam_t0;          // the step count Adam's moments restarted at (vt_optimizer.t0; 0)
  int64_t bad_images;       // training images found bad up to this step, the running total
                            // metrics.jsonl logs (written only when > 0; 0 when absent)
  // The spike guard's statistics (vit/spike.h) of the loss [0] and the gradient norm [1]: values
  // taken, moving mean and variance (lines "spike_loss N MEAN VAR", "spike_norm ..."; absent:
  // none taken, as in manifests that predate them).
  int64_t spike_n[2];
  double spike_mean[2], spike_var[2];
  int lamb;                 // 1: trained with LAMB, 0: AdamW (0 when the manifest predates it)
  int sgd;                  // SGD: 2 with Nesterov momentum, 1 plain momentum; 0: not SGD (0 when
                            // the manifest predates it)
  int lars;                 // LARS: 1 + Nesterov momentum + 2 LARC's clipping (1 lars, 2 nlars,
                            // 3 larc, 4 nlarc); 0: not LARS (0 when absent)
  double momentum;          // SGD's or LARS's momentum (written for those only)
  uint64_t seed;
  // The training set the stream position counts in: its images and a hash of its class names
  // (vt_data_identity), which a resume compares with its own (a warning); written where known
  // (0: the manifest predates them, or synthetic data).
  int64_t data_images, data_classes;
  // The optimizer's settings and learning-rate schedule (has_optim 0 when the manifest predates
  // them), which a resume compares with its own (launch/ckpt_resume.c): the resolved lengths in
  // steps, and with sched_epochs (--sched-on epochs) the epoch's images and the lengths in epochs.
  int has_optim;
  double lr, min_lr, warmup_lr, weight_decay, opt_eps, clip_grad, layer_decay;
  int64_t warmup_steps, total_steps;
  int sched_epochs;
  int sched;  // vt_sched_kind: 0 cosine, 1 linear, 2 constant (0 when the manifest predates it)
  int64_t epoch_images;
  double warmup_epochs, cycle_epochs;
  // Frozen tensors (--freeze, --trainable): how many, and the FNV-1a hash of their names
  // (vt_freeze_summary); written only where some are (0 when absent).
  int frozen;
  int64_t frozen_hash;
  // optim.safetensors holds the state of the layers from this one on (vt_param.layer): the
  // leading wholly frozen layers, whose state is zeros, are left out; written only when > 0.
  int optim_from_layer;
  // model configuration
  int img_size, patch_size, width, depth, heads, num_classes;
  int global_pool;  // vt_vit_config's: 0 token, 1 avg, 2 gap, 3 map (0 when the manifest predates it)
  int aug_repeats;  // the data stream's repeated augmentation (1 when the manifest predates it)
  int drop_last;    // 1: epochs of whole global batches (--drop-last); written only when 1
  int layer_scale;  // 1: the model has LayerScale gammas (0 when the manifest predates them)
  int no_embed_class, reg_tokens;  // vt_vit_config's (0 when the manifest predates them)
  int qk_norm;                     // vt_vit_config's (0 when the manifest predates it)
  int qkv_bias;                    // 0: no qkv bias (1 when the manifest predates it)
  int parallel;                    // parallel blocks (0 when the manifest predates them)
  int class_token;                 // 0: no class token (1 when the manifest predates it)
  int gelu_tanh;                   // 1: tanh GELU (0 when the manifest predates it)
  int quick_gelu;                  // 1: quick GELU (0 when the manifest predates it)
  int pos_sincos;                  // 1: fixed 2D sin-cos positions (0 when the manifest predates
                                   // them)
  int pre_logits;                  // the pre-logits layer's width, 0: none (0 when the manifest
                                   // predates it)
  float mlp_ratio;
  int mlp_dim;  // the MLP's hidden width (0 when the manifest predates it: width x mlp_ratio)
  int pre_norm;    // 1: norm_pre before the blocks (0 when the manifest predates it)
  float norm_eps;  // the LayerNorms' eps (1e-6 when the manifest predates it)
  // Settings that change the computation without changing the files' tensors (the manifest's
  // "settings": ckpt_manifest.c's table): the regularisation, the loss, the EMA's decay and the
  // freeze patterns, which a resume compares with its own (launch/ckpt_resume.c). Each is
  // written only where it differs from its absent value, the flag's default, so that a manifest
  // of a default run stays readable by older vit3d binaries; a manifest that predates them reads
  // as a run with the defaults (recorded 0: none was written).
  float drop_path;                  // --drop-path (0)
  int drop_path_uniform;            // --drop-path-uniform (0)
  float proj_drop, attn_drop, pos_drop, head_drop;  // --proj-drop, --attn-drop, --pos-drop,
                                                    // --drop (0)
  float mixup, cutmix, mix_prob, mix_switch_prob;   // --mixup, --cutmix (0), --mix-prob (1),
                                                    // --mix-switch-prob (0.5)
  float reprob;                     // --reprob (0)
  int remode;                       // --remode as vt_erase_mode: 0 const, 1 rand, 2 pixel (2)
  char aa[96];                      // --aa as vt_randaug_describe writes it ("": off)
  float label_smoothing;            // --label-smoothing (0.1)
  int bce_loss;                     // --bce-loss (0)
  float bce_thresh;                 // --bce-target-thresh (-1)
  float hflip, crop_scale_min;      // --hflip (0.5), --crop-scale-min (0.08; not with simple crop)
  int train_interp;                 // --train-interpolation as vt_interp: 0 sample (0)
  int simple_crop, three_augment;   // --simple-crop, --three-augment (0)
  float color_jitter;               // --color-jitter (0.3; 3-Augment's only)
  float color_jitter_alone;         // --color-jitter without --three-augment (0)
  int jpeg_reduce;                  // --jpeg-reduce (1)
  int aa_interp;                    // --aa-interpolation as vt_ra_interp: 1 bicubic (1; --aa's)
  int precision;                    // --precision as vt_precision: 1 bf16, 0 fp32 (-1: not
                                    // recorded, before 2026-12-07; written in every manifest)
  float mean[3], std[3];            // --mean, --std (ImageNet's: 0.485,0.456,0.406 and
                                    // 0.229,0.224,0.225)
  double eval_crop_pct;             // --eval-crop-pct (0.875)
  int eval_squash, eval_interp;     // --eval-crop-mode squash (0), --eval-interpolation as
                                    // vt_interp (0 sample)
  int norm_recorded;  // 1: the manifest records these five (always written, since 2026-12-07);
                      // 0: an older vit3d's, whose normalisation and evaluation are not known
  int evaluated;      // 1: the saving run's line of training evaluated (--val-data), with the
                      // transform above; 0: it did not; -1: not known (not written before
                      // 2026-12-07's second version: compared as if it did)
  float ema_decay;                  // --model-ema (0: none)
  int ema_warmup;                   // --model-ema-warmup (0)
  char freeze[256], trainable[256];  // --freeze, --trainable ("": none)
  int recorded;                     // how many of these settings the manifest holds
  // Keys this binary does not know (written by a newer vit3d): skipped, their names here
  // (space-separated, cut at the buffer's end) for a warning by whoever uses the checkpoint.
  int nunknown;
  char unknown[256];
  // the mesh it was saved on (informational: a checkpoint loads on any mesh)
  int tp, pp, dp, zero, sequence_parallel;
  // files: name, bytes, CRC-32
  int nfiles;
  char file[VT_CKPT_MAX_FILES][64];
  int64_t file_nbytes[VT_CKPT_MAX_FILES];
  uint32_t file_crc[VT_CKPT_MAX_FILES];
  int sealed;  // 1: its manifest_crc32 line (the CRC-32 of the text after it) was verified; 0:
               // none (an older vit3d's, or one removed by hand: not told apart, test_manifest)
} vt_ckpt_manifest;

// CRC-32 (IEEE, as zlib's crc32) of a buffer, continuing from crc (start with 0).
uint32_t vt_crc32(uint32_t crc, const void *data, size_t nbytes);
// Size and CRC-32 of a file.
vt_status vt_file_crc32(const char *path, int64_t *nbytes, uint32_t *crc, char *err, size_t errlen);

// The MLP's hidden width of the model a manifest describes.
int vt_ckpt_mlp_hidden(const vt_ckpt_manifest *m);

// Manifest text <-> struct. Parsing is strict about what it knows: an unknown format, missing
// or malformed keys and out-of-range values are VT_ERR_INPUT with the line named. A key it does
// not know is skipped and named in m->unknown (a newer vit3d's optional key: its checkpoint
// still resumes here, with a warning); a change that an older binary must not skip comes with
// a new format line, which it refuses.
int vt_ckpt_manifest_format(const vt_ckpt_manifest *m, char *buf, size_t nbytes);
vt_status vt_ckpt_manifest_parse(const char *text, size_t nbytes, vt_ckpt_manifest *m, char *err,
                                 size_t errlen);

// Creates SAVE_DIR (and parents) and SAVE_DIR/.tmp-step-N for the files of a new checkpoint;
// returns its path in tmp_dir.
vt_status vt_ckpt_begin(const char *save_dir, int64_t step, char *tmp_dir, size_t tmp_len,
                        char *err, size_t errlen);
// Writes manifest.txt (m lists the files in tmp_dir with their sizes and CRC-32s, as their
// writers computed them) and syncs everything; renames the checkpoints of steps past m's, and a
// complete one of m's step, abandoned-step-N (another line of training: the run resumed from an
// older one); renames the directory into place (the commit: --resume auto takes the newest
// complete step-N) and points `latest` at it (a failure there is a warning). Then removes the
// oldest beyond keep_last, m's counted (0 keeps all), except those whose step is a multiple of
// keep_every (milestones; 0: none).
vt_status vt_ckpt_commit(const char *save_dir, const char *tmp_dir, const vt_ckpt_manifest *m,
                         int keep_last, int64_t keep_every, char *err, size_t errlen);
// Removes a tmp directory after a failed save.
void vt_ckpt_abandon(const char *tmp_dir);
// An interrupted save's recovery: its tmp directory holds rank 0's manifest without the
// CRC-32s (manifest.draft, written before any part) and, from each rank whose parts are written
// and synced, part-R with its CRC-32 shares and byte counts (partfile.h). The commit removes
// them once manifest.txt is written.
vt_status vt_ckpt_mark_draft(const char *tmp_dir, const vt_ckpt_manifest *m, char *err,
                             size_t errlen);
vt_status vt_ckpt_mark_part(const char *tmp_dir, int rank, int nfiles, const uint32_t *shares,
                            const int64_t *nbytes, char *err, size_t errlen);
// The leftover .tmp-* directories of interrupted saves (a rank that died between its writes and
// the commit, or during them), by the run that continues them (--resume auto, holding --save):
// each not before the newest checkpoint whose every rank marked its part done (or whose commit
// had written manifest.txt) is verified, its files' sizes and CRC-32s read whole, and committed
// (keep_last, keep_every: vt_ckpt_commit's); the rest are removed. Each is logged; *recovered:
// the newest step recovered, or -1. VT_ERR_IO, with the folder left in place, where a manifest
// or the commit cannot be written.
vt_status vt_ckpt_recover(const char *save_dir, int keep_last, int64_t keep_every,
                          int64_t *recovered, char *err, size_t errlen);
// Whether a run with --resume `resume` continues the run of its --save folder save_dir (whose
// interrupted saves are then its own): `auto`, or the folder itself named.
int vt_ckpt_continues(const char *resume, const char *save_dir);
// The newest step of save_dir's leftover .tmp-step-N folders, or -1 where there are none.
int64_t vt_ckpt_leftover(const char *save_dir);
// The bytes of the files in save_dir's leftover .tmp-* folders (what a recovery may read).
int64_t vt_ckpt_leftover_bytes(const char *save_dir);
// Removes save_dir's leftover .tmp-* folders, each logged with why.
void vt_ckpt_discard(const char *save_dir, const char *why);

// Whether the manifest lists file (its checksum then verified by vt_ckpt_verify).
int vt_ckpt_manifest_lists(const vt_ckpt_manifest *m, const char *file);

// The --opt word of the optimizer the checkpoint was trained with: adamw, lamb, sgd (Nesterov),
// momentum, lars, nlars (Nesterov), larc or nlarc (LARS with LARC's clipping).
const char *vt_ckpt_opt_name(const vt_ckpt_manifest *m);
// The --act word of the model's MLPs: gelu, gelu_tanh or quick_gelu.
const char *vt_ckpt_act_name(const vt_ckpt_manifest *m);
// The --remode word of a vt_erase_mode: const, rand or pixel.
const char *vt_ckpt_remode_name(int remode);
// " ..." where the manifest's list of unknown keys (vt_ckpt_manifest.unknown) names fewer than
// nunknown of them, else "".
const char *vt_ckpt_unknown_more(const vt_ckpt_manifest *m);
// The file of a checkpoint that holds its weights: ema.safetensors (the EMA's) or
// model.safetensors.
const char *vt_ckpt_weights_file(int ema);
// The shortest text of a double that reads back as it exactly (of a float: vt_float_text).
const char *vt_ckpt_double_text(double v, char *buf, size_t size);
// --train-interpolation's word for a manifest's train_interp (vt_interp's order).
const char *vt_ckpt_interp_name(int interp);
// "R,G,B" (spaces allowed around each number) into v: 1 where it is three numbers below 1e6 in
// size (with std: each at least 1e-6, a normalisation's divisor), else 0. --mean and --std
// take it, and the metadata's mean and std.
int vt_ckpt_parse_rgb(const char *s, float v[3], int std);

// The "__metadata__" of vit3d export's file: format pt, vit3d_step, vit3d_weights (model or
// ema), vit3d_model_flags (model_flags: the flags that build the model), input_size ("3,S,S"),
// num_classes and, where the manifest records them, mean and std ("R,G,B"), and, where its run
// evaluated, crop_pct, crop_mode and interpolation (timm's pretrained_cfg names, vit3d's
// words), and vit3d_jpeg_reduce "0" where its run decoded JPEGs at full size (--jpeg-reduce 0;
// absent: 1): kv holds n key-value pairs, pointing into text and model_flags.
typedef struct {
  int n;
  const char *kv[32];  // (12 pairs at most now)
  char text[7][112];
} vt_ckpt_file_meta;
void vt_ckpt_file_meta_make(vt_ckpt_file_meta *fm, const vt_ckpt_manifest *m, int ema,
                            const char *model_flags);
// Such metadata values (NULL where absent) into m's mean, std (norm_recorded) and evaluation
// transform (evaluated): 1 where they were read, 0 where the file has no mean (none recorded),
// -1 where the mean or std cannot be read, 2 where they were and the evaluation transform
// cannot be (evaluated 0; err names what, in both cases).
int vt_ckpt_file_meta_parse(vt_ckpt_manifest *m, const char *mean, const char *std,
                            const char *crop_pct, const char *crop_mode, const char *interp,
                            char *err, size_t errlen);

// Reads dir/manifest.txt and verifies the size and CRC-32 of every file it lists.
vt_status vt_ckpt_verify(const char *dir, vt_ckpt_manifest *m, char *err, size_t errlen);
// Reads and checks dir/manifest.txt alone (none of its files).
vt_status vt_ckpt_manifest_read(const char *dir, vt_ckpt_manifest *m, char *err,
                                size_t errlen);
// The same, of the manifest and the one file it names (where the others may be damaged: a
// checkpoint whose optimizer state is lost still holds its weights).
vt_status vt_ckpt_verify_file(const char *dir, vt_ckpt_manifest *m, const char *file, char *err,
                              size_t errlen);
// The same, the CRC-32s only with crc (without: the manifest and the sizes, for a reader that
// checks the CRC-32s as it reads the files: launch/ckpt_resume.c), of every file or of the one
// named only where it is listed (an evaluation reads the weights alone).
vt_status vt_ckpt_check(const char *dir, vt_ckpt_manifest *m, int crc, const char *only,
                        char *err, size_t errlen);
// The steps of the checkpoints under save_dir in the order --resume auto tries them: the step-N
// folders from newest to oldest (the cap newest). Returns how many (at most cap).
int vt_ckpt_candidates(const char *save_dir, int64_t *steps, int cap);
// The step that save_dir's `latest` names, -1 for none; and a warning when it names an older
// step than chosen, the newest complete checkpoint taken.
int64_t vt_ckpt_latest_named(const char *save_dir);
void vt_ckpt_latest_differs(const char *save_dir, int64_t chosen);

// The folder of step's checkpoint under save_dir: SAVE_DIR/step-NNNNNNNN.
void vt_ckpt_step_dir(const char *save_dir, int64_t step, char *dir, size_t size);

// The newest checkpoint under save_dir that verifies, trying the step-* directories from
// newest to oldest. Returns VT_OK with its path in dir, or VT_ERR_INPUT when
// there is none. Each damaged checkpoint skipped is logged.
vt_status vt_ckpt_find_latest(const char *save_dir, char *dir, size_t dir_len, vt_ckpt_manifest *m);

// Whether path is a checkpoint itself (it holds a manifest.txt, sound or not), rather than a
// --save folder of them (or nothing).
int vt_ckpt_is_checkpoint(const char *path);

// A checkpoint a user names (vit3d export, inspect): path itself where it holds a manifest.txt,
// else path as a --save folder, its newest complete checkpoint (vt_ckpt_find_latest). Verified
// (sizes and CRC-32); its path in dir, or the reason in err.
vt_status vt_ckpt_open(const char *path, char *dir, size_t dir_len, vt_ckpt_manifest *m,
                       char *err, size_t errlen);

// mkdir -p: creates dir and its missing parents; 0 on success, -1 with errno set.
int vt_mkdir_p(const char *dir);
// Removes dir's files, then dir (a flat folder: a checkpoint's, a staging one); quietly.
void vt_remove_dir(const char *dir);

// An output file path that exists as anything but a regular file (a device such as /dev/null,
// a pipe, a directory) is refused with a message naming `what` (the flag), since writing it
// whole and renaming a new file there would replace it: VT_ERR_INPUT. A missing path or a
// regular file (or a link to one): VT_OK.
vt_status vt_output_file_check(const char *path, const char *what, char *err, size_t errlen);

// Makes the folder of the output file path where it is missing (mkdir -p), and checks that new
// files can be made there (a folder that cannot be made, a read-only one or file system:
// VT_ERR_INPUT naming `what`) by making and removing a probe file: at start-up, on every rank,
// so that the file a run writes at its end cannot be lost.
vt_status vt_output_dir_check(const char *path, const char *what, char *err, size_t errlen);

#endif
