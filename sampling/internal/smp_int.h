/* smp_int.h — internals of the sampler module shared by its .c files:
 * the per-version layout descriptor, the remote-read choke point with its
 * prefetch pool, the code-object cache and the handle itself.
 */
#ifndef BF_SMP_INT_H
#define BF_SMP_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "pmap.h"
#include "sampler.h"

/* Little-endian fields of copied remote memory (unaligned-safe). */
static inline uint64_t rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static inline uint32_t rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Kind of line table a code object carries. */
enum smp_lt_kind { SMP_LT_LNOTAB = 1, SMP_LT_310 = 2, SMP_LT_LOCATIONS = 3 };

/* One CPython layout: offsets in bytes, 0 meaning "absent" only where noted.
 * Filled from the vendored tables (3.8-3.12) or from the target's
 * _Py_DebugOffsets (3.13+). Passed explicitly, never global. */
typedef struct smp_layout {
  uint32_t version_hex;
  int lt_kind;                 /* enum smp_lt_kind */
  int frames_are_objects;      /* 3.8-3.10: PyFrameObject chain from tstate->frame */
  int has_cframe;              /* 3.11-3.12: tstate->cframe->current_frame */
  int instr_is_lasti;          /* fr_instr is an int f_lasti (3.8-3.10) */
  int lasti_in_units;          /* 3.10: f_lasti counts code units */
  int instr_is_prev;           /* 3.11/3.12 prev_instr (vs 3.13 instr_ptr) */
  int executable_tagged;       /* 3.14+: _PyStackRef (mask low bits) */
  uint64_t rt_interp_head;
  uint64_t rt_gil_last_holder, rt_gil_locked; /* in _PyRuntime (<= 3.11), 0 = n/a */
  uint64_t rt_gc_collecting;   /* 3.8: in _PyRuntime, 0 = n/a */
  uint64_t is_gil_ptr;         /* 3.12: interp->ceval.gil pointer, 0 = n/a */
  uint64_t gil_last_holder, gil_locked; /* inside struct _gil_runtime_state (3.12) */
  uint64_t is_gil_holder, is_gil_locked; /* 3.13+: directly inside interp, 0 = n/a */
  uint64_t is_gc_collecting;   /* 3.9+, 0 = n/a */
  uint64_t is_next, is_tstate_head, is_size;
  uint64_t ts_next, ts_thread_id, ts_native_thread_id; /* native 0 = n/a */
  uint64_t ts_frame;           /* 3.8-3.10 frame, 3.13+ current_frame */
  uint64_t ts_cframe, cf_current_frame;
  uint64_t ts_base_frame;      /* 3.15+: bottom-most frame of the thread, 0 = n/a */
  uint64_t ts_holds_gil;       /* 3.15+: int holds_gil, 0 = n/a */
  uint64_t ts_size;
  /* --mode exception: the thread's exception state (0 = n/a). ts_exc_info:
   * _PyErr_StackItem *exc_info (the top of the handled-exception chain);
   * ts_cur_exc: the exception being raised (3.12+ current_exception,
   * before curexc_type); ei_prev: previous_item inside a stack item, whose
   * first field is the value (3.8-3.10 exc_type, 3.11+ exc_value) */
  uint64_t ts_exc_info, ts_cur_exc, ei_prev;
  /* recursion depth, bounding a consistent stack (0 = n/a): 3.8-3.10 an int
   * depth; 3.11+ an int remaining and an int limit (depth = limit - remaining) */
  uint64_t ts_rec_depth, ts_rec_remaining, ts_rec_limit;
  uint64_t fr_code, fr_back, fr_instr, fr_owner, fr_size; /* owner 0 = n/a (<3.11) */
  uint64_t fr_entry;           /* 3.11 bool is_entry, 0 = n/a (native.c uses it) */
  uint64_t fr_state;           /* 3.8-3.10: char f_executing / f_state, 0 = n/a */
  int fr_state_running;        /* its value while the frame runs (1; 3.10: 0) */
  uint64_t co_code;            /* 3.8-3.10: the co_code bytes object, 0 = n/a */
  uint64_t co_flags;           /* 3.8-3.10: int co_flags, 0 = n/a */
  uint64_t co_ob_size;         /* 3.11+: Py_SIZE(code) = code units, 0 = n/a */
  uint64_t co_filename, co_name, co_qualname, co_firstlineno, co_linetable,
      co_code_adaptive, co_size;
  uint64_t ob_type, tp_name;
  uint64_t bytes_size, bytes_sval;
  uint64_t uni_length, uni_state, uni_ascii_size, uni_compact_size;
  /* bytes of each hot struct actually needed (max used offset + field) */
  uint64_t ts_read, fr_read;
  /* window of a code object read every sample to check a cached entry still
   * describes what lives at that address (fingerprint fields) */
  uint64_t co_fp_lo, co_fp_len;
  /* Python thread names (pynames.c): dict, int, module and instance
   * attribute layouts, generated for 3.8-3.15 (gen_offsets.sh, table
   * NAMES_GENERATED); minor == 0: not known, names are not read. */
  struct smp_names_layout {
    int minor;
    int attr_mode;             /* enum smp_attr_mode */
    uint64_t is_modules;       /* interp->modules (3.12+: imports.modules) */
    uint64_t md_dict;
    uint64_t tp_basicsize, tp_dictoffset, tp_flags, ht_cached_keys, ht_size;
    uint64_t dict_keys, dict_values, dict_size;
    uint64_t dk_nentries, dk_indices, dk_size; /* dk_size: 3.8-3.10 */
    int dk_log2;               /* 3.11+: dk_log2_size / dk_log2_index_bytes / dk_kind */
    uint64_t dk_log2_size, dk_log2_index_bytes, dk_kind;
    uint64_t dk_entry_size, dk_entry_key, dk_entry_value;    /* PyDictKeyEntry */
    uint64_t dk_uentry_size, dk_uentry_key, dk_uentry_value; /* PyDictUnicodeEntry, 3.11+ */
    uint64_t dv_values, dv_valid, dv_capacity; /* PyDictValues (valid, capacity: 3.13) */
    uint64_t tpf_heaptype, tpf_managed_dict, tpf_inline_values;
    uint64_t obj_inline_values;             /* 3.13: values after the object */
    int64_t obj_managed_dict, obj_values_ptr; /* before the object (negative) */
    uint64_t long_size, long_digit;
    int long_tagged;           /* 3.12+: lv_tag (ndigits << 3 | sign) */
  } nm;
} smp_layout;

