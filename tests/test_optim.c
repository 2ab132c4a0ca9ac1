// test_optim.c: the optimizer step on a mesh against the same step on one rank (label mpi, 8
// ranks under mpirun). For AdamW, LAMB, SGD with Nesterov momentum and LARS with plain and
// Nesterov momentum, with clipping, weight decay and layer-wise lr decay,
// each layout's ranks take the pieces of one model's weights and gradients that the parameter
// table gives them (TP shards, pipeline stages, the whole gradient on DP rank 0 and zeros on the
// others, which the DP reduction must add), take three steps, and must end where one rank with
// the whole table ends: every tensor within 1e-5 of its own update, the same gradient norms.
// LAMB's and LARS's per-tensor norms are the point: a TP-split tensor, a tensor cut by ZeRO-1's
// shards and a replicated one must each get its whole norm. AdamW and LAMB again with a frozen prefix (the
// embeddings and block 0) and the weights' EMA: the optimizer keeps no state for the prefix
// (one rank's memory shrinks by exactly its moments, EMA and mask), ZeRO-1 shards the rest, and the
// prefix keeps its initial bytes in the weights and the EMA. LARC on both sides of its clipping
// against LARS and SGD on one rank (test_larc_sides). Each rank computes its verdict; the verdicts
// are reduced so every rank exits with the same code. Without MPI: the 1x1x1 layout only.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "mesh.h"
#include "optim.h"
#include "params.h"
#include "vt_ops.h"

enum { STEPS = 3 };

static int g_failures = 0;

// A gradient element, keyed by the tensor's name, its global element and the step: the same on
// every rank whatever holds it. Scaled per tensor so that the norms differ between tensors.
static float grad_value(const char *name, int64_t global, int step) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
  const double scale = 0.01 + (double)(h % 97) / 97.0;
  h ^= (uint64_t)global * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xD1B54A32D192ED03ull;
  h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
  return (float)(scale * ((double)(h >> 11) / 9007199254740992.0 - 0.5));
}

typedef struct {
  int tp, pp, dp, zero;
} layout;

// Whether a tensor is in the frozen prefix of the "frozen" runs (their --freeze pattern).
static const char *const k_frozen_re = "^(patch_embed|pos_embed|cls_token|blocks\\.0\\.)";
// The linear probe's (--trainable): every tensor but the head's bias, 10 elements, so that a
// ZeRO-1 stage without the head has nothing to shard and each of 8 DP ranks about one element.
static const char *const k_probe_re = "^head\\.bias$";
static int in_prefix(int probe, const char *name) {
  if (probe) return strcmp(name, "head.bias") != 0;
  static const char *const prefixes[] = {"patch_embed", "pos_embed", "cls_token", "blocks.0."};
  for (int i = 0; i < 4; i++)
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  return 0;
}

// The optimizer's memory, measured: a backend whose alloc and free are the CPU backend's, counted.
static const vt_backend *g_real;
static size_t g_live;
static struct {
  void *p;
  size_t n;
} g_blocks[64];
static void *counted_alloc(size_t n) {
  void *p = g_real->alloc(n);
  for (int i = 0; p && i < 64; i++)
    if (!g_blocks[i].p) {
      g_blocks[i].p = p, g_blocks[i].n = n, g_live += n;
      return p;
    }
  VT_CHECK(!p, "test_optim: more than 64 live allocations");
  return p;
}
static void counted_free(void *p) {
  for (int i = 0; p && i < 64; i++)
    if (g_blocks[i].p == p) g_live -= g_blocks[i].n, g_blocks[i].p = NULL;
  g_real->free(p);
}

