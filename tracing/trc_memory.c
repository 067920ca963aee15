/* trc_memory.c — `trace --memory`: the PEP 445 allocator hooks and the exact
 * allocation accounting behind them.
 *
 * Every block allocated while counting is kept in a pointer map with its size,
 * the function and call edge it was charged to (the innermost Python frame of
 * the allocating thread's shadow stack; C frames are transparent, as for
 * tracemalloc) and, for blocks of TRC_MEM_STACK_MIN bytes or more, its
 * interned stack (the map is common/pmap.h's; a free's tombstone goes
 * again when the next slot is empty, so alloc/free churn keeps it clean).
 * A free is charged to the block's allocating function; a
 * realloc is a free and an allocation; a free of a block made before counting
 * started is only counted (untracked_frees). Our own tables use libc malloc
 * directly, so nothing here re-enters the hooks.
 *
 * Threads: the MEM and OBJ domains are called with the GIL held, RAW also
 * without it, so all accounting runs under one spin lock. A thread reads only
 * its own shadow stack, which only it changes, under the GIL.
 */
#include "trc_memory.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmap.h"

/* One live block: a slot of the live-block map, keyed by its address. */
typedef struct mem_ent {
  uint64_t ptr; /* first: bf_pmap's key */
  uint64_t size;
  uint32_t func, edge, stack, pad;
} mem_ent;

/* The results moved into a Profile at stop. */
struct trc_mem_res {
  bf_trc_memstat *funcs, *edges;
  size_t nfuncs, nedges;
  bf_trc_memtop top[TRC_MEM_TOP];
  uint32_t *top_stacks; /* the top blocks' stacks, back to back */
  size_t ntop;
  int64_t peak_live_bytes, live_bytes, untracked_frees;
  int partial;
  bf_trc_mem view;
};

typedef struct mem_domain {
  PyMemAllocatorEx prev; /* what we chain to */
  PyMemAllocatorEx ours;
  int installed;         /* ours is somewhere in this domain's chain */
} mem_domain;

/* Process-wide: the allocator is. */
static struct {
  char lock;             /* spin lock (__atomic_test_and_set) */
  int on;                /* counting (read under the lock) */
  uint64_t gen;          /* the Profile generation whose shadow stacks are read */
  mem_domain dom[3];
  bf_pmap ents;          /* the live blocks: mem_ent by address */
  bf_trc_memstat *funcs, *edges;
  size_t capfuncs, capedges;
  uint32_t *pool;        /* interned stacks: [len, f0, f1, ...] back to back */
  size_t npool, cappool;
  trc_map stack_map;     /* stack hash -> offset in pool + 1 */
  int64_t live_bytes, peak_live_bytes, untracked_frees;
  int partial;           /* a table could not grow: some blocks not counted */
} M = {.ents = BF_PMAP_INIT(mem_ent)};

#define MEM_POOL_MAX ((size_t)4 << 20) /* u32 cells of stacks kept (16 MiB) */
#define MEM_STACK_DEPTH 256            /* frames kept per stack (innermost ones) */
#define MEM_LIVE_START 32767           /* live blocks before the first growth (65536 slots, 2 MiB) */

static inline void mem_lock(void) {
  while (__atomic_test_and_set(&M.lock, __ATOMIC_ACQUIRE)) sched_yield();
}
static inline void mem_unlock(void) { __atomic_clear(&M.lock, __ATOMIC_RELEASE); }

/* Remove ptr's entry into *out; 0 when not there. */
static int mem_take(uintptr_t ptr, mem_ent *out) {
  mem_ent *e = bf_pmap_get_sz(&M.ents, (uint64_t)ptr, sizeof *e);
  if (!e) return 0;
  *out = *e;
  bf_pmap_del_slot_sz(&M.ents, e, sizeof *e);
  return 1;
}

static int mem_stat_room(bf_trc_memstat **arr, size_t *cap, uint32_t idx) {
  if (idx < *cap) return 0;
  size_t ncap = *cap ? *cap : 256;
  while (ncap <= idx) ncap *= 2;
  bf_trc_memstat *n = realloc(*arr, ncap * sizeof *n);
  if (!n) return -ENOMEM;
  memset(n + *cap, 0, (ncap - *cap) * sizeof *n);
  *arr = n;
  *cap = ncap;
  return 0;
}

/* The interned stack of Python frames stack[0..depth) (outermost first, C
 * frames left out), as an offset in the pool + 1; 0 when the pool is full. */
