// optim.h: the learning-rate schedule (linear warmup, then a cosine or linear decay to min_lr, or
// the peak rate held), and the
// optimizer step of one rank: data-parallel gradient reduction (bucketed all-reduce, or ZeRO-1's
// reduce-scatter + all-gather), one global gradient norm that counts every parameter once across
// all three mesh axes, clipping, and the update (AdamW, LAMB, SGD with plain or Nesterov
// momentum, LARS or LARC) with decay only where the parameter table says so.
// Depends on src/ and parallel/ (the comm API); knows no MPI.
#ifndef VT_OPTIM_H
#define VT_OPTIM_H

#include <stdint.h>

#include "params.h"
#include "spike.h"
#include "vt_backend.h"

typedef struct vt_comm vt_comm;

typedef enum {
  VT_OPT_ADAMW,  // torch.optim.AdamW
  VT_OPT_LAMB,   // timm's Lamb: Adam's direction plus weight decay, scaled per tensor by the
                 // trust ratio ||w|| / ||direction|| (tensors without weight decay: plain Adam)
  VT_OPT_SGD,    // torch.optim.SGD with momentum (Nesterov's or not) and L2 weight decay: the
                 // ViT paper's and big_vision's fine-tuning; one state buffer, no second moment
  VT_OPT_LARS,   // timm's Lars (large batches, linear probes): per tensor with weight decay the
                 // gradient plus weight decay * w, scaled by the trust ratio
                 // VT_LARS_TRUST ||w|| / (||g|| + weight_decay ||w|| + eps) (1 where ||w|| or
                 // ||g|| is 0), then SGD's momentum (Nesterov's or not); tensors without weight
                 // decay: plain momentum SGD. One state buffer, as SGD. With trust_clip, timm's
                 // LARC (larc, nlarc): the ratio becomes min(ratio / the tensor's lr, 1).
} vt_opt_kind;

#define VT_LARS_TRUST 0.001  // timm's Lars trust_coeff (its train.py does not change it)

// The state buffers an optimizer keeps per element: Adam's two moments, SGD's and LARS's one
// momentum.
static inline int vt_opt_state_buffers(vt_opt_kind kind) {
  return kind == VT_OPT_SGD || kind == VT_OPT_LARS ? 1 : 2;
}

// After the warmup (--sched): timm's CosineLRScheduler's half cosine from lr to min_lr; a
// straight line from lr to min_lr (timm's PolyLRScheduler with power 1, --sched poly
// --decay-rate 1); or lr held to the end (min_lr unused).
typedef enum { VT_SCHED_COSINE = 0, VT_SCHED_LINEAR = 1, VT_SCHED_CONSTANT = 2 } vt_sched_kind;
// --sched's word for a kind (0..2).
static inline const char *vt_sched_name(int kind) {
  static const char *const names[3] = {"cosine", "linear", "constant"};
  return names[kind];
}

