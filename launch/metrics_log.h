// metrics_log.h: a run's metrics.jsonl (rank 0), one JSON object per line, whole lines only.
// A line that cannot be written (a full disk) is taken back to the last whole line and left
// out, said once; writing goes on when the disk has room again, saying which steps are missing.
// A resumed run keeps the lines up to its checkpoint's step and drops the later ones (the steps
// it goes on to log again, or the branch it leaves), as TensorBoard does with its events.
#ifndef VT_METRICS_LOG_H
#define VT_METRICS_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int open;          // fd is valid
  int fd;
  char path[600];
  int64_t gap_from;  // the first step left out since the last whole line written; 0: none
} vt_metrics_log;

// DIR/metrics.jsonl (DIR created): a fresh run (resumed_at 0) starts it empty (and removes the
// previous run's trace.json and comm.rank<R>.json from DIR), a resumed one
// keeps the lines of steps up to resumed_at (and any line without a step), dropping later steps'
// lines and a line the previous run was cut in the middle of. 0 with the error logged.
int vt_metrics_open(vt_metrics_log *log, const char *dir, int64_t resumed_at);
// Appends one whole line (text ends with its '\n') of the given step, or leaves it out (above).
void vt_metrics_write(vt_metrics_log *log, int64_t step, const char *text, size_t len);
void vt_metrics_close(vt_metrics_log *log);

#endif
