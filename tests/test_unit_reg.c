// test_unit_reg.c: test_unit's checks of the regularisers' random draws: the drop-path and
// dropout masks (against Philox's numbers and their rates), Mixup/CutMix pair parameters and
// mixing, and random erasing. main() is test_unit.c's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erase.h"
#include "mix.h"
#include "model.h"
#include "test_unit.h"
#include "vt_ops.h"
#include "vt_rng.h"

static int kept(const vt_drop_mask *m, int b) { return (int)(m->keep[b >> 5] >> (b & 31) & 1u); }

void test_drop_path_masks(void) {
  // timm's ramp torch.linspace(0, rate, depth): nothing drops in block 0, rate in the last.
  EXPECT(vt_drop_path_keep(0.2f, 0, 0, 12) == 1.0, "block 0 keeps everything");
  EXPECT(fabs(vt_drop_path_keep(0.2f, 0, 11, 12) - 0.8) < 1e-7, "last block drops at the rate");
  EXPECT(fabs(vt_drop_path_keep(0.2f, 0, 4, 11) - 0.92) < 1e-7, "block 4 of 11 drops 0.08");
  for (int l = 0; l < 12; l++)  // DeiT III's models_v2: [drop_path_rate] * depth
    EXPECT(fabs(vt_drop_path_keep(0.2f, 1, l, 12) - 0.8) < 1e-7, "uniform: block %d at the rate",
           l);
  EXPECT(vt_drop_path_keep(0.2f, 0, 0, 1) == 1.0, "one block: linspace(0, r, 1) = [0]");
  // Bernoulli(keep) per sample: the kept fraction of 4096 samples within 4 sigma, for branches
  // of several blocks; the (layer, branch) streams differ from each other.
  enum { B = VT_DROP_PATH_MAX_SAMPLES };
  static vt_drop_mask m[4], part;
  const double keep = 0.7;
  for (int i = 0; i < 4; i++) {
    vt_drop_path_mask(&m[i], 5, 3 + i / 2, i % 2, keep, 1000, B, 197);
    int n = 0;
    for (int b = 0; b < B; b++) n += kept(&m[i], b);
    const double sigma = sqrt(B * keep * (1 - keep));
    EXPECT(fabs(n - B * keep) < 4 * sigma, "mask %d keeps %d of %d (expected %.0f)", i, n, B,
           B * keep);
    EXPECT(m[i].scale == 1.0f / 0.7f && m[i].rows_per_sample == 197 && m[i].row0 == 0,
           "mask %d: scale %g, rows %lld, row0 %lld", i, m[i].scale,
           (long long)m[i].rows_per_sample, (long long)m[i].row0);
  }
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++)
      EXPECT(memcmp(m[i].keep, m[j].keep, sizeof m[i].keep) != 0, "masks %d and %d equal", i, j);
  // A sample's decision depends on its stream position only: a micro-batch that starts 100
  // positions later sees the same bits shifted, so any split into micro-batches and DP ranks
  // drops the same branches.
  vt_drop_path_mask(&part, 5, 3, 0, keep, 1100, 50, 197);
  int same = 1;
  for (int b = 0; b < 50; b++) same &= kept(&part, b) == kept(&m[0], 100 + b);
  for (int b = 50; b < B; b++) same &= !kept(&part, b);
  EXPECT(same, "a micro-batch at position 1100 disagrees with the same positions at 1000");
}

