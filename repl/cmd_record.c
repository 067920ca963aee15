/* cmd_record.c — `bifocal record (--pid PID | -- CMD ...)`: sample a live or
 * launched Python process into a new session; the session id is the last
 * line of stdout. SIGINT/SIGTERM stop the capture and finalise the session.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit.h"
#include "cli.h"
#include "opts.h"
#include "correlate.h"
#include "fleet.h"
#include "jsonw.h"
#include "native.h"
#include "sampler.h"
#include "util.h"


static volatile int stop_flag;
static volatile int child_pid;
static int child_stopped; /* -d ended while the launched command ran: it was stopped */
static bf_push_cfg push_cfg; /* record --push (push_record.c) */

/* SIGINT/SIGTERM/SIGHUP/SIGQUIT stop the capture and are passed on to a
 * launched command, SIGQUIT as SIGTERM (a terminal's own SIGINT/SIGQUIT
 * already reached its whole process group, so those are not sent twice); SIGUSR1 and SIGPIPE only stop
 * the capture. Either way the session is finalised with every sample taken,
 * and a launched command is waited for. The handler stays until record
 * returns: a repeated signal (timeout's second, to the whole group) while the
 * session or -o FILE is being written is noted, never fatal. */
static void on_signal(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  stop_flag = sig;
  int from_tty = (sig == SIGINT || sig == SIGQUIT) && si && si->si_code == SI_KERNEL;
  if (child_pid > 0 && (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) && !from_tty)
    kill(child_pid, sig == SIGQUIT ? SIGTERM : sig); /* stopped, not core-dumped */
}

/* --native: Ctrl-Z releases the target's threads before bifocal stops
 * (sampling/record.c suspend_native). */
static volatile int suspend_flag;
static void on_tstp(int sig) {
  (void)sig;
  suspend_flag = 1;
}

static const int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGPIPE};
#define N_STOP_SIGS ((int)(sizeof stop_sigs / sizeof stop_sigs[0]))

static void progress(void *ud, const bf_smp_progress *p) {
  (void)ud;
  fprintf(stderr, "\r\033[Krecording: %.1fs  %lld samples  %.0f Hz  %lld missed  %lld invalid",
          p->elapsed_s, (long long)p->samples, p->achieved_rate_hz, (long long)p->missed,
          (long long)p->invalid);
  fflush(stderr);
}

/* The database file and its WAL/SHM/journal companions. */
static void db_remove(const char *path) {
  static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
  char f[4200];
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
    snprintf(f, sizeof f, "%s%s", path, sfx[i]);
    unlink(f);
  }
}

/* Remove the scratch store of `record -o` (path ".../bifocal-record.X/record.db"). */
static void scratch_remove(char *path) {
  if (!path[0]) return;
  db_remove(path);
  char *slash = strrchr(path, '/');
  if (slash) {
    *slash = 0;
    rmdir(path);
    *slash = '/';
  }
}

/* The options' combinations and the target (--pid or a command). */
static int record_check(int argc, char **argv, bf_smp_record_opts *o, int nonblocking, int rate_given,
                        const char *format, const char **outp, bf_cli_out_kind *kind) {
  if (bf_opt_native_blocking(nonblocking, o->native)) return 2;
  if (format && !*outp) {
    bf_cli_error("--format goes with -o FILE (the file to write)");
    return 2;
  }
  if (*outp && bf_cli_out_kind_of(*outp, format, kind)) return 2;
  if (o->async_tasks && (o->clock_cpu || o->native)) {
    bf_cli_error("--async records task stacks on the wall clock without --native (drop --clock cpu / --native)");
    return 2;
  }
  if (o->exc_only && (o->clock_cpu || o->async_tasks)) {
    bf_cli_error("--exceptions (--mode exception) samples threads on the wall clock, as Tachyon's does (drop %s)",
                 o->clock_cpu ? "--clock cpu" : "--async");
    return 2;
  }
  if (o->opcodes && (o->native || o->async_tasks)) {
    bf_cli_error("--opcodes reads the leaf frame of Python stacks: drop --native / --async");
    return 2;
  }
  /* native stacks stop threads at every sample: a gentler default rate */
  if (o->native && !rate_given) o->rate_hz = 100;
  char **cmd = argv + optind;
  int ncmd = argc - optind;
  if (o->pid && ncmd) {
    bf_cli_error("give either --pid PID or -- CMD, not both");
    return 2;
  }
  if (!o->pid && !ncmd) {
    bf_cli_error("record needs --pid PID or -- CMD ... (see `bifocal help record`)");
    return 2;
  }
  o->argv = ncmd ? cmd : NULL;
  return -1;
}

