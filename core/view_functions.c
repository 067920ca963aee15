/* view_functions.c — the functions view: terminal table and JSON; with the
 * kernel lens, each function's wall time split into on a CPU, waiting for
 * one and blocked by class (waits.h), each with a 95% interval. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "jsonw.h"
#include "session_json.h"
#include "text.h"
#include "query.h"
#include "util.h"
#include "views.h"
#include "views_int.h"
#include "waits.h"

static void bar(FILE *out, double share, int width) {
  static const char *const parts[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  double cells = share * width;
  if (cells < 0) cells = 0;
  if (cells > width) cells = width;
  int full = (int)cells;
  int frac = (int)((cells - full) * 8);
  for (int i = 0; i < full; i++) fputs("█", out);
  int used = full;
  if (frac > 0 && used < width) {
    fputs(parts[frac], out);
    used++;
  }
  for (; used < width; used++) fputc(' ', out);
}

/* The kernel split of one function: each part's share of the session's
 * wall time with its interval ("kernel":{"cpu":{"share":..,"ci":[..]},..}). */
static void json_split(bf_jw *w, const bf_kw *k, int64_t function_id) {
  const bf_kw_func *f = bf_kw_func_find(k, function_id);
  double n = (double)k->total_samples, tw = k->total_weight;
  bf_jw_key(w, "kernel");
  bf_jw_obj(w);
  for (unsigned c = 1; c < BF_KW_N; c++) {
    double share = f && tw > 0 ? f->units[c] / tw : 0, lo, hi;
    bf_wilson(share * n, n, &lo, &hi);
    bf_jw_key(w, bf_kw_name(c));
    bf_jw_obj(w);
    bf_jw_knum(w, "share", share);
    bf_jw_kpair(w, "ci", lo, hi);
    bf_jw_end(w);
  }
  bf_jw_end(w);
}

/* Terminal: the largest parts of a function's wall time, "network 41.0 cpu 2.1". */
static void text_split(FILE *out, const bf_kw *k, int64_t function_id) {
  const bf_kw_func *f = bf_kw_func_find(k, function_id);
  if (!f || k->total_weight <= 0) return;
  double u[BF_KW_N];
  memcpy(u, f->units, sizeof u);
  for (int round = 0; round < 3; round++) {
    unsigned best = 0;
    for (unsigned c = 1; c < BF_KW_N; c++)
      if (u[c] > u[best]) best = c;
    if (!best || u[best] / k->total_weight < 0.001) break;
    fprintf(out, " %s %.1f", bf_kw_name(best), u[best] / k->total_weight * 100);
    u[best] = 0;
  }
}

static void json_row(bf_jw *w, const bf_func_row *r, int traced, const bf_kw *k) {
  bf_jw_obj(w);
  bf_jw_kstr(w, "file", r->file);
  bf_jw_kstr(w, "qualname", r->qualname);
  bf_jw_kint(w, "firstlineno", r->firstlineno);
  if (!traced) {
    bf_jw_kint(w, "self_samples", r->self_samples);
    bf_jw_kint(w, "total_samples", r->total_samples);
    bf_jw_knum(w, "self_share", r->self_share);
    bf_jw_knum(w, "total_share", r->total_share);
    bf_jw_kpair(w, "self_ci", r->self_lo, r->self_hi);
    bf_jw_kpair(w, "total_ci", r->total_lo, r->total_hi);
    static const char *const tracer_only[] = {"calls", "primitive_calls", "resumes", "self_ns", "total_ns"};
    for (size_t i = 0; i < sizeof tracer_only / sizeof *tracer_only; i++) bf_jw_knull(w, tracer_only[i]);
    if (k) json_split(w, k, r->function_id);
  } else {
    bf_jw_knull(w, "self_samples");
    bf_jw_knull(w, "total_samples");
    bf_jw_knum(w, "self_share", r->self_share);
    bf_jw_knum(w, "total_share", r->total_share);
    bf_jw_knull(w, "self_ci");
    bf_jw_knull(w, "total_ci");
    bf_jw_kint(w, "calls", r->calls);
    bf_jw_kint(w, "primitive_calls", r->primitive_calls);
    bf_jw_kint(w, "resumes", r->resumes);
    bf_jw_kint(w, "self_ns", r->self_ns);
    bf_jw_kint(w, "total_ns", r->total_ns);
    bf_jw_knum(w, "per_call_ns", r->calls > 0 ? (double)r->total_ns / (double)r->calls : NAN);
    if (r->max_ns >= 0) {
      bf_jw_kint(w, "p50_ns", r->p50_ns);
      bf_jw_kint(w, "p90_ns", r->p90_ns);
      bf_jw_kint(w, "p99_ns", r->p99_ns);
      bf_jw_kint(w, "max_ns", r->max_ns);
    }
    if (r->records_kept >= 0 && (r->records_kept > 0 || r->records_dropped > 0)) {
      bf_jw_kint(w, "records_kept", r->records_kept);
      bf_jw_kint(w, "records_dropped", r->records_dropped);
    }
  }
  bf_jw_end(w);
}