typedef struct {
  vt_opt_kind kind;
  vt_sched_kind sched;
  float lr, min_lr;
  int64_t warmup_steps, total_steps;
  float warmup_lr;  // > 0: the warmup climbs from it at step 0 (timm's --warmup-lr); 0: from lr/W
  // timm's per-epoch schedule (--sched-on epochs; timm's train.py default, DeiT's) where
  // epoch_images > 0: step s takes the rate of its epoch e = floor(s * step_images /
  // epoch_images), the epoch its first image is in: warmup_lr + e (lr - warmup_lr) /
  // warmup_epochs while e < warmup_epochs, then min_lr + (lr - min_lr)(1 + cos(pi e /
  // cycle_epochs)) / 2, the cosine counted from epoch 0 (timm's CosineLRScheduler: no warmup
  // prefix), min_lr from epoch cycle_epochs on (linear: min_lr + (lr - min_lr)(1 - e /
  // cycle_epochs), timm's PolyLRScheduler; constant: lr).
  int64_t epoch_images, step_images;
  double warmup_epochs, cycle_epochs;
  float beta1, beta2, eps, weight_decay;
  float momentum;  // SGD: the momentum (timm's --momentum, 0.9)
  int nesterov;    // SGD: 1 Nesterov's (timm's --opt sgd), 0 plain (--opt momentum)
  int trust_clip;  // LARS: 1 LARC's clipped trust ratio (timm's --opt larc, nlarc)
  float clip_grad;  // max global gradient norm; 0 turns clipping off
  // The spike guard (spike.h): a step whose global loss or gradient norm is more than spike_z
  // moving standard deviations above its moving mean (span spike_window steps; 0: 100) is
  // skipped. 0: off (the statistics are kept all the same, for checkpoints).
  float spike_z;
  int spike_window;
  // Layer-wise learning-rate decay (BEiT, MAE fine-tuning): the tensors of layer l
  // (vt_param.lr_layer: 0 embeddings, 1..depth blocks, depth+1 final norm, norm_pre and head) step
  // with lr * layer_decay^(depth + 1 - l), their weight decay too (as AdamW's per-group lr). 0 or
  // 1: off.
  float layer_decay;
  int depth;        // the model's blocks, for layer_decay
  // The weights' exponential moving average (timm's ModelEmaV2), updated after every step that
  // is not skipped: ema = ema * ema_decay + params * (1 - ema_decay). 0: none.
  float ema_decay;
  // 1: timm's ModelEmaV3 with use_warmup, as its train.py steps it (--model-ema-warmup): update
  // t (1-based) uses vt_ema_decay_at's rate, 0 at t = 1 (the EMA becomes the weights), then
  // min(ema_decay, 1 - t^(-2/3)).
  int ema_warmup;
  // Frozen tensors (--freeze, --trainable; PyTorch's requires_grad=False): those whose timm name
  // matches `freeze`, and where `trainable` is set those whose name does not match it (POSIX
  // extended regular expressions, unanchored; empty: no pattern). They keep their values: no
  // update, no weight decay, no optimizer state or EMA change, not in the gradient norm (so not
  // in clipping either); their gradients are computed and reduced, but for a frozen prefix of
  // whole layers, whose backward the model skips (vt_model.frozen_layers).
  char freeze[256], trainable[256];
} vt_optim_config;

// Marks frozen[i] (1 or 0) for each row of t under cfg's patterns and counts them into *count.
// VT_ERR_INPUT when a pattern is not a valid regular expression (err says which and why).
vt_status vt_freeze_mark(const vt_optim_config *cfg, const vt_param_table *t,
                         unsigned char *frozen, int *count, char *err, size_t errlen);

// What cfg's patterns freeze of the whole model: tensors (of all_tensors) and their elements (of
// all_elements); leading_layers, how many of its first layers (vt_param.layer 0, 1, ...) are
// frozen entirely (the backward can skip them: vt_model.frozen_layers); and names_hash, a 32-bit
// FNV-1a hash of the frozen names in table order, each followed by a newline (0 when none),
// which checkpoint manifests record.
typedef struct {
  int tensors, all_tensors, leading_layers;
  int64_t elements, all_elements;
  uint32_t names_hash;
} vt_freeze_summary;
// The flat index in rank table t where the optimizer's state starts: every tensor laid out
// before it is frozen (a frozen prefix, such as a linear probe's whole backbone), so their
// moments and EMA are not kept and ZeRO-1 shards only [base, t->total). t->total when all are
// frozen, 0 without patterns (validated ones).
int64_t vt_optim_state_base(const vt_optim_config *cfg, const vt_param_table *t);
// The elements of rank table t that DP reduces each step without ZeRO-1: those of every layer
// (vt_param.layer) with a tensor that is not frozen (vt_optimizer's overlap).
int64_t vt_optim_dp_reduced(const vt_optim_config *cfg, const vt_param_table *t);
// vt_freeze_summary's leading_layers for patterns already validated (0 without patterns).
int vt_freeze_leading_layers(const vt_optim_config *cfg, const vt_vit_config *model);
// The patterns as flags for messages: "--freeze 'A'", "--trainable 'B'", both, or "".
const char *vt_freeze_flags(const vt_optim_config *cfg, char *buf, size_t size);
vt_status vt_freeze_summarize(const vt_optim_config *cfg, const vt_vit_config *model,
                              vt_freeze_summary *s, char *err, size_t errlen);

// The EMA's decay at update t (1-based, skipped steps not counted) under cfg: ema_decay, or with
// ema_warmup ModelEmaV3's 1 - (1 + (t - 1))^(-2/3) capped at ema_decay (0 at t = 1), in double
// as timm's Python, rounded to float.
float vt_ema_decay_at(const vt_optim_config *cfg, int64_t t);

// The learning-rate factor of layer l (vt_param.lr_layer) under cfg's layer decay.
double vt_layer_lr_scale(const vt_optim_config *cfg, int layer);

