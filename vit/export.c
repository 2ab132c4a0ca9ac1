// export.c: gathering the sharded parameters on rank 0 and writing safetensors.
#include "export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "partfile.h"
#include "safetensors.h"

void vt_model_write_range(const vt_model *m, int dp_rank, int dp_size, int64_t *lo,
                          int64_t *count) {
  vt_equal_slice(m->table.total, dp_rank, dp_size, lo, count);
}

// The file's layout for the whole model of cfg (whole: its table): n tensors per parameter from
// first_layer on, kind-major, in the whole table's order; slot[k * whole->count + i] (when not
// NULL): the layout's index of kind k of parameter i, or -1 where it is left out.
static vt_status file_layout(const vt_param_table *whole, const char *path,
                             const char *const *prefixes, int n, int first_layer, int *slot,
                             vt_st_layout *layout, char *err, size_t errlen) {
  vt_st_tensor *ts = calloc((size_t)(whole->count * n), sizeof *ts);
  char (*names)[VT_ST_MAX_NAME] = calloc((size_t)(whole->count * n), sizeof *names);
  VT_CHECK(ts && names, "out of host memory for a %d-tensor file's header", whole->count * n);
  int nt = 0;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < whole->count; i++) {
      const vt_param *p = &whole->p[i];
      if (slot) slot[k * whole->count + i] = p->layer < first_layer ? -1 : nt;
      if (p->layer < first_layer) continue;
      snprintf(names[nt], sizeof names[nt], "%s%s", prefixes[k], p->name);
      ts[nt] = (vt_st_tensor){names[nt], "F32", p->ndim, {0}, NULL};
      memcpy(ts[nt].shape, p->shape, sizeof p->shape);
      nt++;
    }
  const vt_status st = vt_safetensors_layout(path, ts, nt, NULL, 0, layout, err, errlen);
  free(names);
  free(ts);
  return st;
}

int64_t vt_model_file_nbytes(const vt_vit_config *cfg, const char *const *prefixes, int n,
                             int first_layer) {
  vt_param_table whole;
  vt_params_build(&whole, cfg, vt_shard_whole());
  vt_st_layout layout;
  char err[256];
  const vt_status st = file_layout(&whole, "(a checkpoint file)", prefixes, n, first_layer,
                                   NULL, &layout, err, sizeof err);
  VT_CHECK(st == VT_OK, "%s", err);
  const int64_t nbytes = layout.file_nbytes;
  vt_st_layout_free(&layout);
  vt_params_free(&whole);
  return nbytes;
}

vt_status vt_model_file_plan(vt_model_file *f, const vt_model *m, const char *path,
                             const char *const *prefixes, const float *const *bufs, int n,
                             int64_t lo, int64_t count, int first_layer, char *err,
                             size_t errlen) {
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "%s", path);
  vt_param_table whole;
  vt_params_build(&whole, &m->cfg, vt_shard_whole());
  int *slot = malloc((size_t)(whole.count * n) * sizeof *slot);
  VT_CHECK(slot != NULL, "out of host memory for a %d-tensor file's header", whole.count * n);
  vt_status st =
      file_layout(&whole, path, prefixes, n, first_layer, slot, &f->layout, err, errlen);
  // This rank's parts: each run of local elements inside [lo, lo + count) lands at its global
  // index. A tensor TP does not split is written by TP rank 0 only (every TP rank holds it).
  const vt_param_table *t = &m->table;
  int64_t most = 0;
  for (int i = 0; i < t->count; i++)
    if (t->p[i].local_count > 0)
      most += t->p[i].local_count / vt_param_run(&t->p[i], &t->shard) + 2;
  f->parts = malloc((size_t)(most * n + 1) * sizeof *f->parts);
  VT_CHECK(f->parts != NULL, "out of host memory for %lld checkpoint parts", (long long)most * n);
  for (int i = 0; st == VT_OK && i < t->count; i++) {
    const vt_param *p = &t->p[i];
    if (p->tp_split == VT_TP_REPLICATED && t->shard.tp_rank != 0) continue;
    if (p->layer < first_layer) continue;
    const vt_param *g = vt_params_find(&whole, p->name);
    VT_CHECK(g != NULL, "parameter %s is missing from the whole model's table", p->name);
    const int64_t run = vt_param_run(p, &t->shard);
    for (int64_t r = 0; r < p->local_count; r += run) {
      const int64_t a = p->offset + r, b = a + (run < p->local_count - r ? run : p->local_count - r);
      const int64_t from = a > lo ? a : lo, to = b < lo + count ? b : lo + count;
      if (from >= to) continue;
      const int64_t at = 4 * (vt_param_global_index(p, &t->shard, r) + (from - a));
      for (int k = 0; k < n; k++)
        f->parts[f->nparts++] = (vt_part){f->layout.offset[slot[k * whole.count + (g - whole.p)]]
                                              + at,
                                          4 * (to - from), bufs[k] + (from - lo)};
    }
  }
  vt_params_free(&whole);
  free(slot);
  return st;
}

