/* cmd_calibrate.c — `bifocal calibrate [--rate HZ] [--clock C] [--json] [--memory] -- python ...`:
 * parse the options, run the reproduction traced and sampled at once
 * (core/calibrate.c, with the trace's launch and the sampler plugged in
 * here), and print the report:
 * per function how far the sampled estimate is from the exact traced share,
 * whether its 95% interval covered it, which short functions were never
 * sampled, and which rate would have sized them. With --memory: the sampled
 * share of resident growth per function against the trace's exact share of
 * what stayed live (record --memory and trace --memory on the same run).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "audit.h"
#include "calibrate.h"
#include "cli.h"
#include "jsonw.h"
#include "opts.h"
#include "sampler.h"
#include "util.h"

static volatile int cal_stop;
static volatile int cal_child;
/* SIGINT/SIGTERM/SIGHUP/SIGQUIT stop the sampler, and the first is passed on
 * to the `bifocal trace` child (which has the program write its trace); a
 * terminal's SIGINT/SIGQUIT reached the whole group already. The report is
 * then made of what both recorded. Repeated signals are absorbed. */
static void cal_signal(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  int from_tty = (sig == SIGINT || sig == SIGQUIT) && si && si->si_code == SI_KERNEL;
  if (!cal_stop && cal_child > 0 && !from_tty) kill(cal_child, sig);
  cal_stop = 1;
}
static const int cal_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/* How the traced run is launched: this executable's `trace` command. */
typedef struct cal_tracer {
  const char *self_exe;
  const char *db_path;
} cal_tracer;

/* bf_cal_start_fn: `self --db DB trace [--no-builtins] --clock C --label L
 * [--memory] -- argv...` with its stdout on a pipe. */
static int cal_start_trace(void *ud, const bf_cal_trace_req *req, int *pid, int *out_fd, bf_err *err) {
  const cal_tracer *ct = ud;
  size_t ncmd = 0;
  while (req->argv[ncmd]) ncmd++;
  char **targv = calloc(ncmd + 16, sizeof *targv);
  if (!targv) return -ENOMEM;
  int k = 0;
  targv[k++] = (char *)ct->self_exe;
  targv[k++] = "--db";
  targv[k++] = (char *)ct->db_path;
  targv[k++] = "trace";
  if (!req->builtins) targv[k++] = "--no-builtins";
  targv[k++] = "--clock";
  targv[k++] = (char *)req->clock;
  targv[k++] = "--label";
  targv[k++] = (char *)req->label;
  if (req->memory) targv[k++] = "--memory";
  targv[k++] = "--";
  for (size_t i = 0; i < ncmd; i++) targv[k++] = req->argv[i];
  targv[k] = NULL;
  int pfd[2];
  if (pipe(pfd) < 0) {
    int e = errno;
    free(targv);
    return bf_err_set(err, -e, "pipe: %s", strerror(e));
  }
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t tp = fork();
  if (tp < 0) {
    int e = errno;
    close(pfd[0]);
    close(pfd[1]);
    free(targv);
    return bf_err_set(err, -e, "fork: %s", strerror(e));
  }
  if (tp == 0) {
    /* calibrate killed outright: the trace ends its program, which writes */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    dup2(pfd[1], 1);
    close(pfd[0]);
    close(pfd[1]);
    execv(ct->self_exe, targv);
    _exit(127);
  }
  free(targv);
  close(pfd[1]);
  *pid = tp;
  *out_fd = pfd[0];
  return 0;
}

/* bf_cal_target_fn: the child of pid running the traced program. bifocal
 * trace may first run short probes of the interpreter, so pick the child
 * whose command line carries the tracer's bootstrap arguments. */
static int cal_traced_child(void *ud, int pid) {
  (void)ud;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  fclose(f);
  for (char *p = buf; *p;) {
    char *end;
    long c = strtol(p, &end, 10);
    if (end == p) break;
    p = end;
    char cpath[64], cmd[8192];
    snprintf(cpath, sizeof cpath, "/proc/%ld/cmdline", c);
    FILE *cf = fopen(cpath, "r");
    if (!cf) continue;
    size_t n = fread(cmd, 1, sizeof cmd - 1, cf);
    fclose(cf);
    for (size_t i = 0; i + 9 <= n; i++)
      if (memcmp(cmd + i, "--session", 9) == 0) return (int)c;
  }
  return 0;
}

