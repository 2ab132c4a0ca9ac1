// eval.c: forward-only passes over the validation set through the pipeline, scored on the host
// of the last stage.
#include "eval.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "safetensors.h"

// One scored image: its dataset index, loss (no label smoothing) and how many classes scored
// above its own (0: a top-1 hit, under 5: a top-5 hit).
typedef struct {
  int64_t index;
  double loss;
  int higher;
} scored;

// The records of the first `valid` rows of logits (B, K), dataset indices first.. on.
static void score(const float *logits, const int32_t *labels, int valid, int K, int64_t first,
                  scored *out) {
  for (int b = 0; b < valid; b++) {
    const float *z = logits + (size_t)b * K;
    const float zy = z[labels[b]];
    double mx = z[0], sum = 0.0;
    int higher = 0;
    for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
    // Classes ranked above the label: a higher logit or a NaN, an equal one of a lower class
    // (ties in class order, as a stable sort); never a hit where the label's logit is NaN.
    for (int k = 0; k < K; k++) {
      sum += exp(z[k] - mx);
      higher += k != labels[b] && (!(z[k] <= zy) || (z[k] == zy && k < labels[b]));
    }
    if (isnan(zy)) higher = INT_MAX;
    out[b] = (scored){first + b, mx + log(sum) - zy, higher};
  }
}

// A CSV field: as it is, or quoted with its quotes doubled when it holds a comma, a quote or a
// line break (RFC 4180).
static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

// An image's 5 most probable classes (fewer with fewer classes), highest first (ties: the lower
// class), with their softmax probabilities.
typedef struct {
  int n, top[5];
  double p[5];
} top5;

static top5 top_classes(const float *z, int K) {
  double mx = z[0], sum = 0.0;
  for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
  for (int k = 0; k < K; k++) sum += exp(z[k] - mx);
  top5 t = {.n = K < 5 ? K : 5};
  for (int r = 0; r < t.n; r++) {  // selection: the best class not taken yet
    int best = -1;
    for (int k = 0; k < K; k++) {
      int taken = 0;
      for (int q = 0; q < r; q++) taken |= t.top[q] == k;
      if (!taken && (best < 0 || z[k] > z[best])) best = k;
    }
    t.top[r] = best;
    t.p[r] = exp(z[best] - mx) / sum;
  }
  return t;
}

// A prediction line: index, path, label, then the top classes with their probabilities (empty
// fields past the classes, where there are fewer than five: every line has the header's 13).
static void write_prediction(FILE *f, const vt_dataset *ds, int64_t i, const top5 *t) {
  fprintf(f, "%lld,", (long long)i);
  csv_field(f, ds->paths[i]);
  fputc(',', f);
  csv_field(f, ds->class_names[ds->labels[i]]);
  for (int r = 0; r < t->n; r++) {
    fputc(',', f);
    csv_field(f, ds->class_names[t->top[r]]);
    fprintf(f, ",%.6f", t->p[r]);
  }
  for (int r = t->n; r < 5; r++) fputs(",,", f);
  fputc('\n', f);
}

// A prediction as world rank 0 gathers it: the image's dataset index and its top classes.
typedef struct {
  int64_t index;
  top5 t;
} prediction;

static int by_index(const void *a, const void *b) {
  const int64_t x = ((const prediction *)a)->index, y = ((const prediction *)b)->index;
  return (x > y) - (x < y);
}

// Every rank's n records of w doubles, one rank after another (*total records), on every rank
// (calloc'd). Collective over world: the ranks' counts, then one sum with each rank's records at
// its offset, exact for integers and exact for any value added to zeros.
static double *all_gather_doubles(vt_comm *world, const double *mine, int64_t n, int w,
                                  int64_t *total) {
  const int size = vt_comm_size(world), rank = vt_comm_rank(world);
  double *counts = calloc((size_t)size, sizeof(double));
  VT_CHECK(counts != NULL, "out of host memory for %d counts", size);
  counts[rank] = (double)n;
  vt_comm_all_reduce_double(world, counts, size, VT_REDUCE_SUM);
  int64_t at = 0;
  *total = 0;
  for (int r = 0; r < size; r++) at += r < rank ? (int64_t)counts[r] : 0;
  for (int r = 0; r < size; r++) *total += (int64_t)counts[r];
  free(counts);
  double *all = calloc((size_t)(*total * w) + 1, sizeof(double));
  VT_CHECK(all != NULL, "out of host memory for %lld records", (long long)*total);
  memcpy(all + at * w, mine, (size_t)(n * w) * sizeof(double));
  if (*total > 0) vt_comm_all_reduce_double(world, all, *total * w, VT_REDUCE_SUM);
  return all;
}

