// prepare.h: turns packaged datasets into ImageFolder trees the loader reads. Fashion-MNIST from
// Debian's dataset-fashion-mnist (IDX files, gzip) becomes OUT/train/<class>/<index>.png and
// OUT/val/<class>/<index>.png, 8-bit grey. Any dataset becomes tar shards.
// Must not depend on MPI, a backend or the model.
#ifndef VT_PREPARE_H
#define VT_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

// Where Debian's dataset-fashion-mnist installs its files.
#define VT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

// Class folders "0_tshirt" .. "9_ankle_boot": the digit prefix makes ImageFolder's sorted order
// the label order. Files are named by their index in the IDX file, zero-padded to 5 digits, so
// sorted order is file order. Does nothing (VT_OK) when OUT holds a complete copy (a marker file
// is written last). VT_ERR_INPUT with "apt-get install dataset-fashion-mnist" when the package
// is missing, VT_ERR_INPUT on malformed IDX files, VT_ERR_IO when writing fails.
vt_status vt_prepare_fashion_mnist(const char *out_dir, char *err, size_t errlen);

// The same from IDX files in src_dir (any image count and size; labels 0..9), for tests.
vt_status vt_prepare_fashion_mnist_from(const char *src_dir, const char *out_dir, char *err,
                                        size_t errlen);

extern const char *const vt_fashion_mnist_classes[10];

// Any dataset vt_dataset_open reads (folder, list or shards), rewritten into out_dir as tar
// shards in webdataset's layout (dataset.h): shard-000000.tar, ... of per_shard samples each,
// sample i of the source as "%08d.png" or "%08d.jpg" (by its bytes' signature) with "%08d.cls",
// in one fixed shuffled order (so that streaming readers do not see classes in runs), and
// out_dir/classes.txt ("label<TAB>name" lines). The shards are written (synced) into
// out_dir/.partial and moved into out_dir when all are whole, classes.txt last; a call stopped
// while writing leaves no shard in out_dir (one stopped during the renames, some, and no
// classes.txt), and the next call clears its .partial. A prepare into a
// folder another holds (out_dir/.vit3d-prepare.lock, flock), an unreadable source file, one that
// is neither PNG, JPEG nor WebP, and an out_dir that already holds .tar files are VT_ERR_INPUT
// with a message naming them; a call that fails removes what it wrote, so it can be run again.
vt_status vt_prepare_shards(const char *src, const char *out_dir, int64_t per_shard,
                            int64_t *samples, int *shards, char *err, size_t errlen);

#endif
