// loader.c: decoder threads filling a ring of micro-batch buffers, returned strictly in order.
// Threads take single samples of the oldest open batch, so one batch is decoded by all threads
// at once and its bytes do not depend on who decoded what: a sample is vt_sample_from_dataset of
// its file (or shard member) and its own key (sample.h), a pure function. Must not depend on
// MPI, a backend or the model; randomness only through vt_rng keyed by global identities
// (design.md).
#include "loader.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "vt_error.h"
#include "vt_rng.h"

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_OUT };

// Random replacement picks before an exhaustive scan of the class, which makes the outcome
// independent of how many bad files the class has (only a fully bad class fails).
#define REPLACE_TRIES 4

typedef struct {
  int state;
  int64_t batch;     // micro-batch held
  int handed, done;  // samples given to threads, samples finished
  int bad, valid;
  int64_t *pos, *idx, *ep;  // per sample: stream position, dataset index (-1: padding), epoch
  int64_t *key;             // per sample: its augmentation key (vt_sampler_key)
  unsigned char *bad_flag;  // per sample: 1 where its file was bad (decoded samples only)
  float *images;            // (pixel_count, 3, S, S): the share this loader decodes
  int32_t *labels;
  int err_sample;  // lowest sample whose error is reported, -1 none
  int err_no_decoder;  // 1 where that error is a file this build cannot decode
  char err[640];
} slot;

