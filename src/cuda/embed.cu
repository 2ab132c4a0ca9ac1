// embed.cu: patchify (the data half of patch embedding), prefix tokens (class, registers) plus
// position embedding, class-token and mean pooling on CUDA, twin of src/cpu/embed.c. Each output
// is a permutation, a single addition or a sum in the CPU twin's order, so they equal the CPU bit
// for bit; dprefix and dpos add the batch in order 0..B-1 onto the old value, exactly as the CPU
// twin does. C-style CUDA, no STL.
// Must not depend on MPI, NCCL or the model.
#include "cuda_common.h"
#include "cuda_ops.h"

#define THREADS 256

#define GRID_STRIDE(i, count)                                                    \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); \
       i += (int64_t)gridDim.x * blockDim.x)

// One thread per patch element, in patch order (writes coalesced; the reads are P-float runs of
// image rows). G x G patches of (3, P, P) per image.
// patches: a bf16 activation in bf16 precision (vt_ops.h).
static __global__ void patchify_fwd_kernel(float *patches, const float *img, int64_t B, int64_t S,
                                           int64_t P, int bf16) {
  const int64_t G = S / P, count = B * G * G * 3 * P * P;
  GRID_STRIDE(i, count) {
    int64_t t = i;
    const int64_t x = t % P; t /= P;
    const int64_t y = t % P; t /= P;
    const int64_t ch = t % 3; t /= 3;
    const int64_t g = t % (G * G), b = t / (G * G);
    const int64_t gy = g / G, gx = g % G;
    vt_put(patches, i, img[((b * 3 + ch) * S + gy * P + y) * S + gx * P + x], bf16);
  }
}

// Patches do not overlap and tile the image, so the backward is the inverse permutation: one
// thread per image element gathers its patch element (writes coalesced, every element written).
static __global__ void patchify_bwd_kernel(float *dimg, const float *dpatches, int64_t B,
                                           int64_t S, int64_t P) {
  const int64_t G = S / P, count = B * 3 * S * S;
  GRID_STRIDE(i, count) {
    int64_t t = i;
    const int64_t col = t % S; t /= S;
    const int64_t row = t % S; t /= S;
    const int64_t ch = t % 3, b = t / 3;
    const int64_t g = (row / P) * G + col / P;
    dimg[i] = dpatches[((b * G * G + g) * 3 + ch) * P * P + (row % P) * P + col % P];
  }
}

// x[b,n] = prefix[n] (n < T) or patch_out[b,n-T], plus pos[n-pos0] from token pos0 on
static __global__ void embed_fwd_kernel(float *x, const float *patch_out, const float *prefix,
                                        const float *pos, int64_t B, int64_t N, int64_t T,
                                        int64_t pos0, int64_t C) {
  const int64_t count = B * N * C;
  GRID_STRIDE(i, count) {
    const int64_t c = i % C, bn = i / C, n = bn % N, b = bn / N;
    const float src = n < T ? prefix[n * C + c] : patch_out[(b * (N - T) + n - T) * C + c];
    x[i] = n < pos0 ? src : src + pos[(n - pos0) * C + c];
  }
}

// dpos[n-pos0,c] += dx[0,n,c], += dx[1,n,c], ... one thread per (n, c), batch in order; dprefix
// is the same sum over the prefix rows (n < T), each onto its own old value. dpos may be NULL
// (fixed positions).
static __global__ void embed_param_kernel(float *dprefix, float *dpos, const float *dx, int64_t B,
                                          int64_t N, int64_t T, int64_t pos0, int64_t C) {
  const int64_t count = N * C;
  GRID_STRIDE(i, count) {
    const int64_t n = i / C;
    if (n >= pos0 && dpos) {
      float acc = dpos[i - pos0 * C];
      for (int64_t b = 0; b < B; b++) acc += dx[b * N * C + i];
      dpos[i - pos0 * C] = acc;
    }
    if (n < T) {
      float a = dprefix[i];
      for (int64_t b = 0; b < B; b++) a += dx[b * N * C + i];
      dprefix[i] = a;
    }
  }
}

// The whole dx: the pooled gradient on the class-token rows, zeros elsewhere (one pass instead
// of a memset and a copy).
static __global__ void cls_pool_bwd_kernel(float *dx, const float *dout, int64_t B, int64_t N,
                                           int64_t C) {
  const int64_t count = B * N * C;
  GRID_STRIDE(i, count) {
    const int64_t c = i % C, bn = i / C, n = bn % N, b = bn / N;
    dx[i] = n == 0 ? dout[b * C + c] : 0.0f;
  }
}