/* Options into *o, *outp, *kind; -1 to go on, else the exit status. */
static int record_parse(int argc, char **argv, bf_smp_record_opts *o, const char **outp, bf_cli_out_kind *kind) {
  /* short letters are py-spy's: a py-spy command line works as typed */
  static const struct option opts[] = {
      {"pid", required_argument, NULL, 'p'},      {"clock", required_argument, NULL, 'c'},
      {"gil", no_argument, NULL, 'g'},            {"rate", required_argument, NULL, 'r'},
      {"duration", required_argument, NULL, 'd'}, {"label", required_argument, NULL, 'l'},
      {"commit", required_argument, NULL, 'C'},   {"ttl", required_argument, NULL, 't'},
      {"subprocesses", no_argument, NULL, 's'},   {"help", no_argument, NULL, 'h'},
      {"idle", no_argument, NULL, 'i'},           {"no-idle", no_argument, NULL, 'I'},
      {"native", no_argument, NULL, 'n'},         {"native-threads", required_argument, NULL, 'N'},
      {"output", required_argument, NULL, 'o'},   {"format", required_argument, NULL, 'f'},
      {"nonblocking", no_argument, NULL, 'B'},    {"async", no_argument, NULL, 'A'},
      {"kernel", no_argument, NULL, 'k' + 256}, {"no-kernel", no_argument, NULL, 'K'},
      {"exceptions", no_argument, NULL, 'X'},     {"opcodes", no_argument, NULL, 'O'},
      {"memory", no_argument, NULL, 'm'}, /* austin's -m too */
      BF_PUSH_RECORD_OPTIONS,                     {NULL, 0, NULL, 0}};
  int c, rate_given = 0, nonblocking = 0;
  const char *format = NULL;
  int64_t ns;
  /* off unless asked: ~2 us more per blocked thread-sample measured
   * (tests/bench/bench_kernel.py), over the 1 us it would need to be on */
  o->no_kernel = 1;
  while ((c = getopt_long(argc, argv, "+p:r:d:o:f:gisnmh", opts, NULL)) != -1) {
    switch (c) {
      case 'p':
        if (bf_opt_pid(optarg, &o->pid)) return 2;
        break;
      case 'c': {
        const char *clock;
        if (bf_opt_clock(optarg, &clock)) return 2;
        o->clock_cpu = strcmp(clock, "cpu") == 0;
        break;
      }
      case 'g': o->gil_only = 1; break;
      case 'r':
        if (bf_opt_rate(optarg, &o->rate_hz)) return 2;
        rate_given = 1;
        break;
      case 'd':
        if (bf_parse_duration_ns(optarg, &ns) < 0 || ns <= 0) {
          bf_cli_error("bad --duration '%s' (use e.g. 10, 10s, 2m; the database option is --db)", optarg);
          return 2;
        }
        o->duration_s = (double)ns / 1e9;
        break;
      case 'l': o->label = optarg; break;
      case 'C': o->commit = optarg; break;
      case 't':
        if (bf_opt_ttl(optarg, &o->ttl_ns)) return 2;
        break;
      case 's': o->subprocesses = 1; break;
      case 'n': o->native = 1; break;
      case 'N': /* implies --native */
        if (bf_opt_native_threads(optarg, &o->native, &o->native_threads)) return 2;
        break;
      case 'A': o->async_tasks = 1; break; /* asyncio tasks as task:NAME threads */
      case 'k' + 256: o->no_kernel = 0; break; /* wall clock: the kernel lens (docs/sampling.md) */
      case 'K': o->no_kernel = 1; break;
      case 'X': o->exc_only = 1; break;    /* Tachyon's --mode exception */
      case 'O': o->opcodes = 1; break;     /* Tachyon's --opcodes */
      case 'm': o->memory = 1; break;      /* resident-memory changes charged to stacks */
      case 'i': o->no_idle = 0; break;
      case 'I': o->no_idle = 1; break;
      case 'o': *outp = optarg; break;
      case 'f': format = optarg; break;
      case 'B': nonblocking = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("record"), stdout); return 0;
      default:
        if (c < BF_PUSH_OPT || c > BF_PUSH_OPT + 5 || bf_push_record_opt(c, optarg, &push_cfg)) return 2;
    }
  }
  return record_check(argc, argv, o, nonblocking, rate_given, format, outp, kind);
}

