// test_unit.c: unit tests of the pieces below the model: Philox against the published
// known-answer vectors, the parameter table against timm's parameter counts, the learning-rate
// schedule, AdamW against a double-precision transcription, the synthetic images against a
// double-precision transcription, the spike guard's statistics, and the config checks;
// test_unit_reg.c the regularisers' draws
// (drop-path and dropout masks, Mixup/CutMix, random erasing).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cuda/variant_pick.h"
#include "model.h"
#include "optim.h"
#include "params.h"
#include "spike.h"
#include "synthetic.h"
#include "test_unit.h"
#include "vt_ops.h"
#include "vt_rng.h"

int checks = 0, failures = 0;  // vt_check.h's counters, shared with test_unit_reg.c

static void test_philox(void) {
  // Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
  struct { uint32_t ctr[4]; uint64_t key; uint32_t out[4]; } kat[] = {
      {{0, 0, 0, 0}, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffffffffffffull,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0x299f31d0a4093822ull,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (int i = 0; i < 3; i++) {
    vt_philox_ctr c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
    vt_philox_ctr r = vt_philox4x32(c, kat[i].key);
    EXPECT(memcmp(r.v, kat[i].out, 16) == 0, "philox KAT %d: got %08x %08x %08x %08x", i, r.v[0],
           r.v[1], r.v[2], r.v[3]);
  }
  // Normals: mean ~0, variance ~1 over 1e5 draws; uniforms in [0, 1).
  double s = 0, ss = 0;
  for (int i = 0; i < 100000; i++) {
    double x = vt_rng_normal(7, 1, 2, (uint64_t)i);
    s += x, ss += x * x;
    float u = vt_rng_uniform(7, 1, 2, (uint64_t)i);
    EXPECT(u >= 0.0f && u < 1.0f, "uniform out of range: %g", u);
  }
  EXPECT(fabs(s / 1e5) < 0.02 && fabs(ss / 1e5 - 1.0) < 0.02, "normal moments %g %g", s / 1e5,
         ss / 1e5);
}

static void test_param_counts(void) {
  // timm's parameter counts for these models with 1000 classes.
  struct { const char *name; int64_t count; int tensors; } want[] = {
      {"vit-ti16", 5717416, 152},  {"vit-s16", 22050664, 152}, {"vit-b16", 86567656, 152},
      {"vit-l16", 304326632, 296}, {"vit-h14", 632045800, 392},
  };
  for (int i = 0; i < 5; i++) {
    vt_vit_config c;
    char err[256];
    EXPECT(vt_config_preset(want[i].name, &c, err, sizeof err) == VT_OK, "%s", err);
    vt_param_table t;
    vt_params_build(&t, &c, vt_shard_whole());
    EXPECT(t.total == want[i].count, "%s: %lld parameters, timm has %lld", want[i].name,
           (long long)t.total, (long long)want[i].count);
    EXPECT(t.count == want[i].tensors, "%s: %d tensors, timm has %d", want[i].name, t.count,
           want[i].tensors);
    const vt_param *p = vt_params_find(&t, "blocks.0.attn.qkv.weight");
    EXPECT(p && p->shape[0] == 3 * c.width && p->shape[1] == c.width && p->decay,
           "qkv weight row wrong");
    p = vt_params_find(&t, "pos_embed");
    EXPECT(p && !p->decay && p->shape[1] == vt_cfg_tokens(&c), "pos_embed row wrong");
    p = vt_params_find(&t, "patch_embed.proj.weight");
    EXPECT(p && p->ndim == 4 && p->shape[1] == 3 && p->decay, "patch_embed row wrong");
    vt_params_free(&t);
  }
  vt_vit_config c;
  char err[256];
  vt_config_preset("vit-b16", &c, err, sizeof err);
  EXPECT(fabs(vt_config_train_flops(&c, 0) / 1e9 - 105.4) < 0.1, "ViT-B/16 train GFLOP %g",
         vt_config_train_flops(&c, 0) / 1e9);
  // Frozen prefixes: the embeddings (layer 0) and blocks 0-5 run no backward; a linear probe
  // (every layer below the head frozen) runs the forward and its head's backward alone.
  const double fwd = vt_config_train_flops(&c, 0) / 3.0, head = 2.0 * 768 * 1000;
  const double block = (fwd - head - 2.0 * 196 * 3 * 256 * 768) / 12;
  EXPECT(fabs(vt_config_train_flops(&c, 7) - (fwd + 2.0 * (6 * block + head))) < 1e3 &&
             fabs(vt_config_train_flops(&c, 13) - (fwd + 2.0 * head)) < 1e3,
         "frozen prefixes' FLOPs %g %g", vt_config_train_flops(&c, 7),
         vt_config_train_flops(&c, 13));
  c.heads = 5;
  EXPECT(vt_config_validate(&c, err, sizeof err) != VT_OK && strstr(err, "heads"),
         "width %% heads not refused");
  EXPECT(vt_config_preset("vit-x", &c, err, sizeof err) != VT_OK && strstr(err, "vit-b16"),
         "unknown preset not refused with the list");
}

// vt_param_run: inside every run the global indices of a shard's elements are consecutive, for
// each TP split (qkv's three stripes and the MAP head's kv's two too) and TP rank, also with
// chunks; and the TP ranks' shards together hold every global element once.
// Blocks per virtual stage: the last ones get the extra blocks, and in ZB-V's V those of the
// stages farthest from stage 0 (chunk 0 of stage pp - 1, pp - 2, ..., then their chunk 1).
static void test_stage_blocks(void) {
  const struct {
    int depth, nvs, vshape;
    const char *want;  // each virtual stage's block count
  } cases[] = {{12, 4, 0, "3333"},        {13, 4, 0, "3334"},        {7, 3, 0, "223"},
               {12, 10, 1, "1112211111"}, {12, 6, 0, "222222"},      {9, 6, 1, "222111"},
               {11, 6, 1, "222221"},      {5, 4, 1, "1211"},         {8, 6, 1, "122111"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char got[16] = "";
    int next = 0, ok = 1;
    for (int v = 0; v < cases[i].nvs; v++) {
      int first, end;
      vt_stage_blocks(cases[i].depth, cases[i].nvs, cases[i].vshape, v, &first, &end);
      ok &= first == next, next = end;
      got[v] = (char)('0' + end - first);
    }
    EXPECT(ok && next == cases[i].depth && !strcmp(got, cases[i].want),
           "depth %d in %d virtual stages%s: %s, want %s (contiguous %d)", cases[i].depth,
           cases[i].nvs, cases[i].vshape ? " (V)" : "", got, cases[i].want, ok);
  }
}

static void test_param_runs(void) {
  vt_vit_config c;
  char err[256];
  vt_config_preset("tiny", &c, err, sizeof err);
  c.heads = 8, c.width = 64, c.depth = 4;
  c.global_pool = 3;  // the MAP head: its q, kv ([k | v], two stripes) and proj split over TP
  int bad = 0, covered_bad = 0, checked = 0;
  for (int tp = 1; tp <= 4; tp *= 2)
    for (int pp_rank = 0; pp_rank < 2; pp_rank++) {
      vt_param_table t[4];
      for (int r = 0; r < tp; r++)
        vt_params_build(&t[r], &c, (vt_shard){r, tp, pp_rank, 2, 0, 2, 0});
      for (int i = 0; i < t[0].count; i++) {
        const int64_t count = t[0].p[i].count;
        unsigned char *seen = calloc((size_t)count, 1);
        for (int r = 0; r < tp; r++) {
          const vt_param *p = &t[r].p[i];
          const int64_t run = vt_param_run(p, &t[r].shard);
          const int replicated = p->tp_split == VT_TP_REPLICATED;
          if (run < 1 || p->local_count % run) {
            bad++;
            continue;
          }
          for (int64_t k = 0; k < p->local_count; k++) {
            const int64_t g = vt_param_global_index(p, &t[r].shard, k);
            bad += g != vt_param_global_index(p, &t[r].shard, k - k % run) + k % run;
            if (!replicated || r == 0) seen[g]++;
          }
          checked++;
        }
        for (int64_t g = 0; g < count; g++) covered_bad += seen[g] != 1;
        free(seen);
      }
      for (int r = 0; r < tp; r++) vt_params_free(&t[r]);
    }
  EXPECT(bad == 0, "vt_param_run: %d elements out of their run's order", bad);
  EXPECT(covered_bad == 0, "TP shards: %d global elements not held exactly once", covered_bad);
  EXPECT(checked > 100, "vt_param_run: only %d shards checked", checked);
}

static void test_init(void) {
  vt_vit_config c;
  char err[256];
  vt_config_preset("tiny", &c, err, sizeof err);
  vt_param_table t;
  vt_params_build(&t, &c, vt_shard_whole());
  static float a[1 << 20], b[1 << 20];
  vt_params_init(&t, a, 5);
  vt_params_init(&t, b, 5);
  EXPECT(memcmp(a, b, (size_t)t.total * 4) == 0, "init is not deterministic");
  const vt_param *w = vt_params_find(&t, "blocks.1.mlp.fc1.weight");
  double ss = 0;
  for (int64_t i = 0; i < w->count; i++) ss += (double)a[w->offset + i] * a[w->offset + i];
  EXPECT(fabs(sqrt(ss / (double)w->count) - 0.02) < 0.002, "fc1 std %g, want 0.02",
         sqrt(ss / (double)w->count));
  const vt_param *n = vt_params_find(&t, "norm.weight");
  EXPECT(a[n->offset] == 1.0f, "norm weight not 1");
  vt_params_free(&t);
  // --weight-init jax: the head zero, qkv uniform within sqrt(6 / (C + 3C)), reaching near it,
  // MLP biases tiny normals, attention biases zero, the patch embedding within 2 of its std.
  c.init_jax = 1;
  vt_params_build(&t, &c, vt_shard_whole());
  vt_params_init(&t, a, 5);
  const int64_t C = c.width;
  const double bound = sqrt(6.0 / (double)(4 * C));
  const double pstd = sqrt(1.0 / (3.0 * 64)) / 0.87962566103423978;
  double top = 0, head = 0, fc1b = 0, qkvb = 0, patch = 0;
  const vt_param *q = vt_params_find(&t, "blocks.0.attn.qkv.weight");
  for (int64_t i = 0; i < q->count; i++) top = fmax(top, fabs(a[q->offset + i]));
  const vt_param *h = vt_params_find(&t, "head.weight");
  for (int64_t i = 0; i < h->count; i++) head = fmax(head, fabs(a[h->offset + i]));
  const vt_param *fb = vt_params_find(&t, "blocks.0.mlp.fc1.bias");
  for (int64_t i = 0; i < fb->count; i++) fc1b = fmax(fc1b, fabs(a[fb->offset + i]));
  const vt_param *qb = vt_params_find(&t, "blocks.0.attn.qkv.bias");
  for (int64_t i = 0; i < qb->count; i++) qkvb = fmax(qkvb, fabs(a[qb->offset + i]));
  const vt_param *pw = vt_params_find(&t, "patch_embed.proj.weight");
  for (int64_t i = 0; i < pw->count; i++) patch = fmax(patch, fabs(a[pw->offset + i]));
  EXPECT(top <= bound && top > 0.98 * bound, "jax qkv: max %g, bound %g", top, bound);
  EXPECT(head == 0 && qkvb == 0, "jax: head %g, qkv bias %g, want 0", head, qkvb);
  EXPECT(fc1b > 0 && fc1b < 1e-5, "jax: fc1 bias max %g, want a normal(1e-6)", fc1b);
  EXPECT(patch <= 2 * pstd && patch > 1.5 * pstd, "jax patch embedding: max %g, std %g", patch,
         pstd);
  vt_params_free(&t);
}

static void test_schedule(void) {
  vt_optim_config oc = {.lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 4, .total_steps = 14};
  EXPECT(fabsf(vt_lr_at(&oc, 0) - 0.25f) < 1e-7f, "warmup start");
  EXPECT(fabsf(vt_lr_at(&oc, 3) - 1.0f) < 1e-7f, "warmup end");
  EXPECT(fabsf(vt_lr_at(&oc, 4) - 1.0f) < 1e-6f, "cosine start");
  EXPECT(fabsf(vt_lr_at(&oc, 9) - 0.55f) < 1e-6f, "cosine middle %g", vt_lr_at(&oc, 9));
  EXPECT(fabsf(vt_lr_at(&oc, 14) - 0.1f) < 1e-6f, "cosine end");
  oc.warmup_lr = 0.2f;  // timm's --warmup-lr: from it at step 0, linearly, then the same cosine
  EXPECT(fabsf(vt_lr_at(&oc, 0) - 0.2f) < 1e-7f, "warmup-lr start %g", vt_lr_at(&oc, 0));
  EXPECT(fabsf(vt_lr_at(&oc, 2) - 0.6f) < 1e-7f, "warmup-lr middle %g", vt_lr_at(&oc, 2));
  EXPECT(fabsf(vt_lr_at(&oc, 4) - 1.0f) < 1e-6f, "warmup-lr then the cosine start");
  // timm's per-epoch rate: 10 images at 4 per step (epochs 0,0,0,1,1,2,2,2,3,3,4 for steps
  // 0-10), 2 epochs of warmup from 0.2, the cosine over 4 epochs from epoch 0, then min_lr.
  oc.epoch_images = 10, oc.step_images = 4, oc.warmup_epochs = 2, oc.cycle_epochs = 4;
  const float want[11] = {0.2f, 0.2f, 0.2f, 0.6f, 0.6f, 0.55f, 0.55f, 0.55f,
                          (float)(0.1 + 0.45 * (1 + cos(3.14159265358979323846 * 0.75))),
                          (float)(0.1 + 0.45 * (1 + cos(3.14159265358979323846 * 0.75))), 0.1f};
  for (int s = 0; s < 11; s++)
    EXPECT(fabsf(vt_lr_at(&oc, s) - want[s]) < 1e-6f, "per-epoch step %d: %g, want %g", s,
           vt_lr_at(&oc, s), want[s]);
  // The per-step cosine keeps its bits: lr - min_lr subtracted in float, the rest in double (as
  // every run logged before --sched; a double subtraction moves the quick start's step 108).
  vt_optim_config q = {.lr = 4e-3f, .min_lr = 1e-5f, .warmup_steps = 100, .total_steps = 1800};
  int same = 1, apart = 0;
  for (int64_t st = 100; st < 1800; st++) {
    const double x = (double)(st - 100) / 1700.0, c = 1.0 + cos(3.14159265358979323846 * x);
    same &= vt_lr_at(&q, st) == (float)(q.min_lr + 0.5 * (q.lr - q.min_lr) * c);
    apart += (float)(q.min_lr + 0.5 * ((double)q.lr - (double)q.min_lr) * c) != vt_lr_at(&q, st);
  }
  EXPECT(same && apart > 0, "the per-step cosine's bits (%d steps where a double subtraction "
         "would differ)", apart);
  // --sched linear: the same warmup, then a straight line from lr to min_lr (per epoch: epoch 2
  // of 4 is halfway, epoch 3 three quarters); --sched constant: lr after the warmup.
  oc.sched = VT_SCHED_LINEAR;
  const float lin[11] = {0.2f, 0.2f, 0.2f, 0.6f, 0.6f, 0.55f, 0.55f, 0.55f, 0.325f, 0.325f, 0.1f};
  for (int s = 0; s < 11; s++)
    EXPECT(fabsf(vt_lr_at(&oc, s) - lin[s]) < 1e-6f, "linear per-epoch step %d: %g, want %g", s,
           vt_lr_at(&oc, s), lin[s]);
  // A per-epoch warmup from --warmup-lr 0: epoch e of 2 at lr (e + 1) / 2 (not a first epoch at
  // lr 0); of 0.4 epochs (the default 5% of a short run), epoch 0 at lr.
  oc.warmup_lr = 0.0f;
  EXPECT(fabsf(vt_lr_at(&oc, 0) - 0.5f) < 1e-7f && fabsf(vt_lr_at(&oc, 3) - 1.0f) < 1e-7f &&
             fabsf(vt_lr_at(&oc, 5) - 0.55f) < 1e-6f, "per-epoch warmup from 0: %g %g %g",
         vt_lr_at(&oc, 0), vt_lr_at(&oc, 3), vt_lr_at(&oc, 5));
  oc.warmup_epochs = 0.4;
  EXPECT(fabsf(vt_lr_at(&oc, 0) - 1.0f) < 1e-7f, "per-epoch warmup of 0.4 epochs from 0: %g",
         vt_lr_at(&oc, 0));
  oc.warmup_lr = 0.2f, oc.warmup_epochs = 2;
  oc.epoch_images = 0;
  EXPECT(fabsf(vt_lr_at(&oc, 4) - 1.0f) < 1e-6f && fabsf(vt_lr_at(&oc, 9) - 0.55f) < 1e-6f &&
             fabsf(vt_lr_at(&oc, 6) - 0.82f) < 1e-6f && fabsf(vt_lr_at(&oc, 14) - 0.1f) < 1e-6f,
         "linear per step: %g %g %g %g", vt_lr_at(&oc, 4), vt_lr_at(&oc, 9), vt_lr_at(&oc, 6),
         vt_lr_at(&oc, 14));
  oc.sched = VT_SCHED_CONSTANT;
  EXPECT(fabsf(vt_lr_at(&oc, 2) - 0.6f) < 1e-7f && vt_lr_at(&oc, 4) == 1.0f &&
             vt_lr_at(&oc, 9) == 1.0f && vt_lr_at(&oc, 14) == 1.0f,
         "constant: %g %g %g %g", vt_lr_at(&oc, 2), vt_lr_at(&oc, 4), vt_lr_at(&oc, 9),
         vt_lr_at(&oc, 14));
}

static void test_ema_decay(void) {
  // --model-ema-warmup: timm's ModelEmaV3 stepped as its train.py does, update t (1-based) with
  // get_decay(t) = 1 - t^(-2/3) (0 at t = 1) capped at the decay.
  vt_optim_config c = {.ema_decay = 0.9f};
  EXPECT(vt_ema_decay_at(&c, 1) == 0.9f && vt_ema_decay_at(&c, 7) == 0.9f, "no warmup");
  c.ema_warmup = 1;
  EXPECT(vt_ema_decay_at(&c, 1) == 0.0f, "the first update copies");
  EXPECT(fabsf(vt_ema_decay_at(&c, 2) - (float)(1.0 - pow(2.0, -2.0 / 3.0))) == 0.0f &&
             vt_ema_decay_at(&c, 8) == 0.75f && vt_ema_decay_at(&c, 1000) == 0.9f,
         "warmup: %g %g %g", vt_ema_decay_at(&c, 2), vt_ema_decay_at(&c, 8),
         vt_ema_decay_at(&c, 1000));
}

static void test_adamw(void) {
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.1f, -0.3f, 0.0f}, m[3] = {0}, v[3] = {0};
  double pd[3] = {1.0, -2.0, 0.5}, md[3] = {0}, vd[3] = {0};
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  for (int t = 1; t <= 3; t++) {
    vt_adamw(be, p, g, m, v, NULL, 3, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t,
             1.0f);
    for (int i = 0; i < 3; i++) {
      pd[i] *= 1.0 - lr * wd;
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * g[i] * g[i];
      double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
      pd[i] -= lr * mh / (sqrt(vh) + eps);
    }
  }
  for (int i = 0; i < 3; i++)
    EXPECT(fabs(p[i] - pd[i]) < 1e-6, "adamw p[%d] %.9g vs %.9g", i, p[i], pd[i]);
  // The gradient scale (clipping's coefficient, optim.c) inside AdamW: the same bits as the
  // gradients scaled first (vt_scale) and AdamW with 1.
  float p1[5] = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f}, p2[5], m1[5] = {0}, m2[5] = {0}, v1[5] = {0};
  float v2[5] = {0}, g1[5] = {0.1f, -0.3f, 0.0f, 7.7f, 1e-3f}, g2[5];
  memcpy(p2, p1, sizeof p1);
  memcpy(g2, g1, sizeof g1);
  const float s = 0.123456f;
  vt_scale(be, g2, s, 5);
  for (int t = 1; t <= 2; t++) {
    vt_adamw(be, p1, g1, m1, v1, NULL, 5, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, t, s);
    vt_adamw(be, p2, g2, m2, v2, NULL, 5, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, t, 1.0f);
  }
  EXPECT(!memcmp(p1, p2, sizeof p1) && !memcmp(m1, m2, sizeof m1) && !memcmp(v1, v2, sizeof v1),
         "adamw's grad_scale differs from vt_scale then adamw: p %.9g vs %.9g", p1[3], p2[3]);
}

static void test_gelu(void) {
  // The vectorised activations against their definitions in double (libm's erf and tanh), over
  // [-12, 12]: GELU's two forms and tanh.
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  enum { n = 24001 };
  static float x[n], y[n], dy[n], ones[n];
  for (int i = 0; i < n; i++) x[i] = -12.0f + 0.001f * (float)i, ones[i] = 1.0f;
  for (int form = VT_ACT_GELU; form <= VT_ACT_TANH; form++) {
    vt_act_fwd(be, y, x, n, (vt_act)form);
    vt_act_bwd(be, dy, NULL, x, ones, 1, n, (vt_act)form);
    double worst = 0, worst_d = 0;
    for (int i = 0; i < n; i++) {
      const double v = x[i], k0 = sqrt(2 / 3.14159265358979323846), k1 = 0.044715;
      double f, d;
      if (form == VT_ACT_TANH) {
        f = tanh(v), d = 1 - f * f;
      } else if (form == VT_ACT_GELU_TANH) {
        const double t = tanh(k0 * (v + k1 * v * v * v));
        f = 0.5 * v * (1 + t);
        d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k0 * (1 + 3 * k1 * v * v);
      } else {
        const double cdf = 0.5 * (1 + erf(v / sqrt(2.0)));
        f = v * cdf, d = cdf + v * exp(-0.5 * v * v) / sqrt(2 * 3.14159265358979323846);
      }
      worst = fmax(worst, fabs(y[i] - f)), worst_d = fmax(worst_d, fabs(dy[i] - d));
    }
    const char *name = form == VT_ACT_TANH        ? "tanh"
                       : form == VT_ACT_GELU_TANH ? "GELU (tanh form)" : "GELU (erf form)";
    EXPECT(worst < 1e-6 && worst_d < 1e-6, "%s error %.3g, derivative error %.3g", name, worst,
           worst_d);
    printf("%s on [-12, 12]: max abs error %.3g, derivative %.3g\n", name, worst, worst_d);
  }
}

// --freeze and --trainable on the tiny model (depth 4, 56 tensors): what each freezes, the
// leading layers the backward may skip, the names' hash (the same set, the same hash; another
// set, another), and a bad pattern refused.
static void test_freeze(void) {
  vt_vit_config c;
  char err[320];
  vt_config_preset("tiny", &c, err, sizeof err);
  struct { const char *freeze, *trainable; int tensors, leading; } cases[] = {
      {"", "", 0, 0},
      {"^patch_embed", "", 2, 0},  // cls_token and pos_embed still train: no layer skipped
      {"^(patch_embed|cls_token|pos_embed)", "", 4, 1},
      {"^(patch_embed|cls_token|pos_embed|blocks\\.[01]\\.)", "", 28, 3},
      {"^blocks\\.2\\.", "", 12, 0},
      {"", "^head\\.", 54, 5},  // the final norm frozen too: all four blocks skipped
      {"^norm\\.", "^(head|norm)\\.", 54, 5},
  };
  uint32_t hash[7];
  for (int i = 0; i < 7; i++) {
    vt_optim_config oc = {0};
    snprintf(oc.freeze, sizeof oc.freeze, "%s", cases[i].freeze);
    snprintf(oc.trainable, sizeof oc.trainable, "%s", cases[i].trainable);
    vt_freeze_summary fz;
    EXPECT(vt_freeze_summarize(&oc, &c, &fz, err, sizeof err) == VT_OK &&
               fz.tensors == cases[i].tensors && fz.leading_layers == cases[i].leading &&
               fz.all_tensors == 56 && vt_freeze_leading_layers(&oc, &c) == cases[i].leading,
           "--freeze '%s' --trainable '%s': %d tensors frozen, %d leading layers (want %d, %d)",
           cases[i].freeze, cases[i].trainable, fz.tensors, fz.leading_layers, cases[i].tensors,
           cases[i].leading);
    hash[i] = fz.names_hash;
  }
  EXPECT(hash[0] == 0 && hash[5] != 0 && hash[5] == hash[6] && hash[2] != hash[3] &&
             hash[1] != hash[2],
         "names' hashes: %08x %08x %08x %08x %08x %08x", hash[0], hash[1], hash[2], hash[3],
         hash[5], hash[6]);
  // The gradient buffer starts at the first tensor of the first layer after the prefix: on the
  // whole model and on stage 1 of 2 (blocks 2-3, the final norm and the head).
  struct { int leading, stage; const char *first; } grads[] = {
      {0, -1, "cls_token"}, {1, -1, "blocks.0.norm1.weight"}, {3, -1, "blocks.2.norm1.weight"},
      {5, -1, "norm.weight"}, {3, 1, "blocks.2.norm1.weight"}, {4, 1, "blocks.3.norm1.weight"},
      {5, 1, "norm.weight"}, {1, 1, "blocks.2.norm1.weight"}};
  for (int i = 0; i < 8; i++) {
    vt_param_table t;
    const vt_shard stage = {0, 1, grads[i].stage, 2, 0, 1, 0};
    vt_params_build(&t, &c, grads[i].stage < 0 ? vt_shard_whole() : stage);
    const vt_param *want = vt_params_find(&t, grads[i].first);
    const int64_t got = vt_params_grad_first(&t, grads[i].leading);
    EXPECT(want && got == want->offset, "%d leading layers frozen, stage %d: gradients from "
           "element %lld, want %s's", grads[i].leading, grads[i].stage, (long long)got,
           grads[i].first);
    vt_params_free(&t);
  }
  vt_optim_config bad = {0};
  snprintf(bad.trainable, sizeof bad.trainable, "head(");
  vt_freeze_summary fz;
  EXPECT(vt_freeze_summarize(&bad, &c, &fz, err, sizeof err) != VT_OK &&
             strstr(err, "--trainable 'head(' is not a regular expression"),
         "a bad pattern: %s", err);
}

// vt_synthetic_sample against its definition in double precision: noise number e of the
// stream per element (one vt_rng_uniform call each, where the generator takes a Philox block
// for four), two waves by libm's sin. Odd sizes put rows across Philox blocks; the vectorised
// sine is within 1.3e-7 of the true one, so a pixel within 1e-5 (noise lanes taken from a
// block's start are off by up to 1, a polynomial coefficient wrong in its third digit by 3e-4).
static void test_synthetic(void) {
  const uint64_t seed = 11;
  const int sizes[3] = {224, 37, 5};
  const uint32_t s_label = vt_hash_name("synthetic.label");
  const uint32_t s_class = vt_hash_name("synthetic.class");
  const uint32_t s_noise = vt_hash_name("synthetic.noise");
  for (int si = 0; si < 3; si++) {
    const int S = sizes[si], K = 10;
    float *img = malloc(sizeof(float) * 3 * S * S);
    for (int64_t index = 0; index < 6; index += 5) {
      int32_t label = -1;
      vt_synthetic_sample(seed, index, S, K, img, &label);
      EXPECT(label == vt_synthetic_label(seed, index, K), "synthetic label, S %d", S);
      const double gain = 0.75f + 0.5f * vt_rng_uniform(seed, s_label, 1, (uint64_t)index);
      double worst = 0;
      for (int ch = 0; ch < 3; ch++) {
        double fx[2], fy[2], ph[2];
        for (int w = 0; w < 2; w++) {
          const uint64_t base = (uint64_t)(ch * 2 + w) * 4;
          const float ang = 6.28318530717958647692f *
                            vt_rng_uniform(seed, s_class, (uint32_t)label, base);
          const float freq =
              1.0f + 3.0f * vt_rng_uniform(seed, s_class, (uint32_t)label, base + 1);
          fx[w] = 6.28318530717958647692f * freq * cosf(ang) / (float)S;
          fy[w] = 6.28318530717958647692f * freq * sinf(ang) / (float)S;
          ph[w] = 6.28318530717958647692f *
                  vt_rng_uniform(seed, s_class, (uint32_t)label, base + 2);
        }
        for (int y = 0; y < S; y++)
          for (int x = 0; x < S; x++) {
            const uint64_t e = ((uint64_t)index * 3 + (uint64_t)ch) * (uint64_t)(S * S) +
                               (uint64_t)(y * S + x);
            const double noise = 2.0 * vt_rng_uniform(seed, s_noise, 0, e) - 1.0;
            const double v =
                sin(fx[0] * x + fy[0] * y + ph[0]) + sin(fx[1] * x + fy[1] * y + ph[1]);
            const double want = (double)(float)(gain * 0.7f) * v + 0.5 * noise;
            const double err = fabs(img[(ch * S + y) * S + x] - want);
            if (err > worst) worst = err;
          }
      }
      EXPECT(worst < 1e-5, "synthetic image S %d sample %lld: %.3g from its definition", S,
             (long long)index, worst);
    }
    free(img);
  }
}

// The spike guard's statistics (vit/spike.h) against their definition: the exponentially
// weighted mean and variance of all values so far, weights a (1 - a)^(n - 1 - i) for value i >= 1
// and (1 - a)^(n - 1) for the first; no limit before `window` values; non-finite values ignored.
static void test_spike(void) {
  const int window = 8;
  const double a = 2.0 / (window + 1.0);
  vt_spike_stats s = {{0, 0}, {0, 0}, {0, 0}};
  double x[30];
  uint32_t r = 7;
  for (int i = 0; i < 30; i++) {
    r = r * 1103515245u + 12345u;
    x[i] = 3.0 + (double)(r >> 8) / (1 << 24);
    EXPECT(isinf(vt_spike_limit(&s, VT_SPIKE_NORM, 6.0f, window)) == (i < window),
           "spike limit after %d values: %g", i, vt_spike_limit(&s, VT_SPIKE_NORM, 6.0f, window));
    vt_spike_add(&s, VT_SPIKE_NORM, x[i], window);
    vt_spike_add(&s, VT_SPIKE_NORM, NAN, window);  // ignored
  }
  double w[30], mean = 0, var = 0, sum = 0;
  for (int i = 0; i < 30; i++) w[i] = i == 0 ? pow(1 - a, 29) : a * pow(1 - a, 29 - i);
  for (int i = 0; i < 30; i++) mean += w[i] * x[i], sum += w[i];
  for (int i = 0; i < 30; i++) var += w[i] * (x[i] - mean) * (x[i] - mean);
  EXPECT(s.n[VT_SPIKE_NORM] == 30 && s.n[VT_SPIKE_LOSS] == 0, "spike counts %lld %lld",
         (long long)s.n[VT_SPIKE_NORM], (long long)s.n[VT_SPIKE_LOSS]);
  EXPECT(fabs(sum - 1) < 1e-12 && fabs(s.mean[1] - mean) < 1e-12 * mean &&
             fabs(s.var[1] - var) < 1e-10 * var,
         "spike statistics: mean %.17g var %.17g, by definition %.17g %.17g", s.mean[1], s.var[1],
         mean, var);
  const double lim = vt_spike_limit(&s, VT_SPIKE_NORM, 6.0f, window);
  EXPECT(fabs(lim - (mean + 6 * sqrt(var))) < 1e-12 * lim &&
             fabs(vt_spike_z(&s, VT_SPIKE_NORM, lim) - 6) < 1e-9 &&
             isinf(vt_spike_limit(&s, VT_SPIKE_NORM, 0.0f, window)),
         "spike limit %.17g, z there %.17g", lim, vt_spike_z(&s, VT_SPIKE_NORM, lim));
}

// The CUDA attention's pick among its timed variants (src/cuda/variant_pick.h): the fastest of
// those whose bits agree with the first candidate's, so a GPU where one variant rounds
// differently still gives every run the first one's bits.
static void test_variant_pick(void) {
  const uint64_t same[3] = {7, 7, 7}, odd[3] = {7, 9, 7}, first_alone[3] = {7, 9, 8};
  const float ms[3] = {3.0f, 1.0f, 2.0f};
  int agree = -1;
  EXPECT(vt_variant_pick(3, same, ms, &agree) == 1 && agree == 1,
         "variant pick: the fastest of three that agree");
  EXPECT(vt_variant_pick(3, odd, ms, &agree) == 2 && agree == 0,
         "variant pick: the fastest that disagrees with the first must not be kept");
  EXPECT(vt_variant_pick(3, first_alone, ms, &agree) == 0 && agree == 0,
         "variant pick: the first where no other agrees with it");
  EXPECT(vt_variant_pick(1, same, ms, &agree) == 0 && agree == 1, "variant pick: one candidate");
}

int main(void) {
  test_philox();
  test_freeze();
  test_mix();
  test_erase();
  test_drop_path_masks();
  test_dropout_masks();
  test_param_counts();
  test_stage_blocks();
  test_param_runs();
  test_init();
  test_schedule();
  test_adamw();
  test_ema_decay();
  test_gelu();
  test_synthetic();
  test_variant_pick();
  test_spike();
  if (failures) printf("%d unit check(s) FAILED\n", failures);
  else printf("all unit checks passed\n");
  return failures ? 1 : 0;
}
