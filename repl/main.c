/* main.c — `bifocal` entry: global options, then one command or the REPL. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "jsonw.h"
#include "session_meta.h"
#include "text.h"
#include "out_file.h"

#ifndef BF_VERSION
#define BF_VERSION "0.0.0"
#endif

int bf_repl_main(bf_cli *cli);

static void print_help(FILE *f) {
  fprintf(f,
          "bifocal %s — sampling and tracing profiler workbench for CPython\n\n"
          "usage: bifocal [--db DB] COMMAND [ARGS]\n"
          "       bifocal [--db DB]          (interactive REPL)\n\n"
          "options:\n"
          "  -D, --db DB     database file (default $BIFOCAL_DB, else ./bifocal.db)\n"
          "  -h, --help      this help; `bifocal help COMMAND` for one command\n"
          "  -V, --version   print the version\n\ncommands:\n",
          BF_VERSION);
  for (const bf_cmd *c = bf_cmds; c->name; c++) fprintf(f, "  %-10s %s\n", c->name, c->summary);
}

/* One line on stderr: what it quotes (paths, names, labels) may hold control
 * characters, shown inert so they cannot forge lines or drive the terminal. */
static void say(const char *prefix, const char *fmt, va_list ap) {
  char *m = NULL;
  fputs(prefix, stderr);
  if (vasprintf(&m, fmt, ap) >= 0) {
    bf_fputs_inert(stderr, m);
    const char *hint = bf_cli_hint(m); /* the options that help, which the libraries do not know */
    if (hint) fprintf(stderr, " (%s)", hint);
    free(m);
  }
  fputc('\n', stderr);
}

void bf_cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say("bifocal: ", fmt, ap);
  va_end(ap);
}

void bf_cli_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say("bifocal: warning: ", fmt, ap);
  va_end(ap);
}

int bf_cli_open_store(bf_cli *cli, int flags, bf_store **out) {
  bf_err msg = BF_ERR_INIT;
  bf_out_protect(cli->db_path); /* -o must never land on it */
  int rc = bf_store_open(cli->db_path, flags, out, &msg);
  if (rc < 0) {
    bf_cli_error("%s", bf_err_msg(&msg, strerror(-rc)));
    return 1;
  }
  struct stat st; /* profiles reveal code layout: say so (once) when others may write */
  static int warned;
  if (!warned && stat(cli->db_path, &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH))) {
    warned = 1;
    bf_cli_warn("database '%s' is writable by group/others (mode %03o); chmod 600 it", cli->db_path,
                (unsigned)(st.st_mode & 0777));
  }
  return 0;
}

int bf_cli_session_arg(bf_cli *cli, bf_store *s, const char *arg, int64_t *id) {
  (void)cli;
  if (!arg) {
    if (cli->current_session > 0) {
      *id = cli->current_session;
      return 0;
    }
    bf_cli_error("missing session id (see `bifocal sessions`)");
    return 2;
  }
  if (bf_store_session_resolve(s, arg, id) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    return 1;
  }
  return 0;
}

int bf_cli_thread_arg(bf_store *s, int64_t sid, const char *arg, int64_t *thread_id) {
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  if (bf_store_threads(s, sid, &th, &nth) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    return 1;
  }
  char *end;
  long long want = strtoll(arg, &end, 0);
  int numeric = *arg && *end == 0;
  int64_t found = 0;
  for (size_t i = 0; i < nth; i++)
    if ((numeric && th[i].native_tid == want) || (th[i].name && strcmp(th[i].name, arg) == 0)) found = th[i].id;
  bf_thread_refs_free(th, nth);
  if (!found) {
    bf_cli_error("session %lld has no thread '%s' (give a native thread id or name)", (long long)sid, arg);
    return 1;
  }
  *thread_id = found;
  return 0;
}

int bf_cli_json_only(const char *cmd, int argc, char **argv, int *json) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {0}};
  int c;
  *json = 0;
  while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
    if (c == 'j') {
      *json = 1;
    } else if (c == 'h') {
      bf_cli_usage(bf_cli_find(cmd), stdout);
      return 0;
    } else {
      return 2;
    }
  }
  if (optind < argc) {
    bf_cli_error("%s takes no arguments ('%s')", cmd, argv[optind]);
    return 2;
  }
  return -1;
}

/* Commands whose -d is py-spy's --duration; everywhere else -d is refused. */
static int takes_dash_d(const char *cmd) {
  static const char *const with_d[] = {"record", "attach", "top", NULL};
  for (const char *const *w = with_d; *w; w++)
    if (strcmp(*w, cmd) == 0) return 1;
  return 0;
}

