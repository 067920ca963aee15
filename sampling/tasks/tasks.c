/* tasks.c — asyncio tasks read from outside: the registry of the main
 * interpreter's asyncio.tasks module (refreshed at a bounded rate), then on
 * every sample each pending C Task's state, name and the await chain of its
 * coroutine, level by level with one batched read per level. Every object is
 * type-checked (type name, cached per type address) before it is followed;
 * counts, chain length and strings are bounded; any doubt drops the task.
 * The registry is read in tasks_registry.c, the names in tasks_names.c.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_int.h"
#include "vec.h"

#define TK_REFRESH_NS 10000000LL    /* registry re-read at most every 10 ms */
#define TK_SLOT_EXTRA 128           /* bytes read past a 3.11+ coroutine's frame head */
#define TK_OBJ_READ 160             /* bytes read of an awaited object */
#define TK_IN_BUF ((size_t)1 << 62) /* tk_read_regions: a position in buf, not span */
#define TK_BATCH 512                /* iovecs per process_vm_readv */
#define TK_GAP 512                  /* bytes between two regions still read as one */
#define TK_SPAN_MAX 65536           /* longest merged read */
#define TK_CHAIN_TTL_NS 100000000LL /* a parked task's chain is re-read every 100 ms */
#define TK_TP_BASE 256              /* PyTypeObject.tp_base (3.8-3.13 release builds) */
#define TK_MAX_BASES 8              /* base classes followed to find a Task */

/* The C Task's and coroutines' offsets per 3.minor (tk_layout, tasks_int.h). */
static const tk_layout tk_layouts[] = {
    {8, 144, 72, 104, 112, 120, 16, 24, 0, 0, 72, 0, 0, 0, 0, 0, 0, 0, 0},
    {9, 184, 80, 144, 152, 160, 16, 24, 0, 0, 72, 0, 0, 0, 0, 0, 0, 0, 0},
    {10, 192, 88, 152, 160, 168, 16, 0, 108, 0, 0, 64, 80, 0, 0, 0, 0, 0, 0},
    {11, 176, 88, 128, 136, 144, 0, 0, 0, 80, 0, 0, 0, 64, 72, 0, 0, 0, 0},
    {12, 176, 88, 128, 136, 144, 0, 0, 0, 72, 0, 0, 0, 64, 72, 0, 0, 0, 0},
    {13, 144, 96, 112, 120, 128, 0, 0, 0, 72, 0, 0, 0, 64, 72, 0, 0, 0, 0},
};

bf_smp_tasks *bf_smp_tasks_new(bf_smp *h) {
  bf_smp_tasks *tk = calloc(1, sizeof *tk);
  if (!tk) return NULL;
  tk->h = h;
  tk->py = tk_py_new();
  int minor = (int)((h->lay.version_hex >> 16) & 0xff);
  if (!minor && h->version[0] == '3' && h->version[1] == '.') minor = atoi(h->version + 2);
  for (size_t i = 0; i < sizeof tk_layouts / sizeof tk_layouts[0]; i++)
    if (tk_layouts[i].minor == minor) {
      tk->lay = tk_layouts[i];
      tk->supported = h->lay.nm.minor != 0 && strcmp(h->build, "release") == 0;
    }
  if ((minor == 14 || minor == 15) && strcmp(h->build, "release") == 0) { /* the layout comes with _asyncio */
    tk->supported = tk->v314 = -1;
    tk->lay.minor = minor;
  }
  if (!tk->supported)
    snprintf(tk->status, sizeof tk->status,
             "asyncio tasks: Python %s (%s) is not supported (3.8-3.15 release builds); "
             "only threads were sampled",
             h->version, h->build);
  return tk;
}

void bf_smp_tasks_free(bf_smp_tasks *tk) {
  if (!tk) return;
  size_t it = 0;
  for (tk_name *e; (e = bf_pmap_next(&tk->names, &it));) {
    free(e->thread_name);
    free((char *)e->code->qualname);
    free(e->code);
  }
  for (size_t i = 0; i < tk->ndead; i++) {
    free(tk->dead[i].thread_name);
    free((char *)tk->dead[i].code->qualname);
    free(tk->dead[i].code);
  }
  free(tk->dead);
  bf_pmap_free(&tk->names);
  free(tk->addrs);
  free(tk->tasks);
  free(tk->out);
  free(tk->frames);
  free(tk->buf);
  free(tk->ok);
  free(tk->at);
  free(tk->pos);
  free(tk->ord);
  free(tk->span);
  free(tk->cur);
  free(tk->objs);
  free(tk->run);
  free(tk->walked);
  free(tk->spare);
  for (int i = 0; i < TK_MEMOS; i++) {
    free(tk->memo[i].in);
    free(tk->memo[i].sorted);
  }
  tk_py_free(tk->py);
  free(tk);
}

