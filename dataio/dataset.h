// dataset.h: the index of a labelled image dataset, from an ImageFolder tree (root/<class>/<file>,
// classes sorted by name as torchvision does, files sorted by name within a class), a list
// file (one "relative/path<TAB>label" per line, paths relative to the list's directory) or tar
// shards in webdataset's layout (a sample is KEY.jpg, KEY.jpeg or KEY.png with KEY.cls, or
// another label member, holding its class number as text, next to each other in one shard;
// indexed from the tar headers, read with one pread per image, nothing unpacked). Must not depend on MPI, a backend or the model.
#ifndef VT_DATASET_H
#define VT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

typedef struct {
  int64_t count;        // samples
  char **paths;         // full paths, count entries (shards: "SHARD.tar:MEMBER", for messages)
  int32_t *labels;      // count entries, in [0, num_classes)
  int num_classes;
  char **class_names;   // num_classes entries (ImageFolder: folder names; else "0".."K-1")
  int numbered;         // 1: the classes are label numbers (a list; shards without names)
  // Tar shards (nshards 0 otherwise): sample i's image is bytes [offset[i], offset[i] + size[i])
  // of shard shard_of[i], whose file stays open on shard_fds (pread: any thread may read).
  int nshards;
  char **shard_paths;
  int *shard_fds;
  int32_t *shard_of;
  int64_t *offset, *size;
  // ImageFolder, as listed (not from an index cache): the files left out for their extension,
  // with the first, for the caller's warning, and the folders below the class folders.
  int64_t other_files, subfolders;
  char other_file[512];
  // ImageFolder, as listed: hidden folders (names starting with '.') beside the class folders,
  // left out, with the first: torchvision's ImageFolder counts them as classes.
  int64_t hidden_classes;
  char hidden_class[256];
  char *fingerprint;  // ImageFolder, as listed: its folders' (vt_dataset_fingerprint)
} vt_dataset;

// Opens a directory (ImageFolder) or a file (list). Empty datasets, empty class folders, labels
// out of range and unreadable paths are VT_ERR_INPUT with a message that says what to fix.
// ImageFolder: names starting with '.' are skipped; a class holds the regular files whose
// extension is an image's (.jpg, .jpeg, .png, .webp, .gif, .bmp, .ppm, .pgm,
// .pnm, .tif, .tiff in any case), in it and in the folders below it, as torchvision's
// ImageFolder takes them (followed links; the folders in the order of their paths, each one's
// files sorted; a link loop refused), those folders counted in subfolders; other files are left
// out and counted in other_files). List: blank lines and '#' comments are allowed,
// the label follows the last TAB, absolute paths stay as they are, K = largest label + 1; a
// bad line is named by its number. Files are not opened here: a listed file that is missing
// or unreadable is a bad image for the loader's policy, not an error of the index.
// Shards: a file ending in .tar, a folder holding .tar files (sorted by name; it may not also
// hold class folders) or a pattern with one numbered range, "train-{000000..000146}.tar" (every
// number from the first to the last, padded to the first's width). Samples are in shard order,
// then archive order; K = largest label + 1. A damaged or cut tar, an image without its .cls
// (or the reverse), two images under one key and a label that is not a number are VT_ERR_INPUT
// naming the shard and the sample; members of other kinds (.json, .txt, ...) are ignored.
vt_status vt_dataset_open(const char *path, vt_dataset *ds, char *err, size_t errlen);
// The label member's kind in tar shards by default (webdataset's and timm's "cls").
#define VT_LABEL_KEY "cls"
// The same with the shards' labels in KEY.<label_key> ("cls", "label", "target", ...; its text a
// class number) instead of KEY.cls.
vt_status vt_dataset_open_keyed(const char *path, const char *label_key, vt_dataset *ds,
                                char *err, size_t errlen);
// And with the shards' class names (--label-names FILE, label.h; NULL or "": none): a label member
// may then hold a class's name, and the classes are the file's (its count, its names).
vt_status vt_dataset_open_labeled(const char *path, const char *label_key, const char *names_path,
                                  vt_dataset *ds, char *err, size_t errlen);
