// test_manifest.c: the checkpoint directory without MPI or a model: manifest round trip, every
// damaged-manifest case refused with a message naming the problem, the atomic commit (files,
// manifest, `latest`, keep-last with keep-every's milestones), verification catching
// truncated and altered files, and files written in parts by several writers (partfile.h:
// their bytes and their CRC-32 from the writers' shares).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "partfile.h"
#include "vt_check.h"


static vt_ckpt_manifest sample(void) {
  vt_ckpt_manifest m = {.step = 10, .stream_position = 160, .global_batch = 16, .adam_t = 10,
                        .seed = 5, .img_size = 32, .patch_size = 8, .width = 64, .depth = 8,
                        .heads = 8, .num_classes = 10, .mlp_ratio = 4.0f, .tp = 2, .pp = 2,
                        .dp = 2, .class_token = 1, .norm_eps = 1e-6f, .nfiles = 1,
                        .mean = {0.5f, 0.25f, 0.125f}, .std = {0.229f, 0.224f, 0.225f},
                        .eval_crop_pct = 0.9, .eval_squash = 1, .eval_interp = 2};
  snprintf(m.file[0], sizeof m.file[0], "model.safetensors");
  m.file_nbytes[0] = 100, m.file_crc[0] = 0xdeadbeef;
  m.spike_n[0] = 10, m.spike_mean[0] = 2.0 / 3.0, m.spike_var[0] = 1e-3 / 7.0;
  m.spike_n[1] = 9, m.spike_mean[1] = 4.321, m.spike_var[1] = 0.0;
  return m;
}

// vt_ckpt_manifest_format's text without its manifest_crc32 line, as a manifest from before
// the seal (2026-12-07) reads: the edits below stand for older manifests' lines.
static int unsealed(const vt_ckpt_manifest *m, char *text, size_t size) {
  vt_ckpt_manifest_format(m, text, size);
  char *seal = strstr(text, "manifest_crc32 "), *eol = seal ? strchr(seal, '\n') : NULL;
  if (eol) memmove(seal, eol + 1, strlen(eol + 1) + 1);
  return (int)strlen(text);
}

// The manifest text of sample() with line `key ...` replaced by `repl` ("" deletes it).
static void refuse_edit(const char *key, const char *repl, const char *want) {
  char text[4096], out[4096] = "", err[512] = "";
  vt_ckpt_manifest m = sample();
  unsealed(&m, text, sizeof text);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    int match = strncmp(line, key, strlen(key)) == 0 && line[strlen(key)] == ' ';
    strcat(out, match ? repl : line);
    if (!match || repl[0]) strcat(out, "\n");
  }
  vt_status st = vt_ckpt_manifest_parse(out, strlen(out), &m, err, sizeof err);
  EXPECT(st != VT_OK && strstr(err, want), "editing '%s' to '%s': status %d, message '%s', want '%s'",
         key, repl, st, err, want);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
}

// The CRC-32 bit by bit, from its definition: the reference for vt_crc32's eight-byte steps.
static uint32_t crc32_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = crc & 1 ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  return ~crc;
}

// Every length 0..300 at every start offset 0..7 (the eight-byte loop's alignment and its tail),
// and a buffer fed in two pieces cut anywhere, against the bitwise CRC.
static void test_crc32(void) {
  uint8_t buf[512];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof buf; i++) x = x * 1103515245u + 12345u, buf[i] = (uint8_t)(x >> 16);
  int bad = 0;
  for (size_t off = 0; off < 8; off++)
    for (size_t n = 0; n <= 300; n++) bad += vt_crc32(0, buf + off, n) != crc32_bitwise(0, buf + off, n);
  for (size_t cut = 0; cut <= 300; cut++)
    bad += vt_crc32(vt_crc32(0, buf, cut), buf + cut, 300 - cut) != crc32_bitwise(0, buf, 300);
  EXPECT(bad == 0, "CRC-32: %d of 2709 lengths, offsets and cuts differ from the bitwise CRC", bad);
}

// The raw register (no inversions) after n zero bytes, bit by bit.
static uint32_t zeros_bitwise(uint32_t reg, int64_t n) {
  for (int64_t i = 0; i < 8 * n; i++) reg = reg & 1 ? 0xEDB88320u ^ (reg >> 1) : reg >> 1;
  return reg;
}

static uint32_t next_rand(uint32_t *x) { return *x = *x * 1103515245u + 12345u, *x >> 8; }

