// checkpoint.c: checkpoint directories, CRC-32, verification and the atomic commit
// (checkpoint.h; the manifest's text: ckpt_manifest.c).
#include "checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partfile.h"

#define FAIL(status, ...) return (snprintf(err, errlen, __VA_ARGS__), (status))

// CRC-32 (zlib's, reflected polynomial 0xEDB88320) eight bytes per step ("slicing by 8"):
// t[0] is the byte-at-a-time table, t[k][i] the CRC of byte i followed by k zero bytes, so the
// eight bytes of a step are looked up independently and XORed. Several times the speed of the
// byte loop, which was most of a checkpoint's CPU time (0.78 of 2.2 s for 260 MB).
static uint32_t g_crc_table[8][256];

static void crc_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    g_crc_table[0][i] = c;
  }
  for (int k = 1; k < 8; k++)
    for (int i = 0; i < 256; i++) {
      const uint32_t c = g_crc_table[k - 1][i];
      g_crc_table[k][i] = g_crc_table[0][c & 0xFF] ^ (c >> 8);
    }
}

uint32_t vt_crc32(uint32_t crc, const void *data, size_t nbytes) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;  // the save thread may be the first caller
  pthread_once(&once, crc_tables);
  const uint32_t(*t)[256] = (const uint32_t(*)[256])g_crc_table;
  const uint8_t *p = data;
  crc = ~crc;
  for (; nbytes >= 8; p += 8, nbytes -= 8) {
    // The bytes in stream order, so this holds on any byte order.
    const uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 24);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; nbytes > 0; p++, nbytes--) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

vt_status vt_file_crc32(const char *path, int64_t *nbytes, uint32_t *crc, char *err,
                        size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) FAIL(VT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  const size_t cap = 1 << 20;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    FAIL(VT_ERR_IO, "out of memory reading %s", path);
  }
  size_t n;
  *nbytes = 0, *crc = 0;
  while ((n = fread(buf, 1, cap, f)) > 0) *crc = vt_crc32(*crc, buf, n), *nbytes += (int64_t)n;
  int bad = ferror(f);
  fclose(f);
  free(buf);
  if (bad) FAIL(VT_ERR_IO, "cannot read %s", path);
  return VT_OK;
}

void vt_ckpt_step_dir(const char *save_dir, int64_t step, char *dir, size_t size) {
  snprintf(dir, size, "%s/step-%08" PRId64, save_dir, step);
}

int vt_mkdir_p(const char *dir) {
  char path[1024];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int sync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

void vt_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[4352];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  closedir(d);
  rmdir(dir);
}

vt_status vt_ckpt_begin(const char *save_dir, int64_t step, char *tmp_dir, size_t tmp_len,
                        char *err, size_t errlen) {
  if (vt_mkdir_p(save_dir) != 0) FAIL(VT_ERR_IO, "cannot create --save %s: %s", save_dir, strerror(errno));
  snprintf(tmp_dir, tmp_len, "%s/.tmp-step-%08" PRId64, save_dir, step);
  vt_remove_dir(tmp_dir);
  if (mkdir(tmp_dir, 0755) != 0) FAIL(VT_ERR_IO, "cannot create %s: %s", tmp_dir, strerror(errno));
  return VT_OK;
}

void vt_ckpt_abandon(const char *tmp_dir) { vt_remove_dir(tmp_dir); }

// The step-* directories of save_dir, newest first: the cap newest where there are more.
// Returns how many (at most cap).
static int list_steps(const char *save_dir, int64_t *steps, int cap) {
  DIR *d = opendir(save_dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && cap > 0) {
    int64_t s;
    char tail;
    if (sscanf(e->d_name, "step-%" SCNd64 "%c", &s, &tail) != 1 || s < 0) continue;
    if (n == cap && s <= steps[n - 1]) continue;  // (older than all kept)
    int j = n < cap ? n++ : n - 1;  // insertion, newest first; a full list drops its oldest
    for (; j > 0 && s > steps[j - 1]; j--) steps[j] = steps[j - 1];
    steps[j] = s;
  }
  closedir(d);
  return n;
}

// Writes text to path and syncs it: 0, or -1 with errno set.
static int write_synced(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(text, 1, len, f) == len;
  ok = fflush(f) == 0 && ok && fsync(fileno(f)) == 0;
  const int why = errno;  // (the first failure's, which fclose would replace)
  if (fclose(f) != 0) return -1;
  errno = why;
  return ok ? 0 : -1;
}

