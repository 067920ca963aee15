/* check.h — the tiny assert helper of the C unit tests. */
#ifndef BF_CHECK_H
#define BF_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int bf_check_failures;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      bf_check_failures++;                                                   \
    }                                                                        \
  } while (0)
#define CHECK_EQ_INT(a, b)                                                               \
  do {                                                                                   \
    long long _a = (long long)(a), _b = (long long)(b);                                  \
    if (_a != _b) {                                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, \
              #a, #b, _a, _b);                                                           \
      bf_check_failures++;                                                               \
    }                                                                                    \
  } while (0)
#define CHECK_DONE() (bf_check_failures ? (fprintf(stderr, "%d check(s) failed\n", bf_check_failures), 1) : 0)
#endif
