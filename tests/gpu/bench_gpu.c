// bench_gpu.c: time full training steps (forward, backward, clipping, AdamW) of a ViT preset on
// the CUDA backend with one device-resident batch, so the number is the GPU's and not the host's
// synthetic-image generator's (which `vit3d train --data synthetic` times inside its step).
// Prints images/s and MFU by the trainer's own FLOP count (vt_config_train_flops), for
// tests/gpu/run.sh to compare with timm + PyTorch measured in the same run. Not pass/fail.
// Usage: bench_gpu [--model vit-b16] [--batch 128] [--warmup 3] [--timed 10]
//                  [--peak-tflops 989] [--precision bf16|fp32] [--cpu] [--ops]
// --precision: the GEMM precision (vt_backend.h), bf16 by default on CUDA and fp32 with --cpu.
// --cpu runs on the CPU backend (to check the program without a GPU); --ops adds time per op,
// measured with a synchronize around each op (which slows the step). Uses only the public APIs
// of src/ and vit/; must not depend on CUDA headers or MPI.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  // clock_gettime under -std=c11
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "optim.h"
#include "synthetic.h"
#include "vt_backend.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- Per-op timing (--ops): a copy of the table whose entries synchronize, call the real op,
// synchronize again and add the wall time to the op's slot, with the model FLOPs of the Linears
// and the attention (its two products forward, four backward: what MFU counts), and for the
// memory-bound ops the bytes they must move at the least (each input read once, each output
// written once, at the activations' size: bf16 ones 2 bytes in bf16 precision), so the report
// gives TFLOP/s and GB/s to set against the chip's. The forward Linears have a slot per form: a
// bf16 output (qkv, fc1), the residual add (proj, fc2), plain (the patch embedding, the head).
typedef struct {
  const char *name;
  double s, flop, bytes;
  long calls;
} slot;
enum { S_LIN_F, S_LIN_ACT_F, S_LIN_RES_F, S_LIN_B, S_LN_F, S_LN_B, S_ADD_LN_F, S_LN_B_ADD,
       S_GELU_F, S_GELU_B, S_ATT_F, S_ATT_B, S_ADD, S_ADAMW, S_SUMSQ, NSLOTS };
static slot g_slots[NSLOTS] = {
    {"linear_fwd", 0, 0, 0, 0},        {"linear_act_fwd", 0, 0, 0, 0},
    {"linear_res_fwd", 0, 0, 0, 0},    {"linear_bwd", 0, 0, 0, 0},
    {"layernorm_fwd", 0, 0, 0, 0},     {"layernorm_bwd", 0, 0, 0, 0},
    {"add_layernorm_fwd", 0, 0, 0, 0}, {"layernorm_bwd_add", 0, 0, 0, 0},
    {"act_fwd", 0, 0, 0, 0},           {"act_bwd", 0, 0, 0, 0},
    {"attention_fwd", 0, 0, 0, 0},     {"attention_bwd", 0, 0, 0, 0},
    {"add", 0, 0, 0, 0},               {"adamw", 0, 0, 0, 0},
    {"sumsq", 0, 0, 0, 0}};
static vt_backend g_real;

#define TIMED_IO(k, fl, by, call)  \
  do {                             \
    g_real.synchronize();          \
    const double t0_ = now_s();    \
    call;                          \
    g_real.synchronize();          \
    g_slots[k].s += now_s() - t0_; \
    g_slots[k].flop += (fl);       \
    g_slots[k].bytes += (by);      \
    g_slots[k].calls++;            \
  } while (0)
#define TIMED_FLOP(k, fl, call) TIMED_IO(k, fl, 0.0, call)
#define TIMED_BYTES(k, by, call) TIMED_IO(k, 0.0, by, call)

// Bytes of an element of a bf16 activation (vt_ops.h): 2 in bf16 precision, else 4.
static double act_bytes(void) { return g_real.precision() == VT_PRECISION_BF16 ? 2.0 : 4.0; }

static double gemm_flop(int64_t M, int64_t I, int64_t O) { return 2.0 * M * I * O; }

