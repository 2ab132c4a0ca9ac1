// data.c: the rank's batch source (synthetic task or threaded image loader).
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "image.h"
#include "index_cache.h"
#include "synthetic.h"
#include "vt_rng.h"

static vt_loader_config base_config(const vt_data *d, const vt_dataset *ds, int want_pixels) {
  const vt_train_options *o = d->o;
  vt_loader_config c = {.ds = ds,
                        .S = o->model.img_size,
                        .batch = o->micro_batch,
                        .threads = o->loader_threads,
                        .prefetch = o->prefetch,
                        .seed = o->seed,
                        .train = 1,
                        .repeats = o->aug_repeats,
                        .want_pixels = want_pixels,
                        .max_pixels = o->max_image_pixels,
                        .bad_policy = o->bad_image_fail ? VT_BAD_FAIL : VT_BAD_SKIP,
                        .tc = o->transform};
  return c;
}

// Rank 0's packed index of path: from the index cache when it holds a fresh entry (*cached
// set), else read from the file system (*ds open) and, with a cache, stored there (a failure to
// store is only a warning).
static vt_status read_index(const char *path, const char *cache, const char *label_key,
                            const char *names, vt_dataset *ds, uint8_t **bytes, size_t *n,
                            int *cached, char *err, size_t errlen) {
  char file[1200], why[1400], *fp = NULL, *stored = NULL;
  *cached = 0;
  if (cache[0]) {
    vt_index_cache_file(cache, path, file, sizeof file);
    const int entry = vt_index_cache_read(file, path, &stored, bytes, n, why, sizeof why);
    if (vt_dataset_fingerprint(path, label_key, names, stored, &fp, err, errlen) != VT_OK) {
      free(stored), free(*bytes), *bytes = NULL;
      return VT_ERR_INPUT;
    }
    *cached = entry && strcmp(fp, stored) == 0;
    if (entry && !*cached) {
      snprintf(why, sizeof why, "%s is stale (a shard, folder or list file changed size or "
               "time since it was written); reading the index again", file);
      free(*bytes), *bytes = NULL;
    }
    free(stored);
    if (*cached) vt_log_info("dataset %s: index from the cache %s", path, file);
    else vt_log_info("dataset %s: %s", path, why);
  }
  vt_status st = VT_OK;
  if (!*cached) {
    st = vt_dataset_open_labeled(path, label_key, names, ds, err, errlen);
    if (st == VT_OK && ds->other_files > 0)
      vt_log_warn("dataset %s: %lld files in the class folders are not images by their "
                  "extension (.jpg, .png, .webp, ...) and are left out, such as %s", path,
                  (long long)ds->other_files, ds->other_file);
    if (st == VT_OK && ds->hidden_classes > 0)
      vt_log_warn("dataset %s: hidden folders beside the class folders are left out (%lld, such "
                  "as %s); torchvision's ImageFolder counts each as a class, so its class "
                  "indices differ from these and a model trained here scores wrongly there on "
                  "this folder: remove them or move them elsewhere", path,
                  (long long)ds->hidden_classes, ds->hidden_class);
    if (st == VT_OK && ds->subfolders > 0)
      vt_log_info("dataset %s: the images of %lld folders below the class folders are their "
                  "class's, as in torchvision's ImageFolder", path, (long long)ds->subfolders);
    if (st == VT_OK) st = vt_dataset_pack(ds, bytes, n, err, errlen);
    if (st == VT_OK && fp && ds->fingerprint) {  // an ImageFolder's: every folder it walked
      free(fp);
      if (!(fp = strdup(ds->fingerprint))) st = vt_fail_input(err, errlen, "out of memory");
    }
    if (st != VT_OK) vt_dataset_free(ds);
    if (st == VT_OK && fp) {
      if (vt_index_cache_store(file, path, fp, *bytes, *n, why, sizeof why) == VT_OK)
        vt_log_info("dataset %s: index of %lld samples written to the cache %s", path,
                    (long long)ds->count, file);
      else vt_log_warn("%s (the run goes on without it)", why);
    }
  }
  free(fp);
  return st;
}

