/* util.c — duration parsing, time formatting (JSON writing is in
 * common/jsonw.c, session metadata as JSON in session_json.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

int bf_parse_duration_ns(const char *s, int64_t *ns) {
  if (!s || !*s) return -EINVAL;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !isfinite(v) || v < 0) return -EINVAL;
  double mul = 1e9;
  if (!*end || strcmp(end, "s") == 0)
    mul = 1e9;
  else if (strcmp(end, "ms") == 0)
    mul = 1e6;
  else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
    mul = 60e9;
  else if (strcmp(end, "h") == 0)
    mul = 3600e9;
  else if (strcmp(end, "d") == 0)
    mul = 86400e9;
  else
    return -EINVAL;
  double r = v * mul;
  if (r > 9.2e18) return -EINVAL;
  *ns = (int64_t)r;
  return 0;
}

void bf_fmt_time(int64_t epoch_ns, char *buf, size_t len) {
  time_t t = (time_t)(epoch_ns / 1000000000LL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

void bf_fmt_ns(double ns, char *buf, size_t len) {
  if (ns < 0)
    snprintf(buf, len, "-");
  else if (ns < 1e3)
    snprintf(buf, len, "%.0f ns", ns);
  else if (ns < 1e6)
    snprintf(buf, len, "%.2f us", ns / 1e3);
  else if (ns < 1e9)
    snprintf(buf, len, "%.2f ms", ns / 1e6);
  else
    snprintf(buf, len, "%.2f s", ns / 1e9);
}
