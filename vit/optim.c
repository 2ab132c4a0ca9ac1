// optim.c: the optimizer over the parameter table: its state (moments, EMA; sharded under
// ZeRO-1), gradient reduction over the mesh, the global norm, clipping, and the AdamW, LAMB, SGD
// and LARS updates. The settings' schedule and freezing are optim_config.c's.
#include "optim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "vt_ops.h"

// DP all-reduce bucket where the layers cannot be reduced one by one (see vt_optimizer_init):
// big enough to amortise a collective's latency; about 16 MiB.
#define VT_DP_BUCKET_COUNT ((int64_t)1 << 22)

static float *must_alloc(const vt_backend *be, int64_t count, const char *what) {
  float *p = be->alloc((size_t)(count > 0 ? count : 1) * sizeof(float));  // none: all frozen
  VT_CHECK(p != NULL, "out of %s memory for %lld MiB of %s", be->name,
           (long long)(count * 4) >> 20, what);
  return p;
}

// The first element of a trained tensor (the table is laid out by offset, any order of rows).
static int64_t state_base(const vt_param_table *t, const unsigned char *frozen) {
  int64_t base = t->total;
  for (int i = 0; i < t->count; i++)
    if (t->p[i].local_count > 0 && !frozen[i] && t->p[i].offset < base) base = t->p[i].offset;
  return base;
}

// The frozen marks of t's rows under validated patterns (calloc'd).
static unsigned char *frozen_marks(const vt_optim_config *cfg, const vt_param_table *t) {
  unsigned char *frozen = calloc((size_t)t->count + 1, 1);
  VT_CHECK(frozen != NULL, "out of host memory");
  char err[320];
  int n;
  VT_CHECK(vt_freeze_mark(cfg, t, frozen, &n, err, sizeof err) == VT_OK, "%s", err);
  return frozen;
}

int64_t vt_optim_state_base(const vt_optim_config *cfg, const vt_param_table *t) {
  unsigned char *frozen = frozen_marks(cfg, t);
  const int64_t base = state_base(t, frozen);
  free(frozen);
  return base;
}

int64_t vt_optim_dp_reduced(const vt_optim_config *cfg, const vt_param_table *t) {
  unsigned char *frozen = frozen_marks(cfg, t);
  int layers = 0;
  for (int i = 0; i < t->count; i++) layers = t->p[i].layer >= layers ? t->p[i].layer + 1 : layers;
  unsigned char *trained = calloc((size_t)layers + 1, 1);  // a tensor of the layer is
  VT_CHECK(trained != NULL, "out of host memory");
  for (int i = 0; i < t->count; i++)
    trained[t->p[i].layer] |= t->p[i].local_count > 0 && !frozen[i];
  int64_t n = 0;
  for (int i = 0; i < t->count; i++)
    if (trained[t->p[i].layer] && t->p[i].local_count > 0) n += t->p[i].local_count;
  free(frozen), free(trained);
  return n;
}

// The elements [*lo, *lo + *count) of the state that DP rank dp_rank of dp_size keeps under
// ZeRO-1 (every element from base on where dp_size is 1): dp equal parts of the trained
// elements, the last rank's also the tail of fewer than dp after them.
static void zero_shard(int64_t total, int64_t base, int dp_rank, int dp_size, int64_t *lo,
                       int64_t *count) {
  const int64_t part = (total - base) / dp_size;
  *lo = base + (int64_t)dp_rank * part;
  *count = (dp_rank == dp_size - 1 ? total : *lo + part) - *lo;
}

