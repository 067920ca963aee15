/* tasks.c — asyncio tasks read from outside: the registry of the main
 * interpreter's asyncio.tasks module (refreshed at a bounded rate), then on
 * every sample each pending C Task's state, name and the await chain of its
 * coroutine, level by level with one batched read per level. Every object is
 * type-checked (type name, cached per type address) before it is followed;
 * counts, chain length and strings are bounded; any doubt drops the task.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_int.h"
#include "vec.h"

#define TK_MAX_TASKS 20000          /* tasks read per sample */
#define TK_MAX_CHAIN 16             /* coroutines followed per task */
#define TK_MAX_SET (1u << 16)       /* slots of a registry set */
#define TK_REFRESH_NS 10000000LL    /* registry re-read at most every 10 ms */
#define TK_REFIND_NS 2000000000LL   /* module looked up again every 2 s */
#define TK_RETRY_NS 100000000LL     /* and every 100 ms while not found */
#define TK_MAX_NAMES 65536          /* distinct task names kept */
#define TK_SLOT_EXTRA 128           /* bytes read past a 3.11+ coroutine's frame head */
#define TK_OBJ_READ 160             /* bytes read of an awaited object */
#define TK_IN_BUF ((size_t)1 << 62) /* read_many: a position in buf, not span */
#define TK_BATCH 512                /* iovecs per process_vm_readv */
#define TK_GAP 512                  /* bytes between two regions still read as one */
#define TK_SPAN_MAX 65536           /* longest merged read */
#define TK_NEW_NAMES 16             /* names read one by one per sample */
#define TK_NAME_BATCH 4096          /* names read in one batch per sample */
#define TK_CHAIN_TTL_NS 100000000LL /* a parked task's chain is re-read every 100 ms */
#define TK_DEAD_NS 60000000000LL    /* a retired name is freed a minute later */
#define TK_TP_BASE 256              /* PyTypeObject.tp_base (3.8-3.13 release builds) */
#define TK_MAX_BASES 8              /* base classes followed to find a Task */

/* Offsets of the C _asyncio Task and of coroutines, per 3.minor. Measured in
 * each interpreter by tests/tools/probe_asyncio_offsets.py (known pointers
 * found in the objects' own memory) and matching Modules/_asynciomodule.c
 * (FutureObj_HEAD / TaskObj) and Include/genobject.h / frameobject.h. */
typedef struct tk_layout {
  int minor;
  uint32_t task_size, fut_state, task_fut_waiter, task_coro, task_name;
  uint32_t cr_frame;     /* 3.8-3.10: PyFrameObject *; 3.11+: 0 */
  uint32_t cr_running;   /* 3.8-3.9: char gi_running */
  uint32_t f_state;      /* 3.10: int8 f_state of the frame (-1 suspended, 0 executing) */
  uint32_t cr_iframe;    /* 3.11+: embedded _PyInterpreterFrame; frame_state at -5 */
  uint32_t f_stacktop;   /* 3.8-3.9: PyObject ** (top of the value stack) */
  uint32_t f_valuestack, f_stackdepth; /* 3.10 */
  uint32_t if_stacktop, if_localsplus; /* 3.11+ (int stacktop, localsplus[]) */
} tk_layout;

static const tk_layout tk_layouts[] = {
    {8, 144, 72, 104, 112, 120, 16, 24, 0, 0, 72, 0, 0, 0, 0},
    {9, 184, 80, 144, 152, 160, 16, 24, 0, 0, 72, 0, 0, 0, 0},
    {10, 192, 88, 152, 160, 168, 16, 0, 108, 0, 0, 64, 80, 0, 0},
    {11, 176, 88, 128, 136, 144, 0, 0, 0, 80, 0, 0, 0, 64, 72},
    {12, 176, 88, 128, 136, 144, 0, 0, 0, 72, 0, 0, 0, 64, 72},
    {13, 144, 96, 112, 120, 128, 0, 0, 0, 72, 0, 0, 0, 64, 72},
};

/* A name object's text. Its address is reused once it is freed, by the name
 * of a new task often at a finished one's address with its coroutine at the
 * finished one's too: names are read on every sample (names_prefetch), and
 * when the text at an address changed, the slot gets a new entry (a new
 * serial, so a new task id); the old one is freed TK_DEAD_NS later. */
