// params.h: the parameter table. One row per tensor: timm's name and shape, where it sits in the
// flat buffers, whether AdamW decays it, how it is initialised, which layer owns it (for
// pipeline stages) and how tensor parallelism splits it. Allocation, init, optimizer, gradient
// norm, checkpoints and export all walk this table. Must not depend on MPI or a backend.
#ifndef VT_PARAMS_H
#define VT_PARAMS_H

#include <stdint.h>

#include "config.h"

typedef enum {
  VT_INIT_ZEROS,
  VT_INIT_ONES,
  VT_INIT_TRUNC_NORMAL,  // timm trunc_normal_(std, a=-2, b=2): Linear weights, pos_embed
  VT_INIT_NORMAL,        // normal_(std): cls_token (std 1e-6)
  VT_INIT_UNIFORM,       // uniform(-bound, bound): Conv2d default (patch_embed), bound 1/sqrt(fan_in)
  VT_INIT_CONST,         // every element init_scale: LayerScale's gamma (init_values)
  VT_INIT_TRUNC_NORMAL_2STD,  // timm trunc_normal_tf_(std): a normal(std) truncated at 2 std,
                              // by redrawing (MAP's latent query, std C^-0.5)
  VT_INIT_SINCOS2D,  // pos_embed (1, g*g, C) as big_vision's posemb_sincos_2d (temperature 1e4):
                     // row y*g + x holds [sin(x w), cos(x w), sin(y w), cos(y w)], w_d =
                     // 1e4^(-d / (C/4 - 1)) for d < C/4, in double, rounded to float
} vt_init_kind;

// How tensor parallelism splits a tensor (Megatron style; see design.md).
typedef enum {
  VT_TP_REPLICATED,  // every TP rank holds all of it
  VT_TP_ROWS,        // column-parallel Linear: output rows split (qkv: per q/k/v group)
  VT_TP_COLS,        // row-parallel Linear: input columns split
} vt_tp_split;

typedef struct {
  char name[64];      // timm name, e.g. "blocks.3.attn.qkv.weight"
  int ndim;
  int64_t shape[4];   // global (unsharded) shape
  int64_t count;      // global elements
  int64_t local_count;  // elements this rank holds (count / tp_size when split by TP)
  int64_t offset;     // first local element in this rank's flat parameter/gradient buffers
  int decay;          // AdamW weight decay applies (not biases, norms, LayerScale, pos_embed,
                      // cls_token, reg_token)
  vt_init_kind init;
  float init_scale;   // std or bound
  int layer;          // 0 = embeddings, 1..depth = blocks, depth+1 = final norm and head
  int lr_layer;       // the layer whose lr scale layer-wise decay gives it: layer, except
                      // norm_pre's depth + 1 (timm's and MAE's grouping)
  vt_tp_split tp_split;
  int tp_groups;      // qkv: 3 (q, k, v each split by heads); otherwise 1
  int tp_partial;     // replicated, but each TP rank's gradient is a partial sum that the TP
                      // group must add up (block LayerNorms and LayerScales under sequence
                      // parallelism)
} vt_param;

// Which part of the model one rank holds: the blocks of its pipeline stage (plus the embeddings
// with virtual stage 0, the final norm and head with the last) and its tensor-parallel shard.
// With pp_chunks = v > 1 the blocks are cut into pp_size * v virtual stages and the rank holds v
// of them, its chunks: virtual stages c * pp_size + pp_rank (the interleaved schedule), or with
// pp_vshape (ZB-V, v = 2) pp_rank and 2 * pp_size - 1 - pp_rank, so that rank 0 holds both the
// embeddings and the head.
typedef struct {
  int tp_rank, tp_size;
  int pp_rank, pp_size;
  int sequence_parallel;  // the stream between TP regions is split by rows over the TP group
  int pp_chunks;          // model chunks per pipeline rank, >= 1
  int pp_vshape;          // 1: ZB-V's V layout (pp_chunks 2)
} vt_shard;

// The whole model on one rank.
static inline vt_shard vt_shard_whole(void) { return (vt_shard){0, 1, 0, 1, 0, 1, 0}; }

