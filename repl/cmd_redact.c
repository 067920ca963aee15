/* cmd_redact.c — `bifocal redact ID -o OUT.db [--keep PREFIX ...]`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "cli.h"
#include "redact.h"

int bf_cmd_redact(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"keep", required_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *outp = NULL;
  const char **keep = calloc((size_t)argc + 1, sizeof *keep);
  size_t nkeep = 0;
  int c, rc = 2;
  if (!keep) return 1;
  while ((c = getopt_long(argc, argv, "o:k:h", opts, NULL)) != -1) {
    switch (c) {
      case 'o': outp = optarg; break;
      case 'k': keep[nkeep++] = optarg; break;
      case 'h': bf_cli_usage(bf_cli_find("redact"), stdout); free(keep); return 0;
      default: free(keep); return 2;
    }
  }
  if (!outp) {
    bf_cli_error("redact needs -o OUT.db (a new file)");
    goto out;
  }
  if (optind < argc - 1) {
    bf_cli_error("redact takes one session id");
    goto out;
  }
  bf_store *s;
  if ((rc = bf_cli_open_store(cli, 0, &s))) goto out;
  int64_t id, new_id = 0;
  if ((rc = bf_cli_session_arg(cli, s, optind < argc ? argv[optind] : NULL, &id))) {
    bf_store_close(s);
    goto out;
  }
  bf_audit *au = NULL;
  if ((rc = bf_audit_begin(cli, s, "redact", 0, &au))) {
    bf_store_close(s);
    goto out;
  }
  bf_redact_opts ro = {.keep = keep, .nkeep = nkeep};
  /* a stop signal interrupts the copy (nothing is published: the output is
   * linked into place only when whole) and the row still says so */
  bf_audit_stops_catch();
  int red = bf_redact_session(s, id, outp, &ro, &new_id);
  int sig = bf_audit_stops_caught();
  if (red < 0 && sig) {
    char why[96];
    snprintf(why, sizeof why, "interrupted by signal %d (%s); nothing written", sig, strsignal(sig));
    bf_cli_error("redact: %s", why);
    bf_audit_end(au, why, id);
    bf_store_close(s);
    free(keep);
    bf_audit_stops_release(); /* ends the process by that signal */
    return 1;
  }
  if (red < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_audit_end(au, bf_store_errmsg(s), id);
    rc = 1;
  } else {
    bf_audit_end(au, NULL, id);
    printf("%s: session %lld, redacted\n", outp, (long long)new_id);
    rc = 0;
  }
  bf_store_close(s);
  bf_audit_stops_release(); /* a signal that came once the copy was done takes effect now */
out:
  free(keep);
  return rc;
}
