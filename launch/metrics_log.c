// metrics_log.c: a run's metrics.jsonl, whole lines only (metrics_log.h).
#include "metrics_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "vt_error.h"

// A previous log's line is kept by a resume at resumed_at when it is whole (ends with '\n') and
// its step (when it has one) is not past resumed_at.
static int kept_line(const char *line, ssize_t len, int64_t resumed_at) {
  long long step;
  if (len <= 0 || line[len - 1] != '\n') return 0;
  return sscanf(line, "{\"step\": %lld", &step) != 1 || step <= resumed_at;
}

// Rewrites path with the lines a resume at resumed_at keeps (through a temporary file renamed
// over it, so that a failure leaves the old log whole); says what it dropped.
static void keep_until(const char *path, int64_t resumed_at) {
  FILE *f = fopen(path, "r");
  if (!f) return;  // none yet (another error shows when it is opened for writing)
  char *line = NULL, tmp[640];
  size_t cap = 0;
  ssize_t len;
  long long dropped = 0, later = 0;
  while ((len = getline(&line, &cap, f)) >= 0)
    if (!kept_line(line, len, resumed_at)) dropped++, later += len > 0 && line[len - 1] == '\n';
  if (dropped == 0) {
    vt_log_info("%s: resumed at step %lld, appending", path, (long long)resumed_at);
  } else {
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    int ok = out != NULL;
    rewind(f);
    while (ok && (len = getline(&line, &cap, f)) >= 0)
      if (kept_line(line, len, resumed_at)) ok = fwrite(line, 1, (size_t)len, out) == (size_t)len;
    if (out) ok = (fclose(out) == 0) && ok;
    if (ok) ok = rename(tmp, path) == 0;
    if (ok) {
      vt_log_info("%s: resumed at step %lld: %lld line%s of later steps dropped (this run "
                  "logs its own from step %lld; TensorBoard drops them too)%s", path,
                  (long long)resumed_at, later, later == 1 ? "" : "s", (long long)resumed_at + 1,
                  dropped > later ? ", and a line the previous run was cut in" : "");
    } else {
      vt_log_warn("%s: cannot drop the lines past step %lld (%s): they stay, before this run's "
                  "own; the last line of a step is the one that counts", path,
                  (long long)resumed_at, strerror(errno));
      unlink(tmp);
    }
  }
  free(line);
  fclose(f);
}

// A new run's log folder: the previous run's timeline and traffic files (trace.json,
// comm.rank<R>.json) removed, so that none is taken for this run's.
static void remove_previous(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  int removed = 0;
  char path[1200];
  while ((e = readdir(d))) {
    int rank, end = 0;
    const int ours = !strcmp(e->d_name, "trace.json") ||
                     (sscanf(e->d_name, "comm.rank%d.json%n", &rank, &end) == 1 &&
                      e->d_name[end] == '\0' && end > 0);
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (ours && unlink(path) == 0) removed++;
  }
  closedir(d);
  if (removed > 0)
    vt_log_info("--log-dir %s: a new run; the previous run's trace.json and comm.rank*.json "
                "removed (%d files)", dir, removed);
}

int vt_metrics_open(vt_metrics_log *log, const char *dir, int64_t resumed_at) {
  memset(log, 0, sizeof *log);
  if (vt_mkdir_p(dir) != 0) {
    vt_log_error("cannot create --log-dir %s: %s", dir, strerror(errno));
    return 0;
  }
  snprintf(log->path, sizeof log->path, "%s/metrics.jsonl", dir);
  if (resumed_at > 0) keep_until(log->path, resumed_at);
  else remove_previous(dir);
  // (a resumed log whose cut line could not be dropped starts on a line of its own)
  log->fd = open(log->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC |
                 (resumed_at > 0 ? 0 : O_TRUNC), 0644);
  if (log->fd < 0) {
    vt_log_error("cannot write %s: %s", log->path, strerror(errno));
    return 0;
  }
  char last = '\n';
  const off_t size = lseek(log->fd, 0, SEEK_END);
  if (resumed_at > 0 && size > 0 && pread(log->fd, &last, 1, size - 1) == 1 && last != '\n' &&
      write(log->fd, "\n", 1) != 1)
    vt_log_warn("%s: cannot end the previous run's cut line: %s", log->path, strerror(errno));
  log->open = 1;
  return 1;
}

void vt_metrics_write(vt_metrics_log *log, int64_t step, const char *text, size_t len) {
  if (!log->open) return;
  const off_t end = lseek(log->fd, 0, SEEK_END);
  size_t done = 0;
  int e = 0;
  while (done < len) {
    const ssize_t k = write(log->fd, text + done, len - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      e = k < 0 ? errno : EIO;
      break;
    }
    done += (size_t)k;
  }
  if (done == len) {
    if (log->gap_from > 0)
      vt_log_info("%s: written again from step %lld (steps %lld-%lld are not in it)", log->path,
                  (long long)step, (long long)log->gap_from, (long long)step - 1);
    log->gap_from = 0;
    return;
  }
  if (done > 0 && end >= 0 && ftruncate(log->fd, end) != 0)  // (the part written taken back)
    vt_log_warn("%s: cannot take back a part line: %s", log->path, strerror(errno));
  if (log->gap_from == 0)
    vt_log_warn("%s: cannot write step %lld's line (%s): it is left out, and so are the later "
                "steps' until a line can be written (training and checkpoints go on)", log->path,
                (long long)step, strerror(e));
  if (log->gap_from == 0) log->gap_from = step;
}

void vt_metrics_close(vt_metrics_log *log) {
  if (log->open) close(log->fd);
  log->open = 0;
}
