/* export_chrome.c — Chrome/Perfetto trace-event JSON ("X" complete events)
 * with process and thread names, so chrome://tracing, Perfetto and
 * speedscope show a timeline: the focus-mode call records of a traced
 * session, or a sampled session's samples per thread (a frame's event spans
 * the consecutive samples that have it on the stack; args.samples counts
 * them; samples without a Python frame are "[no Python frame]" events). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"
#include "jsonw.h"
#include "query.h"
#include "store_int.h"
#include "views_int.h"

/* The head of the file up to the metadata events that name the process and
 * its threads; field is the session's "mode" (traced) or "clock" (sampled).
 * A traced session's thread names are clipped to 255 bytes, as they were. */
static void write_head(bf_jw *w, int64_t session_id, const bf_session_info *info, const char *field,
                       const char *value, long long pid, const bf_thread_ref *th, size_t nth, int clip_names) {
  bf_jw_obj(w);
  bf_jw_kstr(w, "displayTimeUnit", "ms");
  bf_jw_key(w, "otherData");
  bf_jw_obj(w);
  bf_jw_kstr(w, "exporter", "bifocal " BF_VERSION);
  bf_jw_kint(w, "session", (long long)session_id);
  bf_jw_kstr(w, "kind", info->kind);
  bf_jw_kstr(w, field, value);
  bf_jw_end(w);
  bf_jw_key(w, "traceEvents");
  bf_jw_arr(w);
  bf_jw_obj(w);
  bf_jw_kstr(w, "name", "process_name");
  bf_jw_kstr(w, "ph", "M");
  bf_jw_kint(w, "pid", pid);
  bf_jw_kint(w, "tid", 0);
  bf_jw_key(w, "args");
  bf_jw_obj(w);
  bf_jw_kstr(w, "name", info->command ? info->command : "python");
  bf_jw_end(w);
  bf_jw_end(w);
  for (size_t i = 0; i < nth; i++) {
    const char *name = th[i].name ? th[i].name : "thread";
    char lb[256];
    if (clip_names) {
      snprintf(lb, sizeof lb, "%s", name);
      name = lb;
    }
    bf_jw_pad(w, "\n");
    bf_jw_obj(w);
    bf_jw_kstr(w, "name", "thread_name");
    bf_jw_kstr(w, "ph", "M");
    bf_jw_kint(w, "pid", pid);
    bf_jw_kint(w, "tid", (long long)th[i].native_tid);
    bf_jw_key(w, "args");
    bf_jw_obj(w);
    bf_jw_kstr(w, "name", name);
    bf_jw_end(w);
    bf_jw_end(w);
  }
}

/* The start of one "X" event, up to its args object (left open). */
static void event_open(bf_jw *w, const char *name, const char *cat, int64_t start_ns, int64_t dur_ns, long long pid,
                       long long tid) {
  bf_jw_pad(w, "\n");
  bf_jw_obj(w);
  bf_jw_kstr(w, "name", name);
  bf_jw_kstr(w, "cat", cat);
  bf_jw_kstr(w, "ph", "X");
  bf_jw_key(w, "ts");
  bf_jw_numf(w, "%.3f", (double)start_ns / 1e3);
  bf_jw_key(w, "dur");
  bf_jw_numf(w, "%.3f", (double)dur_ns / 1e3);
  bf_jw_kint(w, "pid", pid);
  bf_jw_kint(w, "tid", tid);
  bf_jw_key(w, "args");
  bf_jw_obj(w);
}

/* The end of the export: the events array, the top object, a newline. */
static void write_tail(bf_jw *w, FILE *out) {
  bf_jw_end(w);
  bf_jw_end(w);
  fputs("\n", out);
}

static int export_records(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  bf_q_records a = {0};
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_hold(&w); /* nothing else writes to out until the tail */
  if ((rc = bf_q_call_records_sorted(s, session_id, f, &a))) goto out;
  if (a.n == 0) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld (%s) has no call records: the chrome export of a traced session needs it "
                       "recorded in focus mode", /* remedy: repl/cli_hints.c */
                       (long long)session_id, info->kind ? info->kind : "?");
    goto out;
  }
  if ((rc = bf_store_threads(s, session_id, &th, &nth))) goto out;
  long long pid = info->pid > 0 ? (long long)info->pid : 1;
  write_head(&w, session_id, info, "mode", info->mode, pid, th, nth, 1);
  int64_t *ends = malloc((a.n ? a.n : 1) * sizeof *ends); /* open calls of this thread: nesting depth */
  size_t open = 0;
  if (!ends) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < a.n; i++) {
    const bf_call_record *r = &a.v[i];
    if (i && r->thread_id != a.v[i - 1].thread_id) open = 0;
    while (open && ends[open - 1] <= r->start_ns) open--;
    ends[open++] = r->start_ns + r->duration_ns;
    bf_function_ref ref;
    if ((rc = bf_store_function_get(s, r->function_id, &ref))) {
      free(ends);
      goto out;
    }
    long long tid = 0;
    for (size_t k = 0; k < nth; k++)
      if (th[k].id == r->thread_id) tid = (long long)th[k].native_tid;
    event_open(&w, ref.qualname, "python", r->start_ns, r->duration_ns, pid, tid);
    bf_jw_kstr(&w, "file", ref.file);
    bf_jw_kint(&w, "firstlineno", (long long)ref.firstlineno);
    bf_jw_kint(&w, "depth", (long long)(open - 1));
    bf_jw_end(&w);
    bf_jw_end(&w);
  }
  free(ends);
  write_tail(&w, out);
