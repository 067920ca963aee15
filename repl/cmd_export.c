/* cmd_export.c — `bifocal export ID --format F -o FILE`. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "cli.h"
#include "share.h"
#include "views.h"

/* Write into a temporary file beside the target, then rename: a failed export
 * leaves nothing half-written. Files are created 0600. */
static FILE *open_tmp(const char *path, char **tmp_out) {
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) return NULL;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    free(tmp);
    return NULL;
  }
  *tmp_out = tmp;
  return fdopen(fd, "w");
}

int bf_cmd_export(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                       {"output", required_argument, NULL, 'o'},
                                       {"encrypt-to", required_argument, NULL, 'e'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *format = NULL, *outp = NULL, *pub = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "f:o:h", opts, NULL)) != -1) {
    switch (c) {
      case 'f': format = optarg; break;
      case 'o': outp = optarg; break;
      case 'e': pub = optarg; break;
      case 'h': bf_cli_usage(bf_cli_find("export"), stdout); return 0;
      default: return 2;
    }
  }
  if (!format) {
    bf_cli_error("export needs --format (collapsed)");
    return 2;
  }
  int sealed = strcmp(format, "bifocal") == 0;
  if ((sealed && !pub) || (!sealed && pub)) {
    bf_cli_error("--format bifocal goes with --encrypt-to PUBKEY (see `bifocal keygen`)");
    return 2;
  }
  if (!sealed && strcmp(format, "collapsed") != 0) {
    bf_cli_error("unknown export format '%s' (known: collapsed, bifocal)", format);
    return 2;
  }
  if (!outp) {
    bf_cli_error("export needs -o FILE ('-' for stdout)");
    return 2;
  }
  if (sealed && strcmp(outp, "-") == 0) {
    bf_cli_error("a sealed export is binary: give -o FILE, not stdout");
    return 2;
  }
  if (optind < argc - 1) {
    bf_cli_error("export takes one session id");
    return 2;
  }
  bf_store *s;
  int rc = bf_cli_open_store(cli, sealed ? 0 : BF_STORE_READONLY, &s);
  if (rc) return rc;
  int64_t id;
  if ((rc = bf_cli_session_arg(cli, s, optind < argc ? argv[optind] : NULL, &id))) {
    bf_store_close(s);
    return rc;
  }
  if (sealed) {
    bf_audit *au = NULL;
    if (!(rc = bf_audit_begin(cli, s, "export", 0, &au))) {
      rc = bf_share_export(s, id, pub, outp) < 0;
      if (rc) bf_cli_error("%s", bf_store_errmsg(s));
      bf_audit_end(au, rc ? bf_store_errmsg(s) : NULL, id);
    }
    bf_store_close(s);
    return rc;
  }
  char *tmp = NULL;
  FILE *f = strcmp(outp, "-") == 0 ? stdout : open_tmp(outp, &tmp);
  if (!f) {
    bf_cli_error("cannot write '%s': %m", outp);
    bf_store_close(s);
    return 1;
  }
  int erc = bf_export_collapsed(s, id, NULL, f);
  int werr = (f != stdout) ? fclose(f) : fflush(f);
  if (erc < 0 || werr) {
    bf_cli_error("%s", erc < 0 ? bf_store_errmsg(s) : "write failed");
    if (tmp) unlink(tmp);
    free(tmp);
    bf_store_close(s);
    return 1;
  }
  if (tmp && rename(tmp, outp) != 0) {
    bf_cli_error("cannot write '%s': %m", outp);
    unlink(tmp);
    free(tmp);
    bf_store_close(s);
    return 1;
  }
  free(tmp);
  bf_store_close(s);
  return 0;
}
