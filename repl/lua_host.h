/* lua_host.h — the host of the embedded Lua 5.4 interpreter, shared by
 * `bifocal run` and the REPL: a state with the standard libraries and the
 * `bifocal` module (core/lua_bifocal.h), the sandbox, the memory cap, the
 * deadline and Ctrl-C, script search, and the printing of values and of the
 * verdict table.
 */
#ifndef BF_LUA_HOST_H
#define BF_LUA_HOST_H

#include <stddef.h>

#include <lua.h>

#include "err.h"

typedef struct bf_lua_opts {
  const char *db_path; /* database of bifocal.open() with no argument; borrowed, must outlive the state */
  int sandbox;         /* 1: no os.execute/io.popen/package.loadlib/C modules/debug hooks, no
                          binary chunks by any loader (load, loadfile, dofile, require); files
                          may be written only under out_dir */
  const char *out_dir; /* where a sandboxed script may write (NULL: nowhere); must exist */
  double timeout_s;    /* stop a running chunk after this many seconds; 0 = never */
  size_t memory_bytes; /* cap on the interpreter's memory; 0 = BF_LUA_DEFAULT_MEMORY */
} bf_lua_opts;

#define BF_LUA_DEFAULT_MEMORY ((size_t)1 << 30) /* 1 GiB */

/* A fresh interpreter with the standard libraries, `bifocal` as a global and
 * the sandbox applied as o says. Whatever the sandbox, the string matcher,
 * string.rep, table.sort and table.move check the deadline and Ctrl-C while
 * a chunk runs, and the state's memory is capped (o->memory_bytes). Returns
 * NULL on failure with err (may be NULL) set: -ENOMEM, or -ENOTDIR when
 * --out is not a directory. Caller closes with lua_close. */
lua_State *bf_lua_new(const bf_lua_opts *o, bf_err *err);

/* What running a script or a chunk came to. bf_lua_run_file's value is also
 * `bifocal run`'s exit status. */
typedef enum {
  BF_LUA_OK = 0,           /* ran (run_file: and every check held) */
  BF_LUA_CHECK_FAILED = 1, /* bf_lua_run_file: a check failed */
  BF_LUA_INCOMPLETE = 1,   /* bf_lua_exec: the chunk ends early (<eof>): read more and call again */
  BF_LUA_ERROR = 2,        /* a script error: err->msg says it (cut at BF_ERR_MSG_MAX) */
} bf_lua_status;

/* Run a script file with arg[0] = path and arg[1..argc] = argv (also passed as
 * `...`), then print the verdict table when checks were made and not printed.
 * Returns BF_LUA_OK, BF_LUA_CHECK_FAILED or BF_LUA_ERROR, with err (may be
 * NULL) then holding "file:line: message". */
int bf_lua_run_file(lua_State *L, const char *path, int argc, char **argv, bf_err *err);

/* bf_lua_run_file as the main program (`bifocal run`), then lua_close(L):
 * L is closed on return. A watchdog thread holds the budget outside the
 * interpreter's hook, for every C call, finalizer and message handler: at
 * the deadline (--timeout) or on SIGINT/SIGTERM the chunk stops at its next
 * instruction or allocation (a SIGALRM every 50 ms also cuts a blocking read
 * short), and 2 s later, if it still runs (a finalizer that loops: Lua runs
 * no hooks there), the process exits with a message; a second Ctrl-C exits
 * at once. The previous handlers are restored after. Same results as
 * bf_lua_run_file. */
int bf_lua_run_main(lua_State *L, const char *path, int argc, char **argv, bf_err *err);

/* Load and run one chunk of source (chunkname e.g. "=repl"); when print_results
 * is set, the chunk is first tried as "return CHUNK" and its values printed.
 * Returns BF_LUA_OK, BF_LUA_INCOMPLETE (ends at <eof>: read more and call
 * again) or BF_LUA_ERROR with err (may be NULL) set. */
int bf_lua_exec(lua_State *L, const char *chunk, const char *chunkname, int print_results, bf_err *err);

/* Where `bifocal run NAME` finds a script: NAME itself when readable or when it
 * has a '/', else $BIFOCAL_SCRIPTS/NAME, then the installed scripts directory
 * (beside the executable) — or, for a binary inside the build tree only, the
 * source tree's scripts/. OUT: buf (the path to use, possibly NAME). */
const char *bf_lua_find_script(const char *name, char *buf, size_t len);

/* Call fn with the name of every shipped script (NAME.lua) in the directories
 * bf_lua_find_script searches (a name may repeat across directories). */
void bf_lua_script_names(void (*fn)(void *ud, const char *name), void *ud);

/* Async-signal-safe: make the running chunk fail at its next instruction
 * check with "interrupted". bf_lua_exec/bf_lua_run_file clear it on entry. */
void bf_lua_interrupt(void);

#endif
