// fault.h: the test-only fault switch (off unless VT_FAULT is set). It makes one rank misbehave
// at chosen steps so that tests can prove the watchdog, the non-finite step and spike guards,
// the straggler report and crash-safe saves:
//   VT_FAULT=KIND@RANK:FIRST[-LAST][,...]   e.g. stall@5:7, nan@3:7-11, spike@1:12,nan@1:13
// KIND: stall (sleep forever at the start of the step), crash (abort() there), nan (NaN in the
// rank's gradients and loss share), slow (sleep 0.3 s per step), kill-in-save (SIGKILL between
// writing a checkpoint's files and committing it; a rank-0 fault), save-io (the rank's part of
// that step's checkpoint fails to write, as on a failing disk), spike (like nan, but 1e4 in the
// gradients and the loss share times 100: finite spikes), usr1 (SIGUSR1 to itself), error (a
// fatal error, as a failed VT_CHECK: its message, exit 1). RANK is a world rank; steps are
// 1-based, as the progress line prints them. A malformed value stops the run before it starts.
// Must not depend on MPI or the model.
#ifndef VT_FAULT_H
#define VT_FAULT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  VT_FAULT_NONE = 0,
  VT_FAULT_STALL,
  VT_FAULT_CRASH,
  VT_FAULT_NAN,
  VT_FAULT_SLOW,
  VT_FAULT_KILL_IN_SAVE,
  VT_FAULT_SAVE_IO,
  VT_FAULT_SPIKE,
  VT_FAULT_USR1,  // the rank sends itself SIGUSR1 (a preemption notice) at the step's start
  VT_FAULT_ERROR  // a fatal error (VT_CHECK's path: message, then the job ends with exit 1)
} vt_fault_kind;

// Reads VT_FAULT for this world rank; returns 0, or -1 with a message in err when it is malformed.
int vt_fault_init(int world_rank, char *err, size_t errlen);

// Whether this rank has fault `kind` at 1-based step `step`.
int vt_fault_at(vt_fault_kind kind, int64_t step);

// Acts out stall, crash, slow and usr1 at the start of step `step` (a warning names the fault
// first).
void vt_fault_step_start(int64_t step);

#endif
