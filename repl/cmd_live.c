/* cmd_live.c — `bifocal live PID`: a top-like view of a running process that
 * redraws in place on the alternate screen (cursor home, clear to end of
 * line: no flicker). Keys: q quits, s switches self/total sort, t threads.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "cli.h"
#include "look.h"
#include "sampler.h"
#include "top.h"


int bf_top_cli_opts(const char *cmd, int argc, char **argv, int *pid, bf_look_opts *o, double *rate,
                    int64_t *dur, int *with_idle, int *limit); /* cmd_top.c */

static volatile int live_stop;
static void on_sig(int s) {
  (void)s;
  live_stop = 1;
}

static volatile sig_atomic_t resized;
static void on_winch(int s) {
  (void)s;
  resized = 1;
}

/* Cut a header line to cols bytes (never inside a UTF-8 character; the
 * header's own text is ASCII, the version string too). */
static void fit(char *s, int cols) {
  if (cols <= 0 || (int)strlen(s) <= cols) return;
  int k = cols;
  while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
  s[k] = 0;
}

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int live_add(void *ud, bf_smp *h, int pid, const char *version, const char *build, const bf_smp_thread *th,
                    size_t n) {
  (void)h;
  (void)version;
  (void)build;
  return bf_top_add_pid(ud, pid, th, n);
}

int bf_cmd_live(bf_cli *cli, int argc, char **argv) {
  double rate = 200;
  int pid, with_idle = 0, limit = 0, c;
  bf_look_opts lo = {0};
  if ((c = bf_top_cli_opts("live", argc, argv, &pid, &lo, &rate, NULL, &with_idle, &limit)) >= 0) return c;
  if (lo.native && rate > 100) rate = 100; /* every sample stops the threads: gentler */
  if (!isatty(0) || !isatty(1)) {
    bf_cli_error("live needs a terminal (use `bifocal top -p PID` or `bifocal record -p PID`)");
    return 2;
  }
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((c = bf_audit_begin_look(cli, "live", pid, &au))) return c;
  bf_look *l = NULL;
  if ((c = bf_look_open(pid, &lo, &l))) {
    bf_audit_end(au, "attach failed", 0);
    return c;
  }
  struct termios old, raw;
  tcgetattr(0, &old);
  raw = old;
  raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  tcsetattr(0, TCSANOW, &raw);
  live_stop = 0;
  resized = 0;
  signal(SIGINT, on_sig);
  signal(SIGTERM, on_sig);
  signal(SIGWINCH, on_winch);
  fputs("\033[?1049h\033[?25l", stdout);
  bf_top t = {0};
  int sort_total = 0, threads = 0, gone = 0;
  int64_t interval = (int64_t)(1e9 / rate), next = mono(), last_draw = 0, window = mono();
  t.with_idle = with_idle;
  const char *fail = NULL;
  while (!live_stop) {
    int torn = 0;
    int rc = bf_look_sample(l, 1, live_add, &t, &torn);
    t.invalid += torn;
    if (rc == -ESRCH) {
      gone = 1;
      break;
    }
    if (rc < 0 && rc != -EIO) {
      fail = bf_look_errmsg(l);
      break;
    }
    if (rc == 0) bf_top_tick(&t);
    int64_t now = mono();
    if (resized) { /* SIGWINCH: redraw for the new size at once */
      resized = 0;
      last_draw = 0;
    }
    if (now - last_draw > 500000000) {
      last_draw = now;
      struct winsize ws = {0};
      ioctl(1, TIOCGWINSZ, &ws);
      int rows = ws.ws_row ? ws.ws_row : 24, cols = ws.ws_col ? ws.ws_col : 80;
      /* two short header lines, each cut to the width: nothing wraps */
      char h1[256], h2[256];
      size_t np = bf_look_count(l);
      char procs[48] = "";
      if (lo.subprocesses) snprintf(procs, sizeof procs, " +%zu child%s", np - 1, np == 2 ? "" : "ren");
      snprintf(h1, sizeof h1, "bifocal live  pid %d%s  Python %s  %.0f Hz  window %.0fs%s%s%s", pid, procs,
               bf_look_python_version(l), rate, (double)(now - window) / 1e9, lo.gil_only ? "  GIL only" : "",
               lo.native ? "  native" : "", with_idle ? "  idle too" : "");
      snprintf(h2, sizeof h2, "%lld %sthread-samples, %lld invalid  sort %s  [q]uit [s]ort [t]hreads",
               (long long)t.samples, with_idle ? "" : "busy ", (long long)t.invalid,
               sort_total ? "total" : "self");
      fit(h1, cols);
      fit(h2, cols);
      fputs("\033[H", stdout);
      printf("%s\033[K\n%s\033[K\n\033[K\n", h1, h2);
      if (threads)
        bf_top_print_threads(&t, stdout, lo.subprocesses, cols, "\033[K\n");
      else
        bf_top_print(&t, stdout, sort_total, limit > 0 && limit < rows - 5 ? limit : rows - 5, cols, "\033[K\n");
      fputs("\033[J", stdout);
      fflush(stdout);
      /* a sliding picture: start a fresh window every 10 s */
      if (now - window > 10000000000LL) {
        bf_top_reset(&t);
        window = now;
      }
    }
    next += interval;
    now = mono();
    int wait_ms = next > now ? (int)((next - now) / 1000000) : 0;
    struct pollfd pfd = {0, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms) > 0) {
      char k;
      if (read(0, &k, 1) == 1) {
        if (k == 'q') break;
        if (k == 's') sort_total = !sort_total;
        if (k == 't') threads = !threads;
        last_draw = 0;
      }
    }
  }
  fputs("\033[?25h\033[?1049l", stdout);
  fflush(stdout);
  tcsetattr(0, TCSANOW, &old);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGWINCH, SIG_DFL);
  if (gone) fprintf(stderr, "bifocal: process %d exited\n", pid);
  if (fail) bf_cli_error("%s", fail);
  bf_top_free(&t);
  bf_audit_end(au, fail, 0);
  bf_look_free(l);
  return fail ? 1 : 0;
}