static void t_lin_f(float *o, const float *x, const float *w, const float *b, int64_t M,
                    int64_t I, int64_t O) {
  TIMED_FLOP(S_LIN_F, gemm_flop(M, I, O), g_real.linear_fwd(o, x, w, b, M, I, O));
}
static void t_lin_res_f(float *o, const float *x, const float *w, const float *b,
                        const float *res, int64_t M, int64_t I, int64_t O) {
  TIMED_FLOP(S_LIN_RES_F, gemm_flop(M, I, O),
             g_real.linear_residual_fwd(o, x, w, b, res, M, I, O));
}
// The backward's GEMMs: dinp's and dweight's, each where asked for.
static double bwd_flop(const float *dx, const float *dw, int64_t M, int64_t I, int64_t O) {
  return (dx ? gemm_flop(M, I, O) : 0.0) + (dw ? gemm_flop(M, I, O) : 0.0);
}
static void t_lin_b(float *dx, float *dw, float *db, const float *dy, const float *x,
                    const float *w, int64_t M, int64_t I, int64_t O) {
  TIMED_FLOP(S_LIN_B, bwd_flop(dx, dw, M, I, O),
             g_real.linear_bwd(dx, dw, db, dy, x, w, M, I, O));
}
static void t_lin_b_act(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *w, int64_t M, int64_t I, int64_t O) {
  TIMED_FLOP(S_LIN_B, bwd_flop(dx, dw, M, I, O),
             g_real.linear_bwd_act(dx, dw, db, dy, x, w, M, I, O));
}
static void t_lin_act_f(float *o, const float *x, const float *w, const float *b, int64_t M,
                        int64_t I, int64_t O) {
  TIMED_FLOP(S_LIN_ACT_F, gemm_flop(M, I, O), g_real.linear_act_fwd(o, x, w, b, M, I, O));
}
static void t_lin_act_b(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        int64_t M, int64_t I, int64_t O) {
  TIMED_FLOP(S_LIN_B, bwd_flop(dx, dw, M, I, O),
             g_real.linear_act_bwd(dx, dw, dy, x, w, M, I, O));
}
// LayerNorm: the fp32 rows in, out (a bf16 activation with act), mean and rstd out; backward:
// dout and the input in, the input gradient out (and in, with _add).
static void t_ln_f(float *o, float *mu, float *rs, const float *x, const float *w,
                   const float *b, int64_t M, int64_t C, float eps, int act) {
  TIMED_BYTES(S_LN_F, (double)M * C * (4.0 + (act ? act_bytes() : 4.0)) + 8.0 * M,
              g_real.layernorm_fwd(o, mu, rs, x, w, b, M, C, eps, act));
}
static void t_ln_b(float *dx, float *dw, float *db, const float *dy, const float *x,
                   const float *w, const float *mu, const float *rs, int64_t M, int64_t C) {
  TIMED_BYTES(S_LN_B, 12.0 * M * C, g_real.layernorm_bwd(dx, dw, db, dy, x, w, mu, rs, M, C));
}
static void t_add_ln_f(float *sum, float *o, float *mu, float *rs, const float *a,
                       const float *b, const float *w, const float *bias, int64_t M, int64_t C,
                       float eps) {
  TIMED_BYTES(S_ADD_LN_F, (double)M * C * (12.0 + act_bytes()) + 8.0 * M,
              g_real.add_layernorm_fwd(sum, o, mu, rs, a, b, w, bias, M, C, eps));
}
static void t_ln_b_add(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, const float *mu, const float *rs, int64_t M, int64_t C) {
  TIMED_BYTES(S_LN_B_ADD, 16.0 * M * C,
              g_real.layernorm_bwd_add(dx, dw, db, dy, x, w, mu, rs, M, C));
}
// The activation: its input and output bf16 activations; backward: input and dout in, dinp out.
static void t_gelu_f(float *o, const float *x, int64_t n, int kind) {
  TIMED_BYTES(S_GELU_F, 2.0 * act_bytes() * n, g_real.act_fwd(o, x, n, kind));
}
static void t_gelu_b(float *dx, float *db, const float *x, const float *dy, int64_t M,
                     int64_t F, int kind) {
  TIMED_BYTES(S_GELU_B, 3.0 * act_bytes() * M * F, g_real.act_bwd(dx, db, x, dy, M, F, kind));
}
// Attention: q k^T and p v forward, and backward the two again with their two gradients.
static void t_att_f(float *o, float *lse, const float *qkv, int64_t B, int64_t N, int64_t H,
                    int64_t D, const vt_dropout_mask *drop) {
  TIMED_FLOP(S_ATT_F, 4.0 * B * H * N * N * D,
             g_real.attention_fwd(o, lse, qkv, B, N, H, D, drop));
}
static void t_att_b(float *dqkv, float *db, const float *dy, const float *qkv, const float *o,
                    const float *lse, int64_t B, int64_t N, int64_t H, int64_t D,
                    const vt_dropout_mask *drop) {
  TIMED_FLOP(S_ATT_B, 8.0 * B * H * N * N * D,
             g_real.attention_bwd(dqkv, db, dy, qkv, o, lse, B, N, H, D, drop));
}
static void t_add(float *o, const float *a, const float *b, int64_t n) {
  TIMED_BYTES(S_ADD, 12.0 * n, g_real.add(o, a, b, n));
}
// AdamW: param, grad, m, v in (and the decay mask's byte), param, m, v out.
static void t_adamw(float *p, const float *g, float *m, float *v, const uint8_t *d, int64_t n,
                    float lr, float b1, float b2, float eps, float wd, int64_t t, float gs) {
  TIMED_BYTES(S_ADAMW, (28.0 + (d ? 1.0 : 0.0)) * n,
              g_real.adamw(p, g, m, v, d, n, lr, b1, b2, eps, wd, t, gs));
}
static void t_sumsq(double *out, const float *x, int64_t n) {
  TIMED_BYTES(S_SUMSQ, 4.0 * n, g_real.sumsq(out, x, n));
}

