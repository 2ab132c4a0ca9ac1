// vt_check.h: the one check macro of the C test programs. EXPECT(cond, fmt, ...) counts a check
// and, when cond is false, prints "FAIL file:line: message" and counts a failure; a program
// ends with `return failures ? 1 : 0`.
#ifndef VT_CHECK_H_TESTS
#define VT_CHECK_H_TESTS

#include <stdio.h>

// A program of several files defines VT_CHECK_SHARED and defines the counters in one of them.
#ifdef VT_CHECK_SHARED
extern int checks, failures;
#else
static int checks __attribute__((unused)) = 0;
static int failures = 0;
#endif

#define EXPECT(cond, ...)                         \
  do {                                            \
    checks++;                                     \
    if (!(cond)) {                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      failures++;                                 \
    }                                             \
  } while (0)

#endif
