// test_comm.c: the comm API on CPU ranks (label mpi, 8 ranks under mpirun): for two mesh shapes,
// every collective on every axis gives exact values (integers as floats), started (overlapped)
// all-reduces with several in flight, send/recv along pp, deferred sends round a ring, messages
// on two channels received in the other order than sent, and the traffic counters match the
// calls made. Each rank computes its verdict; the verdicts are
// reduced so every rank exits with the same code. Must not depend on the model or on CUDA.
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"

static int g_failures = 0;

#define EXPECT(cond, ...)                                    \
  do {                                                       \
    if (!(cond)) {                                           \
      g_failures++;                                          \
      vt_rank_tag t_ = vt_get_rank_tag();                    \
      fprintf(stderr, "[rank %d] %s:%d: FAIL: ", t_.world_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
    }                                                        \
  } while (0)

enum { K = 3, MAXW = 64, MAXN = K * MAXW };  // worlds of up to MAXW ranks (checked in main)

// What this rank should see in the counters, per axis.
static vt_comm_counts g_expect[VT_AXIS_COUNT];

static void expect_op(vt_axis axis, vt_comm_op op, int64_t nbytes) {
  g_expect[axis].calls++, g_expect[axis].nbytes += nbytes;
  g_expect[axis].op_calls[op]++, g_expect[axis].op_nbytes[op] += nbytes;
}

// Every collective on one comm. group: world ranks of its members in comm-rank order (from the
// mesh, so the comm's membership is checked too); w: this rank's world rank.
static void check_collectives(vt_comm *c, const int *group, int w) {
  const vt_axis axis = vt_comm_axis(c);
  const char *name = vt_axis_name(axis);
  const int n = vt_comm_size(c), r = vt_comm_rank(c);
  EXPECT(group[r] == w, "%s: comm rank %d holds world rank %d, mesh says %d", name, r, w, group[r]);
  int sum_group = 0, min_group = group[0], max_group = group[0];
  for (int q = 0; q < n; q++) {
    sum_group += group[q];
    min_group = group[q] < min_group ? group[q] : min_group;
    max_group = group[q] > max_group ? group[q] : max_group;
  }

  float buf[MAXN], out[MAXN];
  for (int i = 0; i < 5; i++) buf[i] = (float)(w * 100 + i);
  vt_comm_all_reduce(c, buf, 5);
  expect_op(axis, VT_COMM_OP_ALL_REDUCE, 5 * 4);
  for (int i = 0; i < 5; i++)
    EXPECT(buf[i] == (float)(100 * sum_group + n * i), "%s all_reduce[%d] = %g", name, i, buf[i]);

  // Overlap: three reductions in flight at once, a blocking one in between, then the wait.
  float a1[7], a2[MAXN], a3[1];
  for (int i = 0; i < 7; i++) a1[i] = (float)(w + i);
  for (int i = 0; i < MAXN; i++) a2[i] = (float)(2 * w - i);
  a3[0] = 1.0f;
  vt_comm_all_reduce_start(c, a1, 7);
  vt_comm_all_reduce_start(c, a2, MAXN);
  buf[0] = (float)w;
  vt_comm_all_reduce(c, buf, 1);
  vt_comm_all_reduce_start(c, a3, 1);
  vt_comm_wait_all(c);
  const int64_t started_nbytes[4] = {7 * 4, MAXN * 4, 4, 4};
  for (int i = 0; i < 4; i++) expect_op(axis, VT_COMM_OP_ALL_REDUCE, started_nbytes[i]);
  EXPECT(buf[0] == (float)sum_group, "%s all_reduce between started ones = %g", name, buf[0]);
  for (int i = 0; i < 7; i++)
    EXPECT(a1[i] == (float)(sum_group + n * i), "%s all_reduce_start a1[%d] = %g", name, i, a1[i]);
  for (int i = 0; i < MAXN; i++)
    EXPECT(a2[i] == (float)(2 * sum_group - n * i), "%s all_reduce_start a2[%d] = %g", name, i,
           a2[i]);
  EXPECT(a3[0] == (float)n, "%s all_reduce_start a3 = %g", name, a3[0]);
  vt_comm_wait_all(c);  // nothing in flight: returns

  // Reductions to one member each (ZeRO-1's shards), every member a root once, in flight
  // together beside an all-reduce started between them: each root's buffer holds the sum.
  float shards[MAXN];
  for (int q = 0; q < n; q++)
    for (int i = 0; i < K; i++) shards[q * K + i] = (float)(w * 10 + q * K + i);
  for (int q = n - 1; q >= 0; q--) {
    vt_comm_reduce_start(c, shards + q * K, K, q);
    expect_op(axis, VT_COMM_OP_REDUCE, K * 4);
    if (q == n / 2) {
      a3[0] = 1.0f;
      vt_comm_all_reduce_start(c, a3, 1);
      expect_op(axis, VT_COMM_OP_ALL_REDUCE, 4);
    }
  }
  vt_comm_wait_all(c);
  for (int i = 0; i < K; i++)
    EXPECT(shards[r * K + i] == (float)(10 * sum_group + n * (r * K + i)),
           "%s reduce_start to rank %d [%d] = %g", name, r, i, shards[r * K + i]);
  EXPECT(a3[0] == (float)n, "%s all_reduce_start among reduces = %g", name, a3[0]);

  for (int j = 0; j < n * K; j++) buf[j] = (float)(w * 1000 + j);
  vt_comm_reduce_scatter(c, out, buf, K);
  expect_op(axis, VT_COMM_OP_REDUCE_SCATTER, (int64_t)n * K * 4);
  for (int i = 0; i < K; i++)
    EXPECT(out[i] == (float)(1000 * sum_group + n * (r * K + i)), "%s reduce_scatter[%d] = %g",
           name, i, out[i]);

  // In place: this rank's sum lands on its own shard of the input (ZeRO-1's gradients).
  for (int j = 0; j < n * K; j++) buf[j] = (float)(w * 1000 + j);
  vt_comm_reduce_scatter(c, buf + r * K, buf, K);
  expect_op(axis, VT_COMM_OP_REDUCE_SCATTER, (int64_t)n * K * 4);
  for (int i = 0; i < K; i++)
    EXPECT(buf[r * K + i] == (float)(1000 * sum_group + n * (r * K + i)),
           "%s in-place reduce_scatter[%d] = %g", name, i, buf[r * K + i]);

  for (int i = 0; i < K; i++) buf[i] = (float)(w * 10 + i);
  vt_comm_all_gather(c, out, buf, K);
  expect_op(axis, VT_COMM_OP_ALL_GATHER, (int64_t)n * K * 4);
  for (int q = 0; q < n; q++)
    for (int i = 0; i < K; i++)
      EXPECT(out[q * K + i] == (float)(group[q] * 10 + i), "%s all_gather[%d][%d] = %g", name, q,
             i, out[q * K + i]);

  // In place: this rank's shard already sits at its slot of the full buffer.
  for (int j = 0; j < n * K; j++) out[j] = -1.0f;
  for (int i = 0; i < K; i++) out[r * K + i] = (float)(w * 10 + i);
  vt_comm_all_gather(c, out, out + r * K, K);
  expect_op(axis, VT_COMM_OP_ALL_GATHER, (int64_t)n * K * 4);
  for (int q = 0; q < n; q++)
    for (int i = 0; i < K; i++)
      EXPECT(out[q * K + i] == (float)(group[q] * 10 + i), "%s in-place all_gather[%d][%d] = %g",
             name, q, i, out[q * K + i]);

  for (int root = 0; root < n; root += (n > 1 ? n - 1 : 1)) {
    for (int i = 0; i < 4; i++) buf[i] = (float)(w * 3 + i);
    vt_comm_broadcast(c, buf, 4, root);
    expect_op(axis, VT_COMM_OP_BROADCAST, 4 * 4);
    for (int i = 0; i < 4; i++)
      EXPECT(buf[i] == (float)(group[root] * 3 + i), "%s broadcast from %d [%d] = %g", name, root,
             i, buf[i]);
  }

  vt_comm_barrier(c);
  expect_op(axis, VT_COMM_OP_BARRIER, 0);

  double d[2] = {(double)w, 0.5 * w};
  vt_comm_all_reduce_double(c, d, 2, VT_REDUCE_SUM);
  expect_op(axis, VT_COMM_OP_REDUCE_DOUBLE, 2 * 8);
  EXPECT(d[0] == sum_group && d[1] == 0.5 * sum_group, "%s double sum %g %g", name, d[0], d[1]);
  d[0] = w;
  vt_comm_all_reduce_double(c, d, 1, VT_REDUCE_MAX);
  expect_op(axis, VT_COMM_OP_REDUCE_DOUBLE, 8);
  EXPECT(d[0] == max_group, "%s double max %g", name, d[0]);
  d[0] = w;
  vt_comm_all_reduce_double(c, d, 1, VT_REDUCE_MIN);
  expect_op(axis, VT_COMM_OP_REDUCE_DOUBLE, 8);
  EXPECT(d[0] == min_group, "%s double min %g", name, d[0]);
}

// Activations forward and gradients back along the pipeline, then a ring with sendrecv. Each
// stage receives before it sends (except the first), so blocking sends cannot deadlock.
static void check_pipeline(vt_comm *pp, const int *group, int w) {
  const int n = vt_comm_size(pp), p = vt_comm_rank(pp);
  enum { M = 6 };
  float act[M], got[M];
  if (p > 0) {
    vt_comm_recv(pp, got, M, p - 1);
    expect_op(VT_AXIS_PP, VT_COMM_OP_RECV, M * 4);
    for (int i = 0; i < M; i++)
      EXPECT(got[i] == (float)(group[p - 1] * 7 + i), "pp forward recv[%d] = %g", i, got[i]);
  }
  if (p < n - 1) {
    for (int i = 0; i < M; i++) act[i] = (float)(w * 7 + i);
    vt_comm_send(pp, act, M, p + 1);
    expect_op(VT_AXIS_PP, VT_COMM_OP_SEND, M * 4);
    vt_comm_recv(pp, got, 2, p + 1);
    expect_op(VT_AXIS_PP, VT_COMM_OP_RECV, 2 * 4);
    EXPECT(got[0] == (float)-group[p + 1] && got[1] == 0.25f, "pp backward recv %g %g", got[0],
           got[1]);
  }
  if (p > 0) {
    float grad[2] = {(float)-w, 0.25f};
    vt_comm_send(pp, grad, 2, p - 1);
    expect_op(VT_AXIS_PP, VT_COMM_OP_SEND, 2 * 4);
  }
  if (n > 1) {
    int dst = (p + 1) % n, src = (p + n - 1) % n;
    for (int i = 0; i < M; i++) act[i] = (float)(w * 5 + i);
    vt_comm_sendrecv(pp, act, M, dst, got, M, src);
    expect_op(VT_AXIS_PP, VT_COMM_OP_SEND, M * 4);
    expect_op(VT_AXIS_PP, VT_COMM_OP_RECV, M * 4);
    for (int i = 0; i < M; i++)
      EXPECT(got[i] == (float)(group[src] * 5 + i), "pp ring recv[%d] = %g", i, got[i]);
  }
  if (n > 1) {
    // Deferred sends (the pipeline executor's): every rank first sends two 4 MB messages round
    // the ring in calls of their own, then receives. Blocking sends that size would all wait for
    // a receive that nobody has posted yet; deferred ones return at once, and complete by key.
    enum { L = 1 << 20 };
    const int dst = (p + 1) % n, src = (p + n - 1) % n;
    float *out = malloc(2 * (size_t)L * sizeof(float)), *in = malloc((size_t)L * sizeof(float));
    VT_CHECK(out && in, "out of memory");
    for (int64_t i = 0; i < 2 * (int64_t)L; i++) out[i] = (float)(w * 3 + i % 1000);
    for (int k = 0; k < 2; k++) {
      const vt_comm_p2p send = {0, out + (int64_t)k * L, L, dst, 3 + k, 0};
      vt_comm_exchange(pp, &send, 1);
      expect_op(VT_AXIS_PP, VT_COMM_OP_SEND, (int64_t)L * 4);
    }
    int bad = 0;
    for (int k = 0; k < 2; k++) {
      const vt_comm_p2p recv = {1, in, L, src, 0, 0};
      vt_comm_exchange(pp, &recv, 1);
      expect_op(VT_AXIS_PP, VT_COMM_OP_RECV, (int64_t)L * 4);
      for (int64_t i = 0; i < L; i++) bad += in[i] != (float)(group[src] * 3 + (k * L + i) % 1000);
    }
    vt_comm_wait_sends(pp, 3);
    vt_comm_wait_sends(pp, 0);
    EXPECT(bad == 0, "pp deferred ring: %d elements differ", bad);
    free(out);
    free(in);
  }
  if (n > 1) {
    // Channels (ZB-V's activations and gradients): each rank sends a message on channel 1, then
    // one on channel 0; the receiver takes channel 0's first. Matching per channel gives each
    // receive its own channel's message; one shared order would hand the first receive the
    // channel-1 message.
    enum { L = 1 << 18 };
    const int dst = (p + 1) % n, src = (p + n - 1) % n;
    float *out = malloc(2 * (size_t)L * sizeof(float)), *in = malloc(2 * (size_t)L * sizeof(float));
    VT_CHECK(out && in, "out of memory");
    for (int64_t i = 0; i < 2 * (int64_t)L; i++) out[i] = (float)(w * 7 + (i < L ? 1 : 2));
    for (int ch = 1; ch >= 0; ch--) {  // out's first half on channel 1, its second on channel 0
      const vt_comm_p2p send = {0, out + (int64_t)(1 - ch) * L, L, dst, 5, ch};
      vt_comm_exchange(pp, &send, 1);
      expect_op(VT_AXIS_PP, VT_COMM_OP_SEND, (int64_t)L * 4);
    }
    for (int ch = 0; ch < 2; ch++) {
      const vt_comm_p2p recv = {1, in + (int64_t)ch * L, L, src, 0, ch};
      vt_comm_exchange(pp, &recv, 1);
      expect_op(VT_AXIS_PP, VT_COMM_OP_RECV, (int64_t)L * 4);
    }
    vt_comm_wait_sends(pp, 5);
    int bad = 0;
    for (int64_t i = 0; i < L; i++)
      bad += in[i] != (float)(group[src] * 7 + 2) || in[L + i] != (float)(group[src] * 7 + 1);
    EXPECT(bad == 0, "pp channels: %d elements came on the other channel", bad);
    free(out);
    free(in);
  }
}

static void check_counters(void) {
  for (int a = 0; a < VT_AXIS_COUNT; a++) {
    vt_comm_counts got = vt_comm_counts_get((vt_axis)a);
    const vt_comm_counts *want = &g_expect[a];
    EXPECT(got.calls == want->calls && got.nbytes == want->nbytes,
           "%s counters: %lld calls %lld bytes, expected %lld calls %lld bytes",
           vt_axis_name((vt_axis)a), (long long)got.calls, (long long)got.nbytes,
           (long long)want->calls, (long long)want->nbytes);
    for (int op = 0; op < VT_COMM_OP_COUNT; op++)
      EXPECT(got.op_calls[op] == want->op_calls[op] && got.op_nbytes[op] == want->op_nbytes[op],
             "%s %s: %lld calls %lld bytes, expected %lld calls %lld bytes",
             vt_axis_name((vt_axis)a), vt_comm_op_name((vt_comm_op)op),
             (long long)got.op_calls[op], (long long)got.op_nbytes[op],
             (long long)want->op_calls[op], (long long)want->op_nbytes[op]);
  }
}

static void check_shape(vt_comm *world, const vt_mesh *mesh, int print_counts) {
  vt_comm_counts_reset();
  memset(g_expect, 0, sizeof g_expect);
  vt_comm *axis_comm[3];
  vt_comm_split_mesh(world, mesh, VT_DEVICE_CPU, &axis_comm[0], &axis_comm[1], &axis_comm[2]);
  const int w = vt_comm_rank(world);
  int group[MAXN];
  for (int a = 0; a < 3; a++) {
    vt_comm *c = axis_comm[a];
    vt_axis axis = (vt_axis)a;
    EXPECT(vt_comm_axis(c) == axis, "comm %d has axis %s", a, vt_axis_name(vt_comm_axis(c)));
    EXPECT(vt_comm_size(c) == vt_mesh_axis_size(mesh, axis) &&
               vt_comm_rank(c) == vt_mesh_axis_rank(mesh, w, axis),
           "%s comm: rank %d of %d", vt_axis_name(axis), vt_comm_rank(c), vt_comm_size(c));
    vt_mesh_group(mesh, axis, w, group);
    check_collectives(c, group, w);
  }
  vt_mesh_group(mesh, VT_AXIS_WORLD, w, group);
  check_collectives(world, group, w);
  vt_mesh_group(mesh, VT_AXIS_PP, w, group);
  check_pipeline(axis_comm[VT_AXIS_PP], group, w);
  check_counters();
  if (print_counts && w == 0) vt_comm_counts_print(stdout);
  for (int a = 0; a < 3; a++) vt_comm_free(axis_comm[a]);
}

int main(int argc, char **argv) {
  vt_comm *world = vt_comm_world_init(&argc, &argv);
  const int W = vt_comm_size(world);
  if (W > MAXW) {  // (the buffers hold K floats per rank)
    if (vt_comm_rank(world) == 0)
      fprintf(stderr, "test_comm: %d ranks; it takes at most %d\n", W, (int)MAXW);
    vt_comm_finalize(world);
    return 2;
  }
  // Two shapes that multiply to the world: 2x2x2 in the default order and 1x4x2 in the other
  // (a TP comm of one, a four-stage pipeline); other world sizes get TP-only and PP-only meshes.
  vt_mesh shapes[2] = {{W, 1, 1, VT_MESH_TP_DP_PP}, {1, W, 1, VT_MESH_TP_PP_DP}};
  if (W == 8) {
    shapes[0] = (vt_mesh){2, 2, 2, VT_MESH_TP_DP_PP};
    shapes[1] = (vt_mesh){1, 4, 2, VT_MESH_TP_PP_DP};
  }
  for (int s = 0; s < 2; s++) check_shape(world, &shapes[s], s == 0);
  EXPECT(strcmp(vt_comm_transport_name(world), "local") != 0 || W == 1, "local transport, %d ranks",
         W);

  // The verdict: the worst rank decides for everyone.
  double verdict[2] = {(double)g_failures, (double)g_failures};
  vt_comm_all_reduce_double(world, verdict, 1, VT_REDUCE_MAX);
  vt_comm_all_reduce_double(world, verdict + 1, 1, VT_REDUCE_SUM);
  if (vt_comm_rank(world) == 0)
    printf("test_comm: %d ranks, transport %s, shapes %dx%dx%d %s and %dx%dx%d %s: %s (%g "
           "failures over all ranks)\n",
           W, vt_comm_transport_name(world), shapes[0].tp_size, shapes[0].pp_size,
           shapes[0].dp_size, vt_mesh_order_name(shapes[0].order), shapes[1].tp_size,
           shapes[1].pp_size, shapes[1].dp_size, vt_mesh_order_name(shapes[1].order),
           verdict[0] > 0 ? "FAILED" : "passed", verdict[1]);
  vt_comm_finalize(world);
  return verdict[0] > 0 ? 1 : 0;
}
