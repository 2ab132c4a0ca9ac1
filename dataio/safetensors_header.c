// safetensors_header.c: the reader's header half: a small strict JSON parser for the header's one
// shape (name -> {dtype, shape, data_offsets}, optional "__metadata__" of strings), written for
// this format alone (no recursion, bounded lengths), and the checks across tensors (coverage,
// overlap, duplicates). No MPI, backend or model.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "safetensors_header.h"

// Length of the well-formed UTF-8 sequence at s (n bytes available), 0 if malformed: JSON text
// is UTF-8, and rejecting overlong forms and surrogates keeps two spellings of one name apart.
int vt_st_utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0], cp, min;
  int len;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  return cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : len;
}

// ---- reader: the header's JSON ----------------------------------------------------------------
typedef struct {
  const char *p, *start, *end;  // the header text
  const char *what;             // the file, for messages
  char *err;
  size_t errlen;
} cursor;

// Messages: "FILE: problem"; header problems add the byte where the parser stopped.
vt_status vt_st_refuse(char *err, size_t errlen, const char *what, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s: %s", what, msg);
  return VT_ERR_INPUT;
}

__attribute__((format(printf, 2, 3))) static int fail(cursor *c, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vt_st_refuse(c->err, c->errlen, c->what, "bad header at byte %lld: %s", (long long)(c->p - c->start),
         msg);
  return 0;
}

// The next byte after JSON whitespace, -1 at the end of the header.
static int peek(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
  return c->p < c->end ? (unsigned char)*c->p : -1;
}

static int expect(cursor *c, char ch, const char *where) {
  int got = peek(c);
  if (got == ch) return c->p++, 1;
  if (got < 0) return fail(c, "the header ends where '%c' is expected %s", ch, where);
  if (got >= 0x20 && got < 0x7f) return fail(c, "expected '%c' %s, found '%c'", ch, where, got);
  return fail(c, "expected '%c' %s, found byte 0x%02x", ch, where, (unsigned)got);
}

static int hex4(cursor *c, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++, c->p++) {
    int h = c->p >= c->end ? -1 : (unsigned char)*c->p;
    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
    if (d < 0) return fail(c, "bad \\u escape in a string");
    *v = *v << 4 | (unsigned)d;
  }
  return 1;
}

// Decodes a JSON string into out (cap bytes including the NUL). \u0000 is refused: names and
// metadata are C strings, and a NUL would make two different keys look the same.
static int parse_string(cursor *c, char *out, size_t cap, const char *label) {
  char where[48];
  snprintf(where, sizeof where, "to begin %s", label);
  if (!expect(c, '"', where)) return 0;
  size_t n = 0;
  for (;;) {
    if (c->p >= c->end) return fail(c, "%s: the string is not terminated", label);
    unsigned char ch = (unsigned char)*c->p, tmp[4];
    size_t k = 1;
    if (ch == '"') break;
    if (ch < 0x20) return fail(c, "%s: control byte 0x%02x inside a string", label, ch);
    if (ch != '\\') {
      int len = vt_st_utf8_len((const unsigned char *)c->p, (size_t)(c->end - c->p));
      if (!len) return fail(c, "%s: invalid UTF-8", label);
      memcpy(tmp, c->p, (size_t)len), k = (size_t)len, c->p += len;
    } else {
      if (c->end - c->p < 2) return fail(c, "%s: the string is not terminated", label);
      const char *esc = "\"\"\\\\//b\bf\fn\nr\rt\t", *hit = NULL;
      for (int i = 0; esc[i] && !hit; i += 2)
        if (esc[i] == c->p[1]) hit = esc + i;
      if (hit) {
        tmp[0] = (unsigned char)hit[1], c->p += 2;
      } else if (c->p[1] == 'u') {
        unsigned cp, lo;
        c->p += 2;
        if (!hex4(c, &cp)) return 0;
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair: \uD8xx\uDCxx
          if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
            return fail(c, "%s: unpaired surrogate in a \\u escape", label);
          c->p += 2;
          if (!hex4(c, &lo)) return 0;
          if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(c, "%s: unpaired surrogate in a \\u escape", label);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return fail(c, "%s: unpaired surrogate in a \\u escape", label);
        }
        if (cp == 0) return fail(c, "%s: \\u0000 is not allowed", label);
        if (cp < 0x80) tmp[0] = (unsigned char)cp;
        else if (cp < 0x800) k = 2, tmp[0] = (unsigned char)(0xC0 | cp >> 6);
        else if (cp < 0x10000) k = 3, tmp[0] = (unsigned char)(0xE0 | cp >> 12);
        else k = 4, tmp[0] = (unsigned char)(0xF0 | cp >> 18);
        for (size_t i = 1; i < k; i++)
          tmp[i] = (unsigned char)(0x80 | ((cp >> (6 * (k - 1 - i))) & 0x3F));
      } else {
        return fail(c, "%s: invalid escape '\\%c'", label, c->p[1]);
      }
    }
    if (n + k >= cap) return fail(c, "%s is longer than %zu bytes", label, cap - 1);
    memcpy(out + n, tmp, k), n += k;
  }
  c->p++;
  out[n] = 0;
  return 1;
}

