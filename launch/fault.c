// fault.c: see fault.h.
#include "fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vt_error.h"

enum { FAULTS_MAX = 4 };
static struct {
  vt_fault_kind kind;
  int64_t first, last;
} g_faults[FAULTS_MAX];
static int g_nfaults = 0;  // this rank's

static const char *const k_names[] = {"", "stall", "crash", "nan", "slow", "kill-in-save",
                                      "save-io", "spike", "usr1", "error"};

// One KIND@RANK:FIRST[-LAST] of v (up to its comma or end), taken where RANK is this rank's.
static int parse_one(const char *v, size_t len, int world_rank) {
  char spec[96] = "", kind[16] = "";
  if (len >= sizeof spec) return -1;
  memcpy(spec, v, len);
  int rank = -1;
  long long first = 0, last = 0;
  int n = 0, k = 0;
  if (sscanf(spec, "%15[a-z0-9-]@%d:%lld%n", kind, &rank, &first, &n) == 3) {
    last = first;
    if (spec[n] == '-' && sscanf(spec + n, "-%lld%n", &last, &k) == 1) n += k;
  }
  vt_fault_kind found = VT_FAULT_NONE;
  for (int i = 1; i < (int)(sizeof k_names / sizeof k_names[0]); i++)
    if (strcmp(kind, k_names[i]) == 0) found = (vt_fault_kind)i;
  if (found == VT_FAULT_NONE || n == 0 || spec[n] != '\0' || rank < 0 || first < 1 ||
      last < first || g_nfaults == FAULTS_MAX)
    return -1;
  if (rank == world_rank)
    g_faults[g_nfaults].kind = found, g_faults[g_nfaults].first = first,
    g_faults[g_nfaults++].last = last;
  return 0;
}

int vt_fault_init(int world_rank, char *err, size_t errlen) {
  const char *v = getenv("VT_FAULT");
  g_nfaults = 0;
  if (!v || !v[0]) return 0;
  for (const char *p = v;;) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (parse_one(p, len, world_rank) != 0) {
      snprintf(err, errlen, "VT_FAULT=%s: expected KIND@RANK:FIRST[-LAST], up to %d of them "
               "separated by commas, with KIND one of stall, crash, nan, slow, kill-in-save, "
               "save-io, spike, usr1, error (a test-only switch; unset it for real runs)", v,
               FAULTS_MAX);
      g_nfaults = 0;
      return -1;
    }
    if (!comma) break;
    p = comma + 1;
  }
  if (g_nfaults > 0)
    vt_log_warn("VT_FAULT=%s: this rank will misbehave on purpose (test-only switch)", v);
  return 0;
}

int vt_fault_at(vt_fault_kind kind, int64_t step) {
  for (int i = 0; i < g_nfaults; i++)
    if (g_faults[i].kind == kind && step >= g_faults[i].first && step <= g_faults[i].last)
      return 1;
  return 0;
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
  VT_CHECK(!vt_fault_at(VT_FAULT_ERROR, step), "VT_FAULT: a fatal error on this rank at step %lld",
           (long long)step);
  if (vt_fault_at(VT_FAULT_USR1, step)) {
    vt_log_warn("VT_FAULT: SIGUSR1 to this rank at step %lld", (long long)step);
    raise(SIGUSR1);
  }
  if (vt_fault_at(VT_FAULT_STALL, step)) {
    vt_log_warn("VT_FAULT: stalling this rank at step %lld", (long long)step);
    for (;;) pause();
  }
}
