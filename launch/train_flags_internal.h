// train_flags_internal.h: what train_flags.c shares with the two files of its table,
// train_flags_model.c and train_flags_run.c; private to the three.
#ifndef VT_TRAIN_FLAGS_INTERNAL_H
#define VT_TRAIN_FLAGS_INTERNAL_H

#include <stddef.h>

#include "cli.h"
#include "train.h"

// The flags the table cannot write straight into vt_train_options: words and lists that
// train_flags.c turns into enums, switches and numbers once parsing is done, and lengths in
// epochs that count only when given after their length in steps. The sizes bound the values
// (the parser refuses longer ones, naming the length).
typedef struct {
  char model[32], device[8], precision[8], bad_image[8], remode[8], aa[128], aa_interp[12];
  char pool[8], act[16], pos_embed[16], weight_init[8], train_interp[12], eval_interp[12];
  char mean[64], std[64], opt_name[12], sched_on[8], sched[12], eval_crop_mode[8];
  float epochs, warmup_epochs, eval_epochs, save_epochs;
  int qkv_bias, class_token;
} vt_train_text;

// A row of the table: a vt_opt whose destination is a place in vt_train_options or in
// vt_train_text, so the table is constant data rather than code that takes their addresses.
typedef struct {
  const char *flag;
  vt_opt_type type;
  int in_text;           // 1: the destination is in vt_train_text; 0: in vt_train_options
  size_t offset, size;   // the destination's place and size there
  double min, max;
  const char *metavar, *help, *choices;  // as vt_opt's
} vt_train_flag;

#define IN_OPTIONS(field) \
  0, offsetof(vt_train_options, field), sizeof(((vt_train_options *)0)->field)
#define IN_TEXT(field) 1, offsetof(vt_train_text, field), sizeof(((vt_train_text *)0)->field)

// The table in --help's order, each part ending in a row whose flag is NULL: the model's and the
// data's flags (train_flags_model.c), then the rest (train_flags_run.c).
extern const vt_train_flag vt_train_flags_model[];
extern const vt_train_flag vt_train_flags_run[];

#endif
