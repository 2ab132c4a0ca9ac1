// label.h: a sample's class number from the bytes of its label member in a tar shard. A label
// key names the member and how to read it: KIND ("cls", "label", ...) for KEY.KIND holding the
// number as decimal text (webdataset's KEY.cls), or "json:FIELD" for an integer field at the top
// level of the object in KEY.json ("json:A.B": field B of the object in field A, and so on).
// Must not depend on MPI, a backend or the model.
#ifndef VT_LABEL_H
#define VT_LABEL_H

#include <stddef.h>
#include <stdint.h>

#include "vt_error.h"

// The most bytes a label member may have (a JSON object with other fields beside the label).
#define VT_LABEL_MAX_BYTES 65536

// VT_OK when key is a label key (KIND in lower-case letters, digits, '_' and '-', not an
// image's; or json:FIELD with FIELD in letters, digits, '_' and '-', dots between the names of a
// path), else VT_ERR_INPUT saying what one looks like.
vt_status vt_label_key_check(const char *key, char *err, size_t errlen);

// The member kind the key reads ("json" for json:FIELD), into kind (len bytes).
void vt_label_member_kind(const char *key, char *kind, size_t len);

// Class names (--label-names FILE): class c is the file's line c, either the name alone or
// "c<TAB>name" as `vit3d prepare` writes classes.txt (a UTF-8 byte order mark at its start is
// skipped). Blank lines, repeated names and numbers out of order are refused (VT_ERR_INPUT
// naming the line). A JSON string field's escapes are undone before its name is looked up.
typedef struct {
  int32_t count;
  char **names;    // by class
  int32_t *order;  // classes sorted by name (binary search)
} vt_label_names;
vt_status vt_label_names_load(const char *path, vt_label_names *out, char *err, size_t errlen);
void vt_label_names_free(vt_label_names *n);
// The class of a name (len bytes), -1 when none has it.
int32_t vt_label_names_find(const vt_label_names *n, const char *name, size_t len);

// The class number in text (n bytes of a member) under key: VT_OK with *label in [0, max), or
// VT_ERR_INPUT with what is wrong in why (the text is not a number, the field is missing or not
// an integer, the number is out of range). With names (may be NULL), a member's whole text
// (surrounding white space trimmed) or a JSON string field may also be a class name, and max is
// the names' count.
vt_status vt_label_parse(const char *key, const char *text, size_t n, int32_t max,
                         const vt_label_names *names, int32_t *label, char *why, size_t whylen);

#endif
