/* export_pstats.c — the .prof file pstats.Stats loads: a marshal-format dict
 * {(file, line, name): (cc, nc, tt, ct, {caller: (cc, nc, tt, ct)})}.
 * Traced sessions give exact figures; sampled ones sample-based figures (see
 * views.h). Only marshal types every Python 3 reads are written. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"
#include "ident.h"
#include "store_int.h"
#include "query.h"
#include "views_int.h"
#include "vec.h"

#define NO_FRAME (-1)

static void m_i32(FILE *out, int32_t v) {
  uint32_t u = (uint32_t)v;
  unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
  fwrite(b, 1, 4, out);
}

static void m_int(FILE *out, int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    fputc('i', out);
    m_i32(out, (int32_t)v);
    return;
  }
  /* TYPE_LONG: signed digit count, then base-2^15 digits, least significant first */
  uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  uint16_t digits[5];
  int n = 0;
  while (u) {
    digits[n++] = (uint16_t)(u & 0x7fff);
    u >>= 15;
  }
  fputc('l', out);
  m_i32(out, v < 0 ? -n : n);
  for (int i = 0; i < n; i++) {
    fputc(digits[i] & 0xff, out);
    fputc(digits[i] >> 8, out);
  }
}

static void m_float(FILE *out, double d) {
  unsigned char b[8];
  uint64_t u;
  memcpy(&u, &d, 8);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(u >> (8 * i));
  fputc('g', out);
  fwrite(b, 1, 8, out);
}

static void m_str(FILE *out, const char *s) {
  size_t n = strlen(s);
  fputc('u', out);
  m_i32(out, (int32_t)n);
  fwrite(s, 1, n, out);
}

/* cProfile's name for a C function recorded as "module.qualname": module-level
 * functions are "<built-in method module.name>", methods of a type
 * "<method 'name' of 'tp_name' objects>" (tp_name drops "builtins."). */
static char *c_label(const char *qualname) {
  const char *first = strchr(qualname, '.'), *last = strrchr(qualname, '.');
  size_t n = strlen(qualname) + 48;
  char *name = malloc(n);
  if (!name) return NULL;
  if (first && last != first) {
    const char *tp = strncmp(qualname, "builtins.", 9) == 0 ? first + 1 : qualname;
    snprintf(name, n, "<method '%s' of '%.*s' objects>", last + 1, (int)(last - tp), tp);
  } else {
    snprintf(name, n, "<built-in method %s>", qualname);
  }
  return name;
}

/* pstats' function key, as cProfile's label(): (co_filename, co_firstlineno,
 * co_name) for Python code (co_name is the qualname's last component), and
 * ("~", 0, label) for C functions. */
static int m_key(bf_store *s, FILE *out, int64_t fid) {
  fputc('(', out);
  m_i32(out, 3);
  if (fid == NO_FRAME) { /* samples without a Python frame: kept, like cProfile's C entries */
    m_str(out, "~");
    m_int(out, 0);
    m_str(out, BF_NO_PYTHON_FRAME);
    return 0;
  }
  bf_function_ref ref;
  int rc = bf_store_function_get(s, fid, &ref);
  if (rc) return rc;
  if (bf_ident_is_builtin(ref.file)) {
    char *name = c_label(ref.qualname);
    if (!name) return -ENOMEM;
    m_str(out, "~");
    m_int(out, 0);
    m_str(out, name);
    free(name);
  } else {
    const char *dot = strrchr(ref.qualname, '.');
    m_str(out, ref.file);
    m_int(out, ref.firstlineno);
    m_str(out, dot && dot[1] ? dot + 1 : ref.qualname);
  }
  return 0;
}

/* A caller entry: cProfile writes (nc, cc, tt, ct) there -- all calls first,
 * the reverse of the function entry's (cc, nc, tt, ct). */
static void m_caller(FILE *out, int64_t cc, int64_t nc, double tt, double ct) {
  fputc('(', out);
  m_i32(out, 4);
  m_int(out, nc);
  m_int(out, cc);
  m_float(out, tt);
  m_float(out, ct);
}

/* One row per function and per (caller, callee) pair. */
typedef struct fig {
  int64_t caller, callee; /* caller 0 for the function row itself */
  int64_t cc, nc;
  double tt, ct;
} fig;

typedef struct figs {
  bf_map3 idx;
  fig *v;
  size_t n, cap;
} figs;

static fig *fig_get(figs *g, int64_t caller, int64_t callee) {
  int64_t *hit = bf_map3_get(&g->idx, caller, callee, 0);
  if (hit) return &g->v[*hit];
  if (bf_vec_grow((void **)&g->v, &g->cap, g->n + 1, sizeof *g->v, 256)) return NULL;
  g->v[g->n] = (fig){caller, callee, 0, 0, 0, 0};
  if (bf_map3_put(&g->idx, caller, callee, 0, (int64_t)g->n)) return NULL;
  return &g->v[g->n++];
}

typedef struct tr_ud {
  figs *g;
} tr_ud;

