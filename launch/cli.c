// cli.c: the table-driven flag parser.
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const vt_opt *lookup(const vt_opt *opts, int n, const char *flag, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(opts[i].flag) == len && strncmp(opts[i].flag, flag, len) == 0) return &opts[i];
  return NULL;
}

static int in_choices(const char *choices, const char *v) {
  size_t n = strlen(v);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0) return 1;
    if (!bar) break;
    p = bar + 1;
  }
  return 0;
}

static vt_status set_value(const vt_opt *o, const char *v, char *err, size_t errlen) {
  char *end = NULL;
  errno = 0;
  if (o->type == VT_OPT_STR) {
    if (o->choices && !in_choices(o->choices, v)) {
      snprintf(err, errlen, "%s: '%s' is not one of %s", o->flag, v, o->choices);
      return VT_ERR_INPUT;
    }
    if (o->min > 0 && !v[0]) {
      snprintf(err, errlen, "%s: give a %s (an empty value names nothing)", o->flag,
               o->metavar);
      return VT_ERR_INPUT;
    }
    if (strlen(v) >= o->size) {
      snprintf(err, errlen, "%s: value is longer than %zu characters", o->flag, o->size - 1);
      return VT_ERR_INPUT;
    }
    snprintf((char *)o->dst, o->size, "%s", v);
    return VT_OK;
  }
  double x = 0.0;
  if (o->type == VT_OPT_FLOAT || o->type == VT_OPT_DOUBLE) {
    x = strtod(v, &end);
  } else if (o->type == VT_OPT_U64) {
    if (v[0] == '-') end = (char *)v;  // strtoull would wrap a negative number
    else x = (double)strtoull(v, &end, 10);
  } else {
    x = (double)strtoll(v, &end, 10);
  }
  if (end == v || *end != '\0' || errno == ERANGE || x != x) {
    snprintf(err, errlen, "%s: '%s' is not a valid %s", o->flag, v,
             o->type == VT_OPT_FLOAT || o->type == VT_OPT_DOUBLE ? "number" : "whole number");
    return VT_ERR_INPUT;
  }
  if (x < o->min || x > o->max) {
    snprintf(err, errlen, "%s: %s is out of range; it must be between %g and %g", o->flag, v,
             o->min, o->max);
    return VT_ERR_INPUT;
  }
  switch (o->type) {
    case VT_OPT_INT: *(int *)o->dst = (int)x; break;
    case VT_OPT_I64: *(int64_t *)o->dst = (int64_t)strtoll(v, NULL, 10); break;
    case VT_OPT_U64: *(uint64_t *)o->dst = (uint64_t)strtoull(v, NULL, 10); break;
    case VT_OPT_FLOAT: *(float *)o->dst = (float)x; break;
    case VT_OPT_DOUBLE: *(double *)o->dst = x; break;
    default: break;
  }
  return VT_OK;
}

vt_status vt_cli_parse(const vt_opt *opts, int nopts, int argc, char **argv, char *err,
                       size_t errlen) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      snprintf(err, errlen, "unexpected argument '%s' (flags start with --; see --help)", a);
      return VT_ERR_INPUT;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const vt_opt *o = lookup(opts, nopts, a, len);
    if (!o) {
      snprintf(err, errlen, "unknown flag '%.*s' (see --help for the flags this command takes)",
               (int)len, a);
      return VT_ERR_INPUT;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
      if (i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value (%s)", o->flag, o->metavar);
        return VT_ERR_INPUT;
      }
      v = argv[++i];
    }
    vt_status st = set_value(o, v, err, errlen);
    if (st != VT_OK) return st;
  }
  return VT_OK;
}

const char *vt_cli_find(int argc, char **argv, const char *flag) {
  size_t n = strlen(flag);
  const char *found = NULL;
  for (int i = 0; i < argc; i++) {
    if (strncmp(argv[i], flag, n) != 0) continue;
    if (argv[i][n] == '=') found = argv[i] + n + 1;
    else if (argv[i][n] == '\0' && i + 1 < argc) found = argv[i + 1];
  }
  return found;
}