static uint32_t mem_stack_intern(const trc_frame *st, size_t depth) {
  uint32_t fr[MEM_STACK_DEPTH];
  size_t n = 0;
  /* the innermost MEM_STACK_DEPTH Python frames, outermost first */
  for (size_t k = depth; k-- > 0 && n < MEM_STACK_DEPTH;)
    if (!(st[k].flags & TRC_FR_C)) fr[n++] = st[k].func;
  for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
    uint32_t x = fr[a];
    fr[a] = fr[b];
    fr[b] = x;
  }
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
  for (size_t i = 0; i < n; i++) h = trc_mix(h ^ fr[i]) + i;
  if (!h) h = 1;
  uint32_t off1 = trc_map_get(&M.stack_map, h);
  if (off1 && M.pool[off1 - 1] == n && memcmp(M.pool + off1, fr, n * sizeof *fr) == 0) return off1;
  if (M.npool + n + 1 > MEM_POOL_MAX) return 0;
  if (M.npool + n + 1 > M.cappool) {
    size_t ncap = M.cappool ? M.cappool * 2 : 4096;
    while (ncap < M.npool + n + 1) ncap *= 2;
    uint32_t *np = realloc(M.pool, ncap * sizeof *np);
    if (!np) return 0;
    M.pool = np;
    M.cappool = ncap;
  }
  uint32_t at = (uint32_t)M.npool;
  M.pool[at] = (uint32_t)n;
  memcpy(M.pool + at + 1, fr, n * sizeof *fr);
  M.npool += n + 1;
  if (!off1) trc_map_put(&M.stack_map, h, at + 1); /* a colliding stack stays un-interned */
  return at + 1;
}

/* Charge a new block to the calling thread's innermost Python frame. */
static void mem_note_alloc(void *ptr, size_t size) {
  mem_lock();
  if (!M.on) goto out;
  uint32_t func = 0, edge = 0, stack = 0;
  trc_thread *t = trc_tls.gen == M.gen ? trc_tls.t : NULL;
  if (t && t->depth) {
    size_t k = t->depth;
    while (k > 0 && (t->stack[k - 1].flags & TRC_FR_C)) k--;
    if (k > 0) {
      func = t->stack[k - 1].func;
      edge = t->stack[k - 1].edge;
      if (size >= TRC_MEM_STACK_MIN) stack = mem_stack_intern(t->stack, k);
    }
  }
  if ((func >= M.capfuncs && mem_stat_room(&M.funcs, &M.capfuncs, func) < 0) ||
      (edge >= M.capedges && mem_stat_room(&M.edges, &M.capedges, edge) < 0)) /* the call only to grow */
    goto fail;
  int added;
  mem_ent *e = bf_pmap_put_sz(&M.ents, (uint64_t)(uintptr_t)ptr, &added, sizeof *e);
  if (!e) goto fail;
  if (!added) M.live_bytes -= (int64_t)e->size; /* a block we missed the free of (freed outside the hooks): replace */
  *e = (mem_ent){(uint64_t)(uintptr_t)ptr, size, func, edge, stack, 0};
  M.funcs[func].allocs++;
  M.funcs[func].alloc_bytes += (int64_t)size;
  M.edges[edge].allocs++;
  M.edges[edge].alloc_bytes += (int64_t)size;
  M.live_bytes += (int64_t)size;
  if (M.live_bytes > M.peak_live_bytes) M.peak_live_bytes = M.live_bytes;
  goto out;
fail:
  M.partial = 1;
out:
  mem_unlock();
}

/* Forget block ptr (before it goes back to the allocator, so another thread
 * cannot get the address first); *had: its entry, when it was counted. */
static int mem_note_free(void *ptr, mem_ent *had) {
  int found = 0;
  mem_lock();
  if (M.on) {
    found = mem_take((uintptr_t)ptr, had);
    if (found) {
      M.funcs[had->func].frees++;
      M.funcs[had->func].freed_bytes += (int64_t)had->size;
      M.edges[had->edge].frees++;
      M.edges[had->edge].freed_bytes += (int64_t)had->size;
      M.live_bytes -= (int64_t)had->size;
    } else {
      M.untracked_frees++;
    }
  }
  mem_unlock();
  return found;
}