// One thread per (b, c), its patch tokens summed in order (the CPU op's order: the same bits).
static __global__ void mean_pool_fwd_kernel(float *out, const float *x, int64_t B, int64_t N,
                                            int64_t T, int64_t C) {
  const int64_t count = B * C;
  GRID_STRIDE(i, count) {
    const int64_t b = i / C, c = i % C;
    float acc = 0.0f;
    for (int64_t n = T; n < N; n++) acc += x[(b * N + n) * C + c];
    out[i] = acc / (float)(N - T);
  }
}

static __global__ void mean_pool_bwd_kernel(float *dx, const float *dout, int64_t B, int64_t N,
                                            int64_t T, int64_t C) {
  const int64_t count = B * N * C;
  GRID_STRIDE(i, count) {
    const int64_t c = i % C, bn = i / C, n = bn % N, b = bn / N;
    dx[i] = n < T ? 0.0f : dout[b * C + c] / (float)(N - T);
  }
}

extern "C" void vt_cuda_patchify_fwd(float *patches, const float *img, int64_t B, int64_t S,
                                     int64_t P) {
  patchify_fwd_kernel<<<vt_cuda_blocks(B * 3 * S * S, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      patches, img, B, S, P, vt_cuda_bf16());
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_patchify_bwd(float *dimg, const float *dpatches, int64_t B, int64_t S,
                                     int64_t P) {
  patchify_bwd_kernel<<<vt_cuda_blocks(B * 3 * S * S, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      dimg, dpatches, B, S, P);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_embed_fwd(float *x, const float *patch_out, const float *prefix,
                                  const float *pos, int64_t B, int64_t N, int64_t T, int64_t pos0,
                                  int64_t C) {
  embed_fwd_kernel<<<vt_cuda_blocks(B * N * C, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      x, patch_out, prefix, pos, B, N, T, pos0, C);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_embed_bwd(float *dpatch_out, float *dprefix, float *dpos, const float *dx,
                                  int64_t B, int64_t N, int64_t T, int64_t pos0, int64_t C) {
  cudaStream_t st = vt_cuda_stream();
  // dpatch_out[b] is rows T..N-1 of dx[b]: a strided 2D copy (B rows of (N-T)*C floats).
  if (dpatch_out)
    VT_CUDA_CHECK(cudaMemcpy2DAsync(dpatch_out, (size_t)((N - T) * C) * sizeof(float),
                                    dx + T * C, (size_t)(N * C) * sizeof(float),
                                    (size_t)((N - T) * C) * sizeof(float), (size_t)B,
                                    cudaMemcpyDeviceToDevice, st));
  embed_param_kernel<<<vt_cuda_blocks(N * C, THREADS), THREADS, 0, st>>>(dprefix, dpos, dx, B, N,
                                                                         T, pos0, C);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_cls_pool_fwd(float *out, const float *x, int64_t B, int64_t N, int64_t C) {
  // out[b] = x[b, 0]: B rows of C floats, N*C apart in x.
  VT_CUDA_CHECK(cudaMemcpy2DAsync(out, (size_t)C * sizeof(float), x,
                                  (size_t)(N * C) * sizeof(float), (size_t)C * sizeof(float),
                                  (size_t)B, cudaMemcpyDeviceToDevice, vt_cuda_stream()));
}

extern "C" void vt_cuda_cls_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N,
                                     int64_t C) {
  cls_pool_bwd_kernel<<<vt_cuda_blocks(B * N * C, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      dx, dout, B, N, C);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_mean_pool_fwd(float *out, const float *x, int64_t B, int64_t N,
                                      int64_t T, int64_t C) {
  mean_pool_fwd_kernel<<<vt_cuda_blocks(B * C, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      out, x, B, N, T, C);
  VT_CUDA_CHECK_LAUNCH();
}

extern "C" void vt_cuda_mean_pool_bwd(float *dx, const float *dout, int64_t B, int64_t N,
                                      int64_t T, int64_t C) {
  mean_pool_bwd_kernel<<<vt_cuda_blocks(B * N * C, THREADS), THREADS, 0, vt_cuda_stream()>>>(
      dx, dout, B, N, T, C);
  VT_CUDA_CHECK_LAUNCH();
}
