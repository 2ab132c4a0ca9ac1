// health.c: see health.h.
#include "health.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train.h"

static volatile sig_atomic_t g_signal = 0, g_interrupted = 0;

static void on_preempt(int sig) { g_signal = sig; }

static struct timespec g_first_interrupt;

// The first SIGINT stops the run at the end of the step; one within a second of it is the
// same Ctrl-C again (a terminal sends it to the whole process group, and a launcher such as
// spawn.sh forwards its own: srun's rule too); a later one stops the process at once.
static void on_interrupt(int sig) {
  (void)sig;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);  // (async-signal-safe, as sigaction and write)
  if (g_interrupted) {
    const double since = (double)(now.tv_sec - g_first_interrupt.tv_sec) +
                         1e-9 * (double)(now.tv_nsec - g_first_interrupt.tv_nsec);
    if (since < 1.0) return;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGINT, &dfl, NULL);
    raise(SIGINT);
    return;
  }
  g_interrupted = 1, g_first_interrupt = now;
  static const char msg[] = "\nvit3d: interrupted: stopping at the end of this step, with a "
                            "checkpoint where --save is given; Ctrl-C again (a second later) "
                            "stops at once\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
}

void vt_health_catch_preemption(void) {
  struct sigaction sa, was;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_preempt;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (sigaction(SIGINT, NULL, &was) == 0 && was.sa_handler != SIG_IGN) {
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
  }
}

int vt_health_preempt_signal(void) { return (int)g_signal; }

int vt_health_interrupted(void) { return (int)g_interrupted; }

void vt_health_exit_if_signalled(void) {
  if (!g_signal && !g_interrupted) return;
  fprintf(stderr, "vit3d: %s while the ranks were meeting: stopping (nothing trained yet)\n",
          g_signal ? strsignal(g_signal) : "interrupted (SIGINT)");
  fflush(NULL);
  _exit(g_signal ? VT_EXIT_PREEMPTED : VT_EXIT_INTERRUPTED);
}

double vt_health_rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0.0;
  long long size = 0, resident = 0;
  int n = fscanf(f, "%lld %lld", &size, &resident);
  fclose(f);
  return n == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0) : 0.0;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Bounded append at *k (the text stops at len - 1).
static void append(char *s, size_t len, size_t *k, const char *fmt, ...) {
  if (*k + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(s + *k, len - *k, fmt, ap);
  va_end(ap);
  if (w > 0) *k = *k + (size_t)w < len ? *k + (size_t)w : len - 1;
}

// The median of sorted[0..n) without one element equal to v: the other ranks' median, which
// a slow rank is measured against (with two ranks the median of both was at most twice the
// faster one's, so a rank 10x slower read 1.8x).
static double median_of_others(const double *sorted, int n, double v) {
  int skip = 0;
  while (skip < n - 1 && sorted[skip] != v) skip++;
  const int m = n - 1;
#define AT(i) sorted[(i) < skip ? (i) : (i) + 1]
  const double med = m % 2 ? AT(m / 2) : 0.5 * (AT(m / 2 - 1) + AT(m / 2));
#undef AT
  return med;
}

static void json_array(char *json, size_t len, size_t *k, const char *key, const double *v, int n) {
  append(json, len, k, "%s\"%s\": [", *k ? ", " : "", key);
  for (int i = 0; i < n; i++) append(json, len, k, "%s%.2f", i ? ", " : "", v[i]);
  append(json, len, k, "]");
}

void vt_health_rank_report(vt_comm *world, const vt_mesh *mesh, int64_t first, int64_t last,
                           double busy_ms, double device_mib, char *json, size_t jsonlen,
                           char *summary, size_t summarylen) {
  const int n = vt_comm_size(world), me = vt_comm_rank(world);
  double *all = calloc((size_t)4 * n, sizeof(double));
  VT_CHECK(all != NULL, "out of host memory for the rank report");
  all[me] = busy_ms, all[n + me] = vt_health_rss_mib(), all[2 * n + me] = device_mib;
  vt_comm_all_reduce_double(world, all, 3 * n, VT_REDUCE_SUM);
  json[0] = '\0', summary[0] = '\0';
  if (me == 0) {
    double *sorted = all + 3 * n;
    memcpy(sorted, all, (size_t)n * sizeof(double));
    qsort(sorted, (size_t)n, sizeof(double), cmp_double);
    const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    char slow[1024] = "";
    size_t k = 0;
    for (int r = 0; n > 1 && r < n; r++) {
      const double others = median_of_others(sorted, n, all[r]);
      if (!(all[r] > 1.2 * others)) continue;
      vt_mesh_coord c = vt_mesh_coords(mesh, r);
      append(slow, sizeof slow, &k, "%srank %d (tp %d pp %d dp %d) %.2fx", k ? ", " : "", r,
             c.tp_rank, c.pp_rank, c.dp_rank, others > 0 ? all[r] / others : 0.0);
    }
    double host_lo = all[n], host_hi = all[n], dev_hi = 0;
    for (int r = 0; r < n; r++) {
      host_lo = all[n + r] < host_lo ? all[n + r] : host_lo;
      host_hi = all[n + r] > host_hi ? all[n + r] : host_hi;
      dev_hi = all[2 * n + r] > dev_hi ? all[2 * n + r] : dev_hi;
    }
    char dev[64] = "";
    if (dev_hi > 0) snprintf(dev, sizeof dev, "; device memory up to %.0f MiB", dev_hi);
    snprintf(summary, summarylen,
             "ranks over steps %lld-%lld: busy %.1f / %.1f / %.1f ms per step (min / median / "
             "max, waiting in collectives excluded); %s%s; host memory %.0f-%.0f MiB%s",
             (long long)first, (long long)last, sorted[0], median, sorted[n - 1],
             k ? "slower than 1.2 x the other ranks' median: " : "no straggler", slow, host_lo,
             host_hi, dev);
    size_t j = 0;
    json_array(json, jsonlen, &j, "rank_busy_ms", all, n);
    json_array(json, jsonlen, &j, "rank_host_mib", all + n, n);
    json_array(json, jsonlen, &j, "rank_device_mib", all + 2 * n, n);
  }
  free(all);
}
