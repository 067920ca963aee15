/* cmd_diff.c — `bifocal diff A B`: what changed between two sessions. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "diff.h"
#include "opts.h"
#include "correlate.h"
#include "out_file.h"

typedef struct diff_args {
  bf_diff_opts o;
  int force, flame;
  const char *view, *outp;
} diff_args;

/* Options and their checks; -1 to go on, else the exit status. OUT: *d. */
static int diff_parse(bf_cli *cli, int argc, char **argv, diff_args *d) {
  static const struct option opts[] = {{"threshold", required_argument, NULL, 'T'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"force", no_argument, NULL, 'F'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"view", required_argument, NULL, 'v'},
                                       {"output", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  d->o.limit_option = "--limit";
  d->o.color = cli->color;
  d->o.threshold_pp = 0.5;
  d->view = "functions";
  int c;
  while ((c = getopt_long(argc, argv, "jn:v:o:h", opts, NULL)) != -1) {
    switch (c) {
      case 'T': {
        char *end;
        double v = strtod(optarg, &end);
        if (*end || !(v >= 0 && v <= 100)) {
          bf_cli_error("bad --threshold '%s' (percentage points, 0 to 100)", optarg);
          return 2;
        }
        d->o.threshold_pp = v;
        break;
      }
      case 'j': d->o.json = 1; break;
      case 'F': d->force = 1; break;
      case 'n':
        if (bf_opt_limit(optarg, &d->o.limit)) return 2;
        break;
      case 'v': d->view = optarg; break;
      case 'o': d->outp = optarg; break;
      case 'h': bf_cli_usage(bf_cli_find("diff"), stdout); return 0;
      default: return 2;
    }
  }
  if (argc - optind != 2) {
    bf_cli_error("diff takes two sessions: diff A B (A = before, B = after)");
    return 2;
  }
  d->flame = strcmp(d->view, "flame") == 0;
  if (!d->flame && strcmp(d->view, "functions") != 0) {
    bf_cli_error("unknown diff view '%s' (known: functions, flame)", d->view);
    return 2;
  }
  if (d->flame && !d->outp && cli->stdout_tty) {
    bf_cli_error("the differential flame graph is an HTML page: give -o FILE.html");
    return 2;
  }
  bf_opt_term_width(cli, d->outp, &d->o.width);
  return -1;
}

int bf_cmd_diff(bf_cli *cli, int argc, char **argv) {
  diff_args d = {0};
  int rc = diff_parse(cli, argc, argv, &d);
  if (rc >= 0) return rc;
  bf_store *s;
  rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s);
  if (rc) return rc;
  int64_t a, b;
  if ((rc = bf_cli_session_arg(cli, s, argv[optind], &a)) || (rc = bf_cli_session_arg(cli, s, argv[optind + 1], &b))) {
    bf_store_close(s);
    return rc;
  }
  bf_err why = BF_ERR_INIT;
  int cmp = bf_diff_compatible(s, a, b, &why);
  if (cmp < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  if (cmp == BF_DIFF_NOT_COMPARABLE) {
    if (!d.force) {
      bf_cli_error("sessions %lld and %lld are not comparable: %s (use --force to compare anyway)", (long long)a,
                   (long long)b, why.msg);
      bf_store_close(s);
      return 1;
    }
    bf_cli_warn("comparing anyway (--force): %s", why.msg);
  }
  bf_session_info *ia = NULL, *ib = NULL;
  bf_err interp = BF_ERR_INIT;
  if (bf_store_session_get(s, a, &ia) == 0 && bf_store_session_get(s, b, &ib) == 0 &&
      bf_sessions_interp_differ(ia, ib, &interp))
    bf_cli_warn("%.511s", interp.msg); /* as long as it always was */
  bf_session_info_free(ia);
  bf_session_info_free(ib);
  bf_out_file of;
  if (bf_out_open(d.outp, &of)) {
    bf_store_close(s);
    return 1;
  }
  if (of.f != stdout) d.o.color = 0;
  return bf_opt_output_done(s, &of, d.flame ? bf_diff_flame(s, a, b, &d.o, of.f) : bf_diff_functions(s, a, b, &d.o, of.f));
}
