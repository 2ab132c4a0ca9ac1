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

vt_status vt_export_safetensors(const vt_model *m, vt_comm *world, const vt_mesh *mesh,
                                const char *path, char *err, size_t errlen) {
  const int rank = vt_comm_rank(world), size = vt_comm_size(world);
  const vt_backend *be = m->be;
  const vt_mesh_coord me = vt_mesh_coords(mesh, rank);
  float *mine = malloc((size_t)m->table.total * sizeof(float));
  VT_CHECK(mine != NULL, "out of host memory for the exported parameters");
  be->to_host(mine, m->params, (size_t)m->table.total * sizeof(float));
  double status = VT_OK;
  if (rank != 0) {
    if (me.dp_rank == 0) vt_comm_send(world, mine, m->table.total, 0);
  } else {
    vt_param_table whole;
    vt_params_build(&whole, &m->cfg, vt_shard_whole());
    float *global = malloc((size_t)whole.total * sizeof(float));
    VT_CHECK(global != NULL, "out of host memory for the full model");
    for (int r = 0; r < size; r++) {
      vt_mesh_coord c = vt_mesh_coords(mesh, r);
      if (c.dp_rank != 0) continue;
      vt_param_table t;
      vt_params_build(&t, &m->cfg,
                      (vt_shard){c.tp_rank, mesh->tp_size, c.pp_rank, mesh->pp_size, 0});
      float *flat = mine;
      if (r != 0) {
        flat = malloc((size_t)t.total * sizeof(float));
        VT_CHECK(flat != NULL, "out of host memory for a shard");
        vt_comm_recv(world, flat, t.total, r);
      }
      scatter_shard(&t, flat, &whole, global);
      if (flat != mine) free(flat);
      vt_params_free(&t);
    }
    vt_st_tensor *ts = calloc((size_t)whole.count, sizeof *ts);
    VT_CHECK(ts != NULL, "out of host memory");
    for (int i = 0; i < whole.count; i++) {
      const vt_param *p = &whole.p[i];
      ts[i] = (vt_st_tensor){p->name, "F32", p->ndim, {0}, global + p->offset};
      memcpy(ts[i].shape, p->shape, sizeof p->shape);
    }
    status = vt_safetensors_write(path, ts, whole.count, err, errlen);
    free(ts);
    free(global);
    vt_params_free(&whole);
  }
  free(mine);
  vt_comm_all_reduce_double(world, &status, 1, VT_REDUCE_MAX);
  return (vt_status)(int)status;
}
