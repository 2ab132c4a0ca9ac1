// vt_backend.h: the backend table. A backend owns memory (alloc, copies) and implements every op
// of vt_ops.h as a function pointer with the same shape as the op. The CPU backend (src/cpu/) is
// the numerical truth; the CUDA backend (src/cuda/) is its twin. Only backend.c, the registry,
// knows which backends were compiled. Must not depend on MPI or the model.
//
// Conventions for every op: row-major tensors, shapes in the comments (design.md legend:
// B micro-batch, N tokens, C width, H heads, D head dim, F MLP hidden, K classes; M = rows).
// Activation gradients (dinp, dqkv, ...) are overwritten; parameter gradients (dweight, dbias,
// dcls, dpos) are accumulated (+=) so microbatches add up without extra passes.
#ifndef VT_BACKEND_H
#define VT_BACKEND_H

#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

typedef enum { VT_DEVICE_CPU = 0, VT_DEVICE_CUDA = 1 } vt_device;

// Precision of the GEMMs (linear and the two products of attention). fp32: fp32 operands. bf16:
// every GEMM operand is rounded to bfloat16 (round to nearest even) and the products are summed
// in fp32 into fp32 outputs, as tensor cores do; the activations that only feed GEMMs are
// stored in bf16, rounded where they are made (vt_ops.h); everything else (LayerNorm, softmax
// and GELU arithmetic, the residual stream, gradients, AdamW's master weights and moments) stays
// fp32. The CPU backend rounds at the same points before its fp32 GEMM, which makes it the
// exact reference of the CUDA backend's bf16 GEMMs up to the order of the fp32 additions.
typedef enum { VT_PRECISION_FP32 = 0, VT_PRECISION_BF16 = 1 } vt_precision;

// Which samples of a micro-batch keep a residual branch under drop path (stochastic depth,
// vt_ops.h's vt_drop_path). Small enough to travel by value into a CUDA kernel's arguments.
#define VT_DROP_PATH_MAX_SAMPLES 4096
typedef struct {
  float scale;              // a kept branch's factor, fl(1 / keep probability) as timm's DropPath
  int64_t row0;             // the first row's index among the micro-batch's B*N rows
  int64_t rows_per_sample;  // N
  uint32_t keep[VT_DROP_PATH_MAX_SAMPLES / 32];  // bit b % 32 of word b / 32: sample b is kept
} vt_drop_mask;

// Which elements dropout (vt_ops.h's vt_dropout) keeps. Element (r, c) of a (rows, cols) tensor is
// number first + r * width + c of the stream (seed, vt_hash_name("dropout"), site) and is dropped
// when that uniform (vt_rng.h) is below p: width is the whole tensor's row length (over TP) and
// first the element's number among all the run's (sample, token, channel) of the site, so every
// layout draws the same mask. By value into a CUDA kernel's arguments.
typedef struct {
  uint64_t seed;
  uint32_t site;  // the stream (vit/model.h: the embedding's, or one per block and place)
  float p;        // the drop probability, in [0, 1)
  float scale;    // a kept element's factor, fl(1 / (1 - p))
  int64_t first;  // the number of element (0, 0)
  int64_t width;  // numbers per row
} vt_dropout_mask;

// A Mixup/CutMix training target (dataio/mix.h): lam of the sample's own label and 1 - lam of
// its partner's, each label-smoothed (timm's mixup_target).
typedef struct {
  int32_t partner;  // the partner's label, in [0, K)
  float lam;
} vt_mix_target;

#define VT_INTERVAL_KINDS 4

typedef struct vt_backend vt_backend;
struct vt_backend {
  const char *name;
  vt_device device;

