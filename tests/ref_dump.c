// ref_dump.c: runs a small vit3d model for 5 optimizer steps on the CPU backend, exactly as
// launch/train.c does (with drop path, Mixup and CutMix, layer-wise lr decay, the weights' EMA),
// and writes everything the PyTorch reference (tests/ref_vit.py) needs to one safetensors file:
// initial weights, data (raw and mixed images, each pair's mixing), step-0 logits/loss/gradients,
// per-step lr, grad norm and loss, the final weights and their EMA.
// Usage: ref_dump OUT.safetensors [VARIANT]: avg the mean-pooled head; ls LayerScale, 2
// register tokens, positions on the patch tokens only and the mean-pooled head (DeiT III and
// DINOv2's options); reg 3 register tokens with positions, the class-token head; qk QK-norm
// without the qkv bias (ViT-22B's attention) and LayerScale; par parallel blocks (ViT-22B) with
// LayerScale, dropout 0.2 of the MLP's hidden units (timm's ParallelScalingBlock) and 0.1 of the
// attention's probabilities; bce
// binary cross-entropy (timm's --bce-loss) instead of the softmax one, bcet the same with
// binary targets (those over 0.3, timm's --bce-target-thresh); lamb the LAMB optimizer (timm's
// Lamb) instead of AdamW; drop dropout (proj_drop 0.2, attn_drop 0.2, pos_drop 0.1,
// drop_rate 0.3, with LayerScale; the PyTorch side draws its own masks); sincos big_vision's
// fixed 2D sin-cos positions with the gap head and no class token (its "Better plain ViT
// baselines" model; the PyTorch side makes its own table); emaw the weights' EMA with timm's
// ModelEmaV3 warmup; pre big_vision's pre-logits layer (64 wide, tanh) with the gap head and
// dropout 0.3 of its output; sgd SGD with Nesterov momentum 0.8 (timm's --opt sgd), mom with
// plain momentum (--opt momentum), L2 weight decay and layer decay as the AdamW run's; clip the
// CLIP image towers' layout (norm_pre before the blocks, every LayerNorm's eps 1e-5, quick GELU).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mix.h"
#include "model.h"
#include "optim.h"
#include "safetensors.h"
#include "synthetic.h"

enum { STEPS = 5, GLOBAL = 6, MICRO = 2 };
static const uint64_t SEED = 1234;
static const float SMOOTHING = 0.1f;
static const float SGD_LR = 1000.0f, SGD_CLIP = 5.0f;  // the SGD variants' (below)
// Drop path: with depth 3, block 0 keeps both branches (the fused residual GEMMs), blocks 1 and 2
// drop them with probability 0.25 and 0.5 (the PyTorch side draws its own masks, tests/ref_vit.py).
static const float DROP_PATH = 0.5f;
// Mixup and CutMix of pairs (2k, 2k+1); the reference mixes the raw images itself from each pair's
// lam and box and builds timm's mixed, smoothed targets.
static const vt_mix_config MIX = {.mixup_alpha = 0.8f, .cutmix_alpha = 1.0f, .prob = 0.8f,
                                  .switch_prob = 0.5f};

// The output list owns copies of everything, so tensors can be snapshotted at any moment.
typedef struct {
  vt_st_tensor t[512];
  int n;
} out_list;

static void *push(out_list *o, const char *prefix, const char *name, const char *dtype,
                  int ndim, const int64_t *shape) {
  VT_CHECK(o->n < 512, "too many tensors for ref_dump");
  vt_st_tensor *t = &o->t[o->n++];
  size_t len = strlen(prefix) + strlen(name) + 1;
  char *full = malloc(len);
  int64_t count = 1;
  for (int i = 0; i < ndim; i++) count *= (t->shape[i] = shape[i]);
  void *data = calloc((size_t)count, 4);
  VT_CHECK(full && data, "out of host memory");
  snprintf(full, len, "%s%s", prefix, name);
  t->name = full, t->dtype = dtype, t->ndim = ndim, t->data = data;
  return data;
}

