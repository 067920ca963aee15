/* cmd_trace.c — `bifocal trace [opts] -- python[3.X] (script.py | -m mod | -c cmd) ARGS`:
 * parse the options, audit, and run the program under the tracer
 * (core/trace_run.c); print the traced session id and pass the program's exit
 * status through.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "cli.h"
#include "opts.h"
#include "trace_run.h"

/* Around the run (core/trace_run.c passes stop signals on to the program
 * meanwhile) and after it, until the audit row and the id are out: a stop
 * signal is noted, never fatal, so a repeated one (timeout's second, a
 * second Ctrl-C) cannot lose the outcome. */
static volatile sig_atomic_t trace_signalled;
static void trace_hold(int sig) { trace_signalled = sig; }
static const int trace_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/* Options; -1 to go on, else the exit status. */
static int trace_parse(int argc, char **argv, bf_trace_opts *o) {
  static const struct option opts[] = {{"clock", required_argument, NULL, 'k'},
                                       {"focus", required_argument, NULL, 'f'},
                                       {"no-builtins", no_argument, NULL, 'B'},
                                       {"tool-id", required_argument, NULL, 'T'},
                                       {"label", required_argument, NULL, 'l'},
                                       {"ttl", required_argument, NULL, 't'},
                                       {"commit", required_argument, NULL, 'C'},
                                       {"records", required_argument, NULL, 'r'},
                                       {"memory", no_argument, NULL, 'M'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  int c;
  char *end;
  while ((c = getopt_long(argc, argv, "+k:f:BT:l:t:C:r:Mh", opts, NULL)) != -1) {
    switch (c) {
      case 'k':
        if (bf_opt_clock(optarg, &o->clock)) return 2;
        break;
      case 'f': o->focus = optarg; break;
      case 'B': o->builtins = 0; break;
      case 'M': o->memory = 1; break;
      case 'T':
        o->tool_id = strtol(optarg, &end, 10);
        if (*end || end == optarg || o->tool_id < 0 || o->tool_id > 5) {
          bf_cli_error("bad --tool-id '%s' (a sys.monitoring tool id, 0..5)", optarg);
          return 2;
        }
        break;
      case 'l': o->label = optarg; break;
      case 't':
        if (bf_opt_ttl(optarg, &o->ttl_ns)) return 2;
        break;
      case 'C': o->commit = optarg; break;
      case 'r':
        o->records = strtol(optarg, &end, 10);
        if (*end || end == optarg || o->records < 0) {
          bf_cli_error("bad --records '%s' (focus-mode ring size, >= 0)", optarg);
          return 2;
        }
        break;
      case 'h': bf_cli_usage(bf_cli_find("trace"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind >= argc) {
    bf_cli_error("trace needs a Python command after `--` (e.g. bifocal trace -- python3 app.py)");
    return 2;
  }
  o->cmd = argv + optind;
  o->ncmd = argc - optind;
  return -1;
}

static int focus_sum(void *ud, const bf_trace_func *tf) {
  int64_t *kd = ud;
  if (tf->records_kept > 0) kd[0] += tf->records_kept;
  if (tf->records_dropped > 0) kd[1] += tf->records_dropped;
  return 0;
}

/* --focus: a pattern that matched no called function is an error (the run
 * recorded no timeline), dropped records a warning. 1 when nothing matched. */
static int focus_report(bf_store *s, int64_t sid, const bf_trace_opts *o) {
  int64_t kd[2] = {0, 0};
  if (!o->focus || bf_store_trace_funcs_foreach(s, sid, focus_sum, kd) < 0) return 0;
  if (kd[0] == 0 && kd[1] == 0) {
    bf_cli_error("--focus '%s' matched no function that was called, so session %lld has no call records "
                 "(the pattern is matched against MODULE:QUALNAME, e.g. '*:%s' or '__main__:%s')",
                 o->focus, (long long)sid, o->focus, o->focus);
    return 1;
  }
  if (kd[1] > 0)
    bf_cli_warn("--focus '%s': %lld call records kept, %lld dropped because the ring was full "
                "(timelines and percentiles cover the kept ones; raise --records, now %ld)",
                o->focus, (long long)kd[0], (long long)kd[1], o->records);
  return 0;
}

static int trace_count_row(void *ud, const bf_audit_entry *e) {
  (void)e;
  ++*(size_t *)ud;
  return 0;
}

/* A database this run made holding no session and at most this run's audit
 * row (a program that could not start): removed, with its WAL/SHM, as record
 * removes its own (repl/cmd_record.c). */
static void trace_drop_new_db(bf_cli *cli) {
  bf_store *s;
  bf_session_info **ss = NULL;
  size_t n = 1, audits = 0;
  if (bf_cli_open_store(cli, BF_STORE_READONLY, &s)) return;
  if (bf_store_session_list(s, &ss, &n) == 0) {
    for (size_t i = 0; i < n; i++) bf_session_info_free(ss[i]);
    free(ss);
  }
  int drop = n == 0 && bf_store_audit_foreach(s, trace_count_row, &audits) == 0 && audits <= 1;
  bf_store_close(s);
  if (!drop) return;
  static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
  char f[4200];
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
    snprintf(f, sizeof f, "%s%s", cli->db_path, sfx[i]);
    unlink(f);
  }
}

int bf_cmd_trace(bf_cli *cli, int argc, char **argv) {
  bf_trace_opts o = {.clock = "wall", .builtins = 1, .tool_id = -1, .records = 1L << 20, .db_path = cli->db_path};
  int rc = trace_parse(argc, argv, &o);
  if (rc >= 0) return rc;
  bf_trace_plan p;
  if ((rc = bf_trace_prepare(&o, &p)) != BF_TRACE_READY) {
    bf_cli_error("%s", p.err);
    bf_trace_plan_free(&p);
    return rc;
  }
  /* The session exists (status "incomplete") before the program starts, so a
   * program killed outright still leaves a trace of the attempt. */
  bf_audit *au = NULL; /* audited before the program starts */
  bf_store *s;
  int created = access(cli->db_path, F_OK) != 0 && errno == ENOENT; /* dropped again if nothing ran */
  rc = bf_audit_begin(cli, NULL, "trace", 0, &au);
  if (rc || (rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s))) {
    bf_audit_end(au, "cannot open the database", 0);
    bf_trace_plan_free(&p);
    return rc;
  }
  if (bf_trace_begin(s, &o, &p) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_audit_end(au, bf_store_errmsg(s), 0);
    bf_store_close(s);
    bf_trace_plan_free(&p);
    return 1;
  }
  bf_store_close(s);
  struct sigaction hold = {0}, old_sa[sizeof trace_sigs / sizeof *trace_sigs];
  hold.sa_handler = trace_hold;
  sigemptyset(&hold.sa_mask);
  for (size_t i = 0; i < sizeof trace_sigs / sizeof *trace_sigs; i++) sigaction(trace_sigs[i], &hold, &old_sa[i]);
  bf_audit_capture_hold(cli->db_path); /* the program writes at its end; gc --force keeps out */
  int exit_code = bf_trace_exec(&o, &p);
  bf_audit_capture_release(cli->db_path);
  if (p.err[0]) bf_cli_error("%s", p.err);
  int64_t sid = p.session_id;
  bf_trace_plan_free(&p);
  int exists = 1, unmatched = 0;
  if (bf_cli_open_store(cli, BF_STORE_CREATE, &s) == 0) {
    int out = bf_trace_outcome(s, sid);
    exists = out != -ENOENT; /* the runner could not start the program, said why and dropped it */
    if (out == BF_TRACE_INCOMPLETE)
      bf_cli_warn("the traced program ended before its trace was written (exit status %d); "
                  "session %lld stays incomplete",
                  exit_code, (long long)sid);
    else if (out == BF_TRACE_WRITTEN)
      unmatched = focus_report(s, sid, &o);
    bf_store_close(s);
  }
  if (unmatched && exit_code == 0) exit_code = 1;
  if (!exists && exit_code == 0) exit_code = 1;
  char outcome[64];
  snprintf(outcome, sizeof outcome, "%s with status %d",
           unmatched ? "focus matched nothing; program exited" : exists ? "program exited" : "program could not be started",
           exit_code);
  bf_audit_end(au, exit_code ? outcome : NULL, exists ? sid : 0);
  if (!exists && created) trace_drop_new_db(cli);
  fflush(stderr);
  if (exists) printf("%lld\n", (long long)sid);
  fflush(stdout);
  for (size_t i = 0; i < sizeof trace_sigs / sizeof *trace_sigs; i++) sigaction(trace_sigs[i], &old_sa[i], NULL);
  return exit_code;
}
