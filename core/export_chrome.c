/* export_chrome.c — Chrome/Perfetto trace-event JSON ("X" complete events)
 * of the focus-mode call records of a traced session, with process and
 * thread names, so chrome://tracing, Perfetto and speedscope show a timeline. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "util.h"
#include "views.h"
#include "views_int.h"

typedef struct recs {
  bf_call_record *v;
  size_t n, cap;
  const bf_sample_filter *f;
} recs;

static int add_rec(void *ud, const bf_call_record *r) {
  recs *a = ud;
  if (a->f) {
    if (a->f->thread_id && r->thread_id != a->f->thread_id) return 0;
    if (r->start_ns < a->f->since_ns) return 0;
    if (a->f->until_ns > 0 && r->start_ns >= a->f->until_ns) return 0;
  }
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 1024;
    bf_call_record *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return -ENOMEM;
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = *r;
  return 0;
}

static int cmp_rec(const void *a, const void *b) {
  const bf_call_record *x = a, *y = b;
  if (x->thread_id != y->thread_id) return x->thread_id < y->thread_id ? -1 : 1;
  if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
  /* enclosing call first when two start together */
  if (x->duration_ns != y->duration_ns) return x->duration_ns > y->duration_ns ? -1 : 1;
  return (x->depth > y->depth) - (x->depth < y->depth);
}

int bf_export_chrome(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  recs a = {.f = f};
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  if ((rc = bf_store_call_records_foreach(s, session_id, add_rec, &a))) goto out;
  if (a.n == 0) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld (%s) has no call records: the chrome export needs a traced session recorded "
                       "in focus mode (try --format speedscope or pstats)",
                       (long long)session_id, info->kind ? info->kind : "?");
    goto out;
  }
  if ((rc = bf_store_threads(s, session_id, &th, &nth))) goto out;
  qsort(a.v, a.n, sizeof *a.v, cmp_rec);
  long long pid = info->pid > 0 ? (long long)info->pid : 1;
  fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"exporter\":\"bifocal " BF_VERSION "\",\"session\":", out);
  fprintf(out, "%lld,\"kind\":", (long long)session_id);
  bf_json_str(out, info->kind);
  fputs(",\"mode\":", out);
  bf_json_str(out, info->mode);
  fputs("},\"traceEvents\":[", out);
  fprintf(out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":0,\"args\":{\"name\":", pid);
  bf_json_str(out, info->command ? info->command : "python");
  fputs("}}", out);
  for (size_t i = 0; i < nth; i++) {
    fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%lld,\"args\":{\"name\":", pid,
            (long long)th[i].native_tid);
    char lb[256];
    snprintf(lb, sizeof lb, "%s", th[i].name ? th[i].name : "thread");
    bf_json_str(out, lb);
    fputs("}}", out);
  }
  for (size_t i = 0; i < a.n; i++) {
    const bf_call_record *r = &a.v[i];
    bf_function_ref ref;
    if ((rc = bf_store_function_get(s, r->function_id, &ref))) goto out;
    long long tid = 0;
    for (size_t k = 0; k < nth; k++)
      if (th[k].id == r->thread_id) tid = (long long)th[k].native_tid;
    fputs(",\n{\"name\":", out);
    bf_json_str(out, ref.qualname);
    fprintf(out, ",\"cat\":\"python\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%lld,\"tid\":%lld,\"args\":{\"file\":",
            (double)r->start_ns / 1e3, (double)r->duration_ns / 1e3, pid, tid);
    bf_json_str(out, ref.file);
    fprintf(out, ",\"firstlineno\":%lld,\"depth\":%d}}", (long long)ref.firstlineno, (int)r->depth);
  }
  fputs("]}\n", out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_thread_refs_free(th, nth);
  free(a.v);
  bf_session_info_free(info);
  return rc;
}