void test_dropout_masks(void) {
  // vt_dropout_mask_make numbers element (r, c) of a tensor part (sample0 * N + row0 + r) * width
  // + col0 + c; each element is dropped when its uniform of stream (seed, "dropout", site) is
  // below p, which vt_rng_uniform (rng.c) defines. A (40, 26) tensor of 5 samples of 8 tokens,
  // whole, then in 4 parts (rows 0-19 / 20-39 as under sequence parallelism, columns 0-12 /
  // 13-25 as TP's hidden units; numbers not aligned to Philox blocks); the kept fraction of
  // the whole, p 0.25, within 4 sigma.
  const vt_backend *be = vt_backend_get(VT_DEVICE_CPU, NULL);
  enum { R = 40, W = 26, N = 8 };
  static float x[R * W], whole[R * W], part[R * W], sub[R * W];
  for (int i = 0; i < R * W; i++) x[i] = 1.0f + (float)(i % 7);
  const float p = 0.25f;
  const int64_t sample0 = 3000;
  const uint32_t site = vt_dropout_site(2, VT_DROPOUT_HIDDEN);
  vt_dropout_mask m;
  vt_dropout_mask_make(&m, 9, site, p, sample0, N, 0, W, 0);
  EXPECT(m.scale == 1.0f / 0.75f && m.first == sample0 * N * W && site == 8,
         "mask: scale %g, first %lld, site %u", m.scale, (long long)m.first, site);
  vt_dropout(be, whole, x, R, W, &m, 0);
  int dropped = 0, right = 1;
  for (int i = 0; i < R * W; i++) {
    const float u = vt_rng_uniform(9, vt_hash_name("dropout"), site, (uint64_t)(m.first + i));
    right &= whole[i] == (u < p ? 0.0f : x[i] * m.scale);
    dropped += whole[i] == 0.0f;
  }
  EXPECT(right, "dropout's elements are not x * scale where vt_rng_uniform >= p, else 0");
  const double sigma = sqrt(R * W * p * (1 - p));
  EXPECT(fabs(dropped - R * W * p) < 4 * sigma, "dropped %d of %d (expected %.0f)", dropped,
         R * W, R * W * p);
  for (int rh = 0; rh < 2; rh++)
    for (int ch = 0; ch < 2; ch++) {
      vt_dropout_mask pm;
      vt_dropout_mask_make(&pm, 9, site, p, sample0, N, rh * R / 2, W, ch * W / 2);
      for (int r = 0; r < R / 2; r++)
        memcpy(sub + r * W / 2, x + (rh * R / 2 + r) * W + ch * W / 2, W / 2 * sizeof(float));
      vt_dropout(be, sub, sub, R / 2, W / 2, &pm, 0);  // in place
      for (int r = 0; r < R / 2; r++)
        memcpy(part + (rh * R / 2 + r) * W + ch * W / 2, sub + r * W / 2, W / 2 * sizeof(float));
    }
  EXPECT(memcmp(part, whole, sizeof whole) == 0, "the four parts drop other elements than whole");
  // Another site, or the same tokens one micro-batch later, draw other masks.
  vt_dropout_mask other;
  vt_dropout_mask_make(&other, 9, site + 1, p, sample0, N, 0, W, 0);
  vt_dropout(be, part, x, R, W, &other, 0);
  EXPECT(memcmp(part, whole, sizeof whole) != 0, "sites %u and %u drop the same", site, site + 1);
  vt_dropout_mask_make(&other, 9, site, p, sample0 + 5, N, 0, W, 0);
  vt_dropout(be, part, x, R, W, &other, 0);
  EXPECT(memcmp(part, whole, sizeof whole) != 0, "positions 3000 and 3005 drop the same");
}

void test_mix(void) {
  // Mixup alone, alpha 0.8: lam ~ Beta(0.8, 0.8), mean 1/2, variance 1 / (4 (2 alpha + 1)).
  enum { P = 20000, S = 32 };
  vt_mix_config mixup = {.mixup_alpha = 0.8f, .prob = 1, .switch_prob = 0.5f};
  double sum = 0, sumsq = 0;
  for (int64_t k = 0; k < P; k++) {
    vt_mix_pair p;
    vt_mix_pair_params(&mixup, 3, k, S, &p);
    EXPECT(!p.cutmix && p.lam >= 0 && p.lam <= 1, "pair %lld: cutmix %d lam %g", (long long)k,
           p.cutmix, p.lam);
    sum += p.lam, sumsq += (double)p.lam * p.lam;
  }
  const double mean = sum / P, var = sumsq / P - mean * mean, want = 1.0 / (4 * 2.6);
  // standard errors: sqrt(var / P) = 0.0022 for the mean, about 0.0006 for the variance
  EXPECT(fabs(mean - 0.5) < 0.01 && fabs(var - want) < 0.004,
         "Beta(0.8, 0.8): mean %.4f (0.5), variance %.4f (%.4f)", mean, var, want);
  printf("Mixup lam over %d pairs: mean %.4f (Beta: 0.5), variance %.4f (%.4f)\n", P, mean, var,
         want);
  // Both, switch 0.5, prob 0.6: 40% unmixed, the rest half CutMix; CutMix boxes inside the
  // image with lam their exact complement.
  vt_mix_config both = {.mixup_alpha = 0.8f, .cutmix_alpha = 1.0f, .prob = 0.6f,
                        .switch_prob = 0.5f};
  int unmixed = 0, cut = 0, box_ok = 1;
  for (int64_t k = 0; k < P; k++) {
    vt_mix_pair p;
    vt_mix_pair_params(&both, 3, k, S, &p);
    unmixed += p.lam == 1.0f && !p.cutmix;
    if (!p.cutmix) continue;
    cut++;
    const int area = (p.y1 - p.y0) * (p.x1 - p.x0);
    box_ok &= p.y0 >= 0 && p.y0 <= p.y1 && p.y1 <= S && p.x0 >= 0 && p.x0 <= p.x1 &&
              p.x1 <= S && p.lam == (float)(1.0 - area / (double)(S * S));
  }
  EXPECT(fabs(unmixed / (double)P - 0.4) < 0.015 && fabs(cut / (double)P - 0.3) < 0.015 && box_ok,
         "prob 0.6, switch 0.5: %d unmixed, %d CutMix of %d; boxes %s", unmixed, cut, P,
         box_ok ? "ok" : "WRONG");
  // A micro-batch's mixing depends on its stream positions only: positions 100..107 mixed on
  // their own equal the same positions inside a batch from 96; Mixup keeps a pair's sum,
  // CutMix swaps pixels; each target names the partner's label.
  enum { B = 12, n = 3 * S * S };
  static float big[B * n], small[8 * n], raw[B * n];
  int32_t labels[B];
  vt_mix_target tb[B], ts[8];
  for (int i = 0; i < B * n; i++) raw[i] = big[i] = vt_rng_uniform(9, 9, 9, (uint64_t)i);
  for (int b = 0; b < B; b++) labels[b] = b;
  memcpy(small, big + 4 * n, sizeof small);
  vt_mix_batch(&both, 3, 96, B, S, big, labels, tb);
  vt_mix_batch(&both, 3, 100, 8, S, small, labels + 4, ts);
  EXPECT(memcmp(small, big + 4 * n, sizeof small) == 0 && memcmp(ts, tb + 4, sizeof ts) == 0,
         "a micro-batch at position 100 mixes otherwise than the same positions at 96");
  double worst = 0;
  for (int b = 0; b < B; b += 2) {
    EXPECT(tb[b].partner == b + 1 && tb[b + 1].partner == b && tb[b].lam == tb[b + 1].lam,
           "pair %d: partners %d %d", b / 2, tb[b].partner, tb[b + 1].partner);
    for (int i = 0; i < n; i++)
      worst = fmax(worst, fabs((big[b * n + i] + big[(b + 1) * n + i]) -
                               (raw[b * n + i] + raw[(b + 1) * n + i])));
  }
  EXPECT(worst < 1e-6, "mixing changed a pair's pixel sum by %g", worst);
}

