// savehook.h: --save-hook CMD, a command world rank 0 runs after each checkpoint is committed
// (to copy it to S3 or another file system while training goes on). It runs as
// `/bin/sh -c CMD` with VT_CKPT_DIR (the committed checkpoint's folder, absolute), VT_CKPT_STEP
// and VT_SAVE_DIR (absolute) in its environment, the signal mask and the trainer's signal
// handlers reset, none of the trainer's descriptors open but stdin (/dev/null), stdout and
// stderr (with glibc 2.34 or later; its output appended to SAVE_DIR/save-hook.log under a line
// naming the step). At most one runs at a time: the next commit first waits for it (before the rotation of
// --keep-last, so no hook's checkpoint is removed under it), as does the end of the run.
// Rank 0 only; no MPI here.
#ifndef VT_SAVEHOOK_H
#define VT_SAVEHOOK_H

#include <stdint.h>

// Starts cmd for the checkpoint of `step` in ckpt_dir (under save_dir). The previous hook must
// have ended (vt_save_hook_wait). A hook that cannot be started is logged and counted as failed.
void vt_save_hook_start(const char *cmd, const char *save_dir, const char *ckpt_dir,
                        int64_t step);

// Waits for the running hook, if any, logging when it waits and how it ended: before the
// commit of next_step, or with 0 at the end of the run.
void vt_save_hook_wait(int64_t next_step);

// Logs the running hook's end if it has ended; never blocks.
void vt_save_hook_poll(void);

// After the run's last vt_save_hook_wait: logs how many hooks ran and failed (nothing when none
// ran). Returns whether the last one failed.
int vt_save_hook_summary(void);

#endif