// Learning rate of step s (0-based): lr * (s+1)/warmup during warmup (with warmup_lr > 0:
// warmup_lr + s (lr - warmup_lr) / warmup, timm's), then a half cosine (or a straight line) from
// lr at the end of warmup down to min_lr at total_steps, or lr held. With epoch_images > 0,
// timm's per-epoch rate (above).
float vt_lr_at(const vt_optim_config *oc, int64_t step);

typedef struct {
  vt_optim_config cfg;
  const vt_backend *be;
  const vt_param_table *table;
  vt_comm *tp, *pp, *dp;  // NULL where the axis has size 1
  int zero;               // 1: ZeRO-1, Adam moments sharded over dp
  // The state covers the flat elements [base, table->total) (vt_optim_state_base: the tensors
  // before base are frozen; their moments are zero and their EMA is their value).
  int64_t base;
  // The state this rank keeps and updates: the flat elements [shard_lo, shard_lo + shard_count),
  // all from base on, or under ZeRO-1 DP rank r's shard: shard_lo = base + r * part, part =
  // (table->total - base) / dp (0 without ZeRO-1), the last DP rank's also the tail of fewer
  // than dp elements after them. Each shard's gradients are reduced to its owner in place (one
  // reduce each, below); the weights' all-gather moves dp shards of part elements in place, and
  // the tail is broadcast from the last DP rank.
  int64_t part, shard_lo, shard_count;
  float *m, *v;           // Adam moments: shard_count elements; SGD: m its momentum, v NULL
  float *ema;             // the weights' EMA (cfg.ema_decay > 0), else NULL: as m, updated
                          // from the shard of the weights it updates
  uint8_t *decay;         // as m, backend memory: 1 where weight decay applies
  // The step's sums of squares (the gradient norm's runs of tensors; LAMB's per-tensor norms of
  // the weights and direction), queued into sums (backend memory) and brought to the host as
  // one copy into norms: one wait for the device each, not one per tensor. 2 * table->count + 1
  // doubles each; run_key: each norm run's kind (counted or a TP copy).
  double *sums, *norms;
  unsigned char *run_key;
  int64_t t;              // optimizer steps taken (the EMA's warmup; skipped steps = steps - t)
  // Adam's moments started from zero at step count t0 (0, or where a resume unfroze tensors and
  // restarted them: ckpt_resume.c); its bias corrections count t - t0 steps
  int64_t t0;
  vt_spike_stats spike;   // the spike guard's statistics (the same on every rank)
  int spiked;             // the last step was skipped as a spike: VT_SPIKE_LOSS + 1 or _NORM + 1
  // Overlap: the flat range [layer_lo, layer_hi) of each layer's parameters (vt_param.layer,
  // 0..depth+1; empty where this rank holds none). Without ZeRO, each layer is reduced over dp
  // as one asynchronous all-reduce (its range empty too where all its tensors are frozen),
  // started by vt_optimizer_grads_ready or else by the step. Under ZeRO-1, DP rank r's shard is
  // reduced to it as one asynchronous reduce once every layer with elements in the shard is
  // final: owner_wait[r] of them still to come (owner_need[r] at the step's start), so the
  // shards of the layers the backward pass finishes first go while it runs on.
  int overlap, nlayers;
  int64_t *layer_lo, *layer_hi;
  unsigned char *started;
  int *owner_need, *owner_wait;
  int reductions;          // the DP reductions a step makes on this rank (layers, or shards)
  int started_early;       // of those, started by vt_optimizer_grads_ready in the last step
  unsigned char *frozen;   // per table row: 1 where cfg's patterns freeze the tensor
  int64_t grad_first;      // the gradient buffers' first element (vt_optimizer_init)
} vt_optimizer;

// grad_first: the first element of the table whose gradient the gradient buffers passed in hold
// (vt_model.grad_first; they hold the elements from there on): 0 for whole tables' buffers.
void vt_optimizer_init(vt_optimizer *o, const vt_optim_config *cfg, const vt_backend *be,
                       const vt_param_table *table, vt_comm *tp, vt_comm *pp, vt_comm *dp,
                       int zero, int64_t grad_first);
