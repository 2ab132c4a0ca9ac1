// checklog.h: --check-log FILE: a run compares each step's loss and gradient norm (and its
// evaluation's loss, top-1 and top-5 where both runs evaluated at that step, and those of the
// weights' EMA where both evaluated it) with what an
// earlier run logged for the same step in its metrics.jsonl, so that a resume, another mesh or
// another machine can be shown to repeat a run: bit for bit as metrics.jsonl prints the figures
// (--check-tol 0, the default) or within a relative tolerance. Rank 0 only. Knows no MPI.
#ifndef VT_CHECKLOG_H
#define VT_CHECKLOG_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

typedef struct {
  char path[512];
  double tol;
  int64_t n;          // lines in the reference
  struct vt_checklog_line {
    int64_t step, line;
    char fig[2][32];  // loss and gradient norm as printed ("null" for non-finite)
    char ev[3][32];   // evaluation loss, top-1, top-5 as printed; ev[0][0] 0: none
    char ema[3][32];  // the same of the EMA's evaluation; ema[0][0] 0: none
  } *lines;           // sorted by step, then line
  int64_t compared, evals, ema_evals, differ, absent, first_differ;
  double worst;       // largest relative difference seen
} vt_checklog;

// Reads the reference. A file that cannot be read, a line that is not a metrics line, or one
// without steps is VT_ERR_INPUT with a message.
vt_status vt_checklog_open(vt_checklog *c, const char *path, double tol, char *err,
                           size_t errlen);
// Compares one step (the values the run logs; ev: its evaluation's loss, top-1 and top-5, or
// NULL when it did not evaluate; ema: the same of the EMA's evaluation, or NULL); the first few
// differences are logged.
void vt_checklog_step(vt_checklog *c, int64_t step, double loss, double gnorm, const double *ev,
                      const double *ema);
// Logs the verdict; 1 when a step differed or none could be compared, else 0.
int vt_checklog_finish(vt_checklog *c);
void vt_checklog_free(vt_checklog *c);

// A logged figure as metrics.jsonl prints it: "%.9g", or "null" when not finite.
void vt_format_figure(char *buf, size_t size, double v);
// An evaluation's loss, top-1 and top-5 as metrics.jsonl prints them ("%.9g", "%.6f", "%.6f";
// a figure that is not finite as null: NaN logits, or no image scored).
void vt_format_eval(char out[3][32], double loss, double top1, double top5);

#endif