  // Memory: alloc returns zeroed memory aligned to at least 64 bytes, or NULL.
  void *(*alloc)(size_t nbytes);
  void (*free)(void *ptr);
  // to_device may return before the copy is done: host_src may change once it returns where it
  // is ordinary (pageable) memory, host_alloc memory only after the next synchronize.
  void (*to_device)(void *dst, const void *host_src, size_t nbytes);
  void (*to_host)(void *host_dst, const void *src, size_t nbytes);
  void (*copy)(void *dst, const void *src, size_t nbytes);
  void (*zero)(void *ptr, size_t nbytes);
  // Waits for the device's queued work (CUDA: and frees the op scratch outgrown since: call it
  // only where no pipeline message is pending, as the step's end).
  void (*synchronize)(void);
  // Host memory for what each step uploads (the loader's batches): page-locked (pinned) on CUDA,
  // so upload needs no staging and does not wait for the device; page-aligned on the CPU. NULL
  // when out of memory.
  void *(*host_alloc)(size_t nbytes);
  void (*host_free)(void *ptr);
  // Copies host_alloc memory to the device and returns at once (to_device may wait for the
  // device when the source is pageable): after every op issued before it, before every op issued
  // after it. The source must stay unchanged until upload_wait() returns, which waits for every
  // upload (and upload_ahead) issued before it.
  void (*upload)(void *dst, const void *host_src, size_t nbytes);
  // upload that may run ahead of the ops already issued: it waits only for those issued before
  // the latest inputs_read() call, so it must only write a buffer that no op issued after that
  // point reads (a micro-batch's images, read by its forward only: the trainer and evaluation
  // call inputs_read after every forward). On CUDA the copy runs on a stream of its own,
  // overlapping those ops (a backward pass, the optimizer); ops issued after it still see the
  // copied data.
  void (*upload_ahead)(void *dst, const void *host_src, size_t nbytes);
  void (*inputs_read)(void);
  void (*upload_wait)(void);
  // Sets the GEMM precision of every later op call (a process-wide mode of this backend).
  void (*set_precision)(vt_precision precision);
  vt_precision (*precision)(void);  // the one set (fp32 until set)
  // Bytes the ops' grow-only scratch holds now (attention's score gradients, bf16 operand
  // copies, reduction partials): its high-water mark once a step has run.
  size_t (*scratch_bytes)(void);
  // Times stretches of the device's work (the pipeline's passes): interval_begin() marks the
  // point after every op issued so far, interval_end(kind) closes the stretch since then, kind in
  // [0, VT_INTERVAL_KINDS). Once synchronize() has returned, interval_take adds each closed
  // stretch's milliseconds to ms[kind] and 1 to count[kind], and forgets them. The CPU's are host
  // clocks (its ops run when called); CUDA's are timing events on the compute stream, recorded
  // and read without a host wait.
  // For a timeline (vt_trace.h): once interval_origin() has run (it waits for the device to
  // finish what was issued, then marks that point: between steps), interval_take also writes
  // the first max_spans stretches' begin and end on the host clock (vt_seconds: the origin's host
  // time plus the device time since), spans[2 i] and spans[2 i + 1] in the order they closed,
  // and returns how many it wrote. interval_origin is NULL where the device is the host (the
  // CPU), whose interval_take writes none: there the host's ranges are the device's work.
  void (*interval_begin)(void);
  void (*interval_end)(int kind);
  int (*interval_take)(double *ms, double *count, double *spans, int max_spans);
  void (*interval_origin)(void);
  // Names a stretch of the host's calls for a profiler's timeline (on CUDA, NVTX ranges, which
  // Nsight Systems shows beside the kernels: `nsys profile --trace cuda,nvtx`): range_push(name)
  // opens a range inside the open one, range_pop closes the innermost. NULL where the backend
  // has none (the CPU; vt_range_push and vt_range_pop below call them where they exist).
  void (*range_push)(const char *name);
  void (*range_pop)(void);
  // A bf16 copy of weights that stay as they are for a while (a step's passes, an evaluation);
  // NULL where the backend keeps none (the CPU, whose GEMM rounding is cheap beside its GEMMs).
  // In bf16 precision hold_weights(w, count) rounds [w, w + count) once into a device copy
  // (grow-only, count * 2 bytes) that the linear ops read in place of rounding their weight at
  // every call while it lies in that span; in fp32 it does nothing. release_weights() ends
  // that: call it before the weights change. The results are the same bits either way.
  void (*hold_weights)(const float *w, int64_t count);
  void (*release_weights)(void);

