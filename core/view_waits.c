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

static void json_rows(bf_store *s, const bf_kw *k, size_t limit, FILE *out) {
  for (size_t i = 0; i < limit; i++) {
    const bf_kw_target *t = &k->targets[i];
    if (i) fputc(',', out);
    fputs("{\"class\":", out);
    bf_json_str(out, bf_kw_name(t->wait));
    fputs(",\"target\":", out);
    bf_json_str(out, row_text(t));
    fputs(",\"samples\":", out);
    bf_json_num(out, t->samples);
    fputs(",\"wall_ns\":", out);
    bf_json_num(out, t->units);
    fputs(",\"share\":", out);
    bf_json_num(out, t->share);
    fputs(",\"ci\":[", out);
    bf_json_num(out, t->lo);
    fputc(',', out);
    bf_json_num(out, t->hi);
    fprintf(out, "],\"threads\":%lld,\"under\":", (long long)t->threads);
    bf_function_ref ref;
    if (t->under_function_id && bf_store_function_get(s, t->under_function_id, &ref) == 0) {
      fputs("{\"file\":", out);
      bf_json_str(out, ref.file);
      fputs(",\"qualname\":", out);
      bf_json_str(out, ref.qualname);
      fprintf(out, ",\"firstlineno\":%lld}", (long long)ref.firstlineno);
    } else {
      fputs("null", out);
    }
    fputc('}', out);
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
    fputs("{\"session\":", out);
    bf_session_json(out, info);
    fprintf(out, ",\"total_samples\":%lld,\"kernel_share\":", (long long)k->total_samples);
    bf_json_num(out, k->total_weight > 0 ? k->kernel_units / k->total_weight : 0);
    fputs(",\"split\":{", out);
    for (unsigned c = 0; c < BF_KW_N; c++) {
      if (c) fputc(',', out);
      bf_json_str(out, bf_kw_name(c));
      fputc(':', out);
      bf_json_num(out, k->total_weight > 0 ? k->units[c] / k->total_weight : 0);
    }
    fputs("},\"waits\":[", out);
    json_rows(s, k, limit, out);
    fputs("]}\n", out);
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
