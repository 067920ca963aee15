/* cmd_import.c — `bifocal import FILE [--label L] [--ttl T]`. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fleet.h"
#include "opts.h"
#include "import.h"
#include "share.h"

int bf_cmd_import(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"label", required_argument, NULL, 'l'},
                                       {"ttl", required_argument, NULL, 't'},
                                       {"key", required_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  if (bf_import_is_fleet(argc, argv)) return bf_cmd_import_pyroscope(cli, argc, argv); /* cmd_import_pyroscope.c */
  bf_import_opts io = {.profiler_version = BF_VERSION};
  const char *key = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "l:t:k:h", opts, NULL)) != -1) {
    switch (c) {
      case 'k': key = optarg; break;
      case 'l': io.label = optarg; break;
      case 't':
        if (bf_opt_ttl(optarg, &io.ttl_ns)) return 2;
        break;
      case 'h': bf_cli_usage(bf_cli_find("import"), stdout); return 0;
      default: return 2;
    }
  }
  if (optind != argc - 1) {
    bf_cli_error("import needs exactly one FILE (usage: bifocal import FILE [--label L])");
    return 2;
  }
  const char *path = argv[optind];
  FILE *probe = fopen(path, "r");
  if (!probe) {
    bf_cli_error("cannot read '%s': %m", path);
    return 1;
  }
  fclose(probe);
  int sealed = bf_share_is_sealed(path) == 1;
  if (sealed != (key != NULL)) {
    bf_cli_error(sealed ? "'%s' is a sealed bifocal export; pass --key SECRET.key"
                        : "'%s' is not a sealed bifocal export; --key is only for those", path);
    return 2;
  }
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s);
  if (rc) return rc;
  int64_t id = 0;
  if ((sealed ? bf_share_import(s, path, key, &io, &id) : bf_import_collapsed(s, path, &io, &id)) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  bf_store_close(s);
  printf("%lld\n", (long long)id);
  return 0;
}
