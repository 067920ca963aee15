/* cmd_trace.c — `bifocal trace [opts] -- python[3.X] (script.py | -m mod | -c cmd) ARGS`.
 *
 * Finds the collector built for the target interpreter's version, creates the
 * traced session, runs the program under bifocal_trace's runner (which writes
 * the data at exit) and passes the program's exit status through.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit.h"
#include "cli.h"
#include "session_meta.h"
#include "util.h"

/* The runner bootstrap: import bifocal_trace from the directory given as the
 * first argument, take that directory off sys.path again, run the program. */
static const char trc_boot[] =
    "import sys;d=sys.argv.pop(1);sys.path.insert(0,d);import bifocal_trace as b;"
    "sys.path.remove(d);sys.exit(b._main(sys.argv[1:]))";

static const char trc_probe[] =
    "import sys,sysconfig,os;print(sys.implementation.name);"
    "print('%d.%d.%d'%sys.version_info[:3]);print(sysconfig.get_config_var('EXT_SUFFIX') or '');"
    "print(os.path.realpath(sys.executable) if sys.executable else '')";

static volatile sig_atomic_t trc_child_pid;

static void trc_forward(int sig) {
  if (trc_child_pid > 0) kill((pid_t)trc_child_pid, sig);
}

/* Run argv with stdout captured into buf (NUL-terminated). Returns the exit
 * status, or -1 when it could not run. */
