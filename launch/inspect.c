// inspect.c: `vit3d inspect DIR` (inspect.h). A resume must repeat the model flags of the run
// that saved the checkpoint (the manifest refuses others): this prints them from the manifest.
#include "inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#include "checkpoint.h"

int vt_inspect_run(const char *path) {
  char dir[1100], err[1200], latest[1200];
  vt_ckpt_manifest m;
  struct stat sb;
  snprintf(latest, sizeof latest, "%s/manifest.txt", path);
  if (stat(latest, &sb) == 0) {  // a checkpoint itself
    snprintf(dir, sizeof dir, "%s", path);
    if (vt_ckpt_verify(dir, &m, err, sizeof err) != VT_OK) {
      fprintf(stderr, "vit3d inspect: %s\n", err);
      return 1;
    }
  } else if (vt_ckpt_find_latest(path, dir, sizeof dir, &m) != VT_OK) {
    fprintf(stderr, "vit3d inspect: %s holds no complete checkpoint (neither a manifest.txt nor "
                    "a step-N folder that verifies)\n", path);
    return 1;
  }
  printf("checkpoint %s: %d files, sizes and CRC-32 verified\n", dir, m.nfiles);
  for (int i = 0; i < m.nfiles; i++)
    printf("  %-20s %" PRId64 " bytes\n", m.file[i], m.file_nbytes[i]);
  printf("step %" PRId64 " (%s step %" PRId64 "), data stream position %" PRId64
         " (global batch %" PRId64 "), seed %" PRIu64 "%s\n",
         m.step, m.lamb ? "LAMB" : "AdamW", m.adam_t, m.stream_position, m.global_batch, m.seed,
         vt_ckpt_manifest_lists(&m, "ema.safetensors") ? ", with the weights' EMA" : "");
  printf("saved on tp %d x pp %d x dp %d%s%s (it loads on any mesh)\n", m.tp, m.pp, m.dp,
         m.zero ? ", ZeRO-1" : "", m.sequence_parallel ? ", sequence parallel" : "");
  printf("model: img %d patch %d width %d depth %d heads %d mlp-ratio %g classes %d\n",
         m.img_size, m.patch_size, m.width, m.depth, m.heads, (double)m.mlp_ratio, m.num_classes);
  // The flags the manifest checks on a resume, every one spelt out (any --model preset then
  // has them overridden), then the data stream's.
  char repeats[32] = "";
  if (m.aug_repeats > 1) snprintf(repeats, sizeof repeats, " --aug-repeats %d", m.aug_repeats);
  printf("resume with: --img-size %d --patch-size %d --width %d --depth %d --heads %d "
         "--mlp-ratio %g --num-classes %d --global-pool %s --layer-scale %s --reg-tokens %d "
         "--no-embed-class %d --qk-norm %d --qkv-bias %d --parallel-blocks %d --opt %s "
         "--global-batch-size %" PRId64 " --seed %" PRIu64 "%s --resume %s\n",
         m.img_size, m.patch_size, m.width, m.depth, m.heads, (double)m.mlp_ratio, m.num_classes,
         m.global_pool ? "avg" : "token", m.layer_scale ? "1" : "0", m.reg_tokens,
         m.no_embed_class, m.qk_norm, m.qkv_bias, m.parallel, m.lamb ? "lamb" : "adamw",
         m.global_batch, m.seed, repeats,
         dir);
  if (m.layer_scale)
    printf("  (--layer-scale only has to be positive: the gammas come from the checkpoint)\n");
  return 0;
}