// Reads the small file path whole into text (NUL-terminated): its length, or -1.
static long read_small(const char *path, char *text, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  const size_t n = fread(text, 1, cap - 1, f);
  fclose(f);
  text[n] = '\0';
  return n == cap - 1 ? -1 : (long)n;
}

// The recovery marks of a save (checkpoint.h): rank 0's manifest without the CRC-32s, and each
// rank's part-R.
static const char k_draft[] = "manifest.draft";

vt_status vt_ckpt_mark_draft(const char *tmp_dir, const vt_ckpt_manifest *m, char *err,
                             size_t errlen) {
  char path[1300], text[8192];
  const int len = vt_ckpt_manifest_format(m, text, sizeof text);
  snprintf(path, sizeof path, "%s/%s", tmp_dir, k_draft);
  if (write_synced(path, text, (size_t)len) != 0)
    FAIL(VT_ERR_IO, "writing %s failed: %s (is the disk full?)", path, strerror(errno));
  return VT_OK;
}

vt_status vt_ckpt_mark_part(const char *tmp_dir, int rank, int nfiles, const uint32_t *shares,
                            const int64_t *nbytes, char *err, size_t errlen) {
  char path[1300], text[64 + 32 * VT_CKPT_MAX_FILES];
  int k = snprintf(text, sizeof text, "vit3d part %d\n", rank);
  for (int f = 0; f < nfiles && f < VT_CKPT_MAX_FILES; f++)
    k += snprintf(text + k, sizeof text - (size_t)k, "%08x %" PRId64 "\n", shares[f], nbytes[f]);
  snprintf(path, sizeof path, "%s/part-%06d", tmp_dir, rank);
  if (write_synced(path, text, (size_t)k) != 0)
    FAIL(VT_ERR_IO, "writing %s failed: %s (is the disk full?)", path, strerror(errno));
  return VT_OK;
}

// Removes the recovery marks from tmp_dir (once its manifest.txt is written).
static void remove_marks(const char *tmp_dir) {
  DIR *d = opendir(tmp_dir);
  if (!d) return;
  struct dirent *e;
  char path[1300];
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "part-", 5) == 0 || strcmp(e->d_name, k_draft) == 0)
      snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name), remove(path);
  closedir(d);
}

// The manifest of tmp's interrupted save from its marks (the draft, every rank's part), with
// the files' CRC-32s from the ranks' shares, written as tmp/manifest.txt. VT_OK and m filled;
// VT_ERR_INPUT with the reason; VT_ERR_IO where manifest.txt cannot be written.
static vt_status manifest_from_marks(const char *tmp, vt_ckpt_manifest *m, char *err,
                                     size_t errlen) {
  char path[1400], text[16384], why[400];
  snprintf(path, sizeof path, "%.1300s/%s", tmp, k_draft);
  const long n = read_small(path, text, sizeof text);
  if (n < 0) FAIL(VT_ERR_INPUT, "it has no %s (the save stopped before its files were made)",
                  k_draft);
  if (vt_ckpt_manifest_parse(text, (size_t)n, m, why, sizeof why) != VT_OK)
    FAIL(VT_ERR_INPUT, "its %s is unreadable: %s", k_draft, why);
  const int64_t world = (int64_t)m->tp * m->pp * m->dp;
  if (world < 1 || world > (1 << 24)) FAIL(VT_ERR_INPUT, "its %s names no mesh", k_draft);
  uint32_t share[VT_CKPT_MAX_FILES] = {0};
  int64_t bytes[VT_CKPT_MAX_FILES] = {0};
  for (int64_t r = 0; r < world; r++) {
    snprintf(path, sizeof path, "%.1300s/part-%06" PRId64, tmp, r);
    if (read_small(path, text, sizeof text) < 0)
      FAIL(VT_ERR_INPUT, "rank %" PRId64 " of its %" PRId64 " had not written its part",
           r, world);
    const char *p = text;
    int at = 0, who = -1;
    if (sscanf(p, "vit3d part %d\n%n", &who, &at) != 1 || who != r || at == 0)
      FAIL(VT_ERR_INPUT, "%.900s is unreadable", path);
    for (int f = 0; f < m->nfiles; f++) {
      unsigned s;
      int64_t nb;
      p += at, at = 0;
      if (sscanf(p, "%8x %" SCNd64 "\n%n", &s, &nb, &at) != 2 || at == 0 || nb < 0)
        FAIL(VT_ERR_INPUT, "%.900s is unreadable", path);
      share[f] ^= s, bytes[f] += nb;
    }
  }
  for (int f = 0; f < m->nfiles; f++) {
    if (bytes[f] != m->file_nbytes[f])
      FAIL(VT_ERR_INPUT, "its ranks wrote %" PRId64 " bytes of %s's %" PRId64, bytes[f],
           m->file[f], m->file_nbytes[f]);
    m->file_crc[f] = vt_crc32_of_shares(&share[f], 1, m->file_nbytes[f]);
  }
  const int len = vt_ckpt_manifest_format(m, text, sizeof text);
  snprintf(path, sizeof path, "%.1300s/manifest.txt", tmp);
  if (write_synced(path, text, (size_t)len) != 0)
    FAIL(VT_ERR_IO, "cannot write %.900s: %s", path, strerror(errno));
  return VT_OK;
}