typedef struct tk_name {
  uint64_t obj;       /* the name object (0: free slot) */
  uint64_t serial;    /* unique per entry: part of the task's id */
  int64_t retired_ns; /* in tk->dead: when it left its slot */
  char *thread_name;  /* "task:NAME" */
  bf_smp_code *code;  /* root frame: (<task>, NAME, 0); stable address */
} tk_name;

/* One registry entry (tk->tasks[i] is tk->addrs[i]), kept from sample to
 * sample: what was read of it last time is what this sample checks against.
 *
 * The await chain of a task parked on a future cannot change while the task
 * stays parked on that future (its step clears the waiter before it resumes
 * the coroutine). A new future is often born at a freed one's address, so a
 * remembered chain is used only when the task's own coroutine is also still
 * suspended at the same instruction (one read instead of two per level),
 * and re-read anyway every TK_CHAIN_TTL_NS (a deeper await may have moved
 * while the outer one, and the future's address, stayed). */
typedef struct tk_task {
  uint64_t addr, coro, waiter, name_obj;
  int live;           /* a pending C Task this sample */
  int state;          /* BF_SMP_TASK_* */
  int64_t run_tid;    /* running: its thread's index + 1 in th */
  size_t run_from;    /* running: frames th[run_tid-1].frames[0..run_from] */
  const tk_name *name;
  uint64_t name_seen, name_gen, name_fp; /* name resolved from object name_seen while
                                          * tk->name_gen was name_gen; its text's hash */
  const bf_smp_code *name_code; /* name's, copied: the names table is large */
  const char *name_thread;
  uint64_t name_serial;
  int cached;         /* chain[] is the remembered chain of (coro, waiter) */
  int64_t walked_ns;  /* when it was walked */
  uint64_t frame, instr; /* the task coroutine's frame and its instruction, when read */
  int nchain;
  bf_smp_frame chain[TK_MAX_CHAIN]; /* awaiting coroutines, outermost first */
} tk_task;

/* read_many's call sites whose regions repeat from sample to sample */
#define TK_WALK_MEMOS 4 /* chain levels whose reads keep their order */
enum { TK_M_REG, TK_M_TASK, TK_M_STATE, TK_M_RUN, TK_M_NAME, TK_M_FRAME, TK_M_SORT, TK_M_WALK,
       TK_MEMOS = TK_M_WALK + 3 * TK_WALK_MEMOS };

/* A call site's last regions, as (address, index) pairs before and after
 * sorting. */
typedef struct tk_memo {
  uint64_t *in, *sorted;
  size_t m, cap_in, cap_sorted;
} tk_memo;

struct bf_smp_tasks {
  bf_smp *h;
  tk_layout lay;
  int supported;
  char status[512];
  char not_read[200]; /* what the status says was not read */
  uint64_t types[128];
  unsigned char kinds[128];
  size_t ntypes;
  uint64_t mod_dict, reg_sets[2]; /* registry sets (WeakSet.data / eager set) */
  int reg_weak[2];
  int64_t found_ns, reg_ns;
  uint64_t *addrs;
  size_t naddrs, cap_addrs;
  tk_task *tasks;
  size_t ntasks, cap_tasks;
  tk_name *names;     /* open addressing, TK_MAX_NAMES slots */
  size_t nnames;
  uint64_t serials;
  tk_name *dead;      /* entries replaced in their slot, oldest first, kept TK_DEAD_NS */
  size_t ndead, cap_dead;
  bf_smp_thread *out;
  size_t cap_out;
  bf_smp_frame *frames;
  size_t nframes, cap_frames;
  unsigned char *buf, *ok; /* read_many: regions read again alone; which were read */
  size_t cap_buf, cap_ok;
  const unsigned char **at; /* read_many: where region i is (valid until the next call) */
  size_t *pos, cap_at, cap_pos;
  uint64_t *ord;      /* read_many: (address, index) pairs, sorted */
  size_t cap_ord;
  unsigned char *span; /* read_many: merged spans as read */
  size_t cap_span;
  uint64_t *cur; /* per level: object address per task (0: chain ended) */
  size_t cap_cur;
  uint64_t *objs, *run, *walked; /* per task, scratch of one sample */
  size_t cap_objs, cap_run, cap_walked;
  tk_task *spare;     /* the registry's entries carried over at a refresh */
  size_t cap_spare;
  uint64_t name_gen;  /* bumped when a name entry leaves its slot */
  tk_memo memo[TK_MEMOS];
  int warned_custom;
  int uvloop; /* the uvloop module is loaded */
  int new_names; /* read this sample */
  tk_py *py;       /* pure-Python Tasks' key cache (tasks_py.c) */
  int v314;        /* 3.14+: tasks from _asyncio's debug offsets (tasks_314.c), 1 once found */
  tk314 t314;
};

