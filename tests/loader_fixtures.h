// loader_fixtures.h: what the two data test programs share (test_loader.c, the sampler and the
// threaded loader; test_dataset.c, the dataset index): the check counters, a temporary root and
// paths under it, PNG and other files, ImageFolder trees, and loader runs gathered into arrays.
// Test code only; needs libpng (VT_HAVE_PNG) and dataio's headers, nothing else.
#ifndef VT_LOADER_FIXTURES_H
#define VT_LOADER_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "loader.h"

// The programs share the counters with this file (defined in loader_fixtures.c).
#define VT_CHECK_SHARED
#include "vt_check.h"

// ---- files -----------------------------------------------------------------------------------

extern char g_root[64];  // the program's temporary root (fx_make_root), removed by fx_finish

void write_png(const char *path, int w, int h, int seed);  // RGB, pixels from x, y and seed
void write_bytes(const char *path, const void *p, size_t n);
// A path under the test's temporary root; a few results stay valid at once.
char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// root/<sub>/<class>/g%02d.png for `per` files per class, sizes varying with the file.
void make_folder(const char *sub, const char *const *classes, int nclass, int per);
void rm_tree(const char *path);

// ---- running loaders -------------------------------------------------------------------------

// nb batches of a loader, images, labels and counts one batch after another.
typedef struct {
  int nb, B, S;
  float *img;
  int32_t *lab;
  int *valid, *bad;
  int64_t *epoch;
  vt_status st;
  char err[640];
} run_t;

// The tests' loader: S 8, batches of 4, seed 1234, bad files skipped.
vt_loader_config base(const vt_dataset *ds, int train, int threads);
run_t run(const vt_loader_config *c, int64_t first, int nb);  // from position `first`
void run_free(run_t *r);
size_t plane_of(const run_t *r);
// Batches ja.. of a and jb.. of b, n of them, hold the same images, labels and bad counts.
int same_batches(const run_t *a, int ja, const run_t *b, int jb, int n);

// ---- a program's start and end ---------------------------------------------------------------

// A fresh root $TMPDIR/<prefix>XXXXXX (or under /tmp) in g_root; 0 (said) when it cannot be made.
int fx_make_root(const char *prefix);
// root/main: classes cat, dog and emu of 10 PNGs each, opened into ds; 0 (said) on failure.
int fx_open_main(vt_dataset *ds);
// Removes the root and says how the program went ("all <what> tests passed"): its exit code.
int fx_finish(const char *what);

#endif
