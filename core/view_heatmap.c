/* view_heatmap.c — how load moves over time: time buckets × the top
 * functions by self share, each cell the function's self share of its bucket.
 * Terminal rendering (shades, colour on a TTY), HTML table, or JSON. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "text.h"
#include "views.h"
#include "views_int.h"
#include "vec.h"

typedef struct hm {
  bf_store *s;
  int by_weight;
  int64_t t0, t1, bucket_ns;
  int nb;
  bf_map3 leaf;   /* stack id → function index + 1 (0 = empty stack) */
  bf_map3 fidx;   /* function id → index */
  int64_t *fids;
  size_t nfn, fcap;
  double *cells;  /* nfn × nb */
  double *btot;   /* per bucket: all value */
  int64_t *bcount;
  int64_t nsamples;
  int err;
  /* the ranking, once filled */
  struct rank *rk;
  size_t top;            /* rows shown */
  double all, hottest;   /* all value; hottest cell relative to its bucket */
  double bucket_s, t0_s;
  int label_w, width;
} hm;

static int row_label(hm *h, size_t r, char *buf, size_t len);

static int range_pass(void *ud, const bf_sample *smp) {
  hm *h = ud;
  if (h->nsamples == 0 || smp->ts_ns < h->t0) h->t0 = smp->ts_ns;
  if (h->nsamples == 0 || smp->ts_ns > h->t1) h->t1 = smp->ts_ns;
  h->nsamples++;
  return 0;
}

static int leaf_of(hm *h, int64_t stack_id, int64_t *out) {
  int64_t *hit = bf_map3_get(&h->leaf, stack_id, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  int64_t parent, frame, fid, line;
  int rc = bf_store_stack_get(h->s, stack_id, &parent, &frame);
  if (!rc) rc = bf_store_frame_get(h->s, frame, &fid, &line);
  if (rc) return rc;
  int64_t *fi = bf_map3_get(&h->fidx, fid, 0, 0), idx;
  if (fi) {
    idx = *fi;
  } else {
    size_t fids_cap = h->fcap; /* both arrays share h->fcap; a row of cells is nb wide */
    if (bf_vec_grow((void **)&h->fids, &fids_cap, h->nfn + 1, sizeof *h->fids, 64) ||
        bf_vec_grow_zero((void **)&h->cells, &h->fcap, h->nfn + 1, (size_t)h->nb * sizeof *h->cells, 64))
      return -ENOMEM;
    idx = (int64_t)h->nfn;
    h->fids[h->nfn++] = fid;
    if (bf_map3_put(&h->fidx, fid, 0, 0, idx)) return -ENOMEM;
  }
  *out = idx + 1;
  return bf_map3_put(&h->leaf, stack_id, 0, 0, idx + 1) ? -ENOMEM : 0;
}

static int fill_pass(void *ud, const bf_sample *smp) {
  hm *h = ud;
  int b = (int)((smp->ts_ns - h->t0) / h->bucket_ns);
  if (b >= h->nb) b = h->nb - 1;
  if (b < 0) b = 0;
  double v = h->by_weight ? (double)smp->weight : (double)(smp->count ? smp->count : 1);
  h->btot[b] += v;
  h->bcount[b] += smp->count ? smp->count : 1;
  if (smp->stack_id <= 0) return 0;
  int64_t li;
  int rc = leaf_of(h, smp->stack_id, &li);
  if (rc) return rc;
  h->cells[(size_t)(li - 1) * (size_t)h->nb + (size_t)b] += v;
  return 0;
}

typedef struct rank {
  size_t idx;
  double sum;
} rank;

static int cmp_rank(const void *a, const void *b) {
  const rank *x = a, *y = b;
  return x->sum < y->sum ? 1 : x->sum > y->sum ? -1 : 0;
}

static void shade(FILE *out, double x, int color) {
  /* x in 0..1 relative to the hottest cell */
  static const char *const ch[] = {" ", "░", "▒", "▓", "█"};
  if (color) {
    static const int ramp[] = {236, 52, 88, 124, 160, 196, 202, 208, 214, 220, 226};
    int k = x <= 0 ? -1 : (int)(x * 10.999);
    if (k < 0)
      fputs("\033[48;5;235m \033[0m", out);
    else
      fprintf(out, "\033[48;5;%dm \033[0m", ramp[k]);
    return;
  }
  int k = x <= 0 ? 0 : 1 + (int)(x * 3.999);
  fputs(ch[k > 4 ? 4 : k], out);
}

static int hm_json(hm *h, const bf_session_info *info, FILE *out) {
  int rc = 0;
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  bf_jw_key(&w, "session");
  bf_session_json_jw(&w, info);
  bf_jw_kstr(&w, "value", h->by_weight ? "weight" : "samples");
  bf_jw_knum(&w, "start_s", h->t0_s);
  bf_jw_knum(&w, "bucket_s", h->bucket_s);
  bf_jw_key(&w, "bucket_samples");
  bf_jw_arr(&w);
  for (int b = 0; b < h->nb; b++) bf_jw_int(&w, h->bcount[b]);
  bf_jw_end(&w);
  bf_jw_key(&w, "functions");
  bf_jw_arr(&w);
  for (size_t r = 0; r < h->top; r++) {
    bf_function_ref ref;
    if ((rc = bf_store_function_get(h->s, h->fids[h->rk[r].idx], &ref))) return rc;
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "qualname", ref.qualname);
    bf_jw_kstr(&w, "file", ref.file);
    bf_jw_kint(&w, "firstlineno", ref.firstlineno);
    bf_jw_knum(&w, "self_share", h->all > 0 ? h->rk[r].sum / h->all : 0);
    bf_jw_key(&w, "cells");
    bf_jw_arr(&w);
    for (int b = 0; b < h->nb; b++)
      bf_jw_num(&w, h->btot[b] > 0 ? h->cells[h->rk[r].idx * (size_t)h->nb + (size_t)b] / h->btot[b] : 0);
    bf_jw_end(&w);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
  return rc;
}

/* Untrusted text for the page: inert first (an ESC or BEL in a name must not
 * reach a terminal that prints the file, as in every other view), then
 * escaped for HTML text and attributes. */
static void html_put(void *ud, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char one[2] = {b[i], 0};
    bf_html_str(ud, one);
  }
}