// Every scoring rank's predictions (rec, tops: n of them) on world rank 0, in dataset order
// (*total of them; NULL elsewhere): 12 doubles a prediction through all_gather_doubles (the DP
// replicas' scorers hold interleaved batches of the set).
static prediction *gather_predictions(vt_comm *world, const scored *rec, const top5 *tops,
                                      int64_t n, int64_t *total) {
  enum { W = 12 };  // index, n, 5 classes, 5 probabilities
  double *mine = calloc((size_t)(n * W) + 1, sizeof(double));
  VT_CHECK(mine != NULL, "out of host memory for %lld predictions", (long long)n);
  for (int64_t k = 0; k < n; k++) {
    double *v = mine + k * W;
    v[0] = (double)rec[k].index, v[1] = tops[k].n;
    for (int q = 0; q < tops[k].n; q++) v[2 + q] = tops[k].top[q], v[7 + q] = tops[k].p[q];
  }
  double *all = all_gather_doubles(world, mine, n, W, total);
  free(mine);
  prediction *out = NULL;
  if (vt_comm_rank(world) == 0) {
    out = malloc((size_t)*total * sizeof(prediction) + 1);
    VT_CHECK(out != NULL, "out of host memory for %lld predictions", (long long)*total);
    for (int64_t k = 0; k < *total; k++) {
      const double *v = all + k * W;
      out[k].index = (int64_t)v[0], out[k].t.n = (int)v[1];
      for (int q = 0; q < out[k].t.n; q++)
        out[k].t.top[q] = (int)v[2 + q], out[k].t.p[q] = v[7 + q];
    }
    qsort(out, (size_t)*total, sizeof(prediction), by_index);
  }
  free(all);
  return out;
}

// --predictions: a line per scored image that was not bad, in dataset order, written whole to a
// temporary name, then renamed: a reader never sees half a file. 0 where it failed (said; the
// temporary file removed, an earlier file of that name left as it was).
static int write_predictions(const char *path, const vt_dataset *ds, const prediction *pred,
                             int64_t n, const unsigned char *is_bad) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%.590s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    vt_log_error("--predictions: cannot write %s: %s", tmp, strerror(errno));
    return 0;
  }
  fputs("index,path,label,top1,p1,top2,p2,top3,p3,top4,p4,top5,p5\n", f);
  int64_t lines = 0;
  for (int64_t k = 0; k < n; k++)
    if (!is_bad[pred[k].index]) write_prediction(f, ds, pred[k].index, &pred[k].t), lines++;
  int ok = fflush(f) == 0 && !ferror(f), e = ok ? 0 : errno;
  if (fclose(f) != 0 && ok) ok = 0, e = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
  if (!ok) {
    remove(tmp);
    vt_log_error("--predictions: writing %s failed: %s%s", path, strerror(e),
                 e == ENOSPC || e == EDQUOT ? " (the disk is full: free space and evaluate again)"
                                            : "");
    return 0;
  }
  vt_log_info("--predictions: %lld images in %s", (long long)lines, path);
  return 1;
}

// The scored inputs, labels and logits of a one-rank evaluation, for export checks: 0 where the
// write failed (said).
static int write_dump(const char *path, const float *img, const int32_t *labels,
                      const float *logits, int64_t n, int S, int K) {
  char err[512];
  vt_st_tensor t[3] = {{"images", "F32", 4, {n, 3, S, S}, img},
                       {"labels", "I32", 1, {n}, labels},
                       {"logits", "F32", 2, {n, K}, logits}};
  if (vt_safetensors_write(path, t, 3, err, sizeof err) == VT_OK) return 1;
  vt_log_error("%s", err);
  return 0;
}

// Flags over the validation set (count bytes, calloc'd): 1 for the images some rank found bad.
// mine: the indices this rank found bad, each listed by the one rank that decodes it; every
// rank's list through all_gather_doubles.
static unsigned char *gather_bad(vt_comm *world, const int64_t *mine, int64_t n_mine,
                                 int64_t count) {
  unsigned char *flags = calloc((size_t)count, 1);
  double *list = calloc((size_t)n_mine + 1, sizeof(double));
  VT_CHECK(flags && list, "out of host memory for the validation set's bad images");
  for (int64_t k = 0; k < n_mine; k++) list[k] = (double)mine[k];
  int64_t total = 0;
  double *all = all_gather_doubles(world, list, n_mine, 1, &total);
  for (int64_t k = 0; k < total; k++) flags[(int64_t)all[k]] = 1;
  free(list), free(all);
  return flags;
}

