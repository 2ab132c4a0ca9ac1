// eval.h: evaluation of the validation set on the same mesh: every DP rank takes its share of the
// set, the micro-batches flow forward through the pipeline stages, and the last stage scores
// the logits (loss without label smoothing, top-1, top-5) over the real samples only. An image
// whose file is bad is left out (warned by the rank that decodes it, counted in `bad`) unless
// --bad-image fail stops the run.
#ifndef VT_EVAL_H
#define VT_EVAL_H

#include "data.h"
#include "mesh.h"
#include "model.h"

typedef struct {
  double loss, top1, top5;  // means over the validation set
  int64_t count;            // samples scored
  int64_t bad;              // images left out because their file was bad
  int write_failed;         // 1 where dump or predictions could not be written (every rank)
} vt_eval_result;

// Collective over world. pp is the pipeline comm; me the caller's coordinates. dump (one rank
// only, else NULL): write the inputs, labels and logits of every scored sample there.
// predictions (or NULL, the same on every rank): world rank 0 gathers the scoring ranks' top
// classes and writes a CSV line per image in the set's order, "index,path,label,top1,p1,...,
// top5,p5" (class names, softmax probabilities of the logits scored), through a temporary name
// renamed at the end; the bad images have none.
vt_eval_result vt_evaluate(vt_model *m, vt_data *d, vt_comm *world, vt_comm *pp,
                           vt_mesh_coord me, const char *dump, const char *predictions);

#endif