void vt_optimizer_init(vt_optimizer *o, const vt_optim_config *cfg, const vt_backend *be,
                       const vt_param_table *table, vt_comm *tp, vt_comm *pp, vt_comm *dp,
                       int zero, int64_t grad_first) {
  *o = (vt_optimizer){.cfg = *cfg, .be = be, .table = table, .tp = tp, .pp = pp, .dp = dp,
                      .grad_first = grad_first};
  const int dp_size = dp ? vt_comm_size(dp) : 1, dp_rank = dp ? vt_comm_rank(dp) : 0;
  if (o->cfg.spike_window < 2) o->cfg.spike_window = 100;
  o->zero = zero && dp_size > 1;
  o->frozen = frozen_marks(cfg, table);
  o->base = state_base(table, o->frozen);
  VT_CHECK(grad_first >= 0 && grad_first <= o->base,
           "the gradients start at element %lld, after the first trained one (%lld)",
           (long long)grad_first, (long long)o->base);
  const int64_t trained = table->total - o->base;  // the elements the state covers
  o->part = o->zero ? trained / dp_size : 0;
  zero_shard(table->total, o->base, o->zero ? dp_rank : 0, o->zero ? dp_size : 1, &o->shard_lo,
             &o->shard_count);
  const int64_t state = o->shard_count;
  const int one = vt_opt_state_buffers(cfg->kind) == 1;
  o->m = must_alloc(be, state, one ? "the momentum" : "Adam moments");
  if (!one) o->v = must_alloc(be, state, "Adam moments");
  if (cfg->ema_decay > 0) o->ema = must_alloc(be, state, "the weights' EMA");
  const size_t nsums = 2 * (size_t)table->count + 1;
  o->sums = be->alloc(nsums * sizeof(double));
  o->norms = calloc(nsums, sizeof(double));
  o->run_key = calloc(nsums, 1);
  VT_CHECK(o->sums && o->norms && o->run_key, "out of memory for the optimizer's %zu norms",
           nsums);
  // The weight-decay mask of the elements this rank updates (from base on, or its shard), so
  // that one AdamW call updates every tensor (vt_ops.h).
  uint8_t *mask = calloc((size_t)trained + 1, 1);
  o->decay = be->alloc((size_t)state + 1);
  VT_CHECK(mask && o->decay, "out of memory for the %lld-byte weight-decay mask",
           (long long)state);
  for (int i = 0; i < table->count; i++)
    if (table->p[i].local_count > 0 && table->p[i].decay && table->p[i].offset >= o->base)
      memset(mask + (table->p[i].offset - o->base), 1, (size_t)table->p[i].local_count);
  be->to_device(o->decay, mask + (o->shard_lo - o->base), (size_t)state);
  be->synchronize();
  free(mask);
  if (!dp) return;
  int nl = 0;
  for (int i = 0; i < table->count; i++)
    if (table->p[i].layer + 1 > nl) nl = table->p[i].layer + 1;
  o->nlayers = nl;
  o->layer_lo = calloc((size_t)nl, sizeof(int64_t));
  o->layer_hi = calloc((size_t)nl, sizeof(int64_t));
  o->started = calloc((size_t)nl, 1);
  int64_t *sum = calloc((size_t)nl, sizeof(int64_t)), *frozen = calloc((size_t)nl, sizeof(int64_t));
  VT_CHECK(o->layer_lo && o->layer_hi && o->started && sum && frozen, "out of host memory");
  for (int l = 0; l < nl; l++) o->layer_lo[l] = INT64_MAX, o->layer_hi[l] = 0;
  for (int i = 0; i < table->count; i++) {
    const vt_param *p = &table->p[i];
    if (p->local_count <= 0) continue;
    const int l = p->layer;
    o->layer_lo[l] = p->offset < o->layer_lo[l] ? p->offset : o->layer_lo[l];
    const int64_t end = p->offset + p->local_count;
    o->layer_hi[l] = end > o->layer_hi[l] ? end : o->layer_hi[l];
    sum[l] += p->local_count;
    if (o->frozen[i]) frozen[l] += p->local_count;
  }
  for (int l = 0; l < nl; l++)
    if (o->layer_hi[l] == 0) o->layer_lo[l] = 0;  // no tensor of this layer here
  o->overlap = 1;
  if (o->zero) {
    // A shard waits for the layers whose extent meets it (frozen ones too: a shard holds their
    // gradients whatever they are, and the backward pass must be done with them before the
    // reduce reads them); any layout works, the extents only decide how early.
    o->owner_need = calloc((size_t)dp_size, sizeof(int));
    o->owner_wait = calloc((size_t)dp_size, sizeof(int));
    VT_CHECK(o->owner_need && o->owner_wait, "out of host memory");
    for (int r = 0; r < dp_size; r++) {
      int64_t lo, count;
      zero_shard(table->total, o->base, r, dp_size, &lo, &count);
      for (int l = 0; l < nl && count > 0; l++)
        o->owner_need[r] += o->layer_lo[l] < lo + count && o->layer_hi[l] > lo;
      if (count == 0) o->owner_need[r] = -1;  // nothing to reduce: never started
      o->owner_wait[r] = o->owner_need[r];
      o->reductions += count > 0;
    }
  } else {
    // Overlap needs each layer's tensors to sit together in the flat buffer (params.c lays
    // them out layer by layer); otherwise the step reduces in fixed buckets as before.
    for (int l = 0; l < nl; l++) {
      if (o->layer_hi[l] - o->layer_lo[l] != sum[l] || sum[l] > INT32_MAX) o->overlap = 0;
      if (frozen[l] == sum[l]) o->layer_hi[l] = o->layer_lo[l];  // all frozen: nothing to reduce
      o->reductions += o->layer_hi[l] > o->layer_lo[l];
    }
  }
  free(sum), free(frozen);
}

