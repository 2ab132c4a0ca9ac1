// watchdog.h: turns a hang into a prompt, precise report (design.md "parallel/ ... watchdog").
// The main thread says where it is: a phase (startup, a training step, an evaluation, a
// checkpoint save) with a time limit, and - through comm.c - every collective it enters and
// leaves, with that axis's sequence number. A thread on every rank looks every 0.2 s. When a
// collective or a phase outlives its limit on some rank, that rank prints its position and tells
// world rank 0, which asks every rank for its position over a side channel (a duplicate world
// communicator served by the watchdog threads, so a main thread stuck in a collective does not
// matter), prints one report - each rank's step, phase, collective, axis and sequence number,
// the ranks that did not answer, and which ranks stalled - and ends the job with
// VT_EXIT_WATCHDOG. If rank 0 itself is gone, the first rank whose limit passed ends the job
// after a grace period. On NCCL comms the thread also polls for asynchronous errors and aborts
// the device comms before ending the job (waiting at most 10 s for the abort: comm.h).
// Must not depend on the model.
#ifndef VT_WATCHDOG_H
#define VT_WATCHDOG_H

#include <stdint.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// Exit code of a job that the watchdog ended (documented in docs/operations.md "Exit codes").
#define VT_EXIT_WATCHDOG 3

// Starts this rank's watchdog (nothing when timeout_s <= 0). Collective over world (it opens the
// side channel). device names what this rank computes on, for the report ("cpu", "cuda:1").
void vt_watchdog_start(vt_comm *world, double timeout_s, int tp_rank, int pp_rank, int dp_rank,
                       const char *device);
void vt_watchdog_stop(void);  // joins the thread; call before the comms are freed

// fn runs on the watchdog's thread just before it ends the job (the save hook's stop: no locks,
// async-signal-safe work only). Set it before vt_watchdog_start.
void vt_watchdog_at_end(void (*fn)(void));
// yes: the run saves checkpoints (--save), so the verdict advises --resume auto; else it
// advises running again. Set it before vt_watchdog_start.
void vt_watchdog_resumable(int yes);

// The main thread enters a phase (a static string: "step", "evaluation", "checkpoint save");
// step is the 1-based step it belongs to; its clock starts now and may run limit_s seconds
// (0: no limit).
void vt_watchdog_phase(const char *what, int64_t step, double limit_s);

// Lengthens the limit of the phase the main thread is in by seconds (a phase without a limit
// keeps none): the start-up's, by the time to read what a checkpoint recovery reads.
void vt_watchdog_extend(double seconds);

// Renames the phase the main thread is in (its clock and limit go on); returns the old name,
// to be put back.
const char *vt_watchdog_rename(const char *what);

// comm.c, around every operation of the main thread: op is a vt_comm_op, seq the axis's
// sequence number of this operation (1, 2, ...).
void vt_watchdog_comm_enter(vt_axis axis, int op, int64_t seq);
void vt_watchdog_comm_leave(void);

#ifdef __cplusplus
}
#endif

#endif