typedef struct cal_sampler {
  bf_cli *cli;
  int clock_cpu;
  double rate_hz;
  const char *label;
  int memory;
} cal_sampler;

/* bf_cal_sample_fn: attach to pid (-EAGAIN while its runtime is not up), then
 * record it until it ends or calibrate is interrupted. */
static int cal_sample(void *ud, int pid, int64_t *sampled_id, bf_err *err) {
  const cal_sampler *cs = ud;
  bf_smp *h = bf_smp_new();
  int up = bf_smp_attach(h, pid) == 0;
  bf_smp_free(h);
  if (!up) return -EAGAIN;
  bf_smp *rh = bf_smp_new();
  bf_smp_record_opts o = {0};
  o.pid = pid;
  o.clock_cpu = cs->clock_cpu;
  o.rate_hz = cs->rate_hz;
  o.label = cs->label;
  o.memory = cs->memory;
  o.stop = &cal_stop;
  bf_store *s;
  int exit_status;
  if (bf_cli_open_store(cs->cli, BF_STORE_CREATE, &s) == 0) {
    int r = bf_smp_record(rh, s, &o, sampled_id, &exit_status);
    if (r < 0 && !*sampled_id) bf_err_set(err, r, "%s", bf_smp_errmsg(rh));
    bf_store_close(s);
  }
  bf_smp_free(rh);
  return *sampled_id ? 0 : -EIO;
}

static void print_json(const bf_cal_report *r, const char *clock, double rate) {
  bf_jw w;
  bf_jw_init(&w, stdout);
  bf_jw_obj(&w);
  bf_jw_kint(&w, "sampled_session", r->join->sampled_id);
  bf_jw_kint(&w, "traced_session", r->join->traced_id);
  bf_jw_kstr(&w, "clock", clock);
  bf_jw_knum(&w, "rate_hz", rate);
  bf_jw_knum(&w, "achieved_rate_hz", r->achieved_rate_hz);
  bf_jw_kint(&w, "samples", r->join->sampled_samples);
  bf_jw_knum(&w, "samples_in_traced_functions", round(r->n_in_traced));
  bf_jw_knum(&w, "coverage", r->coverage);
  bf_jw_kint(&w, "interval_blocks", r->blocks);
  bf_jw_knum(&w, "recommended_rate_hz", r->recommended_rate_hz);
  bf_jw_key(&w, "functions");
  bf_jw_arr(&w);
  for (size_t i = 0; i < r->n; i++) {
    const bf_cal_row *x = &r->rows[i];
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "file", x->j->file);
    bf_jw_kstr(&w, "qualname", x->j->qualname);
    bf_jw_kint(&w, "firstlineno", x->j->firstlineno);
    if (x->j->observed) bf_jw_knum(&w, "estimate", x->estimate);
    else bf_jw_knull(&w, "estimate");
    bf_jw_kpair(&w, "ci", x->lo, x->hi);
    bf_jw_kpair(&w, "ci_independent", x->wilson_lo, x->wilson_hi);
    bf_jw_knum(&w, "exact", x->exact);
    bf_jw_kbool(&w, "covered", x->covered);
    bf_jw_kint(&w, "calls", x->j->calls);
    bf_jw_kint(&w, "samples", x->j->observed ? x->j->self_samples : 0);
    bf_jw_knum(&w, "per_call_ns", x->j->per_call_ns);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_key(&w, "never_sampled");
  bf_jw_arr(&w);
  for (size_t i = 0; i < r->n_never; i++) {
    const bf_cal_row *x = r->never[i];
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "qualname", x->j->qualname);
    bf_jw_kstr(&w, "file", x->j->file);
    bf_jw_kint(&w, "firstlineno", x->j->firstlineno);
    bf_jw_kint(&w, "calls", x->j->calls);
    bf_jw_knum(&w, "exact", x->exact);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  putchar('\n');
}

