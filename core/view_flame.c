/* view_flame.c — the flame graph page: stacks of every thread merged into
 * one function trie (per-thread self figures kept aside for the thread
 * filter), written as compact JSON inside a self-contained HTML template
 * (core/flame.html, embedded at build time). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "opnames.h"
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

/* The trie of one page and its per-node working arrays (nn entries each). */
typedef struct flame {
  trie t;
  size_t nn;
  double *tc, *tv, *ta;            /* subtree samples, value, base value */
  int64_t *keep, *owner, *dfs;     /* written index or <0, kept owner, depth-first index */
  double all_c, all_v, all_a;
  size_t folded;
} flame;

static void flame_free(flame *f) {
  free(f->tc);
  free(f->tv);
  free(f->ta);
  free(f->keep);
  free(f->owner);
  free(f->dfs);
  bf_map3_free(&f->t.memo);
  free(f->t.ts);
  bf_map3_free(&f->t.idx);
  bf_map3_free(&f->t.fidx);
  free(f->t.fids);
  free(f->t.v);
}

/* Builds the trie of b (and of base, as base values) and allocates the
 * per-node arrays. */
static int flame_build(flame *f, const bf_wstacks *b, const bf_wstacks *base, int per_thread) {
  int rc = 0;
  for (size_t i = 0; i < b->n && !rc; i++) rc = trie_add(&f->t, b, &b->v[i], 0, per_thread);
  for (size_t i = 0; base && i < base->n && !rc; i++) rc = trie_add(&f->t, base, &base->v[i], 1, 0);
  if (rc) return rc;
  size_t nn = f->nn = f->t.n ? f->t.n : 1;
  f->tc = calloc(nn, sizeof *f->tc);
  f->tv = calloc(nn, sizeof *f->tv);
  f->ta = calloc(nn, sizeof *f->ta);
  f->keep = malloc(nn * sizeof *f->keep);
  f->owner = malloc(nn * sizeof *f->owner);
  f->dfs = malloc(nn * sizeof *f->dfs);
  if (!f->tc || !f->tv || !f->ta || !f->keep || !f->owner || !f->dfs) return -ENOMEM;
  return 0;
}

/* subtree totals: children always come after their parent in t.v */
static void flame_totals(flame *f) {
  const trie *t = &f->t;
  double *tc = f->tc, *tv = f->tv, *ta = f->ta;
  double all_c = 0, all_v = 0, all_a = 0;
  for (size_t i = 0; i < t->n; i++) {
    tc[i] = t->v[i * STRIDE + 3];
    tv[i] = t->v[i * STRIDE + 4];
    ta[i] = t->v[i * STRIDE + 5];
    all_c += tc[i];
    all_v += tv[i];
    all_a += ta[i];
  }
  for (size_t i = t->n; i-- > 0;) {
    int64_t p = (int64_t)t->v[i * STRIDE];
    if (p >= 0) {
      tc[p] += tc[i];
      tv[p] += tv[i];
      ta[p] += ta[i];
    }
  }
  f->all_c = all_c;
  f->all_v = all_v;
  f->all_a = all_a;
}

/* keep or fold; a folded node's subtree becomes self time of its kept parent */
static void flame_fold(flame *f, int with_base) {
  trie *t = &f->t;
  const double *tc = f->tc, *tv = f->tv, *ta = f->ta;
  int64_t *keep = f->keep, *owner = f->owner;
  double min_c = f->all_c * FOLD_SHARE, min_a = f->all_a * FOLD_SHARE;
  size_t kept = 0, folded = 0;
  for (size_t i = 0; i < t->n; i++) {
    int64_t p = (int64_t)t->v[i * STRIDE];
    int big = tc[i] >= min_c || (with_base && ta[i] >= min_a);
    if (p >= 0 && keep[p] < 0) {
      keep[i] = -2; /* inside a folded subtree: already counted */
      owner[i] = owner[p];
    } else if (p >= 0 && !big) {
      keep[i] = -1;
      owner[i] = p;
      double *pr = &t->v[p * STRIDE];
      pr[3] += tc[i];
      pr[4] += tv[i];
      pr[5] += ta[i];
      folded++;
    } else {
      keep[i] = (int64_t)kept++;
      owner[i] = (int64_t)i;
    }
  }
  f->folded = folded;
}

/* The page's header fields: title, subtitle, kind, mode, unit, stride, note
 * and the thread list. */
