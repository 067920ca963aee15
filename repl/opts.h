/* opts.h — option values that several commands parse the same way: a process
 * id (-p PID or a PID operand), --limit N, --thread/--since/--until, the
 * session a reading command works on and the end of its output. Each helper says what is wrong in one line on
 * stderr (bf_cli_error) and returns the exit status 2; 0 when the value is good.
 */
#ifndef BF_REPL_OPTS_H
#define BF_REPL_OPTS_H

#include "cli.h"
#include "inspect.h"
#include "out_file.h"
#include "store.h"

/* A process id: a positive integer up to the kernel's pid_max limit. OUT: *pid. */
int bf_opt_pid(const char *arg, int *pid);

/* After getopt: the process given once, either by -p (*pid already set) or as
 * the one operand argv[optind]. cmd names the command in the usage hint.
 * OUT: *pid. */
int bf_opt_pid_once(const char *cmd, int argc, char **argv, int optind_, int *pid);

/* --clock wall|cpu. OUT: *clock (arg itself, "wall" or "cpu"). */
int bf_opt_clock(const char *arg, const char **clock);

/* --rate HZ of a sampler: 1 .. 1000000. OUT: *rate_hz. */
int bf_opt_rate(const char *arg, double *rate_hz);

/* --ttl DURATION (e.g. 90s, 30m, 12h, 7d), > 0. OUT: *ttl_ns. */
int bf_opt_ttl(const char *arg, int64_t *ttl_ns);

/* --limit N: 1 .. 1000000 rows. OUT: *limit. */
int bf_opt_limit(const char *arg, int *limit);

/* getopt_long entries of the sample filter options --thread (t), --since (S)
 * and --until (U), for a command's struct option table. */
#define BF_OPTS_FILTER                                                                       \
  {"thread", required_argument, NULL, 't'}, {"since", required_argument, NULL, 'S'}, \
      {"until", required_argument, NULL, 'U'}

/* --since (which 'S') or --until (which 'U') as a time from the session start
 * ("2.5", "500ms"). OUT: f->since_ns or f->until_ns. */
int bf_opt_window(int which, const char *arg, bf_sample_filter *f);

/* The session a reading command works on: cli's store opened with flags, the
 * session argument arg (NULL: the REPL's current one) resolved into *id and,
 * when thread is not NULL, --thread resolved into f->thread_id. 0, or the exit
 * status (said on stderr, the store closed). OUT: *s, *id. */
int bf_opt_session_open(bf_cli *cli, int flags, const char *arg, const char *thread, bf_sample_filter *f,
                        bf_store **s, int64_t *id);

/* The end of a command that wrote to of: rc < 0 says the store's error; the
 * output is finished (kept only when rc >= 0) and s closed. Returns the exit
 * status (0 or 1). */
int bf_opt_output_done(bf_store *s, bf_out_file *of, int rc);

/* --native-threads LIST (a comma list of thread ids or name globs; implies
 * --native). OUT: *native = 1, *threads = arg. */
int bf_opt_native_threads(const char *arg, int *native, const char **threads);

/* --nonblocking and --native together are refused (native stacks stop threads). */
int bf_opt_native_blocking(int nonblocking, int native);

/* A view written to the terminal (stdout a tty, no -o FILE) fits its width:
 * *width becomes the terminal's columns when they are known, else is left. */
void bf_opt_term_width(const bf_cli *cli, const char *outp, int *width);

/* Options of the commands that look at a live process (top, live): py-spy's
 * letters. cmd names the command; dur is NULL for live (no --duration).
 * Returns -1 to go on, else the exit status. OUT: *pid, *o, *rate, *dur,
 * *with_idle, *limit. */
int bf_opt_inspect(const char *cmd, int argc, char **argv, int *pid, bf_inspect_opts *o, double *rate, int64_t *dur,
                int *with_idle, int *limit);

/* The peers' command lines for record: austin's and Tachyon's letters that
 * mean something else in bifocal (-i N, -s in austin's sense, -g with austin
 * flags, -C, -x, -t) and py-spy's flags bifocal lacks get one line naming the
 * peer's meaning and bifocal's spelling (returns 2); Tachyon's spellings with
 * the same meaning (-a, --mode wall|cpu|gil, --collapsed, --flamegraph,
 * --pstats, --gecko) are rewritten. Returns -1 to go on; OUT: *argc, *argv
 * (a static vector, valid until the next call). Options end at "--". */
int bf_opt_peer_record(const char *cmd, int *argc, char ***argv);

/* `bifocal attach [record options] PID` (Tachyon's): record -p PID. */
int bf_cmd_attach(bf_cli *cli, int argc, char **argv);

#endif