static void print_table(const bf_cal_report *r, const char *clock, double rate, int limit, int color) {
  const char *b = color ? "\033[1m" : "", *dim = color ? "\033[2m" : "", *rst = color ? "\033[0m" : "";
  const char *red = color ? "\033[31m" : "";
  printf("%scalibration%s: sampled session %lld (%s clock, asked %.0f Hz, achieved %.0f Hz) against "
         "traced session %lld\n",
         b, rst, (long long)r->join->sampled_id, clock, rate, r->achieved_rate_hz, (long long)r->join->traced_id);
  printf("%s%-7s %-15s %7s %-3s %9s %8s  %s%s\n", dim, "EST.", " 95% CI", "EXACT", "IN", "CALLS", "SAMPLES",
         "FUNCTION", rst);
  size_t shown = 0;
  for (size_t i = 0; i < r->n && shown < (size_t)limit; i++) {
    const bf_cal_row *x = &r->rows[i];
    if (x->exact < 0.001 && x->estimate < 0.001) continue;
    char ci[40], est[16];
    snprintf(ci, sizeof ci, "[%.1f-%.1f]", x->lo * 100, x->hi * 100);
    if (x->j->observed) snprintf(est, sizeof est, "%5.1f%%", x->estimate * 100);
    else snprintf(est, sizeof est, "  n/o");
    printf("%-7s %-15s %6.1f%% %s%-3s%s %9lld %8lld  %s  %s:%lld\n", est, ci, x->exact * 100, x->covered ? "" : red,
           x->covered ? "yes" : "NO", rst, (long long)x->j->calls,
           (long long)(x->j->observed ? x->j->self_samples : 0), x->j->qualname, x->j->file,
           (long long)x->j->firstlineno);
    shown++;
  }
  printf("\ncoverage: %.0f%% of %zu functions with >= 0.5%% share had the exact share inside the 95%% interval",
         r->coverage * 100, r->judged);
  if (r->blocks)
    printf(" (the wider of the\nindependent-samples interval and one from how shares varied between %d time blocks of the run:\n"
           "consecutive samples are correlated, and short calls are seen in bursts)\n",
           r->blocks);
  else
    printf(" (below 95%% means the estimates are less certain than their intervals say:\n"
           "consecutive samples are correlated, and short calls are seen in bursts)\n");
  if (r->n_never) {
    printf("\nnever sampled although called (not observed is not not executed):\n");
    size_t sh = 0;
    for (; sh < r->n_never && sh < 10; sh++) {
      const bf_join_row *j = r->never[sh]->j;
      char pc[32];
      bf_fmt_ns(j->per_call_ns, pc, sizeof pc);
      printf("  %9lld calls  %9s/call  %s  %s:%lld\n", (long long)j->calls, pc, j->qualname, j->file,
             (long long)j->firstlineno);
    }
    if (r->n_never > sh) printf("  … and %zu more\n", r->n_never - sh);
  }
  printf("\nrecommended rate: %.0f Hz (every function with >= 1%% of the time would get ~100 samples "
         "in a run like this one)\n",
         r->recommended_rate_hz);
}

/* "growth_bytes", "shrink_bytes": doubles written as whole numbers. */
static void growth_shrink_json(bf_jw *w, double growth_bytes, double shrink_bytes) {
  bf_jw_key(w, "growth_bytes");
  bf_jw_numf(w, "%.0f", growth_bytes);
  bf_jw_key(w, "shrink_bytes");
  bf_jw_numf(w, "%.0f", shrink_bytes);
}