// World rank 0 reads the dataset index (a folder tree's listing, a list file, the shards'
// headers, named by the classes.txt beside them where there is one, as vit3d prepare shards
// writes, else by names (--label-names): a validation set's shards of fewer classes were
// labelled by their own numbers, and with --label-names by the training set's names; or an
// index cache entry) and sends it to every rank, so that the file system sees
// one reader, not one per rank. Rank 0's error is the caller's to report; another rank that
// cannot use the index (a shard that will not open there, or, where it reads images (reads),
// a listed file it cannot read) reports its own, and then every rank returns the error.
static vt_status open_dataset(vt_comm *world, const char *path, const char *cache,
                              const char *label_key, const char *names, int reads,
                              vt_dataset *ds, char *err, size_t errlen) {
  const int root = vt_comm_rank(world) == 0;
  uint8_t *bytes = NULL;
  size_t n = 0;
  int cached = 0;
  int64_t head[2] = {VT_ERR_INPUT, 0};  // status, index bytes
  char beside[4352];
  const char *own = root ? vt_dataset_shard_names(path, beside, sizeof beside) : NULL;
  if (own && strcmp(own, names))
    vt_log_info("dataset %s: its classes are named by %s (vit3d prepare shards'%s), so that a "
                "validation set is labelled by class name", path, own,
                names[0] ? ", not --label-names, which names shards without one" : "");
  if (own) names = own;
  if (root) {
    head[0] = read_index(path, cache, label_key, names, ds, &bytes, &n, &cached, err, errlen);
    head[1] = (int64_t)n;
  }
  vt_comm_broadcast_bytes(world, head, sizeof head, 0);
  if (head[0] != VT_OK) {
    if (!root) snprintf(err, errlen, "world rank 0 could not open the dataset %s", path);
    return VT_ERR_INPUT;
  }
  if (!root) bytes = malloc((size_t)head[1]);
  VT_CHECK(bytes, "out of memory for the dataset index of %s (%lld bytes)", path,
           (long long)head[1]);
  vt_comm_broadcast_bytes(world, bytes, head[1], 0);
  vt_status st = root && !cached ? VT_OK
                                 : vt_dataset_unpack(bytes, (size_t)head[1], ds, err, errlen);
  // A rank that reads images (the first pipeline stage's; the shards were opened above) and
  // cannot read the first and the last file (the dataset not mounted on its node) is named
  // here, where its loader would have skipped every file as bad and blamed the classes.
  for (int k = 0; st == VT_OK && !root && reads && ds->nshards == 0 && k < 2; k++) {
    const char *file = ds->paths[k ? ds->count - 1 : 0];
    if (access(file, R_OK) != 0) {
      char host[256] = "?";
      gethostname(host, sizeof host - 1);
      snprintf(err, errlen, "world rank %d (host %s) cannot read %s of the dataset %s, which "
               "world rank 0 listed: %s. The ranks of the first pipeline stage read their share "
               "of the files: the dataset must be at the same path on each of their nodes",
               vt_comm_rank(world), host, file, path, strerror(errno));
      st = VT_ERR_INPUT;
    }
  }
  if (st != VT_OK) vt_log_error("%s", err);
  free(bytes);
  double failed = st != VT_OK;  // every rank goes on only if all can (the next step is collective)
  // Rank 0: files of a kind this build cannot decode are refused here, not met at a step (a
  // validation set's would stop the run at its first evaluation).
  const char *lacks = NULL;
  for (int64_t i = 0; root && st == VT_OK && !lacks && i < ds->count; i++)
    if ((lacks = vt_image_decoder_missing(ds->paths[i])))
      snprintf(err, errlen, "the dataset %s holds files of a kind this vit3d cannot decode (by "
               "their extension), such as %s: it was built without %s. Install that library and "
               "configure the build again (cmake -S . -B build), or convert the files", path,
               ds->paths[i], lacks);
  if (lacks) failed = 2;
  vt_comm_all_reduce_double(world, &failed, 1, VT_REDUCE_MAX);
  if (failed && st == VT_OK && !lacks)
    snprintf(err, errlen, "%s %s (see its message)", failed == 2 ? "world rank 0 refused the "
             "dataset" : "a rank could not open the files of", path);
  if (failed && st == VT_OK) vt_dataset_free(ds);
  return failed ? VT_ERR_INPUT : VT_OK;
}

