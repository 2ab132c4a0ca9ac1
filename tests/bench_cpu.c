// bench_cpu.c: time full fp32 training steps of ViT-Ti/16 (224 px) on the CPU backend, for the
// `bench` label (not pass/fail; tests/bench_cpu.sh compares it with PyTorch in the same run).
// Usage: bench_cpu [batch=64] [threads=cores] [warmup=2] [timed=5]. VT_BENCH_OPS=1 also prints
// time per op and shape, measured through a timing copy of the backend table. VT_BENCH_PROBE=1
// times a linear probe instead (--trainable '^head\.': the backward skips the frozen blocks and
// embeddings), its lines marked "probe".
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  // clock_gettime under -std=c11 when built outside CMake
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "optim.h"
#include "synthetic.h"
#include "vt_backend.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- Per-op timing: a copy of the CPU table whose entries time the real ones. Ops run
// synchronously on the CPU, so wall time around each call is the op's time.
typedef struct {
  char key[48];
  double s, flops;
  long calls;
} slot;
static slot g_slots[64];
static int g_nslots;
static vt_backend g_real;

// Linear ops are keyed by shape (M rows, I -> O) so patch embed and fc2 stay apart.
static void record(const char *op, int64_t M, int64_t I, int64_t O, double t0, double flops) {
  char key[48];
  if (M)
    snprintf(key, sizeof key, "%s %lldx%lld->%lld", op, (long long)M, (long long)I, (long long)O);
  else
    snprintf(key, sizeof key, "%s", op);
  int i = 0;
  while (i < g_nslots && strcmp(g_slots[i].key, key) != 0) i++;
  if (i == g_nslots) {
    if (g_nslots == 64) return;
    snprintf(g_slots[g_nslots++].key, sizeof g_slots[0].key, "%s", key);
  }
  g_slots[i].s += now_s() - t0;
  g_slots[i].flops += flops;
  g_slots[i].calls++;
}

#define TIMED(op, M, I, O, flops, call) \
  do {                                  \
    double t0_ = now_s();               \
    call;                               \
    record(op, M, I, O, t0_, flops);    \
  } while (0)

