// export.c: gathering the sharded parameters on rank 0 and writing safetensors.
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "safetensors.h"

// Places one rank's local flat parameters (laid out by its table) into the global tensors.
static void scatter_shard(const vt_param_table *local, const float *flat,
                          const vt_param_table *whole, float *global) {
  for (int i = 0; i < local->count; i++) {
    const vt_param *p = &local->p[i];
    const vt_param *g = vt_params_find(whole, p->name);
    VT_CHECK(g != NULL, "parameter %s is missing from the whole model's table", p->name);
    for (int64_t k = 0; k < p->local_count; k++)
      global[g->offset + vt_param_global_index(p, &local->shard, k)] = flat[p->offset + k];
  }
}

float *vt_gather_global(const vt_model *m, vt_comm *world, const vt_mesh *mesh,
                        const float *mine) {
  const int rank = vt_comm_rank(world), size = vt_comm_size(world);
  const vt_mesh_coord me = vt_mesh_coords(mesh, rank);
  if (rank != 0) {
    if (me.dp_rank == 0) vt_comm_send(world, mine, m->table.total, 0);
    return NULL;
  }
  vt_param_table whole;
  vt_params_build(&whole, &m->cfg, vt_shard_whole());
  float *global = malloc((size_t)whole.total * sizeof(float));
  VT_CHECK(global != NULL, "out of host memory for the full model");
  for (int r = 0; r < size; r++) {
    vt_mesh_coord c = vt_mesh_coords(mesh, r);
    if (c.dp_rank != 0) continue;
    vt_param_table t;
    vt_params_build(&t, &m->cfg, (vt_shard){c.tp_rank, mesh->tp_size, c.pp_rank, mesh->pp_size, 0});
    const float *flat = mine;
    float *recv = NULL;
    if (r != 0) {
      recv = malloc((size_t)t.total * sizeof(float));
      VT_CHECK(recv != NULL, "out of host memory for a shard");
      vt_comm_recv(world, recv, t.total, r);
      flat = recv;
    }
    scatter_shard(&t, flat, &whole, global);
    free(recv);
    vt_params_free(&t);
  }
  vt_params_free(&whole);
  return global;
}

vt_status vt_write_global(const vt_vit_config *cfg, const float *const *globals,
                          const char *const *prefixes, int n, const char *path, char *err,
                          size_t errlen) {
  vt_param_table whole;
  vt_params_build(&whole, cfg, vt_shard_whole());
  vt_st_tensor *ts = calloc((size_t)(whole.count * n), sizeof *ts);
  char **names = calloc((size_t)(whole.count * n), sizeof *names);
  VT_CHECK(ts && names, "out of host memory");
  for (int k = 0; k < n; k++)
    for (int i = 0; i < whole.count; i++) {
      const vt_param *p = &whole.p[i];
      const int j = k * whole.count + i;
      names[j] = malloc(strlen(prefixes[k]) + strlen(p->name) + 1);
      VT_CHECK(names[j] != NULL, "out of host memory");
      strcpy(names[j], prefixes[k]);
      strcat(names[j], p->name);
      ts[j] = (vt_st_tensor){names[j], "F32", p->ndim, {0}, globals[k] + p->offset};
      memcpy(ts[j].shape, p->shape, sizeof p->shape);
    }
  vt_status st = vt_safetensors_write(path, ts, whole.count * n, err, errlen);
  for (int j = 0; j < whole.count * n; j++) free(names[j]);
  free(names);
  free(ts);
  vt_params_free(&whole);
  return st;
}

vt_status vt_export_safetensors(const vt_model *m, vt_comm *world, const vt_mesh *mesh,
                                const char *path, char *err, size_t errlen) {
  float *mine = malloc((size_t)m->table.total * sizeof(float));
  VT_CHECK(mine != NULL, "out of host memory for the exported parameters");
  m->be->to_host(mine, m->params, (size_t)m->table.total * sizeof(float));
  float *global = vt_gather_global(m, world, mesh, mine);
  double status = VT_OK;
  if (global) {
    const float *g[1] = {global};
    const char *prefix[1] = {""};
    status = vt_write_global(&m->cfg, g, prefix, 1, path, err, errlen);
  }
  free(global);
  free(mine);
  vt_comm_all_reduce_double(world, &status, 1, VT_REDUCE_MAX);
  return (vt_status)(int)status;
}