// A numbered dataset's classes "0".."K-1" (its K is its largest label + 1: a validation set
// without the last classes has fewer).
static void number_classes(vt_dataset *ds, int K) {
  char **names = calloc((size_t)K, sizeof *names);
  VT_CHECK(names != NULL, "out of host memory for %d class names", K);
  for (int c = 0; c < K; c++) {
    char num[16];
    snprintf(num, sizeof num, "%d", c);
    VT_CHECK((names[c] = strdup(num)) != NULL, "out of host memory");
  }
  for (int c = 0; c < ds->num_classes; c++) free(ds->class_names[c]);
  free(ds->class_names);
  ds->class_names = names, ds->num_classes = K;
}

// The validation set's labels by class name, as the training set numbers them, where both name
// their classes: an ImageFolder numbers its sorted folder names, so a validation folder lacking
// a class would shift every later label, and one named otherwise would pair labels by position.
// A class the training set lacks is refused. A numbered validation set (a list file, shards
// without --label-names) keeps its numbers; named classes beside a numbered training set take
// the numbers their names are, where all are, else go by position (warned). A class-count check
// follows.
static vt_status val_labels_by_name(vt_dataset *val, const vt_dataset *train,
                                    const vt_train_options *o, char *err, size_t errlen) {
  if (val->numbered) return VT_OK;
  if (train->numbered) {
    // Class folders named by the training set's numbers (0, 1, ..., 10, ...: sorted as text, so
    // folder 10 is the third) take their labels from their names; other names go by position.
    int *num = malloc((size_t)val->num_classes * sizeof *num), by_number = 1;
    VT_CHECK(num != NULL, "out of host memory for %d classes", val->num_classes);
    for (int c = 0; c < val->num_classes && by_number; c++) {
      char *end;
      const long k = strtol(val->class_names[c], &end, 10);
      by_number = *val->class_names[c] && !*end && k >= 0 && k < train->num_classes;
      num[c] = (int)k;
    }
    if (!by_number) {
      free(num);
      vt_log_warn("--val-data %s names its classes and --data %s numbers them: validation "
                  "class i is the i-th of its sorted names", o->val_data, o->data);
      return VT_OK;
    }
    for (int64_t i = 0; i < val->count; i++) val->labels[i] = num[val->labels[i]];
    free(num);
    number_classes(val, train->num_classes);
    vt_log_info("--val-data %s: its class folders named by numbers take those labels",
                o->val_data);
    return VT_OK;
  }
  int *to = malloc((size_t)val->num_classes * sizeof *to);
  VT_CHECK(to != NULL, "out of host memory for %d class names", val->num_classes);
  int moved = 0;
  for (int c = 0; c < val->num_classes; c++) {
    to[c] = -1;
    for (int t = 0; t < train->num_classes && to[c] < 0; t++)
      if (strcmp(val->class_names[c], train->class_names[t]) == 0) to[c] = t;
    if (to[c] < 0) {
      snprintf(err, errlen, "--val-data %s has a class '%s' that --data %s lacks: labels go by "
               "class name, so the validation classes must be named as the training classes",
               o->val_data, val->class_names[c], o->data);
      free(to);
      return VT_ERR_INPUT;
    }
    moved |= to[c] != c;
  }
  if (moved || val->num_classes < train->num_classes) {  // a subset: the training numbers
    for (int64_t i = 0; i < val->count; i++) val->labels[i] = to[val->labels[i]];
    char **names = calloc((size_t)train->num_classes, sizeof *names);
    VT_CHECK(names != NULL, "out of host memory for %d class names", train->num_classes);
    for (int t = 0; t < train->num_classes; t++)
      VT_CHECK((names[t] = strdup(train->class_names[t])) != NULL, "out of host memory");
    for (int c = 0; c < val->num_classes; c++) free(val->class_names[c]);
    free(val->class_names);
    val->class_names = names;
    vt_log_info("--val-data %s holds %d of the %d classes of --data %s: labelled by name",
                o->val_data, val->num_classes, train->num_classes, o->data);
    val->num_classes = train->num_classes;
  }
  free(to);
  return VT_OK;
}

