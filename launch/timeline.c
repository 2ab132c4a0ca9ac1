// timeline.c: --trace-steps (timeline.h).
#include "timeline.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vt_error.h"
#include "vt_rng.h"
#include "vt_trace.h"

vt_timeline vt_timeline_window(int n, int64_t start, int64_t end) {
  vt_timeline t = {-1, -1, 0.0, 0};
  if (n <= 0 || end <= start) return t;
  t.first = end - start > 1 ? start + 1 : start;
  t.end = t.first + n < end ? t.first + n : end;
  return t;
}

// The host's name hashed to 32 bits (exact in a double).
static double host_hash(void) {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  return (double)vt_hash_name(name);
}

void vt_timeline_before(vt_timeline *t, vt_comm *world, const vt_backend *be, int64_t step) {
  if (step != t->first) return;
  if (be->interval_origin) be->interval_origin();
  // Every rank's clock at the barrier's end and its host. The ranks of a host share its
  // monotonic clock, so each takes the reading of its host's lowest rank: exact between them;
  // hosts apart by how far apart their lowest ranks left the barrier.
  const int rank = vt_comm_rank(world), size = vt_comm_size(world);
  double *at = calloc(2 * (size_t)size, sizeof *at);
  VT_CHECK(at != NULL, "out of host memory");
  vt_comm_barrier(world);
  at[2 * rank] = vt_seconds();
  at[2 * rank + 1] = host_hash();
  vt_comm_all_reduce_double(world, at, 2 * (int64_t)size, VT_REDUCE_SUM);
  int q = 0;
  while (at[2 * q + 1] != at[2 * rank + 1]) q++;
  t->t_sync = at[2 * q];
  free(at);
  t->on = 1;
  vt_trace_clear();
  vt_trace_start();
}

// s (cap) += the printf-style text, growing it; returns the new length.
static size_t append(char **s, size_t *cap, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char **s, size_t *cap, size_t len, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(*s + len, *cap - len, fmt, ap);
    va_end(ap);
    VT_CHECK(n >= 0, "the trace's text could not be formatted");
    if ((size_t)n < *cap - len) return len + (size_t)n;
    *cap = 2 * (*cap + (size_t)n);
    *s = realloc(*s, *cap);
    VT_CHECK(*s != NULL, "out of host memory for the trace's text");
  }
}

// A range's name as a JSON string's contents (the names are the trainer's own: letters,
// digits, spaces and dashes; anything else becomes '?').
static void json_name(char *out, size_t size, const char *name) {
  size_t k = 0;
  for (; *name && k + 1 < size; name++)
    out[k++] = (*name >= ' ' && *name != '"' && *name != '\\' && *name < 127) ? *name : '?';
  out[k] = '\0';
}

// This rank's events as Chrome trace events (complete events "X", microseconds from t_sync),
// after its row's name and place; separated by ",\n", which also starts every rank's text but
// rank 0's (the first in the file).
static char *rank_text(const vt_timeline *t, const vt_mesh *mesh, int rank, size_t *len) {
  size_t cap = 1 << 16;
  char *s = malloc(cap);
  VT_CHECK(s != NULL, "out of host memory for the trace's text");
  const vt_mesh_coord c = vt_mesh_coords(mesh, rank);
  const int sort = (c.pp_rank * mesh->dp_size + c.dp_rank) * mesh->tp_size + c.tp_rank;
  size_t n = append(&s, &cap, 0,
                    "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                    "{\"name\": \"rank %d (tp %d pp %d dp %d)\"}},\n"
                    "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                    "\"args\": {\"sort_index\": %d}}",
                    rank ? ",\n" : "", rank, rank, c.tp_rank, c.pp_rank, c.dp_rank, rank, sort);
  int count = 0, device = 0;
  const vt_trace_event *e = vt_trace_events(&count);
  for (int i = 0; i < count; i++) {
    if (e[i].t1 < e[i].t0) continue;  // (never closed: none are, the window ends between steps)
    char name[sizeof e[i].name];
    json_name(name, sizeof name, e[i].name);
    // Start and end each rounded to the nanosecond, the length their difference: passes back
    // to back stay so (rounding start and length apart could overlap them by 1 ns).
    const long long t0 = llround(1e9 * (e[i].t0 - t->t_sync)),
                    t1 = llround(1e9 * (e[i].t1 - t->t_sync));
    n = append(&s, &cap, n,
               ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
               "\"dur\": %.3f}",
               name, rank, e[i].device, 1e-3 * (double)t0, 1e-3 * (double)(t1 - t0));
    device |= e[i].device;
  }
  if (device)  // the two tracks named
    n = append(&s, &cap, n,
               ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
               "\"args\": {\"name\": \"host\"}},\n{\"name\": \"thread_name\", \"ph\": \"M\", "
               "\"pid\": %d, \"tid\": 1, \"args\": {\"name\": \"device\"}}",
               rank, rank);
  if (vt_trace_device_dropped() > 0)
    vt_log_warn("--trace-steps: %d passes of the device's work left out of the timeline (no "
                "timing events for them)", vt_trace_device_dropped());
  *len = n;
  return s;
}

void vt_timeline_after(vt_timeline *t, vt_comm *world, const vt_mesh *mesh, int64_t step,
                       int done, const char *path) {
  if (!t->on || (step + 1 != t->end && !done)) return;
  vt_trace_stop();
  t->on = 0;
  const int rank = vt_comm_rank(world), size = vt_comm_size(world);
  size_t len = 0;
  char *mine = rank_text(t, mesh, rank, &len);
  vt_trace_clear();
  // Every rank's text to rank 0: the lengths, then each rank's text broadcast from it.
  double *lens = calloc((size_t)size, sizeof *lens);
  VT_CHECK(lens != NULL, "out of host memory");
  lens[rank] = (double)len;
  vt_comm_all_reduce_double(world, lens, size, VT_REDUCE_SUM);
  FILE *f = NULL;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (rank == 0) {
    f = fopen(tmp, "w");
    if (!f) vt_log_warn("--trace-steps: cannot write %s: %s", tmp, strerror(errno));
    else fprintf(f, "{\"traceEvents\": [\n");
  }
  size_t total = 0;
  for (int q = 0; q < size; q++) {
    const size_t n = (size_t)lens[q];
    char *text = q == rank ? mine : malloc(n + 1);
    VT_CHECK(text != NULL, "out of host memory for rank %d's trace", q);
    if (size > 1) vt_comm_broadcast_bytes(world, text, (int64_t)n, q);
    if (f) fwrite(text, 1, n, f);
    total += n;
    if (text != mine) free(text);
  }
  free(mine);
  free(lens);
  if (!f) return;
  fprintf(f, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"first_step\": %lld, "
             "\"last_step\": %lld, \"ranks\": %d, \"clock\": \"microseconds from the end of a "
             "barrier before the first step, by each host's lowest rank\"}}\n",
          (long long)(t->first + 1), (long long)(step + 1), size);
  const int bad = ferror(f) | (fclose(f) != 0);
  if (bad || rename(tmp, path) != 0) {
    vt_log_warn("--trace-steps: cannot write %s: %s", path, strerror(errno));
    remove(tmp);
    return;
  }
  vt_log_info("timeline of steps %lld-%lld on %d ranks (%.1f KiB) in %s: open it in "
              "https://ui.perfetto.dev or chrome://tracing",
              (long long)(t->first + 1), (long long)(step + 1), size, (double)total / 1024.0,
              path);
}
