/* views_int.h — internals shared by the view and export modules of core/:
 * one aggregation of a session into weighted stacks (sampled and imported
 * sessions from their samples; traced sessions from caller→callee edges),
 * and an atomic "write to temp file, then rename" helper. Not public. */
#ifndef BF_VIEWS_INT_H
#define BF_VIEWS_INT_H

#include <stdint.h>
#include <stdio.h>

#include "store.h"

typedef struct bf_wstack {
  int32_t thread;    /* index into bf_wstacks.threads */
  uint32_t depth;    /* frames, outermost first, at fids/lines[off .. off+depth) */
  size_t off;
  int64_t count;     /* samples (traced: estimated calls on this path) */
  double weight;     /* ns for sampled and traced sessions, samples for imports */
  int64_t stack_id;  /* store stack id (0 for traced paths); equal ids share frames */
} bf_wstack;

typedef struct bf_wthread {
  int64_t id;         /* store thread id (0 for traced "all threads") */
  int64_t native_tid;
  char *name;         /* owned, may be NULL */
  int64_t count;      /* samples of this thread in the filter with a stack */
  double weight;
  int64_t empty_count; /* samples of this thread without any Python frame */
  double empty_weight;
} bf_wthread;

typedef struct bf_wstacks {
  bf_session_info *info; /* owned */
  bf_wstack *v;
  size_t n, cap;
  int64_t *fids, *lines; /* frames of every stack */
  size_t nf, fcap;
  bf_wthread *threads;
  size_t nthreads;
  int traced;            /* stacks were rebuilt from trace edges (approximate) */
  int by_weight;         /* shares use weight (cpu clock, imports, traced) */
  int64_t total_count;   /* every sample in the filter, empty stacks included */
  double total_weight;
  int64_t empty_count;   /* of which without any Python frame (in no row; see threads) */
  double empty_weight;
  const char *unit;      /* weight's unit when not the kind's (static: "bytes" for memory), else NULL */
} bf_wstacks;

/* Aggregate session into distinct (thread, stack) rows. f may be NULL.
 * Traced sessions: stacks are rebuilt from caller→callee edges (recursion cut,
 * children scaled by the caller's share of its callee's time), one thread.
 * OUT: *out (free with bf_wstacks_free). */
int bf_wstacks_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_wstacks **out);
/* f->by_opcode (record --opcodes sessions): a stack whose samples name the
 * leaf's instruction ends in one more frame of pseudo function id
 * BF_WSTACK_OP_FID(opcode), no store function: name it with bf_opname. */
#define BF_WSTACK_OP_FID(op) (-1000 - (int64_t)(op))
#define BF_WSTACK_OP_OF(fid) ((fid) <= -1000 && (fid) > -1256 ? (int)(-1000 - (fid)) : -1)
void bf_wstacks_free(bf_wstacks *w);

/* record --memory sessions as weighted stacks (view_memory.c): weight =
 * bytes of resident (anon: anonymous resident) growth charged to the stack,
 * count = the changes that grew; shrinks are in no row. -ENODATA (message
 * set) for a session without memory rows. OUT: *out (bf_wstacks_free). */
int bf_wstacks_load_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, int anon,
                           bf_wstacks **out);

/* The value a share is computed from. */
static inline double bf_wstack_value(const bf_wstacks *w, const bf_wstack *st) {
  return w->by_weight ? st->weight : (double)st->count;
}

/* Thread display name: "name (tid)" or "thread tid" into buf. */
void bf_wthread_label(const bf_wthread *t, char *buf, size_t len);

/* The task name of a thread `record --async` stored for an asyncio task
 * ("task:NAME" with a negative id, view_tasks.c), borrowed from name; NULL
 * for a real thread. */
const char *bf_task_name(const char *name, int64_t native_tid);

/* Shorten a path to its last components so it fits in max columns. */
const char *bf_short_file(const char *f, size_t max);

/* "qualname  file:line" in at most width columns into buf: the file is
 * shortened to its base name, then dropped; the name is cut only when it
 * alone is too long. */
void bf_fit_func(char *buf, size_t len, const char *qualname, const char *file, int64_t line, int width);

/* Write str cut to at most width columns (UTF-8 code points; "…" marks a cut). */
void bf_put_fit(FILE *out, const char *str, int width);

/* A view's title line without its newline: "what · <session line>" in bold
 * (with color), cut to width columns. */
void bf_put_title(FILE *out, const char *what, const bf_session_info *info, int width, int color);

/* Write str with HTML escaping (&, <, >, ", '). */
void bf_html_str(FILE *out, const char *s);

/* Write the flame HTML page for b; with base (not NULL) a differential flame
 * graph (widths from b, colour from the change of share since base). */
int bf_flame_write(bf_store *s, const bf_wstacks *b, const bf_wstacks *base, const char *title,
                   const char *subtitle, FILE *out);

/* "session 12 · sampled · cpu clock · all · 1000 Hz · python 3.12.1" into buf,
 * with " · <start> UTC" when with_date. */
void bf_session_line(const bf_session_info *in, int with_date, char *buf, size_t len);

#endif
