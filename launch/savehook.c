// savehook.c: the command run after each committed checkpoint (savehook.h).
#define _GNU_SOURCE  // realpath, posix_spawn_file_actions_addclosefrom_np
#include "savehook.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vt_error.h"

extern char **environ;

// The running hook's process group for vt_save_hook_kill (another thread's read); 0: none.
static atomic_int g_pgid;

static struct {
  pid_t pid;        // the running hook; 0: none
  int64_t step;     // its checkpoint's step
  double t0;        // vt_seconds() when it started
  double limit;     // seconds it may run; 0: no limit
  double t_term;    // when it was sent SIGTERM for running past the limit; 0: not yet
  int killed;       // SIGKILL sent too
  char log[PATH_MAX + 32];
  int runs, failed, last_failed;
  int at_end;       // the run waits for it before exiting
} g_hook;

// Logs how the hook ended (status from waitpid; ECHILD when someone else reaped it) and
// clears it.
static void ended(int status, int reaped) {
  const double s = vt_seconds() - g_hook.t0;
  const long long step = (long long)g_hook.step;
  const char *after = g_hook.at_end ? "" : "; training goes on, the checkpoint itself is intact";
  int ok = 0;
  if (g_hook.t_term > 0)
    vt_log_error("save hook of step %lld ran past --save-hook-timeout %g s: stopped (%s to its "
                 "process group; its output is in %s)%s", step, g_hook.limit,
                 g_hook.killed ? "SIGTERM, then SIGKILL" : "SIGTERM", g_hook.log, after);
  else if (!reaped)
    vt_log_warn("save hook of step %lld: its exit status was lost (reaped elsewhere) after "
                "%.1f s; see %s", step, s, g_hook.log);
  else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    ok = 1, vt_log_info("save hook of step %lld finished in %.1f s", step, s);
  else if (WIFEXITED(status))
    vt_log_error("save hook of step %lld FAILED with exit status %d after %.1f s (its output "
                 "is in %s)%s", step, WEXITSTATUS(status), s, g_hook.log, after);
  else
    vt_log_error("save hook of step %lld was killed by signal %d (%s) after %.1f s (its output "
                 "is in %s)%s", step, WTERMSIG(status), strsignal(WTERMSIG(status)), s,
                 g_hook.log, after);
  g_hook.failed += !ok;
  g_hook.last_failed = !ok;
  g_hook.pid = 0;
  atomic_store(&g_pgid, 0);
}

// Signals the hook's process group once it runs past its limit: SIGTERM, then SIGKILL after a
// grace of 10 s (or of the limit, when shorter).
static void enforce_limit(void) {
  const double now = vt_seconds();
  if (g_hook.limit <= 0 || now - g_hook.t0 <= g_hook.limit || g_hook.killed) return;
  if (g_hook.t_term == 0) {
    g_hook.t_term = now;
    kill(-g_hook.pid, SIGTERM);
  } else if (now - g_hook.t_term > (g_hook.limit < 10.0 ? g_hook.limit : 10.0)) {
    g_hook.killed = 1;
    kill(-g_hook.pid, SIGKILL);
  }
}

// Reaps the hook if it has ended (or waits until it does, stopping it at its limit); whether
// it has.
static int reap(int block) {
  int status = 0;
  pid_t r;
  for (;;) {
    r = waitpid(g_hook.pid, &status, block && g_hook.limit <= 0 ? 0 : WNOHANG);
    if (r < 0 && errno == EINTR) continue;
    if (r != 0 || !block) break;
    enforce_limit();
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  }
  if (r == 0) {
    enforce_limit();
    return 0;
  }
  ended(status, r == g_hook.pid);
  return 1;
}

void vt_save_hook_poll(void) {
  if (g_hook.pid > 0) reap(0);
}

void vt_save_hook_wait(int64_t next_step) {
  if (g_hook.pid <= 0) return;
  g_hook.at_end = next_step == 0;
  if (!reap(0)) {
    const double t = vt_seconds();
    if (g_hook.at_end) {
      vt_log_info("waiting for the save hook of step %lld (running for %.1f s) before exiting",
                  (long long)g_hook.step, t - g_hook.t0);
      reap(1);
    } else {
      vt_log_warn("waiting for the save hook of step %lld (running for %.1f s) before "
                  "committing step %lld: one hook runs at a time", (long long)g_hook.step,
                  t - g_hook.t0, (long long)next_step);
      reap(1);
      vt_log_warn("waited %.1f s for the save hook: a hook that takes longer than "
                  "--save-interval's steps holds training up", vt_seconds() - t);
    }
  }
}