static void t_linear_fwd(float *o, const float *x, const float *w, const float *b, int64_t M,
                         int64_t I, int64_t O) {
  TIMED("linear_fwd", M, I, O, 2.0 * M * I * O, g_real.linear_fwd(o, x, w, b, M, I, O));
}
static void t_linear_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, int64_t M, int64_t I, int64_t O) {
  TIMED("linear_bwd", M, I, O, (dx ? 4.0 : 2.0) * M * I * O,
        g_real.linear_bwd(dx, dw, db, dy, x, w, M, I, O));
}
static void t_linear_bwd_act(float *dx, float *dw, float *db, const float *dy, const float *x,
                             const float *w, int64_t M, int64_t I, int64_t O) {
  TIMED("linear_bwd", M, I, O, 4.0 * M * I * O,
        g_real.linear_bwd_act(dx, dw, db, dy, x, w, M, I, O));
}
static void t_linear_residual_fwd(float *o, const float *x, const float *w, const float *b,
                                  const float *res, int64_t M, int64_t I, int64_t O) {
  TIMED("linear_fwd", M, I, O, 2.0 * M * I * O,
        g_real.linear_residual_fwd(o, x, w, b, res, M, I, O));
}
static void t_linear_act_fwd(float *o, const float *x, const float *w, const float *b, int64_t M,
                             int64_t I, int64_t O) {
  TIMED("linear_fwd", M, I, O, 2.0 * M * I * O, g_real.linear_act_fwd(o, x, w, b, M, I, O));
}
static void t_linear_act_bwd(float *dx, float *dw, const float *dy, const float *x,
                             const float *w, int64_t M, int64_t I, int64_t O) {
  TIMED("linear_bwd", M, I, O, (dx ? 4.0 : 2.0) * M * I * O,
        g_real.linear_act_bwd(dx, dw, dy, x, w, M, I, O));
}
static void t_ln_fwd(float *o, float *mu, float *rs, const float *x, const float *w,
                     const float *b, int64_t M, int64_t C, float eps, int act) {
  TIMED("layernorm_fwd", 0, 0, 0, 0, g_real.layernorm_fwd(o, mu, rs, x, w, b, M, C, eps, act));
}
static void t_ln_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *w, const float *mu, const float *rs, int64_t M, int64_t C) {
  TIMED("layernorm_bwd", 0, 0, 0, 0, g_real.layernorm_bwd(dx, dw, db, dy, x, w, mu, rs, M, C));
}
static void t_add_ln_fwd(float *sum, float *o, float *mu, float *rs, const float *a,
                         const float *b, const float *w, const float *bias, int64_t M,
                         int64_t C, float eps) {
  TIMED("add_layernorm_fwd", 0, 0, 0, 0,
        g_real.add_layernorm_fwd(sum, o, mu, rs, a, b, w, bias, M, C, eps));
}
static void t_ln_bwd_add(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const float *mu, const float *rs, int64_t M, int64_t C) {
  TIMED("layernorm_bwd_add", 0, 0, 0, 0,
        g_real.layernorm_bwd_add(dx, dw, db, dy, x, w, mu, rs, M, C));
}
static void t_act_fwd(float *o, const float *x, int64_t n, int kind) {
  TIMED("act_fwd", 0, 0, 0, 0, g_real.act_fwd(o, x, n, kind));
}
static void t_act_bwd(float *dx, float *db, const float *x, const float *dy, int64_t M,
                      int64_t F, int kind) {
  TIMED("act_bwd", 0, 0, 0, 0, g_real.act_bwd(dx, db, x, dy, M, F, kind));
}
static void t_att_fwd(float *o, float *lse, const float *qkv, int64_t B, int64_t N, int64_t H,
                      int64_t D, const vt_dropout_mask *drop) {
  TIMED("attention_fwd", 0, 0, 0, 4.0 * B * H * N * N * D,
        g_real.attention_fwd(o, lse, qkv, B, N, H, D, drop));
}
static void t_att_bwd(float *dqkv, float *db, const float *dy, const float *qkv, const float *o,
                      const float *lse, int64_t B, int64_t N, int64_t H, int64_t D,
                      const vt_dropout_mask *drop) {
  TIMED("attention_bwd", 0, 0, 0, 8.0 * B * H * N * N * D,
        g_real.attention_bwd(dqkv, db, dy, qkv, o, lse, B, N, H, D, drop));
}
static void t_add(float *o, const float *a, const float *b, int64_t n) {
  TIMED("add", 0, 0, 0, 0, g_real.add(o, a, b, n));
}
static void t_adamw(float *p, const float *g, float *m, float *v, const uint8_t *d, int64_t n,
                    float lr, float b1, float b2, float eps, float wd, int64_t t, float gs) {
  TIMED("adamw", 0, 0, 0, 0, g_real.adamw(p, g, m, v, d, n, lr, b1, b2, eps, wd, t, gs));
}
static void t_sumsq(double *out, const float *x, int64_t n) {
  TIMED("sumsq", 0, 0, 0, 0, g_real.sumsq(out, x, n));
}

static const vt_backend *timing_backend(const vt_backend *real) {
  static vt_backend t;
  g_real = *real;
  t = *real;
  t.linear_fwd = t_linear_fwd, t.linear_bwd = t_linear_bwd;
  t.linear_act_fwd = t_linear_act_fwd, t.linear_act_bwd = t_linear_act_bwd;
  t.linear_bwd_act = t_linear_bwd_act, t.linear_residual_fwd = t_linear_residual_fwd;
  t.layernorm_fwd = t_ln_fwd, t.layernorm_bwd = t_ln_bwd;
  t.act_fwd = t_act_fwd, t.act_bwd = t_act_bwd;
  t.attention_fwd = t_att_fwd, t.attention_bwd = t_att_bwd;
  t.add = t_add, t.adamw = t_adamw, t.sumsq = t_sumsq;
  t.add_layernorm_fwd = t_add_ln_fwd, t.layernorm_bwd_add = t_ln_bwd_add;
  return &t;
}