const char *bf_smp_tasks_status(const bf_smp_tasks *tk) { return tk ? tk->status : ""; }

/* The session's sentence: what is known about the loops, then what was not
 * read (kept from an earlier call when what is NULL). */
void tk_set_status(bf_smp_tasks *tk, const char *what) {
  const char *last = tk->not_read;
  if (what) snprintf(tk->not_read, sizeof tk->not_read, "%s", what);
  snprintf(tk->status, sizeof tk->status, "%s%s%s%s", *last || tk->uvloop ? "asyncio tasks: " : "",
           tk->uvloop ? "uvloop is loaded: its tasks and await chains are read; its loop runs in C, so "
                        "loop threads show no split of task code, loop overhead and I/O wait"
                      : "",
           tk->uvloop && *last ? "; " : "", last);
}

int tk_grow(void **p, size_t *cap, size_t need, size_t elem) {
  return bf_vec_grow(p, cap, need, elem, 64);
}

/* Read n regions of len bytes (addrs[i], 0 = skip): region i is at
 * tk->at[i] when tk->ok[i] (2: only its first need bytes), until the next
 * call. Objects of one kind sit side by side in the allocator's pools, so the
 * regions are sorted and merged into spans (gaps under TK_GAP bytes read
 * too): the kernel's cost is per iovec and per page, far more than per byte.
 * Spans go TK_BATCH to a process_vm_readv; a batch that comes back short is
 * read again region by region, so one bad pointer costs only its region.
 * memo: the call site (TK_M_*, or -1), whose last order is kept. */
static int cmp_addr(const void *a, const void *b) {
  uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
  return (x > y) - (x < y);
}

int tk_read_regions(bf_smp_tasks *tk, int memo, const uint64_t *addrs, size_t n, size_t len, size_t need) {
  bf_smp *h = tk->h;
  if (tk_grow((void **)&tk->buf, &tk->cap_buf, n * len + 1, 1) < 0) return -ENOMEM;
  if (tk_grow((void **)&tk->ok, &tk->cap_ok, n + 1, 1) < 0) return -ENOMEM;
  if (tk_grow((void **)&tk->pos, &tk->cap_pos, n + 1, sizeof *tk->pos) < 0) return -ENOMEM;
  if (tk_grow((void **)&tk->at, &tk->cap_at, n + 1, sizeof *tk->at) < 0) return -ENOMEM;
  if (tk_grow((void **)&tk->ord, &tk->cap_ord, 2 * n + 2, 8) < 0) return -ENOMEM;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    tk->ok[i] = 0;
    if (addrs[i] && addrs[i] + len > addrs[i]) {
      tk->ord[2 * m] = addrs[i];
      tk->ord[2 * m + 1] = i;
      m++;
    }
  }
  /* tasks are kept in address order, and what they point at (coroutines,
   * frames) was mostly allocated in the same order: often nothing to sort */
  for (size_t k = 1; k < m; k++)
    if (tk->ord[2 * k] < tk->ord[2 * k - 2]) {
      /* the same regions as this call site's last time (parked tasks): the
       * order found then, not a sort of thousands on every sample */
      tk_memo *mo = memo >= 0 && memo < TK_MEMOS ? &tk->memo[memo] : NULL;
      if (mo && mo->m == m && memcmp(mo->in, tk->ord, 16 * m) == 0) {
        memcpy(tk->ord, mo->sorted, 16 * m);
        break;
      }
      if (mo && (tk_grow((void **)&mo->in, &mo->cap_in, 2 * m, 8) < 0 ||
                 tk_grow((void **)&mo->sorted, &mo->cap_sorted, 2 * m, 8) < 0))
        mo = NULL;
      if (mo) memcpy(mo->in, tk->ord, 16 * m);
      qsort(tk->ord, m, 16, cmp_addr);
      if (mo) {
        memcpy(mo->sorted, tk->ord, 16 * m);
        mo->m = m;
      }
      break;
    }
  /* every span of this call stays in tk->span: regions are used in place
   * (tk->at), after the last batch, when the area no longer moves */
  struct iovec l[TK_BATCH], r[TK_BATCH];
  size_t first[TK_BATCH + 1], off = 0;
  for (size_t k = 0; k < m;) {
    size_t ns = 0, want = 0;
    while (k < m && ns < TK_BATCH) {
      uint64_t lo = tk->ord[2 * k], hi = lo + len;
      first[ns] = k;
      k++;
      while (k < m && tk->ord[2 * k] <= hi + TK_GAP && tk->ord[2 * k] + len - lo <= TK_SPAN_MAX) {
        if (tk->ord[2 * k] + len > hi) hi = tk->ord[2 * k] + len;
        k++;
      }
      if (tk_grow((void **)&tk->span, &tk->cap_span, off + (size_t)(hi - lo), 1) < 0) return -ENOMEM;
      r[ns] = (struct iovec){(void *)(uintptr_t)lo, (size_t)(hi - lo)};
      l[ns].iov_len = (size_t)(hi - lo);
      l[ns].iov_base = (void *)(uintptr_t)off; /* fixed up once span stops moving */
      off += (size_t)(hi - lo);
      want += (size_t)(hi - lo);
      ns++;
    }
    first[ns] = k;
    for (size_t j = 0; j < ns; j++) l[j].iov_base = tk->span + (uintptr_t)l[j].iov_base;
    h->read_calls++;
    h->read_iovs += ns;
    h->read_bytes += want;
    ssize_t got = h->readv(h->readv_ud, l, ns, r, ns);
    int whole = got == (ssize_t)want;
    for (size_t j = 0; j < ns; j++) {
      uint64_t lo = (uint64_t)(uintptr_t)r[j].iov_base;
      size_t at = (size_t)((unsigned char *)l[j].iov_base - tk->span);
      for (size_t q = first[j]; q < first[j + 1]; q++) {
        size_t idx = (size_t)tk->ord[2 * q + 1];
        if (whole) {
          tk->pos[idx] = at + (size_t)(tk->ord[2 * q] - lo);
          tk->ok[idx] = 1;
        } else { /* read again alone, into its own place; its first need bytes at least */
          tk->pos[idx] = TK_IN_BUF | (idx * len);
          tk->ok[idx] = smp_read(h, addrs[idx], tk->buf + idx * len, len) == 0        ? 1
                        : need < len && smp_read(h, addrs[idx], tk->buf + idx * len, need) == 0 ? 2
                                                                                              : 0;
        }
      }
    }
  }
  for (size_t q = 0; q < m; q++) {
    size_t idx = (size_t)tk->ord[2 * q + 1];
    size_t p = tk->pos[idx];
    tk->at[idx] = p & TK_IN_BUF ? tk->buf + (p & ~TK_IN_BUF) : tk->span + p;
  }
  return 0;
}