// A non-negative integer without sign, fraction, exponent or leading zeros, at most INT64_MAX.
static int parse_int(cursor *c, int64_t *v, const char *label) {
  int ch = peek(c);
  if (ch == '-') return fail(c, "%s: negative value", label);
  if (ch < '0' || ch > '9') return fail(c, "%s: expected a non-negative integer", label);
  if (ch == '0' && c->end - c->p > 1 && c->p[1] >= '0' && c->p[1] <= '9')
    return fail(c, "%s: leading zero", label);
  int64_t x = 0;
  for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
    int d = *c->p - '0';
    if (x > (INT64_MAX - d) / 10) return fail(c, "%s: integer too large", label);
    x = x * 10 + d;
  }
  if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
    return fail(c, "%s: not an integer", label);
  *v = x;
  return 1;
}

// [int, ...] with at most maxn values.
static int parse_ints(cursor *c, int64_t *v, int maxn, int *n, const char *label) {
  if (!expect(c, '[', label)) return 0;
  *n = 0;
  if (peek(c) == ']') return c->p++, 1;
  for (;;) {
    if (*n == maxn) return fail(c, "%s: more than %d values", label, maxn);
    if (!parse_int(c, &v[(*n)++], label)) return 0;
    int ch = peek(c);
    if (ch == ']') return c->p++, 1;
    if (ch != ',') return fail(c, "%s: expected ',' or ']'", label);
    c->p++;
  }
}

// {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, each key exactly once.
static int parse_entry(cursor *c, vt_st_entry *e) {
  if (!expect(c, '{', "for a tensor's description")) return 0;
  int seen = 0, n;
  while (peek(c) != '}') {
    char key[16], dt[32];
    int64_t off[2];
    if (seen && !expect(c, ',', "between a tensor's keys")) return 0;
    if (!parse_string(c, key, sizeof key, "a tensor's key") || !expect(c, ':', "after a key"))
      return 0;
    int bit = strcmp(key, "dtype") == 0 ? 1 : strcmp(key, "shape") == 0 ? 2
            : strcmp(key, "data_offsets") == 0 ? 4 : 0;
    if (!bit) return fail(c, "tensor '%s': unknown key '%s'", e->name, key);
    if (seen & bit) return fail(c, "tensor '%s': key '%s' given twice", e->name, key);
    seen |= bit;
    if (bit == 1) {
      if (!parse_string(c, dt, sizeof dt, "dtype")) return 0;
      if (!vt_st_dtype_size(dt)) return fail(c, "tensor '%s': unknown dtype '%s'", e->name, dt);
      memcpy(e->dtype, dt, strlen(dt) + 1);
    } else if (bit == 2) {
      if (!parse_ints(c, e->shape, VT_ST_MAX_DIMS, &e->ndim, "shape")) return 0;
    } else {
      if (!parse_ints(c, off, 2, &n, "data_offsets")) return 0;
      if (n != 2) return fail(c, "tensor '%s': data_offsets must be [begin, end]", e->name);
      e->begin = off[0], e->end = off[1];
    }
  }
  c->p++;
  if (seen != 7)
    return fail(c, "tensor '%s' lacks %s", e->name,
                !(seen & 1) ? "a dtype" : !(seen & 2) ? "a shape" : "data_offsets");
  return 1;
}

