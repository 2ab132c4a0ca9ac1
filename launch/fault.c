// fault.c: see fault.h.
#include "fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vt_error.h"

static struct {
  vt_fault_kind kind;
  int64_t first, last;
} g_fault;

static const char *const k_names[] = {"", "stall", "crash", "nan", "slow", "kill-in-save",
                                      "save-io", "spike"};

int vt_fault_init(int world_rank, char *err, size_t errlen) {
  const char *v = getenv("VT_FAULT");
  g_fault.kind = VT_FAULT_NONE;
  if (!v || !v[0]) return 0;
  char kind[16] = "";
  int rank = -1;
  long long first = 0, last = 0;
  int n = 0, k = 0;
  if (sscanf(v, "%15[a-z-]@%d:%lld%n", kind, &rank, &first, &n) == 3) {
    last = first;
    if (v[n] == '-' && sscanf(v + n, "-%lld%n", &last, &k) == 1) n += k;
  }
  vt_fault_kind found = VT_FAULT_NONE;
  for (int i = 1; i < (int)(sizeof k_names / sizeof k_names[0]); i++)
    if (strcmp(kind, k_names[i]) == 0) found = (vt_fault_kind)i;
  if (found == VT_FAULT_NONE || n == 0 || v[n] != '\0' || rank < 0 || first < 1 || last < first) {
    snprintf(err, errlen, "VT_FAULT=%s: expected KIND@RANK:FIRST[-LAST] with KIND one of stall, "
             "crash, nan, slow, kill-in-save, save-io, spike (a test-only switch; unset it for "
             "real runs)", v);
    return -1;
  }
  if (rank != world_rank) return 0;
  g_fault.kind = found, g_fault.first = first, g_fault.last = last;
  vt_log_warn("VT_FAULT=%s: this rank will misbehave on purpose (test-only switch)", v);
  return 0;
}

int vt_fault_at(vt_fault_kind kind, int64_t step) {
  return g_fault.kind == kind && step >= g_fault.first && step <= g_fault.last;
}

void vt_fault_step_start(int64_t step) {
  if (vt_fault_at(VT_FAULT_SLOW, step)) {
    struct timespec ts = {0, 300000000L};
    nanosleep(&ts, NULL);
  }
  if (vt_fault_at(VT_FAULT_CRASH, step)) {
    vt_log_warn("VT_FAULT: crashing this rank at step %lld", (long long)step);
    abort();
  }
  if (vt_fault_at(VT_FAULT_STALL, step)) {
    vt_log_warn("VT_FAULT: stalling this rank at step %lld", (long long)step);
    for (;;) pause();
  }
}