/* Focus mode: how many call records the ring kept and how many calls it
 * dropped (percentiles and timelines cover the kept ones only). */
static void focus_note(FILE *out, const bf_profile *p, const char *dim, const char *rst) {
  if (p->records_kept == 0 && p->records_dropped == 0) {
    fprintf(out, "%sfocus: no call matched the focus pattern, so no call records%s\n", dim, rst);
    return;
  }
  fprintf(out, "%sfocus: %lld call records kept, %lld dropped", dim, (long long)p->records_kept,
          (long long)p->records_dropped);
  if (p->records_dropped > 0)
    fprintf(out, " (%.1f%% of the focused calls have no record: the ring was full; percentiles cover the kept ones)",
            100.0 * (double)p->records_dropped / (double)(p->records_kept + p->records_dropped));
  fprintf(out, "%s\n", rst);
}

int bf_view_functions(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_profile *p = NULL;
  int rc = bf_profile_functions(s, session_id, &o->filter, o->sort, &p);
  if (rc) return rc;
  bf_session_info *info = NULL;
  if ((rc = bf_store_session_get(s, session_id, &info))) {
    bf_profile_free(p);
    return rc;
  }
  /* the kernel lens's split, when the session has it */
  bf_kw *k = NULL;
  if (!p->traced && bf_q_kind_of(info) == BF_Q_SAMPLED && bf_q_clock_of(info) == BF_Q_WALL) {
    if ((rc = bf_kw_load(s, session_id, &o->filter, &k))) {
      bf_session_info_free(info);
      bf_profile_free(p);
      return rc;
    }
    if (k->kernel_units <= 0) {
      bf_kw_free(k);
      k = NULL;
    }
  }
  size_t limit = o->limit < 0 ? p->n : (size_t)(o->limit ? o->limit : (o->json ? (int)p->n : 25));
  if (limit > p->n) limit = p->n;
  if (o->json) {
    bf_jw w;
    bf_jw_init(&w, out);
    bf_jw_obj(&w);
    bf_jw_key(&w, "session");
    bf_session_json_jw(&w, info);
    bf_jw_kint(&w, "total_samples", p->traced ? -1 : p->total_samples);
    if (p->records_kept >= 0) { /* focus mode: the calls the ring could not keep */
      bf_jw_key(&w, "focus_records");
      bf_jw_obj(&w);
      bf_jw_kint(&w, "kept", p->records_kept);
      bf_jw_kint(&w, "dropped", p->records_dropped);
      bf_jw_end(&w);
    }
    bf_jw_key(&w, "functions");
    bf_jw_arr(&w);
    for (size_t i = 0; i < limit; i++) json_row(&w, &p->rows[i], p->traced, k);
    bf_jw_end(&w);
    bf_jw_end(&w);
    fputc('\n', out);
  } else {
    const char *b = o->color ? "\033[1m" : "", *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
    int width = o->width > 40 ? o->width : 80;
    char t1[64], t2[64], t3[64], t4[64], t5[512]; /* metadata is untrusted: shown inert */
    fprintf(out, "%ssession %lld%s · %s · %s clock · %s", b, (long long)info->id, rst, bf_inert(info->kind, t1, sizeof t1),
            info->clock ? bf_inert(info->clock, t2, sizeof t2) : "?", info->mode ? bf_inert(info->mode, t3, sizeof t3) : "?");
    if (p->traced)
      fprintf(out, " · traced time %.3f s", (double)p->total_ns / 1e9);
    else
      fprintf(out, " · %lld samples", (long long)p->total_samples);
    if (info->python_version) fprintf(out, " · python %s", bf_inert(info->python_version, t4, sizeof t4));
    if (info->label) fprintf(out, " · %s", bf_inert(info->label, t5, sizeof t5));
    fputc('\n', out);
    if (p->traced) {
      int fw = width - 58;
      if (fw < 20) fw = 20;
      fprintf(out, "%s%9s %9s %9s %9s %9s %6s  %s%s\n", dim, "CALLS", "PRIMITIVE", "SELF", "TOTAL", "PER CALL",
              "SELF%", "FUNCTION", rst);
      for (size_t i = 0; i < limit; i++) {
        const bf_func_row *r = &p->rows[i];
        char sb[32], tb[32], pb[32];
        bf_fmt_ns((double)r->self_ns, sb, sizeof sb);
        bf_fmt_ns((double)r->total_ns, tb, sizeof tb);
        bf_fmt_ns(r->calls > 0 ? (double)r->total_ns / (double)r->calls : -1, pb, sizeof pb);
        char loc[1024];
        bf_fit_func(loc, sizeof loc, r->qualname, r->file, r->firstlineno, fw);
        fprintf(out, "%9lld %9lld %9s %9s %9s %5.1f%%  %s\n", (long long)r->calls, (long long)r->primitive_calls,
                sb, tb, pb, r->self_share * 100, loc);
      }
    } else {
      int fw = width - 52;
      if (fw < 20) fw = 20;
      fprintf(out, "%s%6s %-15s%6s %8s  %-10s  %s%s%s\n", dim, "SELF", " 95% CI", "TOTAL", "SAMPLES", "", "FUNCTION",
              k ? "  [TOTAL: CPU, WAITS]" : "", rst);
      for (size_t i = 0; i < limit; i++) {
        const bf_func_row *r = &p->rows[i];
        char ci[32];
        snprintf(ci, sizeof ci, "[%.1f-%.1f]", r->self_lo * 100, r->self_hi * 100);
        char loc[1024];
        bf_fit_func(loc, sizeof loc, r->qualname, r->file, r->firstlineno, fw);
        fprintf(out, "%5.1f%% %-15s%5.1f%% %8lld  ", r->self_share * 100, ci, r->total_share * 100,
                (long long)r->self_samples);
        bar(out, r->self_share, 10);
        fprintf(out, "  %s", loc);
        if (k) {
          fputs(dim, out);
          fputs("  [", out);
          text_split(out, k, r->function_id);
          fputs(" ]", out);
          fputs(rst, out);
        }
        fputc('\n', out);
      }
      if (p->n == 0) fputs("  (no samples)\n", out);
    }
    if (p->records_kept >= 0) focus_note(out, p, dim, rst);
    if (limit < p->n) {
      char how[64] = ""; /* the option is the caller's */
      if (o->limit_option) snprintf(how, sizeof how, " (use %s)", o->limit_option);
      fprintf(out, "%s… %zu more%s%s\n", dim, p->n - limit, how, rst);
    }
  }
  bf_kw_free(k);
  bf_session_info_free(info);
  bf_profile_free(p);
  return 0;
}
