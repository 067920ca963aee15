/* waits.c — the kernel lens read back (see waits.h): one pass over the
 * samples aggregates units by stack and by wait target, then each distinct
 * stack is walked once for the per-function split and the function under
 * each target. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "store_int.h"
#include "profile.h"
#include "query.h"
#include "vec.h"
#include "waits.h"

const char *bf_kw_name(unsigned i) {
  if (i == BF_KW_RUNQ) return "runq";
  if (i == BF_WAIT_NONE) return "unknown";
  return bf_wait_class_name(i);
}

typedef struct kw_stack {
  int64_t stack_id;
  double units[BF_KW_N];
} kw_stack;

typedef struct kw_under {
  size_t tidx;
  int64_t stack_id;
  double units;
} kw_under;

typedef struct kw_acc {
  bf_store *s;
  bf_kw *k;
  bf_map3 stacks, targets, threads, under;
  kw_stack *sv;
  size_t ns, caps;
  size_t capt;
  kw_under *uv;
  size_t nu, capu;
} kw_acc;

static int target_idx(kw_acc *a, unsigned wait, int64_t target, size_t *out) {
  int64_t *hit = bf_map3_get(&a->targets, wait, target, 0);
  if (hit) {
    *out = (size_t)*hit;
    return 0;
  }
  bf_kw *k = a->k;
  if (bf_vec_grow((void **)&k->targets, &a->capt, k->ntargets + 1, sizeof *k->targets, 32)) return -ENOMEM;
  bf_kw_target *t = &k->targets[k->ntargets];
  memset(t, 0, sizeof *t);
  t->wait = wait;
  t->target_id = target;
  t->text = "";
  if (target > 0 && bf_store_string_get(a->s, target, &t->text)) t->text = "?";
  if (bf_map3_put(&a->targets, wait, target, 0, (int64_t)k->ntargets)) return -ENOMEM;
  *out = k->ntargets++;
  return 0;
}

/* Charge u units of target tidx to thread and stack. */
static int target_add(kw_acc *a, size_t tidx, int64_t thread, int64_t stack, double u) {
  bf_kw_target *t = &a->k->targets[tidx];
  t->units += u;
  if (!bf_map3_get(&a->threads, (int64_t)tidx, thread, 0)) {
    if (bf_map3_put(&a->threads, (int64_t)tidx, thread, 0, 1)) return -ENOMEM;
    t->threads++;
  }
  int64_t *hit = bf_map3_get(&a->under, (int64_t)tidx, stack, 0);
  if (hit) {
    a->uv[*hit].units += u;
    return 0;
  }
  if (bf_vec_grow((void **)&a->uv, &a->capu, a->nu + 1, sizeof *a->uv, 64)) return -ENOMEM;
  a->uv[a->nu] = (kw_under){tidx, stack, u};
  if (bf_map3_put(&a->under, (int64_t)tidx, stack, 0, (int64_t)a->nu)) return -ENOMEM;
  a->nu++;
  return 0;
}

