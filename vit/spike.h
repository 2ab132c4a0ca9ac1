// spike.h: loss and gradient-norm spikes (--skip-spike-z Z, --spike-window N), as llm.c's and
// others' outlier guards skip them: each step's global loss and gradient norm are z-scored
// against exponential moving averages of the earlier steps' (mean and variance, span N: weight
// 2 / (N + 1)), and a step whose loss or norm lies more than Z standard deviations above its mean
// is skipped (the parameters and the optimizer state as they were, as for a non-finite step).
// The statistics take every finite value, skipped or not (a lasting shift becomes the new
// normal), guard only once N values are in (0 to N-1 never skip), and travel in checkpoints, so
// a resumed run skips the steps the uninterrupted one does. Pure arithmetic: no MPI, no backend.
#ifndef VT_SPIKE_H
#define VT_SPIKE_H

#include <stdint.h>

enum { VT_SPIKE_LOSS = 0, VT_SPIKE_NORM = 1 };

typedef struct {
  int64_t n[2];               // values taken: the loss's, the gradient norm's
  double mean[2], var[2];     // their moving mean and variance
} vt_spike_stats;

// The largest value of series `which` that is not a spike: mean + z sd, or +infinity while the
// guard is off (z <= 0) or fewer than window values are in.
double vt_spike_limit(const vt_spike_stats *s, int which, float z, int window);
// x's z-score against the series (0 where its deviation is 0).
double vt_spike_z(const vt_spike_stats *s, int which, double x);
// Takes a finite x into the series (the first value is the mean, variance 0).
void vt_spike_add(vt_spike_stats *s, int which, double x, int window);

#endif
