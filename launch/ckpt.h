// ckpt.h: saving and resuming training on a mesh. Saving gathers the parameters and AdamW state
// of every shard on world rank 0, which writes one checkpoint in the layout of
// dataio/checkpoint.h (full, unsharded tensors), so a checkpoint loads on any mesh: every rank
// reads the files and keeps its own shard (the parameter table maps each local element to its
// global index). The data position and the AdamW step travel in the manifest.
#ifndef VT_CKPT_H
#define VT_CKPT_H

#include "checkpoint.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
#include "train.h"

// Collective over world: saves the state after `step` steps into o->save_dir. The snapshot (the
// weights, AdamW's moments and the EMA gathered on world rank 0) is taken now; rank 0 writes and
// commits it in place, or with o->async_save and not `wait` on a background thread while
// training goes on (at most one: a save first finishes the one before, and vt_ckpt_wait does at
// the end). Returns rank 0's status on every rank for a checkpoint written in place, VT_OK for
// one started in the background; a failure, said on rank 0 with its step (in the background:
// when it is joined), leaves the previous checkpoint intact.
vt_status vt_ckpt_save(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                       vt_comm *world, const vt_mesh *mesh, int64_t step, int wait, char *err,
                       size_t errlen);
// Collective over world: waits for a checkpoint being written in the background; its status on
// every rank (VT_OK when there is none).
vt_status vt_ckpt_wait(vt_comm *world);

// Collective over world: finds the checkpoint to resume from (--resume auto: the newest complete
// one under --save, or none; --resume PATH: that one), checks it against the options, loads it.
// *start_step is the number of steps already done (0 for a fresh start). World rank 0 gets the
// checkpoint's manifest in *saved (may be NULL), for vt_ckpt_check_optim once the schedule's
// lengths are known; the other ranks get it zeroed.
vt_status vt_ckpt_resume(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                         vt_comm *world, const vt_mesh *mesh, int64_t *start_step,
                         vt_ckpt_manifest *saved, char *err, size_t errlen);

// The run's optimizer settings and learning-rate schedule (lengths resolved) against those the
// checkpoint in dir was saved with (a manifest without them passes): VT_ERR_INPUT with every
// difference named by its flag in err ("DIR was saved by a run with --lr 0.001, and this one
// has --lr 0.002").
vt_status vt_ckpt_check_optim(const vt_ckpt_manifest *saved, const vt_optim_config *now,
                              const char *dir, char *err, size_t errlen);

#endif