  // Ops, in the order of vt_ops.h. NULL means "not on this backend"; vt_ops.c says so clearly.
  void (*linear_fwd)(float *out, const float *inp, const float *weight, const float *bias,
                     int64_t M, int64_t I, int64_t O);
  void (*linear_residual_fwd)(float *out, const float *inp, const float *weight,
                              const float *bias, const float *res, int64_t M, int64_t I,
                              int64_t O);
  void (*linear_act_fwd)(float *out, const float *inp, const float *weight, const float *bias,
                         int64_t M, int64_t I, int64_t O);
  void (*linear_bwd)(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);
  void (*linear_bwd_act)(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int64_t M, int64_t I, int64_t O);
  void (*linear_act_bwd)(float *dinp, float *dweight, const float *dout, const float *inp,
                         const float *weight, int64_t M, int64_t I, int64_t O);
  void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int64_t M, int64_t C,
                        float eps, int act);
  void (*layernorm_bwd)(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int64_t M, int64_t C);
  void (*add_layernorm_fwd)(float *sum, float *out, float *mean, float *rstd, const float *a,
                            const float *b, const float *weight, const float *bias, int64_t M,
                            int64_t C, float eps);
  void (*layernorm_bwd_add)(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int64_t M, int64_t C);
  void (*act_fwd)(float *out, const float *inp, int64_t count, int kind);  // kind: vt_act
  void (*act_bwd)(float *dinp, float *dbias, const float *inp, const float *dout, int64_t M,
                  int64_t F, int kind);
  void (*attention_fwd)(float *out, float *lse, const float *qkv, int64_t B, int64_t N,
                        int64_t H, int64_t D, const vt_dropout_mask *drop);
  void (*attention_bwd)(float *dqkv, float *dbias, const float *dout, const float *qkv,
                        const float *out, const float *lse, int64_t B, int64_t N, int64_t H,
                        int64_t D, const vt_dropout_mask *drop);
  void (*latent_attention_fwd)(float *out, float *lse, const float *q, const float *kv,
                               int64_t B, int64_t N, int64_t H, int64_t D);
  void (*latent_attention_bwd)(float *dq, float *dkv, float *dbias, const float *dout,
                               const float *q, const float *kv, const float *out,
                               const float *lse, int64_t B, int64_t N, int64_t H, int64_t D);
  void (*qk_norm_fwd)(float *out, float *mean, float *rstd, const float *qkv, const float *qw,
                      const float *qb, const float *kw, const float *kb, int64_t M, int64_t H,
                      int64_t D, float eps);
  void (*qk_norm_bwd)(float *dqkv, float *dqw, float *dqb, float *dkw, float *dkb, float *dbias,
                      const float *dout, const float *qkv, const float *qw, const float *kw,
                      const float *mean, const float *rstd, int64_t M, int64_t H, int64_t D);
  void (*to_act)(float *dst, const float *src, int64_t count);
  void (*add)(float *out, const float *a, const float *b, int64_t count);
  void (*drop_path)(float *out, const float *x, const float *res, int64_t rows, int64_t cols,
                    const vt_drop_mask *mask);
  void (*dropout)(float *out, const float *x, int64_t rows, int64_t cols,
                  const vt_dropout_mask *mask, int act);
  void (*patchify_fwd)(float *patches, const float *img, int64_t B, int64_t S, int64_t P);
  void (*patchify_bwd)(float *dimg, const float *dpatches, int64_t B, int64_t S, int64_t P);
  void (*embed_fwd)(float *x, const float *patch_out, const float *prefix, const float *pos,
                    int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C);
  void (*embed_bwd)(float *dpatch_out, float *dprefix, float *dpos, const float *dx, int64_t B,
                    int64_t N, int64_t T, int64_t pos0, int64_t C);
  void (*cls_pool_fwd)(float *out, const float *x, int64_t B, int64_t N, int64_t C);
  void (*cls_pool_bwd)(float *dx, const float *dout, int64_t B, int64_t N, int64_t C);
  void (*mean_pool_fwd)(float *out, const float *x, int64_t B, int64_t N, int64_t T, int64_t C);
  void (*mean_pool_bwd)(float *dx, const float *dout, int64_t B, int64_t N, int64_t T,
                        int64_t C);
  void (*norm_mean_pool_fwd)(float *out, float *pooled, float *mean, float *rstd, const float *x,
                             const float *weight, const float *bias, int64_t B, int64_t N,
                             int64_t T, int64_t C, float eps);
  void (*norm_mean_pool_bwd)(float *dx, float *dweight, float *dbias, const float *dout,
                             const float *x, const float *pooled, const float *weight,
                             const float *mean, const float *rstd, int64_t B, int64_t N,
                             int64_t T, int64_t C);
  void (*layer_scale_fwd)(float *out, const float *x, const float *gamma, int64_t rows,
                          int64_t cols);
  void (*layer_scale_bwd)(float *dx, float *dgamma, const float *dout, const float *x,
                          const float *gamma, int64_t rows, int64_t cols);
  void (*cross_entropy_fwd)(float *losses, float *probs, const float *logits,
                            const int32_t *labels, const vt_mix_target *mix, float smoothing,
                            int64_t B, int64_t K);
  void (*bce_fwd)(float *losses, float *probs, const float *logits, const int32_t *labels,
                  const vt_mix_target *mix, float smoothing, float thresh, int64_t B, int64_t K);
  void (*cross_entropy_bwd)(float *dlogits, const float *probs, const int32_t *labels,
                            const vt_mix_target *mix, float smoothing, float thresh, float scale,
                            int64_t B, int64_t K);
  void (*adamw)(float *param, const float *grad, float *m, float *v, const uint8_t *decay,
                int64_t count, float lr, float beta1, float beta2, float eps, float weight_decay,
                int64_t t, float grad_scale);
  void (*lamb_moments)(float *update, const float *param, const float *grad, float *m, float *v,
                       const uint8_t *decay, int64_t count, float beta1, float beta2, float eps,
                       float weight_decay, int64_t t);
  void (*lamb_apply)(float *param, const float *update, int64_t count, float lr, float trust);
  void (*sgd)(float *param, const float *grad, float *buf, const uint8_t *decay, int64_t count,
              float lr, float momentum, float weight_decay, int nesterov);
  void (*ema)(float *ema, const float *param, float decay, int64_t count);
  void (*sumsq)(double *out, const float *x, int64_t count);  // into backend memory, no wait
  void (*scale)(float *x, float alpha, int64_t count);
};