// vt_crc32_shift against the bitwise zeros; shares of random interleavings of up to 4 writers
// against the whole buffer's CRC; a file written in parts by 3 writers (parts given out of
// order) holds the bytes and the CRC-32 their shares give; bad parts and paths are refused.
static void test_partfile(void) {
  int bad = 0;
  const uint32_t regs[4] = {0, 1, 0xFFFFFFFFu, 0x12345678u};
  for (int r = 0; r < 4; r++)
    for (int64_t n = 0; n <= 70; n++) bad += vt_crc32_shift(regs[r], n) != zeros_bitwise(regs[r], n);
  bad += vt_crc32_shift(0x9abcdef0u, 1 << 20) != zeros_bitwise(0x9abcdef0u, 1 << 20);
  EXPECT(bad == 0, "vt_crc32_shift: %d of 285 cases differ from bitwise zero bytes", bad);

  enum { N = 4099 };
  static uint8_t buf[N];
  uint32_t x = 7;
  for (int i = 0; i < N; i++) buf[i] = (uint8_t)next_rand(&x);
  const uint32_t want = crc32_bitwise(0, buf, N);
  for (int trial = 0; trial < 200; trial++) {
    const int writers = 1 + trial % 4;
    uint32_t shares[4] = {0, 0, 0, 0};
    for (int at = 0; at < N;) {
      const int n = 1 + (int)(next_rand(&x) % (trial < 100 ? 97 : 2000));
      const int len = at + n < N ? n : N - at;
      shares[next_rand(&x) % writers] ^= vt_crc32_piece(at, buf + at, (size_t)len, N);
      at += len;
    }
    bad += vt_crc32_of_shares(shares, writers, N) != want;
  }
  EXPECT(bad == 0, "CRC-32 from writers' shares: %d of 200 splits differ", bad);
  // One writer's pieces XORed in reverse order.
  uint32_t pieces = 0;
  for (int at = N; at > 0;) {
    const int n = 1 + (int)(next_rand(&x) % 300), from = at - n > 0 ? at - n : 0;
    pieces ^= vt_crc32_piece(from, buf + from, (size_t)(at - from), N);
    at = from;
  }
  EXPECT(vt_crc32_of_shares(&pieces, 1, N) == want, "CRC-32 from pieces in reverse order");
  EXPECT(vt_crc32_of_shares(NULL, 0, 0) == 0, "CRC-32 of an empty file from no shares");

  char dir[] = "/tmp/vt_partfile_XXXXXX", path[256], err[512];
  EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(path, sizeof path, "%s/parts.bin", dir);
  const int head = 13;  // not a multiple of anything the parts use
  uint32_t shares[4];
  EXPECT(vt_partfile_create(path, buf, head, N, &shares[3], err, sizeof err) == VT_OK, "%s", err);
  // Writer w gets the pieces of 1..61 bytes numbered w mod 3, listed last to first.
  vt_part parts[3][N / 3];
  int64_t count[3] = {0, 0, 0};
  for (int at = head, i = 0; at < N; i++) {
    const int n = 1 + (int)(next_rand(&x) % 61), len = at + n < N ? n : N - at;
    parts[i % 3][count[i % 3]++] = (vt_part){at, len, buf + at};
    at += len;
  }
  for (int w = 0; w < 3; w++) {
    for (int64_t i = 0; i < count[w] / 2; i++) {
      vt_part t = parts[w][i];
      parts[w][i] = parts[w][count[w] - 1 - i], parts[w][count[w] - 1 - i] = t;
    }
    EXPECT(vt_partfile_write(path, parts[w], count[w], N, &shares[w], err, sizeof err) == VT_OK,
           "%s", err);
  }
  int64_t nbytes = 0;
  uint32_t crc = 0;
  EXPECT(vt_file_crc32(path, &nbytes, &crc, err, sizeof err) == VT_OK, "%s", err);
  EXPECT(nbytes == N && crc == want && vt_crc32_of_shares(shares, 4, N) == want,
         "file in parts: %lld bytes, CRC-32 %08x and from the shares %08x, want %d and %08x",
         (long long)nbytes, crc, vt_crc32_of_shares(shares, 4, N), N, want);
  uint32_t share;
  vt_part overlap[2] = {{100, 8, buf}, {104, 8, buf}}, past[1] = {{N - 4, 8, buf}};
  EXPECT(vt_partfile_write(path, overlap, 2, N, &share, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "overlaps"), "overlapping parts: %s", err);
  EXPECT(vt_partfile_write(path, past, 1, N, &share, err, sizeof err) == VT_ERR_INPUT &&
             strstr(err, "past the file"), "a part past the end: %s", err);
  EXPECT(vt_partfile_write(path, NULL, 0, N, &share, err, sizeof err) == VT_OK && share == 0,
         "no parts");
  remove(path);
  EXPECT(vt_partfile_write(path, past, 1, 2 * N, &share, err, sizeof err) == VT_ERR_IO &&
             strstr(err, "cannot open"), "a file that was never created: %s", err);
  snprintf(path, sizeof path, "%s/missing/parts.bin", dir);
  EXPECT(vt_partfile_create(path, buf, head, N, &share, err, sizeof err) == VT_ERR_IO &&
             strstr(err, "cannot create"), "create in a missing folder: %s", err);
  rmdir(dir);
}

