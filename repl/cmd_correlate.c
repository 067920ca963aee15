/* cmd_correlate.c — `bifocal correlate SAMPLED TRACED [--json] [--limit N]`. */
#include <getopt.h>
#include <stdlib.h>

#include "cli.h"
#include "correlate.h"

int bf_cmd_correlate(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  int json = 0, limit = 25;
  int c;
  while ((c = getopt_long(argc, argv, "jn:h", opts, NULL)) != -1) {
    switch (c) {
      case 'j': json = 1; break;
      case 'n': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v < 0 || v > 1000000) {
          bf_cli_error("bad --limit '%s' (a number, 0 = all)", optarg);
          return 2;
        }
        limit = (int)v;
        break;
      }
      case 'h': bf_cli_usage(bf_cli_find("correlate"), stdout); return 0;
      default: return 2;
    }
  }
  if (argc - optind != 2) {
    bf_cli_error("correlate needs two sessions: SAMPLED TRACED (see `bifocal sessions`)");
    return 2;
  }
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s);
  if (rc) return rc;
  int64_t sid, tid;
  if ((rc = bf_cli_session_arg(cli, s, argv[optind], &sid)) ||
      (rc = bf_cli_session_arg(cli, s, argv[optind + 1], &tid))) {
    bf_store_close(s);
    return rc;
  }
  bf_join *j = NULL;
  if (bf_join_sessions(s, sid, tid, &j) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  if (j->interp_warning[0]) bf_cli_warn("%s", j->interp_warning);
  if (json)
    bf_join_json(j, stdout);
  else
    bf_join_print(j, stdout, limit, "--limit", cli->color);
  bf_join_free(j);
  bf_store_close(s);
  return 0;
}
