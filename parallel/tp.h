// tp.h: the conjugate mappings of Megatron-style tensor parallelism, as separate functions.
//   f: identity forward, all-reduce backward  (before a column-parallel layer)
//   g: all-reduce forward, identity backward  (after a row-parallel layer)
// With sequence parallelism the stream between them is split by rows over the TP group and the
// mappings become f: all-gather forward, reduce-scatter backward; g: reduce-scatter forward,
// all-gather backward. Only the halves that communicate exist as functions. A NULL
// communicator means tp_size 1: nothing to do. Must not depend on the model.
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

// Sequence parallel. A full tensor has tp * local_count elements: rank r's rows are the r-th
// block of local_count elements.
// f forward and g backward: full <- the rows of every rank.
void vt_tp_sp_gather(vt_comm *tp, float *full, const float *local, int64_t local_count);
// g forward and f backward: local <- this rank's rows of the sum of every rank's full partial.
void vt_tp_sp_reduce_scatter(vt_comm *tp, float *local, const float *full, int64_t local_count);

#ifdef __cplusplus
}
#endif

#endif
