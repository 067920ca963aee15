/* util.h — small shared helpers of core/: durations and times (the clocks are
 * common/clock.h). */
#ifndef BF_UTIL_H
#define BF_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "store.h"

/* Parse "90s", "30m", "12h", "7d", "250ms" or plain seconds ("1.5").
 * OUT: *ns. Returns 0 or -EINVAL. */
int bf_parse_duration_ns(const char *s, int64_t *ns);

/* Format epoch ns as "YYYY-MM-DD HH:MM:SS" (UTC) into buf. */
void bf_fmt_time(int64_t epoch_ns, char *buf, size_t len);

/* Format a duration in ns for humans ("1.23 ms", "4.5 s"). */
void bf_fmt_ns(double ns, char *buf, size_t len);

#endif
