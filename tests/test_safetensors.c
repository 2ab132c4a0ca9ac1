// test_safetensors.c (label ckpt): the safetensors writer and reader round trip (F32, I32, odd
// names, metadata), the layout without data (the written file's head and offsets), then one
// check per damaged or hostile file, each refused with its message.
// `test_safetensors --seeds DIR` writes fuzzing seeds instead. Needs only dataio/safetensors.c:
// no MPI, backend or model.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "vt_check.h"


static char dir[512];

static const char *path_of(const char *name) {
  static char p[4][700];
  static int k = 0;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
    printf("FAIL: cannot write %s\n", path);
    exit(1);
  }
}

// malloc that ends the test on failure (the checks below write into what it returns).
static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) {
    fprintf(stderr, "test_safetensors: out of memory for %zu bytes\n", n);
    exit(1);
  }
  return p;
}

static uint8_t *load(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = xmalloc(*n + 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}

// A file of an 8-byte length, the header text and ndata bytes (0x11); hlen < 0 means the true one.
static size_t make_raw(uint8_t *out, const char *hdr, long long hlen, size_t ndata) {
  size_t h = strlen(hdr);
  uint64_t len = hlen < 0 ? (uint64_t)h : (uint64_t)hlen;
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(len >> (8 * i));
  memcpy(out + 8, hdr, h);
  memset(out + 8 + h, 0x11, ndata);
  return 8 + h + ndata;
}

// The file must be refused, from disk and from memory alike, with status st and a message that
// names the file and contains want; and the vt_st_file must be left empty.
static void refused_bytes(const char *name, const uint8_t *b, size_t n, const char *want) {
  const char *path = path_of(name);
  char err[512] = "";
  vt_st_file f;
  write_bytes(path, b, n);
  vt_status st = vt_safetensors_read(path, &f, err, sizeof err);
  EXPECT(st == VT_ERR_INPUT && strstr(err, want) && strstr(err, path),
         "%s: status %d, message '%s', wanted '%s'", name, st, err, want);
  EXPECT(f.count == 0 && !f.entries && !f.data, "%s: f not left empty", name);
  err[0] = 0;
  st = vt_safetensors_parse(b, n, &f, err, sizeof err);
  EXPECT(st == VT_ERR_INPUT && strstr(err, want) && strstr(err, "<memory>"),
         "%s (memory): status %d, message '%s', wanted '%s'", name, st, err, want);
  vt_safetensors_close(&f);
}

static void refused_header(const char *name, const char *hdr, size_t ndata, const char *want) {
  size_t cap = strlen(hdr) + ndata + 16;
  uint8_t *b = xmalloc(cap);
  refused_bytes(name, b, make_raw(b, hdr, -1, ndata), want);
  free(b);
}

static int accepted_header(const char *hdr, size_t ndata, int count) {
  uint8_t b[4096];
  vt_st_file f;
  char err[512] = "";
  vt_status st = vt_safetensors_parse(b, make_raw(b, hdr, -1, ndata), &f, err, sizeof err);
  int ok = st == VT_OK && f.count == count;
  EXPECT(ok, "header %s refused: %s", hdr, err);
  vt_safetensors_close(&f);
  return ok;
}

// The tensors of the round trip, with names the writer must escape.
static float w1[12], w2[6], scalar = 3.5f;
static int32_t labels[5] = {1, -2, 3, 2147483647, -2147483647 - 1};
static const vt_st_tensor tensors[] = {
    {"blocks.0.attn.qkv.weight", "F32", 2, {3, 4}, w1},
    {"labels", "I32", 1, {5}, labels},
    {"quote\" back\\slash", "F32", 3, {1, 2, 3}, w2},
    {"gr\xc3\xb6\xc3\x9f" "e", "F32", 0, {0}, &scalar},
    {"empty", "F32", 2, {0, 7}, NULL},
};
static const int ntensors = sizeof tensors / sizeof tensors[0];
static const char *const meta[] = {"format", "pt", "step", "10", "odd \"key\"", "tab\tnl\n\\"};

static void check_same(const vt_st_file *f, const char *how, int with_meta) {
  EXPECT(f->count == ntensors, "%s: %d tensors", how, f->count);
  for (int i = 0; i < ntensors; i++) {
    const vt_st_tensor *t = &tensors[i];
    const vt_st_entry *e = vt_st_find(f, t->name);
    EXPECT(e != NULL, "%s: '%s' not found", how, t->name);
    if (!e) continue;
    int64_t n = 1;
    EXPECT(strcmp(e->dtype, t->dtype) == 0 && e->ndim == t->ndim, "%s: '%s' dtype/ndim", how,
           t->name);
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    for (int d = 0; d < t->ndim && d < e->ndim; d++)
      EXPECT(e->shape[d] == t->shape[d], "%s: '%s' dim %d", how, t->name, d);
    EXPECT(e->end - e->begin == 4 * n, "%s: '%s' byte size", how, t->name);
    EXPECT((uintptr_t)vt_st_data(f, e) % 4 == 0, "%s: '%s' data not aligned", how, t->name);
    EXPECT(n == 0 || memcmp(vt_st_data(f, e), t->data, (size_t)(4 * n)) == 0,
           "%s: '%s' data differs", how, t->name);
  }
  EXPECT(vt_st_find(f, "absent") == NULL && vt_st_find(f, "") == NULL, "%s: found absent", how);
  for (int i = 0; i < 3; i++) {
    const char *v = vt_st_metadata(f, meta[2 * i]);
    EXPECT(with_meta ? v && strcmp(v, meta[2 * i + 1]) == 0 : v == NULL, "%s: metadata %s", how,
           meta[2 * i]);
  }
  EXPECT(vt_st_metadata(f, "absent") == NULL, "%s: absent metadata found", how);
}

static void round_trip(void) {
  for (int i = 0; i < 12; i++) w1[i] = (float)i * 0.25f - 1.0f;
  for (int i = 0; i < 6; i++) w2[i] = 1e-30f * (float)(i + 1);
  char err[512] = "";
  vt_st_file f;
  const char *p = path_of("round.safetensors"), *q = path_of("plain.safetensors");
  vt_status st = vt_safetensors_write_meta(p, tensors, ntensors, meta, 3, err, sizeof err);
  EXPECT(st == VT_OK, "write_meta: %s", err);
  st = vt_safetensors_read(p, &f, err, sizeof err);
  EXPECT(st == VT_OK, "read: %s", err);
  if (st == VT_OK) check_same(&f, "file", 1);
  vt_safetensors_close(&f);
  size_t n = 0;
  uint8_t *b = load(p, &n);
  EXPECT(b && n % 8 == 0 && (b[0] | b[1] << 8) % 8 == 0, "data section not 8-aligned");
  st = vt_safetensors_parse(b, n, &f, err, sizeof err);
  free(b);  // the parse copied: f outlives the bytes
  EXPECT(st == VT_OK, "parse: %s", err);
  if (st == VT_OK) check_same(&f, "memory", 1);
  vt_safetensors_close(&f);
  vt_safetensors_close(&f);  // harmless twice
  st = vt_safetensors_write(q, tensors, ntensors, err, sizeof err);
  EXPECT(st == VT_OK, "write: %s", err);
  st = vt_safetensors_read(q, &f, err, sizeof err);
  EXPECT(st == VT_OK, "read plain: %s", err);
  if (st == VT_OK) check_same(&f, "plain", 0);
  vt_safetensors_close(&f);
  // Opened lazily: the header only, then each tensor read on its own: the same bytes, counted;
  // a file cut after the open gives VT_ERR_IO naming the tensor.
  const char *lazy = path_of("lazy.safetensors");
  st = vt_safetensors_write_meta(lazy, tensors, ntensors, meta, 3, err, sizeof err);
  EXPECT(st == VT_OK, "write lazy: %s", err);
  st = vt_safetensors_open(lazy, &f, err, sizeof err);
  EXPECT(st == VT_OK && vt_st_bytes_read(&f) == 0, "open: %s", err);
  for (int i = 0; st == VT_OK && i < ntensors; i++) {
    const vt_st_entry *e = vt_st_find(&f, tensors[i].name);
    float got[16];
    EXPECT(e && vt_st_data(&f, e) == NULL && e->end - e->begin <= (int64_t)sizeof got &&
               vt_st_read(&f, e, got, err, sizeof err) == VT_OK &&
               (e->end == e->begin ||  // (the empty tensor's data is NULL)
                memcmp(got, tensors[i].data, (size_t)(e->end - e->begin)) == 0),
           "lazy read of %s: %s", tensors[i].name, err);
  }
  EXPECT(vt_st_bytes_read(&f) == f.data_nbytes, "lazy reads counted %lld of %lld bytes",
         (long long)vt_st_bytes_read(&f), (long long)f.data_nbytes);
  vt_safetensors_close(&f);
  st = vt_safetensors_open(lazy, &f, err, sizeof err);
  if (st == VT_OK) {
    const vt_st_entry *last = &f.entries[0];  // the one that ends the data section
    for (int i = 1; i < f.count; i++)
      if (f.entries[i].end > last->end) last = &f.entries[i];
    EXPECT(truncate(lazy, (off_t)(f.data_off_ + last->begin + 2)) == 0, "truncate");
    float got[16];
    st = vt_st_read(&f, last, got, err, sizeof err);
    EXPECT(st == VT_ERR_IO && strstr(err, last->name) && strstr(err, "shorter"),
           "a file cut after the open: %d %s", st, err);
  }
  vt_safetensors_close(&f);
  st = vt_safetensors_write(path_of("none.safetensors"), NULL, 0, err, sizeof err);
  EXPECT(st == VT_OK && vt_safetensors_read(path_of("none.safetensors"), &f, err, sizeof err) ==
                            VT_OK && f.count == 0, "no tensors: %s", err);
  vt_safetensors_close(&f);
}

// The writer refuses what the reader would refuse, and leaves no file behind.
// The layout of the round trip's tensors, their data left out, is the written file's: the same
// head bytes (length and padded header) and each tensor's data at its offset; refusals as the
// writer's, except a tensor without data.
static void layout(void) {
  char err[512] = "";
  vt_st_tensor bare[sizeof tensors / sizeof tensors[0]];
  memcpy(bare, tensors, sizeof bare);
  for (int i = 0; i < ntensors; i++) bare[i].data = NULL;
  vt_st_layout l;
  vt_status st = vt_safetensors_layout("mem", bare, ntensors, meta, 3, &l, err, sizeof err);
  EXPECT(st == VT_OK, "layout: %s", err);
  if (st != VT_OK) return;
  size_t n = 0;
  uint8_t *b = load(path_of("round.safetensors"), &n);
  EXPECT(b && (int64_t)n == l.file_nbytes && memcmp(b, l.head, (size_t)l.head_nbytes) == 0,
         "layout: %lld bytes and a head of %lld, the file %zu", (long long)l.file_nbytes,
         (long long)l.head_nbytes, n);
  for (int i = 0; b && i < ntensors; i++) {
    int64_t count = 1;
    for (int d = 0; d < tensors[i].ndim; d++) count *= tensors[i].shape[d];
    EXPECT(l.offset[i] >= l.head_nbytes && l.offset[i] + 4 * count <= (int64_t)n &&
               (count == 0 || memcmp(b + l.offset[i], tensors[i].data, (size_t)(4 * count)) == 0),
           "layout: tensor '%s' is not at offset %lld", tensors[i].name, (long long)l.offset[i]);
  }
  free(b);
  vt_st_layout_free(&l);
  bare[0].ndim = 5;
  EXPECT(vt_safetensors_layout("mem", bare, 1, NULL, 0, &l, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "ndim"), "layout of a 5-d tensor: %s", err);
}

static void writer_refusals(void) {
  char longname[200], bad_utf8[] = "a\xff", err[512];
  memset(longname, 'x', sizeof longname - 1), longname[sizeof longname - 1] = 0;
  struct {
    vt_st_tensor t[2];
    int n;
    const char *want;
  } cases[] = {
      {{{longname, "F32", 1, {1}, w1}}, 1, "longer than 127"},
      {{{"a", "F32", 1, {1}, w1}, {"a", "I32", 1, {1}, labels}}, 2, "duplicate tensor name"},
      {{{"a", "F64", 1, {1}, w1}}, 1, "dtype is not F32"},
      {{{"a", "F32", 1, {-1}, w1}}, 1, "negative dimension"},
      {{{"a", "F32", 5, {1}, w1}}, 1, "ndim"},
      {{{bad_utf8, "F32", 1, {1}, w1}}, 1, "invalid UTF-8"},
      {{{"__metadata__", "F32", 1, {1}, w1}}, 1, "reserved"},
      {{{"a", "F32", 1, {1}, NULL}}, 1, "no data"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *p = path_of("refused.safetensors");
    remove(p);
    err[0] = 0;
    vt_status st = vt_safetensors_write(p, cases[i].t, cases[i].n, err, sizeof err);
    FILE *f = fopen(p, "rb");
    EXPECT(st == VT_ERR_INPUT && strstr(err, cases[i].want) && strstr(err, p) && !f,
           "writer case %zu: %d '%s'", i, st, err);
    if (f) fclose(f);
  }
  const char *dup[] = {"k", "1", "k", "2"};
  vt_status st = vt_safetensors_write_meta(path_of("m.safetensors"), tensors, 1, dup, 2, err,
                                           sizeof err);
  EXPECT(st == VT_ERR_INPUT && strstr(err, "duplicate metadata key"), "dup meta: '%s'", err);
  st = vt_safetensors_write(path_of("no/such/dir/x.safetensors"), tensors, 1, err, sizeof err);
  EXPECT(st == VT_ERR_IO && strstr(err, "cannot create"), "unwritable: %d '%s'", st, err);
}

#define T(name, shape, off) "\"" name "\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" off "}"
static const char *good_hdr = "{" T("a", "[2]", "[0,8]") "," T("b", "[1,1]", "[8,12]") "}";

static void damaged_files(void) {
  // Truncations of a valid file: inside the length, inside the header, inside the data.
  size_t n = 0;
  uint8_t *b = load(path_of("round.safetensors"), &n), *c = xmalloc(n + 64);
  size_t hlen = (size_t)(b[0] | b[1] << 8 | b[2] << 16);
  refused_bytes("empty", b, 0, "0 bytes is too short");
  refused_bytes("cut_in_length", b, 5, "5 bytes is too short");
  refused_bytes("cut_after_length", b, 8, "header length");
  refused_bytes("cut_in_header", b, 8 + hlen / 2, "truncated, or not a safetensors file");
  refused_bytes("cut_after_header", b, 8 + hlen, "extend past the data section");
  refused_bytes("cut_in_data", b, n - 3, "extend past the data section");
  refused_bytes("cut_last_byte", b, n - 1, "extend past the data section");
  // The length lies: too big, huge, too small, a little off either way.
  memcpy(c, b, n);
  c[0] = (uint8_t)(hlen + 8), c[1] = (uint8_t)((hlen + 8) >> 8);
  refused_bytes("length_plus_8", c, n, "unexpected bytes after the header");
  c[0] = (uint8_t)(hlen - 8), c[1] = (uint8_t)((hlen - 8) >> 8);
  refused_bytes("length_minus_8", c, n, "bad header");
  memcpy(c, b, n);
  c[7] = 0x80;
  refused_bytes("length_huge", c, n, "exceeds the 100000000-byte cap");
  c[7] = 0, c[3] = 0x10;  // 268 MB: over the cap though under 2^32
  refused_bytes("length_over_cap", c, n, "exceeds the");
  c[3] = 0, c[0] = (uint8_t)(n - 7), c[1] = (uint8_t)((n - 7) >> 8), c[2] = 0;
  refused_bytes("length_past_end", c, n, "is larger than the");
  memset(c, 0, 8), c[0] = 1;
  refused_bytes("length_one", c, n, "too small for a JSON object");
  free(b);
  // Not safetensors at all: a PNG, a text file.
  const uint8_t png[] = {0x89, 'P', 'N', 'G', 13, 10, 26, 10, 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  refused_bytes("image.png", png, sizeof png, "not a safetensors file");
  const char *text = "hello, these are not tensors at all\n";
  refused_bytes("notes.txt", (const uint8_t *)text, strlen(text), "not a safetensors file");
  // A header length that fits, but the header is not ours.
  size_t k = make_raw(c, "[1,2,3,4]", -1, 0);
  refused_bytes("array_header", c, k, "does not start with '{'");
  k = make_raw(c, "PK\3\4{}", -1, 0);
  refused_bytes("zip_header", c, k, "does not start with '{'");
  free(c);

  // Malformed JSON.
  refused_header("unclosed", "{" T("a", "[1]", "[0,4]"), 4, "header ends");
  refused_header("trailing_comma", "{" T("a", "[1]", "[0,4]") ",}", 4, "expected '\"'");
  refused_header("single_quotes", "{'a':{}}", 0, "expected '\"'");
  refused_header("unterminated", "{\"abc", 0, "not terminated");
  refused_header("missing_colon", "{\"a\" {}}", 0, "expected ':'");
  refused_header("missing_comma", "{" T("a", "[1]", "[0,4]") T("b", "[1]", "[4,8]") "}", 8,
                 "expected ','");
  refused_header("bad_escape", "{\"a\\q\":{}}", 0, "invalid escape");
  refused_header("bad_u_escape", "{\"a\\u12g4\":{}}", 0, "bad \\u escape");
  refused_header("control_char", "{\"a\tb\":{}}", 0, "control byte");
  refused_header("bad_utf8", "{\"a\xc0\xaf\":{}}", 0, "invalid UTF-8");
  refused_header("nul_escape", "{\"a\\u0000b\":{}}", 0, "\\u0000 is not allowed");
  refused_header("lone_surrogate", "{\"a\\ud800\":{}}", 0, "unpaired surrogate");
  refused_header("trailing_bytes", "{} x", 0, "unexpected bytes after the header");
  refused_header("two_objects", "{}{}", 0, "unexpected bytes after the header");
  refused_header("not_object", "{\"a\":5}", 0, "expected '{'");
  refused_header("float_dim", "{" T("a", "[1.0]", "[0,4]") "}", 4, "not an integer");
  refused_header("exp_dim", "{" T("a", "[1e0]", "[0,4]") "}", 4, "not an integer");
  refused_header("leading_zero", "{" T("a", "[01]", "[0,4]") "}", 4, "leading zero");
  refused_header("string_dim", "{" T("a", "[\"1\"]", "[0,4]") "}", 4, "non-negative integer");
  refused_header("huge_number", "{" T("a", "[99999999999999999999]", "[0,4]") "}", 4,
                 "integer too large");
  refused_header("negative_dim", "{" T("a", "[-1]", "[0,4]") "}", 4, "shape: negative");
  refused_header("negative_offset", "{" T("a", "[1]", "[-4,0]") "}", 4, "negative");
  refused_header("nine_dims", "{" T("a", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, "more than 8");
  refused_header("three_offsets", "{" T("a", "[1]", "[0,4,8]") "}", 4, "more than 2");
  refused_header("one_offset", "{" T("a", "[1]", "[4]") "}", 4, "must be [begin, end]");
  refused_header("unknown_key", "{\"a\":{\"dtype\":\"F32\",\"offsets\":[0,4]}}", 4,
                 "unknown key 'offsets'");
  refused_header("key_twice", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 4, "given twice");
  refused_header("no_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks data_offsets");
  refused_header("no_dtype", "{\"a\":{}}", 0, "lacks a dtype");
  refused_header("meta_not_object", "{\"__metadata__\":\"x\"}", 0, "expected '{'");
  refused_header("meta_nul", "{\"__metadata__\":nul}", 0, "expected '{'");
  refused_header("meta_number", "{\"__metadata__\":{\"k\":1}}", 0, "must be strings");
  refused_header("meta_nested", "{\"__metadata__\":{\"k\":{\"k\":\"v\"}}}", 0, "must be strings");
  refused_header("meta_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "given twice");
  refused_header("meta_dup_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
                 "duplicate metadata key 'k'");
  // Deep nesting is refused at the first level the shape does not allow: no recursion, no stack.
  enum { DEEP = 200000 };
  char *deep = xmalloc(DEEP + 64);
  strcpy(deep, "{\"a\":");
  memset(deep + 5, '[', DEEP), deep[DEEP + 5] = 0;
  refused_header("deep_value", deep, 0, "expected '{'");
  memset(deep, '[', DEEP), deep[DEEP] = 0;
  refused_header("deep_top", deep, 0, "does not start with '{'");
  strcpy(deep, "{\"a\":{\"shape\":");
  memset(deep + 14, '[', DEEP), deep[DEEP + 14] = 0;
  refused_header("deep_shape", deep, 0, "non-negative integer");
  free(deep);

  // Well-formed JSON that lies about the tensors.
  refused_header("wrong_dtype", "{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 4, "unknown dtype 'F31'");
  refused_header("long_dtype",
                 "{\"a\":{\"dtype\":\"FLOAT32_BUT_MUCH_LONGER_THAN_ANY\",\"shape\":[1]}}", 4,
                 "dtype is longer");
  refused_header("size_mismatch", "{" T("a", "[2,2]", "[0,12]") "}", 12, "needs 16 bytes");
  refused_header("shape_overflow", "{" T("a", "[4611686018427387904,4]", "[0,4]") "}", 4,
                 "overflows");
  refused_header("offsets_outside", "{" T("a", "[250]", "[0,1000]") "}", 16, "extend past");
  refused_header("begin_after_end", "{" T("a", "[1]", "[8,4]") "}", 8, "begin after they end");
  refused_header("overlap", "{" T("a", "[2]", "[0,8]") "," T("b", "[2]", "[4,12]") "}", 12,
                 "overlaps tensor 'a'");
  refused_header("same_range", "{" T("a", "[1]", "[0,4]") "," T("b", "[1]", "[0,4]") "}", 4,
                 "overlaps");
  refused_header("gap", "{" T("a", "[1]", "[0,4]") "," T("b", "[1]", "[8,12]") "}", 12, "a gap");
  refused_header("not_from_zero", "{" T("a", "[1]", "[4,8]") "}", 8, "a gap of 4 bytes");
  refused_header("trailing_data", "{" T("a", "[1]", "[0,4]") "}", 8, "trailing bytes");
  refused_header("duplicate_name", "{" T("a", "[1]", "[0,4]") "," T("a", "[1]", "[4,8]") "}", 8,
                 "duplicate tensor name 'a'");
  char longname[300];
  snprintf(longname, sizeof longname, "{\"%0200d\":{}}", 7);
  refused_header("long_name", longname, 0, "longer than 127 bytes");

  // What the format allows must still pass: padding, any order, empty and scalar tensors,
  // escaped names equal to their plain spelling, other dtypes.
  accepted_header("{}", 0, 0);
  accepted_header(" \r\n{ }\n\t  ", 0, 0);  // JSON whitespace anywhere, as the reference reads it
  accepted_header(good_hdr, 12, 2);
  accepted_header("{" T("b", "[1]", "[4,8]") ",\n " T("a", "[1]", "[0,4]") "}", 8, 2);
  accepted_header("{" T("e", "[0,5]", "[0,0]") "," T("s", "[]", "[0,4]") "," T("z", "[0]",
                  "[4,4]") "}", 4, 3);
  accepted_header("{\"__metadata__\":null}", 0, 0);
  accepted_header("{\"__metadata__\":{},\"h\":{\"data_offsets\":[0,6],\"shape\":[3],\"dtype\":"
                  "\"BF16\"},\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[6,14]}}",
                  14, 2);
  uint8_t buf[256];
  vt_st_file f;
  char err[256];
  vt_status st = vt_safetensors_parse(buf, make_raw(buf, "{\"\\u00e9\\ud83d\\ude00\\\"\":{\"dtype\""
                                      ":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", -1, 2),
                                      &f, err, sizeof err);
  EXPECT(st == VT_OK && vt_st_find(&f, "\xc3\xa9\xf0\x9f\x98\x80\""), "escaped name: %s", err);
  vt_safetensors_close(&f);

  // Files that cannot be read at all are I/O errors, not refusals.
  st = vt_safetensors_read(path_of("does_not_exist"), &f, err, sizeof err);
  EXPECT(st == VT_ERR_IO && strstr(err, "cannot open"), "missing file: %d '%s'", st, err);
  st = vt_safetensors_read(dir, &f, err, sizeof err);
  EXPECT(st == VT_ERR_IO && strstr(err, "not a regular file"), "directory: %d '%s'", st, err);
}

// Seeds for fuzz_safetensors: whole files, and bare headers (the target also parses its input
// as a header with an empty data section).
static int write_seeds(const char *to) {
  char err[512];
  snprintf(dir, sizeof dir, "%s", to);
  mkdir(dir, 0777);
  round_trip();
  const char *hdrs[] = {"{}", good_hdr,
                        "{\"__metadata__\":{\"format\":\"pt\",\"a\\\"b\":\"\\u00e9\\ud83d\\ude00\"},"
                        "\"x\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]}}"};
  uint8_t b[1024];
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "header_%d.json", i);
    write_bytes(path_of(name), hdrs[i], strlen(hdrs[i]));
    snprintf(name, sizeof name, "raw_%d.safetensors", i);
    write_bytes(path_of(name), b, make_raw(b, hdrs[i], -1, i == 1 ? 12 : 0));
  }
  vt_st_file f;
  if (vt_safetensors_read(path_of("round.safetensors"), &f, err, sizeof err) != VT_OK) {
    printf("FAIL: seed does not read back: %s\n", err);
    return 1;
  }
  vt_safetensors_close(&f);
  printf("seeds written to %s\n", dir);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--seeds") == 0) return write_seeds(argv[2]);
  snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : "test_safetensors_work");
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    printf("FAIL: cannot create %s\n", dir);
    return 1;
  }
  round_trip();
  layout();
  writer_refusals();
  damaged_files();
  printf("%s: %d checks, %d failures\n", failures ? "FAIL" : "PASS", checks, failures);
  return failures ? 1 : 0;
}