static void html_inert(FILE *out, const char *s) { bf_inert_put(s, html_put, out); }

static int hm_html(hm *h, const bf_session_info *info, int64_t session_id, FILE *out) {
  int rc = 0;
  char sub[1024];
  bf_session_line(info, 1, sub, sizeof sub);
  fputs("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        "<title>bifocal heatmap</title><style>"
        "body{font:13px/1.4 system-ui,sans-serif;margin:14px;color:#222}h1{font-size:16px;margin:0}"
        ".sub{color:#555;font-size:12px;margin-bottom:10px}table{border-collapse:collapse}"
        "td{padding:0;height:20px}td.c{width:14px;border:1px solid #fff}"
        "td.n{padding:0 10px 0 0;font:12px ui-monospace,Menlo,monospace;white-space:nowrap;text-align:right}"
        "td.s{padding:0 0 0 8px;font:12px ui-monospace,monospace;color:#555}"
        ".axis td{font-size:11px;color:#666;height:auto}.legend{margin-top:10px;font-size:12px;color:#555}"
        "</style></head><body><h1>bifocal heatmap — session ",
        out);
  fprintf(out, "%lld</h1><div class=\"sub\">", (long long)session_id);
  html_inert(out, sub);
  fprintf(out, " · %lld samples · %d buckets of %.3g s · cell = the function's self share of the bucket</div><table>",
          (long long)h->nsamples, h->nb, h->bucket_s);
  for (size_t r = 0; r < h->top; r++) {
    bf_function_ref ref;
    if ((rc = bf_store_function_get(h->s, h->fids[h->rk[r].idx], &ref))) return rc;
    fputs("<tr><td class=\"n\" title=\"", out);
    html_inert(out, ref.file);
    fprintf(out, ":%lld\">", (long long)ref.firstlineno);
    char name[1024];
    if ((rc = row_label(h, r, name, sizeof name))) return rc;
    html_inert(out, name);
    fputs("</td>", out);
    for (int b = 0; b < h->nb; b++) {
      double x = h->btot[b] > 0 ? h->cells[h->rk[r].idx * (size_t)h->nb + (size_t)b] / h->btot[b] : 0;
      double a = h->hottest > 0 ? x / h->hottest : 0;
      fprintf(out, "<td class=\"c\" style=\"background:rgba(214,39,40,%.3f)\" title=\"", a < 0.03 && x > 0 ? 0.03 : a);
      html_inert(out, name);
      fprintf(out, " · %.2f–%.2f s · %.1f%% of %lld samples\"></td>", h->t0_s + b * h->bucket_s, h->t0_s + (b + 1) * h->bucket_s,
              x * 100, (long long)h->bcount[b]);
    }
    fprintf(out, "<td class=\"s\">%.1f%%</td></tr>\n", h->all > 0 ? 100 * h->rk[r].sum / h->all : 0);
  }
  fprintf(out, "<tr class=\"axis\"><td></td><td colspan=\"%d\">%.1f s</td><td colspan=\"%d\" style=\"text-align:right\">"
               "%.1f s</td><td></td></tr></table>",
          h->nb / 2, h->t0_s, h->nb - h->nb / 2, h->t0_s + h->nb * h->bucket_s);
  fprintf(out, "<div class=\"legend\">Darkest cell = %.1f%% of its bucket. Right column: self share over the whole "
               "window.</div></body></html>\n", h->hottest * 100);
  return rc;
}