// B / tp when the ranks split them (pairs: the shares must hold whole mixed pairs), else all B.
int vt_data_share(const vt_train_options *o, int need_pixels, int tp_size, int pairs) {
  const int B = o->micro_batch;
  const int split = o->decode_split && need_pixels && tp_size > 1 && B % tp_size == 0 &&
                    (!pairs || (B / tp_size) % 2 == 0);
  return split ? B / tp_size : B;
}

vt_status vt_data_open(vt_data *d, const vt_train_options *o, const vt_backend *be,
                       vt_comm *world, int need_pixels, int need_labels, int tp_rank, int tp_size,
                       int dp_rank, int dp_size, int n_micro, int64_t start_step, char *err,
                       size_t errlen) {
  memset(d, 0, sizeof *d);
  d->o = o, d->be = be;
  d->need_pixels = need_pixels, d->need_labels = need_labels;
  d->dp_rank = dp_rank, d->dp_size = dp_size, d->n_micro = n_micro;
  d->synthetic = strcmp(o->data, "synthetic") == 0;
  const int B = o->micro_batch, S = o->model.img_size;
  d->tp_rank = tp_rank, d->tp_size = tp_size;
  d->pixel_count = vt_data_share(o, need_pixels, tp_size, vt_mix_enabled(&o->mix));
  d->pixel_first = d->pixel_count < B ? tp_rank * d->pixel_count : 0;
  if (need_labels && vt_mix_enabled(&o->mix)) {
    d->host_mix = be->host_alloc((size_t)B * sizeof *d->host_mix);
    VT_CHECK(d->host_mix, "out of host memory for %d mixed targets", B);
  }
  if (d->synthetic) {  // the staging the synthetic task renders into
    if (need_pixels)  // the share this rank makes
      d->host_img = be->host_alloc((size_t)d->pixel_count * 3 * S * S * sizeof(float));
    d->host_labels = be->host_alloc((size_t)B * sizeof(int32_t));
    VT_CHECK((d->host_img || !need_pixels) && d->host_labels,
             "out of %shost memory for a micro-batch of %d images of side %d",
             be->device == VT_DEVICE_CUDA ? "pinned " : "", B, S);
  }
  if (o->val_data[0]) {
    if (open_dataset(world, o->val_data, o->index_cache, o->label_key, o->label_names,
                     need_pixels, &d->val_ds, err, errlen) != VT_OK)
      return VT_ERR_INPUT;
    d->has_val = 1;
    d->val_warned = calloc((size_t)(d->val_ds.count ? d->val_ds.count : 1), sizeof(atomic_uchar));
    VT_CHECK(d->val_warned != NULL, "out of host memory for %lld flags",
             (long long)d->val_ds.count);
  }
  if (!d->synthetic && !o->eval_only) {
    if (open_dataset(world, o->data, o->index_cache, o->label_key, o->label_names, need_pixels,
                     &d->train_ds, err, errlen) != VT_OK)
      return VT_ERR_INPUT;
    if (d->train_ds.num_classes != o->model.num_classes) {
      snprintf(err, errlen, "--data %s has %d classes but the model has %d; pass "
               "--num-classes %d", o->data, d->train_ds.num_classes, o->model.num_classes,
               d->train_ds.num_classes);
      return VT_ERR_INPUT;
    }
    if (d->has_val && val_labels_by_name(&d->val_ds, &d->train_ds, o, err, errlen) != VT_OK)
      return VT_ERR_INPUT;
  }
  // A numbered validation set whose largest label is below the model's last class (a subset
  // without the last classes): its labels are the model's as they are.
  if (d->has_val && d->val_ds.numbered && d->val_ds.num_classes < o->model.num_classes)
    number_classes(&d->val_ds, o->model.num_classes);
  if (d->has_val && d->val_ds.num_classes != o->model.num_classes) {
    if (o->eval_only)  // the checkpoint's (or the weights') classes
      snprintf(err, errlen, "--val-data %s has %d classes but the model has %d: give the "
               "validation set every class the model was trained on, in the same order",
               o->val_data, d->val_ds.num_classes, o->model.num_classes);
    else if (d->val_ds.numbered) {  // (a larger label than the training set's: named)
      int64_t i = 0;
      while (i < d->val_ds.count - 1 && d->val_ds.labels[i] < o->model.num_classes) i++;
      snprintf(err, errlen, "--val-data %s: %s has label %d, and --data %s has %d classes "
               "(labels 0 to %d): a validation label must be one of the training set's",
               o->val_data, d->val_ds.paths[i], d->val_ds.labels[i], o->data,
               o->model.num_classes, o->model.num_classes - 1);
    } else  // (named classes beside a numbered training set: paired by position)
      snprintf(err, errlen, "--val-data %s names %d classes and --data %s numbers its %d: "
               "classes paired by position need the same count; name the validation class "
               "folders by the training labels (0, 1, ...) to pair them by number",
               o->val_data, d->val_ds.num_classes, o->data, o->model.num_classes);
    return VT_ERR_INPUT;
  }
  if (d->synthetic || o->eval_only) return VT_OK;
  if (o->drop_last && vt_epoch_images(o, d->train_ds.count) == 0) {
    snprintf(err, errlen, "--drop-last 1: --data %s has %lld images, not one whole global batch "
             "of %d; give a smaller --global-batch-size or --drop-last 0", o->data,
             (long long)d->train_ds.count, o->global_batch);
    return VT_ERR_INPUT;
  }
  if (!need_pixels && !need_labels) return VT_OK;
  vt_loader_config c = base_config(d, &d->train_ds, need_pixels);
  c.epoch_len = vt_epoch_images(o, d->train_ds.count);
  c.per_step = n_micro;
  c.step_stride = o->global_batch;
  c.offset = (int64_t)dp_rank * (o->global_batch / dp_size);
  c.pixel_first = d->pixel_first, c.pixel_count = d->pixel_count;
  c.host_alloc = be->host_alloc, c.host_free = be->host_free;
  // Threads take samples only from the micro-batches in flight, --prefetch + 1 of them: more
  // than their images would wait (a small micro-batch, or its TP share under --decode-split).
  const int busy = (o->prefetch + 1) * d->pixel_count;
  if (need_pixels && o->loader_threads > busy && vt_comm_rank(world) == 0)
    vt_log_warn("%d loader threads (--loader-threads, or --threads where not given): at most "
                "%d decode at once here (--prefetch %d + 1 micro-batches of %d images this rank "
                "decodes); the others wait: raise --prefetch to use them", o->loader_threads,
                busy, o->prefetch, d->pixel_count);
  d->train = vt_loader_create(&c, start_step * n_micro, err, errlen);
  return d->train ? VT_OK : VT_ERR_INPUT;
}

