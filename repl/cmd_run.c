/* cmd_run.c — `bifocal run SCRIPT.lua [ARGS]`: a Lua check whose exit status is
 * the verdict (0 every check held, 1 one failed, 2 script error). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>

#include "cli.h"
#include "lua_bifocal.h"

static void on_sigint(int sig) {
  (void)sig;
  bf_lua_interrupt();
}

/* A bare name that is not a file here is looked up among the shipped scripts:
 * $BIFOCAL_SCRIPTS, then ../scripts and ../share/bifocal/scripts next to the binary. */
static const char *find_script(const char *name, char *buf, size_t len) {
  if (access(name, R_OK) == 0 || strchr(name, '/')) return name;
  const char *env = getenv("BIFOCAL_SCRIPTS");
  if (env && *env) {
    snprintf(buf, len, "%s/%s", env, name);
    if (access(buf, R_OK) == 0) return buf;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    static const char *const rel[] = {"../scripts", "../share/bifocal/scripts"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
      char cand[PATH_MAX + 64];
      snprintf(cand, sizeof cand, "%s/%s/%s", exe, rel[i], name);
      if (access(cand, R_OK) == 0 && realpath(cand, buf)) return buf;
    }
  }
  return name;
}

int bf_cmd_run(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                       {"unsafe", no_argument, NULL, 'u'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  bf_lua_opts lo = {.db_path = cli->db_path, .sandbox = 1};
  int c;
  /* "+": options stop at the script name; what follows belongs to the script */
  while ((c = getopt_long(argc, argv, "+o:ut:h", opts, NULL)) != -1) {
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
      case 'h': bf_cli_usage(bf_cli_find("run"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind >= argc) {
    bf_cli_error("run needs a SCRIPT.lua (usage: bifocal run [--out DIR] [--unsafe] [--timeout S] SCRIPT.lua [ARGS])");
    return 2;
  }
  char buf[PATH_MAX];
  const char *script = find_script(argv[optind], buf, sizeof buf);
  if (access(script, R_OK) != 0) {
    bf_cli_error("cannot read script '%s': %s", argv[optind], strerror(errno));
    return 2;
  }
  char err[PATH_MAX + 128];
  lua_State *L = bf_lua_new(&lo, err, sizeof err);
  if (!L) {
    bf_cli_error("%s", err);
    return 2;
  }
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  char *msg = NULL;
  int rc = bf_lua_run_file(L, script, argc - optind - 1, argv + optind + 1, &msg);
  sigaction(SIGINT, &old, NULL);
  lua_close(L);
  fflush(stdout);
  if (rc == 2) fprintf(stderr, "%s\n", msg ? msg : "script error");
  free(msg);
  return rc;
}