int tk_read_many(bf_smp_tasks *tk, const uint64_t *addrs, size_t n, size_t len,
                 const unsigned char **buf, const unsigned char **ok) {
  int rc = tk_read_regions(tk, -1, addrs, n, len, len);
  /* in place of tk->at: region i at buf + i * len (those read again alone
   * are there already) */
  for (size_t i = 0; rc == 0 && i < n; i++)
    if (tk->ok[i] && tk->at[i] != tk->buf + i * len) memcpy(tk->buf + i * len, tk->at[i], len);
  *buf = tk->buf;
  *ok = tk->ok;
  return rc;
}

/* Kind of the type at type_addr: from its tp_name, cached per address
 * (types the registry and tasks point at live as long as their modules). */
int tk_type_kind(bf_smp_tasks *tk, uint64_t type_addr) {
  for (size_t i = 0; i < tk->ntypes; i++)
    if (tk->types[i] == type_addr) return tk->kinds[i];
  bf_smp *h = tk->h;
  uint64_t np = 0;
  char nm[40] = {0};
  if (!type_addr || smp_read(h, type_addr + h->lay.tp_name, &np, 8) < 0 || !np) return TK_OTHER;
  /* the name may end near a page end: read what fits */
  if (smp_read(h, np, nm, sizeof nm - 1) < 0 && smp_read(h, np, nm, 8) < 0) return TK_OTHER;
  nm[sizeof nm - 1] = 0;
  int k = TK_OTHER;
  static const struct { const char *n; int k; } names[] = {
      {"coroutine", TK_CORO},         {"generator", TK_GEN},   {"_asyncio.Task", TK_TASK},
      {"_asyncio.FutureIter", TK_FUTITER}, {"_asyncio.Future", TK_FUT},
      {"weakref", TK_WEAKREF},        {"weakref.ReferenceType", TK_WEAKREF},
      {"set", TK_SET},                {"str", TK_STR},         {"int", TK_INT},
      {"NoneType", TK_NONE}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(nm, names[i].n) == 0) k = names[i].k;
  /* A Python subclass of the C Task keeps the Task's layout (its own slots
   * come after it): read as a Task. asyncio's pure-Python Task is a heap
   * type named "Task": told apart, since it keeps its fields in a dict. */
  uint64_t base = type_addr;
  int cached = tk->ntypes < sizeof tk->types / sizeof tk->types[0];
  for (int d = 0; k == TK_OTHER && cached && d <= TK_MAX_BASES; d++) { /* not per object when uncached */
    if (strcmp(nm, "Task") == 0) k = TK_PYTASK;
    if (d == TK_MAX_BASES || smp_read(h, base + TK_TP_BASE, &base, 8) < 0 || !base) break;
    memset(nm, 0, sizeof nm);
    if (smp_read(h, base + h->lay.tp_name, &np, 8) < 0 || !np ||
        (smp_read(h, np, nm, sizeof nm - 1) < 0 && smp_read(h, np, nm, 8) < 0))
      break;
    nm[sizeof nm - 1] = 0;
    if (strcmp(nm, "_asyncio.Task") == 0) k = TK_TASK;
  }
  if (tk->ntypes < sizeof tk->types / sizeof tk->types[0]) {
    tk->types[tk->ntypes] = type_addr;
    tk->kinds[tk->ntypes++] = (unsigned char)k;
  }
  return k;
}

