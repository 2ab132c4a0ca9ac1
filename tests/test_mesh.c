// test_mesh.c: mesh arithmetic without any process: the worked 8-rank example of mesh.h, round
// trips for many shapes and both orders, groups that partition the world, and the messages for
// bad sizes and orders. Must not depend on MPI or the comm API.
#include <stdio.h>
#include <string.h>

#include "mesh.h"

static int g_failures = 0;

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      g_failures++;                                         \
      fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                         \
      fprintf(stderr, "\n");                                \
    }                                                       \
  } while (0)

// The table in mesh.h, verbatim: world rank -> (tp, pp, dp), and each axis' groups.
static void test_worked_example(void) {
  const vt_mesh m = {2, 2, 2, VT_MESH_TP_DP_PP};
  const int table[8][3] = {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1},
                           {0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}};
  for (int r = 0; r < 8; r++) {
    vt_mesh_coord c = vt_mesh_coords(&m, r);
    EXPECT(c.tp_rank == table[r][0] && c.pp_rank == table[r][1] && c.dp_rank == table[r][2],
           "rank %d: got tp %d pp %d dp %d", r, c.tp_rank, c.pp_rank, c.dp_rank);
  }
  const int groups[3][4][2] = {
      {{0, 1}, {2, 3}, {4, 5}, {6, 7}},  // tp
      {{0, 4}, {1, 5}, {2, 6}, {3, 7}},  // pp
      {{0, 2}, {1, 3}, {4, 6}, {5, 7}},  // dp
  };
  const vt_axis axes[3] = {VT_AXIS_TP, VT_AXIS_PP, VT_AXIS_DP};
  for (int a = 0; a < 3; a++) {
    for (int g = 0; g < 4; g++) {
      for (int k = 0; k < 2; k++) {
        int ranks[2] = {-1, -1};
        int n = vt_mesh_group(&m, axes[a], groups[a][g][k], ranks);
        EXPECT(n == 2 && ranks[0] == groups[a][g][0] && ranks[1] == groups[a][g][1],
               "%s group of rank %d: got {%d,%d}", vt_axis_name(axes[a]), groups[a][g][k],
               ranks[0], ranks[1]);
      }
    }
  }
  char buf[512];
  vt_mesh_format(&m, buf, sizeof buf);
  EXPECT(strstr(buf, "    5 |  1  1  0\n") != NULL, "format lacks rank 5's row:\n%s", buf);
}

// The other order on the same shape: PP is the middle axis, so stages are 2 ranks apart.
static void test_other_order(void) {
  const vt_mesh m = {2, 2, 2, VT_MESH_TP_PP_DP};
  vt_mesh_coord c = vt_mesh_coords(&m, 2);
  EXPECT(c.tp_rank == 0 && c.pp_rank == 1 && c.dp_rank == 0, "tp-pp-dp rank 2: %d %d %d",
         c.tp_rank, c.pp_rank, c.dp_rank);
  int ranks[2];
  vt_mesh_group(&m, VT_AXIS_PP, 1, ranks);
  EXPECT(ranks[0] == 1 && ranks[1] == 3, "tp-pp-dp pp group of 1: {%d,%d}", ranks[0], ranks[1]);
  vt_mesh_group(&m, VT_AXIS_DP, 1, ranks);
  EXPECT(ranks[0] == 1 && ranks[1] == 5, "tp-pp-dp dp group of 1: {%d,%d}", ranks[0], ranks[1]);
}