// The manifest of tmp's interrupted save, where it can be made: from its marks (*from_marks
// 1), else the commit's own manifest.txt (written before the commit removes the marks), if it
// reads. Otherwise the marks' reason (VT_ERR_IO: manifest.txt could not be written).
static vt_status recovered_manifest(const char *tmp, vt_ckpt_manifest *m, int *from_marks,
                                    char *err, size_t errlen) {
  const vt_status st = manifest_from_marks(tmp, m, err, errlen);
  *from_marks = st == VT_OK;
  if (st != VT_ERR_INPUT) return st;
  char path[1400], why[600];
  snprintf(path, sizeof path, "%.1300s/manifest.txt", tmp);
  if (access(path, F_OK) == 0 && vt_ckpt_check(tmp, m, 0, NULL, why, sizeof why) == VT_OK)
    return VT_OK;
  return st;
}

// The .tmp-* folders of save_dir (at most cap): names, and steps newest first (-1 for a folder
// of no step). Returns how many.
static int list_leftovers(const char *save_dir, char (*names)[256], int64_t *steps, int cap) {
  int n = 0;
  DIR *d = opendir(save_dir);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    int64_t s;
    char tail;
    if (strncmp(e->d_name, ".tmp-", 5) != 0 || strlen(e->d_name) >= sizeof names[0]) continue;
    if (sscanf(e->d_name, ".tmp-step-%" SCNd64 "%c", &s, &tail) != 1 || s < 0) s = -1;
    int j = n++;
    for (; j > 0 && s > steps[j - 1]; j--)
      steps[j] = steps[j - 1], memcpy(names[j], names[j - 1], sizeof names[0]);
    steps[j] = s;
    snprintf(names[j], sizeof names[0], "%s", e->d_name);
  }
  closedir(d);
  return n;
}

int vt_ckpt_continues(const char *resume, const char *save_dir) {
  if (strcmp(resume, "auto") == 0) return 1;
  struct stat a, b;
  return stat(resume, &a) == 0 && stat(save_dir, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

int64_t vt_ckpt_leftover(const char *save_dir) {
  char names[64][256];
  int64_t steps[64];
  const int n = list_leftovers(save_dir, names, steps, 64);
  return n > 0 ? steps[0] : -1;
}

int64_t vt_ckpt_leftover_bytes(const char *save_dir) {
  char names[64][256], path[1600];
  int64_t steps[64], bytes = 0;
  const int n = list_leftovers(save_dir, names, steps, 64);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%.1000s/%.255s", save_dir, names[i]);
    DIR *d = opendir(path);
    struct dirent *e;
    struct stat st;
    while (d && (e = readdir(d)) != NULL) {
      snprintf(path, sizeof path, "%.1000s/%.255s/%.255s", save_dir, names[i], e->d_name);
      if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) bytes += (int64_t)st.st_size;
    }
    if (d) closedir(d);
  }
  return bytes;
}

void vt_ckpt_discard(const char *save_dir, const char *why) {
  char names[64][256], tmp[1300];
  int64_t steps[64];
  const int n = list_leftovers(save_dir, names, steps, 64);
  for (int i = 0; i < n; i++) {
    snprintf(tmp, sizeof tmp, "%.1000s/%.255s", save_dir, names[i]);
    vt_log_warn("removing %s, left by an interrupted save: %s", tmp, why);
    vt_remove_dir(tmp);
  }
}