bf_smp *tk_sampler(bf_smp_tasks *tk) { return tk->h; }

int tk_obj_kind(bf_smp_tasks *tk, uint64_t obj) {
  uint64_t t;
  if (!obj || smp_read(tk->h, obj + tk->h->lay.ob_type, &t, 8) < 0) return TK_OTHER;
  return tk_type_kind(tk, t);
}

/* The frame object / interpreter frame of coroutine c (copied into co[]). */
static uint64_t coro_frame_addr(const bf_smp_tasks *tk, uint64_t coro, const unsigned char *co) {
  if (tk->lay.cr_iframe) return coro + tk->lay.cr_iframe;
  return rd64(co + tk->lay.cr_frame);
}

/* A 3.11+ coroutine's frame state s: suspended at an await, executing. */
static int fs_awaiting(const tk_layout *L, int8_t s) {
  return L->fs_exec ? s >= L->fs_await_lo && s <= L->fs_await_hi : s == -1;
}
static int fs_running(const tk_layout *L, int8_t s) { return L->fs_exec ? s == L->fs_exec : s == 0; }

/* Bytes of a frame read: the walker's, and what the task reader needs. */
static size_t frame_len(const bf_smp_tasks *tk) {
  size_t n = (size_t)tk->h->lay.fr_read;
  if (n < 80) n = 80;
  if (tk->lay.f_state && n < tk->lay.f_state + 8) n = tk->lay.f_state + 8;
  return n;
}

/* walk_chains' scratch: per task, the frame read (fr[i], in tk_read_regions's
 * area) at address fa[i], and the stack slot still to read (slot[i]). */
typedef struct tk_walk {
  size_t n, fr_len, co_len, extra;
  uint64_t mask;
  uint64_t *slot, *fa;
  const unsigned char **fr;
} tk_walk;

/* One level's coroutines, then their frames: embedded (3.11+, already
 * read) or separate objects. A task whose coroutine is not suspended at an
 * await ends its chain. */
static int walk_frames(bf_smp_tasks *tk, tk_walk *w, int memo) {
  bf_smp *h = tk->h;
  const tk_layout *L = &tk->lay;
  size_t n = w->n;
  uint64_t *fa = w->fa;
  int rc;
  if ((rc = tk_read_regions(tk, memo, tk->cur, n, w->co_len + w->extra, w->co_len)) < 0) return rc;
  /* frames: embedded (3.11+, already read) or separate objects */
  for (size_t i = 0; i < n; i++) {
    fa[i] = 0;
    if (!tk->cur[i]) continue;
    const unsigned char *co = tk->at[i];
    int k = tk->ok[i] ? tk_type_kind(tk, rd64(co + h->lay.ob_type)) : TK_OTHER;
    if (k != TK_CORO && k != TK_GEN) {
      tk->cur[i] = 0;
      continue;
    }
    fa[i] = coro_frame_addr(tk, tk->cur[i], co);
    if (L->cr_iframe) {
      w->fr[i] = co + L->cr_iframe;
      if (!fs_awaiting(L, (int8_t)co[L->cr_iframe - 5])) fa[i] = 0; /* not suspended at an await */
    } else if (L->cr_running && co[L->cr_running]) {
      fa[i] = 0;
    }
    if (!fa[i]) tk->cur[i] = 0;
  }
  if (!L->cr_iframe) {
    if ((rc = tk_read_regions(tk, memo < 0 ? -1 : memo + 1, fa, n, w->fr_len, w->fr_len)) < 0) return rc;
    for (size_t i = 0; i < n; i++) {
      if (fa[i] && (!tk->ok[i] || (L->f_state && (int8_t)tk->at[i][L->f_state] != -1)))
        fa[i] = tk->cur[i] = 0;
      if (fa[i]) w->fr[i] = tk->at[i];
    }
  }
  return 0;
}

