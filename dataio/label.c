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

// The integer at path ("a.b.c": field c of object b of object a) in the JSON object in s: 1 an
// integer (*out), 0 no such field, -1 a field that is not an integer, -2 text that is not an
// object, -3 a field on the way that is not an object.
static int json_int_field(const char *s, size_t n, const char *path, long long *out) {
  for (;;) {
    const char *dot = strchr(path, '.');
    const size_t len = dot ? (size_t)(dot - path) : strlen(path);
    size_t at = 0;
    const int got = json_find(s, n, path, len, &at);
    if (got != 1) return got;
    if (!dot) return read_int(s, n, &at, out) ? 1 : -1;
    if (at >= n || s[at] != '{') return -3;
    const size_t end = json_close(s, n, at);
    s += at, n = end - at, path = dot + 1;
  }
}

vt_status vt_label_parse(const char *key, const char *text, size_t n, int32_t max,
                         int32_t *label, char *why, size_t whylen) {
  long long v = -1;
  char buf[33] = "";
  if (strncmp(key, JSON_PREFIX, strlen(JSON_PREFIX)) == 0) {
    const char *field = key + strlen(JSON_PREFIX);
    const int got = json_int_field(text, n, field, &v);
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
      snprintf(why, whylen, "holds '%.32s', not a class number", buf);
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