vt_status vt_model_file_write(vt_model_file *f, char *err, size_t errlen) {
  uint32_t share = 0;
  const vt_status st = vt_partfile_write(f->path, f->parts, f->nparts, f->layout.file_nbytes,
                                         &share, err, errlen);
  f->share ^= share;
  return st;
}

void vt_model_file_crcs(vt_comm *world, const vt_model_file *files, int n, uint32_t *crcs) {
  VT_CHECK(n <= 4, "%d files at once: at most 4", n);
  double bytes[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    crcs[i] = files[i].share;
    for (int64_t j = 0; j < files[i].nparts; j++) bytes[i] += (double)files[i].parts[j].nbytes;
  }
  vt_comm_all_xor(world, crcs, n);
  vt_comm_all_reduce_double(world, bytes, n, VT_REDUCE_SUM);
  for (int i = 0; i < n; i++) {
    const vt_st_layout *l = &files[i].layout;
    VT_CHECK(bytes[i] == (double)(l->file_nbytes - l->head_nbytes),
             "%s: the ranks wrote %.0f bytes of its %lld bytes of tensors", files[i].path,
             bytes[i], (long long)(l->file_nbytes - l->head_nbytes));
    crcs[i] = vt_crc32_of_shares(&crcs[i], 1, l->file_nbytes);
  }
}

void vt_model_file_free(vt_model_file *f) {
  vt_st_layout_free(&f->layout);
  free(f->parts);
  memset(f, 0, sizeof *f);
}

vt_status vt_export_safetensors(const vt_model *m, const float *flat, vt_comm *world,
                                const vt_mesh *mesh, const char *path, char *err, size_t errlen) {
  const vt_mesh_coord me = vt_mesh_coords(mesh, vt_comm_rank(world));
  int64_t lo, count;
  vt_model_write_range(m, me.dp_rank, mesh->dp_size, &lo, &count);
  float *mine = malloc((size_t)(count + 1) * sizeof(float));
  VT_CHECK(mine != NULL, "out of host memory for the exported parameters");
  m->be->to_host(mine, flat + lo, (size_t)count * sizeof(float));
  const char *prefix[1] = {""};
  const float *bufs[1] = {mine};
  vt_model_file f;
  vt_status st = vt_model_file_plan(&f, m, path, prefix, bufs, 1, lo, count, 0, err, errlen);
  if (st == VT_OK && vt_comm_rank(world) == 0)
    st = vt_partfile_create(path, f.layout.head, f.layout.head_nbytes, f.layout.file_nbytes,
                            &f.share, err, errlen);
  st = vt_comm_agree(world, st, err, errlen);
  if (st == VT_OK) st = vt_comm_agree(world, vt_model_file_write(&f, err, errlen), err, errlen);
  if (st != VT_OK && vt_comm_rank(world) == 0) remove(path);
  vt_model_file_free(&f);
  free(mine);
  return st;
}

