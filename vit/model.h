// model.h: one rank's part of the ViT (a pipeline stage's blocks, TP-sharded), its forward and
// backward per micro-batch (allocation in model.c, the passes in model_pass.c). Pre-LN blocks
// (x += attn(norm1(x)); x += mlp(norm2(x)), each branch optionally scaled by LayerScale),
// T = 1 + R prefix tokens (class, registers; R without the class token), class-token, mean, gap
// or MAP pooling, timm's VisionTransformer layout. Memory is allocated once at init: parameters
// and gradients as two flat buffers laid out by the parameter table, activations of every
// in-flight micro-batch ("slot") plus one backward scratch as one block (design.md).
// Depends on src/ and parallel/ (the TP all-reduces); knows nothing of MPI itself.
#ifndef VT_MODEL_H
#define VT_MODEL_H

#include "config.h"
#include "params.h"
#include "vt_backend.h"
#include "vt_ops.h"

typedef struct vt_comm vt_comm;

// Views of one block's tensors inside a flat buffer (parameters or gradients); TP-local shapes.
typedef struct {
  float *norm1_w, *norm1_b;  // (C)
  float *qkv_w, *qkv_b;      // (3C/tp, C), (3C/tp) or NULL (no qkv bias)
  float *qn_w, *qn_b;        // (D) QK-norm of q, NULL without QK-norm
  float *kn_w, *kn_b;        // (D) QK-norm of k
  float *proj_w, *proj_b;    // (C, C/tp), (C)
  float *norm2_w, *norm2_b;  // (C)
  float *fc1_w, *fc1_b;      // (F/tp, C), (F/tp)
  float *fc2_w, *fc2_b;      // (C, F/tp), (C)
  float *ls1, *ls2;          // (C) LayerScale gammas, NULL without LayerScale (a parallel
                             // block's one gamma in ls2)
} vt_block_tensors;

// The MAP head's tensors (global_pool 3, timm's attn_pool): q, kv and proj this TP rank's heads'
// (Cl = C / tp), the rest whole on every TP rank.
typedef struct {
  float *latent;             // (C) the latent query
  float *q_w, *q_b;          // (Cl, C), (Cl)
  float *kv_w, *kv_b;        // (2Cl, C), (2Cl): rows [k | v] of this rank's heads
  float *proj_w, *proj_b;    // (C, Cl), (C)
  float *norm_w, *norm_b;    // (C)
  float *fc1_w, *fc1_b;      // (F, C), (F)
  float *fc2_w, *fc2_b;      // (C, F), (C)
} vt_map_tensors;

typedef struct {
  float *prefix, *pos;        // (T, C): cls_token then reg_token, adjacent in the table;
                              // (N - pos0, C)          first stage only
  float *patch_w, *patch_b;   // (C, 3*P*P), (C)        first stage only; patch_b NULL with
                              //                        pre_norm (timm's CLIP towers)
  float *pre_norm_w, *pre_norm_b;  // (C): norm_pre      first stage, pre_norm only
  vt_block_tensors *blocks;   // this rank's blocks (all chunks), local index 0..nblocks-1
  float *norm_w, *norm_b;     // (C)                    last stage only
  float *pre_w, *pre_b;       // (R, C), (R)            last stage, pre_logits R > 0 only
  float *head_w, *head_b;     // (K, C), (K); (K, R) after a pre-logits layer   last stage only
  vt_map_tensors map;         // the MAP head's         last stage, global_pool 3 only
} vt_model_tensors;

