// tfevents.h: TensorBoard's event files, written directly: `tensorboard --logdir LOG_DIR` shows
// a run's curves without TensorFlow or Python in the trainer. A file is a sequence of TFRecords
// (length, masked CRC-32C of the length, the bytes, their masked CRC-32C), each an Event
// protocol buffer (tensorflow/core/util/event.proto): first one with file_version
// "brain.Event:2", then per step one with the step's scalars as summary values (tag and
// simple_value). Every run writes a new file whose second event is a SessionLog START at the
// first step it logs, so that TensorBoard drops what an earlier file in the folder logged from
// that step on: a resumed run replaces the steps a killed run did after its last checkpoint, a
// new run the whole earlier one (as metrics.jsonl is then started afresh). Knows no MPI: rank 0
// writes.
#ifndef VT_TFEVENTS_H
#define VT_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct vt_tfevents vt_tfevents;

// Creates DIR/events.out.tfevents.<seconds>.<microseconds>.<host>.<pid>.vit3d (names sort in
// the order the files were made), the START event at first_step
// (1, or the step after a resumed checkpoint's) second. NULL with the reason in err.
vt_tfevents *vt_tfevents_open(const char *dir, int64_t first_step, char *err, size_t errlen);
// One Event at step with n scalars (tags[i], values[i]), written (no buffering). 0, or -1 where
// the write failed (a full disk: any part written taken back, the event left out; said once, as
// the step from which events are written again, like metrics.jsonl's lines).
int vt_tfevents_scalars(vt_tfevents *t, int64_t step, int n, const char *const *tags,
                        const float *values);
const char *vt_tfevents_path(const vt_tfevents *t);
void vt_tfevents_close(vt_tfevents *t);

// CRC-32C (Castagnoli, the TFRecord checksum) of a buffer, and TFRecord's mask of it.
uint32_t vt_crc32c(const void *data, size_t nbytes);
uint32_t vt_tfrecord_mask(uint32_t crc);

#endif