// The gradient of table element i in grads (which holds them from o->grad_first on).
static float *grad_of(const vt_optimizer *o, float *grads, int64_t i) {
  return grads + (i - o->grad_first);
}

// Sequence parallelism leaves each TP rank a partial gradient of the LayerNorms of the rows it
// holds (a frozen one's is not needed): summed over TP, those of `layer` (-1: every layer).
static void tp_sums(const vt_optimizer *o, float *grads, int layer) {
  for (int i = 0; o->tp && i < o->table->count; i++) {
    const vt_param *p = &o->table->p[i];
    if (p->tp_partial && !o->frozen[i] && (layer < 0 || p->layer == layer))
      vt_comm_all_reduce(o->tp, grad_of(o, grads, p->offset), p->local_count);
  }
}

// ZeRO-1: the reduce of DP rank r's shard of grads to it.
static void reduce_shard(vt_optimizer *o, float *grads, int r) {
  int64_t lo, count;
  zero_shard(o->table->total, o->base, r, vt_comm_size(o->dp), &lo, &count);
  o->owner_wait[r] = -1;  // started
  vt_comm_reduce_start(o->dp, grad_of(o, grads, lo), count, r);
}

void vt_optimizer_grads_ready(vt_optimizer *o, float *grads, int layer) {
  if (!o->overlap || layer < 0 || layer >= o->nlayers || o->started[layer]) return;
  o->started[layer] = 1;
  const int64_t lo = o->layer_lo[layer], hi = o->layer_hi[layer];
  if (!o->zero) {
    if (hi > lo) vt_comm_all_reduce_start(o->dp, grad_of(o, grads, lo), hi - lo);
    return;
  }
  // The TP sum before the reduce, which leaves the other DP ranks' copies undefined.
  tp_sums(o, grads, layer);
  const int n = vt_comm_size(o->dp);
  for (int r = 0; r < n && hi > lo; r++) {
    int64_t s_lo, s_count;
    zero_shard(o->table->total, o->base, r, n, &s_lo, &s_count);
    if (s_count > 0 && lo < s_lo + s_count && hi > s_lo && --o->owner_wait[r] == 0)
      reduce_shard(o, grads, r);
  }
}

int vt_optimizer_loss_spike(vt_optimizer *o, double loss) {
  const double limit = vt_spike_limit(&o->spike, VT_SPIKE_LOSS, o->cfg.spike_z,
                                      o->cfg.spike_window);
  vt_spike_add(&o->spike, VT_SPIKE_LOSS, loss, o->cfg.spike_window);
  o->spiked = loss > limit ? VT_SPIKE_LOSS + 1 : 0;
  return o->spiked != 0;
}

// The step's reductions done (waited for): the next step starts with none.
static void reductions_reset(vt_optimizer *o) {
  memset(o->started, 0, (size_t)o->nlayers);
  if (o->zero) memcpy(o->owner_wait, o->owner_need, (size_t)vt_comm_size(o->dp) * sizeof(int));
}

void vt_optimizer_skip(vt_optimizer *o) {
  if (!o->overlap) return;
  vt_comm_wait_all(o->dp);
  reductions_reset(o);
}

void vt_optimizer_free(vt_optimizer *o) {
  free(o->layer_lo), free(o->layer_hi), free(o->started), free(o->norms), free(o->run_key);
  free(o->owner_need), free(o->owner_wait);
  free(o->frozen);
  o->be->free(o->sums);
  o->be->free(o->m);
  if (o->v) o->be->free(o->v);
  o->be->free(o->decay);
  if (o->ema) o->be->free(o->ema);
  *o = (vt_optimizer){0};
}

// The state buffers (moments, EMA) of `state` elements, each at least one (must_alloc), and their
// weight-decay mask (a byte each, one more so that it is never empty).
static size_t state_nbytes(int64_t state, int buffers) {
  return (size_t)(buffers * (state > 0 ? state : 1)) * sizeof(float) + (size_t)state + 1;
}

size_t vt_optimizer_plan_nbytes(int64_t trained, int dp_size, int zero, int ema, int moments) {
  // ZeRO-1: the largest shard's state (the last DP rank's, with the tail)
  const int64_t shard = zero && dp_size > 1 ? trained / dp_size + trained % dp_size : trained;
  return state_nbytes(shard, moments + (ema != 0));
}

size_t vt_optimizer_nbytes(const vt_optimizer *o) {
  return state_nbytes(o->shard_count, vt_opt_state_buffers(o->cfg.kind) + (o->ema != NULL));
}