void vt_data_identity(const vt_data *d, int64_t *images, int64_t *classes, int64_t *numbered) {
  *images = d->synthetic ? 0 : d->train_ds.count;
  uint32_t h = 0, k = 0;  // each name's FNV-1a, in order; and of the names "0", "1", ...
  for (int c = 0; c < d->train_ds.num_classes; c++) {
    char num[16];
    snprintf(num, sizeof num, "%d", c);
    h = (h ^ vt_hash_name(d->train_ds.class_names[c])) * 16777619u;
    k = (k ^ vt_hash_name(num)) * 16777619u;
  }
  *classes = *images ? (int64_t)h : 0;
  *numbered = *images ? (int64_t)k : 0;
}

void vt_data_close(vt_data *d) {
  if (d->train) vt_loader_destroy(d->train);
  if (d->train_ds.count) vt_dataset_free(&d->train_ds);
  if (d->has_val) vt_dataset_free(&d->val_ds);
  free(d->val_warned);
  if (d->host_img) d->be->host_free(d->host_img);
  if (d->host_labels) d->be->host_free(d->host_labels);
  if (d->host_mix) d->be->host_free(d->host_mix);
  memset(d, 0, sizeof *d);
}

int64_t vt_data_position(const vt_data *d, int64_t step, int mb) {
  const vt_train_options *o = d->o;
  return step * o->global_batch + (int64_t)d->dp_rank * (o->global_batch / d->dp_size) +
         (int64_t)mb * o->micro_batch;
}

