// index_cache.h: dataset indexes kept on disk between runs (--index-cache DIR), so that a run
// over an ImageNet-sized folder or set of shards on a network file system does not list 1.28M
// files or read 2.5M tar headers at every start. An entry holds the packed index
// (vt_dataset_pack) with the fingerprint of its sources (vt_dataset_fingerprint: size and time
// of each shard, ImageFolder folder or list file); it is used only when the fingerprint it was made
// with is the dataset's now, and its bytes pass their CRC-32. A stale, damaged or foreign entry
// is never trusted: the index is read again and the entry replaced. Must not depend on MPI.
#ifndef VT_INDEX_CACHE_H
#define VT_INDEX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

// The entry's file for a dataset path in dir: DIR/<last path component>-<hash of path>.vtindex
// (a relative path is taken from the working folder first, so runs from other folders share it).
void vt_index_cache_file(const char *dir, const char *path, char *file, size_t len);

// Returns 1, the packed index in *index (malloc'd, *n bytes) and the fingerprint it was made
// with (malloc'd text) when file holds a sound entry for path; 0 otherwise, with why it did not
// in *why (missing, damaged, another path's) for the log. The caller compares the fingerprint
// (an ImageFolder's names the folders to look at: vt_dataset_fingerprint).
int vt_index_cache_read(const char *file, const char *path, char **fingerprint,
                        uint8_t **index, size_t *n, char *why, size_t whylen);

// Writes the entry (to a temporary name in the same folder, synced, then renamed over file, so
// a reader never sees half of one); creates the folders of file's path where missing.
vt_status vt_index_cache_store(const char *file, const char *path, const char *fingerprint,
                               const uint8_t *index, size_t n, char *err, size_t errlen);

#endif