// The classes.txt beside the shards path names (vit3d prepare shards writes one: "N<TAB>name"
// lines, as --label-names's), in buf, where it reads as class names; else NULL (not shards, no
// such file, or one of another format).
const char *vt_dataset_shard_names(const char *path, char *buf, size_t size);
void vt_dataset_free(vt_dataset *ds);

// What the index of path was made from, as text that changes when the index may have: a line
// "path<TAB>size<TAB>mtime<TAB>ctime<TAB>inode" per shard (shards, after a "label key<TAB>KEY"
// line and the class names file's line where names_path is given), or for the list file; for
// an ImageFolder, after the image kinds' line, one for the root and each folder that stored
// (the index cache entry's fingerprint, or NULL) names, re-stat'ed: open_folder's listing makes
// the fingerprint of every folder it walked (vt_dataset.fingerprint), and a folder's times
// change when a name in it is added, removed or renamed. One stat per shard or folder, none
// per image. *text malloc'd. For the index cache (index_cache.h).
vt_status vt_dataset_fingerprint(const char *path, const char *label_key,
                                 const char *names_path, const char *stored, char **text,
                                 char *err, size_t errlen);

// The index as one block of bytes (for this build on this kind of machine: host byte order), so
// that one process reads the file system and sends the index to the others: *bytes malloc'd.
vt_status vt_dataset_pack(const vt_dataset *ds, uint8_t **bytes, size_t *nbytes, char *err,
                          size_t errlen);
// The index from vt_dataset_pack's bytes; tar shards are opened here (not read). A block that
// is not one (a truncated or foreign buffer) or a shard that will not open is VT_ERR_INPUT.
vt_status vt_dataset_unpack(const uint8_t *bytes, size_t nbytes, vt_dataset *ds, char *err,
                            size_t errlen);

// The sample stream of the determinism contract (design.md): an epoch is len positions (n, or
// fewer: --drop-last's whole global batches), position p belongs to epoch p / len, and epoch
// e's positions are filled from perm(seed, e), a permutation of 0..n-1 keyed by (seed, epoch)
// alone: Fisher-Yates on vt_rng_u32 draws of stream (seed, "sampler", epoch), with unbiased
// integers in range. Without repeats, position p is sample perm[p mod len] (len < n leaves
// perm's last n - len out of that epoch).
// Repeated augmentation (Hoffer et al. 2020; DeiT's, timm's --aug-repeats R): an epoch still
// has n positions, but they hold the first ceil(n / R) samples of perm, each R times. The
// epoch is cut into windows of R * VT_REPEAT_WINDOW positions (the last one shorter); a window
// holds L = VT_REPEAT_WINDOW samples (the last ceil(its length / R)), and its position r is copy
// r / L of the window's sample r mod L. So an image's copies lie within one window (of the same
// step when the global batch is a few windows long), and Mixup's pairs (2k, 2k + 1) never pair
// an image with its own copy, but in an epoch's last window when it holds a single image (its
// length, n mod (R * VT_REPEAT_WINDOW), at most R). Each copy is augmented by its own key (vt_sampler_key).
// The sampler caches the permutation of the epoch it was last asked for (n int64 entries); it
// is not thread-safe.
#define VT_REPEAT_WINDOW 128

typedef struct {
  uint64_t seed;
  int64_t n;
  int64_t len;      // positions per epoch, 1..n
  int repeats;      // R >= 1
  int64_t epoch;    // epoch of perm, -1 before the first call
  int64_t *perm;    // n entries
} vt_sampler;

// len: the positions of an epoch (0: n); the first len of the n an epoch would have.
void vt_sampler_init(vt_sampler *s, uint64_t seed, int64_t n, int repeats, int64_t len);
void vt_sampler_free(vt_sampler *s);
// The dataset index at stream position p, and its epoch.
int64_t vt_sampler_at(vt_sampler *s, int64_t position, int64_t *epoch);
// The augmentation key of position p's image within its epoch: index * R + its copy number
// (the index itself without repeats), so that every copy gets its own crop and RandAugment.
int64_t vt_sampler_key(const vt_sampler *s, int64_t position, int64_t index);

#endif