/* The last k '/'-separated parts of path (all of it when it has fewer). */
static const char *path_tail(const char *path, int k) {
  const char *p = path + strlen(path);
  while (p > path) {
    if (p[-1] == '/' && --k == 0) break;
    p--;
  }
  return p;
}

/* Row r's name as shown: its qualname; when another shown row has the same
 * qualname (two util.py with a `work`), with as many trailing parts of its
 * file as tell them apart ("work (a/util.py)"), and :firstlineno when even
 * the paths are the same; a label depends on the other rows' files only,
 * never on their order. OUT: buf. */
static int row_label(hm *h, size_t r, char *buf, size_t len) {
  bf_function_ref me, o;
  int rc = bf_store_function_get(h->s, h->fids[h->rk[r].idx], &me);
  if (rc) return rc;
  const char *q = me.qualname ? me.qualname : "", *file = me.file ? me.file : "";
  int same_name = 0, same_file = 0, k = 1;
  for (size_t i = 0; i < h->top; i++) {
    if (i == r) continue;
    if ((rc = bf_store_function_get(h->s, h->fids[h->rk[i].idx], &o))) return rc;
    const char *of = o.file ? o.file : "";
    if (strcmp(q, o.qualname ? o.qualname : "") != 0) continue;
    same_name = 1;
    if (strcmp(file, of) == 0) {
      same_file = 1;
      continue;
    }
    /* more parts until the tails differ (the paths do, so some k does) */
    while (strcmp(path_tail(file, k), path_tail(of, k)) == 0 && path_tail(file, k) != file) k++;
  }
  if (!same_name)
    snprintf(buf, len, "%s", q);
  else if (same_file)
    snprintf(buf, len, "%s (%s:%lld)", q, path_tail(file, k), (long long)me.firstlineno);
  else
    snprintf(buf, len, "%s (%s)", q, path_tail(file, k));
  return 0;
}

/* A name right-aligned in width columns, inert (controls escaped), its head
 * cut to "…" when longer; counted and cut in code points, never inside one. */
static void put_label(FILE *out, const char *name, size_t width) {
  char nb[1024];
  const char *q = bf_inert(name, nb, sizeof nb);
  size_t cps = 0;
  for (const char *c = q; *c; c++) cps += ((unsigned char)*c & 0xC0) != 0x80;
  if (cps > width) {
    for (size_t skip = cps - width + 1; *q && skip;) { /* drop code points from the front */
      q++;
      while (((unsigned char)*q & 0xC0) == 0x80) q++;
      skip--;
    }
    fputs("…", out);
    cps = width - 1;
  }
  for (size_t i = cps; i < width; i++) fputc(' ', out);
  fputs(q, out);
  fputc(' ', out);
}

