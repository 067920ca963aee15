/* native_int.h — what native.c, native_unwind.c and native_threads.c share:
 * the limits, the per-thread snapshot, the symbol caches and the handle. */
#ifndef BF_NATIVE_INT_H
#define BF_NATIVE_INT_H

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <libunwind-ptrace.h>
#include <libunwind.h>

#include "pmap.h"
#include "clock.h"
#include "jsonw.h"
#include "map.h"
#include "native.h"
#include "procmaps.h"
#include "vec.h"
#include "smp_int.h" /* smp_forget_tid */

#define NAT_MAX_DEPTH 256               /* C frames unwound per thread */
#define NAT_SNAP_FIRST (64 * 1024)      /* stack bytes copied when nothing is known */
#define NAT_SNAP_MAX (1024 * 1024)      /* never copy more than this per stop */
#define NAT_SNAP_SLACK 512              /* past the deepest address the last unwind used */
#define NAT_HIST 1024                   /* log-linear stop-time buckets */
#define NAT_DETACH_WAIT_NS 1000000000LL /* bounded wait for a stop when detaching (a loaded host may take that long to run the tracee) */
#define NAT_MAX_IPS 200000              /* symbol cache bound: past it start over */
#define NAT_STOP_WAIT_NS 2000000LL      /* longest a stopped thread waits for the others */
#define NAT_FIRST_STOP_NS 100000000LL   /* longest a sample waits for its first stop */

enum { NT_RUNNING = 0, NT_STOPPED, NT_PENDING, NT_GONE };

typedef struct nat_code {
  bf_smp_code pub;
} nat_code;

/* One symbolised address: the frame it belongs to and what kind of frame. */
typedef struct nat_ip {
  uint64_t addr; /* the bf_pmap key */
  nat_code *code;
  int eval;   /* CPython's eval loop: replaced by Python frames */
  int interp; /* inside the interpreter's own object (libpython / python) */
} nat_ip;

typedef struct nat_map {
  uint64_t lo, hi, off;
  const char *path; /* interned, NULL for anonymous */
  int exec, writable;
  int obj; /* index into the handle's objs; NAT_OBJ_UNKNOWN until looked up, NAT_OBJ_NONE */
} nat_map;

#define NAT_OBJ_UNKNOWN (-1)
#define NAT_OBJ_NONE (-2)
#define NAT_MAX_OBJS 1024          /* ELF objects read per target */
#define NAT_MAX_PART (16u << 20)   /* bytes of one unnamed function scanned for jumps */

/* An unnamed function (FDE) of an object that holds the eval loop, judged
 * once: is it a GCC-split part of _PyEval_EvalFrameDefault? */
typedef struct nat_part {
  uint64_t start; /* vaddr of the FDE's first byte */
  int eval;
} nat_part;

/* One ELF object mapped by the target, read from the file behind the mapping
 * (/proc/PID/map_files: right whatever root the target runs in): its
 * function symbols, its unwind index and, when it holds CPython's eval loop,
 * where that lies. Addresses are the file's (vaddr); runtime = vaddr + bias. */
typedef struct nat_obj {
  const char *path; /* interned: the mapping's path as we see it */
  uint64_t bias;
  smp_elf elf;
  smp_elf_sym *syms;
  size_t nsyms;
  uint64_t hdr, table, nfde; /* .eh_frame_hdr and its search table; nfde 0: none */
  uint64_t lo, hi;           /* span of the PT_LOAD segments */
  uint64_t ev_lo, ev_hi;     /* _PyEval_EvalFrameDefault as named (0, 0: none) */
  uint64_t *ev_jumps;        /* where its rel32 jumps out of itself land, sorted */
  size_t nev_jumps;
  nat_part *parts;
  size_t nparts, cap_parts;
} nat_obj;

/* Read-only pages of the target (unwind tables, code) cached for libunwind:
 * a lookup in .eh_frame_hdr reads word by word. */
