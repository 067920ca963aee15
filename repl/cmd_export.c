/* cmd_export.c — `bifocal export ID --format F -o FILE`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "cli.h"
#include "opts.h"
#include "otlp.h"
#include "out_file.h"
#include "share.h"
#include "util.h"
#include "views.h"

typedef int (*export_fn)(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

static int export_svg(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_view_opts vo = {0};
  vo.filter = *f;
  return bf_view_flame_svg(s, session_id, &vo, out);
}

/* The formats; one line each. `bifocal` (sealed, --encrypt-to) is handled apart. */
static const struct {
  const char *name;
  export_fn fn;
} formats[] = {
    {"collapsed", bf_export_collapsed}, {"speedscope", bf_export_speedscope}, {"pstats", bf_export_pstats},
    {"pprof", bf_export_pprof},         {"chrome", bf_export_chrome},         {"svg", export_svg},
    {"gecko", bf_export_gecko},         {"otlp", bf_export_otlp},             {NULL, NULL},
};
#define KNOWN_FORMATS "collapsed, speedscope, pstats, pprof, chrome, svg, gecko, otlp, bifocal (with --encrypt-to)"

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
    bf_cli_error("export needs --format (" KNOWN_FORMATS ")");
    return 2;
  }
  /* py-spy's names; `flamegraph` is the SVG flame graph as py-spy writes it */
  if (strcmp(format, "flamegraph") == 0 || strcmp(format, "flame") == 0) format = "svg";
  else if (strcmp(format, "raw") == 0) format = "collapsed";
  else if (strcmp(format, "chrometrace") == 0) format = "chrome";
  int sealed = strcmp(format, "bifocal") == 0;
  if ((sealed && !pub) || (!sealed && pub)) {
    bf_cli_error("--format bifocal goes with --encrypt-to PUBKEY (see `bifocal keygen`)");
    return 2;
  }
  int fi = 0;
  while (formats[fi].name && strcmp(formats[fi].name, format) != 0) fi++;
  if (!sealed && !formats[fi].name) {
    bf_cli_error("unknown export format '%s' (known: " KNOWN_FORMATS ")", format);
    return 2;
  }
  /* --memory: bytes of resident growth as the weight (record --memory sessions) */
  export_fn mem_fn = !memory ? NULL : strcmp(format, "collapsed") == 0 ? bf_export_memory_collapsed
                                    : strcmp(format, "pprof") == 0    ? bf_export_pprof_memory
                                    : strcmp(format, "speedscope") == 0 ? bf_export_speedscope_memory : NULL;
  if (memory && !mem_fn) {
    bf_cli_error("--memory exports collapsed, pprof or speedscope (bytes of growth), not %s", format);
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
  if (strcmp(outp, "-") == 0 && cli->stdout_tty && (strcmp(format, "pprof") == 0 || strcmp(format, "otlp") == 0)) {
    bf_cli_error("%s is binary: give -o FILE%s", format, strcmp(format, "otlp") == 0 ? ".otlp.pb" : ".pb.gz");
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
  return bf_opt_output_done(s, &of, (mem_fn ? mem_fn : formats[fi].fn)(s, id, &filter, of.f));
}
