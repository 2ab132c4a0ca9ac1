// watchdog.c: see watchdog.h. One mutex guards the main thread's position; the watchdog thread
// copies it, decides, and talks to the other ranks' watchdog threads over the side channel.
#include "watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// WD_END: rank 0 ends the job; where ending one process does not end the others (the TCP world)
// each rank's thread ends its own.
enum { WD_RECORD = 1, WD_REQUEST = 2, WD_END = 3 };

// What one rank tells the others: fixed size, sent as bytes between ranks of one build.
typedef struct {
  int32_t kind;  // WD_RECORD, WD_REQUEST or WD_END
  int32_t world_rank, local_rank, tp, pp, dp;
  int32_t fired;    // this rank's own limit passed
  int32_t in_comm;  // inside a collective: axis, op, seq[axis] say which
  int32_t axis, op;
  int64_t step;
  int64_t seq[VT_AXIS_COUNT];  // sequence number of the latest operation per axis
  double phase_s, comm_s, limit_s;  // seconds in the phase and in the current operation
  char phase[40];
  char host[64];
  char device[24];
  char error[120];  // the device's (NCCL's) asynchronous error on this rank, or ""
} wd_record;

static const double k_tick_s = 0.2;     // how often the thread looks
static const double k_collect_s = 5.0;  // rank 0 waits this long for the positions
static const double k_grace_s = 15.0;   // a rank that fired ends the job itself after this

