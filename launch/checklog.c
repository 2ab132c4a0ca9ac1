// checklog.c: comparing a run's steps with an earlier run's metrics.jsonl (checklog.h).
#include "checklog.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vt_format_figure(char *buf, size_t size, double v) {
  if (isfinite(v)) snprintf(buf, size, "%.9g", v);
  else snprintf(buf, size, "null");
}

void vt_format_eval(char out[3][32], double loss, double top1, double top5) {
  vt_format_figure(out[0], 32, loss);  // a NaN loss (NaN logits) is JSON's null
  // (no image scored: no top-1 or top-5 either)
  if (isfinite(top1)) snprintf(out[1], 32, "%.6f", top1); else snprintf(out[1], 32, "null");
  if (isfinite(top5)) snprintf(out[2], 32, "%.6f", top5); else snprintf(out[2], 32, "null");
}

// The text of "key": VALUE in a metrics line, up to the next ',' or '}'; 0 when absent.
static int field(const char *line, const char *key, char *out, size_t size) {
  char pat[48];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(line, pat);
  if (!p) return 0;
  p += strlen(pat);
  size_t k = strcspn(p, ",}");
  if (k == 0 || k >= size) return 0;
  memcpy(out, p, k);
  out[k] = '\0';
  return 1;
}

static int by_step(const void *a, const void *b) {
  const struct vt_checklog_line *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->line < y->line ? -1 : x->line > y->line;
}

