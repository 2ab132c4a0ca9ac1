// export.h: the full, unsharded weights of a model spread over a mesh, written as one
// safetensors file with timm's names and shapes (fp32) by all ranks at once, and read back.
// Depends on parallel/ (the comm API) and dataio/ (the files); knows no MPI.
#ifndef VT_EXPORT_H
#define VT_EXPORT_H

#include <stddef.h>

#include "comm.h"
#include "mesh.h"
#include "model.h"
#include "partfile.h"
#include "safetensors.h"

// A safetensors file of the whole model (timm's names and shapes, F32) written by every rank at
// once, each its own elements (dataio/partfile.h): nobody gathers the model. n tensors per
// parameter, named prefixes[k] + name, kind-major (all of kind 0 first).
typedef struct {
  char path[1100];
  vt_st_layout layout;  // the header and each tensor's offset, the same on every rank
  vt_part *parts;       // this rank's byte ranges and where their data is
  int64_t nparts;
  uint32_t share;       // this rank's CRC-32 share once written (world rank 0's has the header's)
} vt_model_file;

// The elements of this rank's local table that it writes: [lo, lo + count), its dp_rank-th of
// dp_size equal slices (the ZeRO-1 shard), so that DP replicas split the writing.
void vt_model_write_range(const vt_model *m, int dp_rank, int dp_size, int64_t *lo,
                          int64_t *count);
// The file's layout and this rank's parts: elements [lo, lo + count) of its local table, whose
// values of kind k are bufs[k][0 .. count) (host memory, kept until written); the tensors of
// layers before first_layer (vt_param.layer) are left out of the file. Tensors TP does not
// split are written by TP rank 0. The ranks' parts cover the data exactly once (the byte count is
// checked by vt_model_file_crcs; the values by every resume test).
vt_status vt_model_file_plan(vt_model_file *f, const vt_model *m, const char *path,
                             const char *const *prefixes, const float *const *bufs, int n,
                             int64_t lo, int64_t count, int first_layer, char *err,
                             size_t errlen);
// The same for nranges disjoint ranges [lo[j], lo[j] + count[j]) of the local table, whose values
// of kind k follow each other in bufs[k] (range 0's first).
vt_status vt_model_file_plan_ranges(vt_model_file *f, const vt_model *m, const char *path,
                                    const char *const *prefixes, const float *const *bufs, int n,
                                    int nranges, const int64_t *lo, const int64_t *count,
                                    int first_layer, char *err, size_t errlen);
// The bytes of such a file for the whole model of cfg (n tensors per parameter, named
// prefixes[k] + name, the layers before first_layer left out), header included.
int64_t vt_model_file_nbytes(const vt_vit_config *cfg, const char *const *prefixes, int n,
                             int first_layer);
// Writes this rank's parts into the file (created by world rank 0 with vt_partfile_create from
// f->layout) and syncs it. No communication: may run on a thread of its own.
vt_status vt_model_file_write(vt_model_file *f, char *err, size_t errlen);
// Collective over world: the CRC-32 of each of n written files from every rank's share. Stops
// the job (a bug) when the ranks' parts do not add up to each file's data.
void vt_model_file_crcs(vt_comm *world, const vt_model_file *files, int n, uint32_t *crcs);
void vt_model_file_free(vt_model_file *f);

// Collective over world: writes the weights (flat: backend memory laid out by the rank's table,
// m->params or the EMA) to path, every rank its part. Every rank returns the worst status, with
// the first failing rank's message.
vt_status vt_export_safetensors(const vt_model *m, const float *flat, vt_comm *world,
                                const vt_mesh *mesh, const char *path, char *err, size_t errlen);

// The CRC-32 share (dataio/partfile.h) of the bytes a rank read from a file, so that the ranks
// together check a checkpoint that none of them reads whole: replicated 0 counts only the
// tensors TP splits (another rank counts the replicated ones); a rank that counts nothing passes
// NULL.
typedef struct {
  int replicated;
  uint32_t share;
  int64_t nbytes;  // bytes counted
} vt_read_check;

// This rank's elements of the tensors prefix<name> of an open safetensors file, into the host
// buffer local (laid out by the rank's table), but for the layers before first_layer (left as
// they are in local); from a file opened with vt_safetensors_open only
// those tensors' bytes are read (F32 ones a run at a time, added to *check when not NULL). A
// missing tensor, a dtype other than F32, F16, BF16 or F64, or another shape than the table's is
// VT_ERR_INPUT naming it; a file that ends short, VT_ERR_IO.
vt_status vt_params_read_local(vt_st_file *f, const char *file,
                               const vt_param_table *t, const char *prefix, int first_layer,
                               float *local, vt_read_check *check, char *err, size_t errlen);

// A tensor's values as floats into *out: F32 as stored; F16 and BF16 widened exactly, F64
// rounded to nearest. *owned (to free; NULL when *out points into the file's memory) holds them.
// VT_ERR_INPUT (err not set) for other dtypes; VT_ERR_IO (err set) when a lazily opened file
// cannot give the tensor's bytes: only this tensor's bytes are read from it.
vt_status vt_params_entry_floats(vt_st_file *f, const vt_st_entry *e, const float **out,
                                 float **owned, char *err, size_t errlen);

// --init-from (init_from.c): this rank's parameters from a timm-format safetensors file (full,
// unsharded). When the image or patch grid differs, pos_embed is resampled as timm does
// (bicubic over the patch grid, class token kept); when the class count differs, the head keeps
// its fresh initialisation; a file without `head` or `fc_norm` (a pretraining checkpoint, MAE's)
// leaves the missing ones fresh (any other missing tensor is an error); with whole set (vit3d
// eval) nothing may start fresh. Tensors the model does not use are named in a warning; a value
// that is not finite is refused, naming its tensor. Each is said in the log, a refusal with the
// lowest failing rank's message. Collective over world.
vt_status vt_model_init_from(vt_model *m, vt_comm *world, const char *path, int whole, char *err,
                             size_t errlen);

#endif