// The "__metadata__" object: string -> string. The strings go to the arena, which is as long as
// the header: a decoded string plus its NUL is never longer than its quoted JSON form.
static int parse_meta(cursor *c, vt_st_file *f, size_t *used, size_t arena_cap) {
  if (!expect(c, '{', "for __metadata__")) return 0;
  int cap = 0;
  while (peek(c) != '}') {
    if (f->n_meta_ && !expect(c, ',', "between metadata entries")) return 0;
    if (f->n_meta_ == cap) {
      if (cap >= VT_ST_MAX_TENSORS) return fail(c, "more than %d metadata entries", cap);
      cap = cap ? 2 * cap : 16;
      char **m = realloc(f->meta_, sizeof(char *) * 2 * (size_t)cap);
      if (!m) return fail(c, "out of memory for the metadata");
      f->meta_ = m;
    }
    for (int i = 0; i < 2; i++) {
      char *s = f->arena_ + *used;
      if (i && peek(c) != '"') return fail(c, "__metadata__ values must be strings");
      if (!parse_string(c, s, arena_cap - *used, i ? "a metadata value" : "a metadata key") ||
          (!i && !expect(c, ':', "after a metadata key")))
        return 0;
      f->meta_[2 * f->n_meta_ + i] = s;
      *used += strlen(s) + 1;
    }
    f->n_meta_++;
  }
  c->p++;
  return 1;
}

// The whole header: { name: entry | "__metadata__": {..}, ... } then only whitespace (writers
// pad with spaces to align the data).
static int parse_header(cursor *c, vt_st_file *f) {
  size_t used = 0, arena_cap = (size_t)(c->end - c->start) + 1;
  int cap = 0, seen_meta = 0;
  f->arena_ = malloc(arena_cap);
  if (!f->arena_) return fail(c, "out of memory for the header");
  if (peek(c) != '{') return fail(c, "the header does not start with '{' (not a safetensors file?)");
  c->p++;
  while (peek(c) != '}') {
    char name[VT_ST_MAX_NAME];
    if ((f->count || seen_meta) && !expect(c, ',', "between tensors")) return 0;
    if (!parse_string(c, name, sizeof name, "a tensor name") || !expect(c, ':', "after a name"))
      return 0;
    if (strcmp(name, "__metadata__") == 0) {
      if (seen_meta) return fail(c, "__metadata__ given twice");
      seen_meta = 1;
      if (peek(c) == 'n' && c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;  // the reference reads null as no metadata
        continue;
      }
      if (!parse_meta(c, f, &used, arena_cap)) return 0;
      continue;
    }
    if (f->count == cap) {
      if (cap >= VT_ST_MAX_TENSORS) return fail(c, "more than %d tensors", cap);
      cap = cap ? 2 * cap : 16;
      vt_st_entry *e = realloc(f->entries, sizeof *e * (size_t)cap);
      if (!e) return fail(c, "out of memory for %d tensors", cap);
      f->entries = e;
    }
    vt_st_entry *e = &f->entries[f->count++];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, sizeof name);
    if (!parse_entry(c, e)) return 0;
  }
  c->p++;
  if (peek(c) >= 0) return fail(c, "unexpected bytes after the header's closing '}'");
  return 1;
}