// Saved activations of one block for one micro-batch. M = B*N rows; Ml the rows of the stream
// this rank holds (M, or M/tp rounded up under sequence parallelism); Mp = tp * Ml. [bf16]: a
// bfloat16 tensor in bf16 precision (vt_ops.h), half the floats.
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd;  // (Ml, C) [bf16], (Ml), (Ml)
  float *ln1_full;                   // (Mp, C) [bf16] all ranks' ln1 rows (sequence parallel)
  float *qkv;                        // (B, N, 3C/tp) [bf16]
  float *qkn;                        // (B, N, 3C/tp) [bf16] qkv after QK-norm (QK-norm only)
  float *qk_mean, *qk_rstd;          // (B, N, 2H/tp) its statistics (QK-norm only)
  float *lse;                        // (B, H/tp, N) softmax log-denominators (vt_ops.h)
  float *attn;                       // (B, N, C/tp) [bf16] attention output before proj
  float *mid;                        // (Ml, C) stream after the attention branch (not in
                                     // parallel blocks, nor ln2 and ln2_full)
  float *ln2, *ln2_mean, *ln2_rstd;  // (Ml, C) [bf16], (Ml), (Ml)
  float *ln2_full;                   // (Mp, C) [bf16] (sequence parallel only)
  float *fc1;                        // (B, N, F/tp) [bf16] before GELU
  float *gelu;                       // (B, N, F/tp) [bf16]
  float *ls1, *ls2;                  // (Ml, C) each branch's output before its LayerScale
                                     // (LayerScale only; a parallel block's sum in ls2)
} vt_block_acts;

// The inputs of one block's weight pass when the backward is split (ZB-H1): the output gradients
// of its four Linears, kept from the input-gradient pass. M = B*N rows (all of them under
// sequence parallelism, as the GEMMs read them). [bf16] as above.
typedef struct {
  float *dfc2;   // (M, C)
  float *dfc1;   // (B, N, F/tp) [bf16]
  float *dproj;  // (M, C); parallel blocks: none (dfc2 is also proj's output gradient)
  float *dqkv;   // (B, N, 3C/tp) [bf16]
} vt_block_wgrad;

// The MAP head's saved activations for one micro-batch (global_pool 3; [bf16] as above; Cl and
// H this TP rank's heads' width and count). Its input is every token after `norm`: the slot's
// lnf, (B*N, C) then.
typedef struct {
  float *latent;                  // (C) [bf16] the latent query as the q Linear reads it
  float *q;                       // (Cl) [bf16]
  float *kv;                      // (B, N, 2Cl) [bf16]
  float *attn, *lse;              // (B, Cl) [bf16] the pooled heads before proj, (B, H)
  float *y;                       // (B, C) proj's output, the MLP's residual
  float *ln, *ln_mean, *ln_rstd;  // (B, C) [bf16], (B), (B)
  float *fc1, *gelu;              // (B, F) [bf16] each
  float *out;                     // (B, C) [bf16] y + MLP: the head's input
} vt_map_acts;

// Everything one in-flight unit (a micro-batch through one chunk) keeps between its forward and
// its backward. The embedding and head tensors serve chunk 0 and the last chunk.
typedef struct {
  float *img;                        // (B, 3, S, S)  first stage
  int32_t *labels;                   // (B)           last stage
  vt_mix_target *mix;                // (B)           last stage: Mixup/CutMix targets
  float *patches, *patch_out;        // (B, N-T, 3*P*P) [bf16], (B, N-T, C)  first stage
  float *emb, *emb_mean, *emb_rstd;  // (Ml, C), (Ml), (Ml): norm_pre's input (the embedding's
                                     // output) and statistics   first stage, pre_norm only
  float **res;                       // n+1 of (Ml, C) for a chunk of n blocks: res[0] is the
                                     // chunk's input, res[n] its output (slot_blocks+1 held)
  vt_block_acts *blocks;             // slot_blocks
  float *pooled, *lnf, *lnf_mean, *lnf_rstd;  // (B, C), (B, C) [bf16], (B), (B) last stage;
                                              // gap: the statistics (B, patches); map: no
                                              // pooled, lnf and statistics of B*N rows
  vt_map_acts map;                            // last stage, global_pool 3 only
  float *pre_fc, *pre;                        // (B, R) [bf16] the pre-logits Linear's output
                                              // and its tanh (the head's input): pre_logits
  float *logits, *probs, *losses;             // (B, K), (B, K), (B)     last stage
  float *dout;                       // (Ml, C) gradient of the chunk's output (received)
  float *dinput;                     // (Ml, C) gradient of the chunk's input (to send)
  int64_t sample0;                   // the forward's first stream position (drop path), or -1
} vt_model_slot;

