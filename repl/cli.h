/* cli.h — the `bifocal` command front: shared context and the command table.
 *
 * Each command lives in its own repl/cmd_<name>.c and is listed once in
 * repl/commands.c. Commands return the process exit status and report errors
 * once, as one line on stderr (bf_cli_error).
 */
#ifndef BF_CLI_H
#define BF_CLI_H

#include <stdarg.h>
#include <stdio.h>

#include "store.h"

typedef struct bf_cli {
  const char *db_path;   /* --db DB (-D DB), else $BIFOCAL_DB, else ./bifocal.db */
  int db_named;          /* db_path came from --db or $BIFOCAL_DB, not the default */
  int stdout_tty;        /* stdout is a terminal */
  int color;             /* colour allowed: tty and no NO_COLOR */
  const char *cmdline;   /* the whole bifocal command line, space-joined (audit) */
  int in_repl;           /* running inside the REPL */
  long long current_session; /* REPL `use ID`; 0 = none */
} bf_cli;

/* argv[0] is the command name; getopt state is reset before each call. */
typedef int (*bf_cmd_fn)(bf_cli *cli, int argc, char **argv);

typedef struct bf_cmd {
  const char *name;
  bf_cmd_fn fn;
  const char *usage;   /* "sessions [--json]" */
  const char *summary; /* one line */
  const char *help;    /* longer help text, may be NULL */
} bf_cmd;

extern const bf_cmd bf_cmds[]; /* terminated by {NULL} */

const bf_cmd *bf_cli_find(const char *name);

/* One line "bifocal: <message>" on stderr. */
void bf_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bf_cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The command-line remedy for a library message (cli_hints.c), which
 * bf_cli_error and bf_cli_warn add as " (hint)"; NULL when none. Static. */
const char *bf_cli_hint(const char *msg);

/* Open cli->db_path with flags; on failure prints one line and returns non-zero
 * (the exit status to use). OUT: *out. */
int bf_cli_open_store(bf_cli *cli, int flags, bf_store **out);

/* Resolve a session argument (id or label); prints the error itself.
 * Returns 0 or an exit status. OUT: *id. */
int bf_cli_session_arg(bf_cli *cli, bf_store *s, const char *arg, int64_t *id);

/* Resolve a --thread argument (native thread id or thread name) of session sid
 * to the store's thread id; prints the error itself. Returns 0 or an exit
 * status. OUT: *thread_id. */
int bf_cli_thread_arg(bf_store *s, int64_t sid, const char *arg, int64_t *thread_id);

/* Print usage of cmd to f: usage line, summary, help, every option (help.c). */
void bf_cli_usage(const bf_cmd *cmd, FILE *f);

/* `help` arguments: `help CMD`, `help --man` (roff), `help --completion
 * bash|zsh`. Returns the exit status, or -1 for plain `help` (the command list). */
int bf_cli_help(int argc, char **argv);

/* How many of cmd's leading arguments are sessions, from its usage line
 * ("replay ID" 1, "diff A B" 2, "push SESSION..." -1: any; REPL `use` 1). */
int bf_cli_session_args(const char *cmd);

/* `help --sessions`: the database's session labels and ids, newest first,
 * one a line, for completion; nothing when there is no database. Returns
 * the exit status. */
int bf_cli_complete_sessions(const bf_cli *cli, FILE *f);

/* Call fn with each long option of cmd (from the help table). */
void bf_cli_option_names(const char *cmd, void (*fn)(void *ud, const char *opt), void *ud);

/* The completion values of option opt ("--view") of cmd: a space list of
 * words, "@file", "@dir", or NULL (free value or none). Static. */
const char *bf_cli_option_values(const char *cmd, const char *opt);

/* Options of a command that takes only --json and --help (sessions, audit).
 * Returns -1 to go on (*json set), else the exit code (help printed: 0;
 * bad option or argument, said on stderr: 2). */
int bf_cli_json_only(const char *cmd, int argc, char **argv, int *json);

/* ---- `record -o FILE` outputs (output.c) ---- */
/* A row of core/formats.h's table with the BF_FMT_RECORD role; NULL = none. */
typedef const struct bf_format *bf_cli_out_kind;

/* The output kind for path: --format (format != NULL) wins, else the file's
 * extension. Returns 0, or prints one line and returns 2. OUT: *kind. */
int bf_cli_out_kind_of(const char *path, const char *format, bf_cli_out_kind *kind);
/* "flame graph", "pprof profile", ... (static). */
const char *bf_cli_out_kind_name(bf_cli_out_kind kind);
/* Write session_id of s (tree: with its subprocesses' sessions) as kind to
 * path ("-" = stdout) atomically; on failure prints one line, leaves any old
 * file, returns 1. */
int bf_cli_write_output(bf_store *s, int64_t session_id, bf_cli_out_kind kind, const char *path, int tree);

/* Run one command line (argv[0] = command) — used by main and the REPL. */
int bf_cli_dispatch(bf_cli *cli, int argc, char **argv);

#endif
