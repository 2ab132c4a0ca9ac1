// train.h: the options and the loop of `vit3d train`.
// Must not depend on the CLI parser (main.c fills the options).
#ifndef VT_TRAIN_H
#define VT_TRAIN_H

#include <stdint.h>

#include "config.h"
#include "optim.h"
#include "vt_backend.h"

typedef struct {
  vt_vit_config model;
  char data[256];           // "synthetic" for now
  int micro_batch;          // images per forward/backward
  int global_batch;         // images per optimizer step (gradient accumulation)
  int64_t steps;
  vt_optim_config optim;
  float label_smoothing;
  uint64_t seed;
  vt_device device;
  int threads;
  char log_dir[512];        // metrics.jsonl goes here when set
  int log_interval;         // progress line every N steps
} vt_train_options;

// Cross-checks of options that single flags cannot see. VT_ERR_INPUT with a message.
vt_status vt_train_validate(const vt_train_options *o, char *err, size_t errlen);

// Runs the training loop. Returns 0 on success; errors on the way are fatal (VT_CHECK) or
// reported and returned as a non-zero exit code.
int vt_train_run(const vt_train_options *o);

#endif
