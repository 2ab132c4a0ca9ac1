// cli.h: a small table-driven command-line parser: every flag has a type, a range and a help
// line, so --help, parsing and refusal messages come from one table.
// Must not depend on MPI or the model.
#ifndef VT_CLI_H
#define VT_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "vt_error.h"

// (VT_OPT_DOUBLE: a number kept as parsed, where a float's rounding would change a result, as
// floor(224 / 0.8f) = 279 does)
typedef enum {
  VT_OPT_INT, VT_OPT_I64, VT_OPT_U64, VT_OPT_FLOAT, VT_OPT_STR, VT_OPT_DOUBLE
} vt_opt_type;

typedef struct {
  const char *flag;      // "--lr"
  vt_opt_type type;
  void *dst;             // int*, int64_t*, uint64_t*, float* or char[size]
  size_t size;           // VT_OPT_STR: buffer size
  double min, max;       // numeric range, inclusive; VT_OPT_STR: min 1 refuses an empty value
  const char *metavar;   // "FLOAT"
  const char *help;      // one line; the default is printed after it
  const char *choices;   // VT_OPT_STR: "a|b|c" or NULL for any string
} vt_opt;

// Parses argv[0..argc) (flags and their values, as "--flag value" or "--flag=value").
// Unknown flags, missing or malformed values and values out of range give VT_ERR_INPUT and a
// message that names the flag and what it accepts.
vt_status vt_cli_parse(const vt_opt *opts, int nopts, int argc, char **argv, char *err,
                       size_t errlen);

// Arguments files: every "@FILE" in argv[0..argc) is replaced by the whitespace-separated words
// of FILE ('#' comments to the end of a line; no quoting, so no value may contain a space; no
// nesting). *out_argv (NULL-terminated) and its words are new copies: free with vt_cli_free.
// An unreadable file is VT_ERR_INPUT naming it.
vt_status vt_cli_expand(int argc, char **argv, int *out_argc, char ***out_argv, char *err,
                        size_t errlen);
void vt_cli_free(int argc, char **argv);

// The value given for flag in argv, or NULL (used to read --model before the overrides).
const char *vt_cli_find(int argc, char **argv, const char *flag);

// Prints one line per flag: flag, metavar, help and the current (default) value.
void vt_cli_help(FILE *f, const vt_opt *opts, int nopts);

#endif
