/* clock.h — the two clocks every layer reads: monotonic (intervals,
 * deadlines) and wall (unix-epoch timestamps), in nanoseconds. Inline: the
 * sampler reads them on its hot path. No project includes. */
#ifndef BF_CLOCK_H
#define BF_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns: only differences mean anything. */
static inline int64_t bf_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_REALTIME in ns since the unix epoch. */
static inline int64_t bf_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#endif