#define NAT_PAGES 512
#define NAT_PAGE 4096
typedef struct nat_page {
  uint64_t addr; /* page address + 1; 0 = empty */
  unsigned char data[NAT_PAGE];
} nat_page;

typedef struct nat_thread {
  int tid;
  int state; /* NT_* */
  int group_stop;
  int snap_ok;
  void *upt;
  int64_t t_interrupt; /* PTRACE_INTERRUPT sent */
  int64_t t_stopped;   /* its stop seen by waitpid: the stop starts here */
  struct user_regs_struct regs;
  unsigned char *stack;
  size_t stack_len, stack_cap;
  uint64_t stack_lo;       /* address of stack[0] (the stack pointer) */
  uint64_t map_lo, map_hi; /* the mapping the stack pointer lies in */
  uint64_t deepest;        /* highest stack address the last unwind read */
  int64_t stops, stopped_ns, max_ns;
  char name[32];
  int stat_fd;       /* /proc/PID/task/TID/stat, -1 until opened */
  uint32_t run_state; /* BF_SMP_ON_CPU / BF_SMP_IDLE read just before the stop */
  int64_t state_sample; /* the sample run_state was read for */
} nat_thread;

/* Stop figures of a thread that has gone (kept for the session's record). */
typedef struct nat_tstat {
  int tid;
  char name[32];
  int64_t stops, stopped_ns, max_ns;
} nat_tstat;

#define NAT_MAX_TSTATS 256 /* threads listed in extra_json; the rest are summed */

typedef struct nat_tname {
  int tid;
  char name[32];
  int64_t read_ns, used_ns;
  int stat_fd, sched_fd; /* -1 until opened */
} nat_tname;

/* One unwound C frame before merging. */
typedef struct nat_frame {
  const nat_ip *ip;
} nat_frame;

struct bf_smp_native {
  bf_smp *h;
  int pid;
  char err[512];
  /* thread filter */
  char *filter;
  char **globs;
  size_t nglobs;
  long *ftids;
  size_t nftids;
  /* libunwind */
  unw_addr_space_t as;
  void *upt_pid;
  /* threads */
  nat_thread *th;
  size_t nth, cap_th;
  int *want;
  size_t nwant, cap_want;
  /* maps and interned paths */
  nat_map *maps;
  size_t nmaps, cap_maps;
  char **paths;
  size_t npaths, cap_paths;
  const char *interp_path;
  char root[512]; /* the target's root as we see it ("" when it is ours) */
  size_t root_len;
  nat_obj *objs; /* ELF objects by first use (NAT_MAX_OBJS at most) */
  size_t nobjs, cap_objs;
  int64_t maps_sample; /* sample count at the last refresh */
  /* symbol caches */
  bf_pmap ips; /* of nat_ip, by address; never grows during one unwind */
  nat_code **codes; /* every code entry (owned), in creation order */
  size_t ncodes, cap_codes;
  bf_map3 code_map;  /* (library path, name hash, collision index) → index into codes */
  /* output */
  bf_smp_thread *out;
  size_t nout, cap_out;
  bf_smp_frame *frames;
  size_t nframes, cap_frames;
  nat_frame *cf;
  size_t cap_cf;
  /* launched child */
  int leader_exited, leader_status;
  /* statistics */
  int64_t samples, stops, stopped_ns, max_ns;
  int64_t reinjected, unwind_failed, truncated, mismatch, realigned, gone, late;
  int64_t stop_wait_ns;
  nat_tstat *retired;
  size_t nretired, cap_retired;
  int64_t omitted; /* gone threads past NAT_MAX_TSTATS */
  int unwind_complete; /* the last unwind reached the stack's root */
  int seized_any;
  nat_tname *names; /* --native-threads globs: thread names by tid */
  size_t nnames, cap_names;
  sigset_t old_mask; /* SIGCHLD is blocked while the handle lives */
  int mask_set;
  uint64_t hist[NAT_HIST];      /* stop: seen stopped -> resumed */
  uint64_t hist_lat[NAT_HIST];  /* latency: interrupt sent -> seen stopped */
  nat_page *pages; /* NAT_PAGES, direct-mapped; emptied when maps change */
  /* the snapshot the accessors serve (set around one unwind) */
  nat_thread *cur;
};