static const vt_backend *timing_backend(const vt_backend *real) {
  static vt_backend t;
  g_real = *real;
  t = *real;
  t.linear_fwd = t_lin_f, t.linear_bwd = t_lin_b, t.layernorm_fwd = t_ln_f;
  t.linear_act_fwd = t_lin_act_f, t.linear_act_bwd = t_lin_act_b, t.linear_bwd_act = t_lin_b_act;
  t.linear_residual_fwd = t_lin_res_f;
  t.layernorm_bwd = t_ln_b, t.act_fwd = t_gelu_f, t.act_bwd = t_gelu_b;
  t.attention_fwd = t_att_f, t.attention_bwd = t_att_b, t.add = t_add, t.adamw = t_adamw;
  t.sumsq = t_sumsq, t.add_layernorm_fwd = t_add_ln_f, t.layernorm_bwd_add = t_ln_b_add;
  return &t;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *model = "vit-b16";
  const char *precision = NULL;
  int B = 128, warmup = 3, timed = 10, on_cpu = 0, per_op = 0;
  double peak = 989.0;  // H100/H200 SXM dense bf16 TFLOP/s, the trainer's default on CUDA
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--cpu")) on_cpu = 1;
    else if (!strcmp(a, "--ops")) per_op = 1;
    else if (v && !strcmp(a, "--model")) model = v, i++;
    else if (v && !strcmp(a, "--batch")) B = atoi(v), i++;
    else if (v && !strcmp(a, "--warmup")) warmup = atoi(v), i++;
    else if (v && !strcmp(a, "--timed")) timed = atoi(v), i++;
    else if (v && !strcmp(a, "--peak-tflops")) peak = atof(v), i++;
    else if (v && !strcmp(a, "--precision")) precision = v, i++;
    else {
      fprintf(stderr, "usage: %s [--model NAME] [--batch B] [--warmup N] [--timed N] "
                      "[--peak-tflops TF] [--precision bf16|fp32] [--cpu] [--ops]\n", argv[0]);
      return 2;
    }
  }
  if (!precision) precision = on_cpu ? "fp32" : "bf16";
  if (strcmp(precision, "bf16") && strcmp(precision, "fp32")) {
    fprintf(stderr, "bench_gpu: --precision %s: bf16 or fp32\n", precision);
    return 2;
  }
  if (B < 1 || warmup < 0 || timed < 1 || timed > 1000) {
    fprintf(stderr, "bench_gpu: batch >= 1, warmup >= 0, 1 <= timed <= 1000\n");
    return 2;
  }
  vt_vit_config cfg;
  char err[256], desc[320];
  unsigned char gpu_id[16];
  if (vt_config_preset(model, &cfg, err, sizeof err) != VT_OK) {
    fprintf(stderr, "bench_gpu: %s\n", err);
    return 2;
  }
  const vt_device dev = on_cpu ? VT_DEVICE_CPU : VT_DEVICE_CUDA;
  const char *why = NULL;
  if (vt_backend_select(dev, 0, desc, sizeof desc, gpu_id) != 0) {
    printf("SKIP: %s\n", desc);
    return 77;
  }
  const vt_backend *be = vt_backend_get(dev, &why);
  if (!be) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  be->set_precision(strcmp(precision, "bf16") ? VT_PRECISION_FP32 : VT_PRECISION_BF16);
  if (per_op) be = timing_backend(be);
  vt_model m;
  vt_model_init(&m, &cfg, vt_shard_whole(), NULL, B, 1, 0, 0, 0, be, 1234);
  // The trainer's defaults that matter for the work done: clipping on (its norm pass is part of
  // the step, as clip_grad_norm_ on the PyTorch side), weight decay on.
  const vt_optim_config oc = {.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = 0,
                              .total_steps = 1000000, .beta1 = 0.9f, .beta2 = 0.999f,
                              .eps = 1e-8f, .weight_decay = 0.05f, .clip_grad = 1.0f};
  vt_optimizer opt;
  vt_optimizer_init(&opt, &oc, be, &m.table, NULL, NULL, NULL, 0, m.grad_first);
  const int S = cfg.img_size, K = cfg.num_classes;
  const size_t img_count = (size_t)B * 3 * S * S;
  float *img = malloc(img_count * sizeof(float));
  int32_t *labels = malloc((size_t)B * sizeof(int32_t));
  double *step = calloc((size_t)timed, sizeof(double));
  if (!img || !labels || !step) return 1;
  for (int b = 0; b < B; b++)
    vt_synthetic_sample(7, b, S, K, img + (size_t)b * 3 * S * S, &labels[b]);
  be->to_device(m.slots[0].img, img, img_count * sizeof(float));
  be->to_device(m.slots[0].labels, labels, (size_t)B * sizeof(int32_t));
  be->synchronize();

  double loss = 0.0;
  for (int it = 0; it < warmup + timed; it++) {
    if (it == warmup)
      for (int k = 0; k < NSLOTS; k++)
        g_slots[k].s = g_slots[k].flop = g_slots[k].bytes = 0, g_slots[k].calls = 0;
    const double t0 = now_s();
    be->zero(m.grads, vt_model_grad_nbytes(&m));
    vt_model_hold_weights(&m);  // as the trainer: the weights' bf16 copy once per step
    vt_model_forward(&m, 0, 0, B, 0.1f, -1);
    vt_model_backward(&m, 0, 0, -1, B, 0.1f, 1.0f / (float)B);
    vt_model_release_weights(&m);
    vt_optimizer_step(&opt, m.params, m.grads, oc.lr);  // syncs once (the norm)
    loss = vt_model_loss_sum(&m, 0, B) / B;             // and the losses come to the host
    be->synchronize();
    if (it >= warmup) step[it - warmup] = now_s() - t0;
  }
  qsort(step, (size_t)timed, sizeof *step, cmp_double);
  // (the two middle ones' mean for an even count, as Python's statistics.median: the peer's)
  const double med = timed % 2 ? step[timed / 2] : 0.5 * (step[timed / 2 - 1] + step[timed / 2]);
  const double img_s = B / med;
  const double tflops = vt_config_train_flops(&cfg, 0) * img_s / 1e12;
  printf("vit3d-bench config model=%s batch=%d warmup=%d timed=%d device=%s build=%s "
         "precision=%s loss=%.4f\n",
         model, B, warmup, timed, desc, vt_backend_build_info(), precision, loss);
  printf("vit3d-bench step_ms median=%.2f min=%.2f max=%.2f img_per_s=%.1f model_tflops=%.2f "
         "mfu=%.4f peak_tflops=%g gflop_per_img=%.2f\n",
         1e3 * med, 1e3 * step[0], 1e3 * step[timed - 1], img_s, tflops, tflops / peak, peak,
         vt_config_train_flops(&cfg, 0) / 1e9);
  if (per_op) {
    double total = 0.0;
    for (int k = 0; k < NSLOTS; k++) total += g_slots[k].s;
    for (int k = 0; k < NSLOTS; k++) {
      if (!g_slots[k].calls) continue;
      printf("vit3d-bench op %-14s ms_per_step=%8.2f share=%5.1f%% calls_per_step=%ld",
             g_slots[k].name, 1e3 * g_slots[k].s / timed, 100 * g_slots[k].s / total,
             g_slots[k].calls / timed);
      if (g_slots[k].flop > 0) printf(" tflops=%.3g", g_slots[k].flop / g_slots[k].s / 1e12);
      if (g_slots[k].bytes > 0) printf(" gbps=%.0f", g_slots[k].bytes / g_slots[k].s / 1e9);
      printf("\n");
    }
  }
  free(img), free(labels), free(step);
  vt_optimizer_free(&opt);
  vt_model_free(&m);
  return 0;
}
