// export.h: the full, unsharded weights of a model spread over a mesh, gathered on world rank 0
// and written as safetensors with timm's names and shapes (fp32). Depends on parallel/ (the
// comm API) and dataio/ (the writer); knows no MPI.
#ifndef VT_EXPORT_H
#define VT_EXPORT_H

#include <stddef.h>

#include "mesh.h"
#include "model.h"

// Collective over world: the DP-rank-0 replica of every (tp, pp) shard sends its parameters to
// world rank 0, which reassembles each tensor by the parameter table and writes path. Every rank
// returns rank 0's status; the message (rank 0) says what failed.
vt_status vt_export_safetensors(const vt_model *m, vt_comm *world, const vt_mesh *mesh,
                                const char *path, char *err, size_t errlen);

// The global (whole-model) host buffer on world rank 0, assembled from every rank's local flat
// host buffer `mine` (laid out by its table); NULL on the other ranks. Collective over world.
float *vt_gather_global(const vt_model *m, vt_comm *world, const vt_mesh *mesh,
                        const float *mine);
// Writes n global buffers into one safetensors file, tensor names prefixed by prefixes[k].
vt_status vt_write_global(const vt_vit_config *cfg, const float *const *globals,
                          const char *const *prefixes, int n, const char *path, char *err,
                          size_t errlen);

#endif
