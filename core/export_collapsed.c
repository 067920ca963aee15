/* export_collapsed.c — FlameGraph's collapsed-stack format. Identical stacks
 * are aggregated; frames carry (qualname, file, firstlineno, line) so an
 * import gives back the same functions. Samples without a Python frame are
 * the line "[no Python frame] N", which bf_import_collapsed reads back; a
 * record --opcodes session's stacks end in their leaf instruction, a frame
 * "[LOAD_ATTR_INSTANCE_VALUE]" (bf_opname); a wall-clock sample's kernel
 * state ends it as a plain frame ("[recvfrom tcp 127.0.0.1:5432]",
 * "[waiting for CPU]"; record --kernel). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"
#include "ident.h"
#include "opnames.h"
#include "query.h"
#include "store_int.h"
#include "vec.h"

typedef struct acc {
  bf_map3 idx; /* (stack id, leaf opcode + 1, kernel leaf) → index */
  int64_t *stack, *kleaf;
  int *op;
  double *val;
  size_t n, cap;
} acc;

/* Threads merged: one line per distinct stack (stack 0 = no Python frame). */
static int add(acc *a, int64_t stack_id, int op, int64_t kleaf, double v) {
  int64_t *hit = bf_map3_get(&a->idx, stack_id, op, kleaf);
  if (hit) {
    a->val[*hit] += v;
    return 0;
  }
  size_t stack_cap = a->cap, op_cap = a->cap, k_cap = a->cap; /* the arrays share a->cap */
  if (bf_vec_grow((void **)&a->stack, &stack_cap, a->n + 1, sizeof *a->stack, 256) ||
      bf_vec_grow((void **)&a->kleaf, &k_cap, a->n + 1, sizeof *a->kleaf, 256) ||
      bf_vec_grow((void **)&a->op, &op_cap, a->n + 1, sizeof *a->op, 256) ||
      bf_vec_grow((void **)&a->val, &a->cap, a->n + 1, sizeof *a->val, 256))
    return -ENOMEM;
  a->stack[a->n] = stack_id;
  a->op[a->n] = op;
  a->kleaf[a->n] = kleaf;
  a->val[a->n] = v;
  if (bf_map3_put(&a->idx, stack_id, op, kleaf, (int64_t)a->n)) return -ENOMEM;
  a->n++;
  return 0;
}

static void put_sanitized(FILE *out, const char *s) {
  /* ';' separates frames and a newline ends the record: replace both. */
  for (; *s; s++) fputc(*s == ';' ? ':' : (*s == '\n' || *s == '\r') ? ' ' : *s, out);
}

int bf_export_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  acc a = {0};
  bf_q_stacks *q = NULL;
  if (bf_q_kind_of(info) == BF_Q_TRACED) {
    bf_session_info_free(info);
    return bf_store_fail(s, -EINVAL,
                         "session %lld is traced: it has no stacks to collapse (export it as pstats instead)",
                         (long long)session_id);
  }
  bf_sample_filter fo = f ? *f : (bf_sample_filter){0};
  fo.by_opcode = 1;   /* no-op unless recorded with --opcodes */
  fo.kernel_leaf = 1; /* no-op unless recorded with --kernel */
  if ((rc = bf_q_stacks_load(s, session_id, &fo, &q)) || (rc = bf_q_stacks_merge_threads(q))) goto out;
  /* weights (ns or imported samples) when shares use them; counts otherwise */
  int by_weight = bf_q_by_weight(info) && q->total_weight > 0;
  for (size_t i = 0; i < q->n; i++)
    if ((rc = add(&a, q->v[i].stack_id, q->v[i].leaf_op, q->v[i].kleaf,
                  by_weight ? q->v[i].weight : (double)q->v[i].count)))
      goto out;
  for (size_t i = 0; i < a.n; i++) {
    int64_t v = (int64_t)(a.val[i] + 0.5);
    if (v <= 0) continue;
    if (a.stack[i] == 0) {
      fprintf(out, "%s %lld\n", BF_NO_PYTHON_FRAME, (long long)v);
      continue;
    }
    int64_t *frames = NULL;
    size_t nf = 0;
    if ((rc = bf_store_stack_frames(s, a.stack[i], &frames, &nf))) goto out;
    for (size_t j = 0; j < nf; j++) {
      int64_t fid, line;
      bf_function_ref ref;
      if ((rc = bf_store_frame_get(s, frames[j], &fid, &line)) || (rc = bf_store_function_get(s, fid, &ref))) {
        free(frames);
        goto out;
      }
      if (j) fputc(';', out);
      put_sanitized(out, ref.qualname);
      if (bf_ident_is_unknown(ref.file, ref.firstlineno) && line == 0) continue; /* plain frame */
      fputs(" (", out);
      put_sanitized(out, ref.file);
      fprintf(out, ":%lld:%lld)", (long long)ref.firstlineno, (long long)line);
    }
    free(frames);
    if (a.op[i] > 0) { /* the leaf's instruction (record --opcodes) */
      const char *name = bf_opname(info->python_version, a.op[i] - 1, NULL);
      if (name)
        fprintf(out, ";[%s]", name);
      else
        fprintf(out, ";[opcode %d]", a.op[i] - 1);
    }
    bf_function_ref kref;
    if (a.kleaf[i] && (rc = bf_store_function_get(s, a.kleaf[i], &kref))) goto out;
    if (a.kleaf[i]) {
      fputc(';', out);
      put_sanitized(out, kref.qualname);
    }
    fprintf(out, " %lld\n", (long long)v);
  }
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_q_stacks_free(q);
  bf_map3_free(&a.idx);
  free(a.stack);
  free(a.op);
  free(a.kleaf);
  free(a.val);
  bf_session_info_free(info);
  return rc;
}