// Scratch shared by all slots (one forward or backward runs at a time).
typedef struct {
  float *dres;                       // (Ml, C) the stream's gradient
  float *dln;                        // (Mp, C); rows past M stay zero (reduce-scatter input)
  float *dln_local;                  // (Ml, C)  sequence parallel only
  float *full;                       // (Mp, C)  sequence parallel: gathered rows
  float *partial;                    // (Mp, C)  sequence parallel: row-parallel outputs; rows
                                     //          past M stay zero
  float *dqkv;                       // (B, N, 3C/tp) [bf16] (attention_bwd)
  float *dqkn;                       // (B, N, 3C/tp) [bf16] attention_bwd's, before QK-norm's
                                     //          backward (QK-norm only)
  float *branch;                     // (M, C) parallel blocks: the attention branch's output
  float *dln2;                       // (M, C) parallel blocks: norm1's gradient from attention
  float *dact;                       // (B, N, F/tp) [bf16] (linear_bwd_act): the input
                                     //          gradient of fc2, then of proj ((B, N, C/tp))
  float *dfc1;                       // (B, N, F/tp) [bf16] (act_bwd)
  float *dpatch_out;                 // (B, N-T, C)
  float *dpooled, *dlnf, *dlogits;   // (B, C), (B, C), (B, K); map: dlnf (B*N, C)
  float *dpre, *dpre_fc;             // (B, R) [bf16] the gradients of the pre-logits' tanh output
                                     //          and of its Linear's output (pre_logits)
  // The MAP head's (global_pool 3): the fp32 y + MLP, then the gradients of the head's input
  // (then of y), of fc2's input [bf16], of fc1's output [bf16], of its LayerNorm's output, of
  // the pooled heads [bf16], of q and of the latent; of kv [bf16].
  float *map_z, *map_dy, *map_dgelu, *map_dfc1, *map_dln, *map_dattn, *map_dq, *map_dlatent;
  float *map_dkv;
  vt_block_acts recompute;           // the recomputed and the frozen prefix's blocks'
                                     // activations (one set for all)
  float *recompute_out;              // (Ml, C) their recomputed outputs (not needed)
} vt_model_scratch;

