/* view_flame.c — the flame graph page: stacks of every thread merged into
 * one function trie (per-thread self figures kept aside for the thread
 * filter), written as compact JSON inside a self-contained HTML template
 * (core/flame.html, embedded at build time). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "store_int.h"
#include "util.h"
#include "views.h"
#include "views_int.h"
#include "vec.h"

extern const char bf_flame_html[];

typedef struct tself {
  int64_t node;
  int32_t thread;
  int64_t count;
  double value;
} tself;

typedef struct trie {
  bf_map3 idx;   /* (parent node + 1, function index) → node */
  bf_map3 fidx;  /* function id → function index */
  bf_map3 memo;  /* (store stack id, base) → leaf node: a stack is walked once */
  int64_t *fids;
  size_t nfn, fcap;
  double *v;     /* per node: parent, func, unused, selfc, selfv, base */
  size_t n, cap;
  tself *ts;     /* per (leaf node, thread) self figures */
  size_t nts, tscap;
} trie;

#define STRIDE 6

static int func_index(trie *t, int64_t fid, int64_t *out) {
  int64_t *hit = bf_map3_get(&t->fidx, fid, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  if (bf_vec_grow((void **)&t->fids, &t->fcap, t->nfn + 1, sizeof *t->fids, 256)) return -ENOMEM;
  t->fids[t->nfn] = fid;
  *out = (int64_t)t->nfn++;
  return bf_map3_put(&t->fidx, fid, 0, 0, *out) ? -ENOMEM : 0;
}

static int leaf_of(trie *t, const bf_wstacks *w, const bf_wstack *st, int base, int64_t *out) {
  int64_t *memo = st->stack_id > 0 ? bf_map3_get(&t->memo, st->stack_id, base, 0) : NULL;
  if (memo) {
    *out = *memo;
    return 0;
  }
  int64_t parent = -1;
  for (uint32_t d = 0; d < st->depth; d++) {
    int64_t fi;
    int rc = func_index(t, w->fids[st->off + d], &fi);
    if (rc) return rc;
    int64_t *hit = bf_map3_get(&t->idx, parent + 1, fi, 0);
    int64_t node;
    if (hit) {
      node = *hit;
    } else {
      if (bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, STRIDE * sizeof *t->v, 1024)) return -ENOMEM;
      node = (int64_t)t->n++;
      double *r = &t->v[node * STRIDE];
      r[0] = (double)parent;
      r[1] = (double)fi;
      r[2] = r[3] = r[4] = r[5] = 0;
      if (bf_map3_put(&t->idx, parent + 1, fi, 0, node)) return -ENOMEM;
    }
    parent = node;
  }
  if (st->stack_id > 0 && bf_map3_put(&t->memo, st->stack_id, base, 0, parent)) return -ENOMEM;
  *out = parent;
  return 0;
}

