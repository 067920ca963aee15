/* util.c — JSON string escaping, duration parsing, time formatting. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

void bf_json_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (*p < 0x20)
          fprintf(f, "\\u%04x", *p);
        else
          fputc(*p, f);
    }
  }
  fputc('"', f);
}

void bf_json_num(FILE *f, double v) {
  if (!isfinite(v))
    fputs("null", f);
  else if (v == floor(v) && fabs(v) < 9e15)
    fprintf(f, "%.0f", v);
  else
    fprintf(f, "%.9g", v);
}

void bf_json_session(FILE *f, const bf_session_info *in) {
  fprintf(f, "{\"id\":%lld,\"kind\":", (long long)in->id);
  bf_json_str(f, in->kind);
  fputs(",\"label\":", f);
  bf_json_str(f, in->label);
  fputs(",\"clock\":", f);
  bf_json_str(f, in->clock);
  fputs(",\"mode\":", f);
  bf_json_str(f, in->mode);
  fputs(",\"rate_hz\":", f);
  bf_json_num(f, in->rate_hz);
  fputs(",\"achieved_rate_hz\":", f);
  bf_json_num(f, in->achieved_rate_hz);
  fprintf(f, ",\"samples\":%lld,\"missed\":%lld,\"invalid\":%lld,\"duration_s\":", (long long)in->samples,
          (long long)in->missed, (long long)in->invalid);
  bf_json_num(f, (double)in->duration_ns / 1e9);
  fputs(",\"python\":", f);
  bf_json_str(f, in->python_version);
  fputs(",\"python_build\":", f);
  bf_json_str(f, in->python_build);
  fputs(",\"status\":", f);
  bf_json_str(f, in->status);
  char buf[64];
  bf_fmt_time(in->created_ns, buf, sizeof buf);
  fputs(",\"created\":", f);
  bf_json_str(f, buf);
  fprintf(f, ",\"created_ns\":%lld,\"start_ns\":%lld,\"duration_ns\":%lld,\"host\":", (long long)in->created_ns,
          (long long)in->start_ns, (long long)in->duration_ns);
  bf_json_str(f, in->host);
  fprintf(f, ",\"pid\":%lld,\"command\":", (long long)in->pid);
  bf_json_str(f, in->command);
  fputs(",\"profiler_version\":", f);
  bf_json_str(f, in->profiler_version);
  fputs(",\"commit\":", f);
  bf_json_str(f, in->commit);
  fputs(",\"profiler_cpu_s\":", f);
  bf_json_num(f, (double)in->profiler_cpu_ns / 1e9);
  fprintf(f, ",\"expires_at_ns\":%lld,\"parent_id\":%lld,\"redacted\":%s", (long long)in->expires_at_ns,
          (long long)in->parent_id, in->redacted ? "true" : "false");
  fputs(",\"extra\":", f);
  if (in->extra_json && in->extra_json[0] == '{')
    fputs(in->extra_json, f);
  else
    fputs("null", f);
  fputc('}', f);
}

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

int64_t bf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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