vt_eval_result vt_evaluate(vt_model *m, vt_data *d, vt_comm *world, vt_comm *pp,
                           vt_mesh_coord me, const char *dump, const char *predictions) {
  const vt_backend *be = m->be;
  const int B = d->o->micro_batch, K = m->cfg.num_classes, p = m->shard.pp_size;
  const int64_t n = vt_model_local_rows(m, B) * m->cfg.width;
  vt_loader_config cfg;
  // Its buffers are the backend's host_alloc memory (pinned on CUDA), uploaded with `upload`; each
  // batch's uploads are waited for before its buffers go back to the loader (the loop's top).
  const int64_t batches = vt_data_val_config(d, &cfg, m->has_embed);
  vt_loader *loader = NULL;
  char err[512];
  if (m->has_embed || m->has_head) {
    loader = vt_loader_create(&cfg, 0, err, sizeof err);
    VT_CHECK(loader != NULL, "validation loader: %s", err);
  }
  const int scorer = m->has_head && me.tp_rank == 0;  // the last stage's TP rank 0 scores
  // Which rank lists an image found bad: the one that decodes it (TP ranks split the decoding,
  // or TP rank 0 of the first stage when each decodes the whole batch).
  const int lists_bad = m->has_embed && (cfg.pixel_count > 0 || me.tp_rank == 0);
  const int64_t cap = batches * B;
  float *logits = m->has_head ? malloc((size_t)B * K * sizeof(float)) : NULL;
  scored *rec = scorer ? malloc((size_t)cap * sizeof(scored)) : NULL;
  int64_t *bad = lists_bad ? malloc((size_t)cap * sizeof(int64_t)) : NULL;
  VT_CHECK((!m->has_head || logits) && (!scorer || rec) && (!lists_bad || bad),
           "out of host memory for the evaluation's scores");
  int64_t nrec = 0, nbad = 0;
  const int S = m->cfg.img_size;
  const int64_t img_n = (int64_t)3 * S * S;
  // This rank's share of the images (all of them without a split: data.h).
  const int64_t share = cfg.pixel_count ? cfg.pixel_count : B, first = cfg.pixel_first * img_n;
  const int64_t dcap = dump ? cap : 0;
  float *all_img = dump ? malloc((size_t)(dcap * img_n) * sizeof(float)) : NULL;
  float *all_logits = dump ? malloc((size_t)(dcap * K) * sizeof(float)) : NULL;
  int32_t *all_labels = dump ? malloc((size_t)dcap * sizeof(int32_t)) : NULL;
  VT_CHECK(!dump || (all_img && all_logits && all_labels), "out of host memory for --logits-out");
  vt_model_slot *sl = &m->slots[0];  // training's slots are idle between steps
  const int passes = d->o->eval_hflip ? 2 : 1;
  float *mirror = passes > 1 && m->has_embed
                      ? be->host_alloc((size_t)(share * img_n) * sizeof(float))
                      : NULL;
  float *mean = passes > 1 && m->has_head ? malloc((size_t)B * K * sizeof(float)) : NULL;
  VT_CHECK(passes == 1 || ((mirror || !m->has_embed) && (mean || !m->has_head)),
           "out of host memory for --eval-hflip");
  // --predictions: each scored image's top classes, written at the end without the bad ones.
  top5 *tops = predictions && scorer ? malloc((size_t)cap * sizeof(top5)) : NULL;
  VT_CHECK(!predictions || !scorer || tops, "out of host memory for --predictions");
  vt_model_hold_weights(m);
  for (int64_t j = 0; j < batches; j++) {
    vt_batch batch = {0};
    be->upload_wait();
    if (loader && vt_loader_next(loader, &batch, err, sizeof err) != VT_OK) {
      vt_log_error("validation: %s; the run stops here (exit %d)", err, VT_EXIT_FAILED);
      vt_comm_abort(VT_EXIT_FAILED);
    }
    // The batch's dataset indices start at j * stride + offset (vt_loader_config).
    const int64_t at = j * cfg.step_stride + cfg.offset;
    for (int b = 0; lists_bad && b < batch.valid; b++)
      if (batch.bad_flags[b]) bad[nbad++] = at + b;
    if (mirror)  // every row of every channel reversed: the image seen in a mirror
      for (int64_t r = 0; r < share * img_n / S; r++)  // the share's rows (batch.images)
        for (int x = 0; x < S; x++) mirror[r * S + x] = batch.images[r * S + (S - 1 - x)];
    for (int pass = 0; pass < passes; pass++) {
      if (m->has_head) be->upload(sl->labels, batch.labels, (size_t)B * sizeof(int32_t));
      // Through every chunk in turn, one batch at a time: the interleaved layout's batch goes
      // round the ring of pipeline ranks after each chunk; ZB-V's down the ranks through chunk 0
      // and back up through chunk 1, turning on the last rank by a copy.
      for (int c = 0; c < m->nchunks; c++) {
        const int vs = vt_shard_vstage(&m->shard, c), last = p * m->nchunks - 1;
        const int from = vs > 0 ? vt_shard_vstage_rank(&m->shard, vs - 1) : -1;
        const int to = vs < last ? vt_shard_vstage_rank(&m->shard, vs + 1) : -1;
        if (m->has_embed && c == 0) {
          be->upload(sl->img + first, pass ? mirror : batch.images,
                     (size_t)(share * img_n) * sizeof(float));
          if (share < B) vt_comm_all_gather(m->tp, sl->img, sl->img + first, share * img_n);
        } else if (from == me.pp_rank) {  // the previous chunk's output (ZB-V's turn)
          be->copy(sl->res[0], vt_model_chunk_output(m, c - 1, 0), (size_t)n * sizeof(float));
        } else {
          vt_comm_recv(pp, sl->res[0], n, from);
        }
        vt_model_forward(m, c, 0, B, 0.0f, -1);  // no drop path
        be->inputs_read();  // the training step after this may upload_ahead into the slot
        if (to >= 0 && to != me.pp_rank) vt_comm_send(pp, vt_model_chunk_output(m, c, 0), n, to);
      }
      if (!m->has_head) continue;
      be->to_host(logits, sl->logits, (size_t)B * K * sizeof(float));
      if (passes > 1) {  // the mean of the two passes' logits, summed in a fixed order
        for (int64_t i = 0; i < (int64_t)B * K; i++)
          mean[i] = pass ? 0.5f * (mean[i] + logits[i]) : logits[i];
      }
    }
    if (!scorer) continue;
    const float *z = passes > 1 ? mean : logits;
    if (dump) {  // one rank: it has the images and the logits
      memcpy(all_img + nrec * img_n, batch.images, (size_t)(batch.valid * img_n) * sizeof(float));
      memcpy(all_logits + nrec * K, z, (size_t)batch.valid * K * sizeof(float));
      memcpy(all_labels + nrec, batch.labels, (size_t)batch.valid * sizeof(int32_t));
    }
    score(z, batch.labels, batch.valid, K, at, rec + nrec);
    for (int b = 0; tops && b < batch.valid; b++)
      tops[nrec + b] = top_classes(z + (size_t)b * K, K);
    nrec += batch.valid;
  }
  vt_model_release_weights(m);
  be->upload_wait();  // before the loader and the mirror go
  if (mirror) be->host_free(mirror);
  free(mean);
  if (loader) vt_loader_destroy(loader);
  free(logits);
  // The bad images are left out of the figures, the predictions and the dump: a zero image (or a
  // stand-in) scored in their place would count as theirs.
  unsigned char *is_bad = gather_bad(world, bad, nbad, d->val_ds.count);
  free(bad);
  double acc[6] = {0};  // loss sum, top-1 hits, top-5 hits, images, bad images, failed writes
  int64_t kept = 0;
  for (int64_t k = 0; k < nrec; k++) {  // (in the order scored, as before any was left out)
    if (is_bad[rec[k].index]) continue;
    acc[0] += rec[k].loss, acc[1] += rec[k].higher < 1, acc[2] += rec[k].higher < 5, acc[3] += 1;
    if (dump && kept < k) {  // closed up over the bad ones
      memmove(all_img + kept * img_n, all_img + k * img_n, (size_t)img_n * sizeof(float));
      memmove(all_logits + kept * K, all_logits + k * K, (size_t)K * sizeof(float));
      all_labels[kept] = all_labels[k];
    }
    kept++;
  }
  if (vt_comm_rank(world) == 0)  // (every rank has the same flags)
    for (int64_t i = 0; i < d->val_ds.count; i++) acc[4] += is_bad[i];
  if (predictions) {
    int64_t npred = 0;
    prediction *pred = gather_predictions(world, rec, tops, tops ? nrec : 0, &npred);
    if (pred && !write_predictions(predictions, &d->val_ds, pred, npred, is_bad)) acc[5] = 1;
    free(pred);
  }
  if (dump && !write_dump(dump, all_img, all_labels, all_logits, kept, S, K)) acc[5] = 1;
  free(all_img), free(all_logits), free(all_labels);
  free(rec), free(tops), free(is_bad);
  vt_comm_all_reduce_double(world, acc, 6, VT_REDUCE_SUM);
  // No image scored (all bad): no figures, not a loss of 0 (null in metrics.jsonl).
  vt_eval_result r = {NAN, NAN, NAN, (int64_t)acc[3], (int64_t)acc[4], acc[5] > 0};
  if (r.count == 0 && r.bad > 0 && vt_comm_rank(world) == 0)
    vt_log_warn("every validation image (%lld) was bad: the evaluation has no figures; fix the "
                "files or --val-data", (long long)r.bad);
  if (acc[3] > 0) r.loss = acc[0] / acc[3], r.top1 = acc[1] / acc[3], r.top5 = acc[2] / acc[3];
  return r;
}
