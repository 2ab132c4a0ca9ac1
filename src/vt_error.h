// vt_error.h: the two error tiers, rank-tagged logging and the clock its timings use.
// Fatal errors (VT_CHECK) print where and why, then call the abort hook, which parallel/ points
// at MPI_Abort so that one failing rank ends the whole job instead of leaving others hanging.
// Recoverable errors at input boundaries return vt_status with a message for the user.
// Must not depend on MPI, CUDA or the model.
#ifndef VT_ERROR_H
#define VT_ERROR_H

#include <stdarg.h>
#include <stddef.h>


// _Noreturn in C, [[noreturn]] in C++ (the .cu files include this header too).
#ifdef __cplusplus
#define VT_NORETURN [[noreturn]]
#else
#define VT_NORETURN _Noreturn
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { VT_OK = 0, VT_ERR_INPUT = 1, VT_ERR_IO = 2 } vt_status;

// The rank tag printed in front of every message: "[rank 5 tp 1 pp 0 dp 2]". A coordinate of -1
// is left out, so a single process prints "[rank 0]".
typedef struct {
  int world_rank, tp_rank, pp_rank, dp_rank;
} vt_rank_tag;

void vt_set_rank_tag(vt_rank_tag tag);
vt_rank_tag vt_get_rank_tag(void);

// The hook runs after a fatal message is printed; it must not return (default: abort()).
typedef void (*vt_abort_hook)(int code);
void vt_set_abort_hook(vt_abort_hook hook);

VT_NORETURN void vt_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define VT_CHECK(cond, ...)                              \
  do {                                                   \
    if (!(cond)) vt_fatal(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// Logging: rank-tagged lines on stderr. vt_log_info prints only on world rank 0 unless
// vt_log_all_ranks(1) was called; warnings and errors print on every rank.
void vt_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vt_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vt_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vt_log_all_ranks(int on);

// Seconds on the monotonic clock, for durations (step times, timeouts, the log's figures).
double vt_seconds(void);

// For input boundaries: writes the message into err (when err and errlen are given) and returns
// VT_ERR_INPUT, so a check reads `return vt_fail_input(err, errlen, "...", ...);`.
vt_status vt_fail_input(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// text for a message: control bytes and bytes that are not ASCII as '?' (a binary file's bytes
// would go to the terminal), cut to fit buf with "..." where it was longer. Returns buf.
const char *vt_printable(const char *text, char *buf, size_t size);

// The shortest text of a float (widened: v) that reads back as it exactly ("0.3", not
// "0.300000012"). Returns buf.
const char *vt_float_text(double v, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
