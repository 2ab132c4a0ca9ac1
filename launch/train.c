// train.c: the single-process training loop: data, forward and backward per micro-batch,
// gradient norm, clipping, AdamW, progress line and metrics.jsonl.
#include "train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "model.h"
#include "synthetic.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

vt_status vt_train_validate(const vt_train_options *o, char *err, size_t errlen) {
  if (vt_config_validate(&o->model, err, errlen) != VT_OK) return VT_ERR_INPUT;
  if (strcmp(o->data, "synthetic") != 0) {
    snprintf(err, errlen, "--data %s: only 'synthetic' is available in this version", o->data);
    return VT_ERR_INPUT;
  }
  if (o->global_batch % o->micro_batch != 0) {
    snprintf(err, errlen,
             "--global-batch-size %d is not a multiple of --micro-batch-size %d; pick sizes "
             "where it divides (for example %d)",
             o->global_batch, o->micro_batch,
             (o->global_batch / o->micro_batch + 1) * o->micro_batch);
    return VT_ERR_INPUT;
  }
  if (o->optim.warmup_steps > o->steps) {
    snprintf(err, errlen, "--warmup-steps %lld is longer than --steps %lld",
             (long long)o->optim.warmup_steps, (long long)o->steps);
    return VT_ERR_INPUT;
  }
  if (o->optim.min_lr > o->optim.lr) {
    snprintf(err, errlen, "--min-lr %g is above --lr %g", o->optim.min_lr, o->optim.lr);
    return VT_ERR_INPUT;
  }
  return VT_OK;
}

// mkdir -p: creates dir and its missing parents.
static int make_dirs(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static FILE *open_metrics(const char *dir) {
  if (!dir[0]) return NULL;
  if (make_dirs(dir) != 0) {
    vt_log_error("cannot create --log-dir %s: %s", dir, strerror(errno));
    return NULL;
  }
  char path[600];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "w");
  if (!f) vt_log_error("cannot write %s: %s", path, strerror(errno));
  return f;
}

static void print_memory_plan(const vt_model *m, const vt_backend *be) {
  double mib = 1.0 / (1 << 20), p = (double)m->table.total * 4 * mib;
  vt_log_info("memory plan (%s): parameters %.1f MiB, gradients %.1f MiB, AdamW state %.1f MiB, "
              "activations %.1f MiB for micro-batch %d; total %.1f MiB",
              be->name, p, p, 2 * p, (double)m->act_nbytes * mib, m->max_batch,
              4 * p + (double)m->act_nbytes * mib);
}

int vt_train_run(const vt_train_options *o) {
  const char *why = NULL;
  const vt_backend *be = vt_backend_get(o->device, &why);
  if (!be) {
    vt_log_error("--device %s is not available: %s", o->device == VT_DEVICE_CUDA ? "cuda" : "cpu",
                 why);
    return 2;
  }
  vt_backend_set_threads(o->threads);
  const vt_vit_config *c = &o->model;
  const int S = c->img_size, K = c->num_classes, B = o->micro_batch;
  const int nmicro = o->global_batch / B;
  vt_model m;
  vt_model_init(&m, c, B, be, o->seed);
  vt_adamw_state opt;
  vt_adamw_state_init(&opt, be, m.table.total);
  vt_log_info("model %s: img %d patch %d width %d depth %d heads %d mlp %d classes %d, %lld "
              "parameters; %s backend, %d threads",
              c->name, S, c->patch_size, c->width, c->depth, c->heads, vt_cfg_mlp_hidden(c), K,
              (long long)m.table.total, be->name, o->threads);
  print_memory_plan(&m, be);

  const size_t img_count = (size_t)B * 3 * S * S;
  float *host_img = malloc(img_count * sizeof(float));
  int32_t *host_labels = malloc((size_t)B * sizeof(int32_t));
  VT_CHECK(host_img && host_labels, "out of host memory for a micro-batch of images");
  FILE *metrics = open_metrics(o->log_dir);
  if (o->log_dir[0] && !metrics) return 1;

  const double t_start = now_s();
  for (int64_t step = 0; step < o->steps; step++) {
    const double t0 = now_s();
    be->zero(m.grads, (size_t)m.table.total * sizeof(float));
    double loss_sum = 0.0;
    for (int mb = 0; mb < nmicro; mb++) {
      // Step s consumes global samples [s*G, (s+1)*G) of the stream (design.md).
      int64_t first = step * o->global_batch + (int64_t)mb * B;
      for (int b = 0; b < B; b++)
        vt_synthetic_sample(o->seed, first + b, S, K, host_img + (size_t)b * 3 * S * S,
                            &host_labels[b]);
      be->to_device(m.a.img, host_img, img_count * sizeof(float));
      be->to_device(m.a.labels, host_labels, (size_t)B * sizeof(int32_t));
      loss_sum += vt_model_forward(&m, B, o->label_smoothing);
      vt_model_backward(&m, B, o->label_smoothing, 1.0f / (float)o->global_batch);
    }
    double loss = loss_sum / o->global_batch;
    double gnorm = vt_grad_norm(be, &m.table, m.grads);
    float lr = vt_lr_at(&o->optim, step);
    vt_optim_step(be, &m.table, m.params, m.grads, &opt, &o->optim, lr, gnorm);
    be->synchronize();
    const double t1 = now_s(), step_ms = 1e3 * (t1 - t0);
    const double img_s = o->global_batch / (t1 - t0);
    if (metrics) {
      fprintf(metrics,
              "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
              "\"img_per_s\": %.3f, \"step_ms\": %.3f}\n",
              (long long)(step + 1), loss, lr, gnorm, img_s, step_ms);
      fflush(metrics);
    }
    if ((step + 1) % o->log_interval == 0 || step == 0 || step + 1 == o->steps) {
      double eta = (t1 - t_start) / (double)(step + 1) * (double)(o->steps - step - 1);
      printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.1f img/s | %.0f ms/step"
             " | eta %dm%02ds\n",
             (long long)(step + 1), (long long)o->steps, loss, lr, gnorm, img_s, step_ms,
             (int)eta / 60, (int)eta % 60);
      fflush(stdout);
    }
  }
  if (metrics) fclose(metrics);
  free(host_img);
  free(host_labels);
  vt_adamw_state_free(&opt, be);
  vt_model_free(&m);
  return 0;
}