int vt_optim_write_ranges(int64_t total, int64_t base, int dp_rank, int dp_size, int zero,
                          int64_t lo[2], int64_t count[2]) {
  if (!zero || dp_size < 2) {
    vt_equal_slice(total, dp_rank, dp_size, &lo[0], &count[0]);
    return 1;
  }
  // the dp_rank-th of equal slices of the frozen prefix, then the shard of vt_optimizer_init
  vt_equal_slice(base, dp_rank, dp_size, &lo[0], &count[0]);
  const int n = count[0] > 0;
  zero_shard(total, base, dp_rank, dp_size, &lo[n], &count[n]);
  return n + 1;
}

int vt_optimizer_write_ranges(const vt_optimizer *o, int64_t lo[2], int64_t count[2]) {
  return vt_optim_write_ranges(o->table->total, o->base, o->dp ? vt_comm_rank(o->dp) : 0,
                               o->dp ? vt_comm_size(o->dp) : 1, o->zero, lo, count);
}

// The part of tensor p inside the flat range [lo, hi): *first (flat index) and the count.
static int64_t piece(const vt_param *p, int64_t lo, int64_t hi, int64_t *first) {
  int64_t a = p->offset > lo ? p->offset : lo;
  int64_t b = p->offset + p->local_count < hi ? p->offset + p->local_count : hi;
  *first = a;
  return b > a ? b - a : 0;
}

// Calls fn once per run of adjacent tensors (within the flat range [lo, hi)) that share the
// same key, with the run's first flat index and length: fewer, longer calls (on a GPU every
// call is a launch). A key below 0 leaves the tensor out (a frozen one).
typedef struct {
  const vt_optimizer *o;
  int64_t lo;
  int (*key)(const vt_optimizer *o, const vt_param *p);
  void (*fn)(void *ctx, int64_t first, int64_t count, int key);
  void *ctx;
} run_walk;

static void for_each_run(const run_walk *w, int64_t hi) {
  int64_t run_first = 0, run_end = -1;
  int run_key = 0;
  for (int i = 0; i <= w->o->table->count; i++) {
    int64_t first = 0, count = 0;
    int key = 0;
    if (i < w->o->table->count) {
      const vt_param *p = &w->o->table->p[i];
      count = piece(p, w->lo, hi, &first);
      if (count <= 0) continue;
      key = w->key(w->o, p);
      if (first == run_end && key == run_key) {  // extends the current run
        run_end += count;
        continue;
      }
    }
    if (run_end > run_first && run_key >= 0)
      w->fn(w->ctx, run_first, run_end - run_first, run_key);
    run_first = first, run_end = first + count, run_key = key;
  }
}

static int is_frozen(const vt_optimizer *o, const vt_param *p) {
  return o->frozen[p - o->table->p];
}
// 1 for a TP-replicated tensor on a TP rank other than 0: a copy, not counted in the norm; -1
// for a frozen one: not in the norm at all.
static int copy_key(const vt_optimizer *o, const vt_param *p) {
  if (is_frozen(o, p)) return -1;
  return p->tp_split == VT_TP_REPLICATED && o->tp && vt_comm_rank(o->tp) != 0;
}
// 0, or -1 for a frozen tensor: the runs that the EMA and LAMB's moments update.
static int trained_key(const vt_optimizer *o, const vt_param *p) { return -is_frozen(o, p); }
typedef struct {
  const vt_optimizer *o;
  const float *grads;  // element lo
  int64_t lo;
  int runs;
} sumsq_ctx;

static void sumsq_run(void *ctx, int64_t first, int64_t count, int key) {
  sumsq_ctx *c = ctx;
  vt_sumsq(c->o->be, c->o->sums + c->runs, c->grads + (first - c->lo), count);
  c->o->run_key[c->runs++] = (unsigned char)key;
}

// Sum of squares of grads over the flat range [lo, hi) (grads points at element lo), counting
// tensors replicated over TP only on TP rank 0, so the sum over the TP group counts them once.
// The other TP ranks still look at their copies: a non-finite value there makes the sum NaN, so
// that every rank skips the step together. One vt_sumsq per run of tensors (one without TP),
// one copy to the host, the runs added there in order.
static double local_sumsq(const vt_optimizer *o, const float *grads, int64_t lo, int64_t hi) {
  sumsq_ctx c = {o, grads, lo, 0};
  const run_walk w = {o, lo, copy_key, sumsq_run, &c};
  for_each_run(&w, hi);
  if (c.runs) o->be->to_host(o->norms, o->sums, (size_t)c.runs * sizeof(double));
  double sums[2] = {0.0, 0.0};  // [0] counted, [1] copies
  for (int r = 0; r < c.runs; r++) sums[o->run_key[r]] += o->norms[r];
  return isfinite(sums[1]) ? sums[0] : NAN;
}