void vt_data_next(vt_data *d, int64_t step, int mb, const float **img, const int32_t **labels,
                  const vt_mix_target **mix) {
  const vt_train_options *o = d->o;
  const int B = o->micro_batch, S = o->model.img_size, K = o->model.num_classes;
  const int64_t first = vt_data_position(d, step, mb);
  float *pixels = NULL;
  int32_t *targets = NULL;
  *img = NULL, *labels = NULL, *mix = NULL;
  if (d->synthetic) {
    // Each sample is a pure function of (seed, index): the rank's threads share the work
    // (about 0.5 ms per 224 px image on one core, 64 ms for a ViT-B batch of 128 on one thread).
#pragma omp parallel for schedule(static) if (d->need_pixels && B > 1)
    for (int b = 0; b < B; b++) {
      if (d->need_pixels && b >= d->pixel_first && b < d->pixel_first + d->pixel_count)
        vt_synthetic_sample(o->seed, first + b, S, K,
                            d->host_img + (size_t)(b - d->pixel_first) * 3 * S * S,
                            &d->host_labels[b]);
      else
        d->host_labels[b] = vt_synthetic_label(o->seed, first + b, K);
    }
    if (d->need_pixels) pixels = d->host_img;
    if (d->need_labels) targets = d->host_labels;
  } else {
    if (!d->train) return;
    if (!d->failed) {
      vt_batch batch;
      char err[512];
      if (vt_loader_next(d->train, &batch, err, sizeof err) != VT_OK) {
        // The step runs to its end on zero images (its collectives) and is not kept: the run
        // stops after it, saving the steps before it (train_step.c).
        // (a rank reads ahead of the others: rank 0 says where the run stops, and what to do)
        vt_log_error("%s, in step %lld's data: the run stops before the first step that met "
                     "such a file on any rank", err, (long long)step + 1);
        d->failed = batch.no_decoder ? 2 : 1, d->fail_step = step;
        d->fail_img = batch.images, d->fail_labels = batch.labels;
      } else {
        d->bad += batch.bad, d->wait_s += batch.wait_s;
        pixels = batch.images, targets = batch.labels;
      }
    }
    if (d->failed) pixels = d->fail_img, targets = d->fail_labels;
  }
  // In place (the batch is ours until the next call), in timm's order: erasing, then mixing,
  // of this rank's images (pixels holds just its share); the targets of the whole micro-batch.
  const int p0 = d->pixel_first, pn = d->pixel_count;
  if (pixels && o->erase.prob > 0) vt_erase_batch(&o->erase, o->seed, first + p0, pn, S, pixels);
  if (vt_mix_enabled(&o->mix)) {
    if (pixels && pn < B) vt_mix_batch(&o->mix, o->seed, first + p0, pn, S, pixels, NULL, NULL);
    if (pn == B || d->need_labels)
      vt_mix_batch(&o->mix, o->seed, first, B, S, pn < B ? NULL : pixels, targets,
                   d->need_labels ? d->host_mix : NULL);
    if (d->need_labels) *mix = d->host_mix;
  }
  *img = pixels, *labels = targets;
}

int64_t vt_data_val_config(const vt_data *d, vt_loader_config *cfg, int want_pixels) {
  const int B = d->o->micro_batch;
  *cfg = base_config(d, &d->val_ds, want_pixels);
  cfg->train = 0;
  // (eval.c leaves them out; under --bad-image fail, a training run's evaluation too: the run
  // then stops after its checkpoint, train_step.c, where `vit3d eval` stops at the file)
  cfg->omit_fails = cfg->bad_policy == VT_BAD_FAIL && !d->o->eval_only;
  if (cfg->bad_policy == VT_BAD_SKIP || !d->o->eval_only) cfg->bad_policy = VT_BAD_OMIT;
  cfg->per_step = 1;
  cfg->step_stride = (int64_t)B * d->dp_size;
  cfg->offset = (int64_t)d->dp_rank * B;
  const int share = vt_data_share(d->o, want_pixels, d->tp_size, 0);  // evaluation mixes nothing
  if (share < B) cfg->pixel_count = share, cfg->pixel_first = d->tp_rank * share;
  cfg->host_alloc = d->be->host_alloc, cfg->host_free = d->be->host_free;
  cfg->warned = d->val_warned;
  return (d->val_ds.count + cfg->step_stride - 1) / cfg->step_stride;
}
