// mesh.c: mesh arithmetic (see mesh.h for the orders and a worked example). Pure functions only:
// no MPI, no comm, no global state, so every rank computes the same answers independently.
#include "mesh.h"

#include <stdio.h>
#include <string.h>

static const char *const k_order_names[] = {"tp-dp-pp", "tp-pp-dp"};

const char *vt_mesh_order_name(vt_mesh_order order) {
  return (order == VT_MESH_TP_DP_PP || order == VT_MESH_TP_PP_DP) ? k_order_names[order] : "?";
}

const char *vt_axis_name(vt_axis axis) {
  switch (axis) {
    case VT_AXIS_TP: return "tp";
    case VT_AXIS_PP: return "pp";
    case VT_AXIS_DP: return "dp";
    case VT_AXIS_WORLD: return "world";
  }
  return "?";
}

vt_status vt_mesh_order_parse(const char *s, vt_mesh_order *order, char *err, size_t errlen) {
  for (int i = 0; i < 2; i++) {
    if (s && strcmp(s, k_order_names[i]) == 0) {
      *order = (vt_mesh_order)i;
      return VT_OK;
    }
  }
  snprintf(err, errlen,
           "unknown mesh order '%s'; use tp-dp-pp (default: pipeline stages outermost, across "
           "nodes) or tp-pp-dp (data parallel outermost)",
           s ? s : "(null)");
  return VT_ERR_INPUT;
}

vt_status vt_mesh_validate(const vt_mesh *m, int world_size, char *err, size_t errlen) {
  const int sizes[3] = {m->tp_size, m->pp_size, m->dp_size};
  const char *names[3] = {"tp", "pp", "dp"};
  for (int i = 0; i < 3; i++) {
    if (sizes[i] < 1) {
      snprintf(err, errlen, "--%s %d is not a mesh size; every size must be at least 1", names[i],
               sizes[i]);
      return VT_ERR_INPUT;
    }
  }
  if (m->order != VT_MESH_TP_DP_PP && m->order != VT_MESH_TP_PP_DP) {
    snprintf(err, errlen, "mesh order %d is not known; use tp-dp-pp or tp-pp-dp", (int)m->order);
    return VT_ERR_INPUT;
  }
  // The product in 64 bits so absurd sizes are reported instead of wrapping around.
  long long product = (long long)m->tp_size * m->pp_size * m->dp_size;
  if (product != world_size) {
    snprintf(err, errlen,
             "tp %d x pp %d x dp %d = %lld ranks, but the job has %d; choose sizes whose product "
             "is %d, or let --dp default to world/(tp*pp)",
             m->tp_size, m->pp_size, m->dp_size, product, world_size, world_size);
    return VT_ERR_INPUT;
  }
  return VT_OK;
}

vt_status vt_mesh_init(vt_mesh *mesh, int tp_size, int pp_size, int dp_size, vt_mesh_order order,
                       int world_size, char *err, size_t errlen) {
  if (dp_size <= 0 && tp_size >= 1 && pp_size >= 1) {
    long long tp_pp = (long long)tp_size * pp_size;
    if (world_size % tp_pp != 0) {
      snprintf(err, errlen,
               "tp %d x pp %d = %lld does not divide the job's %d ranks, so no --dp fits; choose "
               "--tp and --pp whose product divides %d%s",
               tp_size, pp_size, tp_pp, world_size, world_size,
               world_size == 1 ? ", or start the ranks (mpirun -np N, srun, or "
                                 "launch/spawn.sh N)" : "");
      return VT_ERR_INPUT;
    }
    dp_size = (int)(world_size / tp_pp);
  }
  vt_mesh m = {tp_size, pp_size, dp_size, order};
  vt_status st = vt_mesh_validate(&m, world_size, err, errlen);
  if (st == VT_OK) *mesh = m;
  return st;
}