/* Where the value stack's top of frame f (at fa) lives; 0: nowhere. */
static uint64_t stack_top_slot(const tk_layout *L, const unsigned char *f, uint64_t fa) {
  uint64_t slot = 0;
  if (L->if_stacktop) {
    int32_t top = (int32_t)rd32(f + L->if_stacktop);
    if (top > 0 && top < 4096) slot = fa + L->if_localsplus + (uint64_t)(top - 1) * 8;
  } else if (L->f_stacktop) {
    uint64_t p = rd64(f + L->f_stacktop), below = 8 * (uint64_t)L->await_below;
    if (p > fa + 8 + below && p - fa < (1u << 20)) slot = p - 8 - below;
  } else {
    uint64_t base = rd64(f + L->f_valuestack);
    int32_t d = (int32_t)rd32(f + L->f_stackdepth);
    if (base && d > 0 && d < 4096) slot = base + (uint64_t)(d - 1) * 8;
  }
  return slot;
}

/* This coroutine's frame into each task's chain, then where its value
 * stack's top lives (taken at once when read with the coroutine). */
static void walk_slots(bf_smp_tasks *tk, tk_walk *w) {
  bf_smp *h = tk->h;
  uint64_t *slot = w->slot, *fa = w->fa;
  for (size_t i = 0; i < w->n; i++) {
    slot[i] = 0;
    if (!fa[i]) continue;
    tk_task *t = &tk->tasks[i];
    const unsigned char *f = w->fr[i];
    uint64_t code = rd64(f + h->lay.fr_code);
    uint64_t instr = h->lay.instr_is_lasti ? rd32(f + h->lay.fr_instr) : rd64(f + h->lay.fr_instr);
    if (h->lay.instr_is_lasti && (int32_t)instr < 0) { /* not started */
      tk->cur[i] = 0;
      continue;
    }
    if (t->nchain >= TK_MAX_CHAIN || smp_code_frame(h, code, instr, &t->chain[t->nchain]) < 0) {
      tk->cur[i] = 0;
      continue;
    }
    if (!t->nchain++) {
      t->frame = fa[i];
      t->instr = instr;
    }
    slot[i] = stack_top_slot(&tk->lay, f, fa[i]);
    if (!slot[i]) {
      tk->cur[i] = 0;
    } else if (w->extra && tk->ok[i] == 1 && slot[i] >= fa[i] &&
               slot[i] + 8 <= tk->cur[i] + w->co_len + w->extra) {
      tk->cur[i] = rd64(f + (slot[i] - fa[i])) & w->mask; /* read already, with the coroutine */
      slot[i] = 0;
    }
  }
}

/* Follow every task's await chain one level at a time: tk->cur[i] is the
 * coroutine to read for task i (0: done). */
static int walk_chains(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  const tk_layout *L = &tk->lay;
  size_t n = tk->ntasks;
  tk_walk w = {.n = n, .fr_len = frame_len(tk)};
  w.co_len = L->cr_iframe ? L->cr_iframe + w.fr_len : 32;
  if (w.co_len > TK_OBJ_READ + w.fr_len) return -EIO;
  int any = 0;
  for (size_t i = 0; i < n && !any; i++) any = tk->cur[i] != 0;
  if (!any) return 0; /* all parked where they were */
  w.slot = calloc(n ? n : 1, 8);
  w.fa = calloc(n ? n : 1, 8);
  w.fr = calloc(n ? n : 1, sizeof *w.fr); /* into tk_read_regions's area */
  int rc = 0;
  if (!w.slot || !w.fa || !w.fr) {
    rc = -ENOMEM;
    goto out;
  }
  /* 3.11+: the frame is inside the coroutine, and its value stack's top
   * often within a few words after what is read of it: read those too */
  w.extra = L->cr_iframe ? TK_SLOT_EXTRA : 0;
  /* 3.14: the stack holds tagged references */
  w.mask = h->lay.executable_tagged ? ~(uint64_t)7 : ~(uint64_t)0;
  for (int depth = 0; depth < TK_MAX_CHAIN; depth++) {
    int any = 0;
    for (size_t i = 0; i < n; i++) any |= tk->cur[i] != 0;
    if (!any) break;
    int memo = depth < TK_WALK_MEMOS ? TK_M_WALK + 3 * depth : -1;
    if ((rc = walk_frames(tk, &w, memo)) < 0) goto out;
    walk_slots(tk, &w);
    if ((rc = tk_read_regions(tk, memo < 0 ? -1 : memo + 2, w.slot, n, 8, 8)) < 0) goto out;
    for (size_t i = 0; i < n; i++)
      if (w.slot[i]) tk->cur[i] = tk->ok[i] ? rd64(tk->at[i]) & w.mask : 0;
  }
out:
  free(w.slot);
  free(w.fa);
  free(w.fr);
  return rc;
}

