// inspect.h: `vit3d inspect DIR`, what a checkpoint holds and the flags that resume it.
// Depends on dataio/ (the manifest); no MPI, no backend.
#ifndef VT_INSPECT_H
#define VT_INSPECT_H

#include <stddef.h>

#include "checkpoint.h"

// DIR: a checkpoint (step-N) or a --save folder (its newest complete checkpoint). Prints the
// verified files, the step and data position, the mesh it was saved on, the model, and the
// model and data flags a resume needs. A safetensors file: its tensors, its metadata and, where
// vit3d export wrote it, the command that evaluates it. Returns the process exit code (0, or 2
// when the path holds no usable checkpoint or file, with the reason on stderr).
int vt_inspect_run(const char *path);

// The model flags of a checkpoint's manifest, every one spelt out (vit3d export's metadata
// records them too).
void vt_inspect_model_flags(const vt_ckpt_manifest *m, char *out, size_t size);

#endif
