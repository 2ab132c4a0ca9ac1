// error.c: fatal errors, the abort hook and rank-tagged logging. No MPI here: parallel/ installs
// an abort hook that calls MPI_Abort.
#include "vt_error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static vt_rank_tag g_tag = {0, -1, -1, -1};
static vt_abort_hook g_hook = NULL;
static int g_all_ranks = 0;

void vt_set_rank_tag(vt_rank_tag tag) { g_tag = tag; }
vt_rank_tag vt_get_rank_tag(void) { return g_tag; }
void vt_set_abort_hook(vt_abort_hook hook) { g_hook = hook; }
void vt_log_all_ranks(int on) { g_all_ranks = on; }

static void format_tag(char *tag, size_t n) {
  if (g_tag.tp_rank >= 0)
    snprintf(tag, n, "[rank %d tp %d pp %d dp %d]", g_tag.world_rank, g_tag.tp_rank,
             g_tag.pp_rank, g_tag.dp_rank);
  else
    snprintf(tag, n, "[rank %d]", g_tag.world_rank);
}

static void vlog(const char *level, const char *fmt, va_list ap) {
  // One fprintf per line keeps lines of different ranks from interleaving mid-line.
  char buf[2048], tag[96];
  vsnprintf(buf, sizeof buf, fmt, ap);
  format_tag(tag, sizeof tag);
  fprintf(stderr, "%s %s%s\n", tag, level, buf);
  fflush(stderr);
}

void vt_log_info(const char *fmt, ...) {
  if (g_tag.world_rank != 0 && !g_all_ranks) return;
  va_list ap;
  va_start(ap, fmt);
  vlog("", fmt, ap);
  va_end(ap);
}

void vt_log_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("warning: ", fmt, ap);
  va_end(ap);
}

void vt_log_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("error: ", fmt, ap);
  va_end(ap);
}

void vt_fatal(const char *file, int line, const char *fmt, ...) {
  char buf[2048], tag[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  format_tag(tag, sizeof tag);
  fprintf(stderr, "%s %s:%d: %s\n", tag, file, line, buf);
  fflush(stderr);
  fflush(stdout);
  if (g_hook) g_hook(1);
  abort();
}

vt_status vt_fail_input(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return VT_ERR_INPUT;
}

double vt_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *vt_float_text(double v, char *buf, size_t size) {
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(buf, size, "%.*g", digits, (double)(float)v);
    if ((float)strtod(buf, NULL) == (float)v) break;
  }
  return buf;
}

const char *vt_printable(const char *text, char *buf, size_t size) {
  size_t k = 0;
  for (const unsigned char *c = (const unsigned char *)text; *c && k + 4 < size; c++)
    buf[k++] = *c < 0x20 || *c >= 0x7f ? '?' : (char)*c;
  if (text[k]) memcpy(buf + k, "...", 3), k += 3;
  buf[k] = '\0';
  return buf;
}
