/* view_waits.c — the waits view: the kernel lens's wait targets ranked by
 * their share of the session's wall time ("recvfrom tcp 10.0.0.5:5432 —
 * 41% of wall [40–42], 3 threads, under fetch_rows"), terminal and JSON. */
#include <errno.h>
#include <string.h>

#include "jsonw.h"
#include "session_json.h"
#include "store_int.h"
#include "text.h"
#include "views.h"
#include "views_int.h"
#include "waits.h"

/* What a target row is called: its text, or the state it stands for. */
static const char *row_text(const bf_kw_target *t) {
  if (t->wait == BF_KW_RUNQ) return "[waiting for CPU]";
  if (t->wait == BF_WAIT_CPU) return "[on CPU]";
  return t->text && *t->text ? t->text : "[unknown]";
}

static void json_rows(bf_store *s, const bf_kw *k, size_t limit, bf_jw *w) {
  for (size_t i = 0; i < limit; i++) {
    const bf_kw_target *t = &k->targets[i];
    bf_jw_obj(w);
    bf_jw_kstr(w, "class", bf_kw_name(t->wait));
    bf_jw_kstr(w, "target", row_text(t));
    bf_jw_knum(w, "samples", t->samples);
    bf_jw_knum(w, "wall_ns", t->units);
    bf_jw_knum(w, "share", t->share);
    bf_jw_key(w, "ci");
    bf_jw_arr(w);
    bf_jw_num(w, t->lo);
    bf_jw_num(w, t->hi);
    bf_jw_end(w);
    bf_jw_kint(w, "threads", (long long)t->threads);
    bf_jw_key(w, "under");
    bf_function_ref ref;
    if (t->under_function_id && bf_store_function_get(s, t->under_function_id, &ref) == 0) {
      bf_jw_obj(w);
      bf_jw_kstr(w, "file", ref.file);
      bf_jw_kstr(w, "qualname", ref.qualname);
      bf_jw_kint(w, "firstlineno", (long long)ref.firstlineno);
      bf_jw_end(w);
    } else {
      bf_jw_null(w);
    }
    bf_jw_end(w);
  }
}

static void text_rows(bf_store *s, const bf_kw *k, size_t limit, const bf_view_opts *o, FILE *out) {
  const char *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  int width = o->width > 40 ? o->width : 80;
  int tw = (width - 40) / 2 + 8;
  if (tw < 24) tw = 24;
  fprintf(out, "%s%6s %-15s%7s  %-8s %-*s  %s%s\n", dim, "WALL", " 95% CI", "THREADS", "CLASS", tw, "WAIT", "UNDER",
          rst);
  for (size_t i = 0; i < limit; i++) {
    const bf_kw_target *t = &k->targets[i];
    char ci[40], nbuf[512], ubuf[512];
    snprintf(ci, sizeof ci, "[%.1f-%.1f]", t->lo * 100, t->hi * 100);
    bf_function_ref ref;
    const char *under = "";
    if (t->under_function_id && bf_store_function_get(s, t->under_function_id, &ref) == 0)
      under = bf_inert(ref.qualname ? ref.qualname : "?", ubuf, sizeof ubuf);
    const char *name = bf_inert(row_text(t), nbuf, sizeof nbuf); /* addresses and paths come from the target */
    fprintf(out, "%5.1f%% %-15s%7lld  %-8s %-*s  %s\n", t->share * 100, ci, (long long)t->threads,
            bf_kw_name(t->wait), tw, name, under);
  }
}

int bf_view_waits(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  if (strcmp(info->kind ? info->kind : "", "sampled") != 0) {
    rc = bf_store_fail(s, -ENODATA, "the waits view needs a sampled session (session %lld is %s)",
                       (long long)session_id, info->kind ? info->kind : "of no kind");
    bf_session_info_free(info);
    return rc;
  }
  bf_kw *k = NULL;
  if ((rc = bf_kw_load(s, session_id, &o->filter, &k))) {
    bf_session_info_free(info);
    return rc;
  }
  size_t limit = o->limit < 0 ? k->ntargets : (size_t)(o->limit ? o->limit : (o->json ? (int)k->ntargets : 25));
  if (limit > k->ntargets) limit = k->ntargets;
  if (o->json) {
    bf_jw w;
    bf_jw_init(&w, out);
    bf_jw_obj(&w);
    bf_jw_key(&w, "session");
    FILE *sf = bf_jw_file(&w);
    if (sf) bf_session_json(sf, info);
    bf_jw_kint(&w, "total_samples", (long long)k->total_samples);
    bf_jw_knum(&w, "kernel_share", k->total_weight > 0 ? k->kernel_units / k->total_weight : 0);
    bf_jw_key(&w, "split");
    bf_jw_obj(&w);
    for (unsigned c = 0; c < BF_KW_N; c++)
      bf_jw_knum(&w, bf_kw_name(c), k->total_weight > 0 ? k->units[c] / k->total_weight : 0);
    bf_jw_end(&w);
    bf_jw_key(&w, "waits");
    bf_jw_arr(&w);
    json_rows(s, k, limit, &w);
    bf_jw_end(&w);
    bf_jw_end(&w);
    fputc('\n', out);
  } else {
    const char *b = o->color ? "\033[1m" : "", *rst = o->color ? "\033[0m" : "";
    char t1[64];
    fprintf(out, "%ssession %lld%s · %s clock · %lld samples · waits (kernel lens)\n", b, (long long)info->id, rst,
            info->clock ? bf_inert(info->clock, t1, sizeof t1) : "?", (long long)k->total_samples);
    if (k->kernel_units <= 0)
      fputs("  (no kernel states: record with the wall clock, without --no-kernel)\n", out);
    else
      text_rows(s, k, limit, o, out);
    if (limit < k->ntargets) {
      char how[64] = "";
      if (o->limit_option) snprintf(how, sizeof how, " (use %s)", o->limit_option);
      fprintf(out, "… %zu more%s\n", k->ntargets - limit, how);
    }
  }
  bf_kw_free(k);
  bf_session_info_free(info);
  return 0;
}