// With layer decay, runs of tensors are cut where the layer (and so the learning rate) changes;
// frozen tensors are left out.
static int layer_key(const vt_optimizer *o, const vt_param *p) {
  if (is_frozen(o, p)) return -1;
  return vt_layer_lr_scale(&o->cfg, 0) < 1.0 ? p->lr_layer : 0;
}
typedef struct {
  vt_optimizer *o;
  float *params, *m, *v;  // element lo
  const float *grads;     // element lo
  int64_t lo;
  float lr;
  float grad_scale;  // AdamW's: gradient clipping's coefficient, or 1
} step_ctx;

// The rate of a run of tensors of one layer.
static float run_lr(const step_ctx *c, int layer) {
  return (float)(c->lr * vt_layer_lr_scale(&c->o->cfg, layer));
}

static void adamw_run(void *ctx, int64_t first, int64_t count, int layer) {
  step_ctx *c = ctx;
  const vt_optim_config *oc = &c->o->cfg;
  const int64_t at = first - c->lo;
  const float lr = run_lr(c, layer);
  const uint8_t *decay = c->o->decay + (first - c->o->shard_lo);
  vt_adamw(c->o->be, c->params + at, c->grads + at, c->m + at, c->v + at, decay, count, lr,
           oc->beta1, oc->beta2, oc->eps, oc->weight_decay, c->o->t - c->o->t0, c->grad_scale);
}

// AdamW on the tensors in the flat range [lo, hi); params, grads, m and v point at element lo.
// One call per run of adjacent tensors (one for the whole range without layer decay): the
// weight-decay mask says which elements decay; each gradient is read times grad_scale.
static void adamw_range(vt_optimizer *o, float *params, const float *grads, float *m, float *v,
                        int64_t lo, int64_t hi, float lr, float grad_scale) {
  step_ctx c = {o, params, m, v, grads, lo, lr, grad_scale};
  const run_walk w = {o, lo, layer_key, adamw_run, &c};
  for_each_run(&w, hi);
}

static void sgd_run(void *ctx, int64_t first, int64_t count, int layer) {
  step_ctx *c = ctx;
  const vt_optim_config *oc = &c->o->cfg;
  const int64_t at = first - c->lo;
  const uint8_t *decay = c->o->decay + (first - c->o->shard_lo);
  vt_sgd(c->o->be, c->params + at, c->grads + at, c->m + at, decay, count, run_lr(c, layer),
         oc->momentum, oc->weight_decay, oc->nesterov);
}

// SGD with momentum on the flat range [lo, hi) as adamw_range, m the momentum buffer.
static void sgd_range(vt_optimizer *o, float *params, const float *grads, float *m, int64_t lo,
                      int64_t hi, float lr) {
  step_ctx c = {o, params, m, NULL, grads, lo, lr, 1.0f};
  const run_walk w = {o, lo, layer_key, sgd_run, &c};
  for_each_run(&w, hi);
}

// LAMB's moments and direction on a run of trained tensors; the direction overwrites the spent
// gradients (grads is lamb_range's g, writable).
static void lamb_moments_run(void *ctx, int64_t first, int64_t count, int key) {
  (void)key;
  step_ctx *c = ctx;
  const vt_optim_config *oc = &c->o->cfg;
  const int64_t at = first - c->lo;
  const uint8_t *decay = c->o->decay + (first - c->o->shard_lo);
  vt_lamb_moments(c->o->be, (float *)c->grads + at, c->params + at, c->grads + at, c->m + at,
                  c->v + at, decay, count, oc->beta1, oc->beta2, oc->eps, oc->weight_decay,
                  c->o->t - c->o->t0);
}

