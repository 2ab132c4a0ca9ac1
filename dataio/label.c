// label.c: class numbers from label members (label.h). The JSON reader only walks the text far
// enough to find one field of one object level at a time: strings (with their escapes) are
// skipped whole and nesting is counted, so a field of the same name inside a nested object is
// not taken; a dotted path walks into the objects it names.
#include "label.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_PREFIX "json:"

static int only(const char *s, const char *allowed) {
  return *s && strspn(s, allowed) == strlen(s);
}

vt_status vt_label_key_check(const char *key, char *err, size_t errlen) {
  static const char lower[] = "abcdefghijklmnopqrstuvwxyz0123456789_-";
  static const char field[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.";
  const int json = strncmp(key, JSON_PREFIX, strlen(JSON_PREFIX)) == 0;
  const char *path = key + strlen(JSON_PREFIX);
  const int ok = json ? only(path, field) && path[0] != '.' && path[strlen(path) - 1] != '.' &&
                            !strstr(path, "..")
                      : only(key, lower) && strcmp(key, "jpg") && strcmp(key, "jpeg") &&
                            strcmp(key, "png") && strcmp(key, "webp");
  if (ok) return VT_OK;
  snprintf(err, errlen,
           "--label-key '%s': give the label member's extension without its dot, in lower case "
           "letters, digits, '_' or '-', other than an image's (cls, label, target, ...), or "
           "json:FIELD for an integer field of KEY.json (json:A.B: field B of object A)",
           key);
  return VT_ERR_INPUT;
}

void vt_label_member_kind(const char *key, char *kind, size_t len) {
  snprintf(kind, len, "%s", strncmp(key, JSON_PREFIX, strlen(JSON_PREFIX)) == 0 ? "json" : key);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A decimal integer at s[*i] (n bytes in all), ending at a space, ',', '}' or the end.
static int read_int(const char *s, size_t n, size_t *i, long long *out) {
  char buf[24];
  size_t k = 0;
  while (*i < n && k + 1 < sizeof buf && (s[*i] == '-' || (s[*i] >= '0' && s[*i] <= '9')))
    buf[k++] = s[(*i)++];
  buf[k] = '\0';
  if (k == 0 || (*i < n && !is_space(s[*i]) && s[*i] != ',' && s[*i] != '}')) return 0;
  char *end;
  errno = 0;
  *out = strtoll(buf, &end, 10);
  return *end == '\0' && errno == 0;
}

// The value of field name (len bytes) at the top level of the JSON object in s: 1 with *at its
// first byte, 0 no such field, -2 text that is not an object.
static int json_find(const char *s, size_t n, const char *name, size_t len, size_t *at) {
  size_t i = 0;
  int depth = 0;
  while (i < n && is_space(s[i])) i++;
  if (i == n || s[i] != '{') return -2;
  while (i < n) {
    const char c = s[i];
    if (c == '"') {
      const size_t start = ++i;
      while (i < n && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
      if (i >= n) return -2;  // an unterminated string
      const size_t end = i++;
      size_t j = i;
      while (j < n && is_space(s[j])) j++;
      if (depth == 1 && j < n && s[j] == ':' && end - start == len &&
          memcmp(s + start, name, len) == 0) {
        for (j++; j < n && is_space(s[j]); j++) {
        }
        *at = j;
        return 1;
      }
      continue;
    }
    if (c == '{' || c == '[') depth++;
    if (c == '}' || c == ']') depth--;
    i++;
  }
  return 0;
}

// One past the object or array that opens at s[i], strings skipped; n when it is not closed.
static size_t json_close(const char *s, size_t n, size_t i) {
  int depth = 0;
  while (i < n) {
    const char c = s[i];
    if (c == '"') {
      for (i++; i < n && s[i] != '"'; i += s[i] == '\\' ? 2 : 1) {
      }
      i++;
      continue;
    }
    if (c == '{' || c == '[') depth++;
    if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    i++;
  }
  return n;
}

// The value at path ("a.b.c": field c of object b of object a) in the JSON object of *n bytes at
// *s: 1 with *s and *n narrowed to the innermost object and *at the value's first byte in it, 0
// no such field, -2 text that is not an object, -3 a field on the way that is not an object.
static int json_path(const char **s, size_t *n, const char *path, size_t *at) {
  for (;;) {
    const char *dot = strchr(path, '.');
    const size_t len = dot ? (size_t)(dot - path) : strlen(path);
    const int got = json_find(*s, *n, path, len, at);
    if (got != 1 || !dot) return got;
    if (*at >= *n || (*s)[*at] != '{') return -3;
    const size_t end = json_close(*s, *n, *at);
    *s += *at, *n = end - *at, path = dot + 1;
  }
}

// The integer at path: 1 (*out), -1 a field that is not an integer, else json_path's verdict.
static int json_int_field(const char *s, size_t n, const char *path, long long *out) {
  size_t at = 0;
  const int got = json_path(&s, &n, path, &at);
  if (got != 1) return got;
  return read_int(s, n, &at, out) ? 1 : -1;
}

// The 4 hex digits at s as a number, or -1.
static long hex4(const char *s, size_t n) {
  long v = 0;
  for (size_t i = 0; i < 4; i++) {
    const char c = i < n ? s[i] : 0;
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = 16 * v + d;
  }
  return v;
}

// Code point u as UTF-8 at out[*k] (room for 4 bytes checked by the caller).
static void put_utf8(char *out, size_t *k, long u) {
  if (u < 0x80) {
    out[(*k)++] = (char)u;
  } else if (u < 0x800) {
    out[(*k)++] = (char)(0xc0 | (u >> 6)), out[(*k)++] = (char)(0x80 | (u & 0x3f));
  } else if (u < 0x10000) {
    out[(*k)++] = (char)(0xe0 | (u >> 12)), out[(*k)++] = (char)(0x80 | ((u >> 6) & 0x3f));
    out[(*k)++] = (char)(0x80 | (u & 0x3f));
  } else {
    out[(*k)++] = (char)(0xf0 | (u >> 18)), out[(*k)++] = (char)(0x80 | ((u >> 12) & 0x3f));
    out[(*k)++] = (char)(0x80 | ((u >> 6) & 0x3f)), out[(*k)++] = (char)(0x80 | (u & 0x3f));
  }
}

// The string at path, its escapes undone (\" \\ \/ \b \f \n \r \t and \uXXXX, surrogate
// pairs included, as UTF-8: Python's json.dumps writes non-ASCII names so by default) into out
// (cap bytes, *len of them used): 1, -1 a field that is not a string, -4 a string with an escape
// JSON does not have (a lone surrogate among them) or longer than out, else json_path's verdict.
static int json_string_field(const char *text, size_t n, const char *path, char *out,
                             size_t cap, size_t *len) {
  const char *s = text;
  size_t at = 0, k = 0;
  const int got = json_path(&s, &n, path, &at);
  if (got != 1) return got;
  if (at >= n || s[at] != '"') return -1;
  for (size_t e = at + 1; e < n; e++) {
    if (k + 4 > cap) return -4;
    if (s[e] == '"') {
      *len = k;
      return 1;
    }
    if (s[e] != '\\') {
      out[k++] = s[e];
      continue;
    }
    if (++e >= n) return -4;
    static const char escaped[] = "\"\\/bfnrt", meant[] = "\"\\/\b\f\n\r\t";
    const char *simple = s[e] ? strchr(escaped, s[e]) : NULL;
    if (simple) {
      out[k++] = meant[simple - escaped];
      continue;
    }
    if (s[e] != 'u') return -4;
    long u = hex4(s + e + 1, n - e - 1);
    e += 4;
    if (u >= 0xd800 && u < 0xdc00) {  // a high surrogate: its low one follows
      const long lo = e + 2 < n && s[e + 1] == '\\' && s[e + 2] == 'u'
                          ? hex4(s + e + 3, n - e - 3) : -1;
      if (lo < 0xdc00 || lo >= 0xe000) return -4;
      u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
      e += 6;
    } else if (u < 0 || (u >= 0xdc00 && u < 0xe000)) {
      return -4;
    }
    put_utf8(out, &k, u);
  }
  return -1;
}

// ---- class names -------------------------------------------------------------------------------
static const vt_label_names *g_sort_names;  // for qsort's comparison (loading is single-threaded)
static int by_name(const void *a, const void *b) {
  return strcmp(g_sort_names->names[*(const int32_t *)a], g_sort_names->names[*(const int32_t *)b]);
}

vt_status vt_label_names_load(const char *path, vt_label_names *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "--label-names %s: cannot open: %s", path, strerror(errno));
    return VT_ERR_INPUT;
  }
  char line[1024];
  int32_t cap = 0;
  vt_status st = VT_OK;
  for (int line_no = 1; st == VT_OK && fgets(line, sizeof line, f); line_no++) {
    if (line_no == 1 && !strncmp(line, "\xef\xbb\xbf", 3))  // a UTF-8 byte order mark
      memmove(line, line + 3, strlen(line + 3) + 1);
    size_t len = strcspn(line, "\r\n");
    if (line[len] == '\0' && !feof(f)) {
      snprintf(err, errlen, "--label-names %s: line %d is longer than %zu bytes", path, line_no,
               sizeof line - 2);
      st = VT_ERR_INPUT;
      break;
    }
    line[len] = '\0';
    const char *name = line, *tab = strchr(line, '\t');
    if (tab) {  // "c<TAB>name": c must be this line's class
      char *end;
      const long c = strtol(line, &end, 10);
      if (end != tab || c != out->count) {
        snprintf(err, errlen, "--label-names %s: line %d starts with '%.*s', not class %d and a "
                 "TAB (lines are class 0, 1, ... in order)", path, line_no, (int)(tab - line),
                 line, out->count);
        st = VT_ERR_INPUT;
        break;
      }
      name = tab + 1;
    }
    if (!*name) {
      snprintf(err, errlen, "--label-names %s: line %d has no name (class %d)", path, line_no,
               out->count);
      st = VT_ERR_INPUT;
      break;
    }
    if (out->count == cap) {
      char **grown = realloc(out->names, (size_t)(cap ? 2 * cap : 64) * sizeof *grown);
      if (!grown) break;  // out->names stays whole; said below
      out->names = grown, cap = cap ? 2 * cap : 64;
    }
    if (!(out->names[out->count] = strdup(name))) break;
    out->count++;
  }
  const int read_all = feof(f), read_error = ferror(f);
  fclose(f);
  if (st == VT_OK && !read_all) {
    snprintf(err, errlen, "--label-names %s: stopped after %d names: %s", path, out->count,
             read_error ? "a read error" : "out of memory");
    st = VT_ERR_INPUT;
  }
  if (st == VT_OK && out->count == 0) {
    snprintf(err, errlen, "--label-names %s: no class names in it", path);
    st = VT_ERR_INPUT;
  }
  if (st == VT_OK) {
    out->order = malloc((size_t)out->count * sizeof *out->order);
    if (!out->order) {
      snprintf(err, errlen, "--label-names %s: out of memory", path);
      vt_label_names_free(out);
      return VT_ERR_INPUT;
    }
    for (int32_t c = 0; c < out->count; c++) out->order[c] = c;
    g_sort_names = out;
    qsort(out->order, (size_t)out->count, sizeof *out->order, by_name);
    for (int32_t i = 1; st == VT_OK && i < out->count; i++)
      if (strcmp(out->names[out->order[i - 1]], out->names[out->order[i]]) == 0) {
        snprintf(err, errlen, "--label-names %s: classes %d and %d are both named '%s'", path,
                 out->order[i - 1], out->order[i], out->names[out->order[i]]);
        st = VT_ERR_INPUT;
      }
  }
  if (st != VT_OK) vt_label_names_free(out);
  return st;
}

void vt_label_names_free(vt_label_names *n) {
  for (int32_t c = 0; n->names && c < n->count; c++) free(n->names[c]);
  free(n->names);
  free(n->order);
  memset(n, 0, sizeof *n);
}

int32_t vt_label_names_find(const vt_label_names *n, const char *name, size_t len) {
  int32_t lo = 0, hi = n->count;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    // As strcmp orders the names (unsigned bytes, a prefix first); name may hold any bytes.
    const char *m = n->names[n->order[mid]];
    const size_t mlen = strlen(m);
    int c = memcmp(m, name, mlen < len ? mlen : len);
    if (c == 0) c = mlen < len ? -1 : mlen > len ? 1 : 0;
    if (c == 0) return n->order[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

vt_status vt_label_parse(const char *key, const char *text, size_t n, int32_t max,
                         const vt_label_names *names, int32_t *label, char *why, size_t whylen) {
  long long v = -1;
  char buf[33] = "";
  if (names) max = names->count;
  if (strncmp(key, JSON_PREFIX, strlen(JSON_PREFIX)) == 0) {
    const char *field = key + strlen(JSON_PREFIX);
    int got = json_int_field(text, n, field, &v);
    char str[1024];  // (as a --label-names line)
    size_t len;
    const int as_string = got == -1 ? json_string_field(text, n, field, str, sizeof str, &len) : 0;
    if (as_string == -4) {
      snprintf(why, whylen, "has that field as a string with an escape JSON does not have, or "
               "longer than %zu bytes", sizeof str - 4);
      return VT_ERR_INPUT;
    }
    if (as_string == 1) {
      if (!names) {
        snprintf(why, whylen, "has that field as the string '%.*s', not a class number (class "
                 "names need --label-names FILE)", (int)(len < 40 ? len : 40), str);
        return VT_ERR_INPUT;
      }
      const int32_t c = vt_label_names_find(names, str, len);
      if (c < 0) {
        snprintf(why, whylen, "names class '%.*s', which --label-names does not list",
                 (int)(len < 60 ? len : 60), str);
        return VT_ERR_INPUT;
      }
      *label = c;
      return VT_OK;
    }
    if (got != 1) {
      snprintf(why, whylen, "%s", got == -2 ? "is not a JSON object"
                                  : got == -3 ? "has a field on that path that is not an object"
                                  : got == 0 ? "has no field at that path"
                                             : "has that field, but not as an integer");
      return VT_ERR_INPUT;
    }
    snprintf(buf, sizeof buf, "%lld", v);
  } else {
    size_t i = 0, k = 0;
    while (i < n && is_space(text[i])) i++;
    while (i < n && k + 1 < sizeof buf && !is_space(text[i])) buf[k++] = text[i++];
    buf[k] = '\0';
    while (i < n && is_space(text[i])) i++;
    char *end;
    errno = 0;
    v = k ? strtoll(buf, &end, 10) : -1;
    if (k == 0 || *end || errno || i < n) {
      // Not a number: with names, the whole text (trimmed) may be a class's name.
      size_t lo = 0, hi = n;
      while (lo < hi && is_space(text[lo])) lo++;
      while (hi > lo && is_space(text[hi - 1])) hi--;
      const int32_t c = names && hi > lo ? vt_label_names_find(names, text + lo, hi - lo) : -1;
      if (c >= 0) {
        *label = c;
        return VT_OK;
      }
      if (names)
        snprintf(why, whylen, "holds '%.*s', neither a class number nor a name --label-names "
                 "lists", (int)(hi - lo < 60 ? hi - lo : 60), text + lo);
      else
        snprintf(why, whylen, "holds '%.32s', not a class number (class names need "
                 "--label-names FILE)", buf);
      return VT_ERR_INPUT;
    }
  }
  if (v < 0 || v >= max) {
    snprintf(why, whylen, "holds '%s', not a class number in [0, %d)", buf, max);
    return VT_ERR_INPUT;
  }
  *label = (int32_t)v;
  return VT_OK;
}