typedef struct {
  vt_vit_config cfg;
  vt_shard shard;
  int nblocks;             // this rank's blocks, over all its chunks
  int nchunks;             // model chunks: 1, or v under the interleaved schedule (params.h)
  int *chunk_start;        // nchunks + 1: chunk c is local blocks [chunk_start[c], chunk_start[c+1])
  int *block_id;           // nblocks: each local block's index in the whole model
  int slot_blocks;         // blocks a slot keeps activations for: the largest chunk's
  int has_embed, has_head;  // first / last virtual stage here: its chunk 0 embeds, its last chunk
                            // ends in the head
  int max_batch, nslots;
  int nwsets;             // weight sets (split backward, ZB-H1), 0: backwards are whole
  vt_block_wgrad **wsets;  // nwsets of slot_blocks
  int recompute;          // each chunk's first `recompute` blocks keep only their input
  int sp;                 // sequence parallelism (tp_size > 1 only)
  const vt_backend *be;
  vt_comm *tp;            // tensor-parallel group; NULL when tp_size == 1
  vt_param_table table;
  // Backend memory: params the table's total elements; grads those from grad_first on
  // (vt_params_grad_first of frozen_layers: a frozen prefix's layers run no backward, so they
  // get no gradient buffer), grads[0] being element grad_first's gradient.
  float *params, *grads;
  int64_t grad_first;
  vt_model_tensors p, g;  // views into params and grads (g's tensors below grad_first NULL)
  vt_model_slot *slots;
  vt_model_scratch s;
  void *act_block;        // the one activation allocation
  size_t act_nbytes;
  vt_precision precision;  // the backend's at init: it sized the bf16 activations
  uint64_t seed;           // vt_model_init's: it also keys the drop-path and dropout masks
  // Drop path (stochastic depth) rate of the last block; 0 (vt_model_init's) turns it off. Set
  // before the first forward.
  float drop_path;
  int drop_path_uniform;  // 1: every block at the rate (vt_drop_path_keep), not the ramp
  // Dropout probabilities (timm's proj_drop_rate: the attention's output, the MLP's hidden units
  // and its output in every block, only the hidden units in parallel blocks; attn_drop_rate: the
  // attention's probabilities; pos_drop_rate: the embedding's output; drop_rate: the head's
  // input); 0 (vt_model_init's) turns them off. Set before the first forward.
  float proj_drop, attn_drop, pos_drop, head_drop;
  // Training batches come with Mixup/CutMix targets in slot->mix (dataio/mix.h); 0 by default.
  int mix;
  // 1: training forwards use binary cross-entropy over the classes (vt_bce_fwd) instead of
  // the softmax cross-entropy; evaluation keeps the softmax one (timm's validate). 0 by default.
  int bce;
  // With bce: targets of 1 where the soft target exceeds it, else 0 (timm's target_threshold,
  // DeiT III's 0); negative (vt_model_init's -1): the soft targets.
  float bce_thresh;
  // The leading layers (vt_param.layer 0: the embeddings, i + 1: block i) that are frozen
  // (vt_freeze_leading_layers; vt_model_init's): the backward (and weight) passes skip them, as
  // nothing below them trains; their gradients stay as they were (zero), and their blocks keep no
  // activations per unit (one shared set, as recomputed blocks) and no gradient buffer
  // (grad_first). 0: none. Fixed at init.
  int frozen_layers;
  float *host_losses;     // (B) host copy of the per-sample losses
  // When set, vt_model_backward calls it as soon as the gradients of a layer's parameters are
  // complete (vt_param.layer numbering: the head first, then the blocks backwards, embeddings
  // last). The trainer sets it for a step's last backward only, to start their DP reduction
  // while the backward pass goes on.
  void (*grads_ready)(void *ctx, int layer);
  void *grads_ready_ctx;
} vt_model;

// Allocates one rank's part (shard.pp_chunks chunks) for micro-batches of up to max_batch images
// with nslots units (micro-batch, chunk) in flight and nwsets weight sets (units between their
// input-gradient and weight passes, ZB-H1; 0: whole backwards only), and initialises its
// parameters from seed (the same values as the whole model's, whatever the shard). Activation recompute: each chunk's first
// `recompute` blocks (all of them when it is at least the chunk's count; 0: none) keep only their
// input per unit, and the backward runs their forward again into one shared set of activations
// just before their backward (not with weight sets: the weight pass reads the activations again).
// frozen_layers: vt_model.frozen_layers. Fatal (with a message) when memory runs out.
void vt_model_init(vt_model *m, const vt_vit_config *cfg, vt_shard shard, vt_comm *tp,
                   int max_batch, int nslots, int nwsets, int recompute, int frozen_layers,
                   const vt_backend *be, uint64_t seed);
