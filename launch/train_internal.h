// train_internal.h: what train.c's run and train_check.c's checks share; private to the two.
#ifndef VT_TRAIN_INTERNAL_H
#define VT_TRAIN_INTERNAL_H

#include "checkpoint.h"
#include "comm.h"
#include "optim.h"
#include "train.h"

// Collective: whether every rank can make files in the folders of the output files written at
// the run's end (every rank writes its part of --final-weights), checked at its start, where a
// missing or read-only folder costs nothing; the lowest rank that cannot says why.
int vt_train_outputs_writable(const vt_train_options *o, vt_comm *world);
// The lengths given in epochs made steps of this training set's n images (every rank holds the
// index, so every rank reaches the same verdict), into the options and the optimizer's
// schedule; rank 0 logs them. 0 (logged) when they make no valid run.
int vt_train_epochs_to_steps(vt_train_options *o, vt_optimizer *opt, int64_t n, int world_rank);
// Rank 0 of a resumed run: whether the checkpoint of start_step (its manifest saved) was made
// with this run's learning-rate schedule and optimizer settings (cfg), or --resume-override 1
// lets this run's replace them (warned); 0 (logged, with what to do) otherwise.
int vt_train_resume_ok(const vt_train_options *o, const vt_ckpt_manifest *saved,
                       const vt_optim_config *cfg, int64_t start_step);

#endif
