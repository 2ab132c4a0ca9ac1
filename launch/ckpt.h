// ckpt.h: saving and resuming training on a mesh. A checkpoint is written in the layout of
// dataio/checkpoint.h (full, unsharded tensors) by every rank at once, each its slice of its
// shard (vit/export.h), and committed by world rank 0 from the ranks' checksums; nobody holds
// the whole model. So a checkpoint loads on any mesh: every rank reads the tensors it holds
// (the parameter table maps each local element to its global index). The data position and the
// optimizer's step travel in the manifest.
#ifndef VT_CKPT_H
#define VT_CKPT_H

#include "checkpoint.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
#include "train.h"

// Collective over world: saves the state after `step` steps into o->save_dir (with
// bad_images, the training images found bad so far, for world rank 0's manifest). World rank 0
// creates the files (their space reserved: a full disk fails now); each rank copies its slice
// of the weights, the moments and the EMA to the host and writes it, in place or, with
// o->async_save and not `wait`, on a thread while training goes on. At most one save is in
// flight: a save first finishes the one before; so do vt_ckpt_wait and, once every rank's part
// is written, the step loop (vt_ckpt_writing). Returns the agreed status (the first failing
// rank's message in err) for a checkpoint written in place, VT_OK for one started in the
// background; a failure (in the background: logged by rank 0 with its step when it is
// finished) leaves the previous checkpoint intact.
vt_status vt_ckpt_save(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                       vt_comm *world, const vt_mesh *mesh, int64_t step, int64_t bad_images,
                       int wait, char *err, size_t errlen);
// Collective over world: finishes a checkpoint being written in the background (waits for
// every rank's part, commits it); its status on every rank (VT_OK when there is none).
vt_status vt_ckpt_wait(vt_comm *world);
// Whether a save is in flight (the same on every rank), and whether this rank is still writing
// its part of it: the step loop adds the latter up over the world and finishes the save once
// no rank is.
int vt_ckpt_pending(void);
int vt_ckpt_writing(void);

// Collective over world, at start-up with --save: rank 0 creates save_dir and writes a file
// there that every rank must read back and be able to open for writing, since every rank writes
// its part of each checkpoint. VT_ERR_INPUT naming the first rank (and host) that cannot, and
// what --save needs; VT_ERR_IO when rank 0 cannot write there.
vt_status vt_ckpt_check_shared(const char *save_dir, vt_comm *world, char *err, size_t errlen);
// A training run's claim on --save, collective (every rank gets rank 0's verdict): refused where
// another run holds it (rank 0 keeps an flock on SAVE/.vit3d-lock until it exits; a file system
// without locks is warned about), and where it holds checkpoints and this run does not resume
// (its saves would replace and rotate them away).
vt_status vt_ckpt_claim(const vt_train_options *o, vt_comm *world, char *err, size_t errlen);

// A checkpoint's files on disk (bytes, headers included) for the run's model, optimizer and
// EMA: files[0] the weights, [1] the optimizer's state (the leading frozen_layers layers left
// out), [2] the EMA (0 without --model-ema); returns their sum.
int64_t vt_ckpt_nbytes(const vt_train_options *o, int frozen_layers, int64_t files[3]);
// World rank 0 at start-up with --save: logs what a checkpoint takes on disk, how many this run
// (steps start_step + 1 .. end_step) saves and keeps at once, and the free space of the save
// folder's file system; warns when the checkpoints still to come do not fit in it.
void vt_ckpt_disk_plan(const vt_train_options *o, int frozen_layers, int64_t start_step,
                       int64_t end_step);

// Collective over world: finds the checkpoint to resume from (--resume auto: the newest complete
// one under --save, or none; --resume PATH: that one, or where PATH is a --save folder its newest
// complete one), checks it against the options, loads it:
// every rank reads its part, and the ranks' CRC-32 shares of what they read verify the files
// (a damaged one is skipped for an older one, or refused where PATH is a checkpoint).
// *start_step is the number of steps already done (0 for a fresh start). World rank 0 gets the
// checkpoint's manifest in *saved (may be NULL), for vt_ckpt_check_optim once the schedule's
// lengths are known; the other ranks get it zeroed. Every rank gets the checkpoint's directory
// in from ("" for a fresh start). A training run that continues its --save folder's run first
// recovers or removes the interrupted saves there (vt_ckpt_recover: VT_ERR_IO where a recovery
// cannot write); one resumed from another checkpoint removes them afterwards. --resume auto
// that finds no checkpoint in --save resumes --resume-fallback where that is given.
vt_status vt_ckpt_resume(const vt_train_options *o, vt_model *m, vt_optimizer *opt,
                         vt_comm *world, const vt_mesh *mesh, int64_t *start_step,
                         vt_ckpt_manifest *saved, char *from, size_t fromlen, char *err,
                         size_t errlen);
// The line "resumed from DIR: N steps done, ..." of the last vt_ckpt_resume (vit3d eval's
// "loaded ..." is logged by it): a training run logs it once its schedule is checked
// (vt_train_resume_ok), so that a refused resume does not say it resumed.
const char *vt_ckpt_resumed_line(void);

// Rank 0 after --init-from FILE: a warning where FILE's metadata (vit3d export's) records model
// flags other than the run's (but --img-size and --num-classes, which a fine-tune changes: the
// others, such as --heads or --act, are not all in the tensors' shapes, and the weights would
// load into another model), a normalisation other than the run's, or, for vit3d eval, an
// evaluation transform other than that of its run where that run evaluated. Silent for a file
// that records none (timm's).
void vt_ckpt_warn_init_from(const vt_train_options *o, const char *path);

// The run's optimizer settings and learning-rate schedule (lengths resolved) against those the
// checkpoint in dir was saved with (a manifest without them passes): VT_ERR_INPUT with every
// difference named by its flag in err ("DIR was saved by a run with --lr 0.001, and this one
// has --lr 0.002").
vt_status vt_ckpt_check_optim(const vt_ckpt_manifest *saved, const vt_optim_config *now,
                              const vt_vit_config *model, const char *dir, char *err,
                              size_t errlen);

#endif
