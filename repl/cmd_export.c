/* cmd_export.c — `bifocal export ID --format F -o FILE`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "cli.h"
#include "exports.h"
#include "formats.h"
#include "opts.h"
#include "out_file.h"
#include "share.h"
#include "views.h"

int bf_cmd_export(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                       {"output", required_argument, NULL, 'o'},
                                       BF_OPTS_FILTER,
                                       {"encrypt-to", required_argument, NULL, 'e'},
                                       {"tree", no_argument, NULL, 'R'},
                                       {"memory", no_argument, NULL, 'M'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *format = NULL, *outp = NULL, *thread = NULL, *pub = NULL;
  bf_sample_filter filter = {0};
  int c, memory = 0;
  while ((c = getopt_long(argc, argv, "f:o:t:h", opts, NULL)) != -1) {
    switch (c) {
      case 'f': format = optarg; break;
      case 'o': outp = optarg; break;
      case 't': thread = optarg; break;
      case 'S':
      case 'U':
        if (bf_opt_window(c, optarg, &filter)) return 2;
        break;
      case 'e': pub = optarg; break;
      case 'R': filter.tree = 1; break;
      case 'M': memory = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("export"), stdout); return 0;
      default: return 2;
    }
  }
  if (!format) {
    bf_cli_error("export needs --format (%s)", bf_format_list(BF_FMT_EXPORT, ", ", BF_FMT_LIST_NOTES));
    return 2;
  }
  /* py-spy's names are aliases: `flamegraph` is the SVG flame graph as py-spy writes it */
  const bf_format *fmt = bf_format_find(BF_FMT_EXPORT, format);
  if (!fmt) {
    bf_cli_error("unknown export format '%s' (known: %s)", format, bf_format_list(BF_FMT_EXPORT, ", ", BF_FMT_LIST_NOTES));
    return 2;
  }
  int sealed = (fmt->flags & BF_FMT_SEALED) != 0;
  if ((sealed && !pub) || (!sealed && pub)) {
    bf_cli_error("--format bifocal goes with --encrypt-to PUBKEY (see `bifocal keygen`)");
    return 2;
  }
  /* --memory: bytes of resident growth as the weight (record --memory sessions) */
  bf_export_fn mem_fn = !memory ? NULL : strcmp(fmt->name, "collapsed") == 0 ? bf_export_memory_collapsed
                                       : strcmp(fmt->name, "pprof") == 0    ? bf_export_pprof_memory
                                       : strcmp(fmt->name, "speedscope") == 0 ? bf_export_speedscope_memory : NULL;
  if (memory && !mem_fn) {
    bf_cli_error("--memory exports collapsed, pprof or speedscope (bytes of growth), not %s", fmt->name);
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
  if (strcmp(outp, "-") == 0 && cli->stdout_tty && (fmt->flags & BF_FMT_BINARY)) {
    char ext[32];
    snprintf(ext, sizeof ext, "%.*s", fmt->exts ? (int)strcspn(fmt->exts, " ") : 0, fmt->exts ? fmt->exts : "");
    bf_cli_error("%s is binary: give -o FILE%s", fmt->name, ext);
    return 2;
  }
  bf_store *s;
  int64_t id;
  int rc = bf_opt_session_open(cli, sealed ? 0 : BF_STORE_READONLY, optind < argc ? argv[optind] : NULL,
                               sealed ? NULL : thread, &filter, &s, &id);
  if (rc) return rc;
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
  bf_out_file of;
  if (bf_out_open(outp, &of)) {
    bf_store_close(s);
    return 1;
  }
  bf_view_opts vo = {0};
  vo.filter = filter;
  if (mem_fn) return bf_opt_output_done(s, &of, mem_fn(s, id, &filter, of.f));
  return bf_opt_output_done(s, &of, bf_format_write(fmt, s, id, &vo, of.f));
}