vt_status vt_ckpt_recover(const char *save_dir, int keep_last, int64_t keep_every,
                          int64_t *recovered, char *err, size_t errlen) {
  char names[64][256];
  int64_t steps[64];  // (listed first: a commit renames them)
  const int n = list_leftovers(save_dir, names, steps, 64);
  int64_t committed = -1;
  list_steps(save_dir, &committed, 1);
  *recovered = -1;
  for (int i = 0; i < n; i++) {
    char tmp[1300], why[1400];
    vt_ckpt_manifest m;
    snprintf(tmp, sizeof tmp, "%.1000s/%.255s", save_dir, names[i]);
    // Not before the newest checkpoint (an older save belongs to another line of training: its
    // commit would set the newer ones aside; one of that step is the later try at it, whose
    // commit would replace the other). Committed with every file's size and CRC-32 read and
    // checked: as sound as any checkpoint, so --keep-last's rotation may go on.
    vt_status st = VT_ERR_INPUT;
    int from_marks = 0;
    if (steps[i] < 0)
      snprintf(why, sizeof why, "its name is not .tmp-step-N");
    else if (steps[i] < committed)
      snprintf(why, sizeof why, "step-%08" PRId64 " is newer, so it belongs to another line of "
               "training", committed);
    else
      st = recovered_manifest(tmp, &m, &from_marks, why, sizeof why);
    if (st == VT_OK && vt_ckpt_verify(tmp, &m, why, sizeof why) != VT_OK) {
      st = VT_ERR_INPUT;
      if (from_marks) {  // (a damaged file, or a damaged mark)
        char said[sizeof why];
        snprintf(said, sizeof said, "%s", why);
        snprintf(why, sizeof why, "its files do not match its ranks' marks: %.1300s", said);
      }
    }
    if (st == VT_OK && m.step != steps[i])
      st = VT_ERR_INPUT, snprintf(why, sizeof why, "its manifest is of step %" PRId64, m.step);
    if (st == VT_OK) st = vt_ckpt_commit(save_dir, tmp, &m, keep_last, keep_every, why,
                                         sizeof why);
    if (st == VT_ERR_IO)  // (the save may be whole: not removed for a disk's trouble)
      FAIL(VT_ERR_IO, "cannot recover the interrupted save %s: %s. It is left in place: free "
           "space (or mend the file system) and run again, or remove it to resume from the "
           "checkpoint before it", tmp, why);
    if (st == VT_OK) {
      char dir[1100];
      vt_ckpt_step_dir(save_dir, m.step, dir, sizeof dir);
      if (from_marks)
        vt_log_warn("recovered %s: every rank had written its part of step %" PRId64 "'s save, "
                    "which stopped before its commit (sizes and CRC-32s verified)", dir, m.step);
      else
        vt_log_warn("recovered %s: step %" PRId64 "'s save had written its manifest when it "
                    "stopped before its commit (sizes and CRC-32s verified)", dir, m.step);
      *recovered = committed = m.step;
    } else {
      vt_log_warn("removing %s, left by an interrupted save: %s", tmp, why);
      vt_remove_dir(tmp);
    }
  }
  return VT_OK;
}

