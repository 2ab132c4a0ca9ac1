// cuda_ops_test.h: what tests/test_cuda_ops.c's parts share: the test case (one op at one shape
// and precision), the helpers that make inputs and compare the CUDA op's outputs with the CPU's
// (cuda_ops_util.c) and the runners, one per op (cuda_ops_block.c: the block's ops;
// cuda_ops_model.c: the rest), which the table in test_cuda_ops.c names.
#ifndef VT_CUDA_OPS_TEST_H
#define VT_CUDA_OPS_TEST_H
#include <stddef.h>
#include <stdint.h>

#include "vt_backend.h"
#include "vt_ops.h"

enum { FP32, BF16, NPREC };
static const char *const kPrecName[NPREC] = {"fp32", "bf16"};
static const vt_precision kPrec[NPREC] = {VT_PRECISION_FP32, VT_PRECISION_BF16};

typedef struct {
  const vt_backend *cpu, *gpu;
  int prec;
  const char *op;
  char shape[96];
  double tol;
  uint32_t stream;  // next random stream
  int checks, failures;
  void *host[64], *dev[64];  // this shape's allocations, freed after it
  int nhost, ndev;
} tc;

// timm's ViT's LayerNorm eps, that of every op test but layernorm_fwd's flagged rows.
#define LN_EPS 1e-6f

// ---- helpers (cuda_ops_util.c) ----
// Host and device buffers freed after the shape (release): uninitialised, random in [lo, hi)
// from the case's next stream, a copy, uploads of host data, and a device buffer of NaN (an
// output element the op does not write stays NaN and fails).
void *track_host(tc *t, size_t nbytes);
float *hnew(tc *t, int64_t n);
float *hrand(tc *t, int64_t n, float lo, float hi);
float *hcopy(tc *t, const float *src, int64_t n);
void *dnew_bytes(tc *t, const void *host, size_t nbytes);
float *dnew(tc *t, const float *host, int64_t n);
float *dpoison(tc *t, int64_t n);
void release(tc *t);
// One output's line: its error against the tolerance, whether the two runs gave the same bits
// (same), and the hash of the first run's bytes (a).
void report(tc *t, const char *what, double err, double tol, int same, const void *a,
            size_t nbytes);
// g[0] and g[1] hold two runs of the op on the device; ref the CPU's result: an fp32 output
// (check), or one that is a bf16 activation in bf16 precision (check_act).
void check(tc *t, const char *what, float *const g[2], const float *ref, int64_t n);
void check_act(tc *t, const char *what, float *const g[2], const float *ref, int64_t n);
// An op input that is a bf16 activation in bf16 precision: x as bf16 bits (a new buffer), else x.
float *act_in(tc *t, const float *x, int64_t n);

// ---- one runner per op: CPU once, CUDA twice from the same inputs; d[] holds the shape, its
// meaning the `dims` column of the table ----
// cuda_ops_block.c
void t_linear_fwd(tc *t, const int64_t *d);
void t_linear_act_fwd(tc *t, const int64_t *d);
void t_linear_residual_fwd(tc *t, const int64_t *d);
void t_linear_bwd(tc *t, const int64_t *d);
void t_linear_bwd_act(tc *t, const int64_t *d);
void t_linear_act_bwd(tc *t, const int64_t *d);
void t_layernorm_fwd(tc *t, const int64_t *d);
void t_layernorm_bwd(tc *t, const int64_t *d);
void t_layernorm_bwd_add(tc *t, const int64_t *d);
void t_add_layernorm_fwd(tc *t, const int64_t *d);
void t_act_fwd(tc *t, const int64_t *d);
void t_act_bwd(tc *t, const int64_t *d);
void t_attention_fwd(tc *t, const int64_t *d);
void t_attention_bwd(tc *t, const int64_t *d);
void t_latent_attention_fwd(tc *t, const int64_t *d);
void t_latent_attention_bwd(tc *t, const int64_t *d);
// cuda_ops_model.c
void t_to_act(tc *t, const int64_t *d);
void t_add(tc *t, const int64_t *d);
void t_drop_path(tc *t, const int64_t *d);
void t_dropout(tc *t, const int64_t *d);
void t_patchify_fwd(tc *t, const int64_t *d);
void t_patchify_bwd(tc *t, const int64_t *d);
void t_embed_fwd(tc *t, const int64_t *d);
void t_embed_bwd(tc *t, const int64_t *d);
void t_cls_pool_fwd(tc *t, const int64_t *d);
void t_cls_pool_bwd(tc *t, const int64_t *d);
void t_mean_pool_fwd(tc *t, const int64_t *d);
void t_mean_pool_bwd(tc *t, const int64_t *d);
void t_norm_mean_pool_fwd(tc *t, const int64_t *d);
void t_norm_mean_pool_bwd(tc *t, const int64_t *d);
void t_qk_norm_fwd(tc *t, const int64_t *d);
void t_qk_norm_bwd(tc *t, const int64_t *d);
void t_layer_scale_fwd(tc *t, const int64_t *d);
void t_layer_scale_bwd(tc *t, const int64_t *d);
void t_cross_entropy_fwd(tc *t, const int64_t *d);
void t_bce_fwd(tc *t, const int64_t *d);
void t_cross_entropy_bwd(tc *t, const int64_t *d);
void t_adamw(tc *t, const int64_t *d);
void t_lamb_moments(tc *t, const int64_t *d);
void t_lamb_apply(tc *t, const int64_t *d);
void t_sgd(tc *t, const int64_t *d);
void t_sumsq(tc *t, const int64_t *d);
void t_ema(tc *t, const int64_t *d);
void t_scale(tc *t, const int64_t *d);

#endif
