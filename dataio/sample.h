// sample.h: one training or evaluation sample from an image file's bytes to the normalised
// (3, S, S) input: header probe, crop on the full-size geometry, reduced decode of only what the
// crop reads, bilinear render. The loader (loader.c) and the loader benchmark (tests/
// bench_loader.c) both call this, so the benchmark times exactly what training does. The output
// is a pure function of (bytes, spec): no thread, rank or timing enters it. No MPI, backend or
// model.
#ifndef VT_SAMPLE_H
#define VT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "image.h"
#include "transform.h"

typedef struct {
  const vt_transform_config *tc;
  int S;               // output side
  int train;           // 1: random-resized crop + flip (+ RandAugment when tc->ra is on) keyed
                       // by (seed, epoch, index); 0: centre crop
  uint64_t seed;
  int64_t epoch;       // the sample's key: a stand-in for a bad file keeps the key of the
  int64_t index;       // sample it replaces, so its crop is not the stand-in's own crop
  int64_t max_pixels;  // larger images are refused from their header (decompression bombs)
  int full_decode;     // 1: decode the whole image at full size (the reference the reduced
                       // decode is tested against); 0: the reduced decode (what training uses)
} vt_sample_spec;

// What the decode did, for benchmarks and tests (optional).
typedef struct {
  vt_image_info info;  // format and full size
  vt_crop crop;        // in full-size pixels
  int scale;           // the reduction used (1, 2, 4, 8)
  int win_w, win_h;    // decoded window, in pixels of the reduced image
} vt_sample_stats;

// Decodes the sample into out (3 * S * S floats). On failure out is untouched and err says why
// (vt_image_decode's statuses and messages). The reduced decode: JPEG at 1/d with d =
// min(vt_crop_reduction(crop, S), info.max_scale), only the window vt_crop_window names
// (vt_image_decode_part), rendered with vt_render_crop_part. Its output differs from the full
// decode + render only by the DCT scaling (an area filter where the full path point-samples the
// full-size image): at d = 1 (PNG always) they are equal, byte for byte. Bad-file verdicts are
// vt_image_decode_part's: cut files and bad CRCs get the whole decode's verdict whatever the
// crop; only damage a stopped decode cannot see (image.h) may pass for one crop and not another.
vt_image_status vt_sample_from_bytes(const uint8_t *bytes, size_t nbytes, const vt_sample_spec *sp,
                                     float *out, vt_sample_stats *stats, char *err,
                                     size_t errlen);
// Reads path (vt_image_read_file) and decodes it; messages name the path.
vt_image_status vt_sample_from_file(const char *path, const vt_sample_spec *sp, float *out,
                                    char *err, size_t errlen);
// The bytes of dataset sample i (dataset.h): its file (vt_image_read_file), or its member of a
// tar shard in one pread, with the same refusals (empty, over what max_pixels allows, short
// read). *bytes is malloc'd; messages name the sample (ds->paths[i]).
vt_image_status vt_dataset_read(const vt_dataset *ds, int64_t i, int64_t max_pixels,
                                uint8_t **bytes, size_t *nbytes, char *err, size_t errlen);
// vt_dataset_read, then vt_sample_from_bytes: what the loader decodes for sample i.
vt_image_status vt_sample_from_dataset(const vt_dataset *ds, int64_t i, const vt_sample_spec *sp,
                                       float *out, char *err, size_t errlen);

#endif