// For one mesh: every rank round-trips; every group has the axis size, contains its rank at the
// rank's coordinate, agrees with its members on the other coordinates, and the groups of an
// axis cover each rank exactly once.
static void test_shape(const vt_mesh *m) {
  const int world = vt_mesh_world_size(m);
  for (int r = 0; r < world; r++) {
    vt_mesh_coord c = vt_mesh_coords(m, r);
    EXPECT(vt_mesh_world_rank(m, c) == r, "%dx%dx%d %s: rank %d does not round-trip", m->tp_size,
           m->pp_size, m->dp_size, vt_mesh_order_name(m->order), r);
    // TP innermost in both orders: consecutive ranks share a TP group.
    EXPECT(c.tp_rank == r % m->tp_size, "rank %d: tp %d is not innermost", r, c.tp_rank);
  }
  const vt_axis axes[4] = {VT_AXIS_TP, VT_AXIS_PP, VT_AXIS_DP, VT_AXIS_WORLD};
  for (int a = 0; a < 4; a++) {
    int seen[64] = {0}, ranks[64];
    int groups = 0;
    for (int r = 0; r < world; r++) {
      int n = vt_mesh_group(m, axes[a], r, ranks);
      EXPECT(n == vt_mesh_axis_size(m, axes[a]), "%s group size %d", vt_axis_name(axes[a]), n);
      EXPECT(ranks[vt_mesh_axis_rank(m, r, axes[a])] == r, "rank %d not at its %s coordinate", r,
             vt_axis_name(axes[a]));
      if (ranks[0] != r) continue;  // count each group once, from its first member
      groups++;
      vt_mesh_coord c0 = vt_mesh_coords(m, ranks[0]);
      for (int k = 0; k < n; k++) {
        seen[ranks[k]]++;
        vt_mesh_coord ck = vt_mesh_coords(m, ranks[k]);
        EXPECT(vt_mesh_axis_rank(m, ranks[k], axes[a]) == k, "%s group member %d has coord %d",
               vt_axis_name(axes[a]), ranks[k], vt_mesh_axis_rank(m, ranks[k], axes[a]));
        EXPECT(axes[a] == VT_AXIS_WORLD ||
                   ((axes[a] == VT_AXIS_TP || ck.tp_rank == c0.tp_rank) &&
                    (axes[a] == VT_AXIS_PP || ck.pp_rank == c0.pp_rank) &&
                    (axes[a] == VT_AXIS_DP || ck.dp_rank == c0.dp_rank)),
               "%s group of %d mixes other coordinates", vt_axis_name(axes[a]), ranks[0]);
      }
    }
    EXPECT(groups == world / vt_mesh_axis_size(m, axes[a]), "%s: %d groups",
           vt_axis_name(axes[a]), groups);
    for (int r = 0; r < world; r++)
      EXPECT(seen[r] == 1, "%s groups hold rank %d %d times", vt_axis_name(axes[a]), r, seen[r]);
  }
}

static void test_validation(void) {
  char err[256];
  vt_mesh m;
  EXPECT(vt_mesh_init(&m, 2, 2, 0, VT_MESH_TP_DP_PP, 8, err, sizeof err) == VT_OK &&
             m.dp_size == 2, "dp default: %s", err);
  EXPECT(vt_mesh_init(&m, 2, 2, 3, VT_MESH_TP_DP_PP, 8, err, sizeof err) == VT_ERR_INPUT, "2x2x3");
  EXPECT(strcmp(err, "tp 2 x pp 2 x dp 3 = 12 ranks, but the job has 8; choose sizes whose "
                     "product is 8, or let --dp default to world/(tp*pp)") == 0,
         "message: %s", err);
  EXPECT(vt_mesh_init(&m, 3, 1, 0, VT_MESH_TP_DP_PP, 8, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "does not divide") != NULL, "tp 3 of 8: %s", err);
  EXPECT(vt_mesh_init(&m, 0, 2, 2, VT_MESH_TP_DP_PP, 8, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "at least 1") != NULL, "tp 0: %s", err);
  vt_mesh bad = {1, 1, 1, (vt_mesh_order)7};
  EXPECT(vt_mesh_validate(&bad, 1, err, sizeof err) == VT_ERR_INPUT, "order 7 accepted");

  vt_mesh_order o = VT_MESH_TP_DP_PP;
  EXPECT(vt_mesh_order_parse("tp-pp-dp", &o, err, sizeof err) == VT_OK && o == VT_MESH_TP_PP_DP,
         "parse tp-pp-dp");
  EXPECT(vt_mesh_order_parse("tp-dp-pp", &o, err, sizeof err) == VT_OK && o == VT_MESH_TP_DP_PP,
         "parse tp-dp-pp");
  EXPECT(vt_mesh_order_parse("pp-tp-dp", &o, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "tp-dp-pp") != NULL, "parse pp-tp-dp: %s", err);
  EXPECT(strcmp(vt_mesh_order_name(VT_MESH_TP_PP_DP), "tp-pp-dp") == 0, "order name");
}

int main(void) {
  test_worked_example();
  test_other_order();
  const int shapes[][3] = {{1, 1, 1}, {2, 2, 2}, {8, 1, 1}, {1, 8, 1}, {1, 1, 8}, {2, 4, 1},
                           {4, 2, 1}, {1, 2, 4}, {2, 1, 4}, {3, 2, 5}, {4, 4, 4}, {2, 3, 1}};
  int nshapes = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    for (int order = 0; order < 2; order++) {
      vt_mesh m = {shapes[i][0], shapes[i][1], shapes[i][2], (vt_mesh_order)order};
      test_shape(&m);
      nshapes++;
    }
  }
  test_validation();
  if (g_failures) {
    fprintf(stderr, "test_mesh: %d failures\n", g_failures);
    return 1;
  }
  printf("test_mesh: worked example, %d shapes x orders, validation: all passed\n", nshapes);
  return 0;
}