static int hm_text(hm *h, const bf_view_opts *o, const bf_session_info *info, FILE *out) {
  int rc = 0;
  const char *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  bf_put_title(out, "heatmap", info, h->width, o->color);
  fputc('\n', out);
  fprintf(out, "%s%lld samples; cell = self share of its %.3g s bucket, darkest %.1f%%%s\n", dim,
          (long long)h->nsamples, h->bucket_s, h->hottest * 100, rst);
  for (size_t r = 0; r < h->top; r++) {
    char name[1024];
    if ((rc = row_label(h, r, name, sizeof name))) return rc;
    put_label(out, name, (size_t)h->label_w);
    for (int k = 0; k < h->nb; k++) {
      double x = h->btot[k] > 0 ? h->cells[h->rk[r].idx * (size_t)h->nb + (size_t)k] / h->btot[k] : 0;
      shade(out, h->hottest > 0 ? x / h->hottest : 0, o->color);
    }
    fprintf(out, " %5.1f%%\n", h->all > 0 ? 100 * h->rk[r].sum / h->all : 0);
  }
  char l[32], rgt[32];
  snprintf(l, sizeof l, "%.1fs", h->t0_s);
  snprintf(rgt, sizeof rgt, "%.1fs", h->t0_s + h->nb * h->bucket_s);
  fprintf(out, "%s%*s %-*s%s%s\n", dim, h->label_w, "", h->nb - (int)strlen(rgt), l, rgt, rst);
  if (h->top < h->nfn) {
    char how[64] = ""; /* the option is the caller's */
    if (o->limit_option) snprintf(how, sizeof how, " (use %s)", o->limit_option);
    fprintf(out, "%s… %zu more functions%s%s\n", dim, h->nfn - h->top, how, rst);
  }
  return rc;
}

/* Ranks the functions by self value over the window and finds the hottest
 * cell among the shown rows. */
static int hm_rank(hm *h, const bf_view_opts *o) {
  for (int b = 0; b < h->nb; b++) h->all += h->btot[b];
  h->rk = calloc(h->nfn ? h->nfn : 1, sizeof *h->rk);
  if (!h->rk) return -ENOMEM;
  for (size_t i = 0; i < h->nfn; i++) {
    h->rk[i].idx = i;
    for (int b = 0; b < h->nb; b++) h->rk[i].sum += h->cells[i * (size_t)h->nb + (size_t)b];
  }
  qsort(h->rk, h->nfn, sizeof *h->rk, cmp_rank);
  h->top = o->limit > 0 ? (size_t)o->limit : 12;
  if (h->top > h->nfn) h->top = h->nfn;
  for (size_t r = 0; r < h->top; r++)
    for (int b = 0; b < h->nb; b++) {
      double x = h->btot[b] > 0 ? h->cells[h->rk[r].idx * (size_t)h->nb + (size_t)b] / h->btot[b] : 0;
      if (x > h->hottest) h->hottest = x;
    }
  h->bucket_s = (double)h->bucket_ns / 1e9;
  h->t0_s = (double)h->t0 / 1e9;
  return 0;
}

int bf_view_heatmap(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  hm h = {.s = s};
  if ((bf_q_kind_of(info) == BF_Q_TRACED)) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld is traced: it has no samples over time for a heatmap", /* remedy: repl/cli_hints.c */
                       (long long)session_id);
    goto out;
  }
  if ((rc = bf_q_timeline_foreach(s, session_id, &o->filter, range_pass, &h))) goto out;
  if (h.nsamples == 0) {
    rc = bf_store_fail(s, -ENODATA, "session %lld has no samples in this thread/time window", (long long)session_id);
    goto out;
  }
  if (h.t1 == h.t0) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld (%s) has no sample timestamps, so there is no heatmap over time%s",
                       (long long)session_id, info->kind,
                       (bf_q_kind_of(info) == BF_Q_IMPORTED) ? " (collapsed imports carry none)" : "");
    goto out;
  }
  h.width = o->width > 40 ? o->width : 80;
  h.label_w = h.width >= 100 ? 32 : 22;
  h.nb = o->buckets ? o->buckets : o->html || o->json ? 60 : h.width - h.label_w - 9;
  if (h.nb > 200 && !o->buckets) h.nb = 200;
  if (h.nb < 2) h.nb = 2;
  h.by_weight = bf_q_by_weight(info);
  h.bucket_ns = (h.t1 - h.t0) / h.nb + 1;
  h.btot = calloc((size_t)h.nb, sizeof *h.btot);
  h.bcount = calloc((size_t)h.nb, sizeof *h.bcount);
  if (!h.btot || !h.bcount) {
    rc = -ENOMEM;
    goto out;
  }
  if ((rc = bf_q_timeline_foreach(s, session_id, &o->filter, fill_pass, &h))) goto out;
  if ((rc = hm_rank(&h, o))) goto out;
  if (o->json)
    rc = hm_json(&h, info, out);
  else if (o->html)
    rc = hm_html(&h, info, session_id, out);
  else
    rc = hm_text(&h, o, info, out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(h.rk);
  free(h.fids);
  free(h.cells);
  free(h.btot);
  free(h.bcount);
  bf_map3_free(&h.leaf);
  bf_map3_free(&h.fidx);
  bf_session_info_free(info);
  return rc;
}
