// savehook.h: --save-hook CMD, a command world rank 0 runs after each checkpoint is committed
// (to copy it to S3 or another file system while training goes on). It runs as
// `/bin/sh -c CMD` with VT_CKPT_DIR (the committed checkpoint's folder, absolute), VT_CKPT_STEP
// and VT_SAVE_DIR (absolute) in its environment, the signal mask and the trainer's signal
// handlers reset, none of the trainer's descriptors open but stdin (/dev/null), stdout and
// stderr (with glibc 2.34 or later; its output appended to SAVE_DIR/save-hook.log under a line
// naming the step). At most one runs at a time: the next commit first waits for it (before the rotation of
// --keep-last, so no hook's checkpoint is removed under it), as does the end of the run.
// Each runs in a process group of its own; with a time limit (--save-hook-timeout) a hook that
// runs past it is stopped (SIGTERM to its group, SIGKILL 10 s later, or after the limit
// when shorter) and counted as failed, the
// checkpoint itself intact. Rank 0 only; no MPI here.
#ifndef VT_SAVEHOOK_H
#define VT_SAVEHOOK_H

#include <stdint.h>

// Starts cmd for the checkpoint of `step` in ckpt_dir (under save_dir), to be stopped after
// limit_s seconds (0: no limit). The previous hook must have ended (vt_save_hook_wait). A hook
// that cannot be started is logged and counted as failed.
void vt_save_hook_start(const char *cmd, const char *save_dir, const char *ckpt_dir,
                        int64_t step, double limit_s);

// Waits for the running hook, if any, logging when it waits and how it ended: before the
// commit of next_step, or with 0 at the end of the run.
void vt_save_hook_wait(int64_t next_step);

// Logs the running hook's end if it has ended, stops it if past its limit; never blocks.
void vt_save_hook_poll(void);

// Sends SIGTERM to the running hook's process group, if any, so it does not outlive a trainer
// that ends without waiting for it (the watchdog's end of the job, an exit on an error). Safe
// from another thread and from a signal handler.
void vt_save_hook_kill(void);

// After the run's last vt_save_hook_wait: logs how many hooks ran and failed (nothing when none
// ran). Returns whether the last one failed.
int vt_save_hook_summary(void);

#endif
