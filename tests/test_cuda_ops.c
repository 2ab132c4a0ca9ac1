// test_cuda_ops.c: every op of the backend table, forward and backward, on the CUDA backend
// against the CPU backend (the numerical truth) on the same random inputs, over several shapes
// including odd ones. For each op, shape and output tensor it prints the normwise relative error
// max|cuda - cpu| / max|cpu| and the op's tolerance, and checks that two runs of the CUDA op give
// the same bits (design.md's determinism contract). Outputs start poisoned with NaN, so an
// element the op forgets to write fails; accumulated gradients start from random values, so
// overwriting instead of adding fails too.
//
// Table-driven: one row per op of vt_backend (its tolerance per precision and its shapes), one
// small runner per row (cuda_ops_block.c, cuda_ops_model.c; helpers in cuda_ops_util.c). Each precision (vt_backend.h) is a column of `tol`: both backends run in
// that precision; ops that do not depend on it have no bf16 column (-1) and run once.
//
// Usage: test_cuda_ops [--cpu] [--shapes=N] [--shape=A,B,...] [--prec=fp32|bf16] [OP...]: N,
// the first N shapes of each op only (the sanitizers' runs); --shape, only that shape (in the
// op's dims; missing ones 0) for every op named (tests/fuzz_cuda_ops.sh); --prec, that
// precision only (tests/test_attention_variants.sh: the variants are bf16 kernels). Exits 77
// (CTest's skip) when no CUDA backend is usable.
// --cpu compares the CPU backend with itself, so the harness itself is exercised on machines
// without a GPU (every error is then 0). Only the public op API (vt_ops.h, vt_backend.h); must
// not depend on CUDA headers, MPI or the model.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops_test.h"

// ---- the table -----------------------------------------------------------------------------
// Tolerances are normwise: max|cuda - cpu| / max|cpu| (fp32 unit roundoff u = 6e-8). Both sides
// are fp32 but sum in different orders (warp butterflies, chunked trees and cuBLAS's blocking
// against the CPU's sequential loops and OpenBLAS), and nvcc contracts a*b+c into FMAs where gcc
// in ISO C mode does not. An L-term sum then differs by about sqrt(L) u typically, L u at worst,
// relative to the sum of magnitudes; each tolerance leaves about 10x over that for the longest
// reduction of its shapes:
//   0      pure data movement, or the same roundings in the same order on both sides (patchify,
//          cls_pool, mean_pool: its token sum in order and one division,
//          add, drop_path, dropout, scale, ema, embed: one add or product, and dprefix/dpos add
//          the batch in the CPU's order; layer_scale_fwd: one product).
//   1e-6   element-wise with FMA contraction or library functions: AdamW, cross-entropy bwd
//          (a few ulp).
//   2e-6   GELU: the CPU uses its own erf (abs. error 1.5e-7) and exp, CUDA erff and expf.
//   1e-5   LayerNorm forward (C <= 768 terms; norm_mean_pool's too, then up to 197 tokens'
//          xhat summed in order on both sides), cross-entropy forward (sums in double; exp and
//          log of up to 1000 classes), GELU backward (its fused bias gradient sums up to 1100
//          rows of GELU derivatives, each a few 1e-7 apart), LayerScale backward (dgamma sums
//          up to 1100 rows of products, in chunks on CUDA).
//   5e-5   LayerNorm backward (dweight sums over up to 1000 rows; norm_mean_pool's mean(g) a
//          256-thread tree on CUDA), attention forward (D = 64
//          scores, then N = 197 products; exp turns absolute score errors into relative ones;
//          lse's row sums run in tiles of 64 on CUDA, in one pass on the CPU).
//   1e-4   linear (sums of up to 1152 products), attention backward (recomputed scores, three
//          chained products and the cancelling dP - delta).
//   1e-12  sumsq: squares are exact in double; only the order of the double additions differs.
// bf16 (the GEMMs of linear and attention): both sides round the same operands to bf16 and sum
// exact products in fp32, so linear keeps its fp32 tolerance. Attention rounds values it
// computed (the probabilities, dS), which differ between the sides by a few ulp of fp32; one
// that sits next to a bf16 rounding boundary then rounds the other way, an error of 2^-8 of that
// element, a few 1e-6 normwise in tests/test_bf16.c; 5e-4 allows for that and still fails an
// operand left unrounded (1.5e-3 to 2.8e-3 measured there). Outputs that bf16 precision stores
// as bf16 (vt_ops.h: layernorm, gelu, patchify, attention's out) have their own rule
// (check_bf16); the column then applies to the op's fp32 outputs (mean, rstd, sum).
typedef struct {
  const char *op, *dims;
  void (*run)(tc *, const int64_t *);
  double tol[NPREC];
  int64_t shapes[16][5];  // a row of zeros ends the list
} op_test;