// One run of STEPS steps on this rank's shard of cfg: final local parameters into *out (malloc'd)
// and each step's gradient norm into norms.
// With an EMA, *ema (malloc'd) receives it (vt_optimizer_ema_full), else NULL; *state_nbytes
// the optimizer's memory as allocated (its norms' sums left out), which must be the memory plan's
// vt_optimizer_nbytes.
static void run(const vt_vit_config *cfg, const vt_optim_config *oc, const vt_backend *be,
                const vt_param_table *whole, const float *init, vt_shard shard, vt_comm *tp,
                vt_comm *pp, vt_comm *dp, int zero, int dp_rank, vt_param_table *t, float **out,
                float **ema, size_t *state_nbytes, double *norms) {
  vt_params_build(t, cfg, shard);
  float *params = be->alloc((size_t)t->total * sizeof(float) + 4);
  float *grads = be->alloc((size_t)t->total * sizeof(float) + 4);
  VT_CHECK(params && grads, "out of memory");
  for (int r = 0; r < t->count; r++) {
    const vt_param *p = &t->p[r], *w = vt_params_find(whole, p->name);
    VT_CHECK(w != NULL, "%s is not in the whole table", p->name);
    for (int64_t i = 0; i < p->local_count; i++)
      params[p->offset + i] = init[w->offset + vt_param_global_index(p, &t->shard, i)];
  }
  vt_optimizer o;
  vt_backend counting = *be;
  counting.alloc = counted_alloc, counting.free = counted_free, g_real = be;
  const size_t live = g_live;
  vt_optimizer_init(&o, oc, &counting, t, tp, pp, dp, zero, 0);
  *state_nbytes = g_live - live - (2 * (size_t)t->count + 1) * sizeof(double);
  if (*state_nbytes != vt_optimizer_nbytes(&o)) {
    g_failures++;
    fprintf(stderr, "FAIL: the optimizer allocated %zu bytes, its memory plan says %zu\n",
            *state_nbytes, vt_optimizer_nbytes(&o));
  }
  vt_optimizer_ema_reset(&o, params);
  for (int s = 0; s < STEPS; s++) {
    for (int r = 0; r < t->count; r++) {
      const vt_param *p = &t->p[r];
      for (int64_t i = 0; i < p->local_count; i++)
        grads[p->offset + i] =
            dp_rank == 0 ? grad_value(p->name, vt_param_global_index(p, &t->shard, i), s) : 0.0f;
    }
    norms[s] = vt_optimizer_step(&o, params, grads, oc->lr);
  }
  *ema = NULL;
  if (o.ema) {
    *ema = be->alloc((size_t)t->total * sizeof(float) + 4);
    VT_CHECK(*ema != NULL, "out of memory");
    vt_optimizer_ema_full(&o, params, *ema);
  }
  vt_optimizer_free(&o);
  be->free(grads);
  *out = params;
}

// Whether two runs' weights are the same bits.
static int same_bits(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

// LARC (timm's larc, nlarc) on both sides of its min(trust / lr, 1), bit for bit, on one rank:
// at rate 1 its ratio is LARS's trust (which never reaches 1: at most 0.001 / weight decay), so
// its run is LARS's; at rate 1e-5, below every trust ratio here, every ratio is cut to 1, so a
// decayed tensor steps by lr (g + wd w) as SGD's L2 step, and its run is SGD's with the same
// momentum. Neither is the other optimizer's run at the other rate (the clipping decides).
static void test_larc_sides(const vt_vit_config *cfg, const vt_backend *be,
                            const vt_param_table *whole, const float *init, int me) {
  float *out[2][3];  // [rate][LARC, LARS, SGD]
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 3; k++) {
      const float lr = r == 0 ? 1.0f : 1e-5f;
      const vt_optim_config oc = {.kind = k == 2 ? VT_OPT_SGD : VT_OPT_LARS, .lr = lr,
                                  .min_lr = lr, .total_steps = STEPS, .eps = 1e-8f,
                                  .momentum = 0.9f, .nesterov = 1, .trust_clip = k == 0,
                                  .weight_decay = 0.05f, .clip_grad = 1.5f, .depth = cfg->depth};
      vt_param_table t;
      float *ema;
      size_t nbytes;
      double norms[STEPS];
      run(cfg, &oc, be, whole, init, vt_shard_whole(), NULL, NULL, NULL, 0, 0, &t, &out[r][k],
          &ema, &nbytes, norms);
      vt_params_free(&t);
    }
  const int64_t n = whole->total;
  int moved = 0;  // the small rate's steps are not lost in the weights' rounding
  for (int64_t i = 0; i < n; i++) moved += out[1][0][i] != init[i];
  const int ok[4] = {same_bits(out[0][0], out[0][1], n), !same_bits(out[0][0], out[0][2], n),
                     same_bits(out[1][0], out[1][2], n) && moved > n / 2,
                     !same_bits(out[1][0], out[1][1], n)};
  for (int i = 0; i < 4; i++) g_failures += !ok[i];
  if (me == 0)
    printf("NLARC        one rank: at lr 1 LARS's run bit for bit %s, not SGD's %s; at lr 1e-5 "
           "SGD's bit for bit (%d of %lld weights moved) %s, not LARS's %s\n",
           ok[0] ? "ok" : "FAIL", ok[1] ? "ok" : "FAIL", moved, (long long)n,
           ok[2] ? "ok" : "FAIL", ok[3] ? "ok" : "FAIL");
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 3; k++) be->free(out[r][k]);
}