// Saves pretend checkpoints of steps first..last into dir, each committed with keep_last and
// keep_every.
static void commit_steps(const char *dir, vt_ckpt_manifest *m, int first, int last, int keep_last,
                         int64_t keep_every) {
  char tmp[1100], path[1300], err[512];
  for (int step = first; step <= last; step++) {
    EXPECT(vt_ckpt_begin(dir, step, tmp, sizeof tmp, err, sizeof err) == VT_OK, "%s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    write_file(path, "pretend tensors");
    m->step = step, m->stream_position = step * m->global_batch, m->nfiles = 1;
    snprintf(m->file[0], sizeof m->file[0], "model.safetensors");
    EXPECT(vt_file_crc32(path, &m->file_nbytes[0], &m->file_crc[0], err, sizeof err) == VT_OK,
           "%s", err);
    EXPECT(vt_ckpt_commit(dir, tmp, m, keep_last, keep_every, err, sizeof err) == VT_OK, "%s",
           err);
  }
}

// An interrupted save's recovery (vt_ckpt_recover): a step-7 save of one file written by two
// ranks, each marking its part, is committed (with --keep-last 2: step 5 rotated away) and its
// marks gone; one whose rank 1 left no mark, whose marks add up to fewer bytes than the file's, whose
// bytes differ from the marks' CRC shares, that has no draft, or that is older than the newest
// checkpoint (step 8, another line of training, kept), is removed; one whose commit had written
// manifest.txt is committed from it, one whose commit left an empty manifest.txt from its
// marks, and one beside a step-7 checkpoint (the later try at that step) replaces it (set aside).
static void test_recover(void) {
  char dir[] = "/tmp/vt_recover_XXXXXX", tmp[1100], path[1300], err[512];
  EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
  vt_ckpt_manifest m = sample(), back;
  m.tp = 1, m.pp = 1, m.dp = 2;
  commit_steps(dir, &m, 5, 6, 0, 0);
  const char data[] = "pretend tensors, written by two ranks";
  const int64_t N = (int64_t)strlen(data), k = 10;
  char step7[1100];
  vt_ckpt_step_dir(dir, 7, step7, sizeof step7);
  // kind: 0 sound, 1 rank 1's mark missing, 2 rank 1's mark counts a byte less, 3 a byte of
  // the file changed, 4 no draft, 5 the commit's manifest.txt without marks, 6 sound with a
  // step-8 checkpoint there, 7 sound with an empty manifest.txt, 8 sound beside a step 7
  for (int kind = 0; kind < 9; kind++) {
    if (kind == 6) commit_steps(dir, &m, 8, 8, 0, 0);
    if (kind == 7) {
      vt_ckpt_step_dir(dir, 8, tmp, sizeof tmp);
      vt_remove_dir(tmp);
    }
    if (kind == 8) commit_steps(dir, &m, 7, 7, 0, 0);
    m.step = 7, m.stream_position = 7 * m.global_batch;
    EXPECT(vt_ckpt_begin(dir, 7, tmp, sizeof tmp, err, sizeof err) == VT_OK, "%s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    write_file(path, data);
    m.nfiles = 1, m.file_nbytes[0] = N, m.file_crc[0] = 0;
    if (kind != 4 && kind != 5)
      EXPECT(vt_ckpt_mark_draft(tmp, &m, err, sizeof err) == VT_OK, "%s", err);
    const uint32_t share[2] = {vt_crc32_piece(0, data, (size_t)k, N),
                               vt_crc32_piece(k, data + k, (size_t)(N - k), N)};
    const int64_t bytes[2] = {k, N - k - (kind == 2)};
    for (int r = 0; r < 2 && kind != 5; r++)
      if (!(r == 1 && kind == 1))
        EXPECT(vt_ckpt_mark_part(tmp, r, 1, &share[r], &bytes[r], err, sizeof err) == VT_OK,
               "%s", err);
    if (kind == 3) write_file(path, "pretend tensors, WRITTEN by two ranks");
    if (kind == 7) {
      snprintf(path, sizeof path, "%s/manifest.txt", tmp);
      write_file(path, "");
    }
    if (kind == 5) {
      m.file_crc[0] = vt_crc32(0, data, (size_t)N);
      char text[4096];
      const int n = vt_ckpt_manifest_format(&m, text, sizeof text);
      snprintf(path, sizeof path, "%s/manifest.txt", tmp);
      write_file(path, n > 0 ? text : "");
      EXPECT(vt_ckpt_leftover_bytes(dir) == N + n, "kind 5: the leftover's %lld bytes, want "
             "%lld", (long long)vt_ckpt_leftover_bytes(dir), (long long)(N + n));
    }
    const int sound = kind == 0 || kind == 5 || kind >= 7;  // (6: sound, but older than step 8)
    int64_t recovered = -2;  // (the first with --keep-last 2: step 5 rotated away)
    EXPECT(vt_ckpt_recover(dir, kind == 0 ? 2 : 3, 0, &recovered, err, sizeof err) == VT_OK &&
               recovered == (sound ? 7 : -1), "kind %d: recovered %lld: %s", kind,
           (long long)recovered, err);
    EXPECT(access(tmp, F_OK) != 0 && vt_ckpt_leftover_bytes(dir) == 0,
           "kind %d: the .tmp folder is gone", kind);
    EXPECT((vt_ckpt_verify(step7, &back, err, sizeof err) == VT_OK) == sound,
           "kind %d: step 7 %s: %s", kind, sound ? "committed" : "not committed", err);
    snprintf(path, sizeof path, "%s/part-000000", step7);
    EXPECT(access(path, F_OK) != 0, "kind %d: no marks in the checkpoint", kind);
    char step5[1100], step6[1100];
    vt_ckpt_step_dir(dir, 5, step5, sizeof step5);
    vt_ckpt_step_dir(dir, 6, step6, sizeof step6);
    if (kind == 0) EXPECT(access(step5, F_OK) != 0, "kind 0: step 5 rotated away");
    EXPECT(vt_ckpt_verify(step6, &back, err, sizeof err) == VT_OK, "kind %d: step 6 kept", kind);
    if (kind == 6) {
      vt_ckpt_step_dir(dir, 8, tmp, sizeof tmp);
      EXPECT(vt_ckpt_verify(tmp, &back, err, sizeof err) == VT_OK, "step 8 kept: %s", err);
    }
    if (kind != 8) vt_remove_dir(step7);
  }
  vt_remove_dir(step7);
  snprintf(tmp, sizeof tmp, "%s/abandoned-step-00000007", dir);
  EXPECT(vt_ckpt_verify(tmp, &back, err, sizeof err) == VT_OK, "the replaced step 7 aside: %s",
         err);
  vt_remove_dir(tmp);
  for (int step = 5; step <= 6; step++) {
    vt_ckpt_step_dir(dir, step, tmp, sizeof tmp);
    vt_remove_dir(tmp);
  }
  snprintf(path, sizeof path, "%s/latest", dir);
  remove(path);
  EXPECT(rmdir(dir) == 0, "the test's folder emptied");
}

// The settings that change the computation (drop path, dropouts, Mixup/CutMix, erasing, --aa,
// the loss, the EMA, the freeze patterns): each round trips bit for bit, text with spaces, '%'
// and quotes in one word; a manifest without them (an older one) reads as the flags' defaults
// and writes none of them; bad values are refused.
static void test_settings(void) {
  char text[8192], err[512];
  vt_ckpt_manifest none, m, back;
  const char *old = "format vit3d-checkpoint-1\nstep 1\nstream_position 8\nglobal_batch 8\n"
                    "adam_t 1\nseed 0\nimg_size 32\npatch_size 8\nwidth 64\ndepth 2\n"
                    "heads 2\nmlp_ratio 4\nnum_classes 10\ntp 1\npp 1\ndp 1\nzero 0\n"
                    "sequence_parallel 0\nfile model.safetensors 10 00000000\n";
  EXPECT(vt_ckpt_manifest_parse(old, strlen(old), &none, err, sizeof err) == VT_OK &&
             none.recorded == 0 && none.drop_path == 0 && none.label_smoothing == 0.1f &&
             none.mix_prob == 1 && none.mix_switch_prob == 0.5f && none.remode == 2 &&
             none.bce_thresh == -1 && none.ema_decay == 0 && !none.aa[0] && !none.freeze[0] &&
             !none.trainable[0] && none.mean[1] == 0.456f && none.std[2] == 0.225f &&
             none.eval_crop_pct == 0.875 && none.eval_squash == 0 && none.eval_interp == 0 &&
             !none.norm_recorded,
         "a manifest without the settings reads as the flags' defaults: %s", err);
  int n = vt_ckpt_manifest_format(&none, text, sizeof text);
  EXPECT(!strstr(text, "label_smoothing") && !strstr(text, "remode") && !strstr(text, "mix_"),
         "the defaults write no settings' lines:\n%s", text);
  m = none;
  m.drop_path = 0.1f, m.drop_path_uniform = 1, m.proj_drop = 1e-7f, m.attn_drop = 0.3f;
  m.pos_drop = 0.05f, m.head_drop = 0.999f, m.mixup = 0.8f, m.cutmix = 1, m.mix_prob = 0;
  m.mix_switch_prob = 0.25f, m.reprob = 0.25f, m.remode = 1, m.label_smoothing = 0;
  m.bce_loss = 1, m.bce_thresh = 0, m.ema_decay = 0.99998f, m.ema_warmup = 1;
  m.hflip = 0, m.crop_scale_min = 0.35f, m.train_interp = 2, m.simple_crop = 1;
  m.three_augment = 1, m.color_jitter = 0.1f, m.color_jitter_alone = 0.4f, m.aa_interp = 0;
  m.mean[0] = 0.286f, m.mean[2] = -1.5f, m.std[1] = 0.353f, m.eval_crop_pct = 0.9;
  m.eval_squash = 1, m.eval_interp = 2, m.norm_recorded = 1, m.evaluated = 1;
  snprintf(m.aa, sizeof m.aa, "rand-m9-n2-mstd0.5-mmax10-inc1-p0.5");
  snprintf(m.freeze, sizeof m.freeze, "^blocks\\.(0|1)\\. 'it''s' 100%% \t%%41");
  memset(m.trainable, 'x', sizeof m.trainable - 1);  // the longest: 255 bytes
  m.trainable[sizeof m.trainable - 1] = '\0';
  m.trainable[7] = ' ';
  n = vt_ckpt_manifest_format(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.recorded == 38 && back.norm_recorded == 1 && back.evaluated == 1 &&
             back.drop_path == m.drop_path &&
             back.drop_path_uniform == 1 &&
             !memcmp(back.mean, m.mean, sizeof m.mean) && !memcmp(back.std, m.std, sizeof m.std) &&
             back.eval_crop_pct == 0.9 && back.eval_squash == 1 && back.eval_interp == 2 &&
             back.hflip == 0 && back.crop_scale_min == m.crop_scale_min &&
             back.train_interp == 2 && back.simple_crop == 1 && back.three_augment == 1 &&
             back.color_jitter == m.color_jitter && back.color_jitter_alone == 0.4f &&
             back.aa_interp == 0 &&
             back.proj_drop == m.proj_drop && back.attn_drop == m.attn_drop &&
             back.pos_drop == m.pos_drop && back.head_drop == m.head_drop &&
             back.mixup == m.mixup && back.cutmix == 1 && back.mix_prob == 0 &&
             back.mix_switch_prob == m.mix_switch_prob && back.reprob == m.reprob &&
             back.remode == 1 && back.label_smoothing == 0 && back.bce_loss == 1 &&
             back.bce_thresh == 0 && back.ema_decay == m.ema_decay && back.ema_warmup == 1 &&
             !strcmp(back.aa, m.aa) && !strcmp(back.freeze, m.freeze) &&
             !strcmp(back.trainable, m.trainable),
         "the settings round trip: %s\n%s", err, text);
  vt_ckpt_manifest tiny = m;  // a subnormal mean (strtof's ERANGE) and the defaults, recorded
  tiny.mean[1] = 1e-40f, tiny.eval_squash = 0, tiny.eval_interp = 0, tiny.std[1] = 0.224f;
  const int nt = vt_ckpt_manifest_format(&tiny, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)nt, &back, err, sizeof err) == VT_OK &&
             back.mean[1] == 1e-40f && back.norm_recorded && strstr(text, "eval_squash 0\n") &&
             strstr(text, "std_g 0.224"),
         "a subnormal mean and the recorded defaults read back: %s", err);
  n = vt_ckpt_manifest_format(&m, text, sizeof text);
  EXPECT(strstr(text, "remode rand\n") &&
             strstr(text, "freeze ^blocks\\.(0|1)\\.%20'it''s'%20100%25%20%09%2541\n"),
         "--remode by name, a pattern as one word:\n%s", text);
  static const char *const bad[][2] = {
      {"drop_path 1.5", "bad value for drop_path"}, {"remode zeros", "bad value for remode"},
      {"freeze a b", "bad value for freeze"},      {"freeze a%4", "bad value for freeze"},
      {"freeze a%00b", "bad value for freeze"},    {"ema_warmup 2", "bad value for ema_warmup"},
      {"bce_thresh -2", "bad value for bce_thresh"}, {"mix_prob nan", "bad value for mix_prob"},
      {"std_g 0", "bad value for std_g"},          {"eval_crop_pct 1.5", "bad value for eval_crop_pct"},
      {"eval_interp 3", "bad value for eval_interp"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char edited[8192];
    snprintf(edited, sizeof edited, "%s%s\n", old, bad[i][0]);
    EXPECT(vt_ckpt_manifest_parse(edited, strlen(edited), &back, err, sizeof err) != VT_OK &&
               strstr(err, bad[i][1]), "'%s': want '%s', have '%s'", bad[i][0], bad[i][1], err);
  }
  char edited[8192];  // longer than the field: refused, not cut
  snprintf(edited, sizeof edited, "%strainable %0256d\n", old, 0);
  EXPECT(vt_ckpt_manifest_parse(edited, strlen(edited), &back, err, sizeof err) != VT_OK &&
             strstr(err, "bad value for trainable"), "a 256-byte pattern: %s", err);
}

// vit3d export's metadata: made from a manifest and read back (a run that evaluated and one that
// did not); a file without a mean records nothing; unreadable values are named.
static void test_file_meta(void) {
  vt_ckpt_manifest m = sample(), back;
  m.norm_recorded = 1, m.evaluated = 1, m.mean[1] = 1e-40f, m.jpeg_reduce = 1;
  vt_ckpt_file_meta fm;
  vt_ckpt_file_meta_make(&fm, &m, 1, "--width 64");
  const char *v[5] = {NULL};  // mean, std, crop_pct, crop_mode, interpolation
  static const char *const keys[5] = {"mean", "std", "crop_pct", "crop_mode", "interpolation"};
  for (int i = 0; i < fm.n; i++)
    for (int k = 0; k < 5; k++)
      if (!strcmp(fm.kv[2 * i], keys[k])) v[k] = fm.kv[2 * i + 1];
  char err[256];
  memset(&back, 0, sizeof back);
  EXPECT(fm.n == 11 && !strcmp(fm.kv[5], "ema") && !strcmp(fm.kv[7], "--width 64") &&
             !strcmp(fm.kv[9], "3,32,32") &&
             vt_ckpt_file_meta_parse(&back, v[0], v[1], v[2], v[3], v[4], err, sizeof err) == 1 &&
             !memcmp(back.mean, m.mean, sizeof m.mean) && !memcmp(back.std, m.std, sizeof m.std) &&
             back.evaluated && back.eval_crop_pct == 0.9 && back.eval_squash &&
             back.eval_interp == 2,
         "file metadata round trip: %s %s %s %s %s", v[0], v[1], v[2], v[3], v[4]);
  m.evaluated = 0;
  vt_ckpt_file_meta_make(&fm, &m, 0, "--width 64");
  EXPECT(fm.n == 8 && !strcmp(fm.kv[5], "model") &&
             vt_ckpt_file_meta_parse(&back, fm.kv[13], fm.kv[15], NULL, NULL, NULL, err,
                                     sizeof err) == 1 && !back.evaluated,
         "the metadata of a run that never evaluated");
  m.jpeg_reduce = 0;  // (--jpeg-reduce 0: recorded, the last pair)
  vt_ckpt_file_meta_make(&fm, &m, 0, "--width 64");
  EXPECT(fm.n == 9 && !strcmp(fm.kv[16], "vit3d_jpeg_reduce") && !strcmp(fm.kv[17], "0"),
         "--jpeg-reduce 0 in the metadata: %d pairs", fm.n);
  EXPECT(vt_ckpt_file_meta_parse(&back, NULL, "1,1,1", NULL, NULL, NULL, err, sizeof err) == 0,
         "no mean: nothing recorded");
  EXPECT(vt_ckpt_file_meta_parse(&back, "0.5,0.5", "1,1,1", NULL, NULL, NULL, err,
                                 sizeof err) == -1 && strstr(err, "not three numbers"),
         "two numbers: %s", err);
  EXPECT(vt_ckpt_file_meta_parse(&back, "0,0,0", "1,0,1", NULL, NULL, NULL, err, sizeof err) == -1,
         "a zero std");
  EXPECT(vt_ckpt_file_meta_parse(&back, "0,0,0", "1,1e-40,1", NULL, NULL, NULL, err,
                                 sizeof err) == -1 && strstr(err, "at least 1e-6"),
         "a std of 1e-40 (the normalised pixels would overflow): %s", err);
  EXPECT(vt_ckpt_file_meta_parse(&back, " 0.5 , 0.5,0.5 ", "1,1,nan", NULL, NULL, NULL, err,
                                 sizeof err) == -1, "a NaN std");
  EXPECT(vt_ckpt_file_meta_parse(&back, " 0.5 , 0.5,0.5 ", "1,1,1", NULL, NULL, NULL, err,
                                 sizeof err) == 1 && back.mean[1] == 0.5f,
         "spaces around the numbers: %s", err);
  EXPECT(vt_ckpt_file_meta_parse(&back, "0,0,0", "1,1,1", "0.9", "border", "bicubic", err,
                                 sizeof err) == 2 && strstr(err, "crop_mode \"border\"") &&
             back.norm_recorded && !back.evaluated,
         "an unknown crop mode (timm's border): the normalisation read, not the crop: %s", err);
}

int main(void) {
  char text[4096], err[512];
  test_settings();
  test_file_meta();
  test_crc32();
  test_partfile();
  test_recover();
  vt_ckpt_manifest m = sample(), back;
  int n = vt_ckpt_manifest_format(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK, "%s", err);
  EXPECT(back.step == 10 && back.width == 64 && back.mlp_ratio == 4.0f && back.nfiles == 1 &&
         back.file_crc[0] == 0xdeadbeef && !strcmp(back.file[0], "model.safetensors"),
         "round trip");
  EXPECT(!memcmp(back.spike_n, m.spike_n, sizeof m.spike_n) &&
             !memcmp(back.spike_mean, m.spike_mean, sizeof m.spike_mean) &&
             !memcmp(back.spike_var, m.spike_var, sizeof m.spike_var),
         "round trip of the spike guard's statistics (bit for bit)");
  EXPECT(vt_crc32(0, "123456789", 9) == 0xCBF43926u, "CRC-32 check value");
  refuse_edit("format", "format something-else", "not a vit3d checkpoint");
  refuse_edit("format", "", "no format line");
  refuse_edit("step", "", "lacks 'step'");
  refuse_edit("step", "step -3", "bad value");
  refuse_edit("width", "width 12x", "bad value");
  refuse_edit("zero", "zero 2", "bad value");
  refuse_edit("mlp_ratio", "mlp_ratio nan", "bad mlp_ratio");
  refuse_edit("mlp_dim", "mlp_dim -1", "bad value");
  refuse_edit("heads", "colour blue", "lacks 'heads'");  // (an unknown key is no 'heads')
  // A key this binary does not know (a newer vit3d's optional one) is skipped and named, so
  // that its checkpoint still resumes here with a warning (launch/ckpt_resume.c); a malformed
  // line stays refused whatever its key.
  {
    char newer[8192];
    n = unsealed(&m, text, sizeof text);
    snprintf(newer, sizeof newer, "%scolour blue\nfancy_reg 0.5\nan_array 1 2 3\n", text);
    EXPECT(vt_ckpt_manifest_parse(newer, strlen(newer), &back, err, sizeof err) == VT_OK &&
               back.nunknown == 3 && !strcmp(back.unknown, "colour fancy_reg an_array") &&
               back.step == 10 && back.width == 64,
           "unknown keys skipped and named: %s ('%s')", err, back.unknown);
    EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
               back.nunknown == 0 && !back.unknown[0], "no unknown keys: none named");
    snprintf(newer, sizeof newer, "%slonely\n", text);
    EXPECT(vt_ckpt_manifest_parse(newer, strlen(newer), &back, err, sizeof err) != VT_OK &&
               strstr(err, "expected 'key value'"), "an unknown key without a value: %s", err);
    size_t at = strlen(text);  // many: the names cut at the buffer's end, all counted
    memcpy(newer, text, at + 1);
    for (int i = 0; i < 100; i++)
      at += (size_t)snprintf(newer + at, sizeof newer - at, "new_key_%03d 1\n", i);
    EXPECT(vt_ckpt_manifest_parse(newer, strlen(newer), &back, err, sizeof err) == VT_OK &&
               back.nunknown == 100 && strlen(back.unknown) < sizeof back.unknown &&
               !strncmp(back.unknown, "new_key_000 new_key_001", 23) &&
               !strcmp(vt_ckpt_unknown_more(&back), " ...") &&
               !strcmp(back.unknown + strlen(back.unknown) - 11, "new_key_020"),
           "100 unknown keys: %d ('%s')", back.nunknown, back.unknown);
  }
  refuse_edit("file", "file ../etc/passwd 10 00000000", "malformed file entry");
  refuse_edit("file", "file model.safetensors 10 zzzz", "malformed file entry");
  refuse_edit("file", "", "lists no files");
  refuse_edit("seed", "seed 1 2", "expected 'key value'");
  refuse_edit("global_pool", "global_pool 4", "bad value");
  refuse_edit("spike_loss", "spike_loss 10 nan 0.1", "malformed spike_loss");
  refuse_edit("spike_norm", "spike_norm 9 1.5 -1", "malformed spike_norm");
  refuse_edit("spike_norm", "spike_norm 9 1.5", "malformed spike_norm");
  refuse_edit("spike_loss", "spike_loss 0 1 1", "malformed spike_loss");
  refuse_edit("class_token", "class_token 2", "bad value");
  refuse_edit("aug_repeats", "aug_repeats 0", "bad value");
  refuse_edit("layer_scale", "layer_scale 2", "bad value");
  refuse_edit("reg_tokens", "reg_tokens -1", "bad value");
  refuse_edit("norm_eps", "norm_eps 0", "bad norm_eps");
  refuse_edit("quick_gelu", "quick_gelu 2", "bad value");
  // The seal: the second line is the CRC-32 of the text after it; a changed byte, a line added,
  // a manifest cut short and a stream position that is not step x global batch are damage.
  {
    vt_ckpt_manifest sm = sample();
    char sealed[4096], edited[8192];
    n = vt_ckpt_manifest_format(&sm, sealed, sizeof sealed);
    EXPECT(vt_ckpt_manifest_parse(sealed, (size_t)n, &back, err, sizeof err) == VT_OK &&
               back.sealed, "a sealed manifest reads, sealed: %s", err);
    memcpy(edited, sealed, (size_t)n + 1);
    char *t = strstr(edited, "\nadam_t 10\n");
    EXPECT(t != NULL, "adam_t line");
    if (t) t[9] = '9';  // adam_t 19
    EXPECT(vt_ckpt_manifest_parse(edited, strlen(edited), &back, err, sizeof err) != VT_OK &&
               strstr(err, "that line says") && strstr(err, "changed, cut short or damaged"),
           "one digit changed: %s", err);
    EXPECT(!strncmp(strchr(sealed, '\n') + 1, "manifest_crc32 ", 15), "the seal, line 2");
    snprintf(edited, sizeof edited, "%sfancy_reg 0.5\n", sealed);
    EXPECT(vt_ckpt_manifest_parse(edited, strlen(edited), &back, err, sizeof err) != VT_OK &&
               strstr(err, "cut short or damaged"), "a line added: %s", err);
    memcpy(edited, sealed, (size_t)n + 1);
    *strrchr(strstr(edited, "\nfile "), '\n') = '\0';  // (cut at the last line's start)
    *(strrchr(edited, '\n') + 1) = '\0';
    EXPECT(vt_ckpt_manifest_parse(edited, strlen(edited), &back, err, sizeof err) != VT_OK &&
               strstr(err, "cut short or damaged"), "cut short at a line's end: %s", err);
    unsealed(&sm, edited, sizeof edited);
    EXPECT(vt_ckpt_manifest_parse(edited, strlen(edited), &back, err, sizeof err) == VT_OK &&
               !back.sealed, "an unsealed manifest (before 2026-12-07) reads: %s", err);
  }
  refuse_edit("stream_position", "stream_position 161", "is not its step 10 times its global_batch 16");
  refuse_edit("step", "step 11", "stream_position 160 is not its step 11");
  refuse_edit("step", "step 4611686018427387903", "is not its step");
  // A manifest written before global_pool and aug_repeats existed reads as the class-token head
  // and no repeats.
  m.global_pool = 1;
  n = unsealed(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.global_pool == 1, "global_pool round trip");
  char *gp = strstr(text, "global_pool 1\n");
  EXPECT(gp != NULL, "global_pool line");
  if (gp) memmove(gp, gp + 14, strlen(gp + 14) + 1);
  char *ar = strstr(text, "aug_repeats 1\n");
  EXPECT(ar != NULL, "aug_repeats line");
  if (ar) memmove(ar, ar + 14, strlen(ar + 14) + 1);
  EXPECT(vt_ckpt_manifest_parse(text, strlen(text), &back, err, sizeof err) == VT_OK &&
             back.global_pool == 0 && back.aug_repeats == 1,
         "a manifest without global_pool and aug_repeats: %s", err);
  m.global_pool = 0;
  // LayerScale, registers and no_embed_class round trip; a manifest from before them reads as
  // timm's default ViT.
  m.layer_scale = 1, m.reg_tokens = 4, m.no_embed_class = 1, m.qk_norm = 1, m.qkv_bias = 0;
  m.parallel = 1, m.lamb = 1, m.class_token = 0, m.global_pool = 3, m.gelu_tanh = 1;
  m.pos_sincos = 1, m.mlp_dim = 250;
  n = unsealed(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.layer_scale == 1 && back.reg_tokens == 4 && back.no_embed_class == 1 &&
             back.qk_norm == 1 && back.qkv_bias == 0 && back.parallel == 1 && back.lamb == 1 &&
             back.class_token == 0 && back.global_pool == 3 && back.gelu_tanh == 1 &&
             back.pos_sincos == 1 && back.mlp_dim == 250 && vt_ckpt_mlp_hidden(&back) == 250,
         "layer_scale, reg_tokens, no_embed_class, qk_norm, qkv_bias, parallel, lamb, "
         "class_token, global_pool map, gelu_tanh, pos_sincos, mlp_dim round trip: %s",
         err);
  m.global_pool = 0;
  n = unsealed(&m, text, sizeof text);
  const char *gone[] = {"layer_scale 1\n", "reg_tokens 4\n", "no_embed_class 1\n",
                        "qk_norm 1\n", "qkv_bias 0\n", "parallel 1\n", "lamb 1\n",
                        "class_token 0\n", "gelu_tanh 1\n", "pos_sincos 1\n", "mlp_dim 250\n"};
  for (int i = 0; i < 11; i++) {
    char *at = strstr(text, gone[i]);
    EXPECT(at != NULL, "%s line", gone[i]);
    if (at) memmove(at, at + strlen(gone[i]), strlen(at + strlen(gone[i])) + 1);
  }
  EXPECT(vt_ckpt_manifest_parse(text, strlen(text), &back, err, sizeof err) == VT_OK &&
             back.layer_scale == 0 && back.reg_tokens == 0 && back.no_embed_class == 0 &&
             back.qk_norm == 0 && back.qkv_bias == 1 && back.parallel == 0 && back.lamb == 0 &&
             back.class_token == 1 && back.gelu_tanh == 0 && back.pos_sincos == 0 &&
             back.mlp_dim == 0 && vt_ckpt_mlp_hidden(&back) == 256,
         "a manifest without layer_scale, reg_tokens, no_embed_class, qk_norm, qkv_bias, "
         "parallel, lamb, class_token, gelu_tanh, pos_sincos, mlp_dim (the MLP width x 4): %s",
         err);
  m.layer_scale = m.reg_tokens = m.no_embed_class = m.qk_norm = m.parallel = m.lamb = 0;
  m.pos_sincos = m.mlp_dim = 0;
  m.qkv_bias = m.class_token = 1;
  // The CLIP towers' keys round trip; a manifest from before them reads as timm's ViT.
  m.pre_norm = 1, m.norm_eps = 1e-5f, m.quick_gelu = 1, m.gelu_tanh = 0;
  n = unsealed(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.pre_norm == 1 && back.norm_eps == 1e-5f && back.quick_gelu == 1 &&
             !strcmp(vt_ckpt_act_name(&back), "quick_gelu"),
         "pre_norm, norm_eps 1e-5, quick_gelu round trip: %s", err);
  const char *clip[] = {"pre_norm 1\n", "norm_eps 9.99999975e-06\n", "quick_gelu 1\n"};
  for (int i = 0; i < 3; i++) {
    char *at = strstr(text, clip[i]);
    EXPECT(at != NULL, "%s line", clip[i]);
    if (at) memmove(at, at + strlen(clip[i]), strlen(at + strlen(clip[i])) + 1);
  }
  EXPECT(vt_ckpt_manifest_parse(text, strlen(text), &back, err, sizeof err) == VT_OK &&
             back.pre_norm == 0 && back.norm_eps == 1e-6f && back.quick_gelu == 0 &&
             !strcmp(vt_ckpt_act_name(&back), "gelu"),
         "a manifest without pre_norm, norm_eps, quick_gelu (timm's ViT): %s", err);
  m.pre_norm = m.quick_gelu = 0, m.norm_eps = 1e-6f;
  // The training set's identity round trips; synthetic data (0) writes no lines, and a manifest
  // without them reads as unknown (0).
  m.data_images = 1281167, m.data_classes = 0xdeadbeef;
  n = vt_ckpt_manifest_format(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.data_images == 1281167 && back.data_classes == 0xdeadbeef,
         "data_images, data_classes round trip: %s", err);
  m.data_images = m.data_classes = 0;
  n = vt_ckpt_manifest_format(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.data_images == 0 && back.data_classes == 0 && !strstr(text, "data_"),
         "synthetic data: no data_ lines: %s", err);
  // The optimizer's settings and schedule round trip bit for bit (floats widened to double;
  // lengths in epochs as doubles); all or none of them; a manifest without them has none.
  vt_ckpt_manifest o = m;
  o.has_optim = 1, o.lr = (float)3e-3, o.min_lr = (float)1e-5, o.warmup_lr = (float)1e-6;
  o.weight_decay = (float)0.05, o.opt_eps = (float)1e-8, o.clip_grad = 0, o.layer_decay = 0.65f;
  o.warmup_steps = 3128, o.total_steps = 500456, o.sched_epochs = 1, o.epoch_images = 1281167;
  o.warmup_epochs = 5, o.cycle_epochs = 800.0 / 3.0, o.sched = 1;
  n = vt_ckpt_manifest_format(&o, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.has_optim && back.lr == o.lr && back.min_lr == o.min_lr &&
             back.warmup_lr == o.warmup_lr && back.weight_decay == o.weight_decay &&
             back.opt_eps == o.opt_eps && back.clip_grad == 0 && back.layer_decay == o.layer_decay &&
             back.warmup_steps == 3128 && back.total_steps == 500456 && back.sched_epochs == 1 &&
             back.epoch_images == 1281167 && back.warmup_epochs == 5 &&
             back.cycle_epochs == o.cycle_epochs && back.sched == 1,
         "optimizer settings round trip: %s", err);
  EXPECT(back.frozen == 0 && back.frozen_hash == 0 && !strstr(text, "frozen"),
         "no frozen tensors: no frozen lines");
  EXPECT(back.optim_from_layer == 0 && !strstr(text, "optim_from_layer"),
         "no frozen layers: no optim_from_layer line");
  vt_ckpt_manifest fz = o;  // frozen tensors: their count and names' hash round trip
  fz.frozen = 54, fz.frozen_hash = 4294967295, fz.optim_from_layer = 13;
  char fz_text[4096];
  n = vt_ckpt_manifest_format(&fz, fz_text, sizeof fz_text);
  EXPECT(vt_ckpt_manifest_parse(fz_text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             back.frozen == 54 && back.frozen_hash == 4294967295 && back.optim_from_layer == 13,
         "frozen, frozen_hash, optim_from_layer round trip: %s", err);
  n = unsealed(&o, text, sizeof text);  // (the edits below stand for older manifests)
  char *schedl = strstr(text, "sched 1\n");  // a manifest from before --sched: cosine
  EXPECT(schedl != NULL, "sched line");
  if (schedl) {
    char old_text[sizeof text];
    memcpy(old_text, text, sizeof text);
    memmove(old_text + (schedl - text), schedl + 8, strlen(schedl + 8) + 1);
    EXPECT(vt_ckpt_manifest_parse(old_text, strlen(old_text), &back, err, sizeof err) == VT_OK &&
               back.has_optim && back.sched == 0,
           "a manifest without the sched line: %s", err);
  }
  char *lrl = strstr(text, "\nlr ");
  EXPECT(lrl != NULL, "lr line");
  if (lrl) {
    char *eol = strchr(lrl + 1, '\n');
    memmove(lrl, eol, strlen(eol) + 1);
    EXPECT(vt_ckpt_manifest_parse(text, strlen(text), &back, err, sizeof err) != VT_OK &&
               strstr(err, "all or none"), "a manifest with some optimizer settings: %s", err);
  }
  n = vt_ckpt_manifest_format(&m, text, sizeof text);
  EXPECT(vt_ckpt_manifest_parse(text, (size_t)n, &back, err, sizeof err) == VT_OK &&
             !back.has_optim && !strstr(text, "lr "), "a manifest without optimizer settings: %s",
         err);

  // Commit, `latest`, keep-last, verification of damaged files.
  char dir[] = "/tmp/vt_manifest_XXXXXX", path[1300], found[1100];
  if (!mkdtemp(dir)) return 1;
  commit_steps(dir, &m, 1, 3, 2, 0);
  struct stat st;
  snprintf(path, sizeof path, "%s/step-00000001", dir);
  EXPECT(stat(path, &st) != 0, "keep-last 2 left step 1");
  EXPECT(vt_ckpt_find_latest(dir, found, sizeof found, &back) == VT_OK && back.step == 3, "latest");
  snprintf(path, sizeof path, "%s/step-00000003/model.safetensors", dir);
  write_file(path, "pretend tensorz");  // same size, other bytes
  snprintf(path, sizeof path, "%s/step-00000003", dir);
  EXPECT(vt_ckpt_verify(path, &back, err, sizeof err) != VT_OK && strstr(err, "CRC-32"), "%s", err);
  EXPECT(vt_ckpt_find_latest(dir, found, sizeof found, &back) == VT_OK && back.step == 2,
         "fallback to step 2, got %lld", (long long)back.step);
  snprintf(path, sizeof path, "%s/step-00000002/model.safetensors", dir);
  write_file(path, "short");
  snprintf(path, sizeof path, "%s/step-00000002", dir);
  EXPECT(vt_ckpt_verify(path, &back, err, sizeof err) != VT_OK && strstr(err, "bytes"), "%s", err);
  EXPECT(vt_ckpt_find_latest(dir, found, sizeof found, &back) != VT_OK, "no complete checkpoint left");
  // Milestones: with keep-last 2 and keep-every 3, steps 4..9 leave the newest two (9, 8) and the
  // multiples of 3 (6; and 3, whose damage is no reason to remove it).
  commit_steps(dir, &m, 4, 9, 2, 3);
  for (int step = 1; step <= 9; step++) {
    snprintf(path, sizeof path, "%s/step-%08d", dir, step);
    const int kept = stat(path, &st) == 0, want = step >= 8 || step % 3 == 0;
    EXPECT(kept == want, "keep-last 2, keep-every 3: step %d %s", step,
           kept ? "kept" : "removed");
  }
  // A run resumed from step 4 (a rollback, or --resume auto passing over a damaged newest)
  // saves step 5 with --keep-last 1: it keeps its own save, sets 6 (milestone), 8 and 9 aside,
  // and latest and --resume auto find step 5. Once more from step 4: step 4 stays, the
  // second line's steps 5 and 6 are set aside, 6 under a name of its own.
  commit_steps(dir, &m, 5, 5, 1, 3);
  const char *want5[] = {"step-00000005", "abandoned-step-00000006", "abandoned-step-00000008",
                         "abandoned-step-00000009", "step-00000003"};
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, want5[i]);
    EXPECT(stat(path, &st) == 0, "rollback to step 4, step 5 saved: %s missing", want5[i]);
  }
  const char *gone5[] = {"step-00000004", "step-00000006", "step-00000008", "step-00000009"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, gone5[i]);
    EXPECT(stat(path, &st) != 0, "rollback to step 4, step 5 saved: %s still there", gone5[i]);
  }
  EXPECT(vt_ckpt_find_latest(dir, found, sizeof found, &back) == VT_OK && back.step == 5,
         "after the rollback latest is step 5, got %lld", (long long)back.step);
  commit_steps(dir, &m, 6, 6, 0, 0);  // step 6 again: the abandoned one keeps its name
  commit_steps(dir, &m, 4, 4, 1, 0);
  snprintf(path, sizeof path, "%s/abandoned-step-00000006.1", dir);
  EXPECT(stat(path, &st) == 0, "a second abandoned step 6 under a name of its own");
  snprintf(path, sizeof path, "%s/abandoned-step-00000005", dir);
  EXPECT(stat(path, &st) == 0, "the second line's step 5 set aside");
  snprintf(path, sizeof path, "rm -rf %s", dir);
  if (system(path) != 0) printf("could not remove %s\n", dir);
  printf(failures ? "%d manifest check(s) FAILED\n" : "all manifest checks passed\n", failures);
  return failures ? 1 : 0;
}
