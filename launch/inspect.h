// inspect.h: `vit3d inspect DIR`, what a checkpoint holds and the flags that resume it.
// Depends on dataio/ (the manifest); no MPI, no backend.
#ifndef VT_INSPECT_H
#define VT_INSPECT_H

// DIR: a checkpoint (step-N) or a --save folder (its newest complete checkpoint). Prints the
// verified files, the step and data position, the mesh it was saved on, the model, and the
// model and data flags a resume needs. Returns the process exit code (0, or 1 when DIR holds no
// usable checkpoint, with the reason on stderr).
int vt_inspect_run(const char *dir);

#endif
