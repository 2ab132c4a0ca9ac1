// init_from.c: --init-from, a model's weights from a timm-format safetensors file: the variant
// check, pos_embed's resampling to another patch grid, the parts that start fresh (another class
// count, a pretraining checkpoint's missing head) and the file's tensors the model leaves unused.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "comm.h"
#include "export.h"
#include "safetensors.h"

// PyTorch's antialiased bicubic filter (Keys' cubic convolution with a = -0.5, as PIL).
static double aa_cubic(double x) {
  const double a = -0.5;
  x = fabs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// Weights of output index i along an axis resized from n_in to n_out, as PyTorch's
// interpolate(mode="bicubic", antialias=True, align_corners=False) computes them: the filter
// is stretched by the scale when shrinking, its window is cut at the borders and the weights
// are renormalised to sum to 1. Writes w[0..count) for inputs first, first+1, ...
static int aa_weights(int n_in, int n_out, int i, int *first, double *w, int wmax) {
  const double scale = (double)n_in / n_out, support = scale >= 1 ? 2 * scale : 2.0;
  const double inv = scale >= 1 ? 1 / scale : 1.0, center = scale * (i + 0.5);
  int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
  lo = lo < 0 ? 0 : lo;
  hi = hi > n_in ? n_in : hi;
  int count = hi - lo < wmax ? hi - lo : wmax;
  double total = 0;
  for (int j = 0; j < count; j++) total += w[j] = aa_cubic((lo + j - center + 0.5) * inv);
  for (int j = 0; j < count && total != 0; j++) w[j] /= total;
  *first = lo;
  return count;
}

// pos_embed (1, pr + g0*g0, C) -> (1, pr + g1*g1, C): the pr rows of the prefix tokens (the
// class token and registers, none with no_embed_class) kept, the grid resampled as timm's
// resample_abs_pos_embed does when the image or patch size changes (bicubic, antialias=True;
// checked against PyTorch by tests/test_export.sh, up and down).
static void resample_pos(const float *src, int g0, float *dst, int g1, int pr, int C) {
  memcpy(dst, src, (size_t)pr * C * sizeof(float));
  // At most g0 taps per axis (the window never leaves the input).
  double *wy = malloc((size_t)g0 * sizeof(double)), *wx = malloc((size_t)g0 * sizeof(double));
  double *acc = malloc((size_t)C * sizeof(double));
  VT_CHECK(wy && wx && acc, "out of host memory");
  for (int y = 0; y < g1; y++) {
    int y0, x0;
    const int ny = aa_weights(g0, g1, y, &y0, wy, g0);
    for (int x = 0; x < g1; x++) {
      const int nx = aa_weights(g0, g1, x, &x0, wx, g0);
      for (int c = 0; c < C; c++) acc[c] = 0;
      for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) {
          const double w = wy[i] * wx[j];
          const float *in = src + (size_t)(pr + (y0 + i) * g0 + x0 + j) * C;
          for (int c = 0; c < C; c++) acc[c] += w * in[c];
        }
      float *out = dst + (size_t)(pr + y * g1 + x) * C;
      for (int c = 0; c < C; c++) out[c] = (float)acc[c];
    }
  }
  free(wy), free(wx), free(acc);
}

