/* cmd_keygen.c — `bifocal keygen [-o NAME]`: a key pair for sealed exports. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "share.h"

int bf_cmd_keygen(bf_cli *cli, int argc, char **argv) {
  (void)cli;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *name = "bifocal";
  int c;
  while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
    if (c == 'o')
      name = optarg;
    else if (c == 'h') {
      bf_cli_usage(bf_cli_find("keygen"), stdout);
      return 0;
    } else
      return 2;
  }
  if (optind < argc) {
    bf_cli_error("keygen takes no arguments ('%s'); use -o NAME", argv[optind]);
    return 2;
  }
  char fpr[17];
  bf_err err = BF_ERR_INIT;
  if (bf_share_keygen(name, fpr, &err) < 0) {
    bf_cli_error("%s", err.msg);
    return 1;
  }
  printf("%s.pub  public key (give it to whoever sends you profiles)\n"
         "%s.key  secret key, mode 0600 (keep it; `bifocal import FILE --key %s.key`)\n"
         "fingerprint %s\n",
         name, name, name, fpr);
  return 0;
}
