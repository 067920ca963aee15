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
#include "sampler.h"

int bf_smp_cli_pid(const char *arg, int *pid);

typedef struct bf_top bf_top;
typedef struct bf_top_fn {
  const bf_smp_code *code;
  int64_t self, total;
  int64_t stamp;
} bf_top_fn;
typedef struct bf_top_thread {
  int64_t tid;
  char name[32];
  int py_named;
  int64_t samples, on_cpu, gil, idle;
  const bf_smp_code *last_top;
} bf_top_thread;
struct bf_top {
  bf_top_fn *fn;
  size_t nfn, cap;
  bf_top_thread *th;
  size_t nth, cap_th;
  int64_t samples, ticks, invalid, stamp;
};
void bf_top_reset(bf_top *t);
int bf_top_add(bf_top *t, const bf_smp_thread *th, size_t n);
void bf_top_print(bf_top *t, FILE *f, int by_total, int max_rows, int width, const char *eol);
void bf_top_print_threads(bf_top *t, FILE *f, const char *eol);
void bf_top_free(bf_top *t);

static volatile int live_stop;
static void on_sig(int s) {
  (void)s;
  live_stop = 1;
}

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int bf_cmd_live(bf_cli *cli, int argc, char **argv) {
  (void)cli;
  static const struct option opts[] = {{"rate", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  double rate = 200;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'r') {
      rate = atof(optarg);
      if (!(rate >= 1 && rate <= 100000)) {
        bf_cli_error("bad --rate '%s' (1 to 100000 Hz)", optarg);
        return 2;
      }
    } else if (c == 'h') {
      printf("usage: bifocal live PID [--rate HZ]   (keys: q quit, s sort, t threads)\n");
      return 0;
    } else {
      return 2;
    }
  }
  if (optind + 1 != argc) {
    bf_cli_error("live needs exactly one PID (usage: bifocal live PID)");
    return 2;
  }
  int pid;
  if (bf_smp_cli_pid(argv[optind], &pid)) return 2;
  if (!isatty(0) || !isatty(1)) {
    bf_cli_error("live needs a terminal (use `bifocal top PID` or `bifocal record --pid PID`)");
    return 2;
  }
  bf_audit *au = NULL; /* audited before the target is touched */
  int arc = bf_audit_begin(cli, NULL, "live", pid, &au);
  if (arc) return arc;
  bf_smp *h = bf_smp_new();
  if (!h || bf_smp_attach(h, pid) < 0) {
    bf_cli_error("%s", h ? bf_smp_errmsg(h) : "out of memory");
    bf_audit_end(au, h ? bf_smp_errmsg(h) : "out of memory", 0);
    bf_smp_free(h);
    return 1;
  }
  struct termios old, raw;
  tcgetattr(0, &old);
  raw = old;
  raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  tcsetattr(0, TCSANOW, &raw);
  live_stop = 0;
  signal(SIGINT, on_sig);
  signal(SIGTERM, on_sig);
  fputs("\033[?1049h\033[?25l", stdout);
  bf_top t = {0};
  int sort_total = 0, threads = 0, gone = 0;
  int64_t interval = (int64_t)(1e9 / rate), next = mono(), last_draw = 0, window = mono();
  while (!live_stop) {
    const bf_smp_thread *th;
    size_t n;
    int rc = bf_smp_sample(h, BF_SMP_WANT_STATE, &th, &n);
    if (rc == -ESRCH) {
      gone = 1;
      break;
    }
    if (rc == 0)
      bf_top_add(&t, th, n);
    else
      t.invalid++;
    int64_t now = mono();
    if (now - last_draw > 500000000) {
      last_draw = now;
      struct winsize ws = {0};
      ioctl(1, TIOCGWINSZ, &ws);
      int rows = ws.ws_row ? ws.ws_row : 24, cols = ws.ws_col ? ws.ws_col : 80;
      fputs("\033[H", stdout);
      printf("bifocal live — pid %d, Python %s — %.0f Hz, window %.0fs, %lld busy thread-samples, %lld "
             "invalid — sort: %s — q quit, s sort, t threads\033[K\n\033[K\n",
             pid, bf_smp_python_version(h), rate, (double)(now - window) / 1e9,
             (long long)t.samples, (long long)t.invalid, sort_total ? "total" : "self");
      if (threads)
        bf_top_print_threads(&t, stdout, "\033[K\n");
      else
        bf_top_print(&t, stdout, sort_total, rows - 4, cols, "\033[K\n");
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
  if (gone) fprintf(stderr, "bifocal: process %d exited\n", pid);
  bf_top_free(&t);
  bf_audit_end(au, NULL, 0);
  bf_smp_free(h);
  return 0;
}