// The virtual stage of a chunk of the shard's rank, and whether the rank holds the first
// (embeddings) and the last (head).
static inline int vt_shard_vstage(const vt_shard *s, int chunk) {
  return s->pp_vshape && chunk == 1 ? 2 * s->pp_size - 1 - s->pp_rank
                                    : chunk * s->pp_size + s->pp_rank;
}
// The pipeline rank that holds virtual stage vs.
static inline int vt_shard_vstage_rank(const vt_shard *s, int vs) {
  return s->pp_vshape ? (vs < s->pp_size ? vs : 2 * s->pp_size - 1 - vs) : vs % s->pp_size;
}
static inline int vt_shard_has_embed(const vt_shard *s) { return s->pp_rank == 0; }
static inline int vt_shard_has_head(const vt_shard *s) {
  return s->pp_vshape ? s->pp_rank == 0 : s->pp_rank == s->pp_size - 1;
}

// Blocks [*first, *end) of virtual stage vs of nvs (pipeline stages times chunks; vshape: ZB-V's
// V, where chunk 1 of rank r is stage 2 pp - 1 - r). Blocks are split as evenly as possible; when
// depth does not divide, depth % nvs stages get one more: the last ones, so that the first stage
// (which also runs the patch embedding and keeps the most micro-batches in flight under 1F1B)
// gets fewest; in a V, whose rank 0 holds the first and the last stage (the embedding and the
// head), those of the ranks farthest from rank 0 (chunk 0 of rank pp - 1, pp - 2, ..., then their
// chunk 1 likewise).
void vt_stage_blocks(int depth, int nvs, int vshape, int vs, int *first, int *end);
// Blocks [*first, *end) of chunk `chunk` of the shard's pipeline rank: virtual stage
// vt_shard_vstage of pp_size * chunks (vt_stage_blocks; the chunk itself with one).
void vt_chunk_blocks(int depth, const vt_shard *s, int chunk, int *first, int *end);
// The shard's blocks whose forward runs again in the backward: each chunk's first `recompute`
// (activation recompute), but those of the frozen prefix (block b is layer b + 1), which run no
// backward.
int vt_recomputed_blocks(int depth, const vt_shard *s, int recompute, int frozen_layers);
// Slice `rank` of `size` equal slices of n elements (the last ones shorter or empty): [*lo,
// *lo + *count).
static inline void vt_equal_slice(int64_t n, int rank, int size, int64_t *lo, int64_t *count) {
  const int64_t chunk = (n + size - 1) / size;
  *lo = (int64_t)rank * chunk < n ? (int64_t)rank * chunk : n;
  *count = n - *lo < chunk ? n - *lo : chunk;
}

// The leading virtual stages of nvstages (pp_size * chunks) whose layers all lie in a frozen
// prefix of frozen_layers layers (vt_model.frozen_layers: the embeddings, then blocks 0, 1, ...):
// they have no backward to run, and no gradient needs to reach them (vt_schedule_spec's
// frozen_stages). Never the last (the head's).
int vt_frozen_vstages(int depth, int nvstages, int vshape, int frozen_layers);

typedef struct {
  vt_param *p;
  int count;
  int64_t total;  // local elements over all tensors this rank holds
  vt_shard shard;
} vt_param_table;

// The table of the tensors a rank holds, with local counts and offsets (the whole model for
// vt_shard_whole()). Rows keep timm's global names and shapes.
void vt_params_build(vt_param_table *t, const vt_vit_config *cfg, vt_shard shard);
void vt_params_free(vt_param_table *t);
// The row of a name, or NULL.
const vt_param *vt_params_find(const vt_param_table *t, const char *name);
// The first element of the table with a gradient: the offset of its first tensor of a layer
// (vt_param.layer) from frozen_layers on (the layers before, a frozen prefix, run no backward),
// or total where it has none; the tensors of the layers before all lie below it (params.c lays
// the table out layer by layer).
int64_t vt_params_grad_first(const vt_param_table *t, int frozen_layers);
// Initialise a host copy of all parameters as timm does, from the counter-based RNG keyed by
// (seed, parameter name, element): the same values on any rank, thread count or layout.
void vt_params_init(const vt_param_table *t, float *host, uint64_t seed);

// The global element index (row-major in the global shape) of local element i of p on the
// table's TP rank. qkv rows are [q | k | v], each split by heads, so a TP rank's rows are three
// separate stripes.
int64_t vt_param_global_index(const vt_param *p, const vt_shard *s, int64_t i);
// The length of the runs of local elements (starting at 0 and every multiple of it) that sit one
// after another in the global tensor too: the whole tensor unless TP splits it, a row of a
// column-parallel (VT_TP_ROWS) tensor, a row's band of a row-parallel one. Copying run by run
// from vt_param_global_index of each run's first element moves whole rows instead of elements.
int64_t vt_param_run(const vt_param *p, const vt_shard *s);

#endif