/* Vendored layout for 3.minor (3.8-3.12). OUT: *out. -ENOTSUP if none. */
int smp_layout_builtin(int minor, smp_layout *out);

/* Fill *out from a _Py_DebugOffsets blob (len bytes copied from the target)
 * of a 3.13+ interpreter; every offset is checked against its section size.
 * Returns 0, -EINVAL (bad cookie / offsets out of bounds), -ENOTSUP
 * (free-threaded or unknown layout). msg gets a reason (static). */
int smp_layout_from_debug_offsets(const unsigned char *blob, size_t len, smp_layout *out,
                                  int *free_threaded, const char **msg);

/* The vendored per-version tables (layouts.c, locals.c; printed by
 * sampling/gen/gen_offsets.sh) are one row a field, one column a version:
 * X(field, value in the first version, in the second, ...), 0 where a
 * version has no such field. SMP_VERSION_COLUMN, as X, stores column col
 * of a row into (*l).field; every row has ncols values, checked when
 * compiling. */
#define SMP_VERSION_COLUMN(l, ncols, col, f, ...)                     \
  do {                                                                \
    static const int64_t values_[] = {__VA_ARGS__};                   \
    _Static_assert(sizeof values_ / sizeof values_[0] == (ncols),     \
                   #f ": one value a version");                       \
    (l)->f = values_[col];                                            \
  } while (0);

/* Positions (byte offsets inside a 3.13+ target's _Py_DebugOffsets, each a
 * uint64 there) of what the thread-name reader (pynames.c, on top of its
 * vendored table) and `dump --locals` (locals.c) take from the target
 * itself; 0: that version's offsets lack the field. */
typedef struct smp_dbg_pos {
  int minor;
  size_t is_size, is_modules;
  size_t tp_size, tp_flags, tp_basicsize, tp_dictoffset; /* basicsize, dictoffset: 3.15+ */
  size_t ht_size, ht_cached_keys;                         /* 3.15+ */
  size_t dict_size, dict_keys, dict_values;
  size_t long_size, long_tag, long_digit;
  size_t fr_size, fr_localsplus, co_size, co_names, co_kinds;
  size_t tuple_size, tuple_item, tuple_ob_size, float_size, float_val;
} smp_dbg_pos;

/* The positions of 3.minor. OUT: *out. -ENOTSUP when this build has none. */
int smp_dbg_pos_of(int minor, smp_dbg_pos *out);

/* ---- line tables (linetable.c) ------------------------------------------ */

typedef struct smp_line_range {
  uint32_t start, end; /* [start, end) in the table's address unit */
  int32_t line;        /* -1: no line */
} smp_line_range;

/* Decode a line table into ranges. OUT: *ranges (caller frees), *n.
 * Never reads past len; returns 0 or -EINVAL (garbage), -ENOMEM. */
int smp_linetable_decode(int kind, const unsigned char *tab, size_t len, int firstlineno,
                         smp_line_range **ranges, size_t *n);
/* Line of address addr (units of the table) or -1. */
int32_t smp_linetable_lookup(const smp_line_range *r, size_t n, uint32_t addr);

/* ---- ELF (elf.c) ---------------------------------------------------------- */

typedef struct smp_elf {
  unsigned char *data; /* whole file, owned */
  size_t size;
  uint64_t load_vaddr; /* lowest PT_LOAD p_vaddr, page-aligned down */
  int mapped;          /* data is an mmap of the file */
} smp_elf;

/* Load a file (bounded to 512 MiB). Returns 0 or -errno. */
int smp_elf_load(const char *path, smp_elf *e);
/* Load from a memory buffer (copied); for fuzzing/tests. */
int smp_elf_from_buffer(const unsigned char *buf, size_t len, smp_elf *e);
void smp_elf_free(smp_elf *e);
/* Symbol value (vaddr) by name from .dynsym then .symtab. OUT: *value, *size.
 * -ENOENT when absent, -EINVAL on malformed tables. */
int smp_elf_symbol(const smp_elf *e, const char *name, uint64_t *value, uint64_t *size);
/* First NUL-terminated string in the file's .rodata that starts with prefix
 * and then looks like a version ("3.10." -> "3.10.13"). OUT: buf. */
int smp_elf_find_version(const smp_elf *e, const char *prefix, char *buf, size_t buflen);

/* A function symbol: its vaddr, size (0: unknown) and name (borrowed from the smp_elf). */
typedef struct smp_elf_sym {
  uint64_t value, size;
  const char *name;
  int global;
} smp_elf_sym;
/* Every defined function of .dynsym and .symtab, sorted by value, one per
 * value (a sized, global one preferred). OUT: *syms (caller frees; the names
 * live as long as e), *n. Returns 0 or -ENOMEM; malformed tables are skipped. */
int smp_elf_functions(const smp_elf *e, smp_elf_sym **syms, size_t *n);
/* The last of syms[0..n) at or below vaddr, or NULL (whether it covers vaddr
 * is the caller's call: its size may be 0). */
const smp_elf_sym *smp_elf_function_at(const smp_elf_sym *syms, size_t n, uint64_t vaddr);
/* The vaddr a file offset is mapped at (the PT_LOAD holding it). OUT: *vaddr.
 * -ENOENT: no PT_LOAD holds off; -EINVAL: malformed headers. */
int smp_elf_vaddr_of_offset(const smp_elf *e, uint64_t off, uint64_t *vaddr);
/* The file bytes loaded at [vaddr, vaddr+len), all in one PT_LOAD's file
 * part. OUT: *p (borrowed from e). -ENOENT / -ERANGE when not. */
int smp_elf_bytes_at(const smp_elf *e, uint64_t vaddr, uint64_t len, const unsigned char **p);
/* [lowest, highest) vaddr of the PT_LOAD segments. OUT: *lo, *hi. -ENOENT: none. */
int smp_elf_load_span(const smp_elf *e, uint64_t *lo, uint64_t *hi);
/* The .eh_frame_hdr (PT_GNU_EH_FRAME) binary-search table: OUT: *hdr_vaddr
 * (the header: table entries are relative to it), *table_vaddr, *nfde.
 * -ENOENT: none; -ENOTSUP: a table encoding other than datarel sdata4
 * (what libunwind's remote search reads); -EINVAL: malformed. */
int smp_elf_eh_frame_index(const smp_elf *e, uint64_t *hdr_vaddr, uint64_t *table_vaddr,
                           uint64_t *nfde);

/* ---- the handle ----------------------------------------------------------- */

typedef struct smp_code {
  bf_smp_code pub;
  uint64_t addr;
  uint64_t fp; /* fingerprint of the code object's identity fields */
  int checked_gen;   /* sample in which fp was last checked */
  int64_t checked_ns; /* and when (monotonic) */
  smp_line_range *ranges;
  size_t nranges;
  /* torn-stack check: calls[u] & 1 when a frame stopped at code unit u may
   * have a live child frame (see smp_caller_ok); calls[u] >> 1: units back
   * from u to the start of its instruction (--opcodes); NULL: not checked */
  uint8_t *calls;
  uint32_t nunits;
  int is_gen;        /* a generator / coroutine: never a thread's outermost frame */
  uint64_t line_instr; /* walker: the instruction value line was looked up for */
  int32_t line;
  int line_known;
  struct smp_code *next; /* the retired list */
} smp_code;

/* Per-thread state kept between samples. */
typedef struct smp_tslot {
  uint64_t tstate;
  int64_t tid;
  int stat_fd, sched_fd; /* -1 when not opened */
  int64_t state_ns;      /* when state_flags were read (monotonic) */
  uint32_t state_flags;
  /* names live on the heap: threads of a sample point at them while the
   * slots array grows or is swept */
  char *name;            /* OS name (/proc comm), owned; NULL: unknown */
  int seen;              /* generation stamp */
  /* Python thread name (pynames.c): copied from the names cache, owned */
  char *py_name;         /* NULL: not known */
  uint64_t py_ident;     /* thread ident the name belongs to */
  int py_gen;            /* names-cache generation last resolved against */
  int64_t py_first_ns;   /* when the ident was first seen (monotonic) */
  /* kernel lens (kstate.c): the last state read, reused while the thread
   * has not run since (same state letter, same switch count) */
  int sys_fd;            /* /proc/.../syscall, -1 when not opened */
  char k_state;          /* stat state letter, 0 = not read */
  uint8_t k_class;
  uint8_t k_futex_timed; /* futex with a timeout: the GIL when another holds it */
  uint64_t k_pcount;     /* schedstat field 3 when k_state was read */
  int64_t k_run_delay;   /* schedstat field 2 */
  int64_t k_run;         /* schedstat field 1 */
  uint64_t k_majflt;
  bf_smp_ktarget *k_target;
} smp_tslot;

/* A prefetched region: part of the hot set of the previous sample. */
typedef struct smp_pref {
  uint64_t addr;
  uint32_t len, off; /* offset into pool buffer */
  uint8_t ok;        /* read fine by this sample's prefetch */
  uint8_t used;      /* served a read in this sample */
  uint8_t age;       /* samples since a read last asked for it */
} smp_pref;

/* A slot of bf_smp.codes. */
typedef struct smp_code_slot {
  uint64_t addr; /* the bf_pmap key */
  smp_code *code;
} smp_code_slot;

/* A slot of bf_smp.pref_hash. */
typedef struct smp_pref_slot {
  uint64_t addr; /* the bf_pmap key */
  int64_t index; /* in bf_smp.pref */
} smp_pref_slot;

/* A merged span of the prefetch plan: regions plan_ord[first..last]. */
typedef struct smp_span {
  uint64_t addr, end;
  size_t first, last;
  size_t off; /* into span_buf */
} smp_span;

#define SMP_PAGE 4096       /* a miss reads its whole page (remote.c) */
#define SMP_MISS_PAGES 32   /* ... for this many misses of one walk */

typedef ssize_t (*smp_readv_fn)(void *ud, const struct iovec *local, size_t nlocal,
                                const struct iovec *remote, size_t nremote);

struct bf_smp {
  int pid;
  int attached;
  /* the process first attached to (attach.c smp_pin_*): a pidfd, else its
   * start time; a pid that names another process later is not followed */
  int pin_pid, pin_fd;
  unsigned long long pin_start;
  char err[512];
  char version[32];
  const char *build;
  smp_layout lay;
  uint64_t runtime_addr;   /* &_PyRuntime in the target */
  uint64_t code_type_addr; /* &PyCode_Type, 0 = unknown (no type check) */
  uint64_t none_addr;      /* &_Py_NoneStruct, 0 = unknown (no --mode exception) */
  /* &PyDict_Type, &PyLong_Type, &PyModule_Type (pynames.c type checks);
   * dict 0 on a real target: thread names are not read */
  uint64_t dict_type_addr, long_type_addr, module_type_addr;
  /* 3.8-3.11: pymalloc's statics arenas, maxarenas, narenas_currently_allocated
   * (pyalloc.c), from the symbol table of an unstripped build; 0 = unknown */
  uint64_t obm_arenas, obm_maxarenas, obm_narenas;
  int64_t pthread_tid_off; /* 3.8-3.10: offset of tid in glibc struct pthread; -1 unknown */
  uint64_t interp_head;    /* cached _PyRuntime.interpreters.head (0 = re-read) */
  uint64_t read_calls;
  uint64_t read_bytes, read_iovs;
  smp_readv_fn readv;      /* the choke point (process_vm_readv unless fuzzing) */
  void *readv_ud;
  /* prefetch: the previous sample's hot regions, read in one go */
  smp_pref *pref, *pref_next;
  size_t npref, npref_next, cap_pref;
  size_t pref_cursor;  /* where in pref the next read likely is */
  unsigned char *pool; /* this sample's misses */
  size_t pool_len, pool_cap;
  smp_span miss[SMP_MISS_PAGES]; /* this walk's misses, read as whole pages into pool */
  size_t nmiss;
  unsigned char *span_buf; /* merged spans as read */
  size_t span_cap;
  smp_pref *plan_key;      /* the hot set the plan was built for */
  uint32_t *plan_ord;
  smp_span *plan_sp;
  size_t plan_n, plan_ns, plan_cap, plan_total;
  uint64_t plan_builds; /* plans built (not kept from the last sample), for benchmarks */
  int pref_all_ok;
  bf_pmap pref_hash;       /* of smp_pref_slot: address -> index in pref */
  unsigned char scratch[4096];
  /* code cache */
  bf_pmap codes;     /* of smp_code_slot: code object address -> entry */
  smp_code *retired; /* replaced entries: callers may still hold their pub */
  size_t nretired;
  /* output */
  bf_smp_thread *threads;
  size_t nthreads, cap_threads;
  bf_smp_frame *frames;
  size_t nframes, cap_frames;
  uint64_t *frame_addr; /* remote address of frames[i] (locals.c), cap_frames long */
  smp_tslot *slots;
  size_t nslots, cap_slots;
  int gen;
  int64_t now_ns; /* monotonic time of the current sample */
  int walk_steps, code_misses; /* this sample's work, bounded */
  /* consistency (torn stacks): this walk's verdict and signature, totals */
  int torn;                 /* this walk found a stack that cannot have existed */
  const char *torn_why;     /* which check (static) */
  uint64_t walk_acc;        /* every frame read, folded (see walk_sig) */
  uint64_t settle_acc;      /* the same but the innermost frame's instruction */
  uint64_t torn_retries;    /* walks read again because the last was torn */
  uint64_t torn_invalid;    /* samples given up as torn after SMP_TORN_TRIES */
  uint64_t torn_stable;     /* accepted: failed a check but read while its thread slept */
  uint64_t torn_stalls;     /* torn reads the sampler's preemption stretched: window restarted */
  /* host tids of the threads this walk found torn (torn_tids_over: more, or
   * one without a known tid); a frozen thread's torn stack is real */
  int64_t torn_tids[8];
  int ntorn_tids, torn_tids_over;
  int torn_here;            /* the thread being walked was found torn */
  int torn_root;            /* ... at its outermost frame (see torn_root) */
  int cut_here;             /* this walk cut a stack at a caller read too late */
  int no_cut;               /* this walk retries instead (settled reads) */
  int want_op;              /* BF_SMP_WANT_OPCODE: read the leaf frame's opcode */
  int leaf_op;              /* the thread being walked: its leaf opcode, -1 unknown */
  uint64_t torn_cut;        /* samples kept with such a cut stack */
  uint64_t truncated;       /* stacks cut at SMP_MAX_DEPTH */
  smp_code trunc;           /* the marker frame of a cut stack */
  /* Python thread names (pynames.c): ident -> name from the last lookup */
  struct smp_pyname *pn;
  size_t npn;
  int pn_gen;               /* bumped by every lookup */
  int64_t pn_last_ns;       /* when the last lookup ran (monotonic) */
  int64_t pn_start_ns;      /* threads first seen a grace before this were looked for */
  int pn_cover_next;        /* the attach lookup covers the next sample's threads */
  int pn_unnamed;           /* last sample: 1 a thread without name, 2 one not looked for */
  int pn_budget;            /* remote reads left to the running lookup */
  unsigned pn_lookups;
  uint64_t pn_interp[8], pn_active[8]; /* cached threading._active per interpreter */
  /* PID namespaces (remote.c): the target's own tids -> host tids */
  int ns_nested;            /* 0 unknown, 1 same namespace as ours, 2 nested */
  int64_t (*ns_map)[2];     /* {namespace tid, host tid} of the last scan */
  size_t ns_n, ns_cap;
  int64_t ns_scan_ns;       /* monotonic time of the last scan */
  /* kernel lens (kstate.c): targets and fd links seen, and whether the
   * interpreter's GIL was locked at this walk (a timed futex is the GIL then) */
  struct smp_kcache *kc;
  int k_gil_locked;
};

/* Remote reads (remote.c). smp_read: one region, exact length, into dst.
 * Returns 0, -EIO (torn/unmapped), -ESRCH (gone), -EPERM. */
int smp_read(bf_smp *h, uint64_t addr, void *dst, size_t len);
/* Hot read: returns a pointer to len bytes of addr, served from the prefetch
 * pool when the previous sample read the same region, and records it for the
 * next sample's prefetch. Borrowed until the next sample. NULL on failure
 * (*err set). */
const unsigned char *smp_read_hot(bf_smp *h, uint64_t addr, size_t len, int *err);
/* The same, for a region not worth prefetching in the next samples. */
const unsigned char *smp_read_cold(bf_smp *h, uint64_t addr, size_t len, int *err);
/* Start of a sample: read every region of the last sample's hot set at once. */
void smp_prefetch(bf_smp *h);
void smp_prefetch_reset(bf_smp *h);
int smp_errno_remote(int e);
/* The host tid of the target's thread whose tid in the target's own PID
 * namespace is ns_tid (the same number unless the target runs in a nested
 * namespace, e.g. a container); 0 when no such thread is found. */
int64_t smp_host_tid(bf_smp *h, int64_t ns_tid);
/* The reverse: the tid the target's namespace gives host_tid (or host_tid). */
int64_t smp_ns_tid(const bf_smp *h, int64_t host_tid);
/* Whether the pinned target has ended (its pid may name another process
 * now): 1 when gone, else 0. Cheap (one poll); call after each read. */
int smp_pin_gone(bf_smp *h);

/* The target's pid as its own PID namespace numbers it (h->pid outside one). */
int64_t smp_ns_pid(bf_smp *h);
/* Forget the namespace map (attach, free). */
void smp_ns_reset(bf_smp *h);

/* native.c: tid turned out dead; forget any cached mapping to it. */
void smp_forget_tid(bf_smp *h, int64_t tid);

/* attach.c: set h->err from fmt and return rc. */
int smp_seterr(bf_smp *h, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* walker.c: empty the code cache. Entries are retired, not freed: callers
 * may hold their bf_smp_code until bf_smp_free (see sampler.h). */
void smp_code_cache_clear(bf_smp *h);
/* walker.c: free the code cache and every retired entry (bf_smp_free). */
void smp_code_cache_free(bf_smp *h);
/* threads.c: release a thread slot's name and /proc descriptors. */
void smp_slot_close(smp_tslot *s);
/* threads.c: the slot of thread state tstate on OS thread tid, made (with
 * the thread's name) on first sight and marked seen this walk. NULL when out
 * of memory. */
smp_tslot *smp_slot_get(bf_smp *h, uint64_t tstate, int64_t tid);
/* threads.c: drop the slots not seen for 64 walks. */
void smp_slots_sweep(bf_smp *h);
/* threads.c: t's state (running/idle) and CPU time, as want asks, from
 * /proc at most every 200 µs per thread (s may be NULL: nothing). */
void smp_thread_status(bf_smp *h, smp_tslot *s, unsigned want, bf_smp_thread *t);

/* Read /proc/PID/task/TID/<what> of slot s through *fd (opened on first
 * use, then pread): 0 and a NUL-terminated buf, or -1. */
int smp_proc_pread(bf_smp *h, smp_tslot *s, int *fd, const char *what, char *buf, size_t len);

/* Kernel lens (kstate.c). After a fresh /proc stat read of slot s (rest:
 * the text after the ") " of stat), read schedstat and, for a thread not
 * in state R that ran since the last read, its syscall and target; fill
 * t's kernel fields. */
void smp_kstate_read(bf_smp *h, smp_tslot *s, const char *rest, bf_smp_thread *t);
/* t's kernel fields from s's last read (no /proc read). */
void smp_kstate_copy(const bf_smp *h, const smp_tslot *s, bf_smp_thread *t);
/* Free the handle's target and fd caches (bf_smp_free). */
void smp_kcache_free(bf_smp *h);
/* threads.c: whether thread tid is off CPU now (1), on it (0), or -1 when
 * that cannot be told. OUT: *pcount, its schedule-in count. */
int smp_thread_off_cpu(bf_smp *h, int64_t tid, uint64_t *pcount);

/* Walker entry used by bf_smp_sample and the fuzzer. */
int smp_walk(bf_smp *h, unsigned want);
/* Install a fake memory reader (fuzzing). */
void smp_set_reader(bf_smp *h, smp_readv_fn fn, void *ud);
void smp_set_layout(bf_smp *h, const smp_layout *lay, uint64_t runtime_addr);

/* Frames kept per stack. A deeper stack keeps its innermost
 * SMP_MAX_DEPTH - 1 frames and then the marker frame h->trunc
 * ("<truncated>"), so every view and export shows the cut. */
#define SMP_MAX_DEPTH 4096
#define SMP_TORN_TRIES 12            /* reads of one sample before it counts invalid */
#define SMP_TORN_SPAN_NS 100000      /* ... all begun within this of the first */
#define SMP_TORN_SAME_READS 4        /* a torn read this many times the same ... */
#define SMP_TORN_SAME_NS 20000       /* ... over this long is a stopped thread's real stack */
#define SMP_SETTLE_TRIES 2000        /* BF_SMP_WANT_SETTLED: reads before giving up */
#define SMP_SETTLE_SPAN_NS 50000000  /* ... all begun within this of the first */
#define SMP_MAX_BYTECODE (1u << 18)  /* bytes of code read for the torn check */
#define SMP_MAX_THREADS 4096
#define SMP_MAX_INTERPS 64
#define SMP_MAX_STEPS (1 << 16)      /* frames + threads visited per sample */
#define SMP_MAX_CODE_MISSES 4096     /* new code objects read per sample */
#define SMP_CODE_TRUST_NS 1000000    /* a checked code-cache entry is trusted this long */
#define SMP_MAX_STR 4096
#define SMP_MAX_LINETABLE (1u << 20)

/* ==== Python thread names (pynames.c) ====================================
 * threading.Thread names read from each interpreter's
 * sys.modules["threading"]._active (ident -> Thread, Thread._name). Never on
 * the per-sample path: on attach, then when a thread without a known name
 * shows up (at most once per SMP_PYNAME_EVERY_NS; every SMP_PYNAME_RETRY_NS
 * while some thread stays unnamed). Every failure leaves names unknown. */

typedef struct smp_pyname {
  uint64_t ident;
  char *name; /* owned, UTF-8, at most SMP_PYNAME_LEN bytes */
} smp_pyname;

/* How an instance's attributes are found (smp_layout.nm.attr_mode). */
enum smp_attr_mode {
  SMP_ATTR_DICTOFFSET = 1, /* 3.8-3.10: dict at obj + tp_dictoffset */
  SMP_ATTR_VALUES_PTR = 2, /* 3.11: values / dict pointers before the object */
  SMP_ATTR_DORV = 3,       /* 3.12: one tagged dict-or-values pointer before it */
  SMP_ATTR_INLINE = 4      /* 3.13: values inline after the object, else dict */
};

#define SMP_PYNAME_EVERY_NS 1000000000LL  /* at most one lookup a second */
#define SMP_PYNAME_RETRY_NS 2000000000LL  /* re-look for unnamed threads (a late import threading) */
/* A thread runs a little before threading lists it in _active: a lookup
 * counts for a thread only if it began this long after the thread showed up
 * (until then the thread's name is pending). */
#define SMP_PYNAME_GRACE_NS 100000000LL
/* A thread's name is pending at most this long after it showed up; then it
 * takes its OS name (a program that never imports threading) */
#define SMP_PYNAME_PENDING_MAX_NS 3000000000LL
#define SMP_PYNAME_MAX 1024               /* names kept per lookup */
#define SMP_PYNAME_LEN 128                /* bytes kept of one name */
#define SMP_PYNAME_BUDGET 16384           /* remote reads per lookup */
#define SMP_DICT_MAX 8192                 /* entries scanned in one dict */

/* Run a lookup now; start_ns is the sample time it stands for (threads
 * first seen later than SMP_PYNAME_GRACE_NS before it are still to be looked
 * for). Replaces h->pn. */
void smp_pynames_refresh(bf_smp *h, int64_t start_ns);
/* Forget every name and cached address (attach, free). */
void smp_pynames_clear(bf_smp *h);
/* After attach: look up now; the next sample's threads count as looked for. */
void smp_pynames_attach(bf_smp *h);
/* Start of a sample (walker): run a due lookup. */
void smp_pynames_tick(bf_smp *h);
/* Walker, rare path: slot s (thread ident) is new or the cache changed. */
void smp_pynames_resolve(bf_smp *h, smp_tslot *s, uint64_t ident);
/* The thread-name layout of 3.minor (layouts.c). OUT: *out. -ENOTSUP if none. */
int smp_layout_names(int minor, struct smp_names_layout *out);
/* A str object as UTF-8 (walker.c). OUT: *out, malloc'd. */
int smp_read_str(bf_smp *h, uint64_t addr, char **out);

/* The interpreter pid runs, as a JSON object (interp.c): version and build
 * from h (attached), executable, libpython, prefix, soabi, ext_suffix.
 * OUT: *out (caller frees). Returns 0 or -ENOMEM. */
int smp_interp_json(const bf_smp *h, int pid, char **out);

/* tasks.c: pynames.c's bounded dict / attribute / int readers, and the
 * code cache (walker.c) for one frame's (function, line). */
int smp_pn_dict_get(bf_smp *h, uint64_t dict, const char *name, uint64_t *value);
int smp_pn_attr_get(bf_smp *h, uint64_t obj, const char *name, uint64_t *value);
/* tasks_py.c: every (key, value) of an instance's own attributes, on one
 * budget; fn returns non-zero to stop (then 1 is returned), else 0, -ENOENT
 * or -EIO. smp_pn_str_is: addr is a compact ASCII str equal to short s
 * (its read counts against the running call's budget). */
typedef int (*smp_pn_visit)(bf_smp *h, uint64_t key, uint64_t value, void *ud);
int smp_pn_attr_each(bf_smp *h, uint64_t obj, smp_pn_visit fn, void *ud);
int smp_pn_str_is(bf_smp *h, uint64_t addr, const char *s);
int smp_pn_long_read(bf_smp *h, uint64_t addr, uint64_t *out);
/* tasks_py.c: the entry index in the dict keys object keys of each of the
 * str keys names[0..n) (-1: absent). Fails (-EIO) past max_entries entries.
 * OUT: idx[n], *nentries (entries used, DK_ENTRIES' count). */
int smp_pn_keys_index(bf_smp *h, uint64_t keys, const char *const *names, int n, int *idx,
                      int max_entries, int64_t *nentries);
int smp_code_frame(bf_smp *h, uint64_t code, uint64_t instr, bf_smp_frame *out);

/* ==== end Python thread names ============================================ */

#endif
