// cpu_backend.c: the CPU backend's memory functions, its scratch and its table.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../vt_backend.h"
#include "../vt_error.h"
#include "cpu.h"

static void *cpu_alloc(size_t nbytes) {
  size_t n = (nbytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, n ? n : 64);
  if (p) memset(p, 0, n);
  return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t nbytes) { memmove(dst, src, nbytes); }
static void cpu_zero(void *p, size_t nbytes) { memset(p, 0, nbytes); }
static void cpu_sync(void) {}
// Host memory is the device's: page-aligned (as the loader's buffers always were), uploads are
// plain copies, done when they return.
static void *cpu_host_alloc(size_t nbytes) {
  void *p = NULL;
  return posix_memalign(&p, 4096, nbytes ? nbytes : 1) == 0 ? p : NULL;
}
static void cpu_nothing(void) {}

static vt_precision g_precision = VT_PRECISION_FP32;
void vt_cpu_set_precision(vt_precision precision) { g_precision = precision; }
int vt_cpu_bf16(void) { return g_precision == VT_PRECISION_BF16; }
static vt_precision cpu_precision(void) { return g_precision; }

void vt_cpu_widen_bf16(float *dst, const void *src, int64_t n) {
  const uint16_t *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) dst[i] = vt_bf16_widen(s[i]);
}

void vt_cpu_round_bf16(float *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) dst[i] = vt_bf16_round(src[i]);
}

static float *g_scratch = NULL;
static size_t g_scratch_count = 0;

float *vt_cpu_scratch(size_t count) {
  if (count > g_scratch_count) {
    free(g_scratch);
    g_scratch = cpu_alloc(count * sizeof(float));
    VT_CHECK(g_scratch != NULL, "out of host memory for %zu bytes of scratch", count * 4);
    g_scratch_count = count;
  }
  return g_scratch;
}

static size_t cpu_scratch_bytes(void) { return g_scratch_count * sizeof(float); }

// Intervals: the ops have run when they return, so the host clock times them.
static double g_interval_t0, g_interval_ms[VT_INTERVAL_KINDS], g_interval_n[VT_INTERVAL_KINDS];
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}
static void cpu_interval_begin(void) { g_interval_t0 = now_ms(); }
static void cpu_interval_end(int kind) {
  g_interval_ms[kind] += now_ms() - g_interval_t0;
  g_interval_n[kind] += 1;
}
static int cpu_interval_take(double *ms, double *count, double *spans, int max_spans) {
  (void)spans, (void)max_spans;  // (no device timeline: the host's ranges are the work's)
  for (int k = 0; k < VT_INTERVAL_KINDS; k++) {
    ms[k] += g_interval_ms[k], count[k] += g_interval_n[k];
    g_interval_ms[k] = g_interval_n[k] = 0;
  }
  return 0;
}

const vt_backend vt_cpu_backend = {
    .name = "cpu",
    .device = VT_DEVICE_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_sync,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .upload = cpu_copy,
    .upload_ahead = cpu_copy,
    .inputs_read = cpu_nothing,
    .upload_wait = cpu_nothing,
    .set_precision = vt_cpu_set_precision,
    .precision = cpu_precision,
    .scratch_bytes = cpu_scratch_bytes,
    .interval_begin = cpu_interval_begin,
    .interval_end = cpu_interval_end,
    .interval_take = cpu_interval_take,
    .linear_fwd = vt_cpu_linear_fwd,
    .linear_act_fwd = vt_cpu_linear_act_fwd,
    .linear_act_bwd = vt_cpu_linear_act_bwd,
    .linear_residual_fwd = vt_cpu_linear_residual_fwd,
    .linear_bwd = vt_cpu_linear_bwd,
    .linear_bwd_act = vt_cpu_linear_bwd_act,
    .layernorm_fwd = vt_cpu_layernorm_fwd,
    .layernorm_bwd = vt_cpu_layernorm_bwd,
    .add_layernorm_fwd = vt_cpu_add_layernorm_fwd,
    .layernorm_bwd_add = vt_cpu_layernorm_bwd_add,
    .act_fwd = vt_cpu_act_fwd,
    .act_bwd = vt_cpu_act_bwd,
    .attention_fwd = vt_cpu_attention_fwd,
    .attention_bwd = vt_cpu_attention_bwd,
    .latent_attention_fwd = vt_cpu_latent_attention_fwd,
    .latent_attention_bwd = vt_cpu_latent_attention_bwd,
    .to_act = vt_cpu_to_act,
    .qk_norm_fwd = vt_cpu_qk_norm_fwd,
    .qk_norm_bwd = vt_cpu_qk_norm_bwd,
    .add = vt_cpu_add,
    .drop_path = vt_cpu_drop_path,
    .dropout = vt_cpu_dropout,
    .patchify_fwd = vt_cpu_patchify_fwd,
    .patchify_bwd = vt_cpu_patchify_bwd,
    .embed_fwd = vt_cpu_embed_fwd,
    .embed_bwd = vt_cpu_embed_bwd,
    .cls_pool_fwd = vt_cpu_cls_pool_fwd,
    .cls_pool_bwd = vt_cpu_cls_pool_bwd,
    .mean_pool_fwd = vt_cpu_mean_pool_fwd,
    .mean_pool_bwd = vt_cpu_mean_pool_bwd,
    .norm_mean_pool_fwd = vt_cpu_norm_mean_pool_fwd,
    .norm_mean_pool_bwd = vt_cpu_norm_mean_pool_bwd,
    .layer_scale_fwd = vt_cpu_layer_scale_fwd,
    .layer_scale_bwd = vt_cpu_layer_scale_bwd,
    .cross_entropy_fwd = vt_cpu_cross_entropy_fwd,
    .cross_entropy_bwd = vt_cpu_cross_entropy_bwd,
    .bce_fwd = vt_cpu_bce_fwd,
    .adamw = vt_cpu_adamw,
    .lamb_moments = vt_cpu_lamb_moments,
    .lamb_apply = vt_cpu_lamb_apply,
    .sgd = vt_cpu_sgd,
    .ema = vt_cpu_ema,
    .sumsq = vt_cpu_sumsq,
    .scale = vt_cpu_scale,
};