static void set_status(bf_smp_tasks *tk, const char *what);

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
  if (minor == 14 && strcmp(h->build, "release") == 0) { /* its layout comes with _asyncio */
    tk->supported = tk->v314 = -1;
    set_status(tk, "Python 3.14 tasks are read through _asyncio's debug offsets: not verified");
  }
  if (!tk->supported)
    snprintf(tk->status, sizeof tk->status,
             "asyncio tasks: Python %s (%s) is not supported (3.8-3.13 release builds); "
             "only threads were sampled",
             h->version, h->build);
  return tk;
}

void bf_smp_tasks_free(bf_smp_tasks *tk) {
  if (!tk) return;
  if (tk->names)
    for (size_t i = 0; i < TK_MAX_NAMES; i++) {
      free(tk->names[i].thread_name);
      if (tk->names[i].code) free((char *)tk->names[i].code->qualname);
      free(tk->names[i].code);
    }
  for (size_t i = 0; i < tk->ndead; i++) {
    free(tk->dead[i].thread_name);
    free((char *)tk->dead[i].code->qualname);
    free(tk->dead[i].code);
  }
  free(tk->dead);
  free(tk->names);
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
static void set_status(bf_smp_tasks *tk, const char *what) {
  const char *last = tk->not_read;
  if (what) snprintf(tk->not_read, sizeof tk->not_read, "%s", what);
  snprintf(tk->status, sizeof tk->status, "%s%s%s%s", *last || tk->uvloop ? "asyncio tasks: " : "",
           tk->uvloop ? "uvloop is loaded: its tasks and await chains are read; its loop runs in C, so "
                        "loop threads show no split of task code, loop overhead and I/O wait"
                      : "",
           tk->uvloop && *last ? "; " : "", last);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
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

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int read_many(bf_smp_tasks *tk, int memo, const uint64_t *addrs, size_t n, size_t len, size_t need) {
  bf_smp *h = tk->h;
  if (grow((void **)&tk->buf, &tk->cap_buf, n * len + 1, 1) < 0) return -ENOMEM;
  if (grow((void **)&tk->ok, &tk->cap_ok, n + 1, 1) < 0) return -ENOMEM;
  if (grow((void **)&tk->pos, &tk->cap_pos, n + 1, sizeof *tk->pos) < 0) return -ENOMEM;
  if (grow((void **)&tk->at, &tk->cap_at, n + 1, sizeof *tk->at) < 0) return -ENOMEM;
  if (grow((void **)&tk->ord, &tk->cap_ord, 2 * n + 2, 8) < 0) return -ENOMEM;
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
      if (mo && (grow((void **)&mo->in, &mo->cap_in, 2 * m, 8) < 0 ||
                 grow((void **)&mo->sorted, &mo->cap_sorted, 2 * m, 8) < 0))
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
      if (grow((void **)&tk->span, &tk->cap_span, off + (size_t)(hi - lo), 1) < 0) return -ENOMEM;
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
  int rc = read_many(tk, -1, addrs, n, len, len);
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
static int type_kind(bf_smp_tasks *tk, uint64_t type_addr) {
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
  return type_kind(tk, t);
}

/* Append the items of a set (weak: each a weakref whose referent is taken)
 * to tk->addrs. */
static int set_items(bf_smp_tasks *tk, uint64_t set, int weak) {
  bf_smp *h = tk->h;
  unsigned char hd[48];
  if (smp_read(h, set, hd, sizeof hd) < 0) return -EIO;
  if (type_kind(tk, rd64(hd + 8)) != TK_SET) return -EIO;
  uint64_t used = rd64(hd + 24), mask = rd64(hd + 32), table = rd64(hd + 40);
  if (mask + 1 > TK_MAX_SET || ((mask + 1) & mask) || used > mask + 1 || !table) return -EIO;
  size_t slots = (size_t)mask + 1;
  unsigned char *tb = malloc(slots * 16);
  if (!tb) return -ENOMEM;
  int rc = smp_read(h, table, tb, slots * 16);
  if (rc < 0) {
    free(tb);
    return rc;
  }
  size_t first = tk->naddrs;
  for (size_t i = 0; i < slots && tk->naddrs < TK_MAX_TASKS; i++) {
    uint64_t key = rd64(tb + i * 16);
    if (!key) continue;
    if (grow((void **)&tk->addrs, &tk->cap_addrs, tk->naddrs + 1, 8) < 0) {
      free(tb);
      return -ENOMEM;
    }
    tk->addrs[tk->naddrs++] = key;
  }
  free(tb);
  if (!weak) return 0;
  /* weakrefs: {ob_refcnt, ob_type, wr_object}; dummies fail the type check */
  size_t n = tk->naddrs - first;
  if ((rc = read_many(tk, TK_M_REG, tk->addrs + first, n, 24, 24)) < 0) return rc;
  size_t o = first;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *w = tk->at[i];
    if (!tk->ok[i] || type_kind(tk, rd64(w + 8)) != TK_WEAKREF) continue;
    tk->addrs[o++] = rd64(w + 16);
  }
  tk->naddrs = o;
  return 0;
}

/* Find asyncio.tasks' registry sets in the main interpreter. */
static void find_registry(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  uint64_t interp = 0, modules = 0, mod = 0, md = 0, v = 0;
  tk->mod_dict = tk->reg_sets[0] = tk->reg_sets[1] = 0;
  tk->found_ns = h->now_ns;
  if (smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8) < 0 || !interp) return;
  if (smp_read(h, interp + h->lay.nm.is_modules, &modules, 8) < 0 || !modules) return;
  if (smp_pn_dict_get(h, modules, "asyncio.tasks", &mod) < 0) return;
  if (smp_read(h, mod + h->lay.nm.md_dict, &md, 8) < 0 || !md) return;
  const char *ws = tk->lay.minor <= 11 ? "_all_tasks" : "_scheduled_tasks";
  if (smp_pn_dict_get(h, md, ws, &v) == 0 && smp_pn_attr_get(h, v, "data", &tk->reg_sets[0]) == 0)
    tk->reg_weak[0] = 1;
  if (tk->lay.minor >= 12 && smp_pn_dict_get(h, md, "_eager_tasks", &v) == 0) {
    tk->reg_sets[1] = v;
    tk->reg_weak[1] = 0;
  }
  if (!tk->uvloop && smp_pn_dict_get(h, modules, "uvloop", &v) == 0) {
    tk->uvloop = 1;
    set_status(tk, NULL);
  }
  /* asyncio.tasks may still be importing: without its registry look again */
  tk->mod_dict = tk->reg_sets[0] ? md : 0;
}

/* Sort tk->addrs: the set's table order rarely changes between refreshes,
 * so the last order found is reused when the list is the same. */
static void sort_addrs(bf_smp_tasks *tk) {
  size_t n = tk->naddrs;
  tk_memo *mo = &tk->memo[TK_M_SORT];
  if (n < 2) return;
  if (mo->m == n && memcmp(mo->in, tk->addrs, 8 * n) == 0) {
    memcpy(tk->addrs, mo->sorted, 8 * n);
    return;
  }
  int keep = grow((void **)&mo->in, &mo->cap_in, n, 8) == 0 && grow((void **)&mo->sorted, &mo->cap_sorted, n, 8) == 0;
  if (keep) memcpy(mo->in, tk->addrs, 8 * n);
  qsort(tk->addrs, n, 8, cmp_u64);
  if (keep) {
    memcpy(mo->sorted, tk->addrs, 8 * n);
    mo->m = n;
  }
}

/* Align tk->tasks with the registry just read: the entries of tasks still
 * in it are carried over (both lists are in address order), new ones start
 * empty. */
static void remap_tasks(bf_smp_tasks *tk) {
  size_t n = tk->naddrs, old = tk->ntasks, j = 0;
  if (n == old) {
    size_t i = 0;
    while (i < n && tk->tasks[i].addr == tk->addrs[i]) i++;
    if (i == n) return;
  }
  if (grow((void **)&tk->spare, &tk->cap_spare, n + 1, sizeof *tk->spare) < 0) {
    tk->ntasks = 0;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    tk_task *d = &tk->spare[i];
    while (j < old && tk->tasks[j].addr < tk->addrs[i]) j++;
    if (j < old && tk->tasks[j].addr == tk->addrs[i]) {
      const tk_task *o = &tk->tasks[j++];
      memcpy(d, o, offsetof(tk_task, chain) + (size_t)o->nchain * sizeof o->chain[0]);
    } else {
      memset(d, 0, offsetof(tk_task, chain));
      d->addr = tk->addrs[i];
    }
  }
  tk_task *t = tk->tasks;
  size_t c = tk->cap_tasks;
  tk->tasks = tk->spare;
  tk->cap_tasks = tk->cap_spare;
  tk->spare = t;
  tk->cap_spare = c;
  tk->ntasks = n;
}

void tk_use_314(bf_smp_tasks *tk, const tk314 *o) {
  bf_smp *h = tk->h;
  tk->t314 = *o;
  tk->lay = (tk_layout){14, (uint32_t)o->task_size, (uint32_t)o->task_fut_state, (uint32_t)o->task_fut_waiter,
                        (uint32_t)o->task_coro, (uint32_t)o->task_name, 0, 0, 0, (uint32_t)o->gen_iframe,
                        (uint32_t)o->fr_stackpointer, 0, 0, 0, 0};
  tk->v314 = 1;
  /* 3.14 has no vendored attribute layout, but an unnamed Task's name is
   * an int: its layout from the target's offsets */
  if (!h->lay.nm.long_digit) {
    h->lay.nm.long_size = o->long_tag;
    h->lay.nm.long_digit = o->long_digit;
    h->lay.nm.long_tagged = 1;
  }
}

/* 3.14: the Task layout from _asyncio's debug offsets once it is loaded,
 * then the tasks linked in the thread states (tasks_314.c). */
static void refresh_314(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  tk->naddrs = 0;
  if (tk->v314 < 0 && (!tk->found_ns || h->now_ns - tk->found_ns > TK_RETRY_NS)) {
    const char *msg;
    tk->found_ns = h->now_ns;
    tk314 o;
    int rc = tk314_find(h, &o, &msg);
    if (rc == 0) {
      tk_use_314(tk, &o);
    } else if (rc != -ENOENT) {
      char m[200];
      snprintf(m, sizeof m, "Python 3.14 tasks not read: %s", msg);
      set_status(tk, m);
      tk->v314 = 0;
      tk->supported = 0;
    }
  }
  uint64_t interp = 0;
  if (tk->v314 != 1 || smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8) < 0) return;
  if (grow((void **)&tk->addrs, &tk->cap_addrs, TK_MAX_TASKS, 8) < 0) return;
  tk314_tasks(h, &tk->t314, interp, tk->addrs, TK_MAX_TASKS, &tk->naddrs);
  sort_addrs(tk);
}