static void flame_write_meta(const flame *f, const bf_wstacks *b, const bf_wstacks *base, const char *title,
                             const char *subtitle, int stride, bf_jw *w) {
  bf_jw_kstr(w, "title", title);
  bf_jw_kstr(w, "subtitle", subtitle);
  bf_jw_kstr(w, "kind", b->info->kind);
  bf_jw_kstr(w, "mode", base ? "diff" : "flame");
  bf_jw_kstr(w, "unit",
             b->unit ? b->unit : b->by_weight && !(bf_q_kind_of(b->info) == BF_Q_IMPORTED) ? "ns" : "samples");
  bf_jw_kint(w, "stride", stride);
  char note[256] = "";
  if (b->traced)
    snprintf(note, sizeof note, "traced session: paths rebuilt from caller→callee edges (approximate)");
  else if (b->total_count == 0)
    snprintf(note, sizeof note, "no samples in this session or time window");
  if (f->folded) {
    size_t n = strlen(note);
    snprintf(note + n, sizeof note - n, "%s%zu frame paths under %.3g%% of samples folded into their callers",
             n ? "; " : "", f->folded, FOLD_SHARE * 100);
  }
  bf_jw_kstr(w, "note", note);
  bf_jw_key(w, "threads");
  bf_jw_arr(w);
  for (size_t i = 0; !base && i < b->nthreads; i++) {
    char lb[256];
    bf_wthread_label(&b->threads[i], lb, sizeof lb);
    bf_jw_arr(w);
    bf_jw_str(w, lb);
    bf_jw_int(w, b->threads[i].count);
    bf_jw_end(w);
  }
  bf_jw_end(w);
}

/* funcs: qualname, file, first line of every function in the trie */
static int flame_write_funcs(bf_store *s, const flame *f, const char *python_version, bf_jw *w) {
  int rc;
  bf_jw_key(w, "funcs");
  bf_jw_arr(w);
  for (size_t i = 0; i < f->t.nfn; i++) {
    bf_function_ref ref;
    int op = BF_WSTACK_OP_OF(f->t.fids[i]);
    if (op >= 0) { /* record --opcodes: the leaf's instruction */
      const char *name = bf_opname(python_version, op, NULL);
      char nb[96];
      if (name)
        snprintf(nb, sizeof nb, "[%s]", name);
      else
        snprintf(nb, sizeof nb, "[opcode %d]", op);
      bf_jw_arr(w);
      bf_jw_str(w, nb);
      bf_jw_str(w, "");
      bf_jw_int(w, 0);
      bf_jw_end(w);
      continue;
    }
    if ((rc = bf_store_function_get(s, f->t.fids[i], &ref))) return rc;
    bf_jw_arr(w);
    bf_jw_str(w, ref.qualname);
    bf_jw_str(w, ref.file);
    bf_jw_int(w, ref.firstlineno);
    bf_jw_end(w);
  }
  bf_jw_end(w);
  return 0;
}

/* Depth-first order with each node's depth instead of its parent index:
 * the parent is the last node one level up, and depths are short numbers.
 * Fills f->dfs with each written node's place in that order. */
