// sample.c: bytes of one image file to the normalised (3, S, S) input of one sample: probe,
// crop, reduced decode, render (sample.h). Must not depend on MPI, a backend or the model.
#include "sample.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "threeaug.h"
#include "vt_error.h"

vt_image_status vt_sample_from_bytes(const uint8_t *bytes, size_t nbytes, const vt_sample_spec *sp,
                                     float *out, vt_sample_stats *stats, char *err,
                                     size_t errlen) {
  vt_image_info info;
  vt_image_status st = vt_image_probe(bytes, nbytes, sp->max_pixels, &info, err, errlen);
  if (st != VT_IMG_OK) return st;
  // The crop is chosen on the full-size image, whatever is decoded afterwards.
  const int simple = sp->train && sp->tc->simple_crop;
  vt_crop crop = !sp->train ? vt_eval_crop(sp->tc, info.width, info.height, sp->S)
                 : simple   ? vt_simple_crop(sp->tc, info.width, info.height, sp->S, sp->seed,
                                             sp->epoch, sp->index)
                            : vt_train_crop(sp->tc, info.width, info.height, sp->seed, sp->epoch,
                                            sp->index);
  const vt_interp interp = sp->train ? sp->tc->train_interp : sp->tc->eval_interp;
  VT_CHECK(!simple || interp != VT_INTERP_SAMPLE,
           "the simple random crop resizes the whole image (a filtered interpolation)");
  // A filtered resize of the whole image (evaluation, the simple crop) takes its shorter side
  // to about S (S / --eval-crop-pct): the longer side's size, in int, would overflow past an
  // aspect of some millions to one (a black image came out): such an image is refused.
  const double aspect = info.width > info.height ? (double)info.width / info.height
                                                 : (double)info.height / info.width;
  if (interp != VT_INTERP_SAMPLE && (!sp->train || simple) &&
      aspect * 2.0 * sp->S > (double)(1 << 30)) {
    if (err && errlen)
      snprintf(err, errlen, "an image of %dx%d (an aspect of %.0f:1) is too elongated for the "
               "filtered resize of the whole image (--%s-interpolation); sample resizes it",
               info.width, info.height, aspect, sp->train ? "train" : "eval");
    return VT_IMG_UNSUPPORTED;
  }
  vt_image_region r = {1, 0, 0, INT32_MAX, INT32_MAX};
  if (!sp->full_decode) {
    // (The simple crop's pixels are in the resized image's units: its resize decides.)
    int d = vt_crop_reduction(
        simple ? vt_simple_crop_region(sp->tc, info.width, info.height, sp->S) : crop, sp->S);
    const int most = sp->tc->jpeg_reduce ? info.max_scale : 1;  // (--jpeg-reduce 0: 1/1)
    r.scale = d < most ? d : most;
    const int w = vt_image_scaled_side(info.width, r.scale);
    const int h = vt_image_scaled_side(info.height, r.scale);
    if (interp == VT_INTERP_SAMPLE)
      vt_crop_window(crop, sp->S, r.scale, w, h, &r.x0, &r.y0, &r.x1, &r.y1);
    else
      vt_filtered_window(sp->tc, crop, sp->train, sp->S, r.scale, w, h, info.width, info.height,
                         &r.x0, &r.y0, &r.x1, &r.y1);
  }
  vt_image_part part;
  st = vt_image_decode_part(bytes, nbytes, sp->max_pixels, &r, &part, err, errlen);
  if (st != VT_IMG_OK) return st;
  if (part.full_width != info.width || part.full_height != info.height) {
    // The probe and the decoder read the same header; a difference would be a decoder bug,
    // and the crop would not fit the pixels.
    if (err && errlen)
      snprintf(err, errlen, "corrupt image: header says %dx%d, decoder %dx%d", info.width,
               info.height, part.full_width, part.full_height);
    vt_image_part_free(&part);
    return VT_IMG_CORRUPT;
  }
  const int randaug = sp->train && sp->tc->ra.layers > 0;
  const int three_aug = sp->train && sp->tc->three_aug;
  const int jitter = sp->train && !three_aug && sp->tc->color_jitter > 0;  // (timm's, alone)
  if (randaug || three_aug || jitter || interp != VT_INTERP_SAMPLE) {
    // The 8-bit crop, as PIL's image after torchvision's resize; RandAugment, 3-Augment and the
    // colour jitter work on it, as timm's and DeiT III's do.
    const size_t n = (size_t)sp->S * sp->S * 3;
    uint8_t *rgb = malloc(2 * n + 6 * (size_t)sp->S);  // the crop, then the operations' scratch
    VT_CHECK(rgb, "out of memory for a %dx%d crop", sp->S, sp->S);
    if (interp == VT_INTERP_SAMPLE) vt_render_crop_part_u8(&part, crop, sp->S, rgb);
    else vt_render_filtered_u8(&part, crop, sp->train, sp->S, sp->tc, rgb);
    if (randaug) {
      vt_randaug_plan plan;
      vt_randaug_draw(&sp->tc->ra, sp->seed, sp->epoch, sp->index, &plan);
      vt_randaug_run(&sp->tc->ra, &plan, rgb, sp->S, rgb + n);
    }
    if (three_aug || jitter) {
      vt_threeaug_plan plan;
      vt_threeaug_draw(sp->tc->color_jitter, sp->seed, sp->epoch, sp->index, &plan);
      if (!three_aug) plan.pick = VT_3A_NONE;  // (the same draws of the jitter)
      vt_threeaug_run(&plan, rgb, sp->S, rgb + n);
    }
    vt_normalize_u8(sp->tc, rgb, sp->S, out);
    free(rgb);
  } else {
    vt_render_crop_part(&part, crop, sp->S, sp->tc, out);
  }
  if (stats) {
    stats->info = info;
    stats->crop = crop;
    stats->scale = part.scale;
    stats->win_w = part.win.width;
    stats->win_h = part.win.height;
  }
  vt_image_part_free(&part);
  return VT_IMG_OK;
}

