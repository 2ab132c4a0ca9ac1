// health.h: what keeps a long run operable: the preemption signals, and the per-rank report of
// step times (stragglers) and memory that rank 0 prints every --straggler-interval steps.
// Must not depend on the model.
#ifndef VT_HEALTH_H
#define VT_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "mesh.h"

// SIGUSR1 and SIGTERM only note the signal (restarting interrupted system calls); the training
// loop agrees on it over all ranks at the next step boundary, saves and exits. Call first thing
// in main: before it, either signal would kill the process.
// SIGINT (Ctrl-C) likewise, once: the run stops at the next step boundary with a checkpoint
// (where --save is given) and exit 130; the handler gives SIGINT back its default, so a second
// one stops the process at once. Not where SIGINT was ignored at start (a background job).
void vt_health_catch_preemption(void);
int vt_health_preempt_signal(void);  // SIGUSR1 or SIGTERM received so far, or 0
int vt_health_interrupted(void);     // 1 once SIGINT was received
// While the ranks meet (the TCP world's connections, before anything ran): a preemption signal
// or SIGINT ends the process at once, with the code the trainer gives for it (75, 130), where
// the meeting could otherwise wait out VT_CONNECT_TIMEOUT.
void vt_health_exit_if_signalled(void);

// This process's resident host memory in MiB (/proc/self/statm), 0 where unknown.
double vt_health_rss_mib(void);

// Collective over world. Every rank gives its busy time per step (step time minus time waiting
// in comm operations, averaged over steps first..last) and its device memory in MiB; rank 0
// gets a summary line (min / median / max of the busy times, every rank slower than 1.2 x the
// other ranks' median by name, the memory range; cut short where many are slow: 1024 bytes
// hold about 20 of them) and writes "rank_busy_ms": [...], "rank_host_mib": [...],
// "rank_device_mib": [...] (one value per world rank, no braces) to json; 64 + 48 x world size
// bytes always suffice. Other ranks get "".
void vt_health_rank_report(vt_comm *world, const vt_mesh *mesh, int64_t first, int64_t last,
                           double busy_ms, double device_mib, char *json, size_t jsonlen,
                           char *summary, size_t summarylen);

#endif