static int kw_sample(void *ud, const bf_sample *smp) {
  kw_acc *a = ud;
  bf_kw *k = a->k;
  /* units are the weight (wall ns): ticks a busy host delays stand for
   * more time, and the kernel's split is of time */
  double c = smp->weight > 0 ? (double)smp->weight : (smp->count ? (double)smp->count : 1);
  k->total_samples += smp->count ? smp->count : 1;
  k->total_weight += c;
  int64_t stack = smp->stack_id > 0 ? smp->stack_id : 0;
  unsigned wait = smp->wait < BF_WAIT_CLASSES ? smp->wait : BF_WAIT_OTHER;
  /* the weight's parts: waiting for a CPU, on one, the rest the class's */
  double fq = 0, fc = 0;
  if (wait && smp->weight > 0) {
    fq = smp->runq_ns > 0 ? (double)smp->runq_ns / (double)smp->weight : 0;
    fc = smp->cpu_ns > 0 ? (double)smp->cpu_ns / (double)smp->weight : 0;
    if (fq > 1) fq = 1;
    if (fc > 1 - fq) fc = 1 - fq;
  }
  if (wait == BF_WAIT_CPU) fc = 1 - fq;
  double uq = c * fq, ucpu = c * fc, uc = c - uq - ucpu;
  if (uc < 0) uc = 0;
  int64_t *hit = bf_map3_get(&a->stacks, stack, 0, 0);
  kw_stack *st;
  if (hit) {
    st = &a->sv[*hit];
  } else {
    if (bf_vec_grow((void **)&a->sv, &a->caps, a->ns + 1, sizeof *a->sv, 256)) return -ENOMEM;
    st = &a->sv[a->ns];
    memset(st, 0, sizeof *st);
    st->stack_id = stack;
    if (bf_map3_put(&a->stacks, stack, 0, 0, (int64_t)a->ns)) return -ENOMEM;
    a->ns++;
  }
  if (!wait) {
    st->units[0] += c;
    k->units[0] += c;
    return 0;
  }
  st->units[wait] += uc;
  st->units[BF_WAIT_CPU] += ucpu;
  st->units[BF_KW_RUNQ] += uq;
  k->units[wait] += uc;
  k->units[BF_WAIT_CPU] += ucpu;
  k->units[BF_KW_RUNQ] += uq;
  k->kernel_units += c;
  size_t ti;
  int rc;
  if (uc > 0 && wait != BF_WAIT_CPU) {
    if ((rc = target_idx(a, wait, smp->wait_target, &ti))) return rc;
    if ((rc = target_add(a, ti, smp->thread_id, stack, uc))) return rc;
  }
  if (ucpu > 0) {
    if ((rc = target_idx(a, BF_WAIT_CPU, 0, &ti))) return rc;
    if ((rc = target_add(a, ti, smp->thread_id, stack, ucpu))) return rc;
  }
  if (uq > 0) {
    if ((rc = target_idx(a, BF_KW_RUNQ, 0, &ti))) return rc;
    if ((rc = target_add(a, ti, smp->thread_id, stack, uq))) return rc;
  }
  return 0;
}

static int cmp_target(const void *x, const void *y) {
  const bf_kw_target *a = x, *b = y;
  if (a->units != b->units) return a->units < b->units ? 1 : -1;
  return (a->wait > b->wait) - (a->wait < b->wait);
}

/* Per function: each distinct stack's units into every function on it (once
 * per stack under recursion). */
static int kw_funcs(kw_acc *a, bf_q_frames **fc, bf_map3 *fidx, size_t *capf) {
  bf_kw *k = a->k;
  for (size_t i = 0; i < a->ns; i++) {
    const int64_t *fids, *lines;
    size_t n;
    if (!a->sv[i].stack_id) continue;
    int rc = bf_q_frames_get(a->s, fc, a->sv[i].stack_id, &fids, &lines, &n);
    if (rc) return rc;
    for (size_t j = 0; j < n; j++) {
      int dup = 0;
      for (size_t q = 0; q < j && !dup; q++) dup = fids[q] == fids[j];
      if (dup) continue;
      int64_t *hit = bf_map3_get(fidx, fids[j], 0, 0);
      bf_kw_func *f;
      if (hit) {
        f = &k->funcs[*hit];
      } else {
        if (bf_vec_grow((void **)&k->funcs, capf, k->nfuncs + 1, sizeof *k->funcs, 128)) return -ENOMEM;
        f = &k->funcs[k->nfuncs];
        memset(f, 0, sizeof *f);
        f->function_id = fids[j];
        if (bf_map3_put(fidx, fids[j], 0, 0, (int64_t)k->nfuncs)) return -ENOMEM;
        k->nfuncs++;
      }
      for (int c = 0; c < BF_KW_N; c++) f->units[c] += a->sv[i].units[c];
    }
  }
  return 0;
}