// The three axes from innermost to outermost for an order.
static void axis_nesting(vt_mesh_order order, vt_axis nest[3]) {
  nest[0] = VT_AXIS_TP;
  nest[1] = order == VT_MESH_TP_PP_DP ? VT_AXIS_PP : VT_AXIS_DP;
  nest[2] = order == VT_MESH_TP_PP_DP ? VT_AXIS_DP : VT_AXIS_PP;
}

int vt_mesh_axis_size(const vt_mesh *m, vt_axis axis) {
  switch (axis) {
    case VT_AXIS_TP: return m->tp_size;
    case VT_AXIS_PP: return m->pp_size;
    case VT_AXIS_DP: return m->dp_size;
    case VT_AXIS_WORLD: return vt_mesh_world_size(m);
  }
  VT_CHECK(0, "unknown mesh axis %d", (int)axis);
}

static int *coord_slot(vt_mesh_coord *c, vt_axis axis) {
  return axis == VT_AXIS_TP ? &c->tp_rank : axis == VT_AXIS_PP ? &c->pp_rank : &c->dp_rank;
}

vt_mesh_coord vt_mesh_coords(const vt_mesh *m, int world_rank) {
  VT_CHECK(world_rank >= 0 && world_rank < vt_mesh_world_size(m),
           "world rank %d is outside the mesh of %d ranks", world_rank, vt_mesh_world_size(m));
  vt_axis nest[3];
  axis_nesting(m->order, nest);
  vt_mesh_coord c;
  int rest = world_rank;
  for (int i = 0; i < 3; i++) {
    int n = vt_mesh_axis_size(m, nest[i]);
    *coord_slot(&c, nest[i]) = rest % n;
    rest /= n;
  }
  return c;
}

int vt_mesh_world_rank(const vt_mesh *m, vt_mesh_coord c) {
  vt_axis nest[3];
  axis_nesting(m->order, nest);
  int rank = 0;
  for (int i = 2; i >= 0; i--) {
    int n = vt_mesh_axis_size(m, nest[i]);
    int x = *coord_slot(&c, nest[i]);
    VT_CHECK(x >= 0 && x < n, "%s coordinate %d is outside [0, %d)", vt_axis_name(nest[i]), x, n);
    rank = rank * n + x;
  }
  return rank;
}

int vt_mesh_axis_rank(const vt_mesh *m, int world_rank, vt_axis axis) {
  vt_mesh_coord c = vt_mesh_coords(m, world_rank);
  if (axis == VT_AXIS_WORLD) return world_rank;
  return *coord_slot(&c, axis);
}

int vt_mesh_group(const vt_mesh *m, vt_axis axis, int world_rank, int *ranks) {
  int n = vt_mesh_axis_size(m, axis);
  if (axis == VT_AXIS_WORLD) {
    for (int i = 0; i < n; i++) ranks[i] = i;
    return n;
  }
  vt_mesh_coord c = vt_mesh_coords(m, world_rank);
  for (int i = 0; i < n; i++) {
    *coord_slot(&c, axis) = i;
    ranks[i] = vt_mesh_world_rank(m, c);
  }
  return n;
}

int vt_mesh_format(const vt_mesh *m, char *buf, size_t nbytes) {
  // Accumulate the wanted length even once the buffer is full, as snprintf does.
  size_t len = 0;
  int w = snprintf(buf, nbytes, "mesh tp %d x pp %d x dp %d, order %s\nworld | tp pp dp\n",
                   m->tp_size, m->pp_size, m->dp_size, vt_mesh_order_name(m->order));
  len += (size_t)w;
  for (int r = 0; r < vt_mesh_world_size(m); r++) {
    vt_mesh_coord c = vt_mesh_coords(m, r);
    char *at = len < nbytes ? buf + len : NULL;
    size_t room = len < nbytes ? nbytes - len : 0;
    w = snprintf(at, room, "%5d | %2d %2d %2d\n", r, c.tp_rank, c.pp_rank, c.dp_rank);
    len += (size_t)w;
  }
  return (int)len;
}
