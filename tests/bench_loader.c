// bench_loader.c: vit3d's side of the loader benchmark (bench_loader.sh, label `bench`): the
// training loader (random-resized crop to S, flip, normalise) over an ImageFolder for a few
// epochs with T decoder threads; prints images/s, per core (T threads = T cores) and per CPU-second.
// `--stages` instead times one thread's read and its bytes-to-sample work (vt_sample_from_bytes,
// the loader's own function: probe, reduced decode, render) per image, beside the full decode
// + render of the same crops for comparison, and what the reduced decode did (scale, window).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "dataset.h"
#include "image.h"
#include "loader.h"
#include "sample.h"
#include "transform.h"
#include "vt_error.h"

static double wall_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// CPU seconds of every thread of this process. The machine is shared, so wall-clock rates move
// with other people's jobs; CPU time per image is the steadier "per core" figure.
static double cpu_now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
         (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static double thread_cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_loader DATA_DIR THREADS EPOCHS [BATCH=16] [LABEL=-]\n"
          "       bench_loader --stages DATA_DIR EPOCHS [LABEL=-]\n");
  exit(2);
}

static vt_dataset open_or_die(const char *dir) {
  vt_dataset ds;
  char err[512];
  if (vt_dataset_open(dir, &ds, err, sizeof err) != VT_OK) {
    fprintf(stderr, "bench_loader: %s\n", err);
    exit(1);
  }
  return ds;
}

// Runs epochs [first_epoch, first_epoch + epochs) of the stream through a fresh loader and
// returns how many images were delivered; *wall and *cpu get the time from creating the loader
// to the last batch. Threads may already be decoding samples past the last batch then (at most
// T - 1 of them): their CPU time is counted against vit3d, which keeps the figure conservative.
static int64_t run_epochs(const vt_dataset *ds, int threads, int batch, int first_epoch,
                          int epochs, double *wall, double *cpu) {
  vt_loader_config c = {0};
  c.ds = ds;
  c.S = 224;
  c.batch = batch;
  c.threads = threads;
  c.prefetch = 2;  // as the trainer's default: enough to keep every thread busy
  c.seed = 1234;
  c.train = 1;
  c.want_pixels = 1;
  c.max_pixels = (int64_t)1 << 28;
  c.bad_policy = VT_BAD_FAIL;  // a decode failure would make the rate meaningless
  c.tc = vt_transform_defaults();
  c.per_step = 1;  // one rank, one micro-batch per step: batch j is positions [j*B, (j+1)*B)
  c.step_stride = batch;
  c.offset = 0;
  const int64_t per_epoch = ds->count / batch;  // the caller made count a multiple of batch
  char err[640];
  double w0 = wall_now(), c0 = cpu_now();
  vt_loader *l = vt_loader_create(&c, (int64_t)first_epoch * per_epoch, err, sizeof err);
  if (!l) {
    fprintf(stderr, "bench_loader: %s\n", err);
    exit(1);
  }
  int64_t images = 0;
  double sink = 0;  // touches each batch, as a consumer would, so no work can be skipped
  for (int64_t j = 0; j < (int64_t)epochs * per_epoch; j++) {
    vt_batch b;
    if (vt_loader_next(l, &b, err, sizeof err) != VT_OK) {
      fprintf(stderr, "bench_loader: %s\n", err);
      exit(1);
    }
    sink += b.images[0] + b.images[(size_t)batch * 3 * 224 * 224 - 1];
    images += b.valid;
  }
  *wall = wall_now() - w0;
  *cpu = cpu_now() - c0;
  vt_loader_destroy(l);
  if (sink != sink) fprintf(stderr, "bench_loader: NaN in the output\n");
  return images;
}