/* The innermost function most often under each target. */
static int kw_under_pick(kw_acc *a, bf_q_frames **fc) {
  bf_map3 leaf = {0}; /* (target, function) → units index into sums */
  double *sums = NULL;
  size_t nsum = 0, capsum = 0;
  double *best = calloc(a->k->ntargets ? a->k->ntargets : 1, sizeof *best);
  int rc = best ? 0 : -ENOMEM;
  for (size_t i = 0; i < a->nu && !rc; i++) {
    const int64_t *fids, *lines;
    size_t n;
    if (!a->uv[i].stack_id) continue;
    if ((rc = bf_q_frames_get(a->s, fc, a->uv[i].stack_id, &fids, &lines, &n)) || !n) continue;
    int64_t fid = fids[n - 1];
    int64_t *hit = bf_map3_get(&leaf, (int64_t)a->uv[i].tidx, fid, 0);
    size_t si;
    if (hit) {
      si = (size_t)*hit;
    } else {
      if (bf_vec_grow((void **)&sums, &capsum, nsum + 1, sizeof *sums, 64) ||
          bf_map3_put(&leaf, (int64_t)a->uv[i].tidx, fid, 0, (int64_t)nsum)) {
        rc = -ENOMEM;
        break;
      }
      si = nsum++;
      sums[si] = 0;
    }
    sums[si] += a->uv[i].units;
    bf_kw_target *t = &a->k->targets[a->uv[i].tidx];
    if (sums[si] > best[a->uv[i].tidx]) {
      best[a->uv[i].tidx] = sums[si];
      t->under_function_id = fid;
    }
  }
  free(best);
  free(sums);
  bf_map3_free(&leaf);
  return rc;
}

int bf_kw_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_kw **out) {
  *out = NULL;
  bf_kw *k = calloc(1, sizeof *k);
  bf_map3 *fidx = calloc(1, sizeof *fidx);
  if (!k || !fidx) {
    free(k);
    free(fidx);
    return bf_store_fail(s, -ENOMEM, "out of memory");
  }
  k->idx = fidx;
  kw_acc a = {.s = s, .k = k};
  bf_q_frames *fc = NULL;
  size_t capf = 0;
  int rc = bf_q_timeline_foreach(s, session_id, f, kw_sample, &a);
  if (!rc) rc = kw_under_pick(&a, &fc);
  if (!rc) rc = kw_funcs(&a, &fc, fidx, &capf);
  bf_q_frames_free(fc);
  bf_map3_free(&a.stacks);
  bf_map3_free(&a.targets);
  bf_map3_free(&a.threads);
  bf_map3_free(&a.under);
  free(a.sv);
  free(a.uv);
  if (rc) {
    bf_kw_free(k);
    return rc == -ENOMEM ? bf_store_fail(s, rc, "out of memory") : rc;
  }
  double n = (double)k->total_samples, tw = k->total_weight;
  for (size_t i = 0; i < k->ntargets; i++) {
    bf_kw_target *t = &k->targets[i];
    t->share = tw > 0 ? t->units / tw : 0;
    t->samples = t->share * n;
    bf_wilson(t->samples, n, &t->lo, &t->hi);
  }
  if (k->ntargets) qsort(k->targets, k->ntargets, sizeof *k->targets, cmp_target);
  *out = k;
  return 0;
}

void bf_kw_free(bf_kw *k) {
  if (!k) return;
  free(k->targets);
  free(k->funcs);
  if (k->idx) bf_map3_free(k->idx);
  free(k->idx);
  free(k);
}

const bf_kw_func *bf_kw_func_find(const bf_kw *k, int64_t function_id) {
  int64_t *hit = k && k->idx ? bf_map3_get(k->idx, function_id, 0, 0) : NULL;
  return hit ? &k->funcs[*hit] : NULL;
}
