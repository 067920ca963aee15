/* cmd_demo.c — `bifocal demo`: the whole story on the bundled workload, in
 * well under two minutes: sample it with the cpu and wall clocks, trace a
 * reproduction, join the two in Lua, gate a regressed build, write the flame
 * graph, heatmap and differential flame graph, and explain what was found.
 *
 * Every step runs this same binary as a child process, exactly as a user would
 * type it (the command is printed first), so the demo exercises the real CLI.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "correlate.h"
#include "lua_host.h"
#include "profile.h"
#include "util.h"

typedef struct demo {
  bf_cli *cli;
  char self[PATH_MAX];
  char dir[PATH_MAX];
  char db[PATH_MAX + 16];
  const char *b, *dim, *rst, *green, *red;
  int step;
  const char *python, *seconds;
  char workload[PATH_MAX];
  /* results of the steps */
  char cpu_id[32], wall_id[32], trace_id[32], reg_id[32];
  int hyp, gate_same, gate_reg, fl, hm, df;
  char flame[PATH_MAX + 32], heat[PATH_MAX + 32], diffp[PATH_MAX + 32];
} demo;

/* Run `bifocal --db DB ARGS...`; show the command, its output indented (or
 * hidden when quiet), and keep the last stdout line. Returns the exit status. */