// IEEE half to float, exactly (every half is a float): subnormals scaled, inf and NaN kept.
static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (ex == 0x1fu) {
    bits = sign | 0x7f800000u | man << 13;
  } else if (ex != 0) {
    bits = sign | (ex + 112) << 23 | man << 13;
  } else {  // zero or subnormal: man * 2^-24
    const float v = (float)man * 5.9604644775390625e-8f;
    memcpy(&bits, &v, sizeof bits);
    bits |= sign;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// A tensor's values as floats into *out: F32 as stored; F16 and BF16 widened exactly, F64
// rounded to nearest. *owned (to free; NULL when *out points into the file's memory) holds them.
// VT_ERR_INPUT (err not set) for other dtypes; VT_ERR_IO (err set) when a lazily opened file
// cannot give the tensor's bytes: only this tensor's bytes are read from it.
static vt_status entry_floats(vt_st_file *f, const vt_st_entry *e, const float **out,
                              float **owned, char *err, size_t errlen) {
  *owned = NULL, *out = NULL;
  const int size = vt_st_dtype_size(e->dtype);
  const int kind = !strcmp(e->dtype, "F32") ? 4 : !strcmp(e->dtype, "F16") ? 1
                 : !strcmp(e->dtype, "BF16") ? 2 : !strcmp(e->dtype, "F64") ? 3 : 0;
  if (!kind) return VT_ERR_INPUT;
  const int64_t n = (e->end - e->begin) / size;
  const uint8_t *src = vt_st_data(f, e);
  uint8_t *raw = NULL;
  if (!src) {
    raw = malloc((size_t)(e->end - e->begin) + 8);
    VT_CHECK(raw != NULL, "out of host memory reading %s", e->name);
    if (vt_st_read(f, e, raw, err, errlen) != VT_OK) {
      free(raw);
      return VT_ERR_IO;
    }
    src = raw;
  }
  if (kind == 4) {
    *out = (const float *)src, *owned = (float *)raw;
    return VT_OK;
  }
  float *dst = malloc((size_t)(n ? n : 1) * sizeof(float));
  VT_CHECK(dst != NULL, "out of host memory converting %s", e->name);
  for (int64_t i = 0; i < n; i++) {
    if (kind == 3) {
      double d;
      memcpy(&d, src + 8 * i, sizeof d);
      dst[i] = (float)d;
      continue;
    }
    uint16_t h;
    memcpy(&h, src + 2 * i, sizeof h);
    if (kind == 1) {
      dst[i] = half_to_float(h);
    } else {  // bfloat16: the high half of a float
      const uint32_t bits = (uint32_t)h << 16;
      memcpy(&dst[i], &bits, sizeof bits);
    }
  }
  free(raw);
  *out = *owned = dst;
  return VT_OK;
}

vt_status vt_params_read_local(vt_st_file *f, const char *file, const vt_param_table *t,
                               const char *prefix, int first_layer, float *local,
                               vt_read_check *check, char *err, size_t errlen) {
  const int64_t file_nbytes = vt_st_data_offset(f) + f->data_nbytes;
  char name[256];
  for (int i = 0; i < t->count; i++) {
    const vt_param *p = &t->p[i];
    if (p->layer < first_layer) continue;
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    const vt_st_entry *e = vt_st_find(f, name);
    int same = e && e->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
    const int64_t run = vt_param_run(p, &t->shard);
    if (same && !vt_st_data(f, e) && !strcmp(e->dtype, "F32")) {
      // From a file on disk, F32: only this rank's part, its runs merged where adjacent in the
      // file (a row band of a row-split tensor is one read, a column-split one a read a row).
      char why[300] = "";
      for (int64_t k = 0; k < p->local_count;) {
        const int64_t g0 = vt_param_global_index(p, &t->shard, k);
        int64_t len = run;
        while (k + len < p->local_count &&
               vt_param_global_index(p, &t->shard, k + len) == g0 + len)
          len += run;
        if (vt_st_read_range(f, e, g0 * 4, len * 4, local + p->offset + k, why, sizeof why) !=
            VT_OK) {
          snprintf(err, errlen, "%s: %s", file, why);
          return VT_ERR_IO;
        }
        if (check && (p->tp_split != VT_TP_REPLICATED || check->replicated)) {
          const int64_t at = vt_st_data_offset(f) + e->begin + g0 * 4;
          check->share ^= vt_crc32_piece(at, local + p->offset + k, (size_t)len * 4, file_nbytes);
          check->nbytes += len * 4;
        }
        k += len;
      }
      continue;
    }
    float *owned = NULL;
    const float *g = NULL;
    char why[300] = "";
    const vt_status got = same ? entry_floats(f, e, &g, &owned, why, sizeof why) : VT_ERR_INPUT;
    if (got == VT_ERR_IO) {
      snprintf(err, errlen, "%s: %s", file, why);
      return VT_ERR_IO;
    }
    if (!g) {
      snprintf(err, errlen,
               "%s: tensor %s is %s; the model needs the config's shape in F32, F16, BF16 or F64",
               file, name, !e ? "missing" : same ? "of another dtype" : "of another shape");
      return VT_ERR_INPUT;
    }
    for (int64_t k = 0; k < p->local_count; k += run)
      memcpy(local + p->offset + k, g + vt_param_global_index(p, &t->shard, k),
             (size_t)run * sizeof(float));
    free(owned);
  }
  return VT_OK;
}

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

vt_status vt_model_init_from(vt_model *m, vt_comm *world, const char *path, char *err,
                             size_t errlen) {
  const vt_param_table *t = &m->table;
  const int C = m->cfg.width, K = m->cfg.num_classes, g1 = m->cfg.img_size / m->cfg.patch_size;
  float *local = malloc((size_t)t->total * sizeof(float));
  VT_CHECK(local != NULL, "out of host memory for --init-from");
  m->be->to_host(local, m->params, (size_t)t->total * sizeof(float));  // the fresh initialisation
  vt_st_file f;
  vt_status st = vt_safetensors_open(path, &f, err, errlen);  // this rank's tensors only
  if (st == VT_OK) st = check_variant(&f, &m->cfg, path, err, errlen);
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
    const int top = strncmp(p->name, "head.", 5) == 0 || strncmp(p->name, "fc_norm.", 8) == 0;
    if (top && !e) {  // a pretraining checkpoint (MAE's has neither): they start fresh
      fresh_top = 1;
      continue;
    }
    if (strncmp(p->name, "attn_pool.", 10) == 0 && !file_map) {  // a MAP head on another model
      fresh_map = 1;
      continue;
    }
    if (fresh_pre && (strncmp(p->name, "pre_logits.", 11) == 0 || strncmp(p->name, "head.", 5) == 0))
      continue;
    if (strncmp(p->name, "head.", 5) == 0 && e && e->ndim >= 1 && e->shape[0] != K) {
      new_head = 1;  // another class count: keep the fresh head
      continue;
    }
    if (strcmp(p->name, "pos_embed") == 0 && m->cfg.pos_sincos) {
      fixed_pos = e != NULL;  // fixed sin-cos positions: the table for this grid, whatever the file
      continue;
    }
    float *owned = NULL;
    const float *pos = NULL;
    if (strcmp(p->name, "pos_embed") == 0 && e && e->ndim == 3 && e->shape[2] == C &&
        e->shape[1] != p->shape[1]) {
      char why[300] = "";
      if (entry_floats(&f, e, &pos, &owned, why, sizeof why) != VT_OK) {
        snprintf(err, errlen, "%s: %s", path, why[0] ? why : "pos_embed is not F32, F16, BF16 or F64");
        st = VT_ERR_INPUT;
        break;
      }
      int g0 = (int)lround(sqrt((double)(e->shape[1] - pr)));
      if (e->shape[1] <= pr || (int64_t)g0 * g0 + pr != e->shape[1]) {
        snprintf(err, errlen,
                 "%s: pos_embed of %lld tokens is not %d prefix token%s plus a square grid; "
                 "if its positions %s the class token, pass --no-embed-class %d",
                 path, (long long)e->shape[1], pr, pr == 1 ? "" : "s",
                 pr ? "skip" : "include", pr ? 1 : 0);
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
  vt_safetensors_close(&f);
  // the head lives on the last stage only
  double flags[6] = {st != VT_OK, resampled, new_head, fresh_top, fresh_map, fresh_pre};
  vt_comm_all_reduce_double(world, flags, 6, VT_REDUCE_MAX);
  const int bad = flags[0] != 0;
  resampled = (int)flags[1], new_head = (int)flags[2], fresh_top = (int)flags[3];
  fresh_map = (int)flags[4];
  if (!bad) {
    m->be->to_device(m->params, local, (size_t)t->total * sizeof(float));
    vt_log_info("--init-from %s: the model's weights loaded", path);
    if (resampled) vt_log_info("--init-from %s: pos_embed resampled from a %dx%d to a %dx%d patch grid", path, resampled, resampled, g1, g1);
    if (fixed_pos)
      vt_log_info("--init-from %s: pos_embed not loaded: --pos-embed sincos2d keeps its fixed "
                  "table for the %dx%d patch grid", path, g1, g1);
    if (new_head) vt_log_info("--init-from %s: the head has another class count; it starts fresh", path);
    if (fresh_top)
      vt_log_info("--init-from %s: has no %s; %s fresh (a pretraining checkpoint)", path,
                  m->cfg.global_pool == 1 ? "head or fc_norm" : "head",
                  m->cfg.global_pool == 1 ? "they start" : "it starts");
    if (fresh_map)
      vt_log_info("--init-from %s: has no MAP head (attn_pool); it starts fresh", path);
    if (flags[5])
      vt_log_info("--init-from %s: has no pre-logits layer; it and the head start fresh", path);
  } else if (st == VT_OK) {
    snprintf(err, errlen, "another rank could not read %s", path);
  }
  free(local);
  return bad ? VT_ERR_INPUT : VT_OK;
}
