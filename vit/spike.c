// spike.c: loss and gradient-norm spikes (spike.h).
#include "spike.h"

#include <math.h>

double vt_spike_limit(const vt_spike_stats *s, int which, float z, int window) {
  if (z <= 0.0f || s->n[which] < window) return INFINITY;
  return s->mean[which] + (double)z * sqrt(s->var[which]);
}

double vt_spike_z(const vt_spike_stats *s, int which, double x) {
  const double sd = sqrt(s->var[which]), d = x - s->mean[which];
  return sd > 0.0 ? d / sd : 0.0;
}

void vt_spike_add(vt_spike_stats *s, int which, double x, int window) {
  if (!isfinite(x)) return;
  if (s->n[which]++ == 0) {
    s->mean[which] = x, s->var[which] = 0.0;
    return;
  }
  // The exponentially weighted mean and variance (West's incremental form).
  const double a = 2.0 / (window + 1.0), d = x - s->mean[which];
  s->mean[which] += a * d;
  s->var[which] = (1.0 - a) * (s->var[which] + a * d * d);
}