// A file made for another kind or size of ViT than the configuration: parallel blocks,
// LayerScale gammas, QK-norm, the qkv bias, the class token, register tokens, a MAP head
// (attn_pool) or a pre-logits layer on the file's side only, or one of another width; then
// another width, patch, MLP width or depth. Loading the rest would silently drop what the file
// learned (a deeper file's last blocks), so it is refused with the flag that matches the file.
// (A MAP head or pre-logits layer the file lacks starts fresh, as a head does:
// vt_model_init_from.)
static vt_status check_variant(const vt_st_file *f, const vt_vit_config *c, const char *path,
                               char *err, size_t errlen) {
  // A file of no timm ViT at all (names under a prefix such as DDP's module., vit3d's
  // optim.safetensors, a logits dump): each variant check below would blame a flag for the
  // tensor it misses, and lead the user astray.
  if (!vt_st_find(f, "patch_embed.proj.weight") || !vt_st_find(f, "blocks.0.attn.qkv.weight")) {
    char names[240] = "", prefix[64] = "";
    for (int i = 0; i < f->count && i < 4; i++) {
      const size_t at = strlen(names);
      snprintf(names + at, sizeof names - at, "%s%.50s", i ? ", " : "", f->entries[i].name);
    }
    for (int i = 0; i < f->count && !prefix[0]; i++) {  // timm's name under a prefix
      const char *hit = strstr(f->entries[i].name, "patch_embed.proj.weight");
      if (hit && hit > f->entries[i].name && hit[-1] == '.')
        snprintf(prefix, sizeof prefix, "%.*s", (int)(hit - f->entries[i].name) < 61
                 ? (int)(hit - f->entries[i].name) - 1 : 60, f->entries[i].name);
    }
    char said[160] = "";
    if (!strcmp(prefix, "exp_avg") || !strcmp(prefix, "exp_avg_sq") ||
        !strcmp(prefix, "momentum_buffer") || (f->count && !strncmp(f->entries[0].name,
                                                                     "exp_avg.", 8)))
      snprintf(said, sizeof said, " (a vit3d checkpoint's optimizer state: its weights are the "
               "model.safetensors beside it)");
    else if (prefix[0])
      snprintf(said, sizeof said, " (timm's names under the prefix '%s.')", prefix);
    snprintf(err, errlen, "%s holds no timm ViT tensors: no patch_embed.proj.weight or "
             "blocks.0.attn.qkv.weight among its %d (the first: %s%s)%s. --init-from takes "
             "timm-named weights: a vit3d checkpoint's model.safetensors or vit3d export's "
             "file; python3 launch/convert_weights.py IN OUT.safetensors turns other projects' "
             "checkpoints into one (stripping prefixes such as module.)", path, f->count,
             names[0] ? names : "none", f->count > 4 ? ", ..." : "", said);
    return VT_ERR_INPUT;
  }
  if (vt_st_find(f, "dist_token")) {  // its pos_embed has a row more: no flag fits it
    snprintf(err, errlen, "%s is a distilled DeiT (dist_token, head_dist): vit3d builds no "
             "distillation token; start from a DeiT without it (deit_*_patch16_224) or drop "
             "dist_token, head_dist and pos_embed's second row from the file", path);
    return VT_ERR_INPUT;
  }
  const int file_ls = vt_st_find(f, "blocks.0.ls1.gamma") || vt_st_find(f, "blocks.0.ls.gamma");
  const int file_parallel = vt_st_find(f, "blocks.0.norm1.weight") &&
                            !vt_st_find(f, "blocks.0.norm2.weight");
  if (file_parallel != c->parallel) {
    snprintf(err, errlen, "%s holds %s blocks (%s); pass --parallel-blocks %d", path,
             file_parallel ? "parallel" : "sequential",
             file_parallel ? "norm1 but no norm2" : "norm1 and norm2", file_parallel);
    return VT_ERR_INPUT;
  }
  const vt_st_entry *reg = vt_st_find(f, "reg_token");
  const int file_regs = reg && reg->ndim == 3 ? (int)reg->shape[1] : 0;
  if (file_ls != (c->layer_scale > 0)) {
    snprintf(err, errlen,
             "%s %s LayerScale gammas (blocks.N.ls1.gamma: DeiT III, CaiT, DINOv2); %s", path,
             file_ls ? "has" : "has no",
             file_ls ? "pass --layer-scale G (any G > 0: the gammas are loaded)"
                     : "pass --layer-scale 0");
    return VT_ERR_INPUT;
  }
  const int file_qkn = vt_st_find(f, "blocks.0.attn.q_norm.weight") != NULL;
  const int file_bias = vt_st_find(f, "blocks.0.attn.qkv.bias") != NULL;
  if (file_qkn != c->qk_norm || file_bias != !c->no_qkv_bias) {
    snprintf(err, errlen, "%s has %s QK-norm (blocks.N.attn.q_norm) and %s qkv bias; pass "
             "--qk-norm %d --qkv-bias %d", path, file_qkn ? "a" : "no",
             file_bias ? "a" : "no", file_qkn, file_bias);
    return VT_ERR_INPUT;
  }
  const int file_map = vt_st_find(f, "attn_pool.latent") != NULL;
  if (file_map && c->global_pool != 3) {
    snprintf(err, errlen, "%s has a MAP head (attn_pool: SigLIP, big_vision's map); pass "
             "--global-pool map", path);
    return VT_ERR_INPUT;
  }
  const vt_st_entry *pre = vt_st_find(f, "pre_logits.fc.weight");
  const int file_pre = pre && pre->ndim == 2 ? (int)pre->shape[0] : 0;
  if (file_pre && file_pre != c->pre_logits) {
    snprintf(err, errlen, "%s has a pre-logits layer of width %d (pre_logits.fc: big_vision's "
             "rep_size); pass --pre-logits %d", path, file_pre, file_pre);
    return VT_ERR_INPUT;
  }
  const int file_cls = vt_st_find(f, "cls_token") != NULL;
  if (file_cls != !c->no_class_token) {
    snprintf(err, errlen, "%s has %s class token (cls_token); pass --class-token %d%s", path,
             file_cls ? "a" : "no", file_cls,
             file_cls || c->global_pool != 0 ? ""
             : vt_st_find(f, "fc_norm.weight") ? " and --global-pool avg"
                                                : " and --global-pool gap (or map)");
    return VT_ERR_INPUT;
  }
  if (file_regs != c->reg_tokens) {
    snprintf(err, errlen, "%s has %d register tokens (reg_token); pass --reg-tokens %d", path,
             file_regs, file_regs);
    return VT_ERR_INPUT;
  }
  const int file_pre_norm = vt_st_find(f, "norm_pre.weight") != NULL;
  if (file_pre_norm != c->pre_norm) {
    snprintf(err, errlen, "%s has %s norm_pre (a LayerNorm before the blocks: the CLIP image "
             "towers); pass --pre-norm %d%s", path, file_pre_norm ? "a" : "no", file_pre_norm,
             file_pre_norm ? " (with --norm-eps 1e-5 for CLIP's nn.LayerNorm)" : "");
    return VT_ERR_INPUT;
  }
  // The sizes the file's tensors give away: width and patch (patch_embed.proj), the MLP's hidden
  // width (fc1), the depth (the highest block index). Heads and the image size are not in the
  // shapes.
  const vt_st_entry *pe = vt_st_find(f, "patch_embed.proj.weight");
  if (pe && pe->ndim == 4 && (pe->shape[0] != c->width || pe->shape[2] != c->patch_size)) {
    snprintf(err, errlen, "%s holds a model of width %lld and patch %lld (patch_embed.proj); "
             "pass --width %lld --patch-size %lld (and heads that divide the width)", path,
             (long long)pe->shape[0], (long long)pe->shape[2], (long long)pe->shape[0],
             (long long)pe->shape[2]);
    return VT_ERR_INPUT;
  }
  const vt_st_entry *fc1 = vt_st_find(f, "blocks.0.mlp.fc1.weight");
  if (fc1 && fc1->ndim == 2 && fc1->shape[0] != vt_cfg_mlp_hidden(c)) {
    snprintf(err, errlen, "%s has an MLP %lld wide (blocks.N.mlp.fc1), this model %d; pass "
             "--mlp-dim %lld", path, (long long)fc1->shape[0], vt_cfg_mlp_hidden(c),
             (long long)fc1->shape[0]);
    return VT_ERR_INPUT;
  }
  int depth = 0;
  for (int i = 0; i < f->count; i++) {
    int b;
    if (sscanf(f->entries[i].name, "blocks.%d.", &b) == 1 && b >= depth) depth = b + 1;
  }
  if (depth > 0 && depth != c->depth) {
    snprintf(err, errlen, "%s holds %d blocks (blocks.0 to blocks.%d), this model %d; pass "
             "--depth %d", path, depth, depth - 1, c->depth, depth);
    return VT_ERR_INPUT;
  }
  return VT_OK;
}