static struct {
  int on;
  double timeout_s;
  vt_comm *world;
  int side;  // the side channel is open (TCP, or MPI with thread support; more than one rank)
  pthread_t thread;
  atomic_int stop;
  pthread_mutex_t mu;
  // The main thread's position, under mu.
  const char *phase;
  int64_t step;
  double phase_t0, limit_s;
  int in_comm, axis, op;
  double comm_t0;
  int64_t seq[VT_AXIS_COUNT];
  wd_record me;  // the fixed fields: ranks, host, device
  void (*at_end)(void);  // vt_watchdog_at_end's
  int resumable;         // vt_watchdog_resumable's
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

void vt_watchdog_at_end(void (*fn)(void)) { g.at_end = fn; }
void vt_watchdog_resumable(int yes) { g.resumable = yes; }

// How long the end waits for ncclCommAbort (comm.h), which a hung kernel blocks for ever.
static const double k_device_abort_s = 10.0;

// Ends the job from the watchdog's thread, with the given exit code.
VT_NORETURN static void end_job_with(int code) {
  if (g.at_end) g.at_end();
  vt_comm_device_abort(k_device_abort_s);
  vt_comm_abort(code);
}

VT_NORETURN static void end_job(void) { end_job_with(VT_EXIT_WATCHDOG); }

void vt_watchdog_phase(const char *what, int64_t step, double limit_s) {
  if (!g.on) return;
  pthread_mutex_lock(&g.mu);
  g.phase = what, g.step = step, g.limit_s = limit_s, g.phase_t0 = vt_seconds();
  pthread_mutex_unlock(&g.mu);
}

void vt_watchdog_extend(double seconds) {
  if (!g.on) return;
  pthread_mutex_lock(&g.mu);
  if (g.limit_s > 0 && seconds > 0) g.limit_s += seconds;
  pthread_mutex_unlock(&g.mu);
}

const char *vt_watchdog_rename(const char *what) {
  if (!g.on) return what;
  pthread_mutex_lock(&g.mu);
  const char *was = g.phase;
  g.phase = what;
  pthread_mutex_unlock(&g.mu);
  return was;
}

void vt_watchdog_comm_enter(vt_axis axis, int op, int64_t seq) {
  if (!g.on) return;
  pthread_mutex_lock(&g.mu);
  g.in_comm = 1, g.axis = (int)axis, g.op = op, g.comm_t0 = vt_seconds();
  if ((int)axis >= 0 && axis < VT_AXIS_COUNT) g.seq[axis] = seq;
  pthread_mutex_unlock(&g.mu);
}

void vt_watchdog_comm_leave(void) {
  if (!g.on) return;
  pthread_mutex_lock(&g.mu);
  g.in_comm = 0;
  pthread_mutex_unlock(&g.mu);
}

static wd_record snapshot(double now) {
  pthread_mutex_lock(&g.mu);
  wd_record r = g.me;
  r.kind = WD_RECORD;
  r.in_comm = g.in_comm, r.axis = g.axis, r.op = g.op, r.step = g.step;
  memcpy(r.seq, g.seq, sizeof r.seq);
  r.phase_s = now - g.phase_t0;
  r.comm_s = g.in_comm ? now - g.comm_t0 : 0.0;
  r.limit_s = g.limit_s;
  snprintf(r.phase, sizeof r.phase, "%s", g.phase ? g.phase : "?");
  pthread_mutex_unlock(&g.mu);
  return r;
}

// The phase outlived its limit (a collective is always inside a phase, so one that outlives the
// limit makes its phase do so too).
static int overdue(const wd_record *r) { return r->limit_s > 0 && r->phase_s > r->limit_s; }

// "rank 5 (host h, local rank 1, tp 1 pp 0 dp 1, cpu): step 7 (step), waiting in all_reduce #35
// on axis dp for 20.3 s" or "...: step 7 (step) for 22.1 s, not in a collective (latest: ...)".
static void describe(const wd_record *r, char *out, size_t n) {
  int k = snprintf(out, n, "rank %d (host %s, local rank %d, tp %d pp %d dp %d, %s): step %lld (%s)",
                   r->world_rank, r->host, r->local_rank, r->tp, r->pp, r->dp, r->device,
                   (long long)r->step, r->phase);
  if (k < 0 || (size_t)k >= n) return;
  if (r->in_comm) {
    snprintf(out + k, n - (size_t)k, ", waiting in %s #%lld on axis %s for %.1f s",
             vt_comm_op_name((vt_comm_op)r->op), (long long)r->seq[r->axis],
             vt_axis_name((vt_axis)r->axis), r->comm_s);
    return;
  }
  int j = snprintf(out + k, n - (size_t)k, " for %.1f s, not in a collective; latest operations:",
                   r->phase_s);
  for (int a = 0; a < VT_AXIS_COUNT && j >= 0 && (size_t)(k + j) < n; a++)
    if (r->seq[a] > 0)
      j += snprintf(out + k + j, n - (size_t)(k + j), " %s #%lld", vt_axis_name((vt_axis)a),
                    (long long)r->seq[a]);
}

// Rank 0: one report from the positions gathered (answered[r] says who replied, gone[r] whose
// process ended without a goodbye: 1, or on an error of its own while the report was under way:
// 2), then the end.
VT_NORETURN static void report_and_end(const wd_record *recs, const int *answered,
                                       const int *gone, int n, const char *reason) {
  char line[512];
  fprintf(stderr, "\nwatchdog report (--timeout-s %g): %s. Position of every rank:\n", g.timeout_s,
          reason);
  int stalled = 0, silent = 0, failed = 0, ended = 0;
  for (int r = 0; r < n; r++) {
    if (!answered[r]) {
      if (gone[r] == 2)
        fprintf(stderr, "  rank %d: stopped on an error (its own message says which)\n", r);
      else if (gone[r])
        fprintf(stderr, "  rank %d: gone (its process ended without a goodbye: crashed, killed "
                        "or out of memory)\n", r);
      else
        fprintf(stderr, "  rank %d: no answer within %.0f s (hung hard, stopped or dead)\n", r,
                k_collect_s);
      silent += !gone[r], ended += gone[r];
      continue;
    }
    describe(&recs[r], line, sizeof line);
    fprintf(stderr, "  %s%s%s\n", line, recs[r].error[0] ? "; device error: " : "",
            recs[r].error);
    if (recs[r].error[0]) failed++;
    else if (!recs[r].in_comm && overdue(&recs[r])) stalled++;
  }
  char names[1024] = "";
  size_t k = 0;
  for (int r = 0; r < n && k < sizeof names; r++) {
    const int bad = !answered[r] || recs[r].error[0] || (!recs[r].in_comm && overdue(&recs[r]));
    if (!bad) continue;
    const char *sep = k ? ", " : "";
    const char *why = gone[r] == 2 ? "stopped" : gone[r] ? "gone" : "no answer";
    int w = answered[r]
                ? snprintf(names + k, sizeof names - k, "%srank %d (host %s, tp %d pp %d dp %d)",
                           sep, r, recs[r].host, recs[r].tp, recs[r].pp, recs[r].dp)
                : snprintf(names + k, sizeof names - k, "%srank %d (%s)", sep, r, why);
    if (w > 0) k += (size_t)w;
  }
  const char *again = g.resumable ? "resume with --resume auto" : "run it again (no --save: "
                                                                 "nothing was saved)";
  if (failed + ended > 0)
    fprintf(stderr, "watchdog verdict: failed: %s - a device error, or a process that ended, "
                    "while the other ranks wait for it. Ending the job (exit %d); %s once the "
                    "cause is mended.\n", names, VT_EXIT_WATCHDOG, again);
  else if (stalled + silent > 0)
    fprintf(stderr, "watchdog verdict: stalled: %s - outside any collective past the limit while "
                    "the other ranks wait for it in theirs. Ending the job (exit %d); %s.\n",
            names, VT_EXIT_WATCHDOG, again);
  else
    fprintf(stderr, "watchdog verdict: every rank is inside a collective: the ranks wait on each "
                    "other (collectives out of step) or the transport hangs; the operations "
                    "and sequence numbers above say where. Ending the job (exit %d).\n",
            VT_EXIT_WATCHDOG);
  fflush(stderr);
  static const wd_record end = {.kind = WD_END};
  for (int r = 1; g.side && r < n; r++) vt_comm_side_send(g.world, &end, (int)sizeof end, r);
  end_job();
}

static void *watch(void *arg) {
  (void)arg;
  const int rank = vt_comm_rank(g.world), n = vt_comm_size(g.world);
  wd_record *recs = rank == 0 ? calloc((size_t)n, sizeof *recs) : NULL;
  int *answered = rank == 0 ? calloc((size_t)n, sizeof *answered) : NULL;
  int *gone = rank == 0 ? calloc((size_t)n, sizeof *gone) : NULL;
  VT_CHECK(rank != 0 || (recs && answered && gone), "out of memory for the watchdog");
  static wd_record out[64];  // send buffers, reused round-robin (sends are never waited on)
  static const wd_record request = {.kind = WD_REQUEST};
  int nout = 0, fired = 0, reporting = 0;
  double fired_at = 0.0, report_t0 = 0.0;
  char reason[320] = "", line[512], err[256];
  while (!atomic_load(&g.stop)) {
    struct timespec ts = {0, (long)(k_tick_s * 1e9)};
    nanosleep(&ts, NULL);
    const double now = vt_seconds();
    wd_record me = snapshot(now);
    me.fired = fired;
    if (!fired && vt_comm_device_error(err, sizeof err)) {
      vt_log_error("watchdog: %s", err);
      snprintf(reason, sizeof reason, "rank %d: %s", rank, err);
      snprintf(g.me.error, sizeof g.me.error, "%.119s", err);  // (in every later snapshot)
      snprintf(me.error, sizeof me.error, "%.119s", err);
      fired = 1, fired_at = now;
    }
    wd_record msg;
    int src = -1, got;
    while (g.side && (got = vt_comm_side_poll(g.world, &msg, (int)sizeof msg, &src)) != 0) {
      if (got == -2 && rank == 0 && reporting && src > 0 && src < n) {
        gone[src] = 2;  // (a report under way: one more rank that ended, on its own error)
        continue;
      }
      if (got == -2) {  // that rank stopped on an error it reported: the job ends with its code
        int32_t code;
        memcpy(&code, &msg, sizeof code);
        vt_log_error("watchdog: world rank %d stopped on an error (its own message says which); "
                     "ending this rank with its exit code %d", src, (int)code);
        end_job_with(code > 0 ? code : VT_EXIT_WATCHDOG);  // (rank 0's abort tells the others)
      }
      if (got < 0 && rank != 0) {  // (the others' side channel is to rank 0 alone)
        vt_log_error("watchdog: world rank 0's process ended without a goodbye (crashed, "
                     "killed or out of memory); ending this rank (exit %d)", VT_EXIT_WATCHDOG);
        end_job();
      }
      if (got < 0) {  // rank 0 reports at once (a GPU rank may wait in a device op for ever)
        if (src > 0 && src < n) gone[src] = 1;
        vt_log_error("watchdog: world rank %d's process ended without a goodbye", src);
        if (!reporting && !reason[0])
          snprintf(reason, sizeof reason, "rank %d ended without a goodbye (crashed, killed or "
                   "out of memory)", src);
        if (!reporting) reporting = 1, report_t0 = now;
        continue;
      }
      if (msg.kind == WD_END && rank != 0) {
        vt_log_error("watchdog: rank 0 ended the job (its report says why); ending this rank "
                     "(exit %d)", VT_EXIT_WATCHDOG);
        end_job();
      }
      if (msg.kind == WD_REQUEST && rank != 0) {
        out[nout % 64] = me;
        vt_comm_side_send(g.world, &out[nout++ % 64], (int)sizeof me, 0);
      } else if (msg.kind == WD_RECORD && rank == 0 && src >= 0 && src < n) {
        recs[src] = msg, answered[src] = 1;
        if (!reporting && msg.fired && !reason[0] && msg.error[0])
          snprintf(reason, sizeof reason, "rank %d: %.120s", src, msg.error);
        else if (!reporting && msg.fired && !reason[0])
          snprintf(reason, sizeof reason, "the limit passed first on rank %d, at step %lld", src,
                   (long long)msg.step);
        if (!reporting) reporting = 1, report_t0 = now;
      }
    }
    if (!fired && overdue(&me)) {
      fired = 1, fired_at = now;
      describe(&me, line, sizeof line);
      vt_log_error("watchdog: past the limit of %.0f s: %s", me.limit_s, line);
      if (!reason[0])
        snprintf(reason, sizeof reason, "the limit passed first on rank %d, at step %lld", rank,
                 (long long)me.step);
    }
    me.fired = fired;
    if (fired && rank != 0 && g.side && fired_at == now) {
      out[nout % 64] = me;
      vt_comm_side_send(g.world, &out[nout++ % 64], (int)sizeof me, 0);
    }
    if (rank == 0 && fired && !reporting) reporting = 1, report_t0 = now;
    if (rank == 0 && reporting) {
      if (report_t0 == now)  // ask everyone once
        for (int r = 1; g.side && r < n; r++) vt_comm_side_send(g.world, &request, (int)sizeof request, r);
      recs[0] = me, answered[0] = 1;
      int all = 1;
      for (int r = 0; r < n; r++) all &= answered[r] || gone[r];
      if (all || now - report_t0 > k_collect_s) report_and_end(recs, answered, gone, n, reason);
    }
    if (rank != 0 && fired && now - fired_at > (g.side ? k_grace_s : 0.0)) {
      vt_log_error("watchdog: rank 0 did not end the job within %.0f s of this rank's report; "
                   "ending it from rank %d (exit %d)", k_grace_s, rank, VT_EXIT_WATCHDOG);
      end_job();
    }
  }
  free(recs);
  free(answered);
  free(gone);
  return NULL;
}

void vt_watchdog_start(vt_comm *world, double timeout_s, int tp_rank, int pp_rank, int dp_rank,
                       const char *device) {
  if (timeout_s <= 0 || g.on) return;
  g.world = world, g.timeout_s = timeout_s;
  g.side = vt_comm_size(world) > 1 && vt_comm_side_open(world);
  if (vt_comm_size(world) > 1 && !g.side && vt_comm_rank(world) == 0)
    vt_log_warn("watchdog: this MPI cannot take calls from a second thread; each rank reports "
                "only its own position when --timeout-s passes");
  wd_record *me = &g.me;
  me->world_rank = vt_comm_rank(world), me->local_rank = vt_comm_local_rank(world);
  me->tp = tp_rank, me->pp = pp_rank, me->dp = dp_rank;
  if (gethostname(me->host, sizeof me->host) != 0) snprintf(me->host, sizeof me->host, "?");
  me->host[sizeof me->host - 1] = '\0';
  snprintf(me->device, sizeof me->device, "%s", device);
  g.phase = "startup", g.phase_t0 = vt_seconds(), g.limit_s = 0.0;
  atomic_store(&g.stop, 0);
  g.on = 1;
  VT_CHECK(pthread_create(&g.thread, NULL, watch, NULL) == 0, "cannot start the watchdog thread");
}

void vt_watchdog_stop(void) {
  if (!g.on) return;
  atomic_store(&g.stop, 1);
  pthread_join(g.thread, NULL);
  g.on = 0;
}