void vt_cli_help(FILE *f, const vt_opt *o, int n) {
  for (int i = 0; i < n; i++, o++) {
    char def[160];
    switch (o->type) {
      case VT_OPT_INT: snprintf(def, sizeof def, "%d", *(int *)o->dst); break;
      case VT_OPT_I64: snprintf(def, sizeof def, "%" PRId64, *(int64_t *)o->dst); break;
      case VT_OPT_U64: snprintf(def, sizeof def, "%" PRIu64, *(uint64_t *)o->dst); break;
      case VT_OPT_FLOAT: snprintf(def, sizeof def, "%g", *(float *)o->dst); break;
      case VT_OPT_DOUBLE: snprintf(def, sizeof def, "%g", *(double *)o->dst); break;
      default: snprintf(def, sizeof def, "%s", *(char *)o->dst ? (char *)o->dst : "none"); break;
    }
    char left[64];
    snprintf(left, sizeof left, "%s %s", o->flag, o->metavar);
    fprintf(f, "  %-28s %s [%s]\n", left, o->help, def);
  }
}

// Appends a copy of word to the growing list (*v, *n, *cap).
static void push_word(char ***v, int *n, int *cap, const char *word, size_t len) {
  if (*n + 2 > *cap) {
    *cap *= 2;
    *v = realloc(*v, (size_t)*cap * sizeof **v);
    VT_CHECK(*v != NULL, "out of host memory for the arguments");
  }
  char *w = malloc(len + 1);
  VT_CHECK(w != NULL, "out of host memory for the arguments");
  memcpy(w, word, len);
  w[len] = 0;
  (*v)[(*n)++] = w;
  (*v)[*n] = NULL;
}

// The whole of a text file, NUL-terminated (free it), or NULL with errno set.
static char *read_text(const char *path, size_t *nbytes) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - 1 - len, f)) > 0) {
    len += got;
    if (len + 1 == cap) {
      char *bigger = realloc(buf, cap *= 2);
      if (!bigger) free(buf);
      buf = bigger;
    }
  }
  const int failed = ferror(f), why = errno;  // a directory opens, then fails to read
  fclose(f);
  if (buf && failed) free(buf), buf = NULL, errno = why;
  else if (buf) buf[len] = 0;
  else errno = ENOMEM;
  *nbytes = len;
  return buf;
}

vt_status vt_cli_expand(int argc, char **argv, int *out_argc, char ***out_argv, char *err,
                        size_t errlen) {
  int n = 0, cap = 1;
  char **v = malloc(sizeof *v);
  VT_CHECK(v != NULL, "out of host memory for the arguments");
  v[0] = NULL;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] != '@' || !argv[i][1]) {
      push_word(&v, &n, &cap, argv[i], strlen(argv[i]));
      continue;
    }
    size_t len = 0;
    char *text = read_text(argv[i] + 1, &len);
    if (!text) {
      snprintf(err, errlen, "arguments file %s: %s", argv[i] + 1, strerror(errno));
      vt_cli_free(n, v);
      return VT_ERR_INPUT;
    }
    if (strlen(text) != len) {  // (the words after it would be dropped without a word)
      snprintf(err, errlen, "arguments file %s holds a NUL byte (at byte %zu): it is not a text "
               "file of flags", argv[i] + 1, strlen(text));
      free(text);
      vt_cli_free(n, v);
      return VT_ERR_INPUT;
    }
    int comment = 0;
    for (char *p = text; *p;) {
      if (*p == '\n') comment = 0;
      if (*p == '#') comment = 1;
      if (comment || isspace((unsigned char)*p)) {
        p++;
        continue;
      }
      const char *start = p;
      while (*p && *p != '#' && !isspace((unsigned char)*p)) p++;
      // No quoting: a quote would be kept as part of the word (a folder named "runs, a pattern
      // that matches nothing), so it is refused.
      const char *q = memchr(start, '"', (size_t)(p - start));
      if (!q) q = memchr(start, '\'', (size_t)(p - start));
      if (q) {
        snprintf(err, errlen, "arguments file %s: the word %.*s holds a quote: the file's "
                 "words are split at white space, with no quoting (nor spaces inside a value)",
                 argv[i] + 1, (int)(p - start), start);
        free(text);
        vt_cli_free(n, v);
        return VT_ERR_INPUT;
      }
      if (*start == '@') {  // (one level: a file's words are flags and values)
        snprintf(err, errlen, "arguments file %s names another, '%.*s': an arguments file "
                 "cannot include one; give each @FILE on the command line", argv[i] + 1,
                 (int)(p - start), start);
        free(text);
        vt_cli_free(n, v);
        return VT_ERR_INPUT;
      }
      push_word(&v, &n, &cap, start, (size_t)(p - start));
    }
    free(text);
  }
  *out_argc = n, *out_argv = v;
  return VT_OK;
}

void vt_cli_free(int argc, char **argv) {
  for (int i = 0; argv && i < argc; i++) free(argv[i]);
  free(argv);
}
