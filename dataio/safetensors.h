// safetensors.h: reading and writing tensors in the safetensors format (an 8-byte little-endian
// header length, a JSON header of name -> dtype, shape, data_offsets plus an optional
// "__metadata__" object of string -> string, then the raw little-endian data). The reader treats
// every file as hostile. Must not depend on MPI, a backend or the model.
#ifndef VT_SAFETENSORS_H
#define VT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

// ---- writing ----------------------------------------------------------------------------------
typedef struct {
  const char *name;
  const char *dtype;  // "F32" or "I32"
  int ndim;
  int64_t shape[4];
  const void *data;   // host memory, 4-byte elements
} vt_st_tensor;

// Writes n tensors to path (in the given order, contiguous, the data aligned to 8 bytes). Names
// are JSON-escaped (quotes, backslashes, control bytes). Returns VT_ERR_INPUT, writing nothing,
// for what the format cannot hold or vt_safetensors_read would refuse: a name 128 bytes or
// longer, not UTF-8, repeated or "__metadata__"; a dtype without 4-byte elements (F32, I32, U32);
// ndim outside 0..4; a negative dim. VT_ERR_IO when the file cannot be written completely (full
// disk, no permission); the partial file is removed.
vt_status vt_safetensors_write(const char *path, const vt_st_tensor *tensors, int n, char *err,
                               size_t errlen);

// The same with a "__metadata__" object (written first): meta_kv holds n_meta pairs, key then
// value, UTF-8 strings of any length, keys distinct.
vt_status vt_safetensors_write_meta(const char *path, const vt_st_tensor *tensors, int n,
                                    const char *const *meta_kv, int n_meta, char *err,
                                    size_t errlen);

// Writes the tensors of the file src (4-byte dtypes: a checkpoint's) to dst with the metadata
// meta_kv (n_meta pairs) in place of src's, through dst.tmp + fsync + rename, so dst is either
// the old or the new file; one tensor in memory at a time. A dst that is src is refused.
vt_status vt_safetensors_copy_meta(const char *src, const char *dst, const char *const *meta_kv,
                                   int n_meta, char *err, size_t errlen);

// Where a file of these tensors puts everything, for writers that put the data in themselves
// (many processes, each its part: dataio/partfile.h): head holds the bytes before the data (the
// 8-byte length and the JSON header, padded), offset[i] the file offset of tensor i's data. The
// same checks as vt_safetensors_write_meta, but the tensors' data may be NULL.
typedef struct {
  uint8_t *head;
  int64_t head_nbytes;
  int64_t *offset;  // n
  int64_t file_nbytes;
} vt_st_layout;
vt_status vt_safetensors_layout(const char *path, const vt_st_tensor *tensors, int n,
                                const char *const *meta_kv, int n_meta, vt_st_layout *out,
                                char *err, size_t errlen);
void vt_st_layout_free(vt_st_layout *l);

// ---- reading ----------------------------------------------------------------------------------
#define VT_ST_MAX_NAME 128           // names are at most 127 bytes (after JSON unescaping)
#define VT_ST_MAX_DIMS 8
#define VT_ST_MAX_HEADER 100000000   // bytes, the reference implementation's cap
#define VT_ST_MAX_TENSORS (1 << 18)  // bounds the entry table (and metadata) whatever the header

typedef struct {
  char name[VT_ST_MAX_NAME];
  char dtype[8];          // "F32", "F16", "BF16", "I32", "I64", "U8", "F8_E4M3", ... (the
                          // reference's types of whole bytes, vt_st_dtype_size)
  int ndim;
  int64_t shape[VT_ST_MAX_DIMS];
  int64_t begin, end;     // byte range inside the data section; end - begin = numel * size
} vt_st_entry;

typedef struct {
  int count;
  vt_st_entry *entries;   // in header order
  uint8_t *data;          // the data section, owned, 64-byte aligned
  int64_t data_nbytes;
  // private
  vt_st_entry **by_name_; // entries sorted by name (duplicates refused; binary search)
  int n_meta_;
  char **meta_;           // 2 * n_meta_ strings, key then value, sorted by key
  char *arena_;           // the metadata strings
  int lazy_, fd_;         // vt_safetensors_open: no data in memory, read through fd_
  int64_t data_off_;      // the data section's offset in the file
  int64_t bytes_read_;    // data bytes read so far
} vt_st_file;

// Reads and validates the whole file: header length within the file and the cap, a strict JSON
// header of the expected shape, known dtypes, shapes whose byte size matches the offsets, and
// tensors that cover the data section exactly (sorted by offset, no gap, no overlap, ending at
// the end of the file, as the reference implementation requires). The data is read only after
// the header passed, so memory stays within the file size plus a few times the header size.
// Stricter than the reference reader, on purpose: repeated names or metadata keys, keys other
// than dtype/shape/data_offsets, more than 8 dims and sub-byte dtypes are refused, not ignored.
// Refusals are VT_ERR_INPUT with a message naming path and the problem; open/read failures are
// VT_ERR_IO. On any failure f is left empty (closing it is harmless).
vt_status vt_safetensors_read(const char *path, vt_st_file *f, char *err, size_t errlen);

// The header only (every check above but the data's), the file kept open: tensors are then read
// one at a time with vt_st_read, so a rank that needs a few of a large file's tensors reads those
// bytes only (vt_st_data gives NULL for such a file).
vt_status vt_safetensors_open(const char *path, vt_st_file *f, char *err, size_t errlen);
// The entry's bytes into dst (e->end - e->begin of them), from memory or, for a file opened with
// vt_safetensors_open, from the file (VT_ERR_IO, naming the tensor, when it ends short).
vt_status vt_st_read(vt_st_file *f, const vt_st_entry *e, void *dst, char *err, size_t errlen);
// Bytes [at, at + n) of the entry's, likewise (VT_ERR_INPUT for a range outside it).
vt_status vt_st_read_range(vt_st_file *f, const vt_st_entry *e, int64_t at, int64_t n, void *dst,
                           char *err, size_t errlen);
// The file offset of the data section (the entries' begin and end count from there).
int64_t vt_st_data_offset(const vt_st_file *f);
// Data bytes read from the file so far (the whole data section for vt_safetensors_read).
int64_t vt_st_bytes_read(const vt_st_file *f);

// The same from memory (messages name "<memory>"). Copies: f owns its data and bytes may be freed
// as soon as this returns.
vt_status vt_safetensors_parse(const uint8_t *bytes, size_t nbytes, vt_st_file *f, char *err,
                               size_t errlen);

// Bytes per element of a dtype name, 0 when unknown.
int vt_st_dtype_size(const char *dtype);

// The entry of that name, NULL if absent (O(log count)).
const vt_st_entry *vt_st_find(const vt_st_file *f, const char *name);

// The entry's bytes inside f->data (NULL for a file opened with vt_safetensors_open). Aligned to
// the element size when begin is a multiple of it (true of files from this writer and from the
// reference writer).
const void *vt_st_data(const vt_st_file *f, const vt_st_entry *e);

// The metadata value of key, NULL if absent.
const char *vt_st_metadata(const vt_st_file *f, const char *key);
// How many metadata pairs f has, and the key of the i-th (in byte order of the keys).
int vt_st_metadata_count(const vt_st_file *f);
const char *vt_st_metadata_key(const vt_st_file *f, int i);

// Frees everything and leaves f empty.
void vt_safetensors_close(vt_st_file *f);

#endif
