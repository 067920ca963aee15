/* opts.c — option values shared by several commands (see opts.h). */
#include "opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>

#include "cli.h"
#include "util.h"

static int is_number(const char *s);

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
  /* Tachyon's units: 10khz, 500hz, 1mhz */
  if (!errno && end != arg && strcasecmp(end, "hz") == 0) end += 2;
  else if (!errno && end != arg && strcasecmp(end, "khz") == 0) end += 3, v *= 1e3;
  else if (!errno && end != arg && strcasecmp(end, "mhz") == 0) end += 3, v *= 1e6;
  if (errno || *end || !(v >= 1 && v <= 1e6)) {
    bf_cli_error("bad --rate '%s' (Hz from 1 to 1000000, e.g. 1000, 500hz, 10khz)", arg);
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

int bf_opt_inspect(const char *cmd, int argc, char **argv, int *pid, bf_inspect_opts *o, double *rate,
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
  /* austin's/Tachyon's -i N (interval) beside -p: never read as --idle and a PID */
  int has_pid = 0;
  for (int i = 1; i < argc; i++) has_pid |= strcmp(argv[i], "-p") == 0 || strncmp(argv[i], "--pid", 5) == 0;
  for (int i = 1; has_pid && i + 1 < argc; i++)
    if (strcmp(argv[i], "-i") == 0 && is_number(argv[i + 1])) {
      double us = strtod(argv[i + 1], NULL);
      bf_cli_error("-i %s: austin's and Tachyon's -i is the sampling interval (%s µs); bifocal's -i is --idle, "
                   "and the rate is -r HZ (here -r %.0f)", argv[i + 1], argv[i + 1], us > 0 ? 1e6 / us : 1000);
      return 2;
    }
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

/* ---- the peers' command lines (py-spy, austin, Tachyon) ---------------------- */

static int is_number(const char *s) {
  char *end;
  if (!s || !*s) return 0;
  errno = 0;
  double v = strtod(s, &end);
  (void)v;
  return !errno && *end == 0;
}

/* An austin-only sign on the line: a flag austin has and py-spy/bifocal do not. */
static int austin_sign(int argc, char **argv, int end) {
  for (int i = 1; i < end; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-C") == 0 || strcmp(a, "--children") == 0 || strcmp(a, "-x") == 0 ||
        strcmp(a, "--exposure") == 0 || strcmp(a, "-m") == 0 /* --memory is bifocal's own too */ ||
        strcmp(a, "-P") == 0 || strcmp(a, "--pipe") == 0 || strcmp(a, "--sleepless") == 0 ||
        strcmp(a, "-b") == 0 || strcmp(a, "--binary") == 0 || strcmp(a, "-w") == 0 || strcmp(a, "--where") == 0)
      return 1;
    if (strcmp(a, "-i") == 0 && i + 1 < argc && is_number(argv[i + 1])) return 1;
  }
  return 0;
}

static char *peer_argv[512];

int bf_opt_peer_record(const char *cmd, int *argc, char ***argv) {
  int n = *argc, end = n, out = 0;
  char **a = *argv;
  for (int i = 1; i < n; i++) /* options end at "--" */
    if (strcmp(a[i], "--") == 0) {
      end = i;
      break;
    }
  if (n >= (int)(sizeof peer_argv / sizeof *peer_argv) - 8) return -1;
  /* austin's order: no "--", the command right after the options; the
   * command's own arguments are then not ours to read */
  int austin_order = 0;
  if (end == n)
    for (int i = 1; i < n; i++) {
      const char *x = a[i];
      if (x[0] != '-') {
        austin_order = 1;
        end = i;
        break;
      }
      static const char *const with_value[] = {"-p", "-r", "-d", "-o", "-f", "-x", "--pid", "--rate",
                                               "--duration", "--output", "--format", "--clock", "--label",
                                               "--commit", "--ttl", "--native-threads", "--mode", NULL};
      int k = 0;
      while (with_value[k] && strcmp(x, with_value[k]) != 0) k++;
      if (with_value[k] || ((strcmp(x, "-i") == 0 || strcmp(x, "-t") == 0) && i + 1 < n && is_number(a[i + 1])))
        i++;
    }
  int austin = austin_order || austin_sign(n, a, end);
  peer_argv[out++] = a[0];
  for (int i = 1; i < n; i++) {
    const char *x = a[i];
    if (i >= end) {
      peer_argv[out++] = a[i];
      continue;
    }
    const char *next = i + 1 < n ? a[i + 1] : NULL;
    /* a value of an option that takes one is passed through untouched */
    if (x[0] == '-' && x[1] && strchr("prdof", x[1]) && x[2] == 0 && next && i + 1 < end) {
      peer_argv[out++] = a[i++];
      peer_argv[out++] = a[i];
      continue;
    }
    if ((strcmp(x, "-i") == 0 && next && is_number(next)) || (strncmp(x, "-i", 2) == 0 && is_number(x + 2))) {
      const char *v = x[2] ? x + 2 : next;
      double us = strtod(v, NULL);
      bf_cli_error("-i %s: austin's and Tachyon's -i is the sampling interval (%s µs); bifocal's -i is --idle, "
                   "and the rate is -r HZ (here -r %.0f)", v, v, us > 0 ? 1e6 / us : 1000);
      return 2;
    }
    if (strcmp(x, "-s") == 0 && austin) {
      bf_cli_error("-s: austin's -s is sleepless (CPU time only), which bifocal spells --clock cpu; bifocal's -s is "
                   "py-spy's --subprocesses (austin's -C): spell out --clock cpu or --subprocesses, and put the "
                   "command after --");
      return 2;
    }
    if (strcmp(x, "-g") == 0 && austin) {
      bf_cli_error("-g: austin's -g is --gc (garbage collector state); bifocal's -g is py-spy's --gil (only samples "
                   "holding the GIL): drop it, or spell out --gil");
      return 2;
    }
    if (strcmp(x, "-C") == 0 || strcmp(x, "--children") == 0) {
      bf_cli_error("%s: austin's children flag is bifocal's -s/--subprocesses", x);
      return 2;
    }
    if (strcmp(x, "-x") == 0 || strcmp(x, "--exposure") == 0) {
      bf_cli_error("%s: austin's exposure time is bifocal's -d/--duration SECONDS", x);
      return 2;
    }
    if (strcmp(x, "-t") == 0 || strcmp(x, "--threads") == 0) {
      bf_cli_error("%s: py-spy's --threads (thread ids in the stacks) is how bifocal always stores them: drop it "
                   "and see `replay ID --thread T` (austin's -t timeout has no bifocal flag)", x);
      return 2;
    }
    if (strcmp(x, "--nolineno") == 0) {
      bf_cli_error("--nolineno: bifocal's flame graphs merge a function's lines already; drop it "
                   "(the collapsed export keeps the lines)");
      return 2;
    }
    if (strcmp(x, "-F") == 0 || strcmp(x, "--function") == 0) {
      bf_cli_error("%s: bifocal's frames are always functions (py-spy's --function): drop it", x);
      return 2;
    }
    if (strcmp(x, "--async-aware") == 0) {
      bf_cli_error("%s is not supported by bifocal record yet (austin/Tachyon flag; for asyncio tasks see --async)", x);
      return 2;
    }
    /* Tachyon's spellings with the same meaning */
    if (strcmp(x, "-a") == 0 || strcmp(x, "--all-threads") == 0) continue; /* bifocal samples every thread */
    if (strcmp(x, "--mode") == 0 || strncmp(x, "--mode=", 7) == 0) {
      const char *m = x[6] == '=' ? x + 7 : next;
      if (!m || i + (x[6] == '=' ? 0 : 1) >= end) {
        bf_cli_error("--mode needs wall, cpu, gil or exception");
        return 2;
      }
      if (x[6] != '=') i++;
      if (strcmp(m, "wall") == 0 || strcmp(m, "cpu") == 0) {
        peer_argv[out++] = "--clock";
        peer_argv[out++] = strcmp(m, "wall") == 0 ? "wall" : "cpu";
      } else if (strcmp(m, "gil") == 0) {
        peer_argv[out++] = "--gil";
      } else if (strcmp(m, "exception") == 0) {
        peer_argv[out++] = "--exceptions";
      } else {
        bf_cli_error("bad --mode '%s' (wall, cpu, gil or exception; bifocal spells them --clock wall|cpu, --gil "
                     "and --exceptions)", m);
        return 2;
      }
      continue;
    }
    static const struct {
      const char *flag, *format;
    } fmts[] = {{"--collapsed", "collapsed"}, {"--flamegraph", "flame"}, {"--pstats", "pstats"},
                {"--gecko", "gecko"},         {"--heatmap", NULL},       {NULL, NULL}};
    int k = 0;
    while (fmts[k].flag && strcmp(fmts[k].flag, x) != 0) k++;
    if (fmts[k].flag) {
      if (!fmts[k].format) {
        bf_cli_error("%s: record writes no heatmap file; record, then `bifocal replay ID --view heatmap -o FILE.html`", x);
        return 2;
      }
      peer_argv[out++] = "--format";
      peer_argv[out++] = (char *)fmts[k].format;
      continue;
    }
    peer_argv[out++] = a[i];
  }
  (void)cmd;
  peer_argv[out] = NULL;
  *argc = out;
  *argv = peer_argv;
  return -1;
}

int bf_cmd_record(bf_cli *cli, int argc, char **argv);

int bf_cmd_attach(bf_cli *cli, int argc, char **argv) {
  /* Tachyon's `attach [opts] PID`: record -p PID with the same options */
  static char *av[512];
  if (argc < 2 || argc >= (int)(sizeof av / sizeof *av) - 4) {
    bf_cli_error("attach needs a process id (usage: bifocal attach [record options] PID)");
    return 2;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    bf_cli_usage(bf_cli_find("attach"), stdout);
    return 0;
  }
  int n = 0;
  av[n++] = "record";
  for (int i = 1; i < argc - 1; i++) av[n++] = argv[i];
  av[n++] = "-p";
  av[n++] = argv[argc - 1];
  av[n] = NULL;
  return bf_cmd_record(cli, n, av);
}