// The top tensors a pretraining checkpoint may lack (they start fresh), each its own bit.
static const char *const k_top[4] = {"head.weight", "head.bias", "fc_norm.weight",
                                     "fc_norm.bias"};

// The first element of [local, local + t->total) that is not finite, as its tensor's name and
// index; 0 when all are.
static int first_nonfinite(const vt_param_table *t, const float *local, const char **name,
                           int64_t *at) {
  for (int i = 0; i < t->count; i++) {
    const vt_param *p = &t->p[i];
    for (int64_t j = 0; j < p->local_count; j++)
      if (!isfinite(local[p->offset + j])) {
        *name = p->name, *at = j;
        return 1;
      }
  }
  return 0;
}

vt_status vt_model_init_from(vt_model *m, vt_comm *world, const char *path, int whole, char *err,
                             size_t errlen) {
  const vt_param_table *t = &m->table;
  const int C = m->cfg.width, K = m->cfg.num_classes, g1 = m->cfg.img_size / m->cfg.patch_size;
  float *local = malloc((size_t)t->total * sizeof(float));
  VT_CHECK(local != NULL, "out of host memory for --init-from");
  m->be->to_host(local, m->params, (size_t)t->total * sizeof(float));  // the fresh initialisation
  vt_st_file f;
  memset(&f, 0, sizeof f);
  struct stat sb;
  vt_status st = VT_OK;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {  // (the reader would say "not a file")
    char weights[1200] = "";
    int64_t newest = -1;
    if (vt_ckpt_is_checkpoint(path))
      snprintf(weights, sizeof weights, ": pass this checkpoint's weights, %.1000s/"
               "model.safetensors (--resume continues its training instead)", path);
    else if (vt_ckpt_candidates(path, &newest, 1) > 0)
      snprintf(weights, sizeof weights, ": pass a checkpoint's weights, as the newest's "
               "%.1000s/step-%08lld/model.safetensors", path, (long long)newest);
    snprintf(err, errlen, "%s is a folder; --init-from takes a safetensors file%s", path,
             weights);
    st = VT_ERR_INPUT;
  }
  if (st == VT_OK) st = vt_safetensors_open(path, &f, err, errlen);  // this rank's tensors only
  if (st == VT_OK) st = check_variant(&f, &m->cfg, path, err, errlen);
  // Which of the file's tensors this rank used or deliberately left (the same header on every
  // rank: the ranks' marks are added up below).
  const int nentries = st == VT_OK ? f.count : 0;
  double *flags = calloc((size_t)(10 + nentries), sizeof *flags), *used = flags + 10;
  VT_CHECK(flags != NULL, "out of host memory for --init-from");
  // pos_embed's rows before the patch grid: the prefix tokens', unless no_embed_class
  const int pr = vt_cfg_pos_first(&m->cfg) ? 0 : vt_cfg_prefix_tokens(&m->cfg);
  int resampled = 0, new_head = 0, fresh_top = 0, fresh_map = 0, fixed_pos = 0;
  const int file_map = st == VT_OK && vt_st_find(&f, "attn_pool.latent") != NULL;
  // A pre-logits layer the file lacks starts fresh, and so does the head behind it (whose input
  // it changes).
  const int fresh_pre = st == VT_OK && m->cfg.pre_logits > 0 &&
                        vt_st_find(&f, "pre_logits.fc.weight") == NULL;
  for (int i = 0; st == VT_OK && i < t->count; i++) {
    const vt_param *p = &t->p[i];
    const vt_st_entry *e = vt_st_find(&f, p->name);
    if (e) used[e - f.entries] = 1;
    const int top = strncmp(p->name, "head.", 5) == 0 || strncmp(p->name, "fc_norm.", 8) == 0;
    if (top && !e) {  // a pretraining checkpoint (MAE's has neither): they start fresh
      for (int k = 0; k < 4; k++) fresh_top |= !strcmp(p->name, k_top[k]) << k;
      continue;
    }
    if (strncmp(p->name, "attn_pool.", 10) == 0 && !file_map) {  // a MAP head on another model
      fresh_map = 1;
      continue;
    }
    if (fresh_pre &&
        (strncmp(p->name, "pre_logits.", 11) == 0 || strncmp(p->name, "head.", 5) == 0))
      continue;
    // Another class count (the rest of the shape the model's: a head stored otherwise, as a
    // kernel not transposed, is refused by the shape check below): keep the fresh head.
    if (strncmp(p->name, "head.", 5) == 0 && e && e->ndim == p->ndim && e->shape[0] != K &&
        (p->ndim < 2 || e->shape[1] == p->shape[1])) {
      new_head = 1;
      continue;
    }
    if (strcmp(p->name, "pos_embed") == 0 && m->cfg.pos_sincos) {
      fixed_pos = e != NULL;  // fixed sin-cos positions: the table for this grid, whatever the file
      continue;
    }
    float *owned = NULL;
    const float *pos = NULL;
    if (strcmp(p->name, "pos_embed") == 0 && e && e->ndim == 3 && e->shape[0] == 1 &&
        e->shape[2] == C && e->shape[1] != p->shape[1]) {
      char why[300] = "";
      if (vt_params_entry_floats(&f, e, &pos, &owned, why, sizeof why) != VT_OK) {
        snprintf(err, errlen, "%s: %s", path,
                 why[0] ? why : "pos_embed is not F32, F16, BF16 or F64");
        st = VT_ERR_INPUT;
        break;
      }
      int g0 = (int)lround(sqrt((double)(e->shape[1] - pr)));
      if (e->shape[1] <= pr || (int64_t)g0 * g0 + pr != e->shape[1]) {
        // (the other --no-embed-class is named only where its prefix leaves a square grid)
        const int alt = pr ? 0 : !m->cfg.no_class_token + m->cfg.reg_tokens;
        const int ga = (int)lround(sqrt((double)(e->shape[1] - alt)));
        char hint[128] = "; vit3d's models have square grids of patches";
        if (e->shape[1] > alt && (int64_t)ga * ga + alt == e->shape[1])
          snprintf(hint, sizeof hint, "; if its positions %s the prefix tokens, pass "
                   "--no-embed-class %d", pr ? "skip" : "include", pr ? 1 : 0);
        snprintf(err, errlen, "%s: pos_embed of %lld tokens is not %d prefix token%s plus a "
                 "square grid%s", path, (long long)e->shape[1], pr, pr == 1 ? "" : "s", hint);
        st = VT_ERR_INPUT;
        free(owned);
        break;
      }
      resample_pos(pos, g0, local + p->offset, g1, pr, C);
      free(owned);
      resampled = g0;
      continue;
    }
    vt_param_table one = {.p = (vt_param *)p, .count = 1, .total = t->total, .shard = t->shard};
    st = vt_params_read_local(&f, path, &one, "", 0, local, NULL, err, errlen);
  }
  const char *bad_name = NULL;
  int64_t bad_at = 0;
  if (st == VT_OK && first_nonfinite(t, local, &bad_name, &bad_at)) {
    snprintf(err, errlen, "%s: %s holds a value that is not finite (element %lld): the file is "
             "damaged or was saved after training diverged", path, bad_name, (long long)bad_at);
    st = VT_ERR_INPUT;
  }
  // The verdict, with the lowest failing rank's message (the head and the last blocks live on
  // the last stage only); then what each did, over the file's tensors as every rank counts them.
  st = vt_comm_agree(world, st, err, errlen);
  flags[0] = resampled, flags[1] = new_head, flags[2] = fresh_map, flags[3] = fresh_pre;
  for (int k = 0; k < 4; k++) flags[4 + k] = fresh_top >> k & 1;
  flags[8] = nentries, flags[9] = -nentries;
  if (st == VT_OK) vt_comm_all_reduce_double(world, flags, 10, VT_REDUCE_MAX);
  if (st == VT_OK && flags[8] != -flags[9]) {
    snprintf(err, errlen, "the ranks read different files at %s (%.0f to %.0f tensors): give a "
             "path all ranks share", path, -flags[9], flags[8]);
    st = VT_ERR_INPUT;
  }
  if (st == VT_OK) vt_comm_all_reduce_double(world, used, nentries, VT_REDUCE_MAX);
  resampled = (int)flags[0], new_head = (int)flags[1], fresh_map = (int)flags[2];
  char fresh[160] = "";  // the top tensors that start fresh
  for (int k = 0; k < 4; k++)
    if (flags[4 + k])
      snprintf(fresh + strlen(fresh), sizeof fresh - strlen(fresh), "%s%s", fresh[0] ? ", " : "",
               k_top[k]);
  const int any_fresh = new_head || fresh[0] || fresh_map || flags[3];
  if (st == VT_OK && whole && any_fresh) {  // an evaluation of untrained layers means nothing
    snprintf(err, errlen, "%s: %s would start fresh, and vit3d eval takes every tensor from the "
             "file: give the flags of the model it holds", path,
             new_head    ? "the head (the file's has another class count: --num-classes)"
             : fresh_map ? "the MAP head (attn_pool)"
             : flags[3]  ? "the pre-logits layer and the head"
                         : fresh);
    st = VT_ERR_INPUT;
  }
  if (st == VT_OK) {
    m->be->to_device(m->params, local, (size_t)t->total * sizeof(float));
    vt_log_info("--init-from %s: the model's weights loaded", path);
    if (resampled)
      vt_log_info("--init-from %s: pos_embed resampled from a %dx%d to a %dx%d patch grid", path,
                  resampled, resampled, g1, g1);
    if (fixed_pos)
      vt_log_info("--init-from %s: pos_embed not loaded: --pos-embed sincos2d keeps its fixed "
                  "table for the %dx%d patch grid", path, g1, g1);
    if (new_head)
      vt_log_info("--init-from %s: the head has another class count; it starts fresh", path);
    if (fresh[0])
      vt_log_info("--init-from %s: has no %s; %s fresh (a pretraining checkpoint)", path, fresh,
                  strchr(fresh, ',') ? "they start" : "it starts");
    if (fresh_map)
      vt_log_info("--init-from %s: has no MAP head (attn_pool); it starts fresh", path);
    if (flags[3])
      vt_log_info("--init-from %s: has no pre-logits layer; it and the head start fresh", path);
    // Tensors no rank took: another variant's parts (a distillation token, a decoder, a final
    // norm the pooled head does not use), said so that a wrong flag does not pass unnoticed.
    char unused[400] = "";
    int nunused = 0;
    for (int i = 0; i < nentries; i++)
      if (!used[i] && nunused++ < 6)
        snprintf(unused + strlen(unused), sizeof unused - strlen(unused), "%s%s",
                 unused[0] ? ", " : "", f.entries[i].name);
    if (nunused && vt_comm_rank(world) == 0)
      vt_log_warn("--init-from %s: %d of its tensors are not used by this model (%s%s): from "
                  "another variant (a distillation token, a decoder, the final norm of a "
                  "class-token head under --global-pool avg), or a flag that differs", path,
                  nunused, unused, nunused > 6 ? ", ..." : "");
  }
  vt_safetensors_close(&f);
  free(flags);
  free(local);
  return st;
}
