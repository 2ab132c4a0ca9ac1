// export.c: gathering the sharded parameters on rank 0 and writing safetensors.
#include "export.h"

#include <errno.h>
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
  return vt_model_file_plan_ranges(f, m, path, prefixes, bufs, n, 1, &lo, &count, first_layer,
                                   err, errlen);
}

vt_status vt_model_file_plan_ranges(vt_model_file *f, const vt_model *m, const char *path,
                                    const char *const *prefixes, const float *const *bufs, int n,
                                    int nranges, const int64_t *lo, const int64_t *count,
                                    int first_layer, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "%s", path);
  vt_param_table whole;
  vt_params_build(&whole, &m->cfg, vt_shard_whole());
  int *slot = malloc((size_t)(whole.count * n) * sizeof *slot);
  VT_CHECK(slot != NULL, "out of host memory for a %d-tensor file's header", whole.count * n);
  vt_status st =
      file_layout(&whole, path, prefixes, n, first_layer, slot, &f->layout, err, errlen);
  // This rank's parts: each run of local elements inside a range [lo, lo + count) lands at its
  // global index. A tensor TP does not split is written by TP rank 0 only (every TP rank holds
  // it).
  const vt_param_table *t = &m->table;
  int64_t most = 0;
  for (int i = 0; i < t->count; i++)
    if (t->p[i].local_count > 0)
      most += t->p[i].local_count / vt_param_run(&t->p[i], &t->shard) + 2;
  most *= nranges > 0 ? nranges : 1;
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
      int64_t in = 0;  // range j's first element in bufs
      for (int j = 0; j < nranges; in += count[j], j++) {
        const int64_t end = lo[j] + count[j];
        const int64_t from = a > lo[j] ? a : lo[j], to = b < end ? b : end;
        if (from >= to) continue;
        const int64_t at = 4 * (vt_param_global_index(p, &t->shard, r) + (from - a));
        for (int k = 0; k < n; k++)
          f->parts[f->nparts++] =
              (vt_part){f->layout.offset[slot[k * whole.count + (g - whole.p)]] + at,
                        4 * (to - from), bufs[k] + in + (from - lo[j])};
      }
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
  // Written whole as PATH.tmp (each rank's share synced), then renamed into place: a failed
  // write (a full disk) leaves an earlier run's file of that name as it was.
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%.1090s.tmp", path);
  vt_status st = vt_model_file_plan(&f, m, tmp, prefix, bufs, 1, lo, count, 0, err, errlen);
  if (st == VT_OK && vt_comm_rank(world) == 0)
    st = vt_partfile_create(tmp, f.layout.head, f.layout.head_nbytes, f.layout.file_nbytes,
                            &f.share, err, errlen);
  st = vt_comm_agree(world, st, err, errlen);
  if (st == VT_OK) st = vt_comm_agree(world, vt_model_file_write(&f, err, errlen), err, errlen);
  if (st == VT_OK && vt_comm_rank(world) == 0 && rename(tmp, path) != 0)
    st = VT_ERR_IO, snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path,
                             strerror(errno));
  st = vt_comm_agree(world, st, err, errlen);
  if (st != VT_OK && vt_comm_rank(world) == 0) remove(tmp);
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

vt_status vt_params_entry_floats(vt_st_file *f, const vt_st_entry *e, const float **out,
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
    const vt_status got =
        same ? vt_params_entry_floats(f, e, &g, &owned, why, sizeof why) : VT_ERR_INPUT;
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