out:
  bf_jw_flush(&w); /* what an error left gathered, as it was written before */
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_thread_refs_free(th, nth);
  free(a.v);
  bf_session_info_free(info);
  return rc;
}

/* ---- sampled sessions: a per-thread timeline ----------------------------- */

#define CH_MAX_DEPTH 8192

typedef struct chopen {
  int64_t fid; /* -1: no Python frame */
  int64_t start_ns, samples;
} chopen;

typedef struct chtl {
  bf_store *s;
  bf_jw *w;
  long long pid, tid;
  chopen *open;
  size_t depth;
} chtl;

static int close_to(chtl *t, size_t keep, int64_t at) {
  while (t->depth > keep) {
    const chopen *o = &t->open[--t->depth];
    const char *name = "[no Python frame]", *file = "";
    int64_t first = 0;
    if (o->fid >= 0) {
      bf_function_ref ref;
      int rc = bf_store_function_get(t->s, o->fid, &ref);
      if (rc) return rc;
      name = ref.qualname;
      file = ref.file;
      first = ref.firstlineno;
    }
    event_open(t->w, name, "sample", o->start_ns, at - o->start_ns, t->pid, t->tid);
    if (o->fid >= 0) {
      bf_jw_kstr(t->w, "file", file);
      bf_jw_kint(t->w, "firstlineno", (long long)first);
    }
    bf_jw_kint(t->w, "depth", (long long)t->depth);
    bf_jw_kint(t->w, "samples", (long long)o->samples);
    bf_jw_end(t->w);
    bf_jw_end(t->w);
  }
  return 0;
}

static int export_samples(bf_store *s, int64_t session_id, const bf_session_info *info, const bf_sample_filter *f,
                          FILE *out) {
  if (bf_q_kind_of(info) == BF_Q_IMPORTED)
    return bf_store_fail(s, -ENODATA, /* remedy: repl/cli_hints.c */
                         "session %lld is imported: its samples carry no times, so there is no timeline to export",
                         (long long)session_id);
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  bf_q_cursor *c = NULL;
  bf_q_frames *fc = NULL;
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_hold(&w); /* nothing else writes to out until the tail */
  chtl t = {.s = s, .w = &w, .pid = info->pid > 0 ? (long long)info->pid : 1};
  int rc = bf_store_threads(s, session_id, &th, &nth);
  if (rc) return rc;
  t.open = malloc(CH_MAX_DEPTH * sizeof *t.open);
  if (!t.open) {
    rc = -ENOMEM;
    goto out;
  }
  if ((rc = bf_q_timeline_open(s, session_id, f, &c))) goto out;
  /* a sample stands for one sampling period; a longer gap is time not seen */
  int64_t period = info->rate_hz > 0 ? (int64_t)(1e9 / info->rate_hz + 0.5) : 1000000;
  write_head(&w, session_id, info, "clock", info->clock, t.pid, th, nth, 0);
  const bf_sample *smp;
  int64_t thread = -1, last_ts = 0;
  while ((rc = bf_q_timeline_next(c, &smp)) == 1) {
    if (smp->thread_id != thread || smp->ts_ns - last_ts > 2 * period) {
      if ((rc = close_to(&t, 0, last_ts + period))) goto out;
      if (smp->thread_id != thread) {
        thread = smp->thread_id;
        t.tid = 0;
        for (size_t k = 0; k < nth; k++)
          if (th[k].id == thread) t.tid = (long long)th[k].native_tid;
      }
    }
    const int64_t *fids, *lines;
    size_t nf;
    if ((rc = bf_q_frames_get(s, &fc, smp->stack_id, &fids, &lines, &nf))) goto out;
    static const int64_t none = -1;
    if (nf == 0) {
      fids = &none;
      nf = 1;
    }
    if (nf > CH_MAX_DEPTH) nf = CH_MAX_DEPTH;
    size_t same = 0;
    while (same < t.depth && same < nf && t.open[same].fid == fids[same]) same++;
    if ((rc = close_to(&t, same, smp->ts_ns))) goto out;
    for (size_t d = t.depth; d < nf; d++) t.open[t.depth++] = (chopen){fids[d], smp->ts_ns, 0};
    int64_t cnt = smp->count ? smp->count : 1;
    for (size_t d = 0; d < t.depth; d++) t.open[d].samples += cnt;
    last_ts = smp->ts_ns;
  }
  if (rc < 0) goto out;
  if ((rc = close_to(&t, 0, last_ts + period))) goto out;
  write_tail(&w, out);
out:
  bf_jw_flush(&w);
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_q_timeline_close(c);
  bf_q_frames_free(fc);
  free(t.open);
  bf_thread_refs_free(th, nth);
  return rc;
}

int bf_export_chrome(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  if (bf_q_kind_of(info) == BF_Q_TRACED)
    rc = export_records(s, session_id, f, out);
  else
    rc = export_samples(s, session_id, info, f, out);
  bf_session_info_free(info);
  return rc;
}