static int dash_d(const char *a) { return a[0] == '-' && a[1] == 'd'; }

static void refuse_dash_d(void) {
  bf_cli_error("-d no longer names the database: use --db DB (or -D DB, or $BIFOCAL_DB); "
               "-d is --duration on record and top, as in py-spy");
}

int bf_cli_dispatch(bf_cli *cli, int argc, char **argv) {
  if (argc < 1) return 2;
  /* `-d DB` was the database option before 0.2; say so instead of a bare
   * "invalid option". A script's own arguments (run SCRIPT ARGS) are its own. */
  if (!takes_dash_d(argv[0]) && strcmp(argv[0], "run") != 0)
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
      if (dash_d(argv[i])) {
        refuse_dash_d();
        return 2;
      }
  if (strcmp(argv[0], "help") == 0) {
    if (argc == 2 && strcmp(argv[1], "--sessions") == 0) return bf_cli_complete_sessions(cli, stdout);
    int rc = bf_cli_help(argc, argv);
    if (rc >= 0) return rc;
    print_help(stdout);
    return 0;
  }
  const bf_cmd *c = bf_cli_find(argv[0]);
  if (!c) {
    bf_cli_error("unknown command '%s' (try `bifocal --help`)", argv[0]);
    return 2;
  }
  optind = 0; /* glibc: full reset of getopt state */
  opterr = 1;
  size_t bad_utf8 = bf_json_replaced();
  int rc = c->fn(cli, argc, argv);
  fflush(stdout);
  if (bf_json_replaced() > bad_utf8)
    fprintf(stderr, "bifocal: note: %zu byte(s) of invalid UTF-8 in names or metadata were written as U+FFFD in the JSON output\n",
            bf_json_replaced() - bad_utf8);
  return rc;
}

/* Global options come before the command; `--db DB` (-D DB) is also accepted
 * anywhere before a `--` so `bifocal sessions --db x.db` works too. The
 * command line without them goes to rest. Returns -1 to go on, else the exit
 * status. OUT: *nrest. */
static int global_opts(bf_cli *cli, int argc, char **argv, char **rest, int *nrest) {
  int out = 1;
  int i = 1;
  int seen_cmd = 0, seen_dashdash = 0;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!seen_dashdash && strcmp(a, "--") == 0) seen_dashdash = 1;
    if (!seen_dashdash && (strcmp(a, "-D") == 0 || strcmp(a, "--db") == 0)) {
      if (i + 1 >= argc) {
        bf_cli_error("option %s needs a database path", a);
        return 2;
      }
      cli->db_path = argv[++i];
      cli->db_named = 1;
      continue;
    }
    if (!seen_dashdash && strncmp(a, "--db=", 5) == 0) {
      cli->db_path = a + 5;
      cli->db_named = 1;
      continue;
    }
    if (!seen_dashdash && strncmp(a, "-D", 2) == 0 && a[2]) {
      cli->db_path = a + 2;
      cli->db_named = 1;
      continue;
    }
    if (!seen_cmd && !seen_dashdash) {
      if (dash_d(a)) {
        refuse_dash_d();
        return 2;
      }
      if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        print_help(stdout);
        return 0;
      }
      if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
        printf("bifocal %s\n", BF_VERSION);
        return 0;
      }
      if (a[0] == '-') {
        bf_cli_error("unknown option '%s' (try `bifocal --help`)", a);
        return 2;
      }
      seen_cmd = 1;
    }
    rest[out++ - 1] = argv[i];
  }
  *nrest = out - 1;
  return -1;
}

int main(int argc, char **argv) {
  bf_cli cli = {0};
  cli.db_path = getenv("BIFOCAL_DB");
  cli.db_named = cli.db_path && *cli.db_path;
  if (!cli.db_named) cli.db_path = "bifocal.db";
  cli.stdout_tty = isatty(1);
  const char *nc = getenv("NO_COLOR");
  cli.color = cli.stdout_tty && !(nc && *nc);
  char *cmdline = bf_meta_join_argv(argc, argv);
  cli.cmdline = cmdline ? cmdline : "bifocal";
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return 1;
  int nrest = 0;
  int rc = global_opts(&cli, argc, argv, rest, &nrest);
  if (rc < 0) rc = nrest == 0 ? bf_repl_main(&cli) : bf_cli_dispatch(&cli, nrest, rest);
  free(rest);
  free(cmdline);
  return rc;
}