// LAMB (timm's Lamb) on the flat range [lo, hi) as adamw_range, g holding the clipped gradients
// of that range, which the Adam direction overwrites. A tensor's trust ratio needs its whole
// norms: each rank sums the squares of its piece (a TP-replicated tensor on TP rank 0 only, as
// the gradient norm), the TP group adds the pieces of split tensors, ZeRO-1's DP group those of
// cut ones; pipeline stages hold disjoint tensors. Tensors without weight decay step without a
// trust ratio, as in timm (whose Lamb adapts only where weight_decay != 0).
// The whole sums of squares of each decayed tensor's weights (o->norms[2i]) and of x's elements
// (o->norms[2i + 1]) over the flat range [lo, hi), params and x pointing at element lo: each rank
// sums its piece (a TP-replicated tensor on TP rank 0 only, as the gradient norm), the TP group
// adds the pieces of split tensors, ZeRO-1's DP group those of cut ones. All zero without
// weight decay (no trust ratio then). Collective over tp and, under ZeRO-1, dp.
static const double *decayed_norms(vt_optimizer *o, const float *params, const float *x,
                                   int64_t lo, int64_t hi) {
  const vt_backend *be = o->be;
  const vt_param_table *t = o->table;
  const int adapt = o->cfg.weight_decay != 0.0f;
  double *ss = o->norms;
  const size_t nbytes = 2 * (size_t)t->count * sizeof(double);
  memset(ss, 0, nbytes);
  if (adapt) {  // every sum queued into o->sums, then one copy to the host
    be->zero(o->sums, nbytes);
    for (int i = 0; i < t->count; i++) {
      int64_t first, count = piece(&t->p[i], lo, hi, &first);
      if (count <= 0 || !t->p[i].decay || copy_key(o, &t->p[i]) != 0) continue;
      vt_sumsq(be, o->sums + 2 * i, params + (first - lo), count);
      vt_sumsq(be, o->sums + 2 * i + 1, x + (first - lo), count);
    }
    be->to_host(ss, o->sums, nbytes);
  }
  if (adapt && o->tp) vt_comm_all_reduce_double(o->tp, ss, 2 * t->count, VT_REDUCE_SUM);
  if (adapt && o->zero) vt_comm_all_reduce_double(o->dp, ss, 2 * t->count, VT_REDUCE_SUM);
  return ss;
}

static void lamb_range(vt_optimizer *o, float *params, float *g, int64_t lo, int64_t hi, float lr) {
  const vt_backend *be = o->be;
  const vt_optim_config *oc = &o->cfg;
  const vt_param_table *t = o->table;
  step_ctx c = {o, params, o->m, o->v, g, lo, lr, 1.0f};  // the moments of the trained runs
  const run_walk w = {o, lo, trained_key, lamb_moments_run, &c};
  for_each_run(&w, hi);
  const int adapt = oc->weight_decay != 0.0f;
  const double *ss = decayed_norms(o, params, g, lo, hi);
  for (int i = 0; i < t->count; i++) {
    int64_t first, count = piece(&t->p[i], lo, hi, &first);
    if (count <= 0 || o->frozen[i]) continue;
    double trust = 1.0;  // timm: ||w|| / ||update|| where both are positive, else 1
    if (adapt && t->p[i].decay && ss[2 * i] > 0.0 && ss[2 * i + 1] > 0.0)
      trust = sqrt(ss[2 * i]) / sqrt(ss[2 * i + 1]);
    const float lr_i = (float)(lr * vt_layer_lr_scale(oc, t->p[i].lr_layer));
    vt_lamb_apply(be, params + (first - lo), g + (first - lo), count, lr_i, (float)trust);
  }
}

// LARS (timm's Lars) on the flat range [lo, hi) as lamb_range, g holding the clipped gradients,
// which it overwrites: a decayed tensor's trust ratio VT_LARS_TRUST ||w|| / (||g|| + wd ||w|| +
// eps) from its whole norms (1 where either norm is 0), under LARC min(that / lr, 1) with the
// tensor's own rate (1 at rate 0, as timm's clamp of infinity), then its momentum step on
// trust (g + wd w), which vt_sgd computes as (trust g) + (trust wd) w; an undecayed tensor's
// plain momentum step.
static void lars_range(vt_optimizer *o, float *params, float *g, int64_t lo, int64_t hi, float lr) {
  const vt_optim_config *oc = &o->cfg;
  const vt_param_table *t = o->table;
  const double wd = oc->weight_decay;
  const double *ss = decayed_norms(o, params, g, lo, hi);
  for (int i = 0; i < t->count; i++) {
    int64_t first, count = piece(&t->p[i], lo, hi, &first);
    if (count <= 0 || o->frozen[i]) continue;
    const float lr_i = (float)(lr * vt_layer_lr_scale(oc, t->p[i].lr_layer));
    double trust = 1.0;  // timm: 1 where ||w|| or ||g|| is 0
    if (wd != 0.0 && t->p[i].decay && ss[2 * i] > 0.0 && ss[2 * i + 1] > 0.0) {
      const double w = sqrt(ss[2 * i]);
      trust = VT_LARS_TRUST * w / (sqrt(ss[2 * i + 1]) + w * wd + oc->eps);
    }
    if (wd != 0.0 && t->p[i].decay && oc->trust_clip)  // LARC
      trust = lr_i > 0.0f ? fmin(trust / (double)lr_i, 1.0) : 1.0;
    const int64_t at = first - lo;
    if (trust != 1.0) vt_scale(o->be, g + at, (float)trust, count);
    vt_sgd(o->be, params + at, g + at, o->m + at, o->decay + (first - o->shard_lo), count, lr_i,
           oc->momentum, (float)(wd * trust), oc->nesterov);
  }
}