static int trc_capture(char *const argv[], char *buf, size_t len) {
  int fd[2];
  if (pipe(fd) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < len && (r = read(fd[0], buf + n, len - 1 - n)) != 0) {
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    n += (size_t)r;
  }
  buf[n] = 0;
  close(fd[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int trc_has(const char *dir, const char *name) {
  char p[PATH_MAX];
  struct stat sb;
  if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Directory holding _bifocal_trace<suffix> and bifocal_trace.py: $BIFOCAL_TRACING_DIR,
 * beside the binary (build/tracing), or the install location. OUT: dir;
 * tried gets the places looked at. Returns 0 or -ENOENT. */
static int trc_find_ext(const char *suffix, char *dir, size_t len, char *tried, size_t tlen) {
  char modname[256], exe[PATH_MAX], base[PATH_MAX];
  char cands[8][PATH_MAX];
  int nc = 0;
  snprintf(modname, sizeof modname, "_bifocal_trace%s", suffix);
  const char *env = getenv("BIFOCAL_TRACING_DIR");
  if (env && *env) snprintf(cands[nc++], PATH_MAX, "%s", env);
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(base, sizeof base, "%s", exe);
    snprintf(cands[nc++], PATH_MAX, "%.4000s/tracing", base);
    snprintf(cands[nc++], PATH_MAX, "%.4000s/../lib/bifocal/tracing", base);
    char pat[PATH_MAX];
    snprintf(pat, sizeof pat, "%.4000s/../lib/*/bifocal/tracing", base);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc && nc < 8; i++) snprintf(cands[nc++], PATH_MAX, "%s", g.gl_pathv[i]);
      globfree(&g);
    }
  }
  tried[0] = 0;
  for (int i = 0; i < nc; i++) {
    if (trc_has(cands[i], modname) && trc_has(cands[i], "bifocal_trace.py")) {
      char *rp = realpath(cands[i], NULL);
      snprintf(dir, len, "%s", rp ? rp : cands[i]);
      free(rp);
      return 0;
    }
    size_t used = strlen(tried);
    snprintf(tried + used, tlen - used, "%s%s", used ? ", " : "", cands[i]);
  }
  return -ENOENT;
}

/* git rev-parse HEAD of the current directory, or "" (quietly). */
static void trc_git_head(char *buf, size_t len) {
  char *argv[] = {"git", "rev-parse", "HEAD", NULL};
  if (trc_capture(argv, buf, len) != 0) buf[0] = 0;
  buf[strcspn(buf, "\n")] = 0;
}

int bf_cmd_trace(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"clock", required_argument, NULL, 'k'},
                                       {"focus", required_argument, NULL, 'f'},
                                       {"no-builtins", no_argument, NULL, 'B'},
                                       {"tool-id", required_argument, NULL, 'T'},
                                       {"label", required_argument, NULL, 'l'},
                                       {"ttl", required_argument, NULL, 't'},
                                       {"commit", required_argument, NULL, 'C'},
                                       {"records", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *clock = "wall", *focus = NULL, *label = NULL, *commit = NULL;
  int builtins = 1;
  long tool_id = -1, records = 1L << 20;
  int64_t ttl_ns = 0;
  int c;
  char *end;
  while ((c = getopt_long(argc, argv, "+k:f:BT:l:t:C:r:h", opts, NULL)) != -1) {
    switch (c) {
      case 'k':
        if (strcmp(optarg, "wall") && strcmp(optarg, "cpu")) {
          bf_cli_error("bad --clock '%s' (use wall or cpu)", optarg);
          return 2;
        }
        clock = optarg;
        break;
      case 'f': focus = optarg; break;
      case 'B': builtins = 0; break;
      case 'T':
        tool_id = strtol(optarg, &end, 10);
        if (*end || end == optarg || tool_id < 0 || tool_id > 5) {
          bf_cli_error("bad --tool-id '%s' (a sys.monitoring tool id, 0..5)", optarg);
          return 2;
        }
        break;
      case 'l': label = optarg; break;
      case 't':
        if (bf_parse_duration_ns(optarg, &ttl_ns) < 0 || ttl_ns <= 0) {
          bf_cli_error("bad --ttl '%s' (use e.g. 90s, 30m, 12h, 7d)", optarg);
          return 2;
        }
        break;
      case 'C': commit = optarg; break;
      case 'r':
        records = strtol(optarg, &end, 10);
        if (*end || end == optarg || records < 0) {
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
  char **cmd = argv + optind;
  int ncmd = argc - optind;
  /* Interpreter options come before the program; -X/-W take a value. */
  int first = 1;
  while (first < ncmd && cmd[first][0] == '-' && strcmp(cmd[first], "-m") &&
         strcmp(cmd[first], "-c") && strcmp(cmd[first], "-")) {
    if ((!strcmp(cmd[first], "-X") || !strcmp(cmd[first], "-W")) && first + 1 < ncmd) first++;
    first++;
  }
  if (first >= ncmd) {
    bf_cli_error("nothing to run: give a script, -m MODULE or -c CMD after '%s'", cmd[0]);
    return 2;
  }

  char probe[8192];
  char *pargv[] = {cmd[0], "-c", (char *)trc_probe, NULL};
  if (trc_capture(pargv, probe, sizeof probe) != 0) {
    bf_cli_error("cannot run '%s' as a Python interpreter (is it on PATH?)", cmd[0]);
    return 127;
  }
  char impl[64] = "", version[64] = "", suffix[128] = "";
  const char *exe_line = probe; /* 4th line: the executable (may hold spaces) */
  for (int i = 0; i < 3 && exe_line; i++) exe_line = strchr(exe_line, '\n') ? strchr(exe_line, '\n') + 1 : NULL;
  if (sscanf(probe, "%63s %63s %127s", impl, version, suffix) != 3 || strcmp(impl, "cpython")) {
    bf_cli_error("'%s' is not a CPython interpreter bifocal can trace", cmd[0]);
    return 2;
  }
  int major = 0, minor = 0;
  sscanf(version, "%d.%d", &major, &minor);
  if (major < 3 || (major == 3 && minor < 8)) {
    bf_cli_error("Python %s (%s) is too old to trace: bifocal supports CPython 3.8 and newer",
                 version, cmd[0]);
    return 2;
  }
  char extdir[PATH_MAX], tried[4 * PATH_MAX];
  if (trc_find_ext(suffix, extdir, sizeof extdir, tried, sizeof tried) < 0) {
    bf_cli_error("no tracing extension was built for Python %s (%s): looked for "
                 "_bifocal_trace%s in %s; install that Python's headers and rebuild "
                 "(meson setup --reconfigure build), or set BIFOCAL_TRACING_DIR",
                 version, cmd[0], suffix, tried[0] ? tried : "(nowhere)");
    return 2;
  }

  char head[128] = "";
  if (!commit) {
    trc_git_head(head, sizeof head);
    if (head[0]) commit = head;
  }
  char *command = bf_meta_join_argv(ncmd, cmd);
  if (!command) return 1;

  /* The session exists (status "incomplete") before the program starts, so a
   * program killed outright still leaves a trace of the attempt. */
  bf_audit *au = NULL; /* audited before the program starts */
  int rc = bf_audit_begin(cli, NULL, "trace", 0, &au);
  bf_store *s;
  if (rc || (rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s))) {
    bf_audit_end(au, "cannot open the database", 0);
    free(command);
    return rc;
  }
  bf_session_info info = {0};
  info.kind = "traced";
  info.clock = clock;
  info.mode = focus ? "focus" : "trace";
  info.start_ns = bf_now_ns();
  info.command = command;
  info.python_version = version;
  info.profiler_version = BF_VERSION;
  /* until the runner writes what it saw inside, say which interpreter was
   * started, so a program killed outright still leaves that */
  char *pre_extra = NULL;
  size_t pre_len = 0;
  FILE *pf = open_memstream(&pre_extra, &pre_len);
  if (pf) {
    char exe[PATH_MAX] = "";
    if (exe_line) snprintf(exe, sizeof exe, "%.*s", (int)strcspn(exe_line, "\n"), exe_line);
    fputs("{\"python\":{\"implementation\":\"cpython\",\"version\":", pf);
    bf_json_str(pf, version);
    fputs(",\"executable\":", pf);
    bf_json_str(pf, exe[0] ? exe : NULL);
    fputs(",\"ext_suffix\":", pf);
    bf_json_str(pf, suffix);
    fputs(",\"source\":\"probe\"}}", pf);
    if (fclose(pf) != 0) {
      free(pre_extra);
      pre_extra = NULL;
    }
  }
  info.extra_json = pre_extra;
  info.commit = commit;
  info.label = label;
  info.status = "incomplete";
  info.expires_at_ns = ttl_ns > 0 ? info.start_ns + ttl_ns : 0;
  int64_t sid = 0;
  int brc = bf_store_session_begin(s, &info, &sid);
  free(pre_extra);
  if (brc < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_audit_end(au, bf_store_errmsg(s), 0);
    bf_store_close(s);
    free(command);
    return 1;
  }
  bf_store_close(s);

  char dbabs[PATH_MAX];
  if (cli->db_path[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) ||
        snprintf(dbabs, sizeof dbabs, "%s/%s", cwd, cli->db_path) >= (int)sizeof dbabs)
      snprintf(dbabs, sizeof dbabs, "%s", cli->db_path);
  } else {
    snprintf(dbabs, sizeof dbabs, "%s", cli->db_path);
  }
  char sidbuf[32], toolbuf[16], recbuf[32], ttlbuf[32];
  snprintf(sidbuf, sizeof sidbuf, "%lld", (long long)sid);
  snprintf(toolbuf, sizeof toolbuf, "%ld", tool_id);
  snprintf(recbuf, sizeof recbuf, "%ld", records);
  snprintf(ttlbuf, sizeof ttlbuf, "%.3f", (double)ttl_ns / 1e9);

  char **cargv = calloc((size_t)ncmd + 40, sizeof *cargv);
  if (!cargv) {
    bf_audit_end(au, "out of memory", sid);
    free(command);
    return 1;
  }
  int k = 0;
  for (int i = 0; i < first; i++) cargv[k++] = cmd[i];
  cargv[k++] = "-c";
  cargv[k++] = (char *)trc_boot;
  cargv[k++] = extdir;
  cargv[k++] = "--db";
  cargv[k++] = dbabs;
  cargv[k++] = "--session";
  cargv[k++] = sidbuf;
  cargv[k++] = "--clock";
  cargv[k++] = (char *)clock;
  cargv[k++] = "--tool-id";
  cargv[k++] = toolbuf;
  cargv[k++] = "--records";
  cargv[k++] = recbuf;
  cargv[k++] = "--ttl-s";
  cargv[k++] = ttlbuf;
  cargv[k++] = "--command";
  cargv[k++] = command;
  if (focus) {
    cargv[k++] = "--focus";
    cargv[k++] = (char *)focus;
  }
  if (!builtins) cargv[k++] = "--no-builtins";
  if (label) {
    cargv[k++] = "--label";
    cargv[k++] = (char *)label;
  }
  if (commit) {
    cargv[k++] = "--commit";
    cargv[k++] = (char *)commit;
  }
  cargv[k++] = "--";
  for (int i = first; i < ncmd; i++) cargv[k++] = cmd[i];
  cargv[k] = NULL;

  fflush(stdout);
  fflush(stderr);
  struct sigaction ign = {0}, fwd = {0}, old_int, old_quit, old_term, old_hup;
  ign.sa_handler = SIG_IGN;
  fwd.sa_handler = trc_forward;
  sigemptyset(&ign.sa_mask);
  sigemptyset(&fwd.sa_mask);
  /* Like system(3): the terminal's SIGINT/SIGQUIT reach the program itself;
   * a SIGTERM/SIGHUP sent to bifocal is passed on so the trace gets written. */
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);
  pid_t pid = fork();
  if (pid == 0) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    execvp(cargv[0], cargv);
    fprintf(stderr, "bifocal: cannot run '%s': %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  int status = 0, exit_code = 1;
  if (pid < 0) {
    bf_cli_error("cannot start '%s': %s", cmd[0], strerror(errno));
  } else {
    trc_child_pid = pid;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    trc_child_pid = 0;
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                  : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGQUIT, &old_quit, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  free(cargv);
  free(command);

  int exists = 1;
  if (bf_cli_open_store(cli, BF_STORE_CREATE, &s) == 0) {
    bf_session_info *got = NULL;
    int grc = bf_store_session_get(s, sid, &got);
    if (grc == -ENOENT) {
      exists = 0; /* the runner could not start the program, said why and dropped it */
    } else if (grc == 0 && got->status && strcmp(got->status, "incomplete") == 0) {
      bf_cli_warn("the traced program ended before its trace was written (exit status %d); "
                  "session %lld stays incomplete",
                  exit_code, (long long)sid);
    }
    bf_session_info_free(got);
    bf_store_close(s);
  }
  if (!exists && exit_code == 0) exit_code = 1;
  char outcome[64];
  snprintf(outcome, sizeof outcome, "%s with status %d",
           exists ? "program exited" : "program could not be started", exit_code);
  bf_audit_end(au, exit_code ? outcome : NULL, exists ? sid : 0);
  fflush(stderr);
  if (exists) printf("%lld\n", (long long)sid);
  fflush(stdout);
  return exit_code;
}