static const op_test kTests[] = {
    {"linear_fwd", "M,I,O,bias", t_linear_fwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 192, 576, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 384, 1152, 1},
      {5, 1000, 2, 0}}},
    {"linear_residual_fwd", "M,I,O,bias", t_linear_residual_fwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 768, 192, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 3072, 768, 1}}},
    {"linear_act_fwd", "M,I,O,bias", t_linear_act_fwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 192, 576, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 384, 1152, 1}}},
    {"linear_bwd", "M,I,O,dinp+2dbias+4nodw", t_linear_bwd, {1e-4, 1e-4},
     {{7, 3, 77, 3}, {197, 192, 576, 3}, {1, 1, 1, 3}, {33, 65, 17, 0}, {394, 384, 1152, 3},
      {5, 1000, 2, 2}, {1000, 7, 5, 1}, {1100, 9, 40, 3},  // 1100: three column-sum chunks
      {197, 192, 576, 7}, {33, 65, 17, 5}}},
    {"linear_bwd_act", "M,I,O,2dbias+4nodw", t_linear_bwd_act, {1e-4, 1e-4},
     {{7, 3, 77, 2}, {197, 768, 192, 2}, {1, 1, 1, 2}, {33, 65, 17, 0}, {1100, 9, 40, 2},
      {197, 768, 192, 6}, {33, 65, 17, 4}}},
    {"linear_act_bwd", "M,I,O,dinp+2nodw", t_linear_act_bwd, {1e-4, 1e-4},
     {{7, 3, 77, 1}, {197, 192, 576, 1}, {1, 1, 1, 1}, {33, 65, 17, 0}, {394, 384, 1152, 1},
      {197, 192, 576, 3}}},
    {"layernorm_fwd", "M,C,eps5+2fp32out", t_layernorm_fwd, {1e-5, 1e-5},
     {{197, 192}, {5, 7}, {1, 1}, {1, 3}, {394, 768}, {300, 33}, {1000, 64}, {197, 192, 1},
      {394, 768, 3}, {5, 7, 2}, {9, 1024}, {9, 1280}}},  // the register kernels' widest; past it
    {"layernorm_bwd", "M,C", t_layernorm_bwd, {5e-5, -1},
     {{197, 192}, {5, 7}, {1, 1}, {1, 3}, {394, 768}, {300, 33}, {1000, 64}, {9, 1024}, {9, 1280}}},
    {"add_layernorm_fwd", "M,C", t_add_layernorm_fwd, {1e-5, 1e-5},
     {{197, 192}, {5, 7}, {1, 1}, {394, 768}, {300, 33}, {9, 1024}, {9, 1280}}},
    {"layernorm_bwd_add", "M,C", t_layernorm_bwd_add, {5e-5, -1},
     {{197, 192}, {5, 7}, {1, 1}, {394, 768}, {300, 33}, {9, 1024}, {9, 1280}}},
    {"act_fwd", "count,kind", t_act_fwd, {2e-6, 2e-6},
     {{1, 0}, {7, 0}, {1000, 0}, {197 * 768 + 5, 0}, {7, 1}, {197 * 768 + 5, 1}, {7, 2},
      {1000 * 384 + 3, 2}, {7, 3}, {197 * 768 + 5, 3}}},
    {"act_bwd", "M,F,dbias,kind", t_act_bwd, {1e-5, 1e-5},
     {{1, 1, 1, 0}, {1, 7, 0, 0}, {1000, 3, 1, 0}, {197, 768, 1, 0}, {1100, 9, 1, 0},
      {5, 1000, 0, 0}, {197, 768, 1, 1}, {1, 7, 0, 1}, {256, 384, 1, 2}, {3, 5, 0, 2},
      {197, 768, 1, 3}, {1, 7, 0, 3}}},
    {"attention_fwd", "B,N,H,D,drop", t_attention_fwd, {5e-5, 5e-4},
     {{2, 197, 3, 64}, {1, 5, 1, 7}, {3, 300, 2, 8}, {1, 65, 4, 16}, {1, 1, 2, 3},
      {2, 50, 12, 64}, {1, 70, 2, 80}, {1, 40, 1, 96},  // 80: ViT-H/14; 96: fp32's largest
      {2, 197, 3, 64, 1}, {1, 5, 1, 7, 2}, {3, 130, 2, 8, 2},
      // the mma.sync kernels' other widths (NK 2, 3, 5; D 40 and 72 leave a zero chunk), N = 1
      {1, 100, 2, 32}, {2, 129, 1, 48}, {1, 77, 2, 40, 1}, {1, 1, 2, 16}, {1, 66, 2, 72, 1}}},
    {"attention_bwd", "B,N,H,D,dbias+2drop", t_attention_bwd, {1e-4, 5e-4},
     {{2, 197, 3, 64, 1}, {1, 5, 1, 7, 0}, {3, 300, 2, 8, 1}, {1, 65, 4, 16, 1}, {1, 1, 2, 3, 1},
      {2, 50, 12, 64, 0}, {1, 70, 2, 80, 1}, {1, 40, 1, 96, 1},  // 80: ViT-H/14; 96: fp32's largest
      {2, 197, 3, 64, 3}, {1, 5, 1, 7, 4}, {3, 130, 2, 8, 5},
      {1, 100, 2, 32, 1}, {2, 129, 1, 48, 0}, {1, 77, 2, 40, 3}, {1, 1, 2, 16, 1},
      {1, 66, 2, 72, 3}}},
    {"latent_attention_fwd", "B,N,H,D", t_latent_attention_fwd, {5e-5, 5e-4},
     {{2, 197, 3, 64}, {1, 5, 1, 7}, {3, 300, 2, 8}, {1, 1, 2, 3}, {4, 196, 12, 64},
      {1, 70, 2, 80}, {2, 1025, 1, 33},  // 1025: more tokens than the block's 256 threads x 4
      {1, 13000, 1, 8}}},  // past 48 KiB of scores: the kernel opts in to the GPU's limit
    {"latent_attention_bwd", "B,N,H,D,dbias", t_latent_attention_bwd, {1e-4, 5e-4},
     {{2, 197, 3, 64, 1}, {1, 5, 1, 7, 0}, {3, 300, 2, 8, 1}, {1, 1, 2, 3, 1}, {4, 196, 12, 64, 0},
      {1, 70, 2, 80, 1}, {2, 1025, 1, 33, 1}, {64, 17, 2, 16, 1},  // 64 x 17: 3 colsum chunks
      {1, 13000, 1, 8, 1}}},
    {"to_act", "count", t_to_act, {0, 0}, {{1}, {7}, {1000}, {197 * 768 + 5}}},
    {"add", "count", t_add, {0, -1}, {{1}, {1000}, {197 * 192 + 3}}},
    {"drop_path", "rows,cols,row0,N,res", t_drop_path, {0, -1},
     {{1, 1, 0, 1, 1}, {394, 192, 0, 197, 1}, {394, 192, 0, 197, 0}, {99, 77, 197, 50, 1},
      {4000, 3, 200, 1, 0}}},  // samples 200..4199 of one row: past 4095 they count as dropped
    {"dropout", "rows,cols,first,width,act", t_dropout, {0, 0},
     {{1, 1, 0, 1, 0}, {394, 192, 0, 192, 0}, {394, 768, 5, 1536, 1}, {99, 77, 1ll << 33, 80, 0},
      {7, 3, 3, 5, 1}}},  // numbers past 2^32 (a long run's stream positions)
    {"patchify_fwd", "B,S,P", t_patchify_fwd, {0, 0},
     {{2, 32, 16}, {1, 12, 4}, {3, 30, 5}, {1, 224, 16}, {2, 8, 8}}},
    {"patchify_bwd", "B,S,P", t_patchify_bwd, {0, -1},
     {{2, 32, 16}, {1, 12, 4}, {3, 30, 5}, {1, 224, 16}, {2, 8, 8}}},
    {"embed_fwd", "B,N,C,T,2pos_patches", t_embed_fwd, {0, -1},
     {{2, 197, 192, 1, 0}, {1, 5, 7, 1, 0}, {3, 2, 1, 1, 0}, {4, 17, 33, 1, 0},
      {2, 201, 192, 5, 2}, {2, 201, 192, 5, 0}, {3, 6, 7, 5, 2}, {2, 197, 192, 1, 2},
      {2, 196, 192, 0, 0}, {2, 200, 192, 4, 2}}},  // no class token: no prefix, or 4 registers
    {"embed_bwd", "B,N,C,T,dpatch+2pos_patches+4fixed", t_embed_bwd, {0, -1},
     {{2, 197, 192, 1, 1}, {1, 5, 7, 1, 1}, {3, 2, 1, 1, 0}, {4, 17, 33, 1, 1}, {64, 5, 3, 1, 0},
      {2, 201, 192, 5, 3}, {2, 201, 192, 5, 1}, {3, 6, 7, 5, 2}, {2, 197, 192, 1, 3},
      {2, 196, 192, 0, 1}, {2, 200, 192, 4, 3}, {2, 196, 192, 0, 5}, {2, 197, 64, 1, 7}}},
    {"cls_pool_fwd", "B,N,C", t_cls_pool_fwd, {0, -1}, {{2, 197, 192}, {1, 5, 7}, {3, 1, 4}}},
    {"cls_pool_bwd", "B,N,C", t_cls_pool_bwd, {0, -1}, {{2, 197, 192}, {1, 5, 7}, {3, 1, 4}}},
    {"mean_pool_fwd", "B,N,C,T", t_mean_pool_fwd, {0, -1},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 201, 192, 5}, {3, 6, 4, 5},
      {2, 196, 192, 0}}},
    {"mean_pool_bwd", "B,N,C,T", t_mean_pool_bwd, {0, -1},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 201, 192, 5}, {3, 6, 4, 5},
      {2, 196, 192, 0}}},
    {"norm_mean_pool_fwd", "B,N,C,T", t_norm_mean_pool_fwd, {1e-5, 1e-5},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 196, 768, 0}, {3, 6, 33, 5}, {1, 1, 1, 0}}},
    {"norm_mean_pool_bwd", "B,N,C,T", t_norm_mean_pool_bwd, {5e-5, -1},
     {{2, 197, 192, 1}, {1, 5, 7, 1}, {3, 2, 4, 1}, {2, 196, 768, 0}, {3, 6, 33, 5}, {1, 1, 1, 0},
      {64, 17, 40, 0}}},
    {"qk_norm_fwd", "M,H,D", t_qk_norm_fwd, {1e-5, 1e-5},
     {{197, 3, 64}, {5, 1, 7}, {1, 1, 1}, {300, 2, 33}, {50, 12, 64}}},
    {"qk_norm_bwd", "M,H,D,dbias", t_qk_norm_bwd, {5e-5, 5e-5},
     {{197, 3, 64, 1}, {5, 1, 7, 0}, {1, 1, 1, 1}, {300, 2, 33, 1}, {50, 12, 64, 0},
      {1100, 1, 9, 1}}},
    {"layer_scale_fwd", "rows,cols", t_layer_scale_fwd, {0, -1},
     {{1, 1}, {394, 192}, {99, 77}, {1100, 9}}},
    {"layer_scale_bwd", "rows,cols", t_layer_scale_bwd, {1e-5, -1},
     {{1, 1}, {394, 192}, {99, 77}, {1100, 9}, {1000, 64}}},
    {"cross_entropy_fwd", "B,K,smooth/1000,mix", t_cross_entropy_fwd, {1e-5, -1},
     {{4, 1000, 100, 0}, {1, 10, 0, 0}, {7, 3, 500, 0}, {64, 1000, 100, 0}, {2, 1, 0, 0},
      {64, 1000, 100, 1}, {7, 3, 0, 1}}},
    {"bce_fwd", "B,K,smooth/1000,mix,thresh/1000", t_bce_fwd, {1e-5, -1},
     {{4, 1000, 100, 0, -1}, {1, 10, 0, 0, -1}, {7, 3, 500, 0, -1}, {64, 1000, 100, 1, -1},
      {2, 1, 0, 0, -1}, {64, 1000, 0, 1, 0}, {64, 1000, 100, 1, 300}, {7, 3, 500, 0, 100}}},
    {"cross_entropy_bwd", "B,K,smooth/1000,mix,thresh/1000", t_cross_entropy_bwd, {1e-6, -1},
     {{4, 1000, 100, 0, -1}, {1, 10, 0, 0, -1}, {7, 3, 500, 0, -1}, {64, 1000, 100, 0, -1},
      {2, 1, 0, 0, -1}, {64, 1000, 100, 1, -1}, {7, 3, 0, 1, -1}, {64, 1000, 0, 1, 0},
      {64, 1000, 100, 1, 300}, {7, 3, 500, 0, 100}}},
    {"adamw", "count,t,wd/1000,mask,gscale/1000", t_adamw, {1e-6, -1},
     {{1000, 1, 50, 0}, {7, 10, 0, 0}, {100003, 1000, 50, 0}, {100003, 3, 100, 1},
      {1000, 2, 50, 1, 337}}},
    {"lamb_moments", "count,t,wd/1000,mask,in_place", t_lamb_moments, {0, -1},
     {{1000, 1, 50, 0, 0}, {7, 10, 0, 0, 1}, {100003, 1000, 50, 0, 1}, {100003, 3, 100, 1, 1}}},
    {"lamb_apply", "count,trust*1000", t_lamb_apply, {0, -1},
     {{1, 1000}, {1000, 2345}, {1000003, 17}}},
    {"sgd", "count,momentum/1000,wd/1000,mask,nesterov", t_sgd, {0, -1},
     {{1, 900, 0, 0, 1}, {1000, 900, 50, 0, 0}, {100003, 800, 100, 1, 1}, {7, 0, 0, 0, 0}}},
    {"sumsq", "count", t_sumsq, {1e-12, -1},
     {{1}, {7}, {16384}, {16385}, {1000003}, {5000000}}},
    {"scale", "count", t_scale, {0, -1}, {{1}, {1000}, {1000003}}},
    {"ema", "count,(1-decay)*1e6", t_ema, {0, -1}, {{1, 100}, {1000, 1000}, {1000003, 200}}},
};
#define NTESTS (int)(sizeof kTests / sizeof kTests[0])

