/* view_flame.c — the flame graph page: stacks merged into a function trie
 * per thread, written as compact JSON inside a self-contained HTML template
 * (core/flame.html, embedded at build time). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "util.h"
#include "views.h"
#include "views_int.h"

extern const char bf_flame_html[];

typedef struct trie {
  bf_map3 idx;   /* (parent node + 1, function index, thread) → node */
  bf_map3 fidx;  /* function id → function index */
  int64_t *fids;
  size_t nfn, fcap;
  double *v;     /* per node: parent, func, thread, selfc, selfv, base */
  size_t n, cap;
} trie;

#define STRIDE 6

static int func_index(trie *t, int64_t fid, int64_t *out) {
  int64_t *hit = bf_map3_get(&t->fidx, fid, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  if (t->nfn == t->fcap) {
    size_t nc = t->fcap ? t->fcap * 2 : 256;
    int64_t *nf = realloc(t->fids, nc * sizeof *nf);
    if (!nf) return -ENOMEM;
    t->fids = nf;
    t->fcap = nc;
  }
  t->fids[t->nfn] = fid;
  *out = (int64_t)t->nfn++;
  return bf_map3_put(&t->fidx, fid, 0, 0, *out) ? -ENOMEM : 0;
}

static int trie_add(trie *t, const bf_wstacks *w, const bf_wstack *st, int thread, int base) {
  int64_t parent = -1;
  for (uint32_t d = 0; d < st->depth; d++) {
    int64_t fi;
    int rc = func_index(t, w->fids[st->off + d], &fi);
    if (rc) return rc;
    int64_t *hit = bf_map3_get(&t->idx, parent + 1, fi, parent < 0 ? thread : 0);
    int64_t node;
    if (hit) {
      node = *hit;
    } else {
      if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 1024;
        double *nv = realloc(t->v, nc * STRIDE * sizeof *nv);
        if (!nv) return -ENOMEM;
        t->v = nv;
        t->cap = nc;
      }
      node = (int64_t)t->n++;
      double *r = &t->v[node * STRIDE];
      r[0] = (double)parent;
      r[1] = (double)fi;
      r[2] = thread;
      r[3] = r[4] = r[5] = 0;
      if (bf_map3_put(&t->idx, parent + 1, fi, parent < 0 ? thread : 0, node)) return -ENOMEM;
    }
    parent = node;
  }
  if (parent < 0) return 0;
  double *r = &t->v[parent * STRIDE];
  if (base) {
    r[5] += bf_wstack_value(w, st);
  } else {
    r[3] += (double)st->count;
    r[4] += bf_wstack_value(w, st);
  }
  return 0;
}

void bf_session_line(const bf_session_info *in, int with_date, char *buf, size_t len) {
  char tb[32] = "";
  if (in->start_ns) bf_fmt_time(in->start_ns, tb, sizeof tb);
  int n = snprintf(buf, len, "session %lld · %s · %s clock · %s", (long long)in->id, in->kind ? in->kind : "?",
                   in->clock ? in->clock : "?", in->mode ? in->mode : "?");
  if (n < 0 || (size_t)n >= len) return;
  if (in->rate_hz > 0) n += snprintf(buf + n, len - (size_t)n, " · %.0f Hz", in->rate_hz);
  if ((size_t)n < len && in->python_version) n += snprintf(buf + n, len - (size_t)n, " · python %s", in->python_version);
  if ((size_t)n < len && in->label) n += snprintf(buf + n, len - (size_t)n, " · %s", in->label);
  if ((size_t)n < len && *tb && with_date) snprintf(buf + n, len - (size_t)n, " · %s UTC", tb);
}