// ---- reader: checks across tensors ------------------------------------------------------------
static int by_offset(const void *a, const void *b) {
  const vt_st_entry *x = *(vt_st_entry *const *)a, *y = *(vt_st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}
static int by_name(const void *a, const void *b) {
  return strcmp((*(vt_st_entry *const *)a)->name, (*(vt_st_entry *const *)b)->name);
}
static int by_key(const void *a, const void *b) {  // metadata pairs: char *[2]
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Sizes against offsets, offsets against the data section (covered exactly, as the reference
// implementation requires: sorted by offset, no gap, no overlap, ending at the end), names and
// metadata keys unique. Leaves by_name_ sorted for vt_st_find.
static vt_status validate(vt_st_file *f, const char *what, char *err, size_t errlen) {
  for (int i = 0; i < f->count; i++) {
    const vt_st_entry *e = &f->entries[i];
    int64_t bytes = vt_st_dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++) {
      if (e->shape[d] > 0 && bytes > INT64_MAX / e->shape[d])
        return vt_st_refuse(err, errlen, what, "tensor '%s': shape's byte size overflows", e->name);
      bytes *= e->shape[d];
    }
    if (e->begin > e->end)
      return vt_st_refuse(err, errlen, what, "tensor '%s': data_offsets [%lld, %lld] begin after they "
                    "end", e->name, (long long)e->begin, (long long)e->end);
    if (e->end > f->data_nbytes)
      return vt_st_refuse(err, errlen, what, "tensor '%s': data_offsets [%lld, %lld] extend past the "
                    "data section of %lld bytes (truncated file?)", e->name, (long long)e->begin,
                    (long long)e->end, (long long)f->data_nbytes);
    if (e->end - e->begin != bytes)
      return vt_st_refuse(err, errlen, what, "tensor '%s': its %s shape needs %lld bytes but "
                    "data_offsets [%lld, %lld] hold %lld", e->name, e->dtype, (long long)bytes,
                    (long long)e->begin, (long long)e->end, (long long)(e->end - e->begin));
  }
  f->by_name_ = malloc(sizeof *f->by_name_ * ((size_t)f->count + 1));
  if (!f->by_name_) return vt_st_refuse(err, errlen, what, "out of memory for %d tensors", f->count);
  for (int i = 0; i < f->count; i++) f->by_name_[i] = &f->entries[i];
  qsort(f->by_name_, (size_t)f->count, sizeof *f->by_name_, by_name);
  for (int i = 1; i < f->count; i++)
    if (strcmp(f->by_name_[i - 1]->name, f->by_name_[i]->name) == 0)
      return vt_st_refuse(err, errlen, what, "duplicate tensor name '%s'", f->by_name_[i]->name);
  qsort(f->by_name_, (size_t)f->count, sizeof *f->by_name_, by_offset);
  int64_t pos = 0;
  for (int i = 0; i < f->count; i++) {
    const vt_st_entry *e = f->by_name_[i];
    if (e->begin < pos)
      return vt_st_refuse(err, errlen, what, "tensor '%s' at [%lld, %lld] overlaps tensor '%s' ending at "
                    "%lld", e->name, (long long)e->begin, (long long)e->end,
                    f->by_name_[i - 1]->name, (long long)pos);
    if (e->begin > pos)
      return vt_st_refuse(err, errlen, what, "a gap of %lld bytes before tensor '%s' at %lld: the "
                    "tensors must cover the data section", (long long)(e->begin - pos), e->name,
                    (long long)pos);
    pos = e->end;
  }
  if (pos != f->data_nbytes)
    return vt_st_refuse(err, errlen, what, "the tensors cover %lld bytes but the data section holds "
                  "%lld (trailing bytes)", (long long)pos, (long long)f->data_nbytes);
  qsort(f->by_name_, (size_t)f->count, sizeof *f->by_name_, by_name);  // for vt_st_find
  if (f->n_meta_) qsort(f->meta_, (size_t)f->n_meta_, 2 * sizeof(char *), by_key);
  for (int i = 1; i < f->n_meta_; i++)
    if (strcmp(f->meta_[2 * i - 2], f->meta_[2 * i]) == 0)
      return vt_st_refuse(err, errlen, what, "duplicate metadata key '%.100s'", f->meta_[2 * i]);
  return VT_OK;
}

// The 8-byte length against the cap and the file (size bytes in all).

// Parses and validates the header text into f; data_nbytes is what follows the header.
vt_status vt_st_read_header(const char *hdr, size_t hlen, int64_t data_nbytes, const char *what,
                             vt_st_file *f, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  cursor c = {hdr, hdr, hdr + hlen, what, err, errlen};
  f->data_nbytes = data_nbytes;
  if (!parse_header(&c, f)) return VT_ERR_INPUT;
  return validate(f, what, err, errlen);
}