void vt_model_free(vt_model *m);
// The bytes of a gradient buffer for a table of total elements from grad_first on (one float
// where none, so that the buffer exists), and m->grads's.
static inline size_t vt_grad_buffer_nbytes(int64_t total, int64_t grad_first) {
  return (size_t)(total > grad_first ? total - grad_first : 1) * sizeof(float);
}
static inline size_t vt_model_grad_nbytes(const vt_model *m) {
  return vt_grad_buffer_nbytes(m->table.total, m->grad_first);
}
// The weights stay as they are from vt_model_hold_weights to vt_model_release_weights (a step's
// passes, an evaluation): a backend with hold_weights (vt_backend.h) rounds them to bf16 once
// there for every GEMM in between. vt_weight_copy_nbytes: the bytes of that copy for a table of
// total elements on a backend that keeps one (CUDA's) in bf16 precision, else 0;
// vt_model_weight_copy_nbytes: m's.
static inline size_t vt_weight_copy_nbytes(int64_t total, int keeps_copy, vt_precision prec) {
  return keeps_copy && prec == VT_PRECISION_BF16 ? (size_t)total * 2 : 0;
}
size_t vt_model_weight_copy_nbytes(const vt_model *m);
void vt_model_hold_weights(const vt_model *m);
void vt_model_release_weights(const vt_model *m);
// Whether local block l lies in the frozen prefix (vt_model.frozen_layers; block i is layer
// i + 1): nothing below it trains, so its backward and weight passes are skipped.
int vt_model_block_frozen(const vt_model *m, int l);
// The activation block vt_model_init would allocate (bytes), without allocating it: for
// `vit3d plan`. The backend's precision sizes the bf16 activations.
size_t vt_model_act_nbytes(const vt_vit_config *cfg, vt_shard shard, int max_batch, int nslots,
                           int nwsets, int recompute, int frozen_layers, const vt_backend *be);

// Forward of B images through one chunk, in a slot. Chunk 0 of the first stage: reads
// slot->img; others: slot->res[0]. The last chunk of the last stage: reads slot->labels and
// leaves the B per-sample losses in slot->losses (device memory); others leave the output in
// vt_model_chunk_output. sample0 is the data stream position of the
// first image (the micro-batch holds sample0 .. sample0 + B - 1), which keys the drop-path and
// dropout masks, so that every layout drops the same branches and elements; negative:
// evaluation (no drop path, no dropout, and the loss against slot->labels alone even with
// m->mix).
// Does not wait for the device.
void vt_model_forward(vt_model *m, int chunk, int slot, int B, float smoothing, int64_t sample0);
// Where a chunk's forward leaves its output in a slot (the activation sent downstream).
float *vt_model_chunk_output(const vt_model *m, int chunk, int slot);
// Last stage: the sum of the B per-sample losses of the slot's last forward, in double (copies
// them to the host, so it waits for the device); 0 on other stages.
double vt_model_loss_sum(vt_model *m, int slot, int B);
// Backward of that slot's forward (the same chunk); adds the gradient of loss_scale * (sum of
// losses) into m->grads (loss_scale = 1 / global batch for a mean loss). The head's chunk starts
// from the loss, others from slot->dout; all but the embedding's chunk leave the input's
// gradient in slot->dinput. wset -1: the whole backward. wset >= 0 (split backward): the input
// gradients, the head's, the embedding's and the blocks' bias and LayerNorm gradients; the
// blocks' four weight-matrix gradients wait in weight set wset for vt_model_backward_weight.
void vt_model_backward(vt_model *m, int chunk, int slot, int wset, int B, float smoothing,
                       float loss_scale);
// The blocks' weight-matrix gradients of that split backward (the same chunk, slot, wset and B),
// added into m->grads: the same bits as the whole backward. Reads the slot's activations, writes
// nothing that is sent or received. Calls grads_ready for each block.
void vt_model_backward_weight(vt_model *m, int chunk, int slot, int wset, int B);

// The MLPs' GELU form of the model's configuration.
static inline vt_act vt_model_gelu(const vt_model *m) {
  return m->cfg.quick_gelu ? VT_ACT_QUICK_GELU : m->cfg.gelu_tanh ? VT_ACT_GELU_TANH : VT_ACT_GELU;
}

// Rows of the (B*N, C) stream this rank holds for a micro-batch of B.
static inline int64_t vt_model_local_rows(const vt_model *m, int B) {
  int64_t M = (int64_t)B * vt_cfg_tokens(&m->cfg), tp = m->shard.tp_size;
  return m->sp ? (M + tp - 1) / tp : M;
}