static void ema_run(void *ctx, int64_t first, int64_t count, int key) {
  (void)key;
  step_ctx *c = ctx;  // lr: the EMA's decay
  vt_ema(c->o->be, c->o->ema + (first - c->lo), c->params + (first - c->lo), c->lr, count);
}

// ZeRO-1: every DP rank's shard of x (a whole table's elements: weights or the EMA), each in
// its place in the rank's own x, to every DP rank: the equal parts all-gathered in place, the
// last rank's tail broadcast. Collective over dp.
static void gather_shards(vt_optimizer *o, float *x) {
  const int n = vt_comm_size(o->dp);
  const int64_t whole = o->part * n, tail = o->table->total - o->base - whole;
  if (o->part > 0) vt_comm_all_gather(o->dp, x + o->base, x + o->shard_lo, o->part);
  if (tail > 0) vt_comm_broadcast(o->dp, x + o->base + whole, tail, n - 1);
}

double vt_optimizer_step(vt_optimizer *o, float *params, float *grads, float lr) {
  const vt_backend *be = o->be;
  const int64_t total = o->table->total;
  o->spiked = 0;
  if (o->overlap) {
    int early = 0;
    if (o->zero)
      for (int r = 0; r < vt_comm_size(o->dp); r++)
        early += o->owner_need[r] >= 0 && o->owner_wait[r] < 0;
    else
      for (int l = 0; l < o->nlayers; l++)
        early += o->started[l] && o->layer_hi[l] > o->layer_lo[l];
    // Layers whose reduction the backward pass did not start (all of them when nobody called
    // vt_optimizer_grads_ready), in layer order (under ZeRO-1 the shards they complete, and any
    // shard of no layer's); then wait for every one. First, because the TP sum below reads
    // gradients that may still be in flight. Every shard's owner has its reduced gradients;
    // the other shards' are undefined.
    for (int l = 0; l < o->nlayers; l++) vt_optimizer_grads_ready(o, grads, l);
    for (int r = 0; o->zero && r < vt_comm_size(o->dp); r++)
      if (o->owner_wait[r] == 0) reduce_shard(o, grads, r);
    vt_comm_wait_all(o->dp);
    reductions_reset(o);
    o->started_early = early;
  }
  if (!o->zero) tp_sums(o, grads, -1);  // (ZeRO-1's were summed before each shard's reduce)
  // The gradients this rank updates with, g, covering the flat elements [lo, hi) of its state:
  // the frozen prefix before base is left out, and under ZeRO-1 all but its shard.
  const int64_t base = o->base;
  const int64_t lo = o->shard_lo, hi = o->shard_lo + o->shard_count;
  float *g = grad_of(o, grads, lo);
  if (o->dp && !o->zero && !o->overlap) {
    for (int64_t b = base; b < total; b += VT_DP_BUCKET_COUNT)
      vt_comm_all_reduce(o->dp, grad_of(o, grads, b),
                         total - b < VT_DP_BUCKET_COUNT ? total - b : VT_DP_BUCKET_COUNT);
  }
  // One norm over the whole model: TP shards and pipeline stages hold different parameters,
  // so their sums add; DP ranks hold the same (reduced) gradients unless ZeRO split them.
  double ss = hi > lo ? local_sumsq(o, g, lo, hi) : 0.0;
  if (o->tp) vt_comm_all_reduce_double(o->tp, &ss, 1, VT_REDUCE_SUM);
  if (o->pp) vt_comm_all_reduce_double(o->pp, &ss, 1, VT_REDUCE_SUM);
  if (o->zero) vt_comm_all_reduce_double(o->dp, &ss, 1, VT_REDUCE_SUM);
  const double norm = sqrt(ss);
  if (!isfinite(norm)) return norm;  // every rank sees the same norm: all skip the update
  const double limit = vt_spike_limit(&o->spike, VT_SPIKE_NORM, o->cfg.spike_z,
                                      o->cfg.spike_window);
  vt_spike_add(&o->spike, VT_SPIKE_NORM, norm, o->cfg.spike_window);
  if (norm > limit) {  // likewise
    o->spiked = VT_SPIKE_NORM + 1;
    return norm;
  }
  // PyTorch's clip_grad_norm_ rule; AdamW multiplies by the coefficient as it reads each
  // gradient (the same bits), the other optimizers get the gradients scaled first.
  float clip = 1.0f;
  if (o->cfg.clip_grad > 0.0f) {
    const double coef = o->cfg.clip_grad / (norm + 1e-6);
    if (coef < 1.0) clip = (float)coef;
  }
  if (clip != 1.0f && o->cfg.kind != VT_OPT_ADAMW && hi > lo) vt_scale(be, g, clip, hi - lo);
  o->t++;
  if (o->cfg.kind == VT_OPT_LAMB)  // every rank: the norms are reduced over ranks
    lamb_range(o, params + lo, g, lo, hi > lo ? hi : lo, lr);
  else if (o->cfg.kind == VT_OPT_LARS)  // likewise
    lars_range(o, params + lo, g, lo, hi > lo ? hi : lo, lr);
  else if (hi > lo && o->cfg.kind == VT_OPT_SGD)
    sgd_range(o, params + lo, g, o->m, lo, hi, lr);
  else if (hi > lo)
    adamw_range(o, params + lo, g, o->m, o->v, lo, hi, lr, clip);
  if (o->zero) gather_shards(o, params);  // each DP rank updated its shard
  if (o->ema) {  // frozen tensors' EMA stays their value
    step_ctx c = {o, params + lo, NULL, NULL, NULL, lo, vt_ema_decay_at(&o->cfg, o->t), 1.0f};
    const run_walk w = {o, lo, trained_key, ema_run, &c};
    for_each_run(&w, hi);
  }
  return norm;
}