// The EMA of a weight that does not move (a fixed sin-cos table, a zero gradient) stays it,
// bit for bit, over many updates at decays whose 1 - d is inexact (ema*d + p*(1-d) drifts).
static void test_ema_still(const vt_backend *be, int me) {
  enum { N = 4096 };
  float *w = be->alloc(N * sizeof(float)), *e = be->alloc(N * sizeof(float));
  VT_CHECK(w && e, "out of memory");
  for (int i = 0; i < N; i++) w[i] = e[i] = sinf(0.37f * (float)i) * (1.0f + (float)i / 97.0f);
  const float decays[] = {0.9f, 0.9998f, 0.99996f, 0.7f};
  for (int s = 0; s < 400; s++) vt_ema(be, e, w, decays[s % 4], N);
  int moved = 0;
  for (int i = 0; i < N; i++) moved += memcmp(&w[i], &e[i], sizeof(float)) != 0;
  g_failures += moved > 0;
  if (me == 0)
    printf("EMA of still weights after 400 updates: %d of %d elements moved (want 0)%s\n", moved,
           N, moved ? ": FAIL" : "");
  be->free(w), be->free(e);
}

int main(int argc, char **argv) {
  vt_comm *world = vt_comm_world_init(&argc, &argv);
  const int W = vt_comm_size(world), me = vt_comm_rank(world);
  const char *why = NULL;
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, &why);
  VT_CHECK(be != NULL, "no CPU backend: %s", why);
  vt_backend_set_threads(1);
  // 4 blocks of 4 heads: TP up to 4, 2 pipeline stages; LayerScale adds undecayed (1, C) rows.
  const vt_vit_config cfg = {.name = "optim", .img_size = 16, .patch_size = 8, .width = 32,
                             .depth = 4, .heads = 4, .mlp_ratio = 4.0f, .num_classes = 10,
                             .layer_scale = 0.5f};
  vt_param_table whole;
  vt_params_build(&whole, &cfg, vt_shard_whole());
  float *init = malloc((size_t)whole.total * sizeof(float));
  VT_CHECK(init != NULL, "out of memory");
  vt_params_init(&whole, init, 7);
  const layout all[] = {{2, 2, 2, 1}, {1, 1, 8, 1}, {4, 2, 1, 0}, {2, 1, 4, 0}, {1, 2, 4, 1}};
  const int nlayouts = W == 8 ? (int)(sizeof all / sizeof all[0]) : 1;
  // Then AdamW and LAMB again with the embeddings and block 0 frozen (a frozen prefix: no
  // state kept for it, ZeRO-1 shards the rest) and the weights' EMA; and AdamW as a linear probe
  // of the head's bias alone (ZeRO-1 shards of one element or none; a stage with nothing to train).
  const char *kinds[] = {"AdamW", "LAMB", "SGD", "AdamW frozen", "LAMB frozen", "LARS", "NLARS",
                         "AdamW probe"};
  const vt_opt_kind kind_of[] = {VT_OPT_ADAMW, VT_OPT_LAMB, VT_OPT_SGD,  VT_OPT_ADAMW,
                                 VT_OPT_LAMB,  VT_OPT_LARS, VT_OPT_LARS, VT_OPT_ADAMW};
  for (int k = 0; k < 8; k++) {
    // Clipping at 1.5 acts on every step (the gradients' norm is about 41). SGD (Nesterov) and
    // LARS (plain, then Nesterov) at 10 times the rate, so that their steps of lr x gradient move
    // the weights as far (LARS's decayed tensors by its trust ratio's 0.001 ||w|| / ||g||).
    const int momentum_kind = k == 2 || k >= 5;
    vt_optim_config oc = {.kind = kind_of[k], .lr = momentum_kind ? 2e-1f : 2e-2f,
                          .min_lr = momentum_kind ? 2e-1f : 2e-2f, .warmup_steps = 0,
                          .total_steps = STEPS, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .momentum = 0.9f, .nesterov = k != 5, .weight_decay = 0.05f,
                          .clip_grad = 1.5f, .layer_decay = 0.8f, .depth = cfg.depth};
    const int probe = k == 7, frz = k == 3 || k == 4 || probe;
    if (frz) oc.ema_decay = 0.9f;
    if (probe) snprintf(oc.trainable, sizeof oc.trainable, "%s", k_probe_re);
    else if (frz) snprintf(oc.freeze, sizeof oc.freeze, "%s", k_frozen_re);
    vt_param_table rt;
    float *ref, *ref_ema;
    size_t ref_nbytes;
    double ref_norms[STEPS];
    run(&cfg, &oc, be, &whole, init, vt_shard_whole(), NULL, NULL, NULL, 0, 0, &rt, &ref,
        &ref_ema, &ref_nbytes, ref_norms);
    if (frz) {  // one rank keeps no moments, EMA or weight-decay mask for the frozen prefix
      int64_t frozen_elems = 0;
      for (int r = 0; r < whole.count; r++)
        frozen_elems += in_prefix(probe, whole.p[r].name) * whole.p[r].count;
      // two moments and the EMA (floats), the weight-decay mask (a byte)
      const size_t full = vt_optimizer_plan_nbytes(whole.total, 1, 0, 1, 2);
      const int ok = frozen_elems > 0 && ref_nbytes == full - (size_t)frozen_elems * (3 * 4 + 1);
      g_failures += !ok;
      if (me == 0)
        printf("%-12s one rank: optimizer %zu bytes, %zu without freezing, %lld frozen elements "
               "kept nothing: %s\n", kinds[k], ref_nbytes, full, (long long)frozen_elems,
               ok ? "ok" : "FAIL");
    }
    for (int l = 0; l < nlayouts; l++) {
      const layout L = W == 8 ? all[l] : (layout){1, 1, 1, 0};
      vt_mesh mesh;
      char err[256];
      VT_CHECK(vt_mesh_init(&mesh, L.tp, L.pp, L.dp, VT_MESH_TP_DP_PP, W, err, sizeof err) == VT_OK,
               "%s", err);
      vt_comm *tp, *pp, *dp;
      vt_comm_split_mesh(world, &mesh, VT_DEVICE_CPU, &tp, &pp, &dp);
      const vt_mesh_coord c = vt_mesh_coords(&mesh, me);
      const vt_shard shard = {c.tp_rank, L.tp, c.pp_rank, L.pp, 0, 1, 0};
      vt_param_table t;
      float *mine, *mine_ema;
      size_t nbytes;
      double norms[STEPS];
      run(&cfg, &oc, be, &whole, init, shard, L.tp > 1 ? tp : NULL, L.pp > 1 ? pp : NULL,
          L.dp > 1 ? dp : NULL, L.zero, c.dp_rank, &t, &mine, &mine_ema, &nbytes, norms);
      // Each tensor against one rank's, relative to how far one rank's moved it; frozen ones
      // (which did not move) must keep the initial bytes in the weights and the EMA.
      double worst = 0.0;
      const char *worst_name = "";
      int frozen_moved = 0;
      for (int e = 0; e < (frz ? 2 : 1); e++) {
        const float *got = e ? mine_ema : mine, *want = e ? ref_ema : ref;
        for (int r = 0; r < t.count; r++) {
          const vt_param *p = &t.p[r], *w = vt_params_find(&rt, p->name);
          double diff = 0.0, moved = 0.0;
          int kept = 1;
          for (int64_t i = 0; i < p->local_count; i++) {
            const int64_t g = w->offset + vt_param_global_index(p, &t.shard, i);
            diff = fmax(diff, fabs((double)got[p->offset + i] - want[g]));
            moved = fmax(moved, fabs((double)want[g] - init[g]));
            kept &= got[p->offset + i] == init[g] && want[g] == init[g];
          }
          frozen_moved += frz && in_prefix(probe, p->name) && !kept;
          const double rel = moved > 0 ? diff / moved : diff;
          if (rel > worst) worst = rel, worst_name = p->name;
        }
      }
      double norm_err = 0.0;
      for (int s = 0; s < STEPS; s++)
        norm_err = fmax(norm_err, fabs(norms[s] - ref_norms[s]) / ref_norms[s]);
      // ZeRO-1 keeps the state (moments, EMA) of its shard only: an equal part of the trained
      // elements, the last DP rank also the tail of fewer than dp; no copy of the weights.
      size_t want_nbytes = nbytes;
      int64_t tail = 0;
      if (L.zero) {
        const int64_t trained = t.total - vt_optim_state_base(&oc, &t);
        const int bufs = vt_opt_state_buffers(oc.kind) + (oc.ema_decay > 0);
        tail = trained % L.dp;
        const int64_t shard = trained / L.dp + (c.dp_rank == L.dp - 1 ? tail : 0);
        // (a buffer holds at least one float: a shard may be empty)
        want_nbytes = (size_t)(bufs * (shard > 0 ? shard : 1)) * 4 + (size_t)shard + 1;
      }
      const int ok = worst <= 1e-5 && norm_err <= 1e-12 && !frozen_moved && nbytes == want_nbytes;
      g_failures += !ok;
      if (nbytes != want_nbytes)
        fprintf(stderr, "[rank %d] FAIL: %s %dx%dx%d ZeRO-1 optimizer memory %zu bytes, want %zu "
                "(its shard's state)\n", me, kinds[k], L.tp, L.pp, L.dp, nbytes, want_nbytes);
      double all_worst[2] = {worst, norm_err};
      vt_comm_all_reduce_double(world, all_worst, 2, VT_REDUCE_MAX);
      if (!ok)
        fprintf(stderr, "[rank %d] FAIL: %s %dx%dx%d%s: %s off by %.2e of its update, grad norm by "
                "%.2e, %d frozen tensors changed\n", me, kinds[k], L.tp, L.pp, L.dp,
                L.zero ? " ZeRO-1" : "", worst_name, worst, norm_err, frozen_moved);
      if (me == 0)
        printf("%-12s %dx%dx%d%-7s against one rank after %d steps: parameters%s within %.2e of "
               "their update (tol 1e-5), grad norms within %.2e (tol 1e-12); first step's norm "
               "%.4f%s\n", kinds[k], L.tp, L.pp, L.dp, L.zero ? " ZeRO-1" : "", STEPS,
               frz ? " and EMA" : "", all_worst[0], all_worst[1], ref_norms[0],
               L.zero ? (tail ? "; memory: its shard's state (the last DP rank's with a tail)"
                              : "; memory: its shard's state (no tail)") : "");
      be->free(mine);
      if (mine_ema) be->free(mine_ema);
      vt_params_free(&t);
      vt_comm_free(tp), vt_comm_free(pp), vt_comm_free(dp);
    }
    be->free(ref);
    if (ref_ema) be->free(ref_ema);
    vt_params_free(&rt);
  }
  test_larc_sides(&cfg, be, &whole, init, me);
  test_ema_still(be, me);
  double verdict = g_failures;
  vt_comm_all_reduce_double(world, &verdict, 1, VT_REDUCE_MAX);
  if (me == 0) printf("test_optim: %s\n", verdict > 0 ? "FAILED" : "passed");
  free(init);
  vt_params_free(&whole);
  vt_comm_finalize(world);
  return verdict > 0 ? 1 : 0;
}
