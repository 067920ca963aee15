/* trace_run.h — `bifocal trace` without the command line: check the target
 * interpreter, find the collector built for it, create the traced session
 * (status "incomplete" until the runner writes it), run the program under
 * bifocal_trace's runner and pass its exit status on. Never prints: failures
 * come back as a one-line message and an exit status.
 */
#ifndef BF_TRACE_RUN_H
#define BF_TRACE_RUN_H

#include <limits.h>
#include <stdint.h>

#include "store.h"

typedef struct bf_trace_opts {
  const char *clock;   /* "wall" | "cpu" */
  const char *focus;   /* NULL: trace everything */
  const char *label, *commit; /* commit NULL: git rev-parse HEAD here */
  int builtins;        /* 0: --no-builtins */
  int memory;          /* 1: --memory (allocations per function and edge) */
  long tool_id;        /* -1: the runner picks */
  long records;        /* focus-mode ring size */
  int64_t ttl_ns;
  const char *db_path;
  char **cmd;          /* [launcher ...] python [interpreter options] (script | -m mod | -c cmd) ARGS;
                        * a launcher (chroot ROOT, env, nsenter ...) is every word before the
                        * first one named python[X.Y] */
  int ncmd;
} bf_trace_opts;

typedef struct bf_trace_plan {
  int interp;                 /* index of the interpreter in cmd (> 0 after a launcher) */
  int first;                  /* index of the program in cmd (after interpreter options) */
  char version[64], suffix[128], exe[PATH_MAX]; /* version "X.Y" only when from_files */
  int from_files;             /* version and suffix read from the interpreter's files, not asked */
  int boot_check;             /* neither read nor asked: the runner's bootstrap checks (a launcher
                               * script, a launcher command, a target in another root); version
                               * and suffix empty, extdir newline-separated */
  char extdir[PATH_MAX];      /* where _bifocal_trace<suffix> and bifocal_trace.py are */
  char commit[128];
  char *command;              /* cmd joined (malloc'd) */
  int64_t session_id;         /* after bf_trace_begin */
  char err[4 * PATH_MAX + 512]; /* why a step failed */
} bf_trace_plan;

/* What bf_trace_prepare found; not READY is also the exit status to use. */
typedef enum {
  BF_TRACE_READY = 0,
  BF_TRACE_NO_MEMORY = 1,
  BF_TRACE_UNTRACEABLE = 2,    /* not a command or an interpreter bifocal can trace */
  BF_TRACE_NOT_RUNNABLE = 127, /* the interpreter (or its launcher) does not run */
} bf_trace_prep;

/* Check the command and its interpreter, find the extension, note the commit.
 * Returns a bf_trace_prep, with p->err when not BF_TRACE_READY (the plan
 * carries its message, like a handle). Free with bf_trace_plan_free in every
 * case. */
int bf_trace_prepare(const bf_trace_opts *o, bf_trace_plan *p);

/* Create the traced session (status "incomplete") so a program killed
 * outright still leaves a trace of the attempt. OUT: p->session_id.
 * Errors on the store handle. */
int bf_trace_begin(bf_store *s, const bf_trace_opts *o, bf_trace_plan *p);

/* Run the program under the runner (the terminal's SIGINT/SIGQUIT reach the
 * program, as with system(3); SIGTERM/SIGHUP sent to this process are passed
 * on so the trace gets written). Returns the program's exit status (128+N
 * when killed by signal N); p->err is set when it could not be started.
 * With boot_check, the tracing directories and the database's directory are
 * also handed over as inherited O_PATH descriptors, so a target whose root
 * differs (a chroot, a container's mount namespace) loads the extension and
 * writes the database through them where the host paths do not exist. */
int bf_trace_exec(const bf_trace_opts *o, bf_trace_plan *p);

/* What became of a traced session (bf_trace_outcome). */
typedef enum {
  BF_TRACE_INCOMPLETE = 0, /* the program ended before its trace was written */
  BF_TRACE_WRITTEN = 1,
} bf_trace_fate;

/* What became of session_id: a bf_trace_fate, -ENOENT dropped by the runner
 * (the program could not be started), other negative errno on the handle. */
int bf_trace_outcome(bf_store *s, int64_t session_id);

void bf_trace_plan_free(bf_trace_plan *p);

/* In the target (the collector): while pushed, SQLite takes a relative
 * database name, and the -wal/-shm/-journal names made from it, relative to
 * the working directory as it is, instead of prefixing getcwd(), which fails
 * when the working directory is a directory handle from outside the
 * process's root (fchdir to a descriptor bifocal passed across a chroot).
 * Absolute names are unchanged. Process-wide: the caller keeps other threads
 * out (holds the GIL) until the pop. Returns 0 or -EIO; pop only after 0. */
int bf_trace_cwd_db_push(void);
void bf_trace_cwd_db_pop(void);

#endif