static int flame_write_nodes(flame *f, int stride, bf_jw *w) {
  const trie *t = &f->t;
  size_t nn = f->nn;
  const int64_t *keep = f->keep;
  int64_t *dfs = f->dfs;
  int64_t *first_child = malloc(nn * sizeof *first_child), *next = malloc(nn * sizeof *next);
  int64_t *stk = malloc(nn * sizeof *stk), *dep = malloc(nn * sizeof *dep);
  if (!first_child || !next || !stk || !dep) {
    free(first_child);
    free(next);
    free(stk);
    free(dep);
    return -ENOMEM;
  }
  for (size_t i = 0; i < t->n; i++) first_child[i] = next[i] = -1;
  int64_t roots = -1;
  for (size_t i = t->n; i-- > 0;) { /* prepend in reverse: lists keep creation order */
    if (keep[i] < 0) continue;
    int64_t p = (int64_t)t->v[i * STRIDE];
    int64_t *head = p >= 0 ? &first_child[p] : &roots;
    next[i] = *head;
    *head = (int64_t)i;
  }
  size_t sp = 0, seq = 0;
  bf_jw_key(w, "nodes");
  bf_jw_arr(w);
  for (int64_t r = roots; r >= 0; r = next[r]) {
    stk[sp] = r;
    dep[sp++] = 0;
    while (sp) {
      sp--;
      int64_t i = stk[sp], d = dep[sp];
      const double *v = &t->v[i * STRIDE];
      /* the figures are sums of counts and integer weights: written whole */
      long long row[5] = {d, llrint(v[1]), llrint(v[3]), llrint(v[4]), llrint(v[5])};
      bf_jw_ints(w, row, stride >= 5 ? 5 : stride >= 4 ? 4 : 3);
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
  bf_jw_end(w);
  return 0;
}

/* per-thread self figures of the written nodes (folded ones go to their owner):
 * node, thread, samples, [value] */
static int flame_write_tself(flame *f, int by_value, bf_jw *w) {
  trie *t = &f->t;
  const int64_t *owner = f->owner, *dfs = f->dfs;
  bf_map3 tsum = {0};
  size_t nagg = 0;
  for (size_t k = 0; k < t->nts; k++) {
    int64_t o = owner[t->ts[k].node];
    int64_t *hit = bf_map3_get(&tsum, o, t->ts[k].thread, 0);
    if (hit) {
      t->ts[*hit].count += t->ts[k].count;
      t->ts[*hit].value += t->ts[k].value;
    } else {
      t->ts[nagg] = (tself){o, t->ts[k].thread, t->ts[k].count, t->ts[k].value};
      if (bf_map3_put(&tsum, o, t->ts[k].thread, 0, (int64_t)nagg)) {
        bf_map3_free(&tsum);
        return -ENOMEM;
      }
      nagg++;
    }
  }
  bf_jw_key(w, "tself");
  bf_jw_arr(w);
  for (size_t k = 0; k < nagg; k++) {
    long long row[4] = {dfs[t->ts[k].node], (int)t->ts[k].thread, t->ts[k].count, llrint(t->ts[k].value)};
    bf_jw_ints(w, row, by_value ? 4 : 3);
  }
  bf_jw_end(w);
  bf_map3_free(&tsum);
  return 0;
}

/* largest change of a node's total share sets the colour scale */
static void flame_write_max_delta(const flame *f, bf_jw *w) {
  double maxd = 0;
  for (size_t i = 0; i < f->t.n; i++) {
    double d = fabs((f->all_v > 0 ? f->tv[i] / f->all_v : 0) - (f->all_a > 0 ? f->ta[i] / f->all_a : 0));
    if (d > maxd) maxd = d;
  }
  bf_jw_knum(w, "maxDelta", maxd > 0 ? maxd : 0.01);
}

int bf_flame_write(bf_store *s, const bf_wstacks *b, const bf_wstacks *base, const char *title,
                   const char *subtitle, FILE *out) {
  flame f = {0};
  int per_thread = !base && b->nthreads > 1;
  int rc = flame_build(&f, b, base, per_thread);
  if (rc) goto out;
  flame_totals(&f);
  flame_fold(&f, base != NULL);
  /* nodes: depth, function, self samples, [self value], [base value]; the
   * value is left out when it is the sample count (wall clock) */
  int by_value = b->by_weight || base;
  int stride = base ? 5 : by_value ? 4 : 3;
  const char *marker = strstr(bf_flame_html, "/*BF_DATA*/");
  fwrite(bf_flame_html, 1, (size_t)(marker - bf_flame_html), out);
  fputs("const BF_DATA = ", out);
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  flame_write_meta(&f, b, base, title, subtitle, stride, &w);
  if ((rc = flame_write_funcs(s, &f, b->info ? b->info->python_version : NULL, &w))) goto out;
  if ((rc = flame_write_nodes(&f, stride, &w))) goto out;
  if (per_thread && (rc = flame_write_tself(&f, by_value, &w))) goto out;
  if (base) flame_write_max_delta(&f, &w);
  bf_jw_end(&w);
  fputs(";\n", out);
  fputs(marker + strlen("/*BF_DATA*/"), out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  flame_free(&f);
  return rc;
}

int bf_view_flame(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_wstacks *w = NULL;
  bf_sample_filter fo = o ? o->filter : (bf_sample_filter){0};
  fo.by_opcode = 1;   /* record --opcodes: leaf instructions as frames */
  fo.kernel_leaf = 1; /* the kernel lens's state as a leaf frame */
  int rc = bf_wstacks_load(s, session_id, &fo, &w);
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
