/* session_json.c — one session's metadata as a JSON object, and the keys its
 * extra_json may not use. The writer itself is common/jsonw.c. */
#include <stdio.h>

#include "jsonw.h"
#include "session_json.h"
#include "util.h"

const char *const bf_session_reserved_extra_keys[] = {
    "id", "kind", "label", "host", "pid", "command", "commit", "status", "redacted", "created", "created_ns",
    "start_ns", "parent_id", "expires_at_ns", "profiler_version", "extra", NULL};

void bf_session_json(FILE *f, const bf_session_info *in) {
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
  /* stored metadata is written only when it is one well-formed object: a
   * damaged or forged value must not break or extend the document */
  if (in->extra_json && bf_json_check_object(in->extra_json, NULL, NULL) == 0)
    fputs(in->extra_json, f);
  else
    fputs("null", f);
  fputc('}', f);
}