/* A realloc that failed: the old block is still there, as it was. */
static void mem_restore(const mem_ent *had) {
  mem_lock();
  mem_ent *e = M.on ? bf_pmap_put(&M.ents, had->ptr, NULL) : NULL;
  if (e) {
    *e = *had;
    M.funcs[had->func].frees--;
    M.funcs[had->func].freed_bytes -= (int64_t)had->size;
    M.edges[had->edge].frees--;
    M.edges[had->edge].freed_bytes -= (int64_t)had->size;
    M.live_bytes += (int64_t)had->size;
  }
  mem_unlock();
}

/* Set while this thread is inside the allocator below us: what that allocator
 * allocates itself (pymalloc takes blocks over 512 bytes from the RAW domain,
 * through the hooks) is part of the outer block, not another one, as for
 * tracemalloc. */
static _Thread_local __attribute__((tls_model("initial-exec"))) int mem_inside;

static inline int mem_counting(void) {
  return !mem_inside && __atomic_load_n(&M.on, __ATOMIC_RELAXED);
}

static void *mem_malloc(void *ctx, size_t size) {
  mem_domain *d = ctx;
  if (!mem_counting()) return d->prev.malloc(d->prev.ctx, size);
  mem_inside = 1;
  void *r = d->prev.malloc(d->prev.ctx, size);
  mem_inside = 0;
  if (r) mem_note_alloc(r, size);
  return r;
}

static void *mem_calloc(void *ctx, size_t nelem, size_t elsize) {
  mem_domain *d = ctx;
  if (!mem_counting()) return d->prev.calloc(d->prev.ctx, nelem, elsize);
  mem_inside = 1;
  void *r = d->prev.calloc(d->prev.ctx, nelem, elsize);
  mem_inside = 0;
  if (r) mem_note_alloc(r, nelem * elsize);
  return r;
}

static void *mem_realloc(void *ctx, void *ptr, size_t size) {
  mem_domain *d = ctx;
  if (!mem_counting()) return d->prev.realloc(d->prev.ctx, ptr, size);
  mem_ent had;
  int found = ptr ? mem_note_free(ptr, &had) : 0;
  mem_inside = 1;
  void *r = d->prev.realloc(d->prev.ctx, ptr, size);
  mem_inside = 0;
  if (r) {
    mem_note_alloc(r, size);
  } else if (found) {
    mem_restore(&had);
  }
  return r;
}

static void mem_free(void *ctx, void *ptr) {
  mem_domain *d = ctx;
  if (!ptr || !mem_counting()) {
    d->prev.free(d->prev.ctx, ptr);
    return;
  }
  mem_ent had;
  mem_note_free(ptr, &had);
  mem_inside = 1;
  d->prev.free(d->prev.ctx, ptr);
  mem_inside = 0;
}

static const PyMemAllocatorDomain mem_domains[3] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM,
                                                    PYMEM_DOMAIN_OBJ};

static void mem_tables_free(void) {
  bf_pmap_free(&M.ents);
  free(M.funcs);
  free(M.edges);
  free(M.pool);
  trc_map_free(&M.stack_map);
  M.funcs = M.edges = NULL;
  M.pool = NULL;
  M.capfuncs = M.capedges = M.npool = M.cappool = 0;
}

int trc_mem_start(ProfileObject *p) {
  mem_lock();
  mem_tables_free();
  M.live_bytes = M.peak_live_bytes = M.untracked_frees = 0;
  M.partial = 0;
  int rc = bf_pmap_reserve(&M.ents, MEM_LIVE_START);
  if (rc == 0) rc = mem_stat_room(&M.funcs, &M.capfuncs, 0);
  if (rc == 0) rc = mem_stat_room(&M.edges, &M.capedges, 0);
  mem_unlock();
  if (rc < 0) {
    PyErr_NoMemory();
    return -1;
  }
  for (int k = 0; k < 3; k++) {
    mem_domain *d = &M.dom[k];
    if (d->installed) continue; /* still chained from an earlier run: reused */
    PyMem_GetAllocator(mem_domains[k], &d->prev);
    d->ours = (PyMemAllocatorEx){d, mem_malloc, mem_calloc, mem_realloc, mem_free};
    PyMem_SetAllocator(mem_domains[k], &d->ours);
    d->installed = 1;
  }
  mem_lock();
  M.gen = p->gen;
  M.on = 1;
  mem_unlock();
  return 0;
}

static int cmp_top(const void *a, const void *b) {
  const mem_ent *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return (x->ptr > y->ptr) - (x->ptr < y->ptr);
}

