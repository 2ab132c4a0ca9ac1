// trace.c: the ranges' recorder (vt_trace.h).
#include "vt_trace.h"

#include <stdlib.h>
#include <string.h>

#include "vt_error.h"

enum { TRACE_DEPTH = 64 };

static vt_trace_event *g_events = NULL;
static int g_count = 0, g_cap = 0, g_on = 0;
// The open ranges, innermost last: each one's event, or -1 where it was not recorded.
static int g_open[TRACE_DEPTH];
static int g_depth = 0;  // ranges open (those past TRACE_DEPTH counted, not kept)
// The device stretches' names, waiting for their times.
static char (*g_names)[64] = NULL;
static int g_nnames = 0, g_names_cap = 0, g_dropped = 0;

void vt_trace_start(void) { g_on = 1; }
void vt_trace_stop(void) { g_on = 0; }

const vt_trace_event *vt_trace_events(int *count) {
  *count = g_count;
  return g_events;
}

void vt_trace_clear(void) {
  free(g_events);
  free(g_names);
  g_events = NULL, g_names = NULL;
  g_count = g_cap = 0;
  g_nnames = g_names_cap = g_dropped = 0;
  for (int i = 0; i < g_depth && i < TRACE_DEPTH; i++) g_open[i] = -1;
}

// A new event named name (its times for the caller to fill).
static vt_trace_event *new_event(const char *name) {
  if (g_count == g_cap) {
    const int cap = g_cap ? 2 * g_cap : 1024;
    vt_trace_event *e = realloc(g_events, (size_t)cap * sizeof *e);
    VT_CHECK(e != NULL, "out of host memory for the trace's %d events", cap);
    g_events = e, g_cap = cap;
  }
  vt_trace_event *e = &g_events[g_count++];
  strncpy(e->name, name, sizeof e->name - 1);
  e->name[sizeof e->name - 1] = '\0';
  e->device = 0;
  return e;
}

void vt_trace_push(const char *name) {
  int index = -1;
  if (g_on && g_depth < TRACE_DEPTH) {
    vt_trace_event *e = new_event(name);
    index = g_count - 1;
    e->t1 = -1.0;
    e->t0 = vt_seconds();
  }
  if (g_depth < TRACE_DEPTH) g_open[g_depth] = index;
  g_depth++;
}

void vt_trace_pop(void) {
  VT_CHECK(g_depth > 0, "a range closed where none is open");
  g_depth--;
  if (g_depth < TRACE_DEPTH && g_open[g_depth] >= 0) g_events[g_open[g_depth]].t1 = vt_seconds();
}

void vt_trace_device_name(const char *name) {
  if (!g_on) return;
  if (g_nnames == g_names_cap) {
    const int cap = g_names_cap ? 2 * g_names_cap : 256;
    char(*names)[64] = realloc(g_names, (size_t)cap * sizeof *names);
    VT_CHECK(names != NULL, "out of host memory for the trace's device names");
    g_names = names, g_names_cap = cap;
  }
  strncpy(g_names[g_nnames], name, 63);
  g_names[g_nnames++][63] = '\0';
}

int vt_trace_device_named(void) { return g_nnames; }

void vt_trace_device_spans(const double *spans, int n) {
  const int paired = n < g_nnames ? n : g_nnames;
  for (int i = 0; i < paired; i++) {
    vt_trace_event *e = new_event(g_names[i]);
    e->device = 1;
    e->t0 = spans[2 * i], e->t1 = spans[2 * i + 1];
  }
  g_dropped += (n > paired ? n : g_nnames) - paired;
  g_nnames = 0;
}

int vt_trace_device_dropped(void) { return g_dropped; }