static int run_self(demo *d, int quiet, char *last, size_t last_len, const char *const *args) {
  printf("%s$ bifocal", d->dim);
  for (const char *const *a = args; *a; a++) printf(" %s", *a);
  printf("%s\n", d->rst);
  fflush(stdout);
  int pfd[2];
  if (pipe(pfd) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    close(pfd[0]);
    close(pfd[1]);
    const char *argv[64];
    int k = 0;
    argv[k++] = d->self;
    argv[k++] = "--db";
    argv[k++] = d->db;
    for (const char *const *a = args; *a && k < 62; a++) argv[k++] = *a;
    argv[k] = NULL;
    setenv("NO_COLOR", "1", 1);
    execv(d->self, (char *const *)argv);
    _exit(127);
  }
  close(pfd[1]);
  FILE *f = fdopen(pfd[0], "r");
  char line[4096];
  if (last && last_len) last[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (!quiet) printf("    %s", line);
    if (last) {
      size_t l = strlen(line);
      while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
      if (l) snprintf(last, last_len, "%s", line);
    }
  }
  if (f) fclose(f);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  fflush(stdout);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void step(demo *d, const char *what) {
  printf("\n%s%d. %s%s\n", d->b, ++d->step, what, d->rst);
}

static int find_workload(char *out, size_t len) {
  char buf[PATH_MAX];
  const char *env = getenv("BIFOCAL_SCRIPTS");
  if (env && *env) {
    snprintf(out, len, "%s/demo/service.py", env);
    if (access(out, R_OK) == 0) return 0;
  }
  const char *p = bf_lua_find_script("gate.lua", buf, sizeof buf);
  if (p && strchr(p, '/')) {
    snprintf(out, len, "%.*s/demo/service.py", (int)(strrchr(p, '/') - p), p);
    if (access(out, R_OK) == 0) return 0;
  }
  return -ENOENT; /* never a guess in the current directory */
}

/* Options; -1 to go on, else the exit status. OUT: *dir, d->python, d->seconds. */
static int demo_parse(demo *d, int argc, char **argv, const char **dir) {
  static const struct option opts[] = {{"dir", required_argument, NULL, 'o'},
                                       {"python", required_argument, NULL, 'p'},
                                       {"seconds", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  int c;
  while ((c = getopt_long(argc, argv, "o:p:s:h", opts, NULL)) != -1) {
    switch (c) {
      case 'o': *dir = optarg; break;
      case 'p': d->python = optarg; break;
      case 's': {
        double v = atof(optarg);
        if (!(v >= 1 && v <= 60)) {
          bf_cli_error("bad --seconds '%s' (1 to 60)", optarg);
          return 2;
        }
        d->seconds = optarg;
        break;
      }
      case 'h': bf_cli_usage(bf_cli_find("demo"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind < argc) {
    bf_cli_error("demo takes no arguments ('%s')", argv[optind]);
    return 2;
  }
  if (!d->python || !*d->python) d->python = "python3";
  return -1;
}

/* This binary, the workload, the directory and a fresh database in it. */
static int demo_setup(demo *d, const char *dir) {
  ssize_t sl = readlink("/proc/self/exe", d->self, sizeof d->self - 1);
  if (sl <= 0) {
    bf_cli_error("cannot find the bifocal executable: %m");
    return 1;
  }
  d->self[sl] = 0;
  if (find_workload(d->workload, sizeof d->workload) < 0) {
    bf_cli_error("the demo workload scripts/demo/service.py was not found (set BIFOCAL_SCRIPTS to the scripts folder)");
    return 1;
  }
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
    bf_cli_error("cannot create '%s': %m", dir);
    return 1;
  }
  if (!realpath(dir, d->dir)) {
    bf_cli_error("cannot use '%s': %m", dir);
    return 1;
  }
  snprintf(d->db, sizeof d->db, "%s/demo.db", d->dir);
  /* A fresh database each time: the demo's labels must mean this run. */
  char tmp[PATH_MAX + 32];
  unlink(d->db);
  snprintf(tmp, sizeof tmp, "%s-wal", d->db);
  unlink(tmp);
  snprintf(tmp, sizeof tmp, "%s-shm", d->db);
  unlink(tmp);
  return 0;
}

/* Steps 1-3: sample with both clocks, trace a reproduction. Returns the
 * exit status of a step that failed, else 0. */
static int demo_capture(demo *d) {
  char last[4096];
  int rc;
  const char *python = d->python, *workload = d->workload, *seconds = d->seconds;
  step(d, "Sample it the production way: from outside, cpu clock, 1 kHz");
  rc = run_self(d, 0, last, sizeof last,
                (const char *[]){"record", "--clock", "cpu", "--rate", "1000", "--label", "demo-cpu", "--", python,
                                 workload, "--seconds", seconds, NULL});
  if (rc != 0) return rc;
  snprintf(d->cpu_id, sizeof d->cpu_id, "%.31s", last);
  run_self(d, 0, NULL, 0, (const char *[]){"replay", "demo-cpu", "--view", "functions", "--limit", "6", NULL});

  step(d, "Sample it again with the wall clock: idle threads show where time waits");
  rc = run_self(d, 0, last, sizeof last,
                (const char *[]){"record", "--clock", "wall", "--label", "demo-wall", "--", python, workload,
                                 "--seconds", seconds, NULL});
  if (rc != 0) return rc;
  snprintf(d->wall_id, sizeof d->wall_id, "%.31s", last);
  run_self(d, 0, NULL, 0, (const char *[]){"replay", "demo-wall", "--view", "functions", "--limit", "6", NULL});

  step(d, "Trace an offline reproduction: exact calls, edges and call times");
  rc = run_self(d, 0, last, sizeof last,
                (const char *[]){"trace", "--label", "demo-trace", "--", python, workload, "--requests", "1500",
                                 NULL});
  if (rc != 0) return rc;
  snprintf(d->trace_id, sizeof d->trace_id, "%.31s", last);
  return 0;
}

/* Steps 4-7: join in Lua, a hypothesis, a release gate, the pictures.
 * Returns the exit status of a capture that failed, else 0. */
static int demo_check(demo *d) {
  char last[4096];
  step(d, "Join the two lenses in Lua (scripts/correlate.lua)");
  run_self(d, 0, NULL, 0, (const char *[]){"run", "correlate.lua", "demo-cpu", "demo-trace", "--limit", "8", NULL});

  step(d, "A hypothesis, checked: the hot path is the request handler's checksum");
  d->hyp = run_self(d, 0, NULL, 0,
                    (const char *[]){"run", "hypothesis.lua", "demo-cpu", "demo-trace", "--func", "checksum",
                                     "--min-share", "1", "--per", "handle", "--ratio", "96", NULL});

  step(d, "A release gate: the same build passes against itself; a regressed build must fail");
  d->gate_same = run_self(d, 0, NULL, 0, (const char *[]){"run", "gate.lua", "demo-cpu", "demo-cpu", NULL});
  int rc = run_self(d, 1, last, sizeof last,
                    (const char *[]){"record", "--clock", "cpu", "--rate", "1000", "--label", "demo-regressed", "--",
                                     d->python, d->workload, "--seconds", d->seconds, "--slow-checksum", NULL});
  if (rc != 0) return rc;
  snprintf(d->reg_id, sizeof d->reg_id, "%.31s", last);
  d->gate_reg = run_self(d, 0, NULL, 0,
                         (const char *[]){"run", "gate.lua", "demo-cpu", "demo-regressed", "--max-increase", "2", NULL});

  step(d, "Pictures to open in a browser");
  snprintf(d->flame, sizeof d->flame, "%s/flame.html", d->dir);
  snprintf(d->heat, sizeof d->heat, "%s/heatmap.html", d->dir);
  snprintf(d->diffp, sizeof d->diffp, "%s/diff.html", d->dir);
  d->fl = run_self(d, 0, NULL, 0, (const char *[]){"replay", "demo-wall", "--view", "flame", "-o", d->flame, NULL});
  d->hm = run_self(d, 0, NULL, 0, (const char *[]){"replay", "demo-wall", "--view", "heatmap", "-o", d->heat, NULL});
  d->df = run_self(d, 0, NULL, 0,
                   (const char *[]){"diff", "demo-cpu", "demo-regressed", "--view", "flame", "-o", d->diffp, NULL});
  return 0;
}

/* The top three of each clock, with their intervals: wall time says where
 * threads wait, the cpu clock where they run. */
static void demo_tops(bf_store *s, int64_t wall, int64_t cpu) {
  const char *names[2] = {"wall clock (all threads, idle included)", "cpu clock (the CPU time the threads used)"};
  int64_t ids[2] = {wall, cpu};
  for (int k = 0; k < 2; k++) {
    bf_profile *p = NULL;
    if (bf_profile_functions(s, ids[k], NULL, BF_SORT_SELF, &p) < 0) continue;
    printf("- Top of the %s:", names[k]);
    for (size_t i = 0; i < p->n && i < 3; i++)
      printf("%s %s %.1f%% [%.1f–%.1f]", i ? "," : "", p->rows[i].qualname, p->rows[i].self_share * 100,
             p->rows[i].self_lo * 100, p->rows[i].self_hi * 100);
    printf(".\n");
    bf_profile_free(p);
  }
}

/* What the join says about the hot path and the ranking. */
static void demo_join(const bf_join *j) {
  const bf_join_row *hot = NULL;
  for (size_t i = 0; i < j->n; i++)
    if (strcmp(j->rows[i].qualname, "checksum") == 0) hot = &j->rows[i];
  if (hot && hot->observed && hot->traced) {
    char pc[32];
    bf_fmt_ns(hot->per_call_ns, pc, sizeof pc);
    printf("- The short hot path: checksum is %.1f%% of CPU by sampling [%.1f–%.1f%%], and the trace says it "
           "runs %lld times in the reproduction at %s a call.\n",
           hot->self_share * 100, hot->self_lo * 100, hot->self_hi * 100, (long long)hot->calls, pc);
    if (isfinite(hot->calls_per_s))
      printf("  Together: production calls it about %.0f times a second (a lower bound: the tracer's own cost "
             "is inside its per-call time).\n",
             hot->calls_per_s);
  } else if (hot) {
    printf("- checksum was %s by the sampler: not observed is not not executed (the trace counted %lld calls).\n",
           hot->observed ? "seen" : "not observed", (long long)hot->calls);
  }
  printf("- The lenses agree on the ranking: Spearman rank correlation %.2f over %zu functions both saw.\n",
         j->spearman, j->n_both);
}

/* The report: figures straight from the join, then where to look next. */
static int demo_report(demo *d) {
  bf_store *s;
  int rc;
  if ((rc = bf_cli_open_store(&(bf_cli){.db_path = d->db}, BF_STORE_READONLY, &s))) return rc;
  bf_join *j = NULL;
  int64_t cpu = atoll(d->cpu_id), tr = atoll(d->trace_id);
  printf("\n%sWhat bifocal found%s\n", d->b, d->rst);
  if (bf_join_sessions(s, cpu, tr, &j) == 0) {
    demo_tops(s, atoll(d->wall_id), cpu);
    demo_join(j);
    bf_join_free(j);
  } else {
    printf("- (join failed: %s)\n", bf_store_errmsg(s));
  }
  bf_store_close(s);
  printf("- The hypothesis script %s.\n", d->hyp == 0 ? "held" : d->hyp == 1 ? "did not hold" : "could not run");
  printf("- The gate %s the build against itself and %s the build with a 3x costlier checksum.\n",
         d->gate_same == 0 ? "passed" : "did NOT pass", d->gate_reg == 1 ? "failed" : "did NOT fail");
  printf("\n%sOpen next%s\n", d->b, d->rst);
  if (d->fl == 0) printf("  %s   flame graph of the wall-clock run (click to zoom, search, threads)\n", d->flame);
  if (d->hm == 0) printf("  %s   how load moves over time\n", d->heat);
  if (d->df == 0) printf("  %s   differential flame graph: red grew, blue shrank\n", d->diffp);
  printf("  bifocal --db %s        the REPL on this database (try: use demo-cpu, replay --view gil)\n", d->db);
  int ok = d->gate_same == 0 && d->gate_reg == 1;
  printf("\ndemo %s\n", ok ? "complete" : "complete, but a step did not behave as expected");
  return ok ? 0 : 1;
}

int bf_cmd_demo(bf_cli *cli, int argc, char **argv) {
  demo d = {.cli = cli, .python = getenv("BIFOCAL_PYTHON"), .seconds = "4"};
  const char *dir = "bifocal-demo";
  int rc = demo_parse(&d, argc, argv, &dir);
  if (rc >= 0) return rc;
  d.b = cli->color ? "\033[1m" : "";
  d.dim = cli->color ? "\033[2m" : "";
  d.rst = cli->color ? "\033[0m" : "";
  d.green = cli->color ? "\033[32m" : "";
  d.red = cli->color ? "\033[31m" : "";
  if ((rc = demo_setup(&d, dir))) return rc;
  printf("%sbifocal demo%s — a small service (3 worker threads, an asyncio loop, one short hot path)\n"
         "workload: %s %s\ndatabase: %s\n",
         d.b, d.rst, d.python, d.workload, d.db);
  if ((rc = demo_capture(&d)) || (rc = demo_check(&d))) {
    bf_cli_error("demo step failed (exit %d): see the output above", rc);
    return 1;
  }
  return demo_report(&d);
}
