// mesh.h: the 3D mesh of ranks (tp x pp x dp) as pure arithmetic: world rank <-> coordinates, the
// members of each axis group, validation and the order option. Everything here is a pure
// function of its arguments, so it is tested without any process. Must not depend on MPI, CUDA,
// the comm API or the model.
//
// Orders (the first axis named is innermost, i.e. varies fastest over consecutive world ranks):
//   VT_MESH_TP_DP_PP ("tp-dp-pp", default): world = tp + tp_size * (dp + dp_size * pp)
//     TP groups are consecutive ranks (one node, NVLink); PP is outermost (across nodes).
//   VT_MESH_TP_PP_DP ("tp-pp-dp"):          world = tp + tp_size * (pp + pp_size * dp)
//
// Worked example, 8 ranks, tp 2 x pp 2 x dp 2, order tp-dp-pp (asserted by tests/test_mesh.c):
//
//   world | tp pp dp          groups (members ordered by their coordinate on the axis)
//   ------+---------          tp: {0,1} {2,3} {4,5} {6,7}
//     0   |  0  0  0          dp: {0,2} {1,3} {4,6} {5,7}
//     1   |  1  0  0          pp: {0,4} {1,5} {2,6} {3,7}
//     2   |  0  0  1
//     3   |  1  0  1          So ranks 0-3 hold pipeline stage 0 and ranks 4-7 stage 1; a stage's
//     4   |  0  1  0          activations go from rank r to rank r + 4.
//     5   |  1  1  0
//     6   |  0  1  1
//     7   |  1  1  1
#ifndef VT_MESH_H
#define VT_MESH_H

#include <stddef.h>

#include "vt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { VT_MESH_TP_DP_PP = 0, VT_MESH_TP_PP_DP = 1 } vt_mesh_order;

// The axes of the mesh; WORLD is the whole job (its "coordinate" is the world rank).
typedef enum { VT_AXIS_TP = 0, VT_AXIS_PP = 1, VT_AXIS_DP = 2, VT_AXIS_WORLD = 3 } vt_axis;
#define VT_AXIS_COUNT 4

typedef struct {
  int tp_size, pp_size, dp_size;
  vt_mesh_order order;
} vt_mesh;

typedef struct {
  int tp_rank, pp_rank, dp_rank;
} vt_mesh_coord;

// Fills *mesh from the command-line sizes and checks it against the job. dp_size <= 0 means
// "the rest": world_size / (tp_size * pp_size). On failure: VT_ERR_INPUT and a message in err
// that says what to change.
vt_status vt_mesh_init(vt_mesh *mesh, int tp_size, int pp_size, int dp_size, vt_mesh_order order,
                       int world_size, char *err, size_t errlen);

// Sizes >= 1, a known order and tp * pp * dp == world_size.
vt_status vt_mesh_validate(const vt_mesh *mesh, int world_size, char *err, size_t errlen);

static inline int vt_mesh_world_size(const vt_mesh *mesh) {
  return mesh->tp_size * mesh->pp_size * mesh->dp_size;
}

// world rank in [0, world size) -> coordinates, and back. Arguments out of range are fatal
// (they are programming errors, not user input).
vt_mesh_coord vt_mesh_coords(const vt_mesh *mesh, int world_rank);
int vt_mesh_world_rank(const vt_mesh *mesh, vt_mesh_coord coord);

// Size of an axis (WORLD: the world size) and a rank's coordinate on it (WORLD: the rank itself).
int vt_mesh_axis_size(const vt_mesh *mesh, vt_axis axis);
int vt_mesh_axis_rank(const vt_mesh *mesh, int world_rank, vt_axis axis);

// The world ranks of the group along `axis` that contains world_rank, ordered by their
// coordinate on that axis, written to ranks[0 .. axis size). Returns the group size.
int vt_mesh_group(const vt_mesh *mesh, vt_axis axis, int world_rank, int *ranks);

// "tp-dp-pp" / "tp-pp-dp". Unknown strings: VT_ERR_INPUT and a message listing the accepted ones.
vt_status vt_mesh_order_parse(const char *s, vt_mesh_order *order, char *err, size_t errlen);
const char *vt_mesh_order_name(vt_mesh_order order);
const char *vt_axis_name(vt_axis axis);  // "tp", "pp", "dp", "world"

// The table above for any mesh ("world | tp pp dp" then one line per rank), for rank 0 to print
// at start-up. Returns the length it wanted, as snprintf does.
int vt_mesh_format(const vt_mesh *mesh, char *buf, size_t nbytes);

#ifdef __cplusplus
}
#endif

#endif