// Every op of the table must exist on the backend under test: one NULL would make training
// stop at its first use, so say which here instead.
static int check_table(const vt_backend *be) {
  const struct {
    const char *name;
    const void *fn;
  } ops[] = {
#define OP(f) {#f, (const void *)be->f}
      OP(linear_fwd),        OP(linear_act_fwd),    OP(linear_bwd),    OP(linear_act_bwd),
      OP(linear_bwd_act),    OP(linear_residual_fwd),
      OP(layernorm_fwd),     OP(layernorm_bwd),     OP(add_layernorm_fwd), OP(layernorm_bwd_add),
      OP(act_fwd),          OP(act_bwd),          OP(attention_fwd), OP(attention_bwd),
      OP(latent_attention_fwd), OP(latent_attention_bwd), OP(to_act),
      OP(add),               OP(drop_path),         OP(dropout),       OP(patchify_fwd),
      OP(patchify_bwd),
      OP(embed_fwd),         OP(embed_bwd),         OP(cls_pool_fwd),  OP(cls_pool_bwd),
      OP(mean_pool_fwd),     OP(mean_pool_bwd),     OP(layer_scale_fwd), OP(layer_scale_bwd),
      OP(norm_mean_pool_fwd), OP(norm_mean_pool_bwd),
      OP(qk_norm_fwd),       OP(qk_norm_bwd),
      OP(cross_entropy_fwd), OP(cross_entropy_bwd), OP(bce_fwd),       OP(adamw),
      OP(lamb_moments),      OP(lamb_apply),        OP(sgd),           OP(sumsq),
      OP(scale),             OP(ema),
#undef OP
  };
  int missing = 0;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!ops[i].fn) printf("FAIL: backend %s lacks op %s\n", be->name, ops[i].name), missing++;
  return missing;
}