/* -o FILE without a named database (--db, $BIFOCAL_DB): the samples go to a
 * private scratch store that is removed afterwards; no ./bifocal.db appears.
 * OUT: scratch (the store's path, "" when not needed). 0 or the exit status. */
static int scratch_make(const bf_cli *cli, const char *outp, char *scratch, size_t len) {
  scratch[0] = 0;
  if (!outp || cli->db_named) return 0;
  const char *tmp = getenv("TMPDIR");
  snprintf(scratch, len, "%s/bifocal-record.XXXXXX", tmp && *tmp == '/' ? tmp : "/tmp");
  if (!mkdtemp(scratch)) {
    bf_cli_error("cannot make a scratch directory '%s': %s (set TMPDIR, or give --db DB)", scratch, strerror(errno));
    return 1;
  }
  size_t l = strlen(scratch);
  snprintf(scratch + l, len - l, "/record.db");
  return 0;
}

/* The number at a dotted path of the session's extra (record.c writes
 * them), or dflt when it has none. */
static double extra_num(const bf_session_info *in, const char *path, double dflt) {
  double v;
  return in->extra_json && bf_json_find_num(in->extra_json, path, &v) == 0 ? v : dflt;
}

/* What the capture cost and met, on stderr: native intrusion (always),
 * samples lost to another writer's lock (always), the summary line (tty). */
static void record_report(bf_store *st, int64_t sid, int native, int tty) {
  if (sid > 0 && native) { /* the intrusion is always shown, terminal or not */
    bf_session_info *in = NULL;
    char line[256];
    if (bf_store_session_get(st, sid, &in) == 0) {
      if (bf_smp_native_summary(in->extra_json, line, sizeof line) == 0)
        fprintf(stderr, "native: %s\n", line);
      bf_session_info_free(in);
    }
  }
  if (sid > 0) { /* said once, terminal or not: samples lost to another process's lock */
    bf_session_info *in = NULL;
    double dropped;
    if (bf_store_session_get(st, sid, &in) == 0 && (dropped = extra_num(in, "lock_dropped", 0)) > 0)
      bf_cli_warn("session %lld: %lld samples dropped while another process held the database's write lock "
                  "(extra.lock_dropped); keep other writers' transactions short",
                  (long long)sid, (long long)dropped);
    bf_session_info_free(in);
  }
  if (sid > 0) { /* said once, terminal or not: a CPU-saturated host (record --kernel) */
    bf_session_info *in = NULL;
    double runq;
    if (bf_store_session_get(st, sid, &in) == 0 && (runq = extra_num(in, "kernel.runq_share", 0)) > 0.05)
      bf_cli_warn("session %lld: the target's threads spent %.1f%% of their time waiting for a CPU (run "
                  "queue): the host is CPU-saturated; see `replay %lld --view waits`",
                  (long long)sid, runq * 100.0, (long long)sid);
    bf_session_info_free(in);
  }
  if (sid > 0) {
    bf_session_info *in = NULL;
    if (tty && bf_store_session_get(st, sid, &in) == 0) {
      /* ticks sampled late while catching up (extra.late_ticks / max_late_ms) */
      long long late = (long long)extra_num(in, "late_ticks", 0);
      char late_s[96] = "";
      if (late > 0)
        snprintf(late_s, sizeof late_s, ", %lld taken late (caught up; at most %.1f ms late)", late,
                 extra_num(in, "max_late_ms", 0));
      char exe[1024], ver[64]; /* which interpreter was sampled (extra.python) */
      bf_session_interp(in, exe, sizeof exe, ver, sizeof ver);
      fprintf(stderr,
              "session %lld: %s, %lld samples in %.2fs (%.0f Hz achieved of %.0f asked), "
              "%lld missed%s, %lld invalid, profiler CPU %.2fs, Python %s%s%s%s\n",
              (long long)sid, in->status ? in->status : "?", (long long)in->samples,
              (double)in->duration_ns / 1e9, in->achieved_rate_hz, in->rate_hz,
              (long long)in->missed, late_s, (long long)in->invalid,
              (double)in->profiler_cpu_ns / 1e9, in->python_version ? in->python_version : "?",
              exe[0] ? " (" : "", exe, exe[0] ? ")" : "");
      bf_session_info_free(in);
    }
  }
}