static void print_mem_json(const bf_cal_mem_report *r, double rate) {
  bf_jw w;
  bf_jw_init(&w, stdout);
  bf_jw_obj(&w);
  bf_jw_kbool(&w, "memory", 1);
  bf_jw_kint(&w, "sampled_session", r->sampled_id);
  bf_jw_kint(&w, "traced_session", r->traced_id);
  bf_jw_knum(&w, "rate_hz", rate);
  growth_shrink_json(&w, r->growth_bytes, r->shrink_bytes);
  bf_jw_kint(&w, "live_bytes", r->live_bytes);
  bf_jw_kint(&w, "alloc_bytes", r->alloc_bytes);
  bf_jw_knum(&w, "coverage", r->coverage);
  bf_jw_kint(&w, "judged", (long long)r->judged);
  bf_jw_knum(&w, "max_error", r->max_error);
  bf_jw_key(&w, "functions");
  bf_jw_arr(&w);
  for (size_t i = 0; i < r->n; i++) {
    const bf_cal_mem_row *x = &r->rows[i];
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "file", x->file ? x->file : "?");
    bf_jw_kstr(&w, "qualname", x->qualname ? x->qualname : "?");
    bf_jw_kint(&w, "firstlineno", x->firstlineno);
    bf_jw_knum(&w, "estimate", x->estimate);
    bf_jw_kpair(&w, "ci", x->lo, x->hi);
    bf_jw_knum(&w, "exact", x->exact);
    bf_jw_knum(&w, "exact_alloc", x->exact_alloc);
    bf_jw_kbool(&w, "covered", x->covered);
    growth_shrink_json(&w, x->growth_bytes, x->shrink_bytes);
    bf_jw_kint(&w, "live_bytes", x->live_bytes);
    bf_jw_kint(&w, "alloc_bytes", x->alloc_bytes);
    bf_jw_kint(&w, "calls", x->calls);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  putchar('\n');
}

static void print_mem_table(const bf_cal_mem_report *r, double rate, int limit, int color) {
  const char *b = color ? "\033[1m" : "", *dim = color ? "\033[2m" : "", *rst = color ? "\033[0m" : "";
  const char *red = color ? "\033[31m" : "";
  printf("%smemory calibration%s: sampled session %lld (record --memory at %.0f Hz: %.1f MiB resident growth, "
         "%.1f MiB shrink) against traced session %lld (trace --memory: %.1f MiB still live of %.1f MiB allocated)\n",
         b, rst, (long long)r->sampled_id, rate, r->growth_bytes / 1048576.0, r->shrink_bytes / 1048576.0,
         (long long)r->traced_id, (double)r->live_bytes / 1048576.0, (double)r->alloc_bytes / 1048576.0);
  printf("%s%-7s %-15s %7s %-3s %9s %9s  %s%s\n", dim, "GROWTH", " 95% CI", "KEPT", "IN", "ALLOC", "CALLS",
         "FUNCTION", rst);
  size_t shown = 0;
  for (size_t i = 0; i < r->n && shown < (size_t)limit; i++) {
    const bf_cal_mem_row *x = &r->rows[i];
    if (x->exact < 0.001 && x->estimate < 0.001) continue;
    char ci[40];
    snprintf(ci, sizeof ci, "[%.1f-%.1f]", x->lo * 100, x->hi * 100);
    printf("%5.1f%%  %-15s %6.1f%% %s%-3s%s %8.1f%% %9lld  %s  %s:%lld\n", x->estimate * 100, ci, x->exact * 100,
           x->covered ? "" : red, x->covered ? "yes" : "NO", rst, x->exact_alloc * 100, (long long)x->calls,
           x->qualname ? x->qualname : "?", x->file ? x->file : "?", (long long)x->firstlineno);
    shown++;
  }
  printf("\nGROWTH: the function's share of sampled resident growth; KEPT: its exact share of the bytes still\n"
         "live when the trace ended; ALLOC: of all bytes it allocated. coverage: %.0f%% of %zu functions with\n"
         ">= 1%% had KEPT inside the interval; the largest miss is %.1f points. Resident size lags allocation\n"
         "and freed memory is not always returned to the OS (docs/memory.md).\n",
         r->coverage * 100, r->judged, r->max_error * 100);
}