// A checkpoint past the step being committed, or a complete one of that step, belongs to
// another line of training (the run resumed from an older one: a rollback, or --resume auto
// passing over a damaged newest) and would be taken for this run's newest by a later --resume
// auto, or rotate this run's saves away: it is renamed abandoned-step-N (abandoned-step-N.K
// where that exists), not deleted. One of that step that is damaged (damaged: why) is renamed
// damaged-step-N: its intact files may still be of use (its weights where its optimizer state
// is what was lost).
static void set_aside(const char *save_dir, int64_t step, int64_t committed,
                      const char *damaged) {
  char from[1100], to[1200];
  const char *prefix = damaged ? "damaged" : "abandoned";
  vt_ckpt_step_dir(save_dir, step, from, sizeof from);
  for (int k = 0; k < 1000; k++) {
    if (k == 0) snprintf(to, sizeof to, "%s/%s-step-%08" PRId64, save_dir, prefix, step);
    else snprintf(to, sizeof to, "%s/%s-step-%08" PRId64 ".%d", save_dir, prefix, step, k);
    struct stat st;
    if (stat(to, &st) == 0) {
      errno = EEXIST;
      continue;
    }
    if (rename(from, to) != 0) break;
    if (damaged)
      vt_log_warn("renamed %s to %s: it is damaged (%s), and this run saves step %" PRId64
                  " in its place; vit3d inspect %s says which of its files are intact; delete "
                  "it when it is not needed", from, to, damaged, committed, to);
    else if (step == committed)
      vt_log_warn("renamed %s to %s: this run, resumed from an older checkpoint, is saving step "
                  "%" PRId64 " again, and the one there is of another line of training or "
                  "damaged in its bytes (vit3d inspect %s says which); delete it when it is not "
                  "needed", from, to, committed, to);
    else
      vt_log_warn("renamed %s to %s: this run, resumed from an older checkpoint, is saving step "
                  "%" PRId64 ", so it belongs to another line of training, and --resume auto "
                  "would take it for this run's newest; delete it when it is not needed", from,
                  to, committed);
    return;
  }
  vt_log_warn("cannot rename %s out of the way (%s): this run, resumed from an older "
              "checkpoint, is saving step %" PRId64 ", and --resume auto may take it for this "
              "run's newest; move it away", from, strerror(errno), committed);
}

vt_status vt_ckpt_commit(const char *save_dir, const char *tmp_dir, const vt_ckpt_manifest *m,
                         int keep_last, int64_t keep_every, char *err, size_t errlen) {
  char path[1300], final_dir[1100], text[8192];
  for (int i = 0; i < m->nfiles; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp_dir, m->file[i]);
    if (sync_path(path) != 0) FAIL(VT_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
  }
  int len = vt_ckpt_manifest_format(m, text, sizeof text);
  snprintf(path, sizeof path, "%s/manifest.txt", tmp_dir);
  if (write_synced(path, text, (size_t)len) != 0)
    FAIL(VT_ERR_IO, "writing %s failed: %s (is the disk full?)", path, strerror(errno));
  remove_marks(tmp_dir);
  // The newest complete step-N is what --resume auto takes: another line's checkpoints past
  // this step (and a complete one of this step) go aside before this one is in place, and the
  // rename is the commit (`latest` only a pointer for people and tools).
  int64_t steps[4096];
  int n = list_steps(save_dir, steps, 4096);
  for (int i = 0; i < n && steps[i] > m->step; i++) set_aside(save_dir, steps[i], m->step, NULL);
  vt_ckpt_step_dir(save_dir, m->step, final_dir, sizeof final_dir);
  vt_ckpt_manifest same;
  char why[600];
  struct stat sd;
  if (stat(final_dir, &sd) == 0) {
    const vt_status st = vt_ckpt_check(final_dir, &same, 0, NULL, why, sizeof why);
    set_aside(save_dir, m->step, m->step, st == VT_OK ? NULL : why);
  }
  vt_remove_dir(final_dir);  // (one that could not be set aside: its step is this save's)
  if (sync_path(tmp_dir) != 0 || rename(tmp_dir, final_dir) != 0 || sync_path(save_dir) != 0)
    FAIL(VT_ERR_IO, "cannot move %s into place: %s", tmp_dir, strerror(errno));
  snprintf(path, sizeof path, "%s/latest.tmp", save_dir);
  len = snprintf(text, sizeof text, "step-%08" PRId64 "\n", m->step);
  const int ok = write_synced(path, text, (size_t)len) == 0;
  char latest[1100];
  snprintf(latest, sizeof latest, "%s/latest", save_dir);
  if (!ok || rename(path, latest) != 0 || sync_path(save_dir) != 0) {
    vt_log_warn("cannot update %s: %s; %s is complete and --resume auto takes it (the newest "
                "complete step-N)", latest, strerror(errno), final_dir);
    remove(path);
  }
  n = list_steps(save_dir, steps, 4096);
  int kept = 0;
  for (int i = 0; i < n; i++) {
    if (steps[i] > m->step) continue;  // (one that set_aside could not move)
    if (keep_last <= 0 || kept++ < keep_last) continue;  // steps[i] == m->step comes first
    if (keep_every > 0 && steps[i] % keep_every == 0) continue;  // a milestone stays
    vt_ckpt_step_dir(save_dir, steps[i], final_dir, sizeof final_dir);
    vt_remove_dir(final_dir);
  }
  return VT_OK;
}

