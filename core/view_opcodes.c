/* view_opcodes.c — record --opcodes: which bytecode instruction ran, per
 * (function, line, opcode) of the leaf frame, specialised forms by name with
 * the instruction they specialise, in samples with shares and 95% intervals
 * (Tachyon's per-line opcode breakdown, as a table). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "opnames.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "vec.h"
#include "views.h"
#include "views_int.h"

typedef struct op_row {
  int64_t frame_id, samples;
  int opcode;
} op_row;

typedef struct ops {
  bf_store *s;
  bf_map3 leaf;  /* stack id -> leaf frame id */
  bf_map3 byrow; /* (frame id, opcode) -> index in rows */
  op_row *rows;
  size_t nrows, cap;
  int64_t total, with_op;
} ops;

static int ops_sample(void *ud, const bf_sample *smp) {
  ops *g = ud;
  int64_t c = smp->count ? smp->count : 1;
  g->total += c;
  int op = BF_SAMPLE_OPCODE_OF(smp->flags);
  if (op < 0 || smp->stack_id <= 0) return 0;
  g->with_op += c;
  int64_t *hit = bf_map3_get(&g->leaf, smp->stack_id, 0, 0), frame;
  if (hit) {
    frame = *hit;
  } else {
    int64_t parent;
    int rc = bf_store_stack_get(g->s, smp->stack_id, &parent, &frame);
    if (rc) return rc;
    if (bf_map3_put(&g->leaf, smp->stack_id, 0, 0, frame)) return -ENOMEM;
  }
  int64_t *ri = bf_map3_get(&g->byrow, frame, op, 0);
  if (!ri) {
    if (bf_vec_grow((void **)&g->rows, &g->cap, g->nrows + 1, sizeof *g->rows, 64)) return -ENOMEM;
    g->rows[g->nrows] = (op_row){frame, 0, op};
    if (bf_map3_put(&g->byrow, frame, op, 0, (int64_t)g->nrows)) return -ENOMEM;
    ri = bf_map3_get(&g->byrow, frame, op, 0);
    g->nrows++;
  }
  g->rows[*ri].samples += c;
  return 0;
}

static int cmp_row(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  if (x->samples != y->samples) return x->samples < y->samples ? 1 : -1;
  if (x->frame_id != y->frame_id) return x->frame_id < y->frame_id ? -1 : 1;
  return x->opcode - y->opcode;
}

/* What row i shows: its function, line and instruction. */
typedef struct op_where {
  bf_function_ref ref;
  int64_t line;
  const char *name, *base; /* bf_opname's: NULL when the opcode has none */
} op_where;

/* Row i's function, line and instruction names for python_version. OUT: *w. */
static int row_where(ops *g, size_t i, const char *python_version, op_where *w) {
  int64_t fid;
  int rc = bf_store_frame_get(g->s, g->rows[i].frame_id, &fid, &w->line);
  if (!rc) rc = bf_store_function_get(g->s, fid, &w->ref);
  if (!rc) w->name = bf_opname(python_version, g->rows[i].opcode, &w->base);
  return rc;
}

static int ops_json(ops *g, size_t top, const bf_session_info *info, FILE *out) {
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  bf_jw_key(&w, "session");
  bf_session_json_jw(&w, info);
  bf_jw_kint(&w, "samples", g->total);
  bf_jw_kint(&w, "samples_with_opcode", g->with_op);
  bf_jw_key(&w, "rows");
  bf_jw_arr(&w);
  for (size_t i = 0; i < top; i++) {
    op_where at;
    int rc = row_where(g, i, info->python_version, &at);
    if (rc) return rc;
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "qualname", at.ref.qualname);
    bf_jw_kstr(&w, "file", at.ref.file);
    bf_jw_kint(&w, "firstlineno", at.ref.firstlineno);
    bf_jw_kint(&w, "line", at.line);
    bf_jw_kint(&w, "opcode", g->rows[i].opcode);
    bf_jw_kstr(&w, "opname", at.name);
    bf_jw_kstr(&w, "base", at.base);
    bf_jw_kint(&w, "samples", g->rows[i].samples);
    bf_jw_knum(&w, "share", g->total ? (double)g->rows[i].samples / (double)g->total : 0);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
  return 0;
}

static int ops_text(ops *g, size_t top, const bf_session_info *info, const bf_view_opts *o, FILE *out) {
  const char *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  int width = o->width > 40 ? o->width : 80;
  bf_put_title(out, "opcodes", info, width, o->color);
  fprintf(out, "\n%s%lld samples, %lld with the leaf frame's instruction%s\n", dim, (long long)g->total,
          (long long)g->with_op, rst);
  fprintf(out, "%s SHARE  95%% CI        SAMPLES  INSTRUCTION (BASE)                      LINE%s\n", dim, rst);
  for (size_t i = 0; i < top; i++) {
    op_where at;
    int rc = row_where(g, i, info->python_version, &at);
    if (rc) return rc;
    char opn[96], ci[32], loc[1024];
    if (!at.name)
      snprintf(opn, sizeof opn, "<%d>", g->rows[i].opcode);
    else if (at.base && strcmp(at.base, at.name) != 0)
      snprintf(opn, sizeof opn, "%s (%s)", at.name, at.base);
    else
      snprintf(opn, sizeof opn, "%s", at.name);
    double lo, hi;
    bf_wilson((double)g->rows[i].samples, (double)g->total, &lo, &hi);
    snprintf(ci, sizeof ci, "[%.1f-%.1f]", lo * 100, hi * 100);
    bf_fit_func(loc, sizeof loc, at.ref.qualname, at.ref.file, at.line, width - 70 > 20 ? width - 70 : 20);
    fprintf(out, "%5.1f%% %-13s %8lld  %-38s  %s\n",
            g->total ? 100.0 * (double)g->rows[i].samples / (double)g->total : 0, ci,
            (long long)g->rows[i].samples, opn, loc);
  }
  if (g->nrows > top)
    fprintf(out, "%s… %zu more%s%s%s\n", dim, g->nrows - top, o->limit_option ? " (" : "",
            o->limit_option ? o->limit_option : "", o->limit_option ? ")" : "");
  return 0;
}

int bf_view_opcodes(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  ops g = {.s = s};
  if ((rc = bf_q_timeline_foreach(s, session_id, &o->filter, ops_sample, &g))) goto out;
  if (!g.with_op) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld carries no opcodes: record it with --opcodes (Python 3.11+)",
                       (long long)session_id);
    goto out;
  }
  if (g.nrows) qsort(g.rows, g.nrows, sizeof *g.rows, cmp_row);
  size_t top = o->limit > 0 ? (size_t)o->limit : o->limit < 0 ? g.nrows : 25;
  if (top > g.nrows) top = g.nrows;
  rc = o->json ? ops_json(&g, top, info, out) : ops_text(&g, top, info, o, out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(g.rows);
  bf_map3_free(&g.leaf);
  bf_map3_free(&g.byrow);
  bf_session_info_free(info);
  return rc;
}