vt_status vt_checklog_open(vt_checklog *c, const char *path, double tol, char *err,
                           size_t errlen) {
  memset(c, 0, sizeof *c);
  snprintf(c->path, sizeof c->path, "%s", path);
  c->tol = tol;
  c->first_differ = -1;
  FILE *f = fopen(path, "r");
  if (!f) return vt_fail_input(err, errlen, "--check-log %s: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  int64_t alloc = 0, lineno = 0;
  vt_status st = VT_OK;
  ssize_t len;
  while (st == VT_OK && (len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if (len > 0 && line[len - 1] != '\n') {  // the last line, cut (a killed run, a full disk)
      vt_log_info("--check-log %s:%lld: a line cut short, left out", path, (long long)lineno);
      break;
    }
    char step[32], loss[32], gnorm[32];
    if (!field(line, "step", step, sizeof step) || !field(line, "loss", loss, sizeof loss) ||
        !field(line, "grad_norm", gnorm, sizeof gnorm)) {
      st = vt_fail_input(err, errlen, "--check-log %s:%lld: not a metrics.jsonl line of vit3d "
                         "(no step, loss and grad_norm)", path, (long long)lineno);
      break;
    }
    if (c->n == alloc) {
      alloc = alloc ? 2 * alloc : 1024;
      struct vt_checklog_line *l = realloc(c->lines, (size_t)alloc * sizeof *l);
      if (!l) {
        st = vt_fail_input(err, errlen, "out of memory reading %s", path);
        break;
      }
      c->lines = l;
    }
    struct vt_checklog_line *l = &c->lines[c->n];
    l->step = strtoll(step, NULL, 10), l->line = c->n++;
    snprintf(l->fig[0], sizeof l->fig[0], "%s", loss);
    snprintf(l->fig[1], sizeof l->fig[1], "%s", gnorm);
    if (!field(line, "eval_loss", l->ev[0], sizeof l->ev[0]) ||
        !field(line, "eval_top1", l->ev[1], sizeof l->ev[1]) ||
        !field(line, "eval_top5", l->ev[2], sizeof l->ev[2]))
      l->ev[0][0] = '\0';
    if (!field(line, "eval_ema_loss", l->ema[0], sizeof l->ema[0]) ||
        !field(line, "eval_ema_top1", l->ema[1], sizeof l->ema[1]) ||
        !field(line, "eval_ema_top5", l->ema[2], sizeof l->ema[2]))
      l->ema[0][0] = '\0';
  }
  free(line);
  fclose(f);
  if (st == VT_OK && c->n) qsort(c->lines, (size_t)c->n, sizeof *c->lines, by_step);
  if (st == VT_OK && c->n == 0)
    st = vt_fail_input(err, errlen, "--check-log %s has no steps", path);
  if (st != VT_OK) vt_checklog_free(c);
  return st;
}

// Relative difference of two printed figures; "null" equals only "null".
static double differ_by(const char *a, const char *b) {
  const int na = !strcmp(a, "null"), nb = !strcmp(b, "null");
  if (na || nb) return na && nb ? 0.0 : INFINITY;
  const double x = strtod(a, NULL), y = strtod(b, NULL);
  return x == y ? 0.0 : fabs(x - y) / (fabs(y) > 0 ? fabs(y) : 1.0);
}

void vt_checklog_step(vt_checklog *c, int64_t step, double loss, double gnorm, const double *ev,
                      const double *ema) {
  // The reference's last line of that step (a log continued after a resume may repeat steps):
  // the first entry past the step, minus one.
  int64_t lo = 0, hi = c->n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (c->lines[mid].step <= step) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0 || c->lines[lo - 1].step != step) {
    c->absent++;
    return;
  }
  const struct vt_checklog_line *r = &c->lines[lo - 1];
  // Figures 0-1: loss and grad norm; 2-4: the evaluation's, where both runs evaluated; 5-7:
  // the EMA's evaluation, where both evaluated it.
  char fig[2][32], evf[3][32] = {"", "", ""}, emaf[3][32] = {"", "", ""};
  const char *ref[8] = {r->fig[0], r->fig[1], r->ev[0], r->ev[1], r->ev[2],
                        r->ema[0], r->ema[1], r->ema[2]};
  const char *mine[8] = {fig[0], fig[1], evf[0], evf[1], evf[2], emaf[0], emaf[1], emaf[2]};
  vt_format_figure(fig[0], sizeof fig[0], loss);
  vt_format_figure(fig[1], sizeof fig[1], gnorm);
  const int with_ev = ev && r->ev[0][0], with_ema = ema && r->ema[0][0];
  if (with_ev) vt_format_eval(evf, ev[0], ev[1], ev[2]);
  if (with_ema) vt_format_eval(emaf, ema[0], ema[1], ema[2]);
  c->compared++;
  c->evals += with_ev;
  c->ema_evals += with_ema;
  int bad = 0;
  for (int j = 0; j < 8; j++) {
    if ((j >= 2 && j < 5 && !with_ev) || (j >= 5 && !with_ema)) continue;
    const double d = differ_by(mine[j], ref[j]);
    if (d > c->worst) c->worst = d;
    bad |= c->tol > 0 ? !(d <= c->tol) : strcmp(mine[j], ref[j]) != 0;
  }
  if (!bad) return;
  if (c->differ++ == 0) c->first_differ = step;
  if (c->differ > 5) return;
  char evals[256] = "", emas[256] = "";
  if (with_ev)
    snprintf(evals, sizeof evals, "; evaluation loss %s, top-1 %s, top-5 %s against %s, %s, %s",
             mine[2], mine[3], mine[4], ref[2], ref[3], ref[4]);
  if (with_ema)
    snprintf(emas, sizeof emas, "; EMA evaluation loss %s, top-1 %s, top-5 %s against %s, %s, %s",
             mine[5], mine[6], mine[7], ref[5], ref[6], ref[7]);
  vt_log_error("--check-log: step %lld: loss %s, grad norm %s; %s logged %s, %s%s%s%s",
               (long long)step, mine[0], mine[1], c->path, ref[0], ref[1], evals, emas,
               c->tol > 0 ? " (beyond --check-tol)" : "");
}

int vt_checklog_finish(vt_checklog *c) {
  const char *how = c->tol > 0 ? "within --check-tol" : "bit for bit as printed";
  if (c->compared == 0) {
    vt_log_error("--check-log: no step of this run is in %s (%lld steps there): nothing was "
                 "compared", c->path, (long long)c->n);
    return 1;
  }
  if (c->differ) {
    vt_log_error("--check-log: %lld of %lld steps differ from %s, the first at step %lld "
                 "(largest relative difference %.3g); %lld steps not in it", (long long)c->differ,
                 (long long)c->compared, c->path, (long long)c->first_differ, c->worst,
                 (long long)c->absent);
    return 1;
  }
  vt_log_info("--check-log: %lld steps equal %s's loss and grad norm %s, %lld of them with "
              "their evaluation and %lld with the EMA's (largest relative difference %.3g); "
              "%lld steps not in it",
              (long long)c->compared, c->path, how, (long long)c->evals,
              (long long)c->ema_evals, c->worst, (long long)c->absent);
  return 0;
}

void vt_checklog_free(vt_checklog *c) {
  free(c->lines);
  c->lines = NULL, c->n = 0;
}