// Decodes bytes read for name (which messages give).
static vt_image_status from_read(vt_image_status st, uint8_t *buf, size_t n, const char *name,
                                 const vt_sample_spec *sp, float *out, char *err, size_t errlen) {
  if (st != VT_IMG_OK) return st;
  char why[256];
  st = vt_sample_from_bytes(buf, n, sp, out, NULL, why, sizeof why);
  free(buf);
  if (st != VT_IMG_OK && err && errlen) snprintf(err, errlen, "%s: %s", name, why);
  return st;
}

vt_image_status vt_sample_from_file(const char *path, const vt_sample_spec *sp, float *out,
                                    char *err, size_t errlen) {
  uint8_t *buf;
  size_t n;
  vt_image_status st = vt_image_read_file(path, sp->max_pixels, &buf, &n, err, errlen);
  return from_read(st, buf, n, path, sp, out, err, errlen);
}

vt_image_status vt_dataset_read(const vt_dataset *ds, int64_t i, int64_t max_pixels,
                                uint8_t **bytes, size_t *nbytes, char *err, size_t errlen) {
  if (!ds->nshards) return vt_image_read_file(ds->paths[i], max_pixels, bytes, nbytes, err, errlen);
  *bytes = NULL;
  *nbytes = 0;
  const char *name = ds->paths[i];
  const int64_t size = ds->size[i];
  const int64_t cap = max_pixels > 0 ? 16 * max_pixels + (64 << 20) : INT64_MAX;  // as files
  if (size == 0) {
    if (err && errlen) snprintf(err, errlen, "%s: empty member", name);
    return VT_IMG_EMPTY;
  }
  uint8_t *buf = size > cap ? NULL : malloc((size_t)size);
  if (!buf) {
    if (err && errlen)
      snprintf(err, errlen, "%s: member of %lld bytes is over what %s", name, (long long)size,
               size > cap ? "--max-image-pixels allows" : "the free memory holds");
    return VT_IMG_TOO_LARGE;
  }
  const int fd = ds->shard_fds[ds->shard_of[i]];
  int64_t got = 0;
  while (got < size) {
    ssize_t r = pread(fd, buf + got, (size_t)(size - got), (off_t)(ds->offset[i] + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (err && errlen)
        snprintf(err, errlen, "%s: %s", name, r < 0 ? strerror(errno)
                 : "the shard ends before this member: was it changed after the run started?");
      free(buf);
      return VT_IMG_UNREADABLE;
    }
    got += r;
  }
  *bytes = buf;
  *nbytes = (size_t)size;
  return VT_IMG_OK;
}

vt_image_status vt_sample_from_dataset(const vt_dataset *ds, int64_t i, const vt_sample_spec *sp,
                                       float *out, char *err, size_t errlen) {
  uint8_t *buf;
  size_t n;
  vt_image_status st = vt_dataset_read(ds, i, sp->max_pixels, &buf, &n, err, errlen);
  return from_read(st, buf, n, ds->paths[i], sp, out, err, errlen);
}