static void refresh_registry(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  tk->reg_ns = h->now_ns;
  if (tk->v314) {
    refresh_314(tk);
    remap_tasks(tk);
    return;
  }
  int64_t since = h->now_ns - tk->found_ns;
  if ((!tk->mod_dict && (!tk->found_ns || since > TK_RETRY_NS)) || since > TK_REFIND_NS)
    find_registry(tk);
  tk->naddrs = 0;
  int bad = 0;
  for (int i = 0; i < 2; i++)
    if (tk->reg_sets[i] && set_items(tk, tk->reg_sets[i], tk->reg_weak[i]) < 0) bad = 1;
  if (bad) tk->mod_dict = 0; /* look the module up again next time */
  /* address order: batched reads then need no sorting (see read_many) */
  sort_addrs(tk);
  remap_tasks(tk);
}

/* The cached name of obj, or NULL with *free_slot (when not NULL) set to
 * where it goes. */
static const tk_name *name_slot(const bf_smp_tasks *tk, uint64_t obj, size_t *free_slot) {
  size_t i = (size_t)((obj >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (TK_MAX_NAMES - 1);
  for (size_t p = 0; p < TK_MAX_NAMES; p++, i = (i + 1) & (TK_MAX_NAMES - 1)) {
    if (tk->names[i].obj == obj) return &tk->names[i];
    if (!tk->names[i].obj) break;
  }
  if (free_slot) *free_slot = i;
  return NULL;
}

/* Keep name s (owned from now on) of obj in slot i; an entry already there
 * (a freed name object's, whose address obj reuses) is retired. */
static const tk_name *name_put(bf_smp_tasks *tk, size_t i, uint64_t obj, char *s) {
  char *tn = malloc(strlen(s) + 6);
  bf_smp_code *code = malloc(sizeof *code);
  tk_name *e = &tk->names[i];
  if (!tn || !code || (e->obj && grow((void **)&tk->dead, &tk->cap_dead, tk->ndead + 1, sizeof *tk->dead) < 0)) {
    free(s);
    free(tn);
    free(code);
    return NULL;
  }
  if (e->obj) { /* retired: a sample held by the recorder may still point at it */
    tk->name_gen++;
    e->retired_ns = tk->h->now_ns;
    tk->dead[tk->ndead++] = *e;
    tk->nnames--;
  }
  sprintf(tn, "task:%s", s);
  *code = (bf_smp_code){BF_SMP_TASK_FILE, s, 0, 0, NULL};
  e->obj = obj;
  e->serial = ++tk->serials;
  e->thread_name = tn;
  e->code = code;
  tk->nnames++;
  return e;
}

static const tk_name *name_get(bf_smp_tasks *tk, uint64_t obj) {
  /* no name object: a Task torn down while still listed (its name cleared
   * before its memory is freed). Never looked up: 0 marks the table's empty
   * slots, whose code is NULL (that was a recorder crash) */
  if (!obj) return NULL;
  if (!tk->names && !(tk->names = calloc(TK_MAX_NAMES, sizeof *tk->names))) return NULL;
  size_t i;
  const tk_name *hit = name_slot(tk, obj, &i);
  if (hit) return hit;
  if (tk->nnames >= TK_MAX_NAMES / 2) return NULL; /* full: unnamed tasks are left out */
  /* a burst of new tasks must not slow this tick down (the pace of samples
   * would then follow the target's state): the rest wait for later ticks */
  if (++tk->new_names > TK_NEW_NAMES) return NULL;
  char *s = NULL;
  int k = tk_obj_kind(tk, obj);
  if (k == TK_STR) {
    if (smp_read_str(tk->h, obj, &s) < 0) return NULL;
    size_t len = strlen(s);
    if (len > SMP_PYNAME_LEN) { /* cut on a character boundary */
      len = SMP_PYNAME_LEN;
      while (len && ((unsigned char)s[len] & 0xc0) == 0x80) len--;
      s[len] = 0;
    }
  } else if (k == TK_INT) { /* 3.13: an unnamed task keeps its counter */
    uint64_t v;
    if (smp_pn_long_read(tk->h, obj, &v) < 0 || !(s = malloc(32))) return NULL;
    snprintf(s, 32, "Task-%llu", (unsigned long long)v);
  } else {
    return NULL;
  }
  return name_put(tk, i, obj, s);
}

/* The text of a name object read into b (len bytes) into out (65 bytes):
 * a short compact ASCII str, or (3.13) the int of an unnamed task as
 * "Task-N". Returns its length, or -1 when it is neither. */
static int name_decode(bf_smp_tasks *tk, const unsigned char *b, char *out) {
  const smp_layout *l = &tk->h->lay;
  int kind = type_kind(tk, rd64(b + l->ob_type));
  if (kind == TK_STR) {
    uint64_t n = rd64(b + l->uni_length);
    uint32_t st = rd32(b + l->uni_state);
    if (((st >> 2) & 7) != 1 || !((st >> 5) & 1) || !((st >> 6) & 1) || n > 64) return -1;
    memcpy(out, b + l->uni_ascii_size, (size_t)n);
    out[n] = 0;
    if (strlen(out) < n)
      for (uint64_t c = 0; c < n; c++)
        if (!out[c]) out[c] = '?';
    return (int)n;
  }
  if (kind == TK_INT && l->nm.long_tagged) {
    uint64_t tag = rd64(b + l->nm.long_size), nd = tag >> 3;
    if ((tag & 3) != 0 || nd < 1 || nd > 2) return -1;
    uint64_t v = rd32(b + l->nm.long_digit);
    if (nd == 2) v |= (uint64_t)rd32(b + l->nm.long_digit + 4) << 30;
    return snprintf(out, 65, "Task-%llu", (unsigned long long)v);
  }
  return -1;
}

/* A 64-bit hash of a name's text (never 0): what a task remembers of the
 * text its name entry was checked against. */
static uint64_t name_hash(const char *s, int n) {
  uint64_t x = 0xcbf29ce484222325ull ^ (uint64_t)n;
  for (int i = 0; i < n; i += 8) { /* 8 bytes a step: s has room for 72 */
    uint64_t w = 0;
    memcpy(&w, s + i, n - i < 8 ? (size_t)(n - i) : 8);
    x = (x ^ w) * 0x100000001b3ull;
    x ^= x >> 29;
  }
  return x | 1;
}

/* Every task's name, in one batched read of the name objects (up to
 * TK_NAME_BATCH; past that a cached text is trusted), decoded here when it is
 * a short compact ASCII str (or, 3.13, the int of an unnamed task) and
 * checked against the cached text; others are left to name_get's bounded
 * slow path. A task still holding the name object it had, whose text hashes
 * as before, keeps its entry without a look-up (name_gen: no entry has left
 * its slot since). */
static void names_prefetch(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  const smp_layout *l = &h->lay;
  size_t len = (size_t)l->uni_ascii_size + 64;
  if (len < (size_t)l->nm.long_digit + 8) len = (size_t)l->nm.long_digit + 8;
  if (!tk->names && !(tk->names = calloc(TK_MAX_NAMES, sizeof *tk->names))) return;
  size_t n = tk->ntasks;
  if (grow((void **)&tk->objs, &tk->cap_objs, n + 1, 8) < 0) return;
  uint64_t *objs = tk->objs;
  size_t want = 0;
  for (size_t k = 0; k < n; k++) {
    objs[k] = 0;
    if (tk->tasks[k].live && tk->tasks[k].name_obj && want < TK_NAME_BATCH) {
      objs[k] = tk->tasks[k].name_obj;
      want++;
    }
  }
  if (want && read_many(tk, TK_M_NAME, objs, n, len, len) == 0)
    for (size_t k = 0; k < n; k++) {
      if (!objs[k] || !tk->ok[k]) continue;
      tk_task *t = &tk->tasks[k];
      char text[72];
      int tl = name_decode(tk, tk->at[k], text);
      uint64_t fp = tl < 0 ? 0 : name_hash(text, tl);
      if (fp && t->name && t->name_seen == objs[k] && t->name_gen == tk->name_gen && t->name_fp == fp)
        continue; /* the same object, the same text: the same entry */
      t->name_fp = 0;
      if (tl < 0 || tk->nnames >= TK_MAX_NAMES / 2) continue;
      size_t i;
      const tk_name *had = name_slot(tk, objs[k], &i);
      if (had) i = (size_t)(had - tk->names);
      t->name_fp = fp; /* checked below, or its new entry */
      if (had && strcmp(had->code->qualname, text) == 0) continue; /* the same text: the same entry */
      char *str = strdup(text);
      if (!str) return;
      name_put(tk, i, objs[k], str);
    }
}

/* Free the retired names no sample held by the recorder can still use. */
static void names_retire(bf_smp_tasks *tk) {
  size_t gone = 0;
  while (gone < tk->ndead && tk->h->now_ns - tk->dead[gone].retired_ns > TK_DEAD_NS) {
    free(tk->dead[gone].thread_name);
    free((char *)tk->dead[gone].code->qualname);
    free(tk->dead[gone].code);
    gone++;
  }
  if (gone) memmove(tk->dead, tk->dead + gone, (tk->ndead -= gone) * sizeof *tk->dead);
}

/* The frame object / interpreter frame of coroutine c (copied into co[]). */
static uint64_t coro_frame_addr(const bf_smp_tasks *tk, uint64_t coro, const unsigned char *co) {
  if (tk->lay.cr_iframe) return coro + tk->lay.cr_iframe;
  return rd64(co + tk->lay.cr_frame);
}

/* Bytes of a frame read: the walker's, and what the task reader needs. */
static size_t frame_len(const bf_smp_tasks *tk) {
  size_t n = (size_t)tk->h->lay.fr_read;
  if (n < 80) n = 80;
  if (tk->lay.f_state && n < tk->lay.f_state + 8) n = tk->lay.f_state + 8;
  return n;
}

/* walk_chains' scratch: per task, the frame read (fr[i], in read_many's
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
  if ((rc = read_many(tk, memo, tk->cur, n, w->co_len + w->extra, w->co_len)) < 0) return rc;
  /* frames: embedded (3.11+, already read) or separate objects */
  for (size_t i = 0; i < n; i++) {
    fa[i] = 0;
    if (!tk->cur[i]) continue;
    const unsigned char *co = tk->at[i];
    int k = tk->ok[i] ? type_kind(tk, rd64(co + h->lay.ob_type)) : TK_OTHER;
    if (k != TK_CORO && k != TK_GEN) {
      tk->cur[i] = 0;
      continue;
    }
    fa[i] = coro_frame_addr(tk, tk->cur[i], co);
    if (L->cr_iframe) {
      w->fr[i] = co + L->cr_iframe;
      if ((int8_t)co[L->cr_iframe - 5] != -1) fa[i] = 0; /* not suspended at an await */
    } else if (L->cr_running && co[L->cr_running]) {
      fa[i] = 0;
    }
    if (!fa[i]) tk->cur[i] = 0;
  }
  if (!L->cr_iframe) {
    if ((rc = read_many(tk, memo < 0 ? -1 : memo + 1, fa, n, w->fr_len, w->fr_len)) < 0) return rc;
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
    uint64_t p = rd64(f + L->f_stacktop);
    if (p > fa + 8 && p - fa < (1u << 20)) slot = p - 8;
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
  w.fr = calloc(n ? n : 1, sizeof *w.fr); /* into read_many's area */
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
    if ((rc = read_many(tk, memo < 0 ? -1 : memo + 2, w.slot, n, 8, 8)) < 0) goto out;
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
    int k = tk->ok[i] ? type_kind(tk, rd64(b + h->lay.ob_type)) : tk_obj_kind(tk, tk->addrs[i]);
    if (k == TK_PYTASK) { /* read together after this loop (tasks_py.c) */
      if (!pya && (!(pya = malloc(nt * 8)) || !(pyi = malloc(nt * sizeof *pyi)))) {
        free(pya);
        return;
      }
      pyi[npy] = i;
      pya[npy++] = tk->addrs[i];
      continue;
    } /* else a dead weak reference, or a task freed since the registry was read */
    if (k != TK_TASK || !tk->ok[i] || rd32(b + L->fut_state) != 0) { /* or done, cancelled */
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
    set_status(tk, foreign ? "some tasks are asyncio's pure-Python Task, whose attributes this Python's "
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
  if (read_many(tk, TK_M_STATE, tk->cur, nt, co_len, co_len) < 0) return -EIO;
  uint64_t *run = tk->run;
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    run[i] = 0;
    if (!t->live) continue;
    const unsigned char *co = tk->at[i];
    int running = tk->cur[i] && tk->ok[i] && (L->cr_iframe    ? (int8_t)co[L->cr_iframe - 5] == 0
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
  if (read_many(tk, TK_M_RUN, run, nt, fr_len, fr_len) == 0)
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
  names_retire(tk);
  names_prefetch(tk);
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    if (!t->live) continue;
    if (!t->name || t->name_seen != t->name_obj || t->name_gen != tk->name_gen) {
      t->name = name_get(tk, t->name_obj);
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
  if (read_many(tk, TK_M_FRAME, walked, nt, fl, fl) == 0)
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
  if (grow((void **)&tk->out, &tk->cap_out, n + nt, sizeof *tk->out) < 0) return;
  memcpy(tk->out, th, n * sizeof *th);
  tk->nframes = 0;
  size_t no = n;
  for (size_t i = 0; i < nt; i++) {
    tk_task *t = &tk->tasks[i];
    if (!t->live || !t->name) continue;
    size_t need = 1 + (size_t)t->nchain + (t->run_tid ? th[t->run_tid - 1].nframes : 0);
    if (grow((void **)&tk->frames, &tk->cap_frames, tk->nframes + need, sizeof *tk->frames) < 0)
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
  if (tk->v314 && tk->v314 != 1) { /* _asyncio not found yet: nothing to read */
    refresh_registry(tk);
    if (tk->v314 != 1) return;
  }
  /* a big registry costs a read per task: re-read it ten times less often */
  int64_t every = tk->naddrs > 1000 ? 10 * TK_REFRESH_NS : TK_REFRESH_NS;
  if (!tk->reg_ns || h->now_ns - tk->reg_ns >= every) refresh_registry(tk);
  if (!tk->naddrs || tk->ntasks != tk->naddrs) return;
  size_t nt = tk->ntasks;
  if (grow((void **)&tk->cur, &tk->cap_cur, nt + 1, 8) < 0 || grow((void **)&tk->run, &tk->cap_run, nt + 1, 8) < 0 ||
      grow((void **)&tk->walked, &tk->cap_walked, nt + 1, 8) < 0)
    return;
  /* the tasks themselves, every sample */
  if (read_many(tk, TK_M_TASK, tk->addrs, nt, L->task_size, L->task_size) < 0) return;
  tasks_read(tk);
  if (tasks_states(tk, th, n) < 0) return;
  /* names after the states: reading new names takes time, and a state read
   * long after the threads' stacks disagrees with them more often */
  tasks_names(tk);
  if (tasks_chains(tk) < 0) return;
  tasks_emit(tk, th, n, out, nout);
}