/* The largest live blocks into r (with copies of their stacks). */
static void mem_top(struct trc_mem_res *r) {
  mem_ent best[TRC_MEM_TOP];
  size_t nb = 0;
  size_t it = 0;
  for (const mem_ent *e; (e = bf_pmap_next_sz(&M.ents, &it, sizeof *e));) {
    if (nb == TRC_MEM_TOP && e->size <= best[nb - 1].size) continue;
    size_t j = nb < TRC_MEM_TOP ? nb++ : nb - 1;
    while (j > 0 && best[j - 1].size < e->size) {
      best[j] = best[j - 1];
      j--;
    }
    best[j] = *e;
  }
  qsort(best, nb, sizeof *best, cmp_top);
  size_t cells = 0;
  for (size_t i = 0; i < nb; i++) cells += best[i].stack ? M.pool[best[i].stack - 1] : 0;
  r->top_stacks = malloc((cells ? cells : 1) * sizeof *r->top_stacks);
  size_t at = 0;
  for (size_t i = 0; i < nb; i++) {
    bf_trc_memtop *t = &r->top[i];
    t->size = (int64_t)best[i].size;
    t->func = best[i].func;
    t->nstack = 0;
    t->stack = NULL;
    if (best[i].stack && r->top_stacks) {
      t->nstack = M.pool[best[i].stack - 1];
      memcpy(r->top_stacks + at, M.pool + best[i].stack, t->nstack * sizeof *r->top_stacks);
      t->stack = r->top_stacks + at;
      at += t->nstack;
    }
  }
  r->ntop = nb;
}

void trc_mem_stop(ProfileObject *p) {
  if (!p->memory) return;
  mem_lock();
  if (!M.on || M.gen != p->gen) {
    mem_unlock();
    return;
  }
  M.on = 0;
  mem_unlock();
  /* off: no hook touches the tables any more */
  for (int k = 0; k < 3; k++) {
    mem_domain *d = &M.dom[k];
    PyMemAllocatorEx cur;
    PyMem_GetAllocator(mem_domains[k], &cur);
    if (d->installed && cur.ctx == d && cur.malloc == mem_malloc) {
      PyMem_SetAllocator(mem_domains[k], &d->prev);
      d->installed = 0;
    }
  }
  trc_mem_free(p);
  struct trc_mem_res *r = calloc(1, sizeof *r);
  if (!r) {
    mem_tables_free();
    return;
  }
  r->nfuncs = p->acct.nfuncs;
  r->nedges = p->acct.nedges;
  r->funcs = calloc(r->nfuncs ? r->nfuncs : 1, sizeof *r->funcs);
  r->edges = calloc(r->nedges ? r->nedges : 1, sizeof *r->edges);
  if (r->funcs && r->edges) {
    for (size_t i = 0; i < r->nfuncs && i < M.capfuncs; i++) r->funcs[i] = M.funcs[i];
    for (size_t i = 0; i < r->nedges && i < M.capedges; i++) r->edges[i] = M.edges[i];
    mem_top(r);
  } else {
    r->nfuncs = r->nedges = 0;
    r->partial = 1;
  }
  r->peak_live_bytes = M.peak_live_bytes;
  r->live_bytes = M.live_bytes;
  r->untracked_frees = M.untracked_frees;
  r->partial |= M.partial;
  r->view = (bf_trc_mem){r->funcs, r->nfuncs, r->edges, r->nedges, r->top, r->ntop};
  p->mem = r;
  mem_tables_free();
}

void trc_mem_free(ProfileObject *p) {
  struct trc_mem_res *r = p->mem;
  if (!r) return;
  free(r->funcs);
  free(r->edges);
  free(r->top_stacks);
  free(r);
  p->mem = NULL;
}

const bf_trc_mem *trc_mem_result(ProfileObject *p) { return p->mem ? &p->mem->view : NULL; }

/* (file, qualname, firstlineno) of function index fi, or None for 0. */
static PyObject *mem_ident(ProfileObject *p, uint32_t fi) {
  if (!fi || fi >= p->acct.nfuncs) Py_RETURN_NONE;
  const bf_trc_func *f = &p->acct.funcs[fi];
  return Py_BuildValue("(ssL)", f->file ? f->file : "?", f->qualname ? f->qualname : "?",
                       (long long)f->firstlineno);
}