// Fills one buffer of this rank's optimizer state (moments, EMA) from values of the whole
// table: those from base on, or under ZeRO-1 the rank's shard. move: the backend's copy or
// to_device.
static void load_state(const vt_optimizer *o, float *state, const float *src,
                       void (*move)(void *dst, const void *src, size_t nbytes)) {
  if (o->shard_count > 0)
    move(state, src + o->shard_lo, (size_t)o->shard_count * sizeof(float));
}

void vt_optimizer_ema_reset(vt_optimizer *o, const float *params) {
  if (o->ema) load_state(o, o->ema, params, o->be->copy);
}

void vt_optimizer_ema_full(vt_optimizer *o, const float *params, float *dst) {
  const int64_t base = o->base, total = o->table->total;
  if (dst != params && base > 0) o->be->copy(dst, params, (size_t)base * sizeof(float));
  if (!o->zero) {
    if (total > base) o->be->copy(dst + base, o->ema, (size_t)(total - base) * sizeof(float));
    return;
  }
  // Each DP rank's shard in its place, then gathered as the step gathers the weights.
  const size_t nbytes = (size_t)o->shard_count * sizeof(float);
  if (nbytes) o->be->copy(dst + o->shard_lo, o->ema, nbytes);
  gather_shards(o, dst);
}

void vt_optimizer_set_ema(vt_optimizer *o, const float *host) {
  load_state(o, o->ema, host, o->be->to_device);
}

void vt_optimizer_get_range(vt_optimizer *o, int64_t lo, int64_t count, const float *params_host,
                            float *m_host, float *v_host, float *ema_host) {
  VT_CHECK(lo >= 0 && count >= 0 && lo + count <= o->table->total,
           "optimizer state range [%lld, %lld) is outside the %lld local elements", (long long)lo,
           (long long)(lo + count), (long long)o->table->total);
  // The frozen prefix's part: zero moments, the EMA the weights.
  const int64_t pre = lo + count <= o->base ? count : lo < o->base ? o->base - lo : 0;
  if (pre > 0) {
    memset(m_host, 0, (size_t)pre * sizeof(float));
    if (o->v) memset(v_host, 0, (size_t)pre * sizeof(float));
    if (ema_host && o->ema) memcpy(ema_host, params_host, (size_t)pre * sizeof(float));
  }
  lo += pre, count -= pre;
  if (count == 0) return;
  // Under ZeRO-1 the rank holds its shard only.
  VT_CHECK(!o->zero || (lo == o->shard_lo && count <= o->shard_count),
           "ZeRO-1: optimizer state range [%lld, %lld) is not this rank's shard at %lld",
           (long long)lo, (long long)(lo + count), (long long)o->shard_lo);
  const int64_t at = lo - o->shard_lo;
  const size_t nbytes = (size_t)count * sizeof(float);
  o->be->to_host(m_host + pre, o->m + at, nbytes);
  if (o->v) o->be->to_host(v_host + pre, o->v + at, nbytes);  // SGD has none
  if (ema_host && o->ema) o->be->to_host(ema_host + pre, o->ema + at, nbytes);
}

void vt_optimizer_set_state(vt_optimizer *o, const float *m_host, const float *v_host, int64_t t,
                            int64_t t0) {
  o->t = t, o->t0 = t0;
  load_state(o, o->m, m_host, o->be->to_device);
  if (o->v) load_state(o, o->v, v_host, o->be->to_device);
}