// vt_ckpt_check's, of every file, or of the file named only (with its CRC-32 when crc).
static vt_status check_dir(const char *dir, vt_ckpt_manifest *m, int crc, const char *only,
                           char *err, size_t errlen) {
  char path[1300], text[16384];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *f = fopen(path, "rb");
  if (!f) {  // (a mistyped path is not an unfinished checkpoint)
    struct stat sd;
    if (stat(dir, &sd) != 0)
      FAIL(VT_ERR_INPUT, "%s does not exist (%s): give a checkpoint folder (SAVE/step-N) or a "
           "--save folder", dir, strerror(errno));
    if (!S_ISDIR(sd.st_mode))
      FAIL(VT_ERR_INPUT, "%s is not a folder: give a checkpoint folder (SAVE/step-N) or a --save "
           "folder", dir);
    FAIL(VT_ERR_INPUT, "%s is not a complete checkpoint: no manifest.txt", dir);
  }
  size_t n = fread(text, 1, sizeof text, f);
  fclose(f);
  if (n == sizeof text) FAIL(VT_ERR_INPUT, "%s: manifest.txt is too long", dir);
  char why[400];
  if (vt_ckpt_manifest_parse(text, n, m, why, sizeof why) != VT_OK)
    FAIL(VT_ERR_INPUT, "%s: %s", dir, why);
  // A step-N folder holds step N (a manifest of another step would load other files than the
  // folder's own, or resume at another step).
  const char *base = strrchr(dir, '/');
  base = base && !base[1] ? NULL : base ? base + 1 : dir;
  char *digits_end;
  if (base && !strncmp(base, "step-", 5) && isdigit((unsigned char)base[5])) {
    const long long named = strtoll(base + 5, &digits_end, 10);
    if (!*digits_end && named != m->step)
      FAIL(VT_ERR_INPUT, "%s is damaged: its manifest says step %" PRId64 " (it was changed, or "
           "the folder renamed)", dir, m->step);
  }
  for (int i = 0; i < m->nfiles; i++) {
    int64_t nb = 0;
    uint32_t sum = 0;
    struct stat sb;
    if (only && strcmp(m->file[i], only) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, m->file[i]);
    if (crc) {
      if (vt_file_crc32(path, &nb, &sum, why, sizeof why) != VT_OK)
        FAIL(VT_ERR_INPUT, "%s is damaged: %s", dir, why);
    } else {
      if (stat(path, &sb) != 0)
        FAIL(VT_ERR_INPUT, "%s is damaged: cannot open %s: %s", dir, path, strerror(errno));
      nb = (int64_t)sb.st_size;
    }
    if (nb != m->file_nbytes[i])
      FAIL(VT_ERR_INPUT, "%s is damaged: %s has %" PRId64 " bytes, the manifest says %" PRId64,
           dir, m->file[i], nb, m->file_nbytes[i]);
    if (crc && sum != m->file_crc[i])
      FAIL(VT_ERR_INPUT, "%s is damaged: %s has CRC-32 %08x, the manifest says %08x", dir,
           m->file[i], sum, m->file_crc[i]);
  }
  return VT_OK;
}

vt_status vt_ckpt_check(const char *dir, vt_ckpt_manifest *m, int crc, const char *only,
                        char *err, size_t errlen) {
  return check_dir(dir, m, crc, only, err, errlen);
}

vt_status vt_ckpt_verify(const char *dir, vt_ckpt_manifest *m, char *err, size_t errlen) {
  return check_dir(dir, m, 1, NULL, err, errlen);
}

vt_status vt_ckpt_manifest_read(const char *dir, vt_ckpt_manifest *m, char *err,
                                size_t errlen) {
  return check_dir(dir, m, 0, "", err, errlen);  // (no file is named "")
}

vt_status vt_ckpt_verify_file(const char *dir, vt_ckpt_manifest *m, const char *file, char *err,
                              size_t errlen) {
  const vt_status st = check_dir(dir, m, 1, file, err, errlen);
  if (st == VT_OK && !vt_ckpt_manifest_lists(m, file))
    FAIL(VT_ERR_INPUT, "%s's manifest lists no %s", dir, file);
  return st;
}

