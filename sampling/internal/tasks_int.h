/* tasks_int.h — what tasks.c shares with its readers of other task kinds:
 * pure-Python Tasks (tasks_py.c) and, on 3.14+, the _asyncio module's
 * debug offsets (tasks_314.c); and the reader's state, shared with its
 * registry (tasks_registry.c) and names (tasks_names.c). Internal to sampling/.
 */
#ifndef BF_SMP_TASKS_INT_H
#define BF_SMP_TASKS_INT_H

#include <stdint.h>

#include "smp_int.h"
#include "tasks.h"

/* Kinds of object the task reader follows, from their type's tp_name.
 * TK_PYTASK: asyncio's pure-Python Task (asyncio.tasks._PyTask) or a
 * subclass of it: fields in its instance dict (tasks_py.c). */
enum tk_kind { TK_OTHER, TK_NONE, TK_CORO, TK_GEN, TK_TASK, TK_FUTITER, TK_FUT, TK_WEAKREF, TK_SET, TK_STR, TK_INT,
               TK_PYTASK };

/* Kind of the object at obj (one read of its type pointer; the type's kind
 * is cached). TK_OTHER when unreadable. */
int tk_obj_kind(bf_smp_tasks *tk, uint64_t obj);
/* The sampler handle tk reads through (borrowed). */
bf_smp *tk_sampler(bf_smp_tasks *tk);
/* tasks.c's batched reader: n regions of len bytes at addrs[i] (0: skip).
 * OUT: *buf (n * len bytes), *ok (n flags), valid until its next call. */
int tk_read_many(bf_smp_tasks *tk, const uint64_t *addrs, size_t n, size_t len,
                 const unsigned char **buf, const unsigned char **ok);

/* ---- pure-Python Tasks (tasks_py.c) ---- */
typedef struct tk_py tk_py;

/* The fields of a pending pure-Python Task: its coroutine (a coroutine or
 * generator, type-checked), the future it is parked on (0: none) and its
 * name object (checked later, as a C Task's). */
typedef struct tk_py_task {
  uint64_t coro, waiter, name_obj;
} tk_py_task;

/* New cache of the key and value objects seen (interned attribute names,
 * state strings, None). NULL when out of memory. */
tk_py *tk_py_new(void);
/* Destroy; accepts NULL. */
void tk_py_free(tk_py *py);
/* Read the Task at task. OUT: *out. Returns 1 (pending), 0 (done or
 * cancelled), -ENOTSUP (no attribute layout for this Python: no instance
 * dicts can be read) or -EIO (not a readable Task now). */
int tk_py_read(bf_smp_tasks *tk, tk_py *py, uint64_t task, tk_py_task *out);
/* Read the n Tasks at addrs together: the attribute layout learned once per
 * class and shared keys object, then each level (the instance's dict or
 * values pointer, its values, its coroutine's type) read for all Tasks in
 * one batch. Tasks whose attributes are not in shared-keys values go
 * through tk_py_read, a bounded number per call. OUT: out[i], rc[i] as
 * tk_py_read's. Returns how many were not read for that bound, or -ENOMEM. */
int tk_py_read_many(bf_smp_tasks *tk, tk_py *py, const uint64_t *addrs, size_t n, tk_py_task *out,
                    int *rc);

/* ---- 3.14+: the _asyncio module's debug offsets (tasks_314.c) ----
 * From CPython's Modules/_asynciomodule.c (_Py_AsyncioModuleDebugOffsets,
 * section .AsyncioDebug, symbol _AsyncioDebug: in the _asyncio extension on
 * 3.14, in the executable or libpython on 3.15) and
 * Include/internal/pycore_debug_offsets.h of each version; verified against
 * Debian sid's 3.14.10 and 3.15.2 (tests/integration/test_asyncio_tasks.py). */