/* Options; -1 to go on, else the exit status. */
static int cal_parse(int argc, char **argv, double *rate, const char **clock, int *json, const char **label,
                     int *limit, int *memory) {
  static const struct option opts[] = {{"rate", required_argument, NULL, 'r'},  {"clock", required_argument, NULL, 'c'},
                                       {"json", no_argument, NULL, 'j'},        {"label", required_argument, NULL, 'l'},
                                       {"limit", required_argument, NULL, 'n'}, {"help", no_argument, NULL, 'h'},
                                       {"memory", no_argument, NULL, 'm'},      {0}};
  int c;
  while ((c = getopt_long(argc, argv, "+r:c:jl:n:mh", opts, NULL)) != -1) {
    switch (c) {
      case 'm': *memory = 1; break;
      case 'r':
        if (bf_opt_rate(optarg, rate)) return 2;
        break;
      case 'c':
        if (bf_opt_clock(optarg, clock)) return 2;
        break;
      case 'j': *json = 1; break;
      case 'l': *label = optarg; break;
      case 'n':
        *limit = atoi(optarg);
        if (*limit <= 0) {
          bf_cli_error("bad --limit '%s'", optarg);
          return 2;
        }
        break;
      case 'h': bf_cli_usage(bf_cli_find("calibrate"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind >= argc) {
    bf_cli_error("calibrate needs a command: bifocal calibrate [--rate HZ] -- python script.py ARGS");
    return 2;
  }
  return -1;
}

/* The --memory report; closes s. */
static int calibrate_memory(bf_store *s, int64_t sampled_id, int64_t traced_id, double rate, int json, int limit,
                            int color, int exit_status) {
  bf_cal_mem_report *r;
  if (bf_cal_mem_report_build(s, sampled_id, traced_id, &r) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  if (json) print_mem_json(r, rate);
  else print_mem_table(r, rate, limit, color);
  bf_cal_mem_report_free(r);
  bf_store_close(s);
  return exit_status;
}

static int calibrate_main(bf_cli *cli, int argc, char **argv) {
  double rate = 1000;
  const char *clock = "wall", *label = NULL;
  int json = 0, limit = 20, memory = 0;
  int rc = cal_parse(argc, argv, &rate, &clock, &json, &label, &limit, &memory);
  if (rc >= 0) return rc;
  char self[PATH_MAX];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) {
    bf_cli_error("cannot find the bifocal executable: %m");
    return 1;
  }
  self[sl] = 0;
  /* Make sure the database exists before two processes write to it. */
  bf_store *s;
  if ((rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s))) return rc;
  bf_store_close(s);

  char slabel[256];
  snprintf(slabel, sizeof slabel, "%s-sampled", label ? label : "calibrate");
  cal_sampler cs = {cli, strcmp(clock, "cpu") == 0, rate, slabel, memory};
  cal_tracer ct = {self, cli->db_path};
  bf_cal_opts o = {.clock = clock, .label = label, .argv = argv + optind, .start = cal_start_trace,
                   .target = cal_traced_child, .start_ud = &ct, .sample = cal_sample, .sample_ud = &cs,
                   .stop = &cal_stop, .child = &cal_child, .memory = memory};
  bf_cal_run_result run;
  bf_audit_capture_hold(cli->db_path); /* gc --force keeps out meanwhile */
  int ran = bf_cal_run(&o, &run);
  bf_audit_capture_release(cli->db_path);
  if (run.output && run.output[0]) fprintf(json ? stderr : stdout, "%s\n", run.output); /* the program's own */
  bf_cal_run_clear(&run);
  if (ran < 0) {
    bf_cli_error("calibrate: %s", run.err.msg);
    return 1;
  }
  if ((rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s))) return rc;
  if (memory) return calibrate_memory(s, run.sampled_id, run.traced_id, rate, json, limit, cli->color, run.exit_status);
  bf_cal_report *r;
  if (bf_cal_report_build(s, run.sampled_id, run.traced_id, rate, &r) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  if (json) print_json(r, clock, rate);
  else print_table(r, clock, rate, limit, cli->color);
  bf_cal_report_free(r);
  bf_store_close(s);
  return run.exit_status;
}

int bf_cmd_calibrate(bf_cli *cli, int argc, char **argv) {
  /* caught until calibrate returns: the report is written whatever comes */
  struct sigaction sa = {0}, old_sa[sizeof cal_sigs / sizeof *cal_sigs];
  sa.sa_sigaction = cal_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  cal_stop = 0;
  cal_child = 0;
  for (size_t i = 0; i < sizeof cal_sigs / sizeof *cal_sigs; i++) sigaction(cal_sigs[i], &sa, &old_sa[i]);
  int rc = calibrate_main(cli, argc, argv);
  for (size_t i = 0; i < sizeof cal_sigs / sizeof *cal_sigs; i++) sigaction(cal_sigs[i], &old_sa[i], NULL);
  return rc;
}