/* bf_smp_record with, for --native, Ctrl-Z caught for its duration (the stop
 * signals are the caller's, see on_signal). OUT: *sid, *wst as bf_smp_record. */
static int record_capture(bf_smp *h, bf_store *st, bf_smp_record_opts *o, int tty, int64_t *sid, int *wst) {
  o->stop = &stop_flag;
  o->child_pid = &child_pid;
  child_stopped = 0;
  o->child_stopped = &child_stopped;
  if (tty && o->argv && o->duration_s > 0)
    fprintf(stderr, "bifocal: recording for %gs, then the command is stopped (SIGTERM) if it still runs, "
            "as py-spy does; Ctrl-C stops both sooner\n", o->duration_s);
  struct sigaction tstp, old_tstp;
  memset(&tstp, 0, sizeof tstp);
  tstp.sa_handler = on_tstp;
  sigemptyset(&tstp.sa_mask);
  suspend_flag = 0;
  if (o->native) {
    sigaction(SIGTSTP, &tstp, &old_tstp);
    o->suspend = &suspend_flag;
  }
  if (tty) o->progress = progress;
  int rc = bf_smp_record(h, st, o, sid, wst);
  if (o->native) sigaction(SIGTSTP, &old_tstp, NULL);
  return rc;
}

/* The exit status: the capture's, else the launched command's (with a
 * warning); a command stopped at the end of -d ends it as planned. */
static int record_status(int status, int wst, double duration_s) {
  if (child_stopped) {
    bf_cli_warn("the command was still running when the %gs of --duration ended: it was stopped (%s), "
                "as py-spy does (leave out -d to record until it exits)",
                duration_s, wst != -1 && WIFSIGNALED(wst) ? strsignal(WTERMSIG(wst)) : "SIGTERM; it exited");
    return status;
  }
  if (!status && wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) != 0) {
    bf_cli_warn("command exited with status %d", WEXITSTATUS(wst));
    status = WEXITSTATUS(wst);
  } else if (!status && wst != -1 && WIFSIGNALED(wst)) {
    bf_cli_warn("command was killed by signal %d (%s)", WTERMSIG(wst), strsignal(WTERMSIG(wst)));
    status = 128 + WTERMSIG(wst);
  }
  return status;
}

static int record_main(bf_cli *cli, bf_smp_record_opts *op, const char *outp, bf_cli_out_kind out_kind);

static int count_row(void *ud, const bf_audit_entry *e) {
  (void)e;
  ++*(size_t *)ud;
  return 0;
}

/* 1 when the store holds no session and at most one audit row: what a
 * record that failed before its first sample put into a database it made. */
static int store_only_attempt(bf_store *st) {
  bf_session_info **ss = NULL;
  size_t n = 0, audits = 0;
  if (bf_store_session_list(st, &ss, &n) < 0) return 0;
  for (size_t i = 0; i < n; i++) bf_session_info_free(ss[i]);
  free(ss);
  return n == 0 && bf_store_audit_foreach(st, count_row, &audits) == 0 && audits <= 1;
}

int bf_cmd_record(bf_cli *cli, int argc, char **argv) {
  bf_smp_record_opts o = {0};
  o.rate_hz = 1000;
  push_cfg = (bf_push_cfg){.every_ns = 10000000000LL, .spool_max_bytes = 64LL << 20, .wait_ms = 5000};
  const char *outp = NULL;
  bf_cli_out_kind out_kind = 0;
  int rc = bf_opt_peer_record("record", &argc, &argv); /* py-spy's, austin's, Tachyon's flags */
  if (rc >= 0) return rc;
  rc = record_parse(argc, argv, &o, &outp, &out_kind);
  if (rc >= 0) return rc;
  if (push_cfg.others && !push_cfg.to) {
    bf_cli_error("--every, --push-spool-max, --push-headers, --push-wait and --push-timeout go with --push URL");
    return 2;
  }
  stop_flag = 0;
  child_pid = 0;
  struct sigaction sa, old_sa[N_STOP_SIGS];
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < N_STOP_SIGS; i++) sigaction(stop_sigs[i], &sa, &old_sa[i]);
  rc = record_main(cli, &o, outp, out_kind);
  child_pid = 0; /* waited for: its pid may be reused */
  /* A one-shot command exits next, its session and -o file written: a stop
   * signal landing meanwhile (timeout's second one, a burst) must not end it
   * by that signal and turn a finished record into a failure. The REPL gets
   * its own handlers back. */
  if (cli->in_repl)
    for (int i = 0; i < N_STOP_SIGS; i++) sigaction(stop_sigs[i], &old_sa[i], NULL);
  return rc;
}