typedef struct tk314 {
  uint64_t task_size, task_fut_state, task_fut_waiter, task_coro, task_name, task_node;
  uint64_t is_tasks_head, ts_tasks_head; /* llist heads in the interpreter / thread state */
  uint64_t gen_iframe, gen_frame_state;  /* PyGenObject (from _Py_DebugOffsets) */
  uint64_t fr_stackpointer;              /* _PyInterpreterFrame.stackpointer */
  uint64_t llist_next;                   /* struct llist_node.next */
  uint64_t long_tag, long_digit;         /* PyLongObject (an unnamed Task's name is its number) */
  int minor;
  /* gi_frame_state values: suspended at an await (yield from) in
   * [await_lo, await_hi], and executing (3.15 renumbered them) */
  int8_t fs_await_lo, fs_await_hi, fs_exec;
  uint8_t await_below; /* as tk_layout's */
} tk314;

#define TK314_ASYNCIO_LEN 104 /* 13 uint64: task 7, interpreter 2, thread 4 */
#define TK314_PYDEBUG_LEN 888 /* the longest _Py_DebugOffsets known (3.15; 3.14: 760) */

/* Check and take the offsets: adbg (the target's _AsyncioDebug) and pydbg
 * (its _Py_DebugOffsets, at the start of _PyRuntime; 3.14 or 3.15). Fields the sampler
 * needs beyond the exported ones (the Task's state and waiter) are placed
 * from the TaskObj layout and accepted only if the exported ones sit where
 * that layout puts them. OUT: *out; *msg says why not. 0, -EINVAL or
 * -ENOTSUP (a version whose _Py_DebugOffsets layout is not known). */
int tk314_parse(const unsigned char *adbg, size_t alen, const unsigned char *pydbg, size_t plen,
                tk314 *out, const char **msg);
/* Only what comes from pydbg: the coroutine, frame and int offsets, the
 * frame states and minor (task and list fields left 0). Pure-Python Tasks
 * need no more. OUT: *out. Errors as tk314_parse's. */
int tk314_parse_gen(const unsigned char *pydbg, size_t plen, tk314 *out, const char **msg);
/* tk314_parse_gen over the target's _Py_DebugOffsets. OUT: *out. */
int tk314_find_gen(bf_smp *h, tk314 *out, const char **msg);
/* Find _AsyncioDebug in the target (the _asyncio extension, or libpython /
 * the executable when built in) and parse it with the target's
 * _Py_DebugOffsets. *none (in/out): bit 1 libpython, bit 2 the executable
 * when found to lack it (not looked at again). OUT: *out. -ENOENT while
 * _asyncio is not loaded. */
int tk314_find(bf_smp *h, unsigned *none, tk314 *out, const char **msg);
/* Append to addrs[*n..max) the Tasks linked in interp's thread states'
 * lists, then in the interpreter's own (tasks of finished threads). Bounded
 * by max and by SMP_MAX_THREADS threads; a list that does not come back to
 * its head ends at the first unreadable node. OUT: *n. */
int tk314_tasks(bf_smp *h, const tk314 *o, uint64_t interp, uint64_t *addrs, size_t max, size_t *n);
/* tasks.c: read 3.14+ Tasks with offsets o from now on (once tk314_find
 * found them; tests hand in their own). With o->task_size 0 (from
 * tk314_parse_gen) only coroutines, so pure-Python Tasks, are read. */
void tk_use_314(bf_smp_tasks *tk, const tk314 *o);

/* ---- the reader's state: tasks.c, with the registry (tasks_registry.c)
 * and task names (tasks_names.c) ---- */
#define TK_MAX_CHAIN 16             /* coroutines followed per task */
#define TK_MAX_NAMES 32768          /* distinct task names kept (a table of 65536 slots) */

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
  /* 3.11+: the coroutine's frame state suspended at an await (in
   * [fs_await_lo, fs_await_hi]) and executing; all 0: -1 and 0, as 3.11-3.14 */
  int8_t fs_await_lo, fs_await_hi, fs_exec;
  /* slots between the awaited object and the value stack's top (3.15: 1,
   * the NULL that SEND's operands gained) */
  uint8_t await_below;
} tk_layout;

/* A name object's text. Its address is reused once it is freed, by the name
 * of a new task often at a finished one's address with its coroutine at the
 * finished one's too: names are read on every sample (tk_names_prefetch), and
 * when the text at an address changed, the slot gets a new entry (a new
 * serial, so a new task id); the old one is freed TK_DEAD_NS later. */
