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
#include "clock.h"
#include "inspect.h"
#include "opts.h"
#include "sampler.h"
#include "top.h"



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

typedef struct live {
  bf_inspect *l;
  bf_inspect_opts lo;
  bf_top t;
  int pid, with_idle, limit, sort_total, threads;
  double rate;
  int64_t window; /* start of the picture's window */
} live;

/* One frame: two header lines cut to the width (nothing wraps), then the
 * function or thread table. */
static void live_draw(live *v, int64_t now) {
  struct winsize ws = {0};
  ioctl(1, TIOCGWINSZ, &ws);
  int rows = ws.ws_row ? ws.ws_row : 24, cols = ws.ws_col ? ws.ws_col : 80;
  char h1[256], h2[256];
  size_t np = bf_inspect_count(v->l);
  char procs[48] = "";
  if (v->lo.subprocesses) snprintf(procs, sizeof procs, " +%zu child%s", np - 1, np == 2 ? "" : "ren");
  snprintf(h1, sizeof h1, "bifocal live  pid %d%s  Python %s  %.0f Hz  window %.0fs%s%s%s", v->pid, procs,
           bf_inspect_python_version(v->l), v->rate, (double)(now - v->window) / 1e9,
           v->lo.gil_only ? "  GIL only" : "", v->lo.native ? "  native" : "", v->with_idle ? "  idle too" : "");
  snprintf(h2, sizeof h2, "%lld %sthread-samples, %lld invalid  sort %s  [q]uit [s]ort [t]hreads",
           (long long)v->t.samples, v->with_idle ? "" : "busy ", (long long)v->t.invalid,
           v->sort_total ? "total" : "self");
  fit(h1, cols);
  fit(h2, cols);
  fputs("\033[H", stdout);
  printf("%s\033[K\n%s\033[K\n\033[K\n", h1, h2);
  if (v->threads)
    bf_top_print_threads(&v->t, stdout, v->lo.subprocesses, cols, "\033[K\n");
  else
    bf_top_print(&v->t, stdout, v->sort_total, v->limit > 0 && v->limit < rows - 5 ? v->limit : rows - 5, cols,
                 "\033[K\n");
  fputs("\033[J", stdout);
  fflush(stdout);
  /* a sliding picture: start a fresh window every 10 s */
  if (now - v->window > 10000000000LL) {
    bf_top_reset(&v->t);
    v->window = now;
  }
}

/* Sample and redraw until q, a signal or the process ends. Returns NULL, or
 * why sampling failed; *gone when the process exited. */
static const char *live_loop(live *v, int *gone) {
  int64_t interval = (int64_t)(1e9 / v->rate), next = bf_mono_ns(), last_draw = 0;
  v->window = bf_mono_ns();
  while (!live_stop) {
    int torn = 0;
    int rc = bf_inspect_sample(v->l, 1, bf_top_inspect_add, &v->t, &torn);
    v->t.invalid += torn;
    if (rc == -ESRCH) {
      *gone = 1;
      return NULL;
    }
    if (rc < 0 && rc != -EIO) return bf_inspect_errmsg(v->l);
    if (rc == 0) bf_top_tick(&v->t);
    int64_t now = bf_mono_ns();
    if (resized) { /* SIGWINCH: redraw for the new size at once */
      resized = 0;
      last_draw = 0;
    }
    if (now - last_draw > 500000000) {
      last_draw = now;
      live_draw(v, now);
    }
    next += interval;
    now = bf_mono_ns();
    int wait_ms = next > now ? (int)((next - now) / 1000000) : 0;
    struct pollfd pfd = {0, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms) > 0) {
      char k;
      if (read(0, &k, 1) == 1) {
        if (k == 'q') break;
        if (k == 's') v->sort_total = !v->sort_total;
        if (k == 't') v->threads = !v->threads;
        last_draw = 0;
      }
    }
  }
  return NULL;
}

int bf_cmd_live(bf_cli *cli, int argc, char **argv) {
  live v = {.rate = 200};
  int c;
  if ((c = bf_opt_inspect("live", argc, argv, &v.pid, &v.lo, &v.rate, NULL, &v.with_idle, &v.limit)) >= 0) return c;
  if (v.lo.native && v.rate > 100) v.rate = 100; /* every sample stops the threads: gentler */
  if (!isatty(0) || !isatty(1)) {
    bf_cli_error("live needs a terminal (use `bifocal top -p PID` or `bifocal record -p PID`)");
    return 2;
  }
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((c = bf_audit_begin_look(cli, "live", v.pid, &au))) return c;
  if ((c = bf_inspect_open(v.pid, &v.lo, &v.l))) {
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
  v.t.with_idle = v.with_idle;
  int gone = 0;
  const char *fail = live_loop(&v, &gone);
  fputs("\033[?25h\033[?1049l", stdout);
  fflush(stdout);
  tcsetattr(0, TCSANOW, &old);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGWINCH, SIG_DFL);
  if (gone) fprintf(stderr, "bifocal: process %d exited\n", v.pid);
  if (fail) bf_cli_error("%s", fail);
  bf_top_free(&v.t);
  bf_audit_end(au, fail, 0);
  bf_inspect_free(v.l);
  return fail ? 1 : 0;
}
