// model.h: the ViT forward and backward on one backend, for micro-batches of up to B images.
// Pre-LN blocks (x += attn(norm1(x)); x += mlp(norm2(x))), class-token pooling, timm's
// VisionTransformer layout. Memory is allocated once at init: parameters and gradients as two
// flat buffers laid out by the parameter table, activations as one block (design.md, Memory).
// Must not depend on MPI.
#ifndef VT_MODEL_H
#define VT_MODEL_H

#include "config.h"
#include "params.h"
#include "vt_backend.h"

// Views of one block's tensors inside a flat buffer (parameters or gradients).
typedef struct {
  float *norm1_w, *norm1_b;  // (C)
  float *qkv_w, *qkv_b;      // (3C, C), (3C)
  float *proj_w, *proj_b;    // (C, C), (C)
  float *norm2_w, *norm2_b;  // (C)
  float *fc1_w, *fc1_b;      // (F, C), (F)
  float *fc2_w, *fc2_b;      // (C, F), (C)
} vt_block_tensors;

typedef struct {
  float *cls, *pos;           // (C), (N, C)
  float *patch_w, *patch_b;   // (C, 3*P*P), (C)
  vt_block_tensors *blocks;   // depth entries
  float *norm_w, *norm_b;     // (C)
  float *head_w, *head_b;     // (K, C), (K)
} vt_model_tensors;

// Saved activations of one block for one micro-batch. M = B*N rows.
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd;  // (B, N, C), (B*N), (B*N)
  float *qkv;                        // (B, N, 3C)
  float *att;                        // (B, H, N, N)
  float *attn;                       // (B, N, C) attention output before proj
  float *mid;                        // (B, N, C) stream after the attention branch
  float *ln2, *ln2_mean, *ln2_rstd;  // (B, N, C), (B*N), (B*N)
  float *fc1;                        // (B, N, F) before GELU
  float *gelu;                       // (B, N, F)
} vt_block_acts;

typedef struct {
  float *img;                    // (B, 3, S, S) input
  int32_t *labels;               // (B)
  float *patches;                // (B, N-1, 3*P*P)
  float *patch_out;              // (B, N-1, C)
  float **res;                   // depth+1 entries of (B, N, C): the stream entering each block
  vt_block_acts *blocks;         // depth entries
  float *pooled;                 // (B, C)
  float *lnf, *lnf_mean, *lnf_rstd;  // (B, C), (B), (B)
  float *logits, *probs, *losses;    // (B, K), (B, K), (B)
  // Backward scratch, reused by every block.
  float *dres, *dbranch, *dln;   // (B, N, C)
  float *dqkv;                   // (B, N, 3C)
  float *dgelu, *dfc1;           // (B, N, F)
  float *dpatch_out;             // (B, N-1, C)
  float *dpooled, *dlnf, *dlogits;  // (B, C), (B, C), (B, K)
} vt_model_acts;

typedef struct {
  vt_vit_config cfg;
  int max_batch;
  const vt_backend *be;
  vt_param_table table;
  float *params, *grads;  // flat, table.total elements each, backend memory
  vt_model_tensors p, g;  // views into params and grads
  vt_model_acts a;
  void *act_block;        // the one activation allocation
  size_t act_nbytes;
  float *host_losses;     // (B) host copy of the per-sample losses
} vt_model;

// Allocates everything for micro-batches of up to max_batch images and initialises the
// parameters from seed. Fatal (with a message) when memory runs out.
void vt_model_init(vt_model *m, const vt_vit_config *cfg, int max_batch, const vt_backend *be,
                   uint64_t seed);
void vt_model_free(vt_model *m);

// Forward of B images already in m->a.img / m->a.labels (backend memory); returns the sum of
// the B per-sample losses (one small device-to-host copy). Logits stay in m->a.logits.
double vt_model_forward(vt_model *m, int B, float smoothing);
// Backward of the last forward; adds the gradient of loss_scale * (sum of losses) into m->grads
// (loss_scale = 1 / global batch for a mean loss).
void vt_model_backward(vt_model *m, int B, float smoothing, float loss_scale);

#endif
