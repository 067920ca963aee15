/* trc_stack.c — the slow paths of the shadow stacks and the accounting tables
 * (see trc_stack.h): growing, adding functions and edges, the focus record
 * ring, resynchronising a stack when a frame returns out of order. */
#include "trc_stack.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void trc_tables_free(trc_acct *a) {
  for (size_t i = 1; i < a->nfuncs; i++) {
    free(a->funcs[i].file);
    free(a->funcs[i].qualname);
  }
  free(a->funcs);
  a->funcs = NULL;
  a->nfuncs = a->capfuncs = 0;
  trc_map_free(&a->func_map);
  free(a->edges);
  a->edges = NULL;
  a->nedges = a->capedges = 0;
  trc_map_free(&a->edge_map);
}

int trc_acct_reset(trc_acct *a) {
  trc_tables_free(a);
  a->rec_head = a->rec_count = 0;
  a->mismatches = 0;
  a->error = 0;
  /* index 0 of funcs is the thread root */
  a->funcs = calloc(256, sizeof *a->funcs);
  if (!a->funcs) return -ENOMEM;
  a->capfuncs = 256;
  a->nfuncs = 1;
  return 0;
}

int trc_acct_ring(trc_acct *a, size_t cap) {
  free(a->recs);
  a->recs = NULL;
  a->rec_cap = a->rec_head = a->rec_count = 0;
  if (!cap) return 0;
  a->recs = malloc(cap * sizeof *a->recs);
  if (!a->recs) return -ENOMEM;
  a->rec_cap = cap;
  return 0;
}

void trc_acct_free(trc_acct *a) {
  trc_tables_free(a);
  trc_acct_ring(a, 0);
}

uint32_t trc_func_add(trc_acct *a, const void *key, void *ref, int is_c) {
  if (a->nfuncs == a->capfuncs) {
    size_t ncap = a->capfuncs ? a->capfuncs * 2 : 256;
    bf_trc_func *nf = realloc(a->funcs, ncap * sizeof *nf);
    if (!nf) return 0;
    a->funcs = nf;
    a->capfuncs = ncap;
  }
  uint32_t idx = (uint32_t)a->nfuncs;
  if (trc_map_put(&a->func_map, (uint64_t)(uintptr_t)key, idx) < 0) return 0;
  a->nfuncs++;
  bf_trc_func *f = &a->funcs[idx];
  memset(f, 0, sizeof *f);
  f->key = key;
  f->ref = ref;
  f->is_c = is_c;
  return idx;
}

uint32_t trc_edge(trc_acct *a, uint32_t caller, uint32_t callee) {
  uint64_t key = ((uint64_t)caller << 32) | callee;
  uint32_t idx = trc_map_get(&a->edge_map, key);
  if (idx) return idx;
  if (a->nedges == 0) a->nedges = 1; /* index 0 means "absent" in the map */
  if (a->nedges >= a->capedges) {
    size_t ncap = a->capedges ? a->capedges * 2 : 1024;
    bf_trc_edge *ne = realloc(a->edges, ncap * sizeof *ne);
    if (!ne) return 0;
    a->edges = ne;
    a->capedges = ncap;
  }
  idx = (uint32_t)a->nedges;
  if (trc_map_put(&a->edge_map, key, idx) < 0) return 0;
  a->nedges++;
  memset(&a->edges[idx], 0, sizeof a->edges[idx]);
  a->edges[idx].caller = caller;
  a->edges[idx].callee = callee;
  return idx;
}

trc_thread *trc_thread_alloc(void) { return calloc(1, sizeof(trc_thread)); }

void trc_thread_free(trc_thread *t) {
  if (!t) return;
  free(t->stack);
  free(t->func_active);
  free(t->edge_active);
  free(t->name);
  free(t);
}

void trc_thread_unwind(trc_acct *a, trc_thread *t, int64_t now) {
  while (t->depth) trc_pop(a, t, now);
}

int trc_stack_grow(trc_thread *t) {
  size_t ncap = t->cap ? t->cap * 2 : 256;
  trc_frame *ns = realloc(t->stack, ncap * sizeof *ns);
  if (!ns) return -ENOMEM;
  t->stack = ns;
  t->cap = ncap;
  return 0;
}

int trc_grow_u32(uint32_t **arr, size_t *n, size_t need) {
  if (need <= *n) return 0;
  size_t nn = *n ? *n : 256;
  while (nn < need) nn *= 2;
  uint32_t *na = realloc(*arr, nn * sizeof *na);
  if (!na) return -ENOMEM;
  memset(na + *n, 0, (nn - *n) * sizeof *na);
  *arr = na;
  *n = nn;
  return 0;
}

void trc_record(trc_acct *a, trc_thread *t, const trc_frame *fr, int64_t dur) {
  if (!a->rec_cap) return;
  bf_trc_rec *r;
  if (a->rec_count == a->rec_cap) {
    r = &a->recs[a->rec_head];
    a->funcs[r->func].records_kept--;
    a->funcs[r->func].records_dropped++;
    a->rec_head = (a->rec_head + 1) % a->rec_cap;
  } else {
    r = &a->recs[(a->rec_head + a->rec_count) % a->rec_cap];
    a->rec_count++;
  }
  r->func = fr->func;
  r->parent = t->depth ? t->stack[t->depth - 1].func : 0;
  r->thread = t->index;
  r->start_ns = fr->start_raw - (a->clock_cpu ? a->start_mono_ns : a->start_raw);
  r->duration_ns = dur;
  a->funcs[fr->func].records_kept++;
}

/* A focus root ended (once per focused call). */
void trc_pop_focus_root(trc_acct *a, trc_thread *t, const trc_frame *fr, int64_t el) {
  /* a resume of a focused generator is one more slice, not a call record */
  if (!(fr->flags & TRC_FR_RESUME)) trc_record(a, t, fr, el);
  t->focus_depth--;
  if (--a->focus_threads == 0 && a->on_focus) a->on_focus(a->on_focus_ctx, 0);
}

/* trc_leave when key is not the top frame's. */
void trc_leave_resync(trc_acct *a, trc_thread *t, const void *key, int64_t now) {
  size_t i = t->depth;
  while (i > 0 && t->stack[i - 1].key != key) i--;
  if (i == 0) {
    /* Not on the stack: a frame entered before tracing started, unless focus
     * mode ignored it. Only count it when it cannot be either. */
    if (!a->focus) a->mismatches++;
    return;
  }
  while (t->depth > i) {
    trc_pop(a, t, now);
    a->mismatches++;
  }
  trc_pop(a, t, now);
}