/* The running task's thread: the one whose stack holds its coroutine's code
 * (outermost such frame). */
static void place_running(tk_task *t, const bf_smp_thread *th, size_t n) {
  const bf_smp_code *code = t->nchain ? t->chain[0].code : NULL;
  t->run_tid = 0;
  for (size_t j = 0; code && j < n && !t->run_tid; j++)
    for (size_t k = th[j].nframes; k-- > 0;)
      if (th[j].frames[k].code == code) {
        t->run_tid = (int64_t)j + 1;
        t->run_from = k;
        break;
      }
}

/* Task t is live this sample with fields f; what it had (its chain) is
 * dropped when its coroutine or future changed. */
static void task_take(tk_task *t, tk_py_task f) {
  if (f.coro != t->coro || f.waiter != t->waiter) t->cached = 0;
  if (!t->cached) t->nchain = 0;
  t->coro = f.coro;
  t->waiter = f.waiter;
  t->name_obj = f.name_obj;
  t->run_tid = 0;
  t->live = 1;
}

/* Each registered task's object, read: which are pending Tasks (live) and
 * what they point at; what a task had (its chain) is dropped when its
 * coroutine or future changed. */
static void tasks_read(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  const tk_layout *L = &tk->lay;
  size_t nt = tk->ntasks;
  int foreign = 0;
  size_t npy = 0, pyskip = 0;
  uint64_t *pya = NULL;
  size_t *pyi = NULL;
  for (size_t i = 0; i < nt; i++) {
    const unsigned char *b = tk->at[i];
    tk_task *t = &tk->tasks[i];
    t->live = 0;
    /* a pure-Python Task is smaller than a C one: its read may end past
     * the end of its memory */
    int k = tk->ok[i] ? tk_type_kind(tk, rd64(b + h->lay.ob_type)) : tk_obj_kind(tk, tk->addrs[i]);
    if (k == TK_PYTASK) { /* read together after this loop (tasks_py.c) */
      if (!pya && (!(pya = malloc(nt * 8)) || !(pyi = malloc(nt * sizeof *pyi)))) {
        free(pya);
        return;
      }
      pyi[npy] = i;
      pya[npy++] = tk->addrs[i];
      continue;
    } /* else a dead weak reference, or a task freed since the registry was read */
    if (k != TK_TASK || !L->task_size || !tk->ok[i] || rd32(b + L->fut_state) != 0) { /* or done, cancelled */
      if (tk->ok[i]) t->cached = 0; /* else a torn read: what it had may still hold */
      continue;
    }
    task_take(t, (tk_py_task){rd64(b + L->task_coro), rd64(b + L->task_fut_waiter), rd64(b + L->task_name)});
  }
  if (npy) {
    tk_py_task *pt = calloc(npy, sizeof *pt);
    int *prc = calloc(npy, sizeof *prc);
    int skipped = pt && prc ? tk_py_read_many(tk, tk->py, pya, npy, pt, prc) : -ENOMEM;
    pyskip = skipped > 0 ? (size_t)skipped : 0;
    for (size_t j = 0; skipped >= 0 && j < npy; j++) {
      foreign += prc[j] == -ENOTSUP;
      if (prc[j] <= 0)
        tk->tasks[pyi[j]].cached = 0;
      else
        task_take(&tk->tasks[pyi[j]], pt[j]);
    }
    free(pt);
    free(prc);
  }
  free(pya);
  free(pyi);
  if ((foreign || pyskip) && !tk->warned_custom) {
    tk->warned_custom = 1;
    tk_set_status(tk, foreign ? "some tasks are asyncio's pure-Python Task, whose attributes this Python's "
                             "layout cannot read: those are not shown"
                           : "some pure-Python Tasks (asyncio.tasks._PyTask) have no shared attribute "
                             "layout and were past the per-sample bound: those were not shown");
  }
}

/* Running, ready or waiting: from each task coroutine's own state (3.10:
 * its frame's); a running task's coroutine frame, placed on the thread
 * whose stack holds it. tk->cur[i]: the coroutine to walk (0: none). */
