/* opts.h — option values that several commands parse the same way: a process
 * id (-p PID or a PID operand), --limit N, --thread/--since/--until. Each helper says what is wrong in one line on
 * stderr (bf_cli_error) and returns the exit status 2; 0 when the value is good.
 */
#ifndef BF_REPL_OPTS_H
#define BF_REPL_OPTS_H

#include "store.h"

/* A process id: a positive integer up to the kernel's pid_max limit. OUT: *pid. */
int bf_opt_pid(const char *arg, int *pid);

/* After getopt: the process given once, either by -p (*pid already set) or as
 * the one operand argv[optind]. cmd names the command in the usage hint.
 * OUT: *pid. */
int bf_opt_pid_once(const char *cmd, int argc, char **argv, int optind_, int *pid);

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

#endif