struct vt_loader {
  vt_loader_config cfg;
  const vt_dataset *ds;
  vt_sampler sampler;  // used under mu only: it caches one epoch and is not thread-safe
  int nslots;
  slot *slots;
  float *pixels;         // every slot's images, one block (cfg.host_alloc)
  int32_t *label_block;  // every slot's labels, one block (cfg.host_alloc)
  int64_t *members, *class_start;  // samples of class c: members[class_start[c] .. [c+1])
  atomic_uchar *known_bad;         // a warning was printed for this file
  // ...and its failure does not depend on the crop (not VT_IMG_CORRUPT, which a decode that
  // stops early may miss for one crop and meet for another): a stand-in never tried again
  atomic_uchar *firm_bad;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, ready_cv;
  int64_t fill_batch;  // next micro-batch to open for decoding
  int64_t next_batch;  // next micro-batch vt_loader_next returns (consumer thread only)
  int out_slot;        // slot the consumer holds, -1 none
  int stop;
  int nthreads;
  pthread_t *threads;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static int64_t first_position(const vt_loader_config *c, int64_t j) {
  return (j / c->per_step) * c->step_stride + c->offset + (j % c->per_step) * c->batch;
}

// Sample indices and labels of micro-batch j: the only use of the sampler.
static void plan_batch(vt_loader *l, slot *s, int64_t j) {
  const vt_loader_config *c = &l->cfg;
  int64_t p0 = first_position(c, j);
  s->valid = 0;
  for (int i = 0; i < c->batch; i++) {
    int64_t p = p0 + i, e = 0, idx;
    if (c->train) {
      idx = vt_sampler_at(&l->sampler, p, &e);
    } else {
      idx = p < l->ds->count ? p : -1;
    }
    s->pos[i] = p;
    s->idx[i] = idx;
    s->ep[i] = e;
    s->key[i] = c->train && idx >= 0 ? vt_sampler_key(&l->sampler, p, idx) : idx;
    // Padding gets label 0 and a zero image: harmless to any loss code, masked through valid.
    s->labels[i] = idx >= 0 ? l->ds->labels[idx] : 0;
    if (idx >= 0) s->valid++;
  }
  s->batch = j;
  s->handed = c->pixel_first;  // samples are handed out from the first this loader decodes
  s->done = s->bad = 0;
  s->err_sample = -1, s->err_no_decoder = 0;
}

static void warn_once(vt_loader *l, int64_t idx, vt_image_status st, const char *msg) {
  if (st != VT_IMG_CORRUPT) atomic_store(&l->firm_bad[idx], 1);
  if (atomic_exchange(&l->known_bad[idx], 1)) return;
  if (l->cfg.bad_policy == VT_BAD_OMIT && l->cfg.omit_fails)
    vt_log_error("bad image in the validation set under --bad-image fail (left out of this "
                 "evaluation, after which the run stops): %s", msg);
  else if (l->cfg.bad_policy == VT_BAD_OMIT)
    vt_log_warn("bad image left out of the evaluation: %s", msg);
  else vt_log_warn("bad image skipped, a sample of the same class replaces it: %s", msg);
}

// Sample i of slot s, keyed by its own (epoch, index), whichever file provides the pixels.
static vt_sample_spec spec_of(const vt_loader *l, const slot *s, int i) {
  const vt_loader_config *c = &l->cfg;
  vt_sample_spec sp = {.tc = &c->tc, .S = c->S, .train = c->train, .seed = c->seed,
                       .epoch = s->ep[i], .index = s->key[i], .max_pixels = c->max_pixels};
  return sp;
}

// A file of a kind this build has no decoder for (msg says which): -1, the error to report.
static int no_decoder(const char *msg, char *err, size_t errlen) {
  set_err(err, errlen, "%s: this vit3d cannot decode the dataset's files of that kind", msg);
  return -1;
}

// Renders a good sample of idx's class into out, with the crop of sp's key (the crop is keyed by
// the position's own sample, also for a stand-in, so that a replaced sample does not repeat the
// stand-in's crop of this epoch). Picks depend only on (seed, position, attempt); skipping files
// already known bad whatever the crop only saves the work of failing on them again (one bad for
// another crop is tried: which thread met it first would otherwise choose the stand-in).
// 1, or 0 with err (the class has no good file), or -1 (a stand-in this build cannot decode).
static int replace(vt_loader *l, int64_t idx, int64_t pos, const vt_sample_spec *sp, float *out,
                   char *err, size_t errlen) {
  int32_t c = l->ds->labels[idx];
  const int64_t *mem = l->members + l->class_start[c];
  int64_t m = l->class_start[c + 1] - l->class_start[c];
  const uint32_t stream = vt_hash_name("loader.replace");
  char msg[512];
  for (int t = 0; t < REPLACE_TRIES + 1 && m > 1; t++) {
    uint64_t r = vt_rng_u32(l->cfg.seed, stream, (uint32_t)t, (uint64_t)pos);
    if (t < REPLACE_TRIES) {
      // Multiply-shift: a bias below m / 2^32, irrelevant for picking a stand-in.
      int64_t k = (int64_t)((r * (uint64_t)(m - 1)) >> 32);
      int64_t cand = mem[k] == idx ? mem[m - 1] : mem[k];
      if (atomic_load(&l->firm_bad[cand])) continue;
      const vt_image_status st = vt_sample_from_dataset(l->ds, cand, sp, out, msg, sizeof(msg));
      if (st == VT_IMG_OK) return 1;
      if (st == VT_IMG_NO_DECODER) return no_decoder(msg, err, errlen);
      warn_once(l, cand, st, msg);
      continue;
    }
    int64_t start = (int64_t)((r * (uint64_t)m) >> 32);
    for (int64_t u = 0; u < m; u++) {
      int64_t cand = mem[(start + u) % m];
      if (cand == idx || atomic_load(&l->firm_bad[cand])) continue;
      const vt_image_status st = vt_sample_from_dataset(l->ds, cand, sp, out, msg, sizeof(msg));
      if (st == VT_IMG_OK) return 1;
      if (st == VT_IMG_NO_DECODER) return no_decoder(msg, err, errlen);
      warn_once(l, cand, st, msg);
    }
  }
  set_err(err, errlen,
          "every image of class '%s' is bad (%lld files, e.g. %s): nothing can replace them; "
          "fix or remove that class folder",
          l->ds->class_names[c], (long long)m, l->ds->paths[idx]);
  return 0;
}

// Decodes sample i of slot s into its place. Returns 1, or 0 and fills err on an error to
// report, -1 where it is a file this build cannot decode.
static int decode_sample(vt_loader *l, slot *s, int i, int *bad, char *err, size_t errlen) {
  const vt_loader_config *c = &l->cfg;
  size_t plane = (size_t)3 * c->S * c->S;
  float *out = s->images + (size_t)(i - c->pixel_first) * plane;  // images hold the share
  int64_t idx = s->idx[i];
  *bad = s->bad_flag[i] = 0;
  if (idx < 0) {
    memset(out, 0, plane * sizeof(float));
    return 1;
  }
  char msg[512];
  vt_sample_spec sp = spec_of(l, s, i);
  vt_image_status st = vt_sample_from_dataset(l->ds, idx, &sp, out, msg, sizeof(msg));
  if (st == VT_IMG_NO_DECODER) return no_decoder(msg, err, errlen);  // (not bad data)
  if (st != VT_IMG_OK) {
    if (c->bad_policy == VT_BAD_FAIL) {
      set_err(err, errlen, "%s (bad-image policy: fail)", msg);
      return 0;
    }
    warn_once(l, idx, st, msg);
    *bad = s->bad_flag[i] = 1;
    if (c->bad_policy == VT_BAD_OMIT) {  // a zero image, flagged for the caller to leave out
      memset(out, 0, plane * sizeof(float));
      return 1;
    }
    return replace(l, idx, s->pos[i], &sp, out, err, errlen);
  }
  return 1;
}

static void *worker(void *arg) {
  vt_loader *l = arg;
  const int end = l->cfg.pixel_first + l->cfg.pixel_count, count = l->cfg.pixel_count;
  char err[640];
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    // Batches open in order and are handed out fully before the next opens, so the only slot
    // with samples left to hand out is the one of fill_batch - 1.
    slot *cur = l->fill_batch > 0 ? &l->slots[(l->fill_batch - 1) % l->nslots] : NULL;
    if (cur && cur->state == SLOT_FILLING && cur->handed < end) {
      int i = cur->handed++;
      pthread_mutex_unlock(&l->mu);
      int bad;
      int ok = decode_sample(l, cur, i, &bad, err, sizeof(err));
      pthread_mutex_lock(&l->mu);
      cur->bad += bad;
      if (ok <= 0 && (cur->err_sample < 0 || i < cur->err_sample)) {
        cur->err_sample = i;  // the lowest sample, whichever thread finished first
        cur->err_no_decoder = ok < 0;
        memcpy(cur->err, err, sizeof(err));
      }
      if (++cur->done == count) {
        cur->state = SLOT_READY;
        pthread_cond_broadcast(&l->ready_cv);
      }
      continue;
    }
    slot *next = &l->slots[l->fill_batch % l->nslots];
    if (next->state == SLOT_FREE) {
      plan_batch(l, next, l->fill_batch++);
      next->state = SLOT_FILLING;
      pthread_cond_broadcast(&l->work_cv);  // idle threads can share this batch
      continue;
    }
    pthread_cond_wait(&l->work_cv, &l->mu);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static int check_config(const vt_loader_config *c, int64_t first_batch, char *err,
                        size_t errlen) {
  const char *why = NULL;
  if (!c->ds || c->ds->count <= 0) why = "the dataset is empty";
  else if (c->batch < 1) why = "batch must be at least 1";
  else if (c->per_step < 1) why = "per_step must be at least 1";
  else if (c->step_stride < 0 || c->offset < 0) why = "step_stride and offset must be >= 0";
  else if (first_batch < 0) why = "the first micro-batch must be >= 0";
  else if (c->repeats < 0 || c->repeats > 64) why = "repeats must be 0..64";
  else if (c->epoch_len < 0 || c->epoch_len > c->ds->count) why = "epoch_len must be 0..count";
  else if (c->want_pixels && (c->S < 1 || c->S > 16384)) why = "image side S must be 1..16384";
  else if (c->want_pixels && (c->threads < 1 || c->threads > 1024))
    why = "loader threads must be 1..1024";
  else if (c->want_pixels && (c->prefetch < 1 || c->prefetch > 1024))
    why = "prefetch must be 1..1024";
  else if (c->want_pixels && c->max_pixels < 1) why = "max_pixels must be positive";
  else if (c->bad_policy != VT_BAD_SKIP && c->bad_policy != VT_BAD_FAIL &&
           c->bad_policy != VT_BAD_OMIT)
    why = "bad-image policy";
  else if (c->pixel_first < 0 || c->pixel_count < 0 || c->pixel_first + c->pixel_count > c->batch ||
           (c->pixel_count == 0 && c->pixel_first != 0))
    why = "the decoded samples must lie inside the batch";
  else if (!c->host_alloc != !c->host_free) why = "host_alloc and host_free come together";
  if (why) set_err(err, errlen, "loader configuration: %s", why);
  return why == NULL;
}

// Samples grouped by class, for same-class replacements.
static int index_classes(vt_loader *l) {
  const vt_dataset *ds = l->ds;
  int K = ds->num_classes;
  l->class_start = calloc((size_t)K + 1, sizeof(int64_t));
  l->members = malloc((size_t)ds->count * sizeof(int64_t));
  l->known_bad =
      l->cfg.warned ? l->cfg.warned : calloc((size_t)ds->count, sizeof(atomic_uchar));
  l->firm_bad = calloc((size_t)ds->count, sizeof(atomic_uchar));
  if (!l->class_start || !l->members || !l->known_bad || !l->firm_bad) return 0;
  for (int64_t i = 0; i < ds->count; i++) l->class_start[ds->labels[i] + 1]++;
  for (int c = 0; c < K; c++) l->class_start[c + 1] += l->class_start[c];
  int64_t *fill = malloc(((size_t)K + 1) * sizeof(int64_t));
  if (!fill) return 0;
  memcpy(fill, l->class_start, ((size_t)K + 1) * sizeof(int64_t));
  for (int64_t i = 0; i < ds->count; i++) l->members[fill[ds->labels[i]]++] = i;
  free(fill);
  return 1;
}

// A block of host memory from cfg->host_alloc, or page-aligned malloc without one.
static void *host_block(const vt_loader_config *cfg, size_t nbytes) {
  if (cfg->host_alloc) return cfg->host_alloc(nbytes);
  void *p = NULL;
  return posix_memalign(&p, 4096, nbytes ? nbytes : 1) == 0 ? p : NULL;
}

vt_loader *vt_loader_create(const vt_loader_config *cfg, int64_t first_batch, char *err,
                            size_t errlen) {
  if (!check_config(cfg, first_batch, err, errlen)) return NULL;
  vt_loader *l = calloc(1, sizeof(*l));
  if (!l) return set_err(err, errlen, "out of memory for the loader"), NULL;
  l->cfg = *cfg;
  if (!l->cfg.pixel_count) l->cfg.pixel_count = cfg->batch;
  l->ds = cfg->ds;
  l->fill_batch = l->next_batch = first_batch;
  l->out_slot = -1;
  for (int64_t i = 0; i < l->ds->count; i++)
    if (l->ds->labels[i] < 0 || l->ds->labels[i] >= l->ds->num_classes) {
      set_err(err, errlen, "dataset label %d of %s is outside [0, %d)", l->ds->labels[i],
              l->ds->paths[i], l->ds->num_classes);
      free(l);
      return NULL;
    }
  if (cfg->train)
    vt_sampler_init(&l->sampler, cfg->seed, l->ds->count, cfg->repeats > 1 ? cfg->repeats : 1,
                    cfg->epoch_len);
  // One slot for the batch the consumer holds plus `prefetch` being decoded or ready.
  l->nslots = cfg->want_pixels ? cfg->prefetch + 1 : 1;
  l->slots = calloc((size_t)l->nslots, sizeof(slot));
  int ok = l->slots != NULL;
  size_t B = (size_t)cfg->batch, plane = cfg->want_pixels ? (size_t)3 * cfg->S * cfg->S : 0;
  const size_t share = (size_t)l->cfg.pixel_count;  // the images a batch holds
  // What the caller uploads (images, labels) lives in two blocks from cfg->host_alloc.
  l->label_block = host_block(cfg, (size_t)l->nslots * B * sizeof(int32_t));
  ok = ok && l->label_block;
  if (ok && cfg->want_pixels) {
    l->pixels = host_block(cfg, (size_t)l->nslots * share * plane * sizeof(float));
    ok = l->pixels && index_classes(l);
  }
  for (int k = 0; ok && k < l->nslots; k++) {
    slot *s = &l->slots[k];
    s->pos = malloc(B * sizeof(int64_t));
    s->idx = malloc(B * sizeof(int64_t));
    s->ep = malloc(B * sizeof(int64_t));
    s->key = malloc(B * sizeof(int64_t));
    s->bad_flag = calloc(B, 1);
    s->labels = l->label_block + (size_t)k * B;
    s->images = l->pixels ? l->pixels + (size_t)k * share * plane : NULL;
    ok = s->pos && s->idx && s->ep && s->key && s->bad_flag;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  if (!ok) {
    set_err(err, errlen, "out of memory for %d loader buffers of %zu images of side %d",
            l->nslots, B, cfg->S);
    vt_loader_destroy(l);
    return NULL;
  }
  if (cfg->want_pixels) {
    l->threads = calloc((size_t)cfg->threads, sizeof(pthread_t));
    for (int t = 0; l->threads && t < cfg->threads; t++) {
      if (pthread_create(&l->threads[t], NULL, worker, l) != 0) break;
      l->nthreads++;
    }
    if (l->nthreads < cfg->threads) {
      set_err(err, errlen, "could not start %d loader threads (started %d)", cfg->threads,
              l->nthreads);
      vt_loader_destroy(l);
      return NULL;
    }
  }
  return l;
}

vt_status vt_loader_next(vt_loader *l, vt_batch *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (!l->cfg.want_pixels) {
    // Labels only: the same plan as the decoding ranks, computed here with no threads.
    slot *s = &l->slots[0];
    plan_batch(l, s, l->next_batch++);
    out->labels = s->labels;
    out->valid = s->valid;
    out->bad_flags = s->bad_flag;  // (none: nothing decoded)
    out->epoch = s->ep[0];
    return VT_OK;
  }
  pthread_mutex_lock(&l->mu);
  if (l->out_slot >= 0) {
    l->slots[l->out_slot].state = SLOT_FREE;
    l->out_slot = -1;
    pthread_cond_broadcast(&l->work_cv);
  }
  int k = (int)(l->next_batch % l->nslots);
  slot *s = &l->slots[k];
  double t_wait = 0.0;
  if (!(s->state == SLOT_READY && s->batch == l->next_batch)) t_wait = vt_seconds();
  while (!(s->state == SLOT_READY && s->batch == l->next_batch))
    pthread_cond_wait(&l->ready_cv, &l->mu);
  if (t_wait > 0.0) out->wait_s = vt_seconds() - t_wait;
  if (s->err_sample >= 0) {
    // The batch stays unreturned: asking again gives the same error. Its buffers, the images
    // zeroed, let the caller finish a step it will not keep (its collectives).
    set_err(err, errlen, "%s", s->err);
    pthread_mutex_unlock(&l->mu);
    const vt_loader_config *c = &l->cfg;
    memset(s->images, 0, (size_t)c->pixel_count * 3 * c->S * c->S * sizeof(float));
    out->images = s->images;
    out->labels = s->labels;
    out->valid = s->valid;
    out->bad_flags = s->bad_flag;
    out->epoch = s->ep[0];
    out->no_decoder = s->err_no_decoder;
    return VT_ERR_INPUT;
  }
  s->state = SLOT_OUT;
  l->out_slot = k;
  l->next_batch++;
  pthread_mutex_unlock(&l->mu);
  out->images = s->images;
  out->labels = s->labels;
  out->valid = s->valid;
  out->bad = s->bad;
  out->bad_flags = s->bad_flag;
  out->epoch = s->ep[0];
  return VT_OK;
}

int64_t vt_loader_position(const vt_loader *l) { return l->next_batch; }

void vt_loader_destroy(vt_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  for (int t = 0; t < l->nthreads; t++) pthread_join(l->threads[t], NULL);
  free(l->threads);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_mutex_destroy(&l->mu);
  for (int k = 0; l->slots && k < l->nslots; k++) {
    free(l->slots[k].pos);
    free(l->slots[k].idx);
    free(l->slots[k].ep);
    free(l->slots[k].key);
    free(l->slots[k].bad_flag);
  }
  free(l->slots);
  void (*release)(void *) = l->cfg.host_free ? l->cfg.host_free : free;  // host_block's pair
  if (l->pixels) release(l->pixels);
  if (l->label_block) release(l->label_block);
  free(l->members);
  free(l->class_start);
  if (l->known_bad != l->cfg.warned) free(l->known_bad);
  free(l->firm_bad);
  if (l->cfg.train) vt_sampler_free(&l->sampler);
  free(l);
}
