/* cmd_replay.c — `bifocal replay ID --view V [...]`. */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

typedef struct replay_args {
  const char *view, *thread, *outp;
  char task_arg[512];
  bf_view_opts vo;
  int vi; /* index in views[] */
} replay_args;

/* Options and their checks; -1 to go on, else the exit status. OUT: *r. */
static int replay_parse(bf_cli *cli, int argc, char **argv, replay_args *r) {
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
  r->view = "functions";
  r->vo.limit_option = "--limit";
  r->vo.async_option = "record --async";
  r->vo.color = cli->color;
  int c;
  while ((c = getopt_long(argc, argv, "v:jn:s:t:o:h", opts, NULL)) != -1) {
    switch (c) {
      case 'v': r->view = optarg; break;
      case 'j': r->vo.json = 1; break;
      case 'n':
        if (bf_opt_limit(optarg, &r->vo.limit)) return 2;
        break;
      case 's':
        if (strcmp(optarg, "self") == 0)
          r->vo.sort = BF_SORT_SELF;
        else if (strcmp(optarg, "total") == 0)
          r->vo.sort = BF_SORT_TOTAL;
        else {
          bf_cli_error("bad --sort '%s' (self or total)", optarg);
          return 2;
        }
        break;
      case 't': r->thread = optarg; break;
      case 'T': /* a task is the synthetic thread task:NAME (or its id) */
        snprintf(r->task_arg, sizeof r->task_arg, "%s%s", optarg[strspn(optarg, "-0123456789")] ? "task:" : "", optarg);
        r->thread = r->task_arg;
        break;
      case 'S':
      case 'U':
        if (bf_opt_window(c, optarg, &r->vo.filter)) return 2;
        break;
      case 'o': r->outp = optarg; break;
      case 'H': r->vo.html = 1; break;
      case 'b': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v < 2 || v > 1000) {
          bf_cli_error("bad --buckets '%s' (2 to 1000)", optarg);
          return 2;
        }
        r->vo.buckets = (int)v;
        break;
      }
      case 'R': r->vo.filter.tree = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("replay"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind < argc - 1) {
    bf_cli_error("replay takes one session id");
    return 2;
  }
  r->vi = 0;
  while (views[r->vi].name && strcmp(views[r->vi].name, r->view) != 0) r->vi++;
  if (!views[r->vi].name) {
    bf_cli_error("unknown view '%s' (known: functions, flame, heatmap, gil, stack, tasks)", r->view);
    return 2;
  }
  if (r->outp && strcmp(r->view, "heatmap") == 0 && ends_with(r->outp, ".html")) r->vo.html = 1;
  if ((views[r->vi].html || r->vo.html) && !r->outp && cli->stdout_tty) {
    bf_cli_error("the %s view is an HTML page: give -o FILE.html", r->view);
    return 2;
  }
  bf_opt_term_width(cli, r->outp, &r->vo.width);
  return -1;
}

int bf_cmd_replay(bf_cli *cli, int argc, char **argv) {
  replay_args r = {0};
  int rc = replay_parse(cli, argc, argv, &r);
  if (rc >= 0) return rc;
  bf_store *s;
  int64_t id;
  rc = bf_opt_session_open(cli, BF_STORE_READONLY, optind < argc ? argv[optind] : NULL, r.thread, &r.vo.filter, &s, &id);
  if (rc) return rc;
  bf_out_file of;
  if (bf_out_open(r.outp, &of)) {
    bf_store_close(s);
    return 1;
  }
  if (of.f != stdout) r.vo.color = 0;
  return bf_opt_output_done(s, &of, views[r.vi].fn(s, id, &r.vo, of.f));
}
