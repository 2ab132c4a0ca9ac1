// data.h: where a rank's micro-batches come from: the synthetic task, or an image dataset
// through the threaded loader. The first pipeline stage needs pixels, the last stage labels,
// the stages between nothing. The first stage's TP ranks share the images of a micro-batch:
// rank r makes (decodes, augments, erases, mixes) samples [r B/tp, (r+1) B/tp) and the images
// are all-gathered over TP after the upload (--decode-split 1, when tp divides B and, with
// Mixup/CutMix, B/tp is even so that no mixed pair straddles two shares), so the decode work is
// not done tp times; every image is a pure function of its stream position, so the bytes are
// those of one rank making them all. The last stage computes labels from the dataset index
// without decoding. Knows no MPI.
#ifndef VT_DATA_H
#define VT_DATA_H

#include <stdint.h>

#include "comm.h"
#include "dataset.h"
#include "loader.h"
#include "train.h"
#include "vt_backend.h"

typedef struct {
  const vt_train_options *o;
  int need_pixels, need_labels;
  int dp_rank, dp_size, n_micro;
  int synthetic;
  vt_dataset train_ds, val_ds;
  int has_val;
  atomic_uchar *val_warned;  // the validation files warned about as bad (vt_loader_config.warned)
  const vt_backend *be;   // its host_alloc holds what the training step uploads
  vt_loader *train;       // NULL for synthetic data and for stages that need nothing
  float *host_img;        // synthetic staging: (pixel_count, 3, S, S), this rank's share
  int32_t *host_labels;   // (B)
  vt_mix_target *host_mix;  // (B) Mixup/CutMix targets (last stage, mixing on)
  int64_t bad;            // bad images replaced so far on this rank (among those it made)
  double wait_s;          // seconds this rank's training loader kept it waiting so far
  // --bad-image fail: a micro-batch of step fail_step (from 0) held a bad file on this rank
  // (failed 1; or under skip, a class of bad files alone), or one this build cannot decode (2);
  // from it on every micro-batch is the failed one's buffers, zero images (vt_loader_next)
  int failed;
  int64_t fail_step;
  float *fail_img;
  int32_t *fail_labels;
  // The images this rank makes: samples [pixel_first, pixel_first + pixel_count) of each
  // micro-batch (all B without a split); the rest come from its TP group (data.h).
  int pixel_first, pixel_count;
  int tp_rank, tp_size;
} vt_data;

// Opens the training (and validation) data for one rank; every rank of world calls it (world
// rank 0 reads each dataset's index and broadcasts it). Errors (missing or empty folders, class
// counts that do not match the model) are VT_ERR_INPUT with a message.
// start_step: steps already done (a resume); the stream continues from there. The training
// micro-batches live in be's host_alloc memory (pinned on CUDA: upload them with be->upload or
// be->upload_ahead).
vt_status vt_data_open(vt_data *d, const vt_train_options *o, const vt_backend *be,
                       vt_comm *world, int need_pixels, int need_labels, int tp_rank, int tp_size,
                       int dp_rank, int dp_size, int n_micro, int64_t start_step, char *err,
                       size_t errlen);
void vt_data_close(vt_data *d);

// The training set a checkpoint's stream position counts in (vt_ckpt_manifest's data_images and
// data_classes): its images and a hash of its class names in order (each name's FNV-1a,
// combined); 0 and 0 for synthetic data. numbered: the hash its classes had as numbers (shards
// named by numbers before their classes.txt named them, 2026-12-07).
void vt_data_identity(const vt_data *d, int64_t *images, int64_t *classes, int64_t *numbered);

// The data stream position of micro-batch mb of step `step` on this rank: its images are
// positions first .. first + B - 1 (design.md: step s takes [s*G, (s+1)*G), DP rank d the d-th
// G/dp of them, in micro-batches of B). Valid on every pipeline stage.
int64_t vt_data_position(const vt_data *d, int64_t step, int mb);

// Micro-batch mb of step `step` for this rank: host images (or NULL): this rank's samples
// [pixel_first, pixel_first + pixel_count) only, pixel_count images), labels (or NULL) and, with
// Mixup/CutMix on, the mixed targets (or NULL; the images come mixed: dataio/mix.h), valid until
// the next call (wait for their uploads before it: be->upload_wait).
// Micro-batches must be asked for in order. A bad file under --bad-image fail is said with the
// file named and sets failed and fail_step: that step gets zero images and the run stops before it.
void vt_data_next(vt_data *d, int64_t step, int mb, const float **img, const int32_t **labels,
                  const vt_mix_target **mix);

// The images a TP rank of the first stage makes of each micro-batch: B / tp_size when
// --decode-split splits them (tp_size dividing B; with pairs, Mixup/CutMix, into even shares),
// else all B. vit3d plan sizes the host input batches by it.
int vt_data_share(const vt_train_options *o, int need_pixels, int tp_size, int pairs);

// The loader configuration of the validation set for this rank: micro-batch j holds positions
// j*B*dp + dp_rank*B + [0, B), its buffers from the backend's host_alloc, and with
// --decode-split on the first stage's TP ranks (tp dividing B) only this rank's share decoded
// (pixel_first, pixel_count; the images are all-gathered over TP after the upload); returns the
// number of micro-batches that cover the set.
int64_t vt_data_val_config(const vt_data *d, vt_loader_config *cfg, int want_pixels);

#endif
