// tfevents.c: TensorBoard event files (tfevents.h): protocol-buffer encoding of the few Event
// fields used, TFRecord framing, CRC-32C.
#include "tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "vt_error.h"

struct vt_tfevents {
  int fd;
  off_t end;         // the bytes of whole records written
  int64_t gap_from;  // the first step whose event was left out since the last written, or 0
  char path[700];
};

uint32_t vt_crc32c(const void *data, size_t nbytes) {
  static uint32_t table[256];
  static int ready;  // first called on rank 0's main thread (vt_tfevents_open), before any race
  if (!ready) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  const unsigned char *p = data;
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < nbytes; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t vt_tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

// ---- protocol buffers: a message is built front to back in a fixed buffer -----------------------
typedef struct {
  unsigned char b[8192];
  size_t n;
  int overflow;
} pbuf;

static void put(pbuf *p, const void *src, size_t n) {
  if (p->n + n > sizeof p->b) {
    p->overflow = 1;
    return;
  }
  memcpy(p->b + p->n, src, n);
  p->n += n;
}

static void varint(pbuf *p, uint64_t v) {
  unsigned char tmp[10];
  int k = 0;
  do {
    tmp[k++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(p, tmp, (size_t)k);
}

static void key(pbuf *p, int field, int wire) { varint(p, (uint64_t)(field << 3 | wire)); }

static void little_endian(pbuf *p, uint64_t v, int bytes) {
  unsigned char tmp[8];
  for (int i = 0; i < bytes; i++) tmp[i] = (unsigned char)(v >> (8 * i));
  put(p, tmp, (size_t)bytes);
}

static void field_bytes(pbuf *p, int field, const void *src, size_t n) {
  key(p, field, 2);
  varint(p, n);
  put(p, src, n);
}

// Event fields: wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5
// (Summary: value 1, repeated Value: tag 1, simple_value 2 (float)), session_log 7 (SessionLog:
// status 1, START = 1).
static void event_head(pbuf *e, int64_t step) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double wall = (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
  uint64_t bits;
  memcpy(&bits, &wall, sizeof bits);
  key(e, 1, 1);
  little_endian(e, bits, 8);
  key(e, 2, 0);
  varint(e, (uint64_t)step);
}

// One TFRecord of e at the end of the whole records: 0, or -1 (errno set) with any part written
// taken back, so that the file stays a sequence of whole records for a later one.
static int write_record(vt_tfevents *t, const pbuf *e) {
  if (e->overflow) {
    errno = EMSGSIZE;
    return -1;
  }
  unsigned char r[8 + 4 + sizeof e->b + 4];
  const size_t n = e->n, len = 8 + 4 + n + 4;
  for (int i = 0; i < 8; i++) r[i] = (unsigned char)((uint64_t)n >> (8 * i));
  const uint32_t crc_len = vt_tfrecord_mask(vt_crc32c(r, 8));
  const uint32_t crc_data = vt_tfrecord_mask(vt_crc32c(e->b, n));
  memcpy(r + 12, e->b, n);
  for (int i = 0; i < 4; i++) {
    r[8 + i] = (unsigned char)(crc_len >> (8 * i));
    r[12 + n + i] = (unsigned char)(crc_data >> (8 * i));
  }
  size_t done = 0;
  while (done < len) {
    const ssize_t k = pwrite(t->fd, r + done, len - done, t->end + (off_t)done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      const int saved = k < 0 ? errno : EIO;
      if (done > 0) {  // (where this fails too, TensorBoard's reader stops at the cut record)
        const int ignored = ftruncate(t->fd, t->end);
        (void)ignored;
      }
      errno = saved;
      return -1;
    }
    done += (size_t)k;
  }
  t->end += (off_t)len;
  return 0;
}

vt_tfevents *vt_tfevents_open(const char *dir, int64_t first_step, char *err, size_t errlen) {
  vt_tfevents *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  char host[64] = "host";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  // TensorBoard reads a folder's files in name order, so the name starts with the time to the
  // microsecond, zero-padded: a run started in the same second as the previous one sorts after.
  struct timeval tv;
  gettimeofday(&tv, NULL);
  snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%010lld.%06ld.%s.%d.vit3d", dir,
           (long long)tv.tv_sec, (long)tv.tv_usec, host, (int)getpid());
  t->fd = open(t->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (t->fd < 0) {
    snprintf(err, errlen, "cannot write %s: %s", t->path, strerror(errno));
    free(t);
    return NULL;
  }
  pbuf e = {.n = 0};
  event_head(&e, 0);
  field_bytes(&e, 3, "brain.Event:2", 13);
  int rc = write_record(t, &e);
  if (rc == 0) {
    pbuf s = {.n = 0}, log = {.n = 0};
    key(&log, 1, 0);
    varint(&log, 1);  // SessionLog.START
    event_head(&s, first_step);
    field_bytes(&s, 7, log.b, log.n);
    rc = write_record(t, &s);
  }
  if (rc != 0) {
    snprintf(err, errlen, "cannot write %s: %s", t->path, strerror(errno));
    close(t->fd);
    free(t);
    return NULL;
  }
  return t;
}

int vt_tfevents_scalars(vt_tfevents *t, int64_t step, int n, const char *const *tags,
                        const float *values) {
  if (!t) return -1;
  pbuf e = {.n = 0}, summary = {.n = 0};
  for (int i = 0; i < n; i++) {
    pbuf v = {.n = 0};
    field_bytes(&v, 1, tags[i], strlen(tags[i]));
    uint32_t bits;
    memcpy(&bits, &values[i], sizeof bits);
    key(&v, 2, 5);
    little_endian(&v, bits, 4);
    field_bytes(&summary, 1, v.b, v.n);
    summary.overflow |= v.overflow;
  }
  event_head(&e, step);
  field_bytes(&e, 5, summary.b, summary.n);
  e.overflow |= summary.overflow;
  if (write_record(t, &e) == 0) {
    if (t->gap_from > 0)
      vt_log_info("TensorBoard events %s: written again from step %lld (steps %lld-%lld are not "
                  "in it)", t->path, (long long)step, (long long)t->gap_from,
                  (long long)step - 1);
    t->gap_from = 0;
    return 0;
  }
  if (t->gap_from == 0)
    vt_log_warn("TensorBoard events %s: cannot write step %lld's event (%s): it is left out, and "
                "so are the later steps' until one can be written (metrics.jsonl, training and "
                "checkpoints go on)", t->path, (long long)step, strerror(errno));
  if (t->gap_from == 0) t->gap_from = step;
  return -1;
}

const char *vt_tfevents_path(const vt_tfevents *t) { return t ? t->path : ""; }

void vt_tfevents_close(vt_tfevents *t) {
  if (!t) return;
  close(t->fd);
  free(t);
}
