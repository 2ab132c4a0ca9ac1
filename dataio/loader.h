// loader.h: a pool of decoder threads filling a bounded queue of ready micro-batches, returned
// strictly in order. Which samples micro-batch j holds is a pure function of j (below), and each
// sample's pixels depend only on (file, seed, epoch, sample) through vt_sample_from_dataset
// (sample.h: probe, crop, reduced decode, render), so the batches are identical for any thread
// count and a loader restarted at micro-batch j continues exactly. Buffers are allocated once,
// by the caller's allocator when it gives one (pinned memory on CUDA).
// Must not depend on MPI, a backend or the model.
#ifndef VT_LOADER_H
#define VT_LOADER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "transform.h"
#include "vt_error.h"

// What a bad file (unreadable, corrupt, too many pixels) becomes. skip: a deterministic other
// sample of its class (training: the labels the last pipeline stage computes without decoding
// stay right); fail: vt_loader_next's error; omit: a zero image flagged in vt_batch.bad_flags,
// for the caller to leave out (evaluation: a stand-in would be scored as that image).
typedef enum { VT_BAD_SKIP = 0, VT_BAD_FAIL = 1, VT_BAD_OMIT = 2 } vt_bad_policy;

typedef struct {
  const vt_dataset *ds;
  int S;                 // output image side
  int batch;             // images per micro-batch
  int threads;           // decoder threads, >= 1
  int prefetch;          // ready micro-batches kept ahead, >= 1 (prefetch + 1 buffers: one is
                         // the batch the caller holds)
  uint64_t seed;
  int train;             // 1: shuffled stream, random crops; 0: dataset order, centre crops
  int repeats;           // training: repeated augmentation, each image R times an epoch
                         // (vt_sampler, dataset.h); 0 or 1: none
  int64_t epoch_len;     // training: stream positions per epoch (vt_sampler); 0: the count
  int want_pixels;       // 0: labels only (pipeline stages that need no pixels; no threads)
  // Pixels of samples [pixel_first, pixel_first + pixel_count) of each batch only (a TP rank's
  // share, the others decode the rest): vt_batch.images holds just those (pixel_count images,
  // sample pixel_first first), every label is there. pixel_count 0: the whole batch.
  int pixel_first, pixel_count;
  int64_t max_pixels;    // larger images are bad (decompression bombs)
  vt_bad_policy bad_policy;
  int omit_fails;        // omit: a training run's evaluation under --bad-image fail, which
                         // stops after it: each bad file is said as an error, not a warning
  vt_transform_config tc;
  // Where the images and labels handed out live: blocks from host_alloc(nbytes), released with
  // host_free (a backend's pinned memory, so the caller's uploads need not wait for the device);
  // NULL: page-aligned malloc and free.
  void *(*host_alloc)(size_t nbytes);
  void (*host_free)(void *ptr);
  // Which files were warned about as bad: NULL, the loader's own flags; else ds->count flags the
  // caller keeps across its loaders (evaluation: a new loader each time, one warning per file
  // per run).
  atomic_uchar *warned;
  // Micro-batch j holds stream positions first(j) + [0, batch), where
  //   first(j) = (j / per_step) * step_stride + offset + (j % per_step) * batch.
  // Training, DP rank d of dp, G images per step, B per micro-batch:
  //   per_step = G / (dp * B), step_stride = G, offset = d * G / dp.
  // Training positions map to samples through vt_sampler (epochs of permutations); evaluation
  // positions are dataset indices, and positions >= count pad the last batch (valid < batch).
  // Evaluation, DP rank d of dp, m micro-batches of B per step: per_step = m,
  //   step_stride = dp * m * B, offset = d * m * B; ceil(count / step_stride) steps cover the
  //   set, and a rank past the end gets batches with valid = 0.
  int64_t per_step, step_stride, offset;
} vt_loader_config;

typedef struct {
  float *images;     // (pixel_count, 3, S, S): samples pixel_first.. (the whole batch without a
                     // share); NULL when want_pixels is 0
  int32_t *labels;   // (batch); padding has label 0 and a zero image
  int valid;         // real samples at the front (evaluation's last batch may be short)
  int bad;           // samples whose file was bad (replaced under skip, zero images under
                     // omit; always 0 without pixels, so count bad files on the decoding
                     // ranks), among the samples this loader decodes
  const unsigned char *bad_flags;  // (batch): 1 where that sample's file was bad; 0 for the
                                   // samples this loader does not decode
  int64_t epoch;     // epoch of the batch's first sample (training)
  double wait_s;     // seconds vt_loader_next waited for the decoders (0: the batch was ready)
  int no_decoder;    // (an error) 1 where its file is of a kind this build cannot decode (a
                     // library left out: VT_IMG_NO_DECODER), not bad data
} vt_batch;

typedef struct vt_loader vt_loader;

// Starts the threads at micro-batch first_batch (none when want_pixels is 0: labels are then
// computed in vt_loader_next). NULL with a message on bad configuration.
vt_loader *vt_loader_create(const vt_loader_config *cfg, int64_t first_batch, char *err,
                            size_t errlen);
// The next micro-batch, blocking until it is ready. Its buffers stay valid until the next call.
// Under the skip policy a bad file is replaced by a deterministic other sample of the same class
// (so labels, which the last pipeline stage computes without decoding, stay right), under omit
// by a zero image, each flagged, and a warning names the file (once per loader); under the fail
// policy it returns VT_ERR_INPUT naming the file. A class whose files are all bad is
// VT_ERR_INPUT under skip and fail. After an error
// the loader stays at that micro-batch (asking again gives the same error): destroy it. The
// error's out holds that micro-batch's buffers with zero images (valid until the loader is
// destroyed), for a caller that must finish the step it was in before it stops.
vt_status vt_loader_next(vt_loader *l, vt_batch *out, char *err, size_t errlen);
// The index of the next micro-batch vt_loader_next will return: the loader's whole state.
int64_t vt_loader_position(const vt_loader *l);
// Stops and joins the threads, also with batches in flight; the last batch's buffers go too.
void vt_loader_destroy(vt_loader *l);

#endif
