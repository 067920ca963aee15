/* cmd_gc.c — `bifocal gc [--force]`: drop expired sessions, reclaim space. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>

#include "audit.h"
#include "cli.h"
#include "clock.h"
#include "gc.h"

static long long db_bytes(const char *path) {
  struct stat st;
  long long total = 0;
  char buf[4096];
  if (stat(path, &st) == 0) total += st.st_size;
  snprintf(buf, sizeof buf, "%s-wal", path);
  if (stat(buf, &st) == 0) total += st.st_size;
  return total;
}

static int gc_run(bf_cli *cli, bf_store *s, bf_audit *au, int force);

int bf_cmd_gc(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"force", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {0}};
  int force = 0, c;
  while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
    if (c == 'f')
      force = 1;
    else if (c == 'h') {
      bf_cli_usage(bf_cli_find("gc"), stdout);
      return 0;
    } else
      return 2;
  }
  if (optind < argc) {
    bf_cli_error("gc takes no arguments ('%s')", argv[optind]);
    return 2;
  }
  bf_store *s;
  int rc = bf_cli_open_store(cli, 0, &s);
  if (rc) return rc;
  /* a stop signal waits for the end of gc and its audit row (one
   * transaction, then the compaction: short), then has its usual effect */
  sigset_t stops, old_mask;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGHUP);
  sigaddset(&stops, SIGQUIT);
  sigprocmask(SIG_BLOCK, &stops, &old_mask);
  bf_audit *au = NULL;
  if ((rc = bf_audit_begin(cli, s, "gc", 0, &au))) {
    bf_store_close(s);
  } else {
    rc = gc_run(cli, s, au, force);
  }
  fflush(stdout);
  sigprocmask(SIG_SETMASK, &old_mask, NULL);
  return rc;
}

/* The gc itself, its audit and report; closes s. The exit status. */
static int gc_run(bf_cli *cli, bf_store *s, bf_audit *au, int force) {
  long long before = db_bytes(cli->db_path);
  bf_gc_stats st = {0};
  int live = bf_audit_capture_running(cli->db_path);
  if (force && live) {
    /* its interned stacks and strings may not be referenced by a stored
     * sample yet: sweeping them would make the live session unreadable */
    bf_cli_warn("a capture (record/trace/calibrate) is writing to '%s' now: --force is not applied "
                "(sessions being written and the rows they use are kept); run gc --force once it ends",
                cli->db_path);
    force = 0;
  }
  if (bf_gc(s, bf_wall_ns(), force, &st) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_audit_end(au, bf_store_errmsg(s), 0);
    bf_store_close(s);
    return 1;
  }
  char outcome[160];
  snprintf(outcome, sizeof outcome, "ok: %lld expired session(s) deleted", (long long)st.sessions_deleted);
  bf_audit_end(au, outcome, 0);
  bf_store_close(s);
  long long after = db_bytes(cli->db_path);
  printf("gc: %lld expired session(s) deleted", (long long)st.sessions_deleted);
  if (st.swept)
    printf("; %lld stack(s), %lld frame(s), %lld function(s), %lld string(s) no longer used", (long long)st.stacks,
           (long long)st.frames, (long long)st.functions, (long long)st.strings);
  printf("; %lld -> %lld bytes\n", before, after);
  if (st.sessions_busy)
    bf_cli_warn("%lld expired session(s) are still being written (status incomplete); left alone "
                "(--force if no capture is running)",
                (long long)st.sessions_busy);
  else if (!st.swept && !live)
    bf_cli_warn("a capture may be running (a session is incomplete), so unused strings and stacks were kept "
                "(--force if none is)");
  return 0;
}