/* The capture, its report and audit, then -o FILE and the id. */
static int record_main(bf_cli *cli, bf_smp_record_opts *op, const char *outp, bf_cli_out_kind out_kind) {
  bf_smp_record_opts o = *op;
  int rc;
  char scratch[4096];
  bf_cli scratch_cli = *cli;
  if ((rc = scratch_make(cli, outp, scratch, sizeof scratch))) return rc;
  if (push_cfg.to && scratch[0]) {
    scratch_remove(scratch);
    bf_cli_error("record --push keeps unsent windows in the database: give --db DB with -o FILE");
    return 2;
  }
  if (scratch[0]) scratch_cli.db_path = scratch;
  /* made by this run: removed again if the run fails before recording */
  int created = !scratch[0] && access(cli->db_path, F_OK) != 0 && errno == ENOENT;
  bf_store *st;
  rc = bf_cli_open_store(&scratch_cli, BF_STORE_CREATE, &st);
  if (rc) {
    scratch_remove(scratch);
    return rc;
  }
  bf_smp *h = bf_smp_new();
  if (!h) {
    bf_store_close(st);
    scratch_remove(scratch);
    bf_cli_error("out of memory");
    return 1;
  }
  bf_store_set_busy_timeout(st, 30000); /* another writer's lock: wait to begin (then samples are held) */
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((rc = scratch[0] ? bf_audit_begin_look(cli, "record", o.pid, &au)
                       : bf_audit_begin(cli, st, "record", o.pid, &au))) {
    bf_smp_free(h);
    bf_store_close(st);
    scratch_remove(scratch);
    return rc;
  }
  int tty = isatty(2); /* progress on a terminal stderr, also under ID=$(bifocal record ...) */
  int64_t sid = 0;
  int wst = -1;
  bf_push_rec *pusher = NULL;
  if (push_cfg.to && (rc = bf_push_rec_start(&push_cfg, cli->db_path, &o, &pusher))) {
    bf_audit_end(au, "record --push could not start", 0);
    bf_smp_free(h);
    bf_store_close(st);
    return rc;
  }
  if (!scratch[0]) bf_audit_capture_hold(cli->db_path); /* gc --force keeps out meanwhile */
  rc = record_capture(h, st, &o, tty, &sid, &wst);
  if (!scratch[0]) bf_audit_capture_release(cli->db_path);
  if (tty) fputs("\r\033[K", stderr);
  bf_push_rec_end(pusher, st, sid); /* what was not sent stays spooled (said) */
  int status = 0;
  if (rc < 0) {
    const char *hint = bf_cli_hint(bf_smp_errmsg(h)); /* said before the session note */
    if (sid > 0) /* the session keeps what was recorded; no id on stdout for a failure */
      bf_cli_error("%s%s%s%s (session %lld keeps the samples taken until then)", bf_smp_errmsg(h),
                   hint ? " (" : "", hint ? hint : "", hint ? ")" : "", (long long)sid);
    else
      bf_cli_error("%s", bf_smp_errmsg(h));
    status = 1;
  }
  if (sid > 0) record_report(st, sid, o.native, tty);
  bf_audit_end(au, rc < 0 ? bf_smp_errmsg(h) : NULL, scratch[0] ? 0 : sid);
  bf_smp_free(h);
  int rec_ok = !status; /* the capture itself (the id is printed for it alone) */
  if (sid > 0 && outp) { /* what was captured, also when interrupted */
    if (bf_cli_write_output(st, sid, out_kind, outp, o.subprocesses)) /* -s: the whole tree */
      status = 1;
    else if (strcmp(outp, "-") != 0)
      fprintf(stderr, "wrote %s to %s\n", bf_cli_out_kind_name(out_kind), outp);
  }
  /* nothing recorded into a database this run made (`record -- nosuchcmd`,
   * a pid that is gone): leave no empty ./bifocal.db behind */
  int drop = created && sid <= 0 && store_only_attempt(st);
  bf_store_close(st);
  scratch_remove(scratch);
  if (drop) db_remove(cli->db_path);
  if (sid > 0 && rec_ok && !scratch[0] && !(outp && strcmp(outp, "-") == 0)) {
    printf("%lld\n", (long long)sid);
    fflush(stdout);
  }
  return record_status(status, wst, o.duration_s);
}