void vt_save_hook_start(const char *cmd, const char *save_dir, const char *ckpt_dir,
                        int64_t step, double limit_s) {
  VT_CHECK(g_hook.pid <= 0, "a save hook is still running");
  g_hook.runs++, g_hook.step = step, g_hook.t0 = vt_seconds();
  g_hook.limit = limit_s, g_hook.t_term = 0, g_hook.killed = 0;
  char abs_save[PATH_MAX], abs_ckpt[PATH_MAX];
  if (!realpath(save_dir, abs_save)) snprintf(abs_save, sizeof abs_save, "%s", save_dir);
  if (!realpath(ckpt_dir, abs_ckpt)) snprintf(abs_ckpt, sizeof abs_ckpt, "%s", ckpt_dir);
  snprintf(g_hook.log, sizeof g_hook.log, "%s/save-hook.log", abs_save);

  // The log gets a line naming the step, then the hook's output.
  FILE *f = fopen(g_hook.log, "a");
  if (f) {
    char when[64];
    const time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
    fprintf(f, "=== %s step %lld: %s\n", when, (long long)step, cmd);
    if (fclose(f) != 0) f = NULL;
  }
  if (!f) {
    vt_log_error("save hook of step %lld not started: cannot write %s: %s", (long long)step,
                 g_hook.log, strerror(errno));
    g_hook.failed++, g_hook.last_failed = 1;
    return;
  }

  // The environment: the trainer's, with the three variables set (replaced when inherited).
  char dir_var[PATH_MAX + 16], step_var[48], save_var[PATH_MAX + 16];
  snprintf(dir_var, sizeof dir_var, "VT_CKPT_DIR=%s", abs_ckpt);
  snprintf(step_var, sizeof step_var, "VT_CKPT_STEP=%lld", (long long)step);
  snprintf(save_var, sizeof save_var, "VT_SAVE_DIR=%s", abs_save);
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 4, sizeof *env);
  VT_CHECK(env != NULL, "out of host memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "VT_CKPT_DIR=", 12) && strncmp(environ[i], "VT_CKPT_STEP=", 13) &&
        strncmp(environ[i], "VT_SAVE_DIR=", 12))
      env[k++] = environ[i];
  env[k++] = dir_var, env[k++] = step_var, env[k++] = save_var, env[k] = NULL;

  // stdin from /dev/null, stdout and stderr appended to the log; the signals the trainer
  // catches or ignores back to their defaults, none blocked.
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, g_hook.log, O_WRONLY | O_APPEND | O_CREAT, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  // Nothing else of the trainer's (MPI's sockets, the device, the metrics file) stays open in
  // the hook.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
  posix_spawnattr_init(&at);
  sigset_t none, reset;
  sigemptyset(&none);
  sigemptyset(&reset);
  const int sigs[] = {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&reset, sigs[i]);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &reset);
  // A process group of its own: a time limit stops the shell and what it started (the copy)
  // together, and a Ctrl-C at the terminal leaves it to finish the copy the trainer waits for.
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                    POSIX_SPAWN_SETPGROUP);
  char *argv[] = {"sh", "-c", (char *)cmd, NULL};
  const int e = posix_spawn(&g_hook.pid, "/bin/sh", &fa, &at, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  free(env);
  if (e != 0) {
    g_hook.pid = 0;
    vt_log_error("save hook of step %lld not started: /bin/sh: %s", (long long)step,
                 strerror(e));
    g_hook.failed++, g_hook.last_failed = 1;
    return;
  }
  atomic_store(&g_pgid, (int)g_hook.pid);
  vt_log_info("save hook of step %lld started (pid %d, output in %s)", (long long)step,
              (int)g_hook.pid, g_hook.log);
}

void vt_save_hook_kill(void) {
  const int pgid = atomic_load(&g_pgid);
  if (pgid > 0) kill(-pgid, SIGTERM);
}

int vt_save_hook_summary(void) {
  if (g_hook.runs == 0) return 0;
  if (g_hook.failed)
    vt_log_error("save hooks: %d of %d FAILED%s (see %s)", g_hook.failed, g_hook.runs,
                 g_hook.last_failed ? ", the last checkpoint's among them" : "", g_hook.log);
  else
    vt_log_info("save hooks: all %d finished", g_hook.runs);
  return g_hook.last_failed;
}