/* Sets n->err; returns rc. */
int nat_seterr(bf_smp_native *n, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Shared between the three files (each defined once; see there). */
/* libunwind's accessors over the snapshot (native_unwind.c). */
void nat_accessors(unw_accessors_t *acc);
void nat_reap_events(bf_smp_native *n);
int nat_selected(bf_smp_native *n, const bf_smp_thread *t);
nat_thread *nat_seize_wanted(bf_smp_native *n, size_t i, int *rc);
void nat_read_run_state(bf_smp_native *n, nat_thread *t);
nat_thread *nat_thread_find(bf_smp_native *n, int tid);
int nat_collect_stops(bf_smp_native *n, size_t pending, int64_t hold_ns);
void nat_resume(bf_smp_native *n, nat_thread *t);
const char *nat_thread_name(bf_smp_native *n, int tid);
nat_tname *nat_tinfo(bf_smp_native *n, int tid);
ssize_t nat_proc_read(bf_smp_native *n, int tid, int *fd, const char *what, char *buf, size_t len);
uint32_t nat_stat_state(const char *buf);
void nat_thread_drop(bf_smp_native *n, nat_thread *t);
int nat_parse_filter(bf_smp_native *n, const char *spec);
size_t nat_unwind(bf_smp_native *n, nat_thread *t);
int nat_merge(bf_smp_native *n, const bf_smp_frame *py, size_t np, size_t nc);
int nat_push_out_frame(bf_smp_native *n, const bf_smp_code *code, int32_t line, uint32_t fl);
int nat_maps_refresh(bf_smp_native *n);
const char *nat_intern_path(bf_smp_native *n, const char *p);
/* Read where the target's root lies in our view (/proc/PID/root) into n->root. */
void nat_read_root(bf_smp_native *n);
/* A path as we see it, as the target sees it: without the target's root in
 * front (a chroot or container's files seen from the host). Borrowed from p. */
const char *nat_target_path(const bf_smp_native *n, const char *p);
const nat_map *nat_maps_find(bf_smp_native *n, uint64_t addr);
void nat_objs_free(bf_smp_native *n);

/* Targets of the rel32 jumps (jmp, jcc; not call) encoded at any byte of
 * code[0..len), which is loaded at va, that land outside [va, va+len).
 * Every byte offset is tried (no decoding): an object's own code is the
 * input, and a stray match only adds a candidate that must be confirmed.
 * OUT: *out (caller frees; sorted, unique), *n. Returns 0 or -ENOMEM. */
int nat_jump_targets(const unsigned char *code, size_t len, uint64_t va, uint64_t **out, size_t *n);
/* 1 when some rel32 jump (as above) in code[0..len) at va lands in [lo, hi). */
int nat_jumps_into(const unsigned char *code, size_t len, uint64_t va, uint64_t lo, uint64_t hi);
/* Is the unnamed function [start, end) (vaddrs) a split part of the eval
 * loop [ev_lo, ev_hi) whose outward jumps are ev_jumps[0..nj)? It is when a
 * jump of the named part lands in it and a jump of it lands back in the
 * named part (GCC's hot/cold and partial-inlining splits jump both ways;
 * a helper the eval loop tail-calls never jumps back into it). code: its
 * bytes (len = end - start, or fewer when the file has fewer). */
int nat_is_eval_part(uint64_t ev_lo, uint64_t ev_hi, const uint64_t *ev_jumps, size_t nj,
                     uint64_t start, uint64_t end, const unsigned char *code, size_t len);

#endif