// ---- The step loop.
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(const double *v, int n) {
  double *s = malloc((size_t)n * sizeof *s);
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

int main(int argc, char **argv) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int B = argc > 1 ? atoi(argv[1]) : 64;
  const int threads = argc > 2 ? atoi(argv[2]) : (int)cores;
  const int warmup = argc > 3 ? atoi(argv[3]) : 2, timed = argc > 4 ? atoi(argv[4]) : 5;
  if (B < 1 || threads < 1 || warmup < 0 || timed < 1) {
    fprintf(stderr, "usage: %s [batch>=1] [threads>=1] [warmup>=0] [timed>=1]\n", argv[0]);
    return 2;
  }
  const int per_op = getenv("VT_BENCH_OPS") && atoi(getenv("VT_BENCH_OPS"));

  vt_vit_config cfg;
  char err[256];
  if (vt_config_preset("vit-ti16", &cfg, err, sizeof err) != VT_OK) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  if (per_op) be = timing_backend(be);
  vt_backend_set_threads(threads);
  // A large total_steps and no warmup: the schedule does not matter for speed. Clipping on,
  // as in training, so its pass is part of the step (the PyTorch side clips too).
  vt_optim_config oc = {.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = 0,
                        .total_steps = 1000000, .beta1 = 0.9f, .beta2 = 0.999f,
                        .eps = 1e-8f, .weight_decay = 0.05f, .clip_grad = 1.0f};
  const int probe = getenv("VT_BENCH_PROBE") && atoi(getenv("VT_BENCH_PROBE"));
  const char *side = probe ? "probe" : "vit3d";
  if (probe) snprintf(oc.trainable, sizeof oc.trainable, "^head\\.");
  vt_model m;
  vt_model_init(&m, &cfg, vt_shard_whole(), NULL, B, 1, 0, 0, vt_freeze_leading_layers(&oc, &cfg),
                be, 1234);
  vt_optimizer opt;
  vt_optimizer_init(&opt, &oc, be, &m.table, NULL, NULL, NULL, 0, m.grad_first);

  const int S = cfg.img_size, K = cfg.num_classes;
  const size_t img_count = (size_t)B * 3 * S * S;
  float *img = malloc(img_count * sizeof(float));
  int32_t *labels = malloc((size_t)B * sizeof(int32_t));
  if (!img || !labels) return 1;
  for (int b = 0; b < B; b++) vt_synthetic_sample(7, b, S, K, img + (size_t)b * 3 * S * S, &labels[b]);
  be->to_device(m.slots[0].img, img, img_count * sizeof(float));
  be->to_device(m.slots[0].labels, labels, (size_t)B * sizeof(int32_t));

  double *step = calloc((size_t)timed, sizeof(double)), *fwd = calloc((size_t)timed, sizeof(double));
  double *bwd = calloc((size_t)timed, sizeof(double)), *upd = calloc((size_t)timed, sizeof(double));
  double loss = 0.0;
  for (int it = 0; it < warmup + timed; it++) {
    if (it == warmup) memset(g_slots, 0, sizeof g_slots), g_nslots = 0;  // timed steps only
    double t0 = now_s();
    vt_model_forward(&m, 0, 0, B, 0.0f, -1);
    loss = vt_model_loss_sum(&m, 0, B) / B;
    double t1 = now_s();
    vt_model_backward(&m, 0, 0, -1, B, 0.0f, 1.0f / (float)B);
    double t2 = now_s();
    vt_optimizer_step(&opt, m.params, m.grads, oc.lr);
    // Zeroing belongs to the optimizer phase (optimizer.zero_grad() in PyTorch); it is done
    // after the update so the first step also starts from zeroed gradients.
    be->zero(m.grads, vt_model_grad_nbytes(&m));
    be->synchronize();
    double t3 = now_s();
    if (it >= warmup) {
      int i = it - warmup;
      fwd[i] = 1e3 * (t1 - t0), bwd[i] = 1e3 * (t2 - t1), upd[i] = 1e3 * (t3 - t2);
      step[i] = 1e3 * (t3 - t0);
    }
  }
  double mn = step[0];
  for (int i = 1; i < timed; i++) mn = step[i] < mn ? step[i] : mn;
  printf("%s config model=vit-ti16 batch=%d threads=%d warmup=%d timed=%d build=%s loss=%.4f\n",
         side, B, threads, warmup, timed, vt_backend_build_info(), loss);
  printf("%s step_ms median=%.1f min=%.1f fwd=%.1f bwd=%.1f opt=%.1f img_per_s=%.1f\n", side,
         median(step, timed), mn, median(fwd, timed), median(bwd, timed), median(upd, timed),
         1e3 * B / median(step, timed));
  if (per_op) {
    double total = 0.0;
    for (int i = 0; i < g_nslots; i++) total += g_slots[i].s;
    printf("vit3d ops: ms per step, share of the timed ops, GFLOP/s where counted\n");
    for (int i = 0; i < g_nslots; i++) {
      const slot *s = &g_slots[i];
      printf("vit3d op %-30s ms=%8.2f share=%5.1f%% calls=%ld", s->key, 1e3 * s->s / timed,
             100.0 * s->s / total, s->calls / timed);
      if (s->flops > 0) printf(" gflops=%.1f", s->flops / s->s * 1e-9);
      printf("\n");
    }
  }
  free(step), free(fwd), free(bwd), free(upd), free(img), free(labels);
  vt_optimizer_free(&opt);
  vt_model_free(&m);
  return 0;
}
