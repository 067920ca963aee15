/* opts.c — option values shared by several commands (see opts.h). */
#include "opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

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

int bf_opt_clock(const char *arg, const char **clock) {
  if (strcmp(arg, "wall") && strcmp(arg, "cpu")) {
    bf_cli_error("bad --clock '%s' (use wall or cpu)", arg);
    return 2;
  }
  *clock = arg;
  return 0;
}

int bf_opt_rate(const char *arg, double *rate_hz) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (errno || *end || !(v >= 1 && v <= 1e6)) {
    bf_cli_error("bad --rate '%s' (a number of Hz from 1 to 1000000)", arg);
    return 2;
  }
  *rate_hz = v;
  return 0;
}

int bf_opt_ttl(const char *arg, int64_t *ttl_ns) {
  int64_t v;
  if (bf_parse_duration_ns(arg, &v) < 0 || v <= 0) {
    bf_cli_error("bad --ttl '%s' (use e.g. 90s, 30m, 12h, 7d)", arg);
    return 2;
  }
  *ttl_ns = v;
  return 0;
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

/* Options shared by top and live: py-spy's letters. Returns -1 to go on, else
 * the exit status. OUT: *pid, *o, *rate, *dur (top only, NULL for live),
 * *with_idle, *limit. */
int bf_opt_native_threads(const char *arg, int *native, const char **threads) {
  if (arg[strspn(arg, ", ")] == 0) {
    bf_cli_error("bad --native-threads '%s' (a comma list of thread ids or name globs)", arg);
    return 2;
  }
  *native = 1;
  *threads = arg;
  return 0;
}

int bf_opt_native_blocking(int nonblocking, int native) {
  if (nonblocking && native) {
    bf_cli_error("--native stops each thread to unwind its C stack: drop --nonblocking or --native");
    return 2;
  }
  return 0;
}

int bf_opt_look(const char *cmd, int argc, char **argv, int *pid, bf_look_opts *o, double *rate,
                    int64_t *dur, int *with_idle, int *limit) {
  static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
                                       {"duration", required_argument, NULL, 'd'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"limit", required_argument, NULL, 'L'},
                                       {"gil", no_argument, NULL, 'g'},
                                       {"idle", no_argument, NULL, 'i'},
                                       {"native", no_argument, NULL, 'n'},
                                       {"native-threads", required_argument, NULL, 'N'},
                                       {"subprocesses", no_argument, NULL, 's'},
                                       {"nonblocking", no_argument, NULL, 'B'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c, nonblocking = 0;
  char *end;
  *pid = 0;
  while ((c = getopt_long(argc, argv, dur ? "p:d:r:ginsh" : "p:r:ginsh", opts, NULL)) != -1) {
    switch (c) {
      case 'p':
        if (bf_opt_pid(optarg, pid)) return 2;
        break;
      case 'd':
        if (!dur) {
          bf_cli_error("%s runs until q or Ctrl-C and takes no --duration (use `bifocal top -d S`)", cmd);
          return 2;
        }
        if (bf_parse_duration_ns(optarg, dur) < 0 || *dur <= 0) {
          bf_cli_error("bad --duration '%s' (use e.g. 5, 5s, 1m; the database option is --db)", optarg);
          return 2;
        }
        break;
      case 'r':
        errno = 0;
        *rate = strtod(optarg, &end);
        if (errno || *end || !(*rate >= 1 && *rate <= 100000)) {
          bf_cli_error("bad --rate '%s' (1 to 100000 Hz)", optarg);
          return 2;
        }
        break;
      case 'L': {
        errno = 0;
        long v = strtol(optarg, &end, 10);
        if (errno || *end || v <= 0 || v > 100000) {
          bf_cli_error("bad --limit '%s' (a number of rows, 1 or more)", optarg);
          return 2;
        }
        *limit = (int)v;
        break;
      }
      case 'g': o->gil_only = 1; break;
      case 'i': *with_idle = 1; break;
      case 'n': o->native = 1; break;
      case 'N':
        if (bf_opt_native_threads(optarg, &o->native, &o->native_threads)) return 2;
        break;
      case 's': o->subprocesses = 1; break;
      case 'B': nonblocking = 1; break;
      case 'h': bf_cli_usage(bf_cli_find(cmd), stdout); return 0;
      default: return 2;
    }
  }
  if (bf_opt_native_blocking(nonblocking, o->native)) return 2;
  if (bf_opt_pid_once(cmd, argc, argv, optind, pid)) return 2;
  return -1;
}

void bf_opt_term_width(const bf_cli *cli, const char *outp, int *width) {
  if (!cli->stdout_tty || outp) return;
  struct winsize ws;
  if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) *width = ws.ws_col;
}
