/* cmd_replay.c — `bifocal replay ID --view V [...]`. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "formats.h"
#include "opts.h"
#include "out_file.h"
#include "views.h"

typedef struct replay_args {
  const char *view, *thread, *outp;
  char task_arg[512];
  bf_view_opts vo;
  const bf_format *fmt; /* the view's row of core/formats.c */
  int view_set;  /* --view given */
  int svg;       /* -o FILE.svg: the flame graph as SVG */
  int html_wrap; /* -o FILE.html of a text view: its text as an HTML page */
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
                                       {"memory", no_argument, NULL, 'M'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  r->view = "functions";
  r->vo.limit_option = "--limit";
  r->vo.async_option = "record --async";
  r->vo.color = cli->color;
  int c;
  while ((c = getopt_long(argc, argv, "v:jn:s:t:o:h", opts, NULL)) != -1) {
    switch (c) {
      case 'v':
        r->view = optarg;
        r->view_set = 1;
        break;
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
      case 'M': r->vo.memory = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("replay"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind < argc - 1) {
    bf_cli_error("replay takes one session id");
    return 2;
  }
  r->fmt = bf_format_find(BF_FMT_VIEW, r->view);
  if (!r->fmt) {
    bf_cli_error("unknown view '%s' (known: %s)", r->view, bf_format_list(BF_FMT_VIEW, ", ", 0));
    return 2;
  }
  r->view = r->fmt->name;
  if (r->vo.json && !(r->fmt->flags & BF_FMT_JSON)) {
    bf_cli_error("the %s view has no JSON form: drop --json, or use `bifocal export ID -f speedscope` "
                 "(or collapsed) for its data", r->view);
    return 2;
  }
  if (r->outp && bf_format_has_suffix(r->outp, ".svg")) {
    /* py-spy's habit: `-o profile.svg` is a flame graph, whatever the default view */
    if (r->view_set && strcmp(r->view, "flame") != 0) {
      bf_cli_error("'%s': only the flame view is drawn as SVG (use --view flame, or -o FILE.html / .txt)",
                   r->outp);
      return 2;
    }
    if (r->vo.json) {
      bf_cli_error("--json and -o FILE.svg disagree: drop one");
      return 2;
    }
    r->svg = 1;
    r->view = "flame";
    r->fmt = bf_format_find(BF_FMT_VIEW, "flame");
  }
  if (r->outp && strcmp(r->view, "heatmap") == 0 && bf_format_has_suffix(r->outp, ".html")) r->vo.html = 1;
  if (r->outp && !(r->fmt->flags & BF_FMT_HTML) && !r->vo.html && !r->vo.json &&
      (bf_format_has_suffix(r->outp, ".html") || bf_format_has_suffix(r->outp, ".htm")))
    r->html_wrap = 1;
  if (((r->fmt->flags & BF_FMT_HTML) || r->vo.html) && !r->outp && cli->stdout_tty) {
    bf_cli_error("the %s view is an HTML page: give -o FILE.html", r->view);
    return 2;
  }
  if (r->vo.memory && (r->svg || r->vo.html || (strcmp(r->view, "functions") && strcmp(r->view, "flame") &&
                                                 strcmp(r->view, "heatmap")))) {
    bf_cli_error("--memory goes with --view functions, flame (HTML) or heatmap (text or --json), not %s%s", r->view,
                 r->svg ? " as SVG" : r->vo.html ? " as HTML" : "");
    return 2;
  }
  bf_opt_term_width(cli, r->outp, &r->vo.width);
  return -1;
}

/* --memory: the memory form of functions, flame and heatmap (view_memory.c). */
static int memory_view(const replay_args *r, bf_store *s, int64_t id, FILE *out) {
  const char *v = r->view;
  if (strcmp(v, "functions") == 0) return bf_view_memory_functions(s, id, &r->vo, out);
  if (strcmp(v, "flame") == 0 && !r->svg) return bf_view_memory_flame(s, id, &r->vo, out);
  return bf_view_memory_timeline(s, id, &r->vo, out); /* heatmap (replay_parse refused the rest) */
}

/* A text view as an HTML page: its terminal text, escaped, in a <pre>. */
static int html_page(bf_store *s, int64_t id, replay_args *r, FILE *out) {
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  if (!mem) {
    bf_cli_error("out of memory");
    return -ENOMEM;
  }
  r->vo.color = 0;
  int rc = r->vo.memory ? memory_view(r, s, id, mem) : bf_format_write(r->fmt, s, id, &r->vo, mem);
  fclose(mem);
  if (rc >= 0) {
    fprintf(out, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>bifocal %s view — session %lld</title>"
                 "<style>body{margin:1em;background:#fff}pre{font:13px/1.35 ui-monospace,monospace}</style>"
                 "</head>\n<body><pre>\n", r->view, (long long)id);
    for (const char *p = buf ? buf : ""; *p; p++) {
      if (*p == '<') fputs("&lt;", out);
      else if (*p == '>') fputs("&gt;", out);
      else if (*p == '&') fputs("&amp;", out);
      else if ((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t') fputs("\xef\xbf\xbd", out);
      else fputc(*p, out);
    }
    fputs("</pre></body></html>\n", out);
  }
  free(buf);
  return rc;
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
  if (r.html_wrap) return bf_opt_output_done(s, &of, html_page(s, id, &r, of.f));
  if (r.vo.memory) return bf_opt_output_done(s, &of, memory_view(&r, s, id, of.f));
  if (r.svg) r.fmt = bf_format_find(BF_FMT_RECORD, "svg");
  return bf_opt_output_done(s, &of, bf_format_write(r.fmt, s, id, &r.vo, of.f));
}
