// tp.c: the communicating halves of the TP mappings f and g (see tp.h).
#include "tp.h"

#include "comm.h"

void vt_tp_g_fwd(vt_comm *tp, float *x, int64_t count) {
  if (tp) vt_comm_all_reduce(tp, x, count);
}

void vt_tp_f_bwd(vt_comm *tp, float *dx, int64_t count) {
  if (tp) vt_comm_all_reduce(tp, dx, count);
}

void vt_tp_sp_gather(vt_comm *tp, float *full, const float *local, int64_t local_count) {
  vt_comm_all_gather(tp, full, local, local_count);
}

void vt_tp_sp_reduce_scatter(vt_comm *tp, float *local, const float *full, int64_t local_count) {
  vt_comm_reduce_scatter(tp, local, full, local_count);
}