// One thread, the loader's work split into its stages, to see where a sample's time goes: read
// the file; bytes to the 224 x 224 normalised floats exactly as the loader does them (reduced
// decode); and, for comparison, the same crops through a full decode (full_decode = 1) and
// through the reduced decode with Pillow's bicubic resize (--train-interpolation bicubic).
static int stages(const char *dir, int epochs, const char *label) {
  vt_dataset ds = open_or_die(dir);
  vt_transform_config tc = vt_transform_defaults(), tc_bicubic = tc;
  tc_bicubic.train_interp = VT_INTERP_BICUBIC;
  float *out = malloc((size_t)3 * 224 * 224 * sizeof(float));
  double t_read = 0, t_sample = 0, t_full = 0, t_bicubic = 0, bytes = 0, scale_sum = 0,
         win_frac = 0;
  int64_t n = 0;
  int at_scale[9] = {0};
  char err[512];
  vt_sample_spec sp = {.tc = &tc, .S = 224, .train = 1, .seed = 1234,
                       .max_pixels = (int64_t)1 << 28};
  for (int e = 0; e < epochs; e++) {
    for (int64_t i = 0; i < ds.count; i++) {
      double t0 = thread_cpu_now();
      uint8_t *buf;
      size_t got;
      if (vt_dataset_read(&ds, i, sp.max_pixels, &buf, &got, err, sizeof err) != VT_IMG_OK) {
        fprintf(stderr, "bench_loader: %s\n", err);
        return 1;
      }
      double t1 = thread_cpu_now();
      sp.epoch = e;
      sp.index = i;
      sp.full_decode = 0;
      vt_sample_stats st;
      if (vt_sample_from_bytes(buf, got, &sp, out, &st, err, sizeof err) != VT_IMG_OK) {
        fprintf(stderr, "bench_loader: %s: %s\n", ds.paths[i], err);
        return 1;
      }
      double t2 = thread_cpu_now();
      sp.full_decode = 1;
      if (vt_sample_from_bytes(buf, got, &sp, out, NULL, err, sizeof err) != VT_IMG_OK) {
        fprintf(stderr, "bench_loader: %s: %s\n", ds.paths[i], err);
        return 1;
      }
      double t3 = thread_cpu_now();
      vt_sample_spec sb = sp;
      sb.full_decode = 0;
      sb.tc = &tc_bicubic;
      if (vt_sample_from_bytes(buf, got, &sb, out, NULL, err, sizeof err) != VT_IMG_OK) {
        fprintf(stderr, "bench_loader: %s: %s\n", ds.paths[i], err);
        return 1;
      }
      double t4 = thread_cpu_now();
      if (e == 0 && i == 0) {  // untimed: the first decode pays for page faults and lazy setup
        free(buf);
        continue;
      }
      t_read += t1 - t0;
      t_sample += t2 - t1;
      t_full += t3 - t2;
      t_bicubic += t4 - t3;
      bytes += (double)got;
      scale_sum += st.scale;
      at_scale[st.scale]++;
      win_frac += (double)st.win_w * st.win_h * st.scale * st.scale /
                  ((double)st.info.width * st.info.height);
      n++;
      free(buf);
    }
  }
  if (n == 0) return 1;
  printf("vit3d-stages format=%s images=%lld file_kb=%.0f ms_per_image: read=%.2f "
         "sample=%.2f (full_decode_sample=%.2f bicubic_sample=%.2f, %.2fx) total=%.2f "
         "scale_mean=%.2f scales_1/2/4/8=%d/%d/%d/%d decoded_area=%.0f%%\n",
         label, (long long)n, bytes / n / 1024, 1e3 * t_read / n, 1e3 * t_sample / n,
         1e3 * t_full / n, 1e3 * t_bicubic / n, t_bicubic / t_sample,
         1e3 * (t_read + t_sample) / n, scale_sum / n, at_scale[1],
         at_scale[2], at_scale[4], at_scale[8], 100 * win_frac / n);
  free(out);
  vt_dataset_free(&ds);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--stages") == 0) {
    if (argc < 4) usage();
    return stages(argv[2], atoi(argv[3]), argc > 4 ? argv[4] : "-");
  }
  if (argc < 4) usage();
  const char *dir = argv[1];
  int threads = atoi(argv[2]), epochs = atoi(argv[3]);
  int batch = argc > 4 ? atoi(argv[4]) : 16;
  const char *label = argc > 5 ? argv[5] : "-";
  if (threads < 1 || epochs < 1 || batch < 1) usage();
  vt_dataset ds = open_or_die(dir);
  if (ds.count % batch != 0) {
    fprintf(stderr, "bench_loader: %lld images is not a multiple of the batch %d\n",
            (long long)ds.count, batch);
    return 2;
  }
  double wall, cpu;
  // Epoch 0 warms the page cache and the allocator; only the later epochs are timed.
  run_epochs(&ds, threads, batch, 0, 1, &wall, &cpu);
  int64_t images = run_epochs(&ds, threads, batch, 1, epochs, &wall, &cpu);
  printf("vit3d format=%s mode=threads threads=%d batch=%d images=%lld wall_s=%.3f img_s=%.2f "
         "img_s_per_core=%.2f cpu_s=%.3f img_per_cpu_s=%.2f\n",
         label, threads, batch, (long long)images, wall, images / wall, images / wall / threads,
         cpu, images / cpu);
  vt_dataset_free(&ds);
  return 0;
}
