// synthetic.h: a deterministic, learnable synthetic image task for tests, benchmarks and the
// quick start. Sample i's label and pixels depend only on (seed, i): any rank or thread that
// asks for sample i gets the same image (design.md, determinism contract).
// Must not depend on MPI, a backend or the model.
#ifndef VT_SYNTHETIC_H
#define VT_SYNTHETIC_H

#include <stdint.h>

// Writes image (3, S, S), roughly zero-mean unit-scale, and its label in [0, K). Each class is
// a smooth pattern (a few oriented waves per channel, keyed by (seed, class)); each sample adds
// its own noise and a random brightness, so a model must learn the pattern to classify.
void vt_synthetic_sample(uint64_t seed, int64_t index, int S, int K, float *image,
                         int32_t *label);

// The label of sample i alone (the last pipeline stage needs labels, not pixels).
int32_t vt_synthetic_label(uint64_t seed, int64_t index, int K);

#endif
