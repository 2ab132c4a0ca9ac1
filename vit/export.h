// export.h: the full, unsharded weights of a model spread over a mesh, gathered on world rank 0
// and written as safetensors with timm's names and shapes (fp32). Depends on parallel/ (the
// comm API) and dataio/ (the writer); knows no MPI.
#ifndef VT_EXPORT_H
#define VT_EXPORT_H

#include <stddef.h>

#include "mesh.h"
#include "model.h"
#include "safetensors.h"

// Collective over world: the DP-rank-0 replica of every (tp, pp) shard sends its weights (flat:
// backend memory laid out by the rank's table, m->params or the optimizer's EMA) to world rank
// 0, which reassembles each tensor by the parameter table and writes path. Every rank returns
// rank 0's status; the message (rank 0) says what failed.
vt_status vt_export_safetensors(const vt_model *m, const float *flat, vt_comm *world,
                                const vt_mesh *mesh, const char *path, char *err, size_t errlen);

// The global (whole-model) host buffer on world rank 0, assembled from every rank's local flat
// host buffer `mine` (laid out by its table); NULL on the other ranks. Collective over world.
float *vt_gather_global(const vt_model *m, vt_comm *world, const vt_mesh *mesh,
                        const float *mine);
// Writes n global buffers into one safetensors file, tensor names prefixed by prefixes[k].
vt_status vt_write_global(const vt_vit_config *cfg, const float *const *globals,
                          const char *const *prefixes, int n, const char *path, char *err,
                          size_t errlen);

// This rank's elements of the tensors prefix<name> of an open safetensors file, into the host
// buffer local (laid out by the rank's table); from a file opened with vt_safetensors_open only
// those tensors' bytes are read. A missing tensor, a dtype other than F32, F16, BF16 or F64, or
// another shape than the table's is VT_ERR_INPUT naming it; a file that ends short, VT_ERR_IO.
vt_status vt_params_read_local(vt_st_file *f, const char *file,
                               const vt_param_table *t, const char *prefix, float *local,
                               char *err, size_t errlen);

// --init-from: this rank's parameters from a timm-format safetensors file (full, unsharded).
// When the image or patch grid differs, pos_embed is resampled as timm does (bicubic over the
// patch grid, class token kept); when the class count differs, the head keeps its fresh
// initialisation; a file without `head` or `fc_norm` (a pretraining checkpoint, MAE's) leaves
// them fresh (any other missing tensor is an error). Each is said in the log. Collective over world only through its verdict.
vt_status vt_model_init_from(vt_model *m, vt_comm *world, const char *path, char *err,
                             size_t errlen);

#endif