static int tasks_states(bf_smp_tasks *tk, const bf_smp_thread *th, size_t n) {
  bf_smp *h = tk->h;
  const tk_layout *L = &tk->lay;
  size_t nt = tk->ntasks;
  /* running or not: from the task coroutine's own state. A task parked on a
   * future is not running: only the others' coroutines are read for it */
  for (size_t i = 0; i < nt; i++) {
    const tk_task *t = &tk->tasks[i];
    tk->cur[i] = t->live && !t->waiter ? t->coro : 0;
  }
  size_t co_len = L->cr_iframe ? (size_t)L->cr_iframe + 8 : 32;
  if (tk_read_regions(tk, TK_M_STATE, tk->cur, nt, co_len, co_len) < 0) return -EIO;
  uint64_t *run = tk->run;
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    run[i] = 0;
    if (!t->live) continue;
    const unsigned char *co = tk->at[i];
    int running = tk->cur[i] && tk->ok[i] && (L->cr_iframe    ? fs_running(L, (int8_t)co[L->cr_iframe - 5])
                                : L->cr_running ? co[L->cr_running] != 0
                                                : 1); /* 3.10: decided on the frame below */
    t->state = running ? BF_SMP_TASK_RUNNING : t->waiter ? BF_SMP_TASK_WAITING : BF_SMP_TASK_READY;
    tk->cur[i] = t->coro;
    if (running) { /* its frames are on a thread's stack: only its code is wanted */
      run[i] = L->cr_iframe ? t->coro + L->cr_iframe : rd64(co + L->cr_frame);
      tk->cur[i] = 0;
      t->cached = 0;
      t->nchain = 0;
    }
  }
  size_t fr_len = frame_len(tk);
  if (tk_read_regions(tk, TK_M_RUN, run, nt, fr_len, fr_len) == 0)
    for (size_t i = 0; i < nt; i++) {
      tk_task *t = &tk->tasks[i];
      if (!run[i] || !tk->ok[i]) continue;
      const unsigned char *f = tk->at[i];
      if (L->f_state && (int8_t)f[L->f_state] != 0) { /* 3.10: not executing */
        t->state = t->waiter ? BF_SMP_TASK_WAITING : BF_SMP_TASK_READY;
        tk->cur[i] = t->coro;
        continue;
      }
      uint64_t instr = h->lay.instr_is_lasti ? rd32(f + h->lay.fr_instr) : rd64(f + h->lay.fr_instr);
      if (smp_code_frame(h, rd64(f + h->lay.fr_code), instr, &t->chain[0]) == 0) t->nchain = 1;
      place_running(t, th, n);
    }
  return 0;
}

/* Every live task's name entry: kept while its name object and text are
 * unchanged, else looked up (a task without one is not walked). */
static void tasks_names(bf_smp_tasks *tk) {
  size_t nt = tk->ntasks;
  tk->new_names = 0;
  tk_names_retire(tk);
  tk_names_prefetch(tk);
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    if (!t->live) continue;
    if (!t->name || t->name_seen != t->name_obj || t->name_gen != tk->name_gen) {
      t->name = tk_name_get(tk, t->name_obj);
      t->name_seen = t->name_obj;
      t->name_gen = tk->name_gen;
      if (t->name) {
        t->name_code = t->name->code;
        t->name_thread = t->name->thread_name;
        t->name_serial = t->name->serial;
      }
    }
    if (!t->name) tk->cur[i] = 0; /* not shown this sample: not walked */
  }
}

/* The await chains: a parked task's remembered chain while its coroutine is
 * still at its instruction (and younger than TK_CHAIN_TTL_NS), else walked. */
static int tasks_chains(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  size_t nt = tk->ntasks;
  /* remembered chains to check: the task coroutine still at its instruction */
  uint64_t *walked = tk->walked;
  for (size_t i = 0; i < nt; i++) {
    const tk_task *t = &tk->tasks[i];
    walked[i] = tk->cur[i] && t->waiter && t->cached && h->now_ns - t->walked_ns < TK_CHAIN_TTL_NS ? t->frame : 0;
  }
  size_t fl = frame_len(tk);
  if (tk_read_regions(tk, TK_M_FRAME, walked, nt, fl, fl) == 0)
    for (size_t i = 0; i < nt; i++) {
      if (!walked[i] || !tk->ok[i]) continue;
      const unsigned char *f = tk->at[i];
      uint64_t instr = h->lay.instr_is_lasti ? rd32(f + h->lay.fr_instr) : rd64(f + h->lay.fr_instr);
      if (instr == tk->tasks[i].instr) tk->cur[i] = 0;
    }
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    if (!tk->cur[i]) continue;
    t->nchain = 0;
    t->frame = t->instr = 0;
    t->cached = 0;
  }
  memcpy(walked, tk->cur, nt * 8);
  if (walk_chains(tk) < 0) return -EIO;
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    if (!walked[i] || !t->waiter || !t->nchain || !t->frame) continue;
    t->cached = 1;
    t->walked_ns = h->now_ns;
  }
  return 0;
}

