// train_flags.h: the flags of `vit3d train`, `vit3d eval` and `vit3d plan`, which share them:
// the defaults, --help, parsing, and the flags' text turned into vt_train_options, refusing
// bad values and combinations with the same messages on every rank.
// Must not depend on MPI or on the train loop and the plan (main.c dispatches to them).
#ifndef VT_TRAIN_FLAGS_H
#define VT_TRAIN_FLAGS_H

#include "train.h"

typedef enum { VT_RUN_TRAIN, VT_RUN_EVAL, VT_RUN_PLAN } vt_run_mode;

// Fills *o from argv[0..argc) (@FILEs already expanded) for mode. Returns -1 when the command
// goes on with *o, else the exit code it ends with: 0 after --help, 2 after a refusal. Every
// rank reaches the same verdict; only world rank 0 prints (help on stdout, refusals on stderr).
// VT_FAULT (fault.h) is read here too, after the flags' syntax and before their values: of a
// bad flag and a bad VT_FAULT, the one refused first stays the same.
int vt_train_flags_parse(int argc, char **argv, vt_run_mode mode, vt_comm *world,
                         vt_train_options *o);

// --init-from FILE, a file of vit3d export's: the words of its metadata for what the command
// line leaves out (without --model the model's flags, each one not given; for vit3d eval
// (eval) also the normalisation and the evaluation transform, where recorded) are put before
// argv's, which count over them. *argv is replaced (vt_cli_free frees either). Returns how many
// words it put.
int vt_train_flags_from_file(int *argc, char ***argv, int eval);

// A refusal of the command: world rank 0 prints "vit3d MODE: why" on stderr; returns 2, the
// exit code of a refusal.
int vt_train_flags_refuse(vt_comm *world, vt_run_mode mode, const char *why);
// Collective: every rank's verdict on its flags (rc: -1 to run, 0 done, 2 refused) agreed on;
// 2 on every rank when any refused, rank 0 printing the lowest refusing rank's message.
int vt_train_flags_agree(vt_comm *world, int rc);

#endif