// Drop path as timm's VisionTransformer(drop_path_rate=rate) has it: block `layer` (0-based, of
// depth) drops each branch of each sample with probability rate * layer / (depth - 1), the
// ramp of torch.linspace(0, rate, depth); uniform: every block with probability rate (CaiT's
// and DeiT III's models_v2); returns the keep probability, 1 when nothing drops.
double vt_drop_path_keep(float rate, int uniform, int layer, int depth);
// The mask of branch `branch` (0 attention, 1 MLP) of block `layer` for stream positions
// sample0 .. sample0 + B - 1 (B <= VT_DROP_PATH_MAX_SAMPLES): sample b keeps it when the
// uniform vt_rng_uniform(seed, vt_hash_name("drop_path"), 2 * layer + branch, sample0 + b) is
// below keep; a kept branch is scaled by fl(1 / fl(keep)). Rows: row0 0, N per sample.
void vt_drop_path_mask(vt_drop_mask *mask, uint64_t seed, int layer, int branch, double keep,
                       int64_t sample0, int B, int64_t N);

// Dropout's streams (vt_dropout_mask.site): the embedding's output (layer -1), three per block
// (its attention's output, its MLP's hidden units, its MLP's output; timm's attn.proj_drop,
// mlp.drop1, mlp.drop2), then the head's input (layer depth, timm's head_drop); after those, one
// per block for its attention's probabilities (timm's attn.attn_drop; vt_attn_dropout_site).
enum { VT_DROPOUT_ATTN = 0, VT_DROPOUT_HIDDEN = 1, VT_DROPOUT_MLP = 2 };
static inline uint32_t vt_dropout_site(int layer, int place) {
  return layer < 0 ? 0u : (uint32_t)(1 + 3 * layer + place);
}
static inline uint32_t vt_attn_dropout_site(int layer, int depth) {
  return (uint32_t)(2 + 3 * depth + layer);
}
// A dropout mask with probability p of stream `site` for the micro-batch of stream positions
// sample0.. of N tokens, over a (rows, width) tensor's part from row row0 and column col0 on.
void vt_dropout_mask_make(vt_dropout_mask *mask, uint64_t seed, uint32_t site, float p,
                          int64_t sample0, int64_t N, int64_t row0, int64_t width, int64_t col0);

// What a training forward drops in one block (members NULL: nothing): drop path's masks of its
// two branches (attention, MLP), dropout's of its three places (VT_DROPOUT_*) and of its
// attention's probabilities (vt_attention_fwd's numbering).
typedef struct {
  const vt_drop_mask *path;
  const vt_dropout_mask *drop;
  const vt_dropout_mask *attn;
} vt_block_noise;

// The MAP head (vit/map_head.c; global_pool 3) between the last block's output and the head's
// Linear: from x (B*N, C), every row (gathered under sequence parallelism), to slot->map.out
// (the statistics of `norm` in the slot's lnf_mean and lnf_rstd); back from s.map_dy (B, C),
// the head input's gradient as the head's Linear left it (used up), to dx (B*N, C),
// overwritten (not aliasing x). Adds the gradients of `norm` and attn_pool.
void vt_map_head_fwd(const vt_model *m, vt_model_slot *sl, const float *x, int B);
void vt_map_head_bwd(vt_model *m, const vt_model_slot *sl, float *dx, const float *x, int B);

// Blocks (vit/block.c): one transformer block's forward and backward on M = B*N rows, with the
// tensor-parallel all-reduces of Megatron's f and g mappings when m->tp is set. noise: what it
// drops (vt_block_noise).
void vt_block_fwd(const vt_model *m, const vt_block_tensors *w, vt_block_acts *a,
                  const float *in, float *out, int B, const vt_block_noise *noise);
// wg NULL: the whole backward; else the weight-matrix gradients are left out and their inputs
// kept in wg for vt_block_bwd_weight.
void vt_block_bwd(const vt_model *m, const vt_block_tensors *w, vt_block_tensors *gw,
                  const vt_block_acts *a, const float *in, float *dres, int B,
                  const vt_block_noise *noise, vt_block_wgrad *wg);
void vt_block_bwd_weight(const vt_model *m, vt_block_tensors *gw, const vt_block_acts *a,
                         const vt_block_wgrad *wg, int B);

#endif