void test_erase(void) {
  // Probability 0.25 over 20000 images of 32 x 32: the erased fraction, and every box inside the
  // image with timm's area (2% to 1/3) and aspect ratio (0.3 to 1/0.3) up to the rounding of
  // its sides to whole pixels.
  enum { P = 20000, S = 32 };
  const vt_erase_config c = {.prob = 0.25f, .mode = VT_ERASE_PIXEL};
  int erased = 0, boxes_ok = 1;
  for (int64_t pos = 0; pos < P; pos++) {
    int y0, y1, x0, x1;
    if (!vt_erase_box(&c, 4, pos, S, &y0, &y1, &x0, &x1)) continue;
    erased++;
    const double h = y1 - y0, w = x1 - x0;
    boxes_ok &= y0 >= 0 && y1 <= S && x0 >= 0 && x1 <= S && h >= 1 && w >= 1 &&
                (h - 0.5) * (w - 0.5) <= S * S / 3.0 && (h + 0.5) * (w + 0.5) >= 0.02 * S * S &&
                (h + 0.5) / (w - 0.5) >= 0.3 && (h - 0.5) / (w + 0.5) <= 1 / 0.3;
  }
  EXPECT(fabs(erased / (double)P - 0.25) < 0.01 && boxes_ok, "%d of %d erased; boxes %s", erased,
         P, boxes_ok ? "ok" : "WRONG");
  // Pixel fill: normal values in the box, everything else untouched; a micro-batch at position
  // 100 erases as the same positions inside one at 96.
  enum { B = 12, n = 3 * S * S };
  static float big[B * n], small[4 * n], raw[B * n];
  for (int i = 0; i < B * n; i++) raw[i] = big[i] = 7.0f;  // no normal draw is exactly 7
  memcpy(small, big + 4 * n, sizeof small);
  const vt_erase_config all = {.prob = 1, .mode = VT_ERASE_PIXEL};
  vt_erase_batch(&all, 4, 96, B, S, big);
  vt_erase_batch(&all, 4, 100, 4, S, small);
  EXPECT(memcmp(small, big + 4 * n, sizeof small) == 0,
         "a micro-batch at position 100 erases otherwise than the same positions at 96");
  double sum = 0, sumsq = 0;
  int64_t count = 0, stray = 0;
  for (int b = 0; b < B; b++) {
    int y0, y1, x0, x1;
    const int boxed = vt_erase_box(&all, 4, 96 + b, S, &y0, &y1, &x0, &x1);
    for (int i = 0; i < n; i++) {
      const int y = i / S % S, x = i % S;
      const int in = boxed && y >= y0 && y < y1 && x >= x0 && x < x1;
      if (!in) stray += big[b * n + i] != raw[b * n + i];
      else sum += big[b * n + i], sumsq += (double)big[b * n + i] * big[b * n + i], count++;
    }
  }
  const double mean = sum / count, sd = sqrt(sumsq / count - mean * mean);
  EXPECT(stray == 0 && count > 1000 && fabs(mean) < 0.05 && fabs(sd - 1) < 0.05,
         "pixel fill: %lld values outside the boxes changed; %lld inside, mean %.3f sd %.3f",
         (long long)stray, (long long)count, mean, sd);
}