static PyObject *mem_stat_dict(PyObject *ident, const char *key, const bf_trc_memstat *m) {
  if (!ident) return NULL;
  PyObject *d = Py_BuildValue("{s:O,s:L,s:L,s:L,s:L,s:L,s:L}", key, ident, "allocs",
                              (long long)m->allocs, "alloc_bytes", (long long)m->alloc_bytes, "frees",
                              (long long)m->frees, "freed_bytes", (long long)m->freed_bytes,
                              "live_count", (long long)(m->allocs - m->frees), "live_bytes",
                              (long long)(m->alloc_bytes - m->freed_bytes));
  Py_DECREF(ident);
  return d;
}

static int mem_append(PyObject *list, PyObject *d) {
  if (!d) return -1;
  int rc = PyList_Append(list, d);
  Py_DECREF(d);
  return rc;
}

static PyObject *mem_top_list(ProfileObject *p, const struct trc_mem_res *r) {
  PyObject *top = PyList_New(0);
  for (size_t i = 0; top && i < r->ntop; i++) {
    const bf_trc_memtop *t = &r->top[i];
    PyObject *stack = PyList_New(0);
    for (uint32_t k = 0; stack && k < t->nstack; k++)
      if (mem_append(stack, mem_ident(p, t->stack[k])) < 0) Py_CLEAR(stack);
    PyObject *fn = stack ? mem_ident(p, t->func) : NULL;
    PyObject *d = fn ? Py_BuildValue("{s:L,s:O,s:O}", "size", (long long)t->size, "function", fn,
                                     "stack", stack)
                     : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(stack);
    if (mem_append(top, d) < 0) Py_CLEAR(top);
  }
  return top;
}

PyObject *trc_mem_stats(ProfileObject *p) {
  const struct trc_mem_res *r = p->mem;
  if (!r) Py_RETURN_NONE;
  PyObject *funcs = PyList_New(0), *edges = PyList_New(0), *top = NULL, *root = NULL, *out = NULL;
  if (!funcs || !edges) goto done;
  for (size_t i = 1; i < r->nfuncs; i++)
    if (r->funcs[i].allocs && mem_append(funcs, mem_stat_dict(mem_ident(p, (uint32_t)i), "function",
                                                               &r->funcs[i])) < 0)
      goto done;
  for (size_t i = 1; i < r->nedges; i++) {
    if (!r->edges[i].allocs) continue;
    const bf_trc_edge *e = &p->acct.edges[i];
    PyObject *d = mem_stat_dict(mem_ident(p, e->callee), "callee", &r->edges[i]);
    PyObject *caller = d ? mem_ident(p, e->caller) : NULL;
    if (!caller || PyDict_SetItemString(d, "caller", caller) < 0) {
      Py_XDECREF(caller);
      Py_XDECREF(d);
      goto done;
    }
    Py_DECREF(caller);
    if (mem_append(edges, d) < 0) goto done;
  }
  if (!(top = mem_top_list(p, r))) goto done;
  Py_INCREF(Py_None);
  if (!(root = mem_stat_dict(Py_None, "function", r->nfuncs ? &r->funcs[0] : &(bf_trc_memstat){0})))
    goto done;
  out = Py_BuildValue("{s:O,s:O,s:O,s:O,s:L,s:L,s:L,s:O}", "functions", funcs, "edges", edges, "top",
                      top, "unattributed", root, "peak_live_bytes", (long long)r->peak_live_bytes,
                      "live_bytes", (long long)r->live_bytes, "untracked_frees",
                      (long long)r->untracked_frees, "partial", r->partial ? Py_True : Py_False);
done:
  Py_XDECREF(funcs);
  Py_XDECREF(edges);
  Py_XDECREF(top);
  Py_XDECREF(root);
  return out;
}

void trc_mem_extra_json(ProfileObject *p, char *buf, size_t len) {
  const struct trc_mem_res *r = p->mem;
  if (!len) return;
  buf[0] = 0;
  if (!r) return;
  snprintf(buf, len,
           "\"memory\":{\"domains\":[\"raw\",\"mem\",\"obj\"],\"attribution\":\"innermost Python "
           "frame; frees to the allocating function\",\"peak_live_bytes\":%lld,\"live_bytes\":%lld,"
           "\"untracked_frees\":%lld,\"stack_min_bytes\":%d,\"top\":%d,\"partial\":%s}",
           (long long)r->peak_live_bytes, (long long)r->live_bytes, (long long)r->untracked_frees,
           TRC_MEM_STACK_MIN, TRC_MEM_TOP, r->partial ? "true" : "false");
}
