// dataset_internal.h: what dataset.c (folders, list files, the index as bytes) and
// dataset_shards.c (tar shards) share; private to the two.
#ifndef VT_DATASET_INTERNAL_H
#define VT_DATASET_INTERNAL_H

#include <stdint.h>

#include "dataset.h"

// Class labels beyond this are almost certainly a misparsed column, not a real dataset.
#define VT_MAX_LIST_LABEL 10000000

// A growable list of strings (names, then full paths) with their labels.
typedef struct {
  char **s;
  int32_t *lab;
  int64_t n, cap;
} strlist;

// a/b (no second slash where a ends with one); NULL when out of memory.
char *vt_ds_join(const char *a, const char *b);
// Appends s (owned from here; freed on failure) with its label; 0 when s is NULL or out of
// memory.
int vt_ds_strlist_push(strlist *l, char *s, int32_t lab);
void vt_ds_strlist_free(strlist *l);
// Names in dir (hidden ones skipped) of directories (want_dir) or regular files, sorted.
vt_status vt_ds_list_dir(const char *dir, int want_dir, strlist *out, char *err, size_t errlen);
// Classes named "0".."max_label".
vt_status vt_ds_number_classes(vt_dataset *ds, int32_t max_label, char *err, size_t errlen);

int vt_ds_has_suffix(const char *s, const char *suffix);
// The paths of a pattern with one "{A..B}" range of decimal numbers.
vt_status vt_ds_expand_range(const char *pattern, strlist *out, char *err, size_t errlen);
// The .tar files directly in dir, sorted (none when it has none).
vt_status vt_ds_list_shards(const char *dir, strlist *out, char *err, size_t errlen);
// Opens and indexes the shards into ds and samples (the shards' names move to ds).
vt_status vt_ds_open_shards(const char *what, const char *label_key, const char *names_path,
                            strlist *shards, vt_dataset *ds, strlist *samples, char *err,
                            size_t errlen);
// Every shard stays open for the run: the soft limit on open files raised when they need it.
void vt_ds_raise_file_limit(int nshards);

#endif