void vt_optimizer_free(vt_optimizer *o);
// Bytes of optimizer memory on this rank (moments, the EMA, the weight-decay mask), for the
// memory plan; its norms' sums (2 * table->count + 1 doubles) left out.
size_t vt_optimizer_nbytes(const vt_optimizer *o);
// The same for a rank holding `trained` parameter elements after its frozen prefix
// (vt_optim_state_base: all of them without one), before any allocation (vit3d plan), under
// ZeRO-1 the largest shard's (the last DP rank's); moments: the state buffers per element (2 for
// AdamW and LAMB, 1 for SGD).
size_t vt_optimizer_plan_nbytes(int64_t trained, int dp_size, int zero, int ema, int moments);
// The elements of this rank's local table whose weights and state it writes to a checkpoint:
// the returned number (1 or 2) of ranges [lo[j], lo[j] + count[j]) in table order, DP replicas
// writing disjoint ranges that cover the table: the dp_rank-th of equal slices, or under ZeRO-1
// the dp_rank-th of equal slices of the frozen prefix (where it has elements) and its shard.
int vt_optimizer_write_ranges(const vt_optimizer *o, int64_t lo[2], int64_t count[2]);
// The same for DP rank dp_rank of dp_size holding a table of total elements whose optimizer state
// starts at base (vt_optim_state_base), with or without ZeRO-1, before any allocation (vit3d
// plan's host memory at a save).
int vt_optim_write_ranges(int64_t total, int64_t base, int dp_rank, int dp_size, int zero,
                          int64_t lo[2], int64_t count[2]);
// Starts the weights' EMA at params (this rank's table->total elements, backend memory): at the
// start of a run, or on a resume from a checkpoint without one. Does nothing without EMA.
void vt_optimizer_ema_reset(vt_optimizer *o, const float *params);
// The whole EMA of this rank's table->total elements into dst (backend memory), for evaluation
// and export, the frozen prefix's from params (may be dst itself); under ZeRO-1 an all-gather
// over dp (every DP rank must call it).
void vt_optimizer_ema_full(vt_optimizer *o, const float *params, float *dst);
// A checkpoint's EMA back (vt_optimizer_get_range saves it): this rank's table->total elements,
// of which it keeps its shard under ZeRO-1.
void vt_optimizer_set_ema(vt_optimizer *o, const float *host);

// The gradients of `layer` (vt_param.layer) are final for this step: start their DP reduction
// (overlap with the rest of the backward pass; under ZeRO-1 the TP sum of the layer's partial
// gradients first, then the reduce of each shard whose layers are now all final). Does nothing
// without overlap or when started. Every rank calls it for the same layers in the same order
// (vt_model.grads_ready).
void vt_optimizer_grads_ready(vt_optimizer *o, float *grads, int layer);

// A step that is skipped without vt_optimizer_step (its loss was not finite, or a spike):
// waits for the reductions its backward pass started (collectives cannot be withdrawn) and
// forgets them. Every rank skips the same steps, so all wait for the same operations.
void vt_optimizer_skip(vt_optimizer *o);
// The step's global loss (the same on every rank) taken into the spike guard's statistics: 1
// where it is a spike (o->spiked says so; the caller then skips the step), else 0.
int vt_optimizer_loss_spike(vt_optimizer *o, double loss);

// One step on this rank's parameters (the table's total elements) and accumulated gradients
// (grads: the elements from grad_first on, as every grads here): reduce the gradients over dp,
// compute the global norm (returned, before clipping), clip, update with learning rate lr.
// A non-finite norm (NaN or infinite gradients anywhere), or a spike of it (cfg.spike_z;
// o->spiked says so), leaves parameters and state unchanged.
// Collective over every axis: all ranks call it once per step.
double vt_optimizer_step(vt_optimizer *o, float *params, float *grads, float lr);

// Checkpoints: elements [lo, lo + count) of this rank's local table of the Adam moments (AdamW's
// or LAMB's; SGD's momentum buffer into m_host, v_host untouched and may be NULL) and, when
// ema_host is not NULL and there is one, of the EMA, into host memory; params_host holds the
// weights of that range (the frozen prefix's EMA). Under ZeRO-1 the part past the frozen prefix
// must be within the rank's own shard (vt_optimizer_write_ranges): no communication.
void vt_optimizer_get_range(vt_optimizer *o, int64_t lo, int64_t count, const float *params_host,
                            float *m_host, float *v_host, float *ema_host);
// The moments back from a checkpoint: this rank's table->total elements of each (the shard is
// cut out under ZeRO-1), and the optimizer steps taken.
void vt_optimizer_set_state(vt_optimizer *o, const float *m_host, const float *v_host, int64_t t,
                            int64_t t0);

#endif
