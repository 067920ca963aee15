/* session_json.c — one session's metadata as a JSON object, and the keys its
 * extra_json may not use. The writer itself is common/jsonw.c. */
#include <stdio.h>

#include "jsonw.h"
#include "session_json.h"
#include "util.h"

const char *const bf_session_reserved_extra_keys[] = {
    "id", "kind", "label", "host", "pid", "command", "commit", "status", "redacted", "created", "created_ns",
    "start_ns", "parent_id", "expires_at_ns", "profiler_version", "extra", NULL};

void bf_session_json_jw(bf_jw *w, const bf_session_info *in) {
  char buf[64];
  bf_fmt_time(in->created_ns, buf, sizeof buf);
  bf_jw_obj(w);
  bf_jw_kint(w, "id", in->id);
  bf_jw_kstr(w, "kind", in->kind);
  bf_jw_kstr(w, "label", in->label);
  bf_jw_kstr(w, "clock", in->clock);
  bf_jw_kstr(w, "mode", in->mode);
  bf_jw_knum(w, "rate_hz", in->rate_hz);
  bf_jw_knum(w, "achieved_rate_hz", in->achieved_rate_hz);
  bf_jw_kint(w, "samples", in->samples);
  bf_jw_kint(w, "missed", in->missed);
  bf_jw_kint(w, "invalid", in->invalid);
  bf_jw_knum(w, "duration_s", (double)in->duration_ns / 1e9);
  bf_jw_kstr(w, "python", in->python_version);
  bf_jw_kstr(w, "python_build", in->python_build);
  bf_jw_kstr(w, "status", in->status);
  bf_jw_kstr(w, "created", buf);
  bf_jw_kint(w, "created_ns", in->created_ns);
  bf_jw_kint(w, "start_ns", in->start_ns);
  bf_jw_kint(w, "duration_ns", in->duration_ns);
  bf_jw_kstr(w, "host", in->host);
  bf_jw_kint(w, "pid", in->pid);
  bf_jw_kstr(w, "command", in->command);
  bf_jw_kstr(w, "profiler_version", in->profiler_version);
  bf_jw_kstr(w, "commit", in->commit);
  bf_jw_knum(w, "profiler_cpu_s", (double)in->profiler_cpu_ns / 1e9);
  bf_jw_kint(w, "expires_at_ns", in->expires_at_ns);
  bf_jw_kint(w, "parent_id", in->parent_id);
  bf_jw_kbool(w, "redacted", in->redacted);
  bf_jw_key(w, "extra");
  /* stored metadata is written only when it is one well-formed object: a
   * damaged or forged value must not break or extend the document */
  if (in->extra_json && bf_json_check_object(in->extra_json, NULL, NULL) == 0)
    bf_jw_raw(w, in->extra_json);
  else
    bf_jw_null(w);
  bf_jw_end(w);
}

void bf_session_json(FILE *f, const bf_session_info *in) {
  bf_jw w;
  bf_jw_init(&w, f);
  bf_session_json_jw(&w, in);
}