// FNV-1a: the random inputs of a row depend on its op and shape only, not on which ops ran
// before (a run of one op sees the inputs of the full run).
static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static int wanted(const char *op, int argc, char **argv) {
  int any = 0;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') continue;
    any = 1;
    if (strcmp(argv[i], op) == 0) return 1;
  }
  return !any;
}

int main(int argc, char **argv) {
  int self = 0, max_shapes = 1 << 30, given = 0, only = -1;
  int64_t shape[5] = {0};  // --shape's
  for (int i = 1; i < argc; i++) {
    self |= strcmp(argv[i], "--cpu") == 0;
    if (strncmp(argv[i], "--shapes=", 9) == 0) max_shapes = atoi(argv[i] + 9);
    if (strncmp(argv[i], "--prec=", 7) == 0) {
      for (int p = 0; p < NPREC; p++)
        if (strcmp(argv[i] + 7, kPrecName[p]) == 0) only = p;
      if (only < 0)
        return fprintf(stderr, "test_cuda_ops: --prec wants fp32 or bf16 (have '%s')\n",
                       argv[i] + 7), 2;
    }
    if (strncmp(argv[i], "--shape=", 8) == 0) {
      char *c = argv[i] + 8, *end;
      for (given = 0; given < 5 && *c; given++, c = *end ? end + 1 : end)
        if ((shape[given] = strtoll(c, &end, 10)) < 0 || end == c || (*end && *end != ',')) {
          fprintf(stderr, "test_cuda_ops: --shape wants whole numbers >= 0 separated by commas "
                          "(have '%s')\n", argv[i] + 8);
          return 2;
        }
      if (shape[0] < 1) return fprintf(stderr, "test_cuda_ops: --shape's first value is 0\n"), 2;
    }
  }
  const char *why = NULL;
  const vt_backend *cpu = vt_backend_get(VT_DEVICE_CPU, NULL);
  const vt_backend *gpu = self ? cpu : vt_backend_get(VT_DEVICE_CUDA, &why);
  if (!gpu) {
    printf("SKIP: %s\n", why ? why : "no CUDA backend");
    return 77;
  }
  printf("test_cuda_ops: %s against %s; error = max|%s - %s| / max|%s| per tensor\n", gpu->name,
         cpu->name, gpu->name, cpu->name, cpu->name);
  tc t = {.cpu = cpu, .gpu = gpu};
  int missing = check_table(gpu);
  for (t.prec = 0; t.prec < NPREC; t.prec++) {
    if (only >= 0 && t.prec != only) continue;
    cpu->set_precision(kPrec[t.prec]);
    gpu->set_precision(kPrec[t.prec]);
    for (int i = 0; i < NTESTS; i++) {
      const op_test *o = &kTests[i];
      if (!wanted(o->op, argc, argv) || o->tol[t.prec] < 0) continue;
      t.op = o->op;
      t.tol = o->tol[t.prec];
      const int nshapes = given ? 1 : (int)(sizeof o->shapes / sizeof o->shapes[0]);
      for (int s = 0; s < nshapes && s < max_shapes && (given || o->shapes[s][0] > 0); s++) {
        const int64_t *d = given ? shape : o->shapes[s];
        int ndims = 1, k = snprintf(t.shape, sizeof t.shape, "%s=", o->dims);
        for (const char *c = o->dims; *c; c++) ndims += *c == ',';
        for (int j = 0; j < ndims && j < 5 && k < (int)sizeof t.shape; j++)
          k += snprintf(t.shape + k, sizeof t.shape - (size_t)k, "%s%lld", j ? "," : "",
                        (long long)d[j]);
        // the inputs: this op and shape's own (a given shape's from its values)
        t.stream = given ? name_hash(t.shape) ^ name_hash(o->op)
                         : name_hash(o->op) + 1000u * (uint32_t)s;
        o->run(&t, d);
        release(&t);
      }
    }
  }
  // (no check at all: an op name that matches none, or a shape that runs nothing, is a failure)
  const int bad = t.failures || missing || t.checks == 0;
  printf("%d checks, %d failed%s%s; %s\n", t.checks, t.failures,
         missing ? ", ops missing from the table" : "",
         t.checks == 0 ? ", none made (an op name that matches none?)" : "", bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}
