/* cmd_replay.c — `bifocal replay ID --view V [...]`. */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"
#include "views.h"

int bf_cmd_replay(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"view", required_argument, NULL, 'v'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"sort", required_argument, NULL, 's'},
                                       {"thread", required_argument, NULL, 't'},
                                       {"since", required_argument, NULL, 'S'},
                                       {"until", required_argument, NULL, 'U'},
                                       {"output", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *view = "functions", *thread = NULL, *outp = NULL;
  bf_view_opts vo = {0};
  vo.color = cli->color;
  int c;
  while ((c = getopt_long(argc, argv, "v:jn:s:t:o:h", opts, NULL)) != -1) {
    switch (c) {
      case 'v': view = optarg; break;
      case 'j': vo.json = 1; break;
      case 'n': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v <= 0 || v > 1000000) {
          bf_cli_error("bad --limit '%s' (a positive number)", optarg);
          return 2;
        }
        vo.limit = (int)v;
        break;
      }
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
      case 'S':
      case 'U': {
        int64_t ns;
        if (bf_parse_duration_ns(optarg, &ns) < 0) {
          bf_cli_error("bad --%s '%s' (seconds from the session start, e.g. 2.5 or 500ms)",
                       c == 'S' ? "since" : "until", optarg);
          return 2;
        }
        if (c == 'S')
          vo.filter.since_ns = ns;
        else
          vo.filter.until_ns = ns;
        break;
      }
      case 'o': outp = optarg; break;
      case 'h': bf_cli_usage(bf_cli_find("replay"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind < argc - 1) {
    bf_cli_error("replay takes one session id");
    return 2;
  }
  if (strcmp(view, "functions") != 0) {
    bf_cli_error("unknown view '%s' (known: functions)", view);
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
  if (thread) {
    bf_thread_ref *th = NULL;
    size_t nth = 0;
    if (bf_store_threads(s, id, &th, &nth) < 0) {
      bf_cli_error("%s", bf_store_errmsg(s));
      bf_store_close(s);
      return 1;
    }
    char *end;
    long long want = strtoll(thread, &end, 0);
    int numeric = *end == 0;
    for (size_t i = 0; i < nth; i++)
      if ((numeric && th[i].native_tid == want) || (th[i].name && strcmp(th[i].name, thread) == 0))
        vo.filter.thread_id = th[i].id;
    bf_thread_refs_free(th, nth);
    if (!vo.filter.thread_id) {
      bf_cli_error("session %lld has no thread '%s' (give a native thread id or name)", (long long)id, thread);
      bf_store_close(s);
      return 1;
    }
  }
  FILE *out = stdout;
  if (outp && strcmp(outp, "-") != 0) {
    int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* profiles are private */
    out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!out) {
      bf_cli_error("cannot write '%s': %m", outp);
      bf_store_close(s);
      return 1;
    }
    vo.color = 0;
  }
  rc = bf_view_functions(s, id, &vo, out);
  if (out != stdout) fclose(out);
  if (rc < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  bf_store_close(s);
  return 0;
}