// One tensor per parameter, copied from a flat backend buffer, under timm's name and shape.
// Every tensor of flat, which holds the table's elements from `first` on (those before it, a
// frozen prefix's gradients, are written as zeros: no backward reaches them).
static void push_params(out_list *o, const vt_model *m, const char *prefix, const float *flat,
                        int64_t first) {
  for (int i = 0; i < m->table.count; i++) {
    const vt_param *p = &m->table.p[i];
    void *dst = push(o, prefix, p->name, "F32", p->ndim, p->shape);
    if (p->offset < first) memset(dst, 0, (size_t)p->count * sizeof(float));
    else m->be->to_host(dst, flat + (p->offset - first), (size_t)p->count * sizeof(float));
  }
}

int main(int argc, char **argv) {
  const char *variant = argc == 3 ? argv[2] : "";
  if (argc < 2 || argc > 3 ||
      (argc == 3 && strcmp(variant, "avg") && strcmp(variant, "ls") && strcmp(variant, "reg") &&
       strcmp(variant, "qk") && strcmp(variant, "par") && strcmp(variant, "bce") &&
       strcmp(variant, "bcet") && strcmp(variant, "lamb") && strcmp(variant, "gap") &&
       strcmp(variant, "map") && strcmp(variant, "tanh") && strcmp(variant, "drop") &&
       strcmp(variant, "sincos") && strcmp(variant, "emaw") && strcmp(variant, "pre") &&
       strcmp(variant, "sgd") && strcmp(variant, "mom") && strcmp(variant, "clip") &&
       strcmp(variant, "frz") && strcmp(variant, "frzl") && strcmp(variant, "lars") &&
       strcmp(variant, "larc"))) {
    fprintf(stderr,
            "usage: %s OUT.safetensors [avg|ls|reg|qk|par|bce|bcet|lamb|gap|map|tanh|drop|sincos|"
            "emaw|pre|sgd|mom|clip|frz|frzl|lars|larc]\n",
            argv[0]);
    return 2;
  }
  const char *why = NULL;
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, &why);
  VT_CHECK(be != NULL, "no CPU backend: %s", why);
  vt_backend_set_threads(2);

  vt_vit_config cfg = {.name = "ref", .img_size = 32, .patch_size = 8, .width = 48, .depth = 3,
                       .heads = 3, .mlp_ratio = 4.0f, .num_classes = 10,
                       .global_pool = !strcmp(variant, "avg") || !strcmp(variant, "ls")};
  if (!strcmp(variant, "ls"))  // gammas well away from 0, so each branch weighs in the check
    cfg.layer_scale = 0.3f, cfg.reg_tokens = 2, cfg.no_embed_class = 1;
  if (!strcmp(variant, "reg")) cfg.reg_tokens = 3;
  if (!strcmp(variant, "qk")) cfg.qk_norm = 1, cfg.no_qkv_bias = 1, cfg.layer_scale = 0.5f;
  if (!strcmp(variant, "par")) cfg.parallel = 1, cfg.layer_scale = 0.4f;
  if (!strcmp(variant, "gap")) cfg.global_pool = 2, cfg.no_class_token = 1, cfg.reg_tokens = 2;
  if (!strcmp(variant, "map")) cfg.global_pool = 3, cfg.no_class_token = 1, cfg.reg_tokens = 1;
  if (!strcmp(variant, "tanh")) cfg.gelu_tanh = 1, cfg.global_pool = 3;  // blocks' and MAP's MLPs
  if (!strcmp(variant, "drop")) cfg.layer_scale = 0.3f;
  if (!strcmp(variant, "sincos")) cfg.pos_sincos = 1, cfg.global_pool = 2, cfg.no_class_token = 1;
  if (!strcmp(variant, "pre")) cfg.pre_logits = 64, cfg.global_pool = 2, cfg.no_class_token = 1;
  if (!strcmp(variant, "clip")) cfg.pre_norm = 1, cfg.norm_eps = 1e-5f, cfg.quick_gelu = 1;
  char err[256];
  VT_CHECK(vt_config_validate(&cfg, err, sizeof err) == VT_OK, "%s", err);
  vt_optim_config oc = {.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = 2, .total_steps = STEPS,
                        .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.05f,
                        .clip_grad = 0.5f, .layer_decay = 0.75f, .depth = 3,
                        .ema_decay = 0.9f,
                        .kind = !strcmp(variant, "lamb")  ? VT_OPT_LAMB
                                : !strcmp(variant, "sgd") || !strcmp(variant, "mom") ? VT_OPT_SGD
                                : !strcmp(variant, "lars") || !strcmp(variant, "larc") ? VT_OPT_LARS
                                                                  : VT_OPT_ADAMW,
                        .momentum = 0.8f,
                        .nesterov = !strcmp(variant, "sgd") || !strcmp(variant, "lars"),
                        .trust_clip = !strcmp(variant, "larc"),
                        .ema_warmup = !strcmp(variant, "emaw")};
  // SGD's steps are lr times the (clipped) gradient, far smaller than Adam's at the same rate:
  // SGD_LR times the rate and clipping at SGD_CLIP give LayerNorm weights updates that their
  // fp32 storage does not drown.
  // LARS (Nesterov's, timm's nlars) likewise: its decayed tensors step by about 0.001 ||w|| lr.
  // LARC (plain momentum, timm's larc) steps a decayed tensor by min(trust, lr) (g + wd w): at
  // these rates (0.26 to 1) above every trust ratio (at most 0.001 / wd = 0.02) its steps are
  // trust (g + wd w), not LARS's lr trust (g + wd w); the other side of the min, and its tensors
  // with a zero norm, test_optim and timm_check check.
  if (oc.kind == VT_OPT_SGD || oc.kind == VT_OPT_LARS)
    oc.lr *= SGD_LR, oc.min_lr *= SGD_LR, oc.clip_grad = SGD_CLIP;
  // Frozen tensors: the embeddings and the first block (AdamW), or all but the last block, the
  // final norm and the head (LAMB, by --trainable's complement).
  if (!strcmp(variant, "frz"))
    snprintf(oc.freeze, sizeof oc.freeze, "^(patch_embed|pos_embed|cls_token|blocks\\.0\\.)");
  if (!strcmp(variant, "frzl")) {
    oc.kind = VT_OPT_LAMB;
    snprintf(oc.trainable, sizeof oc.trainable, "^(blocks\\.2\\.|norm\\.|head\\.)");
  }
  const int S = cfg.img_size, K = cfg.num_classes;
  const int64_t img_elems = 3 * (int64_t)S * S;

  vt_model m;
  // (both frozen variants freeze a prefix)
  vt_model_init(&m, &cfg, vt_shard_whole(), NULL, MICRO, 1, 0, 0,
                vt_freeze_leading_layers(&oc, &cfg), be, SEED);
  m.drop_path = DROP_PATH;
  m.mix = 1;
  m.bce = !strcmp(variant, "bce") || !strcmp(variant, "bcet");
  if (!strcmp(variant, "bcet")) m.bce_thresh = 0.3f;
  if (!strcmp(variant, "drop"))
    m.proj_drop = 0.2f, m.attn_drop = 0.2f, m.pos_drop = 0.1f, m.head_drop = 0.3f;
  if (!strcmp(variant, "par")) m.proj_drop = 0.2f, m.attn_drop = 0.1f;  // proj: hidden units only
  if (!strcmp(variant, "pre")) m.head_drop = 0.3f;  // over the pre-logits' R outputs
  vt_optimizer opt;
  vt_optimizer_init(&opt, &oc, be, &m.table, NULL, NULL, NULL, 0, m.grad_first);
  vt_optimizer_ema_reset(&opt, m.params);

  out_list o = {.n = 0};
  push_params(&o, &m, "init.", m.params, 0);
  float *images = push(&o, "", "images", "F32", 4, (int64_t[]){STEPS * GLOBAL, 3, S, S});
  float *raw = push(&o, "", "images_raw", "F32", 4, (int64_t[]){STEPS * GLOBAL, 3, S, S});
  float *mix_lam = push(&o, "", "mix_lam", "F32", 1, (int64_t[]){STEPS * GLOBAL / 2});
  int32_t *mix_box = push(&o, "", "mix_box", "I32", 2, (int64_t[]){STEPS * GLOBAL / 2, 5});
  vt_mix_target targets[MICRO];
  int32_t *labels = push(&o, "", "labels", "I32", 1, (int64_t[]){STEPS * GLOBAL});
  float *logits0 = push(&o, "", "logits", "F32", 2, (int64_t[]){GLOBAL, K});
  float *loss0 = push(&o, "", "loss", "F32", 1, (int64_t[]){1});
  float *lrs = push(&o, "", "lr", "F32", 1, (int64_t[]){STEPS});
  float *norms = push(&o, "", "grad_norm", "F32", 1, (int64_t[]){STEPS});
  float *losses = push(&o, "", "loss_per_step", "F32", 1, (int64_t[]){STEPS});
  if (m.bce)  // the marker, holding the binary targets' threshold (negative: soft targets)
    *(float *)push(&o, "", "bce", "F32", 1, (int64_t[]){1}) = m.bce_thresh;
  if (oc.kind == VT_OPT_LAMB) *(float *)push(&o, "", "lamb", "F32", 1, (int64_t[]){1}) = 1.0f;
  if (oc.kind == VT_OPT_SGD || oc.kind == VT_OPT_LARS) {
    // the marker ("sgd" or "lars"): 2 Nesterov or 1 plain momentum (+ 2 with LARC's
    // clipping), the rates' factor, the clipping norm
    float *sgd = push(&o, "", oc.kind == VT_OPT_LARS ? "lars" : "sgd", "F32", 1, (int64_t[]){3});
    sgd[0] = 1.0f + (float)oc.nesterov + 2.0f * (float)oc.trust_clip;
    sgd[1] = SGD_LR, sgd[2] = SGD_CLIP;
  }
  if (cfg.global_pool == 2) *(float *)push(&o, "", "gap", "F32", 1, (int64_t[]){1}) = 1.0f;
  if (cfg.gelu_tanh) *(float *)push(&o, "", "gelu_tanh", "F32", 1, (int64_t[]){1}) = 1.0f;
  if (cfg.quick_gelu) *(float *)push(&o, "", "quick_gelu", "F32", 1, (int64_t[]){1}) = 1.0f;
  if (cfg.pos_sincos) *(float *)push(&o, "", "pos_sincos", "F32", 1, (int64_t[]){1}) = 1.0f;
  if (vt_cfg_norm_eps(&cfg) != 1e-6f)  // the marker, holding the LayerNorms' eps
    *(float *)push(&o, "", "norm_eps", "F32", 1, (int64_t[]){1}) = vt_cfg_norm_eps(&cfg);
  if (oc.ema_warmup) *(float *)push(&o, "", "ema_warmup", "F32", 1, (int64_t[]){1}) = 1.0f;
  for (int i = 0; i < m.table.count; i++)  // the markers: one per frozen tensor
    if (opt.frozen[i]) {
      char name[80];
      snprintf(name, sizeof name, "frozen.%s", m.table.p[i].name);
      *(float *)push(&o, "", name, "F32", 1, (int64_t[]){1}) = 1.0f;
    }
  if (m.proj_drop > 0 || m.attn_drop > 0 || m.pos_drop > 0 || m.head_drop > 0) {
    float *rates = push(&o, "", "dropout", "F32", 1, (int64_t[]){4});  // the marker: the rates
    rates[0] = m.proj_drop, rates[1] = m.pos_drop, rates[2] = m.head_drop, rates[3] = m.attn_drop;
  }

  int clipped = 0;
  for (int64_t step = 0; step < STEPS; step++) {
    be->zero(m.grads, vt_model_grad_nbytes(&m));
    double loss_sum = 0.0;
    for (int mb = 0; mb < GLOBAL / MICRO; mb++) {
      const int64_t first = step * GLOBAL + (int64_t)mb * MICRO;
      for (int b = 0; b < MICRO; b++)
        vt_synthetic_sample(SEED, first + b, S, K, images + (first + b) * img_elems,
                            &labels[first + b]);
      memcpy(raw + first * img_elems, images + first * img_elems, MICRO * img_elems * 4);
      vt_mix_batch(&MIX, SEED, first, MICRO, S, images + first * img_elems, labels + first,
                   targets);
      for (int b = 0; b < MICRO; b += 2) {
        vt_mix_pair p;
        const int64_t k = (first + b) / 2;
        vt_mix_pair_params(&MIX, SEED, k, S, &p);
        mix_lam[k] = p.lam;
        memcpy(mix_box + 5 * k, (int32_t[]){p.cutmix, p.y0, p.y1, p.x0, p.x1}, 20);
      }
      be->to_device(m.slots[0].img, images + first * img_elems, (size_t)(MICRO * img_elems) * 4);
      be->to_device(m.slots[0].labels, labels + first, MICRO * sizeof(int32_t));
      be->to_device(m.slots[0].mix, targets, sizeof targets);
      vt_model_forward(&m, 0, 0, MICRO, SMOOTHING, first);
      loss_sum += vt_model_loss_sum(&m, 0, MICRO);
      if (step == 0)
        be->to_host(logits0 + (int64_t)mb * MICRO * K, m.slots[0].logits, (size_t)MICRO * K * 4);
      vt_model_backward(&m, 0, 0, -1, MICRO, SMOOTHING, 1.0f / (float)GLOBAL);
    }
    const float lr = vt_lr_at(&oc, step);
    if (step == 0) {
      loss0[0] = (float)(loss_sum / GLOBAL);
      push_params(&o, &m, "grad.", m.grads, m.grad_first);  // before the step clips them
    }
    const double gnorm = vt_optimizer_step(&opt, m.params, m.grads, lr);
    lrs[step] = lr, norms[step] = (float)gnorm, losses[step] = (float)(loss_sum / GLOBAL);
    clipped += gnorm > oc.clip_grad;
    printf("step %lld: loss %.6f lr %.3e grad_norm %.6f%s\n", (long long)step,
           loss_sum / GLOBAL, lr, gnorm, gnorm > oc.clip_grad ? " (clipped)" : "");
  }
  push_params(&o, &m, "final.", m.params, 0);
  vt_optimizer_ema_full(&opt, m.params, m.params);  // the whole EMA, in the weights' place
  push_params(&o, &m, "ema.", m.params, 0);
  printf("clipping active on %d of %d steps\n", clipped, STEPS);
  // The reference is only meaningful for clipping if it happened at least once.
  VT_CHECK(clipped > 0, "clip_grad %.2f never triggered; the reference would not test it",
           oc.clip_grad);

  vt_status st = vt_safetensors_write(argv[1], o.t, o.n, err, sizeof err);
  if (st != VT_OK) fprintf(stderr, "ref_dump: %s\n", err);
  else printf("wrote %d tensors to %s\n", o.n, argv[1]);
  for (int i = 0; i < o.n; i++) free((void *)o.t[i].name), free((void *)o.t[i].data);
  vt_optimizer_free(&opt);
  vt_model_free(&m);
  return st == VT_OK ? 0 : 1;
}
