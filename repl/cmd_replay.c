/* cmd_replay.c — `bifocal replay ID --view V [...]`. */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"
#include "out_file.h"
#include "util.h"
#include "views.h"

typedef int (*view_fn)(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* The views; `html` = the view writes an HTML page (refused on a terminal). */
static const struct {
  const char *name;
  view_fn fn;
  int html;
} views[] = {
    {"functions", bf_view_functions, 0}, {"flame", bf_view_flame, 1}, {"heatmap", bf_view_heatmap, 0},
    {"gil", bf_view_gil, 0},             {"stack", bf_view_stack, 0}, {"tasks", bf_view_tasks, 0}, {NULL, NULL, 0},
};

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int bf_cmd_replay(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"view", required_argument, NULL, 'v'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"sort", required_argument, NULL, 's'},
                                       BF_OPTS_FILTER,
                                       {"task", required_argument, NULL, 'T'},
                                       {"output", required_argument, NULL, 'o'},
                                       {"html", no_argument, NULL, 'H'},
                                       {"buckets", required_argument, NULL, 'b'},
                                       {"tree", no_argument, NULL, 'R'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *view = "functions", *thread = NULL, *outp = NULL;
  char task_arg[512];
  bf_view_opts vo = {0};
  vo.color = cli->color;
  int c;
  while ((c = getopt_long(argc, argv, "v:jn:s:t:o:h", opts, NULL)) != -1) {
    switch (c) {
      case 'v': view = optarg; break;
      case 'j': vo.json = 1; break;
      case 'n':
        if (bf_opt_limit(optarg, &vo.limit)) return 2;
        break;
      case 's':
        if (strcmp(optarg, "self") == 0)
          vo.sort = BF_SORT_SELF;
        else if (strcmp(optarg, "total") == 0)
          vo.sort = BF_SORT_TOTAL;
        else {
          bf_cli_error("bad --sort '%s' (self or total)", optarg);
          return 2;
        }
        break;
      case 't': thread = optarg; break;
      case 'T': /* a task is the synthetic thread task:NAME (or its id) */
        snprintf(task_arg, sizeof task_arg, "%s%s", optarg[strspn(optarg, "-0123456789")] ? "task:" : "", optarg);
        thread = task_arg;
        break;
      case 'S':
      case 'U':
        if (bf_opt_window(c, optarg, &vo.filter)) return 2;
        break;
      case 'o': outp = optarg; break;
      case 'H': vo.html = 1; break;
      case 'b': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v < 2 || v > 1000) {
          bf_cli_error("bad --buckets '%s' (2 to 1000)", optarg);
          return 2;
        }
        vo.buckets = (int)v;
        break;
      }
      case 'R': vo.filter.tree = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("replay"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind < argc - 1) {
    bf_cli_error("replay takes one session id");
    return 2;
  }
  int vi = 0;
  while (views[vi].name && strcmp(views[vi].name, view) != 0) vi++;
  if (!views[vi].name) {
    bf_cli_error("unknown view '%s' (known: functions, flame, heatmap, gil, stack, tasks)", view);
    return 2;
  }
  if (outp && strcmp(view, "heatmap") == 0 && ends_with(outp, ".html")) vo.html = 1;
  if ((views[vi].html || vo.html) && !outp && cli->stdout_tty) {
    bf_cli_error("the %s view is an HTML page: give -o FILE.html", view);
    return 2;
  }
  if (cli->stdout_tty && !outp) {
    struct winsize ws;
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) vo.width = ws.ws_col;
  }
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s);
  if (rc) return rc;
  int64_t id;
  if ((rc = bf_cli_session_arg(cli, s, optind < argc ? argv[optind] : NULL, &id))) {
    bf_store_close(s);
    return rc;
  }
  if (thread && (rc = bf_cli_thread_arg(s, id, thread, &vo.filter.thread_id))) {
    bf_store_close(s);
    return rc;
  }
  bf_out_file of;
  if (bf_out_open(outp, &of)) {
    bf_store_close(s);
    return 1;
  }
  if (of.f != stdout) vo.color = 0;
  rc = views[vi].fn(s, id, &vo, of.f);
  if (rc < 0) bf_cli_error("%s", bf_store_errmsg(s));
  int crc = bf_out_close(&of, rc >= 0);
  bf_store_close(s);
  return rc < 0 || crc ? 1 : 0;
}