/* OUT *out, *nout: the threads th[0..n), then one synthetic thread per named
 * live task (innermost frame first, the task name's frame last). */
static void tasks_emit(bf_smp_tasks *tk, const bf_smp_thread *th, size_t n, const bf_smp_thread **out,
                       size_t *nout) {
  size_t nt = tk->ntasks;
  /* output: the threads, then one synthetic thread per named task */
  if (tk_grow((void **)&tk->out, &tk->cap_out, n + nt, sizeof *tk->out) < 0) return;
  memcpy(tk->out, th, n * sizeof *th);
  tk->nframes = 0;
  size_t no = n;
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    if (!t->live || !t->name) continue;
    size_t need = 1 + (size_t)t->nchain + (t->run_tid ? th[t->run_tid - 1].nframes : 0);
    if (tk_grow((void **)&tk->frames, &tk->cap_frames, tk->nframes + need, sizeof *tk->frames) < 0)
      return;
    bf_smp_thread *o = &tk->out[no++];
    memset(o, 0, sizeof *o);
    size_t first = tk->nframes;
    uint32_t flags = (uint32_t)t->state;
    if (t->run_tid) { /* innermost first: the step's frames down from the coroutine */
      const bf_smp_thread *rt = &th[t->run_tid - 1];
      memcpy(tk->frames + tk->nframes, rt->frames, (t->run_from + 1) * sizeof *tk->frames);
      tk->nframes += t->run_from + 1;
      flags |= rt->flags & (BF_SMP_GIL | BF_SMP_ON_CPU | BF_SMP_IDLE | BF_SMP_GC);
    } else {
      for (int k = t->nchain; k-- > 0;) tk->frames[tk->nframes++] = t->chain[k];
      /* running but on no stack: it began after the threads were read. Still
       * running (only its coroutine's frame is known): the tasks that stopped
       * in that window count as waiting, so the two errors cancel out */
      if (t->state != BF_SMP_TASK_RUNNING) flags |= BF_SMP_IDLE;
    }
    tk->frames[tk->nframes++] = (bf_smp_frame){t->name_code, 0, 0};
    /* a stable id per task: negative, never a kernel tid; a new task whose
     * objects reuse a finished one's addresses differs in its name entry */
    uint64_t id = ((t->addr >> 4) ^ ((t->coro >> 4) * 0xC2B2AE3D27D4EB4Full) ^
                   (t->name_serial * 0x9E3779B97F4A7C15ull)) & 0x3fffffffffffffffull;
    o->native_tid = -(int64_t)id - 1;
    o->thread_id = t->addr;
    o->name = o->py_name = t->name_thread;
    o->flags = flags;
    o->cpu_ns = -1;
    o->nframes = tk->nframes - first;
    o->frames = (const bf_smp_frame *)(uintptr_t)first;
  }
  for (size_t i = n; i < no; i++) tk->out[i].frames = tk->frames + (uintptr_t)tk->out[i].frames;
  *out = tk->out;
  *nout = no;
}

void bf_smp_tasks_sample(bf_smp_tasks *tk, const bf_smp_thread *th, size_t n,
                         const bf_smp_thread **out, size_t *nout) {
  bf_smp *h = tk->h;
  const tk_layout *L = &tk->lay;
  *out = th;
  *nout = n;
  if (!tk->supported) return;
  /* a big registry costs a read per task: re-read it ten times less often */
  int64_t every = tk->naddrs > 1000 ? 10 * TK_REFRESH_NS : TK_REFRESH_NS;
  if (!tk->reg_ns || h->now_ns - tk->reg_ns >= every) tk_refresh_registry(tk);
  if (!tk->naddrs || tk->ntasks != tk->naddrs) return;
  size_t nt = tk->ntasks;
  if (tk_grow((void **)&tk->cur, &tk->cap_cur, nt + 1, 8) < 0 ||
      tk_grow((void **)&tk->run, &tk->cap_run, nt + 1, 8) < 0 ||
      tk_grow((void **)&tk->walked, &tk->cap_walked, nt + 1, 8) < 0)
    return;
  /* the tasks themselves, every sample */
  /* 3.14+ before _asyncio is found: pure-Python Tasks only, typed by their header */
  size_t tlen = L->task_size ? L->task_size : 16;
  if (tk_read_regions(tk, TK_M_TASK, tk->addrs, nt, tlen, tlen) < 0) return;
  tasks_read(tk);
  if (tasks_states(tk, th, n) < 0) return;
  /* names after the states: reading new names takes time, and a state read
   * long after the threads' stacks disagrees with them more often */
  tasks_names(tk);
  if (tasks_chains(tk) < 0) return;
  tasks_emit(tk, th, n, out, nout);
}