static int tr_func(void *ud, const bf_trace_func *tf) {
  fig *r = fig_get(((tr_ud *)ud)->g, 0, tf->function_id);
  if (!r) return -ENOMEM;
  r->cc = tf->primitive_calls;
  r->nc = tf->calls;
  r->tt = (double)tf->self_ns / 1e9;
  r->ct = (double)tf->total_ns / 1e9;
  return 0;
}

static int tr_edge(void *ud, const bf_trace_edge *te) {
  figs *g = ((tr_ud *)ud)->g;
  if (te->caller_function_id == 0) return 0; /* thread root: no caller */
  if (!fig_get(g, 0, te->callee_function_id) || !fig_get(g, 0, te->caller_function_id)) return -ENOMEM;
  fig *r = fig_get(g, te->caller_function_id, te->callee_function_id);
  if (!r) return -ENOMEM;
  r->cc += te->primitive_calls;
  r->nc += te->calls;
  r->tt += (double)te->self_ns / 1e9;
  r->ct += (double)te->total_ns / 1e9;
  return 0;
}

static int from_samples(bf_store *s, int64_t sid, const bf_sample_filter *f, figs *g) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load(s, sid, f, &w);
  if (rc) return rc;
  /* sampled: weights are ns; imported: samples at the recorded rate (1 kHz if unknown) */
  double to_s = 1e-9;
  if ((bf_q_kind_of(w->info) == BF_Q_IMPORTED)) to_s = 1.0 / (w->info->rate_hz > 0 ? w->info->rate_hz : 1000.0);
  for (size_t i = 0; i < w->n && !rc; i++) {
    const bf_wstack *st = &w->v[i];
    const int64_t *fids = w->fids + st->off;
    double sec = ((bf_q_kind_of(w->info) == BF_Q_IMPORTED) ? (double)st->count : st->weight) * to_s;
    for (uint32_t d = 0; d < st->depth; d++) {
      int dup = 0, dup_edge = 0;
      for (uint32_t k = 0; k < d; k++) {
        dup |= fids[k] == fids[d];
        dup_edge |= k > 0 && d > 0 && fids[k] == fids[d] && fids[k - 1] == fids[d - 1];
      }
      fig *r = fig_get(g, 0, fids[d]);
      if (!r) {
        rc = -ENOMEM;
        break;
      }
      if (!dup) { /* recursion: count the outermost activation once */
        r->cc += st->count;
        r->nc += st->count;
        r->ct += sec;
      } else {
        r->nc += st->count;
      }
      if (d == st->depth - 1) r->tt += sec;
      if (d == 0) continue;
      fig *e = fig_get(g, fids[d - 1], fids[d]);
      if (!e) {
        rc = -ENOMEM;
        break;
      }
      if (!dup_edge) {
        e->cc += dup ? 0 : st->count;
        e->nc += st->count;
        e->ct += sec;
      }
      if (d == st->depth - 1) e->tt += sec;
    }
  }
  if (!rc && w->empty_count > 0) {
    fig *r = fig_get(g, 0, NO_FRAME);
    if (!r) {
      rc = -ENOMEM;
    } else {
      r->cc = r->nc = w->empty_count;
      r->tt = r->ct = ((bf_q_kind_of(w->info) == BF_Q_IMPORTED) ? (double)w->empty_count : w->empty_weight) * to_s;
    }
  }
  bf_wstacks_free(w);
  return rc;
}

static int cmp_fig(const void *a, const void *b) {
  const fig *x = a, *y = b;
  if (x->callee != y->callee) return x->callee < y->callee ? -1 : 1;
  return (x->caller > y->caller) - (x->caller < y->caller);
}

int bf_export_pstats(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  figs g = {0};
  if ((bf_q_kind_of(info) == BF_Q_TRACED)) {
    tr_ud t = {&g};
    rc = bf_q_trace_funcs(s, session_id, tr_func, &t);
    if (!rc) rc = bf_q_trace_edges(s, session_id, tr_edge, &t);
  } else {
    rc = from_samples(s, session_id, f, &g);
  }
  if (rc) goto out;
  /* group: each function row (caller 0) followed by its callers */
  if (g.n) qsort(g.v, g.n, sizeof *g.v, cmp_fig);
  fputc('{', out);
  for (size_t i = 0; i < g.n;) {
    const fig *r = &g.v[i];
    size_t j = i + 1;
    while (j < g.n && g.v[j].callee == r->callee) j++;
    if ((rc = m_key(s, out, r->callee))) goto out;
    fputc('(', out);
    m_i32(out, 5);
    m_int(out, r->cc);
    m_int(out, r->nc);
    m_float(out, r->tt);
    m_float(out, r->ct);
    fputc('{', out);
    for (size_t k = i + 1; k < j; k++) {
      if ((rc = m_key(s, out, g.v[k].caller))) goto out;
      m_caller(out, g.v[k].cc, g.v[k].nc, g.v[k].tt, g.v[k].ct);
    }
    fputc('0', out);
    i = j;
  }
  fputc('0', out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_map3_free(&g.idx);
  free(g.v);
  bf_session_info_free(info);
  return rc;
}
