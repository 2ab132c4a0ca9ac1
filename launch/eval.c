// eval.c: forward-only passes over the validation set through the pipeline, scored on the host
// of the last stage.
#include "eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "safetensors.h"

// Adds the loss, top-1 and top-5 hits of the first `valid` rows of logits (B, K) to acc.
static void score(const float *logits, const int32_t *labels, int valid, int K, double *acc) {
  for (int b = 0; b < valid; b++) {
    const float *z = logits + (size_t)b * K;
    const float zy = z[labels[b]];
    double mx = z[0], sum = 0.0;
    int higher = 0;  // classes scored above the true one: its rank
    for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
    for (int k = 0; k < K; k++) {
      sum += exp(z[k] - mx);
      higher += z[k] > zy;
    }
    acc[0] += mx + log(sum) - zy;
    acc[1] += higher < 1;
    acc[2] += higher < 5;
    acc[3] += 1;
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

// The prediction lines of the first `valid` rows of logits (B, K), dataset indices first..:
// index, path, label, then the 5 most probable classes (fewer with fewer classes), highest
// first (ties: the lower class), with their softmax probabilities.
static void write_predictions(FILE *f, const vt_dataset *ds, int64_t first, const float *logits,
                              int valid, int K) {
  for (int b = 0; b < valid; b++) {
    const float *z = logits + (size_t)b * K;
    double mx = z[0], sum = 0.0;
    for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
    for (int k = 0; k < K; k++) sum += exp(z[k] - mx);
    const int64_t i = first + b;
    fprintf(f, "%lld,", (long long)i);
    csv_field(f, ds->paths[i]);
    fputc(',', f);
    csv_field(f, ds->class_names[ds->labels[i]]);
    int top[5], n = K < 5 ? K : 5;
    for (int r = 0; r < n; r++) {  // selection: the best class not taken yet
      int best = -1;
      for (int k = 0; k < K; k++) {
        int taken = 0;
        for (int q = 0; q < r; q++) taken |= top[q] == k;
        if (!taken && (best < 0 || z[k] > z[best])) best = k;
      }
      top[r] = best;
      fputc(',', f);
      csv_field(f, ds->class_names[best]);
      fprintf(f, ",%.6f", exp(z[best] - mx) / sum);
    }
    fputc('\n', f);
  }
}

// The scored inputs, labels and logits of a one-rank evaluation, for export checks.
static void write_dump(const char *path, const float *img, const int32_t *labels,
                       const float *logits, int64_t n, int S, int K) {
  char err[512];
  vt_st_tensor t[3] = {{"images", "F32", 4, {n, 3, S, S}, img},
                       {"labels", "I32", 1, {n}, labels},
                       {"logits", "F32", 2, {n, K}, logits}};
  if (vt_safetensors_write(path, t, 3, err, sizeof err) != VT_OK) vt_log_error("%s", err);
}

vt_eval_result vt_evaluate(vt_model *m, vt_data *d, vt_comm *world, vt_comm *pp,
                           vt_mesh_coord me, const char *dump, const char *predictions) {
  const vt_backend *be = m->be;
  const int B = d->o->micro_batch, K = m->cfg.num_classes, p = m->shard.pp_size;
  const int64_t n = vt_model_local_rows(m, B) * m->cfg.width;
  double acc[4] = {0, 0, 0, 0};  // loss sum, top-1 hits, top-5 hits, samples
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
  float *logits = m->has_head ? malloc((size_t)B * K * sizeof(float)) : NULL;
  VT_CHECK(!m->has_head || logits, "out of host memory for logits");
  const int S = m->cfg.img_size;
  const int64_t cap = dump ? batches * B : 0, img_n = (int64_t)3 * S * S;
  // This rank's share of the images (all of them without a split: data.h).
  const int64_t share = cfg.pixel_count ? cfg.pixel_count : B, first = cfg.pixel_first * img_n;
  float *all_img = dump ? malloc((size_t)(cap * img_n) * sizeof(float)) : NULL;
  float *all_logits = dump ? malloc((size_t)(cap * K) * sizeof(float)) : NULL;
  int32_t *all_labels = dump ? malloc((size_t)cap * sizeof(int32_t)) : NULL;
  VT_CHECK(!dump || (all_img && all_logits && all_labels), "out of host memory for --logits-out");
  vt_model_slot *sl = &m->slots[0];  // training's slots are idle between steps
  const int passes = d->o->eval_hflip ? 2 : 1;
  float *mirror = passes > 1 && m->has_embed
                      ? be->host_alloc((size_t)(share * img_n) * sizeof(float))
                      : NULL;
  float *mean = passes > 1 && m->has_head ? malloc((size_t)B * K * sizeof(float)) : NULL;
  VT_CHECK(passes == 1 || ((mirror || !m->has_embed) && (mean || !m->has_head)),
           "out of host memory for --eval-hflip");
  char pred_tmp[600] = "";
  FILE *pred = NULL;
  if (predictions && m->has_head && me.tp_rank == 0) {
    snprintf(pred_tmp, sizeof pred_tmp, "%s.tmp", predictions);
    pred = fopen(pred_tmp, "w");
    if (!pred) vt_log_error("--predictions: cannot write %s: %s", pred_tmp, strerror(errno));
    else fputs("index,path,label,top1,p1,top2,p2,top3,p3,top4,p4,top5,p5\n", pred);
  }
  vt_model_hold_weights(m);
  for (int64_t j = 0; j < batches; j++) {
    vt_batch batch = {0};
    be->upload_wait();
    if (loader && vt_loader_next(loader, &batch, err, sizeof err) != VT_OK) {
      vt_log_error("validation: %s", err);
      vt_comm_abort(3);
    }
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
    if (!m->has_head) continue;
    const float *z = passes > 1 ? mean : logits;
    if (dump) {  // one rank: it has the images and the logits
      const int64_t at = (int64_t)acc[3];
      memcpy(all_img + at * img_n, batch.images, (size_t)(batch.valid * img_n) * sizeof(float));
      memcpy(all_logits + at * K, z, (size_t)batch.valid * K * sizeof(float));
      memcpy(all_labels + at, batch.labels, (size_t)batch.valid * sizeof(int32_t));
    }
    if (me.tp_rank == 0) score(z, batch.labels, batch.valid, K, acc);
    if (pred)  // the batch's dataset indices start at j * stride + offset (vt_loader_config)
      write_predictions(pred, &d->val_ds, j * cfg.step_stride + cfg.offset, z, batch.valid, K);
  }
  if (pred) {  // written whole, then renamed: a reader never sees half a file
    const int ok = fflush(pred) == 0 && !ferror(pred);
    if (fclose(pred) != 0 || !ok || rename(pred_tmp, predictions) != 0)
      vt_log_error("--predictions: writing %s failed: %s", predictions, strerror(errno));
    else vt_log_info("--predictions: %lld images in %s", (long long)acc[3], predictions);
  }
  vt_model_release_weights(m);
  be->upload_wait();  // before the loader and the mirror go
  if (mirror) be->host_free(mirror);
  free(mean);
  if (dump) write_dump(dump, all_img, all_labels, all_logits, (int64_t)acc[3], S, K);
  free(all_img), free(all_logits), free(all_labels);
  if (loader) vt_loader_destroy(loader);
  free(logits);
  vt_comm_all_reduce_double(world, acc, 4, VT_REDUCE_SUM);
  vt_eval_result r = {0, 0, 0, (int64_t)acc[3]};
  if (acc[3] > 0) r.loss = acc[0] / acc[3], r.top1 = acc[1] / acc[3], r.top5 = acc[2] / acc[3];
  return r;
}
