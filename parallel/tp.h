// tp.h: the conjugate mappings of Megatron-style tensor parallelism, as separate functions.
//   f: identity forward, all-reduce backward  (before a column-parallel layer)
//   g: all-reduce forward, identity backward  (after a row-parallel layer)
// Only the halves that communicate exist as functions; the identities are no calls at all.
// A NULL communicator means tp_size 1: nothing to do. Must not depend on the model.
#ifndef VT_TP_H
#define VT_TP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vt_comm vt_comm;

// g forward: sum the row-parallel partial outputs x (count elements) over the TP group.
void vt_tp_g_fwd(vt_comm *tp, float *x, int64_t count);
// f backward: sum the partial input gradients dx of a column-parallel layer over the TP group.
void vt_tp_f_bwd(vt_comm *tp, float *dx, int64_t count);

#ifdef __cplusplus
}
#endif

#endif