int bf_flame_write(bf_store *s, const bf_wstacks *b, const bf_wstacks *base, const char *title,
                   const char *subtitle, FILE *out) {
  trie t = {0};
  int rc = 0;
  for (size_t i = 0; i < b->n && !rc; i++) rc = trie_add(&t, b, &b->v[i], base ? 0 : b->v[i].thread, 0);
  for (size_t i = 0; base && i < base->n && !rc; i++) rc = trie_add(&t, base, &base->v[i], 0, 1);
  if (rc) goto out;
  const char *marker = strstr(bf_flame_html, "/*BF_DATA*/");
  fwrite(bf_flame_html, 1, (size_t)(marker - bf_flame_html), out);
  fputs("const BF_DATA = {\"title\":", out);
  bf_json_str(out, title);
  fputs(",\"subtitle\":", out);
  bf_json_str(out, subtitle);
  fputs(",\"kind\":", out);
  bf_json_str(out, b->info->kind);
  fprintf(out, ",\"mode\":\"%s\",\"unit\":\"%s\",\"stride\":%d", base ? "diff" : "flame",
          b->by_weight && !bf_session_is(b->info, "imported") ? "ns" : "samples", base ? 6 : 5);
  if (b->traced)
    fputs(",\"note\":\"traced session: paths rebuilt from caller→callee edges (approximate)\"", out);
  else if (b->total_count == 0)
    fputs(",\"note\":\"no samples in this session or time window\"", out);
  fputs(",\"threads\":[", out);
  for (size_t i = 0; !base && i < b->nthreads; i++) {
    char lb[256];
    bf_wthread_label(&b->threads[i], lb, sizeof lb);
    if (i) fputc(',', out);
    fputc('[', out);
    bf_json_str(out, lb);
    fprintf(out, ",%lld]", (long long)b->threads[i].count);
  }
  fputs("],\"funcs\":[", out);
  for (size_t i = 0; i < t.nfn; i++) {
    bf_function_ref ref;
    if ((rc = bf_store_function_get(s, t.fids[i], &ref))) goto out;
    if (i) fputc(',', out);
    fputc('[', out);
    bf_json_str(out, ref.qualname);
    fputc(',', out);
    bf_json_str(out, ref.file);
    fprintf(out, ",%lld]", (long long)ref.firstlineno);
  }
  fputs("],\"nodes\":[", out);
  int stride = base ? 6 : 5;
  double maxd = 0;
  for (size_t i = 0; i < t.n; i++) {
    const double *r = &t.v[i * STRIDE];
    for (int k = 0; k < stride; k++) {
      if (i || k) fputc(',', out);
      fprintf(out, "%.0f", r[k]);
    }
  }
  fputs("]", out);
  if (base) {
    /* Largest change of a node's total share, for the colour scale: computed
     * from per-node totals (children follow parents in t.v). */
    double *tb = calloc(t.n ? t.n : 1, sizeof *tb), *ta = calloc(t.n ? t.n : 1, sizeof *ta);
    if (!tb || !ta) {
      free(tb);
      free(ta);
      rc = -ENOMEM;
      goto out;
    }
    double sb = 0, sa = 0;
    for (size_t i = 0; i < t.n; i++) {
      tb[i] = t.v[i * STRIDE + 4];
      ta[i] = t.v[i * STRIDE + 5];
      sb += tb[i];
      sa += ta[i];
    }
    for (size_t i = t.n; i-- > 0;) {
      int64_t p = (int64_t)t.v[i * STRIDE];
      if (p >= 0) {
        tb[p] += tb[i];
        ta[p] += ta[i];
      }
    }
    for (size_t i = 0; i < t.n; i++) {
      double d = fabs((sb > 0 ? tb[i] / sb : 0) - (sa > 0 ? ta[i] / sa : 0));
      if (d > maxd) maxd = d;
    }
    free(tb);
    free(ta);
    fputs(",\"maxDelta\":", out);
    bf_json_num(out, maxd > 0 ? maxd : 0.01);
  }
  fputs("};\n", out);
  fputs(marker + strlen("/*BF_DATA*/"), out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_map3_free(&t.idx);
  bf_map3_free(&t.fidx);
  free(t.fids);
  free(t.v);
  return rc;
}

int bf_view_flame(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load(s, session_id, o ? &o->filter : NULL, &w);
  if (rc) return rc;
  char title[128], sub[1024];
  snprintf(title, sizeof title, "bifocal flame graph — session %lld", (long long)session_id);
  bf_session_line(w->info, 1, sub, sizeof sub);
  size_t n = strlen(sub);
  if (!w->traced)
    snprintf(sub + n, sizeof sub - n, " · %lld samples", (long long)w->total_count);
  rc = bf_flame_write(s, w, NULL, title, sub, out);
  bf_wstacks_free(w);
  return rc;
}