typedef struct tk_name {
  uint64_t obj;       /* the name object: the bf_pmap key */
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

/* tk_read_regions's call sites whose regions repeat from sample to sample */
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
  int64_t uv_ns; /* when uvloop was last looked for */
  uint64_t *addrs;
  size_t naddrs, cap_addrs;
  tk_task *tasks;
  size_t ntasks, cap_tasks;
  bf_pmap names;      /* of tk_name, by name object; growing bumps name_gen */
  uint64_t serials;
  tk_name *dead;      /* entries replaced in their slot, oldest first, kept TK_DEAD_NS */
  size_t ndead, cap_dead;
  bf_smp_thread *out;
  size_t cap_out;
  bf_smp_frame *frames;
  size_t nframes, cap_frames;
  unsigned char *buf, *ok; /* tk_read_regions: regions read again alone; which were read */
  size_t cap_buf, cap_ok;
  const unsigned char **at; /* tk_read_regions: where region i is (valid until the next call) */
  size_t *pos, cap_at, cap_pos;
  uint64_t *ord;      /* tk_read_regions: (address, index) pairs, sorted */
  size_t cap_ord;
  unsigned char *span; /* tk_read_regions: merged spans as read */
  size_t cap_span;
  uint64_t *cur; /* per level: object address per task (0: chain ended) */
  size_t cap_cur;
  uint64_t *objs, *run, *walked; /* per task, scratch of one sample */
  size_t cap_objs, cap_run, cap_walked;
  tk_task *spare;     /* the registry's entries carried over at a refresh */
  size_t cap_spare;
  uint64_t name_gen;  /* bumped when a name entry leaves its slot (retired, or the table grew) */
  tk_memo memo[TK_MEMOS];
  int warned_custom;
  int uvloop; /* the uvloop module is loaded */
  int new_names; /* read this sample */
  tk_py *py;       /* pure-Python Tasks' key cache (tasks_py.c) */
  int v314;        /* 3.14+: tasks from _asyncio's debug offsets (tasks_314.c), 1 once found */
  int gen314;      /* 3.14+: the coroutine layout taken (pure-Python Tasks readable) */
  unsigned none314; /* tk314_find's files without _AsyncioDebug */
  int64_t find314_ns; /* when _AsyncioDebug was last looked for */
  tk314 t314;
};

/* tasks.c: grow *p (*cap elements of elem bytes) to hold need. 0 or -ENOMEM. */
int tk_grow(void **p, size_t *cap, size_t need, size_t elem);
/* tasks.c: the session's sentence; what was not read replaced by what
 * (kept when NULL). */
void tk_set_status(bf_smp_tasks *tk, const char *what);
/* tasks.c: read n regions of len bytes at addrs[i] (0: skip) in merged,
 * batched spans; memo is the call site (TK_M_*, or -1), whose last order is
 * kept. OUT: region i at tk->at[i] when tk->ok[i] (2: only its first need
 * bytes), until the next call. 0 or -ENOMEM. */
int tk_read_regions(bf_smp_tasks *tk, int memo, const uint64_t *addrs, size_t n, size_t len, size_t need);
/* tasks.c: kind of the type at type_addr (TK_*), cached per address. */
int tk_type_kind(bf_smp_tasks *tk, uint64_t type_addr);

/* tasks_registry.c: read the registry again (asyncio.tasks' sets, and the
 * 3.14+ Task lists) into tk->addrs, in address order, and align tk->tasks
 * with it. */
void tk_refresh_registry(bf_smp_tasks *tk);

/* tasks_names.c: the name entry of name object obj, read one by one (a
 * bounded number per sample). NULL: none, or not now. */
const tk_name *tk_name_get(bf_smp_tasks *tk, uint64_t obj);
/* tasks_names.c: every live task's name object in one batched read,
 * checked against its cached entry. */
void tk_names_prefetch(bf_smp_tasks *tk);
/* tasks_names.c: free the retired names no sample held by the recorder can
 * still use. */
void tk_names_retire(bf_smp_tasks *tk);

#endif