// The backend for a device, or NULL when it was not compiled in or no device is present (the
// reason goes to *why, a static string).
const vt_backend *vt_backend_get(vt_device device, const char **why);

// Picks this process's device before the first vt_backend_get: for CUDA the GPU numbered
// local_rank modulo the GPUs it sees (one GPU per rank; its ranks on the host come from MPI or
// the launcher, not from CUDA_VISIBLE_DEVICES; a rank shown only its own GPU, as by srun
// --gpus-per-task, takes GPU 0), with that GPU's UUID in id (zeros for the CPU): the caller
// refuses two ranks with one GPU. Writes what it picked ("cpu", "cuda:1 NVIDIA H200 139.8 GiB")
// to desc; returns 0, or 1 with the reason in desc (no GPU, too old, no CUDA in this build).
int vt_backend_select(vt_device device, int local_rank, char *desc, size_t desclen,
                      unsigned char id[16]);

// After vt_backend_select, for the start-up checks: whether the device's attention kernels take
// head dim D in bf16 (1) or fp32 (0): the shared memory per block they need for it in *need, the
// GPU's opt-in limit (cudaDevAttrMaxSharedMemoryPerBlockOptin) in *limit (both 0 for the CPU,
// which takes any D). And the most tokens the MAP head's latent attention takes (INT64_MAX: no
// limit).
int vt_backend_attention_fits(vt_device device, int bf16, int64_t D, size_t *need,
                              size_t *limit);
int64_t vt_backend_latent_max_tokens(vt_device device);

// Device memory in use on this process's GPU in bytes (what the driver reports: ours and the
// libraries'), or 0 for the CPU.
size_t vt_backend_device_memory_used(vt_device device);

// Threads for the CPU backend's OpenMP and BLAS together (design.md: never more than the cores).
void vt_backend_set_threads(int threads);

// What was compiled in, for --version and the test log.
const char *vt_backend_build_info(void);

// be's range_push of the printf-style name (cut at 127 characters) and its range_pop (nothing
// where be has no ranges), both recorded for the run's timeline while vt_trace_start's
// recording is on (vt_trace.h).
void vt_range_push(const vt_backend *be, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void vt_range_pop(const vt_backend *be);

#ifdef __cplusplus
}
#endif

#endif
