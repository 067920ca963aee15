/* cmd_run.c — `bifocal run SCRIPT.lua [ARGS]`: a Lua check whose exit status is
 * the verdict (0 every check held, 1 one failed, 2 script error). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>

#include "cli.h"
#include "lua_host.h"
#include "text.h"

/* "512M", "1G", "1.5GiB", "65536" (bytes) -> bytes; 0 when malformed. */
static size_t parse_bytes(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v > 0)) return 0;
  double mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1048576.0; end++; break;
    case 'g': case 'G': mul = 1073741824.0; end++; break;
    case 't': case 'T': mul = 1099511627776.0; end++; break;
    default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (mul > 1 && (*end == 'b' || *end == 'B')) end++;
  if (*end) return 0;
  v *= mul;
  if (v < 1048576.0 || v > 1099511627776.0 * 64) return 0;
  return (size_t)v;
}

int bf_cmd_run(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                       {"unsafe", no_argument, NULL, 'u'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"memory", required_argument, NULL, 'm'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  bf_lua_opts lo = {.db_path = cli->db_path, .sandbox = 1};
  int c;
  /* "+": options stop at the script name; what follows belongs to the script */
  while ((c = getopt_long(argc, argv, "+o:ut:m:h", opts, NULL)) != -1) {
    switch (c) {
      case 'o': lo.out_dir = optarg; break;
      case 'u': lo.sandbox = 0; break;
      case 't': {
        char *end;
        errno = 0;
        double v = strtod(optarg, &end);
        if (errno || *end || !(v > 0) || v > 1e6) {
          bf_cli_error("bad --timeout '%s' (seconds, e.g. 30 or 0.5)", optarg);
          return 2;
        }
        lo.timeout_s = v;
        break;
      }
      case 'm':
        if (!(lo.memory_bytes = parse_bytes(optarg))) {
          bf_cli_error("bad --memory '%s' (a size from 1M, e.g. 512M or 2G)", optarg);
          return 2;
        }
        break;
      case 'h': bf_cli_usage(bf_cli_find("run"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind >= argc) {
    bf_cli_error("run needs a SCRIPT.lua (usage: bifocal run [--out DIR] [--unsafe] [--timeout S] [--memory SIZE] SCRIPT.lua [ARGS])");
    return 2;
  }
  size_t sl = strlen(argv[optind]);
  if (sl > 3 && strcmp(argv[optind] + sl - 3, ".py") == 0) { /* Tachyon's `run script.py` */
    bf_cli_error("'%s' is Python: bifocal run runs Lua checks; to profile it as Tachyon's run does, "
                 "use `bifocal record -o FILE -- python3 %s`", argv[optind], argv[optind]);
    return 2;
  }
  char buf[PATH_MAX];
  const char *script = bf_lua_find_script(argv[optind], buf, sizeof buf);
  if (access(script, R_OK) != 0) {
    bf_cli_error("cannot read script '%s': %s", argv[optind], strerror(errno));
    return 2;
  }
  bf_err err = BF_ERR_INIT;
  lua_State *L = bf_lua_new(&lo, &err);
  if (!L) {
    bf_cli_error("%s", err.msg);
    return 2;
  }
  int rc = bf_lua_run_main(L, script, argc - optind - 1, argv + optind + 1, &err); /* closes L */
  fflush(stdout);
  if (rc == BF_LUA_ERROR) {
    /* the message may quote names from profiles: controls escaped, the line
     * breaks of multi-line messages (usage texts) kept */
    bf_fputs_inert_lines(stderr, err.msg); /* "script error" when out of memory */
    fputc('\n', stderr);
  }
  return rc;
}