int vt_ckpt_candidates(const char *save_dir, int64_t *steps, int cap) {
  return list_steps(save_dir, steps, cap);
}

int64_t vt_ckpt_latest_named(const char *save_dir) {
  char latest[1100], name[128] = "";
  snprintf(latest, sizeof latest, "%s/latest", save_dir);
  FILE *f = fopen(latest, "rb");
  if (!f) return -1;
  if (!fgets(name, sizeof name, f)) name[0] = '\0';
  fclose(f);
  name[strcspn(name, "\n")] = '\0';
  int64_t step = -1;
  char tail;
  if (sscanf(name, "step-%" SCNd64 "%c", &step, &tail) != 1 || step < 0) step = -1;
  return step;
}

void vt_ckpt_latest_differs(const char *save_dir, int64_t chosen) {
  const int64_t named = vt_ckpt_latest_named(save_dir);
  if (named >= 0 && named < chosen)
    vt_log_warn("%s/latest names step-%08" PRId64 ", but step-%08" PRId64 " is newer and "
                "complete: taking it (a save whose `latest` update failed; if it belongs to "
                "another line of training, move it away)", save_dir, named, chosen);
}

vt_status vt_ckpt_find_latest(const char *save_dir, char *dir, size_t dir_len, vt_ckpt_manifest *m) {
  char err[600];
  int64_t steps[4096];
  const int n = vt_ckpt_candidates(save_dir, steps, 4096);
  for (int i = 0; i < n; i++) {
    vt_ckpt_step_dir(save_dir, steps[i], dir, dir_len);
    if (vt_ckpt_verify(dir, m, err, sizeof err) == VT_OK) {
      if (i > 0) vt_log_warn("using the previous complete checkpoint %s", dir);
      vt_ckpt_latest_differs(save_dir, steps[i]);
      return VT_OK;
    }
    vt_log_warn("%s; trying older checkpoints", err);
  }
  return VT_ERR_INPUT;
}

int vt_ckpt_is_checkpoint(const char *path) {
  char manifest[1200];
  snprintf(manifest, sizeof manifest, "%s/manifest.txt", path);
  return access(manifest, F_OK) == 0;
}

vt_status vt_ckpt_open(const char *path, char *dir, size_t dir_len, vt_ckpt_manifest *m,
                       char *err, size_t errlen) {
  if (vt_ckpt_is_checkpoint(path)) {
    snprintf(dir, dir_len, "%s", path);
    return vt_ckpt_verify(dir, m, err, errlen);
  }
  struct stat sp;
  if (stat(path, &sp) != 0) {
    snprintf(err, errlen, "%s does not exist (%s): give a checkpoint folder (SAVE/step-N) or a "
             "--save folder", path, strerror(errno));
    return VT_ERR_INPUT;
  }
  if (vt_ckpt_find_latest(path, dir, dir_len, m) == VT_OK) return VT_OK;
  snprintf(err, errlen, "%s holds no complete checkpoint (neither a manifest.txt nor a step-N "
           "folder that verifies)", path);
  return VT_ERR_INPUT;
}

vt_status vt_output_file_check(const char *path, const char *what, char *err, size_t errlen) {
  struct stat st;
  const size_t n = strlen(path);
  if (n > 0 && path[n - 1] == '/')  // (its folder would be made, then the write would fail)
    FAIL(VT_ERR_INPUT, "%s %s names a folder (it ends with '/'): give the path of a file", what,
         path);
  if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return VT_OK;
  FAIL(VT_ERR_INPUT, "%s %s is a %s, not a file: vit3d writes a new file and renames it into "
       "place, which would replace it; give the path of a file", what, path,
       S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "pipe" : "device or socket");
}

vt_status vt_output_dir_check(const char *path, const char *what, char *err, size_t errlen) {
  char dir[1100], probe[1200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';  // "/file"
  else *slash = '\0';
  snprintf(probe, sizeof probe, "%s/.vit3d-write-check-%ld", dir, (long)getpid());
  vt_mkdir_p(dir);  // (where it cannot, the probe says why)
  const int fd = open(probe, O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0 && errno != EEXIST)  // (another process's probe of the same name: it can write)
    FAIL(VT_ERR_INPUT, "%s %s: cannot make files in %s (%s); give a path in a writable folder",
         what, path, dir, strerror(errno));
  if (fd >= 0) close(fd), unlink(probe);
  return VT_OK;
}

