/* opts.c — option values shared by several commands (see opts.h). */
#include "opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

int bf_opt_pid(const char *arg, int *pid) {
  char *end;
  errno = 0;
  long v = arg ? strtol(arg, &end, 10) : 0;
  if (!arg || errno || *end || v <= 0 || v > 4194304) {
    bf_cli_error("'%s' is not a process id (expected a positive integer)", arg ? arg : "");
    return 2;
  }
  *pid = (int)v;
  return 0;
}

int bf_opt_pid_once(const char *cmd, int argc, char **argv, int optind_, int *pid) {
  if (optind_ < argc && *pid) {
    bf_cli_error("give the process once: -p PID or PID, not both");
    return 2;
  }
  if (optind_ + (*pid ? 0 : 1) != argc) {
    bf_cli_error("%s needs one process id (usage: bifocal %s -p PID)", cmd, cmd);
    return 2;
  }
  return *pid ? 0 : bf_opt_pid(argv[optind_], pid);
}

int bf_opt_limit(const char *arg, int *limit) {
  char *end;
  long v = strtol(arg, &end, 10);
  if (*end || v <= 0 || v > 1000000) {
    bf_cli_error("bad --limit '%s' (a positive number)", arg);
    return 2;
  }
  *limit = (int)v;
  return 0;
}

int bf_opt_window(int which, const char *arg, bf_sample_filter *f) {
  int64_t ns;
  if (bf_parse_duration_ns(arg, &ns) < 0) {
    bf_cli_error("bad --%s '%s' (seconds from the session start, e.g. 2.5 or 500ms)",
                 which == 'S' ? "since" : "until", arg);
    return 2;
  }
  if (which == 'S') f->since_ns = ns;
  else f->until_ns = ns;
  return 0;
}

int bf_opt_session_open(bf_cli *cli, int flags, const char *arg, const char *thread, bf_sample_filter *f,
                        bf_store **s, int64_t *id) {
  int rc = bf_cli_open_store(cli, flags, s);
  if (rc) return rc;
  if ((rc = bf_cli_session_arg(cli, *s, arg, id)) ||
      (thread && (rc = bf_cli_thread_arg(*s, *id, thread, &f->thread_id)))) {
    bf_store_close(*s);
    *s = NULL;
  }
  return rc;
}

int bf_opt_output_done(bf_store *s, bf_out_file *of, int rc) {
  if (rc < 0) bf_cli_error("%s", bf_store_errmsg(s));
  int crc = bf_out_close(of, rc >= 0);
  bf_store_close(s);
  return rc < 0 || crc ? 1 : 0;
}