static int trie_add(trie *t, const bf_wstacks *w, const bf_wstack *st, int base, int per_thread) {
  int64_t leaf;
  int rc = leaf_of(t, w, st, base, &leaf);
  if (rc || leaf < 0) return rc;
  double *r = &t->v[leaf * STRIDE];
  double v = bf_wstack_value(w, st);
  if (base) {
    r[5] += v;
    return 0;
  }
  r[3] += (double)st->count;
  r[4] += v;
  if (!per_thread) return 0;
  if (bf_vec_grow((void **)&t->ts, &t->tscap, t->nts + 1, sizeof *t->ts, 256)) return -ENOMEM;
  t->ts[t->nts++] = (tself){leaf, st->thread, st->count, v};
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

/* Frames narrower than this share of all samples are folded into their
 * parent: at 2,000 px they are a tenth of a pixel wide, yet in a session with
 * a million samples and many distinct paths they would dominate the file. */
#define FOLD_SHARE 2e-5

int bf_flame_write(bf_store *s, const bf_wstacks *b, const bf_wstacks *base, const char *title,
                   const char *subtitle, FILE *out) {
  trie t = {0};
  double *tc = NULL, *tv = NULL, *ta = NULL;
  int64_t *keep = NULL, *owner = NULL, *dfs = NULL;
  bf_map3 tsum = {0};
  int rc = 0;
  int per_thread = !base && b->nthreads > 1;
  for (size_t i = 0; i < b->n && !rc; i++) rc = trie_add(&t, b, &b->v[i], 0, per_thread);
  for (size_t i = 0; base && i < base->n && !rc; i++) rc = trie_add(&t, base, &base->v[i], 1, 0);
  if (rc) goto out;
  size_t nn = t.n ? t.n : 1;
  tc = calloc(nn, sizeof *tc);
  tv = calloc(nn, sizeof *tv);
  ta = calloc(nn, sizeof *ta);
  keep = malloc(nn * sizeof *keep);
  owner = malloc(nn * sizeof *owner);
  dfs = malloc(nn * sizeof *dfs);
  if (!tc || !tv || !ta || !keep || !owner || !dfs) {
    rc = -ENOMEM;
    goto out;
  }
  /* subtree totals: children always come after their parent in t.v */
  double all_c = 0, all_v = 0, all_a = 0;
  for (size_t i = 0; i < t.n; i++) {
    tc[i] = t.v[i * STRIDE + 3];
    tv[i] = t.v[i * STRIDE + 4];
    ta[i] = t.v[i * STRIDE + 5];
    all_c += tc[i];
    all_v += tv[i];
    all_a += ta[i];
  }
  for (size_t i = t.n; i-- > 0;) {
    int64_t p = (int64_t)t.v[i * STRIDE];
    if (p >= 0) {
      tc[p] += tc[i];
      tv[p] += tv[i];
      ta[p] += ta[i];
    }
  }
  /* keep or fold; a folded node's subtree becomes self time of its kept parent */
  double min_c = all_c * FOLD_SHARE, min_a = all_a * FOLD_SHARE;
  size_t kept = 0, folded = 0;
  for (size_t i = 0; i < t.n; i++) {
    int64_t p = (int64_t)t.v[i * STRIDE];
    int big = tc[i] >= min_c || (base && ta[i] >= min_a);
    if (p >= 0 && keep[p] < 0) {
      keep[i] = -2; /* inside a folded subtree: already counted */
      owner[i] = owner[p];
    } else if (p >= 0 && !big) {
      keep[i] = -1;
      owner[i] = p;
      double *pr = &t.v[p * STRIDE];
      pr[3] += tc[i];
      pr[4] += tv[i];
      pr[5] += ta[i];
      folded++;
    } else {
      keep[i] = (int64_t)kept++;
      owner[i] = (int64_t)i;
    }
  }
  const char *marker = strstr(bf_flame_html, "/*BF_DATA*/");
  fwrite(bf_flame_html, 1, (size_t)(marker - bf_flame_html), out);
  fputs("const BF_DATA = {\"title\":", out);
  bf_json_str(out, title);
  fputs(",\"subtitle\":", out);
  bf_json_str(out, subtitle);
  fputs(",\"kind\":", out);
  bf_json_str(out, b->info->kind);
  /* nodes: depth, function, self samples, [self value], [base value]; the
   * value is left out when it is the sample count (wall clock) */
  int by_value = b->by_weight || base;
  int stride = base ? 5 : by_value ? 4 : 3;
  fprintf(out, ",\"mode\":\"%s\",\"unit\":\"%s\",\"stride\":%d", base ? "diff" : "flame",
          b->by_weight && !(bf_q_kind_of(b->info) == BF_Q_IMPORTED) ? "ns" : "samples", stride);
  char note[256] = "";
  if (b->traced)
    snprintf(note, sizeof note, "traced session: paths rebuilt from caller→callee edges (approximate)");
  else if (b->total_count == 0)
    snprintf(note, sizeof note, "no samples in this session or time window");
  if (folded) {
    size_t n = strlen(note);
    snprintf(note + n, sizeof note - n, "%s%zu frame paths under %.3g%% of samples folded into their callers",
             n ? "; " : "", folded, FOLD_SHARE * 100);
  }
  fputs(",\"note\":", out);
  bf_json_str(out, note);
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
  /* Depth-first order with each node's depth instead of its parent index:
   * the parent is the last node one level up, and depths are short numbers. */
  {
    int64_t *first_child = malloc(nn * sizeof *first_child), *next = malloc(nn * sizeof *next);
    int64_t *stk = malloc(nn * sizeof *stk), *dep = malloc(nn * sizeof *dep);
    if (!first_child || !next || !stk || !dep) {
      free(first_child);
      free(next);
      free(stk);
      free(dep);
      rc = -ENOMEM;
      goto out;
    }
    for (size_t i = 0; i < t.n; i++) first_child[i] = next[i] = -1;
    int64_t roots = -1;
    for (size_t i = t.n; i-- > 0;) { /* prepend in reverse: lists keep creation order */
      if (keep[i] < 0) continue;
      int64_t p = (int64_t)t.v[i * STRIDE];
      int64_t *head = p >= 0 ? &first_child[p] : &roots;
      next[i] = *head;
      *head = (int64_t)i;
    }
    size_t sp = 0, seq = 0;
    int first = 1;
    for (int64_t r = roots; r >= 0; r = next[r]) {
      stk[sp] = r;
      dep[sp++] = 0;
      while (sp) {
        sp--;
        int64_t i = stk[sp], d = dep[sp];
        const double *v = &t.v[i * STRIDE];
        fprintf(out, "%s%lld,%.0f,%.0f", first ? "" : ",", (long long)d, v[1], v[3]);
        if (stride >= 4) fprintf(out, ",%.0f", v[4]);
        if (stride >= 5) fprintf(out, ",%.0f", v[5]);
        first = 0;
        dfs[i] = (int64_t)seq++;
        /* push children reversed so the first child is written first */
        size_t mark = sp;
        for (int64_t c = first_child[i]; c >= 0; c = next[c]) {
          stk[sp] = c;
          dep[sp++] = d + 1;
        }
        for (size_t a = mark, z = sp; a + 1 < z; a++, z--) {
          int64_t tmp = stk[a];
          stk[a] = stk[z - 1];
          stk[z - 1] = tmp;
        }
      }
    }
    free(first_child);
    free(next);
    free(stk);
    free(dep);
  }
  fputs("]", out);
  if (per_thread) {
    /* per-thread self figures of the written nodes (folded ones go to their owner):
     * node, thread, samples, [value] */
    size_t nagg = 0;
    for (size_t k = 0; k < t.nts; k++) {
      int64_t o = owner[t.ts[k].node];
      int64_t *hit = bf_map3_get(&tsum, o, t.ts[k].thread, 0);
      if (hit) {
        t.ts[*hit].count += t.ts[k].count;
        t.ts[*hit].value += t.ts[k].value;
      } else {
        t.ts[nagg] = (tself){o, t.ts[k].thread, t.ts[k].count, t.ts[k].value};
        if (bf_map3_put(&tsum, o, t.ts[k].thread, 0, (int64_t)nagg)) {
          rc = -ENOMEM;
          goto out;
        }
        nagg++;
      }
    }
    fputs(",\"tself\":[", out);
    for (size_t k = 0; k < nagg; k++) {
      fprintf(out, "%s%lld,%d,%lld", k ? "," : "", (long long)dfs[t.ts[k].node], (int)t.ts[k].thread,
              (long long)t.ts[k].count);
      if (by_value) fprintf(out, ",%.0f", t.ts[k].value);
    }
    fputs("]", out);
  }
  if (base) {
    /* largest change of a node's total share sets the colour scale */
    double maxd = 0;
    for (size_t i = 0; i < t.n; i++) {
      double d = fabs((all_v > 0 ? tv[i] / all_v : 0) - (all_a > 0 ? ta[i] / all_a : 0));
      if (d > maxd) maxd = d;
    }
    fputs(",\"maxDelta\":", out);
    bf_json_num(out, maxd > 0 ? maxd : 0.01);
  }
  fputs("};\n", out);
  fputs(marker + strlen("/*BF_DATA*/"), out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(tc);
  free(tv);
  free(ta);
  free(keep);
  free(owner);
  free(dfs);
  bf_map3_free(&tsum);
  bf_map3_free(&t.memo);
  free(t.ts);
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
