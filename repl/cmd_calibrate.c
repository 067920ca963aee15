/* cmd_calibrate.c — `bifocal calibrate [--rate HZ] [--clock C] [--json] -- python ...`:
 * run one reproduction traced *and* sampled at once (the sampler attached to the
 * traced process), then say per function how far the sampled estimate is from
 * the exact traced share, whether its 95% interval covered it, which short
 * functions were never sampled, and which rate would have sized them.
 *
 * The trace runs with --no-builtins, so time in C functions stays in the
 * calling Python function on both sides (the sampler sees Python frames only),
 * and both sides are normalised over the functions the trace knows, so the
 * runner's bootstrap frames (sampled, never traced) do not dilute estimates.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "correlate.h"
#include "profile.h"
#include "sampler.h"
#include "util.h"

static volatile int cal_stop;
static pid_t cal_child;
static void cal_signal(int sig) {
  cal_stop = 1;
  if (cal_child > 0) kill(cal_child, sig);
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The child of pid running the traced program: bifocal trace may first run
 * short probes of the interpreter, so pick the child whose command line carries
 * the tracer's bootstrap arguments. 0 if none yet. */
static int traced_child(int pid) {
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

typedef struct cal_row {
  const bf_join_row *j;
  double estimate, lo, hi, exact;
  int covered;
} cal_row;

static int by_exact(const void *a, const void *b) {
  const cal_row *x = a, *y = b;
  if (x->exact != y->exact) return x->exact < y->exact ? 1 : -1;
  return strcmp(x->j->qualname, y->j->qualname);
}

static int by_calls(const void *a, const void *b) {
  const cal_row *x = a, *y = b;
  if (x->j->calls != y->j->calls) return x->j->calls < y->j->calls ? 1 : -1;
  return strcmp(x->j->qualname, y->j->qualname);
}

int bf_cmd_calibrate(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"rate", required_argument, NULL, 'r'},
                                       {"clock", required_argument, NULL, 'c'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"label", required_argument, NULL, 'l'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  double rate = 1000;
  const char *clock = "wall", *label = NULL;
  int json = 0, limit = 20, c;
  char *end;
  while ((c = getopt_long(argc, argv, "+r:c:jl:n:h", opts, NULL)) != -1) {
    switch (c) {
      case 'r':
        errno = 0;
        rate = strtod(optarg, &end);
        if (errno || *end || !(rate >= 1 && rate <= 1e6)) {
          bf_cli_error("bad --rate '%s' (a number of Hz from 1 to 1000000)", optarg);
          return 2;
        }
        break;
      case 'c':
        if (strcmp(optarg, "wall") && strcmp(optarg, "cpu")) {
          bf_cli_error("bad --clock '%s' (use wall or cpu)", optarg);
          return 2;
        }
        clock = optarg;
        break;
      case 'j': json = 1; break;
      case 'l': label = optarg; break;
      case 'n':
        limit = atoi(optarg);
        if (limit <= 0) {
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
  char self[PATH_MAX];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) {
    bf_cli_error("cannot find the bifocal executable: %m");
    return 1;
  }
  self[sl] = 0;
  /* Make sure the database exists before two processes write to it. */
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s);
  if (rc) return rc;
  bf_store_close(s);

  char tlabel[256], slabel[256];
  snprintf(tlabel, sizeof tlabel, "%s-traced", label ? label : "calibrate");
  snprintf(slabel, sizeof slabel, "%s-sampled", label ? label : "calibrate");
  int ncmd = argc - optind;
  char **targv = calloc((size_t)ncmd + 16, sizeof *targv);
  if (!targv) return 1;
  int k = 0;
  targv[k++] = self;
  targv[k++] = "--db";
  targv[k++] = (char *)cli->db_path;
  targv[k++] = "trace";
  targv[k++] = "--no-builtins";
  targv[k++] = "--clock";
  targv[k++] = (char *)clock;
  targv[k++] = "--label";
  targv[k++] = tlabel;
  targv[k++] = "--";
  for (int i = optind; i < argc; i++) targv[k++] = argv[i];
  targv[k] = NULL;

  int pfd[2];
  if (pipe(pfd) < 0) {
    free(targv);
    bf_cli_error("pipe: %m");
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = cal_signal;
  sigemptyset(&sa.sa_mask);
  cal_stop = 0;
  pid_t tp = fork();
  if (tp < 0) {
    free(targv);
    bf_cli_error("fork: %m");
    return 1;
  }
  if (tp == 0) {
    dup2(pfd[1], 1);
    close(pfd[0]);
    close(pfd[1]);
    execv(self, targv);
    _exit(127);
  }
  free(targv);
  close(pfd[1]);
  cal_child = tp;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  /* Find the traced Python process and wait until its runtime is up. */
  int py = 0;
  bf_smp *h = bf_smp_new();
  int64_t give_up = mono_ns() + 20 * 1000000000LL;
  int attached = 0;
  while (!cal_stop && mono_ns() < give_up) {
    if (waitpid(tp, NULL, WNOHANG) == tp) {
      tp = 0;
      break;
    }
    if (!py) py = traced_child(tp);
    if (py && bf_smp_attach(h, py) == 0) {
      attached = 1;
      break;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  bf_smp_free(h);
  int64_t sampled_id = 0;
  int exit_status = -1;
  char errbuf[512] = "";
  if (attached) {
    bf_smp *rh = bf_smp_new();
    bf_smp_record_opts o = {0};
    o.pid = py;
    o.clock_cpu = strcmp(clock, "cpu") == 0;
    o.rate_hz = rate;
    o.label = slabel;
    o.stop = &cal_stop;
    if (bf_cli_open_store(cli, BF_STORE_CREATE, &s) == 0) {
      int r = bf_smp_record(rh, s, &o, &sampled_id, &exit_status);
      if (r < 0 && !sampled_id) snprintf(errbuf, sizeof errbuf, "%s", bf_smp_errmsg(rh));
      bf_store_close(s);
    }
    bf_smp_free(rh);
  } else if (!cal_stop) {
    snprintf(errbuf, sizeof errbuf, "the traced program ended or never started a Python runtime in time");
  }
  /* Collect the trace's output; its last line is the traced session id. */
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  ssize_t n;
  while (buf && (n = read(pfd[0], buf + len, cap - len - 1)) > 0) {
    len += (size_t)n;
    if (cap - len < 1024) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
  }
  close(pfd[0]);
  int tstatus = 0;
  if (tp > 0)
    while (waitpid(tp, &tstatus, 0) < 0 && errno == EINTR) {
    }
  cal_child = 0;
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  int64_t traced_id = 0;
  if (buf) {
    buf[len] = 0;
    while (len && buf[len - 1] == '\n') buf[--len] = 0;
    char *last = strrchr(buf, '\n');
    char *idline = last ? last + 1 : buf;
    traced_id = strtoll(idline, &end, 10);
    if (*end) traced_id = 0;
    if (last) *last = 0;
    else if (traced_id) buf[0] = 0;
    /* the program's own output */
    if (buf[0]) fprintf(json ? stderr : stdout, "%s\n", buf);
    free(buf);
  }
  if (!sampled_id || !traced_id) {
    bf_cli_error("calibrate: %s", errbuf[0] ? errbuf
                                            : !traced_id ? "the trace did not produce a session"
                                                         : "the sampler did not produce a session");
    return 1;
  }

  if ((rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s))) return rc;
  bf_join *j = NULL;
  if (bf_join_sessions(s, sampled_id, traced_id, &j) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  bf_session_info *sinfo = NULL;
  bf_store_session_get(s, sampled_id, &sinfo);
  /* Normalise both lenses over the functions the trace knows. */
  double sum_self_samples = 0, sum_self_ns = 0;
  size_t nt = 0;
  for (size_t i = 0; i < j->n; i++) {
    const bf_join_row *r = &j->rows[i];
    if (!r->traced) continue;
    nt++;
    if (r->observed) sum_self_samples += r->self_share;
    sum_self_ns += r->self_ns > 0 ? (double)r->self_ns : 0;
  }
  double n_eff = 0; /* samples that fell in traced functions */
  for (size_t i = 0; i < j->n; i++)
    if (j->rows[i].traced && j->rows[i].observed && j->sampled_samples > 0) n_eff += j->rows[i].self_share;
  n_eff *= (double)j->sampled_samples;
  cal_row *rows = calloc(nt ? nt : 1, sizeof *rows);
  size_t m = 0, covered = 0, judged = 0, never = 0;
  for (size_t i = 0; i < j->n; i++) {
    const bf_join_row *r = &j->rows[i];
    if (!r->traced) continue;
    cal_row *x = &rows[m++];
    x->j = r;
    x->exact = sum_self_ns > 0 ? (double)r->self_ns / sum_self_ns : 0;
    x->estimate = (r->observed && sum_self_samples > 0) ? r->self_share / sum_self_samples : 0;
    bf_wilson(x->estimate * n_eff, n_eff, &x->lo, &x->hi);
    x->covered = x->exact >= x->lo && x->exact <= x->hi;
    if (x->exact >= 0.005 || x->estimate >= 0.005) {
      judged++;
      covered += x->covered;
    }
    if (!r->observed && r->calls > 0) never++;
  }
  qsort(rows, m, sizeof *rows, by_exact);
  /* Rate that would give every function with >= 1% exact share an expected
   * 100 samples (interval half-width about a fifth of its share). */
  double duration_s = sinfo ? (double)sinfo->duration_ns / 1e9 : 0;
  double achieved = sinfo ? sinfo->achieved_rate_hz : 0;
  double per_hz = (duration_s > 0 && rate > 0) ? n_eff / rate : 0; /* samples per Hz of rate */
  double rec = rate;
  for (size_t i = 0; i < m; i++) {
    if (rows[i].exact < 0.01 || per_hz <= 0) continue;
    double need = 100.0 / rows[i].exact / per_hz;
    if (need > rec) rec = need;
  }
  if (rec > 100000) rec = 100000;
  rec = ceil(rec / 100) * 100;
  double coverage = judged ? (double)covered / (double)judged : NAN;

  if (json) {
    printf("{\"sampled_session\":%lld,\"traced_session\":%lld,\"clock\":", (long long)sampled_id,
           (long long)traced_id);
    bf_json_str(stdout, clock);
    printf(",\"rate_hz\":");
    bf_json_num(stdout, rate);
    printf(",\"achieved_rate_hz\":");
    bf_json_num(stdout, achieved);
    printf(",\"samples\":%lld,\"samples_in_traced_functions\":", (long long)j->sampled_samples);
    bf_json_num(stdout, round(n_eff));
    printf(",\"coverage\":");
    bf_json_num(stdout, coverage);
    printf(",\"recommended_rate_hz\":");
    bf_json_num(stdout, rec);
    printf(",\"functions\":[");
    for (size_t i = 0; i < m; i++) {
      const cal_row *x = &rows[i];
      if (i) putchar(',');
      printf("{\"file\":");
      bf_json_str(stdout, x->j->file);
      printf(",\"qualname\":");
      bf_json_str(stdout, x->j->qualname);
      printf(",\"firstlineno\":%lld,\"estimate\":", (long long)x->j->firstlineno);
      if (x->j->observed)
        bf_json_num(stdout, x->estimate);
      else
        fputs("null", stdout);
      printf(",\"ci\":[");
      bf_json_num(stdout, x->lo);
      putchar(',');
      bf_json_num(stdout, x->hi);
      printf("],\"exact\":");
      bf_json_num(stdout, x->exact);
      printf(",\"covered\":%s,\"calls\":%lld,\"samples\":%lld,\"per_call_ns\":", x->covered ? "true" : "false",
             (long long)x->j->calls, (long long)(x->j->observed ? x->j->self_samples : 0));
      bf_json_num(stdout, x->j->per_call_ns);
      putchar('}');
    }
    printf("],\"never_sampled\":[");
    qsort(rows, m, sizeof *rows, by_calls);
    int first = 1;
    for (size_t i = 0; i < m; i++) {
      if (rows[i].j->observed || rows[i].j->calls <= 0) continue;
      if (!first) putchar(',');
      first = 0;
      printf("{\"qualname\":");
      bf_json_str(stdout, rows[i].j->qualname);
      printf(",\"file\":");
      bf_json_str(stdout, rows[i].j->file);
      printf(",\"firstlineno\":%lld,\"calls\":%lld,\"exact\":", (long long)rows[i].j->firstlineno,
             (long long)rows[i].j->calls);
      bf_json_num(stdout, rows[i].exact);
      putchar('}');
    }
    printf("]}\n");
  } else {
    const char *b = cli->color ? "\033[1m" : "", *dim = cli->color ? "\033[2m" : "", *rst = cli->color ? "\033[0m" : "";
    const char *red = cli->color ? "\033[31m" : "";
    printf("%scalibration%s: sampled session %lld (%s clock, asked %.0f Hz, achieved %.0f Hz) against "
           "traced session %lld\n",
           b, rst, (long long)sampled_id, clock, rate, achieved, (long long)traced_id);
    printf("%s%-7s %-15s %7s %-3s %9s %8s  %s%s\n", dim, "EST.", " 95% CI", "EXACT", "IN", "CALLS", "SAMPLES",
           "FUNCTION", rst);
    size_t shown = 0;
    for (size_t i = 0; i < m && shown < (size_t)limit; i++) {
      const cal_row *x = &rows[i];
      if (x->exact < 0.001 && x->estimate < 0.001) continue;
      char ci[40];
      snprintf(ci, sizeof ci, "[%.1f-%.1f]", x->lo * 100, x->hi * 100);
      char est[16];
      if (x->j->observed)
        snprintf(est, sizeof est, "%5.1f%%", x->estimate * 100);
      else
        snprintf(est, sizeof est, "  n/o");
      printf("%-7s %-15s %6.1f%% %s%-3s%s %9lld %8lld  %s  %s:%lld\n", est, ci, x->exact * 100,
             x->covered ? "" : red, x->covered ? "yes" : "NO", rst, (long long)x->j->calls,
             (long long)(x->j->observed ? x->j->self_samples : 0), x->j->qualname, x->j->file,
             (long long)x->j->firstlineno);
      shown++;
    }
    printf("\ncoverage: %.0f%% of %zu functions with >= 0.5%% share had the exact share inside the 95%% interval",
           coverage * 100, judged);
    printf(" (below 95%% means the estimates are less certain than their intervals say:\n"
           "consecutive samples are correlated, and short calls are seen in bursts)\n");
    qsort(rows, m, sizeof *rows, by_calls);
    if (never) {
      printf("\nnever sampled although called (not observed is not not executed):\n");
      size_t sh = 0;
      for (size_t i = 0; i < m && sh < 10; i++) {
        const bf_join_row *r = rows[i].j;
        if (r->observed || r->calls <= 0) continue;
        char pc[32];
        bf_fmt_ns(r->per_call_ns, pc, sizeof pc);
        printf("  %9lld calls  %9s/call  %s  %s:%lld\n", (long long)r->calls, pc, r->qualname, r->file,
               (long long)r->firstlineno);
        sh++;
      }
      if (never > sh) printf("  … and %zu more\n", never - sh);
    }
    printf("\nrecommended rate: %.0f Hz (every function with >= 1%% of the time would get ~100 samples "
           "in a run like this one)\n",
           rec);
  }
  free(rows);
  bf_session_info_free(sinfo);
  bf_join_free(j);
  bf_store_close(s);
  (void)exit_status;
  return WIFEXITED(tstatus) && WEXITSTATUS(tstatus) == 0 ? 0 : (WIFEXITED(tstatus) ? WEXITSTATUS(tstatus) : 1);
}
