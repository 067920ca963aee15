/* output.c — `record -o FILE [-f FORMAT]`: pick the output format from the
 * format name (bifocal's or py-spy's) or the file's extension, and write a
 * session through the public view/export entry points and out_file.c. */
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "out_file.h"
#include "views.h"

static const struct {
  const char *name; /* as given to --format */
  bf_cli_out_kind kind;
} names[] = {
    {"flame", BF_CLI_OUT_FLAME},           {"html", BF_CLI_OUT_FLAME},
    {"flamegraph", BF_CLI_OUT_FLAME}, /* py-spy */
    {"speedscope", BF_CLI_OUT_SPEEDSCOPE}, {"pprof", BF_CLI_OUT_PPROF},
    {"collapsed", BF_CLI_OUT_COLLAPSED},   {"raw", BF_CLI_OUT_COLLAPSED}, /* py-spy */
    {"chrome", BF_CLI_OUT_CHROME},         {"chrometrace", BF_CLI_OUT_CHROME}, /* py-spy */
    {"pstats", BF_CLI_OUT_PSTATS},         {"svg", BF_CLI_OUT_SVG},
    {"gecko", BF_CLI_OUT_GECKO},           {NULL, 0},
};

static const struct {
  const char *ext;
  bf_cli_out_kind kind;
} exts[] = {
    {".html", BF_CLI_OUT_FLAME},       {".htm", BF_CLI_OUT_FLAME},
    {".speedscope.json", BF_CLI_OUT_SPEEDSCOPE}, {".gecko.json", BF_CLI_OUT_GECKO},
    {".trace.json", BF_CLI_OUT_CHROME}, {".chrome.json", BF_CLI_OUT_CHROME},
    {".json", BF_CLI_OUT_SPEEDSCOPE},  {".pb.gz", BF_CLI_OUT_PPROF},
    {".pprof", BF_CLI_OUT_PPROF},      {".pb", BF_CLI_OUT_PPROF},
    {".collapsed", BF_CLI_OUT_COLLAPSED}, {".folded", BF_CLI_OUT_COLLAPSED},
    {".txt", BF_CLI_OUT_COLLAPSED},    {".prof", BF_CLI_OUT_PSTATS},
    {".pstats", BF_CLI_OUT_PSTATS},    {".svg", BF_CLI_OUT_SVG},
    {NULL, 0},
};

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcasecmp(s + a - b, suf) == 0;
}

int bf_cli_out_kind_of(const char *path, const char *format, bf_cli_out_kind *kind) {
  if (format) {
    for (int i = 0; names[i].name; i++)
      if (strcmp(names[i].name, format) == 0) {
        *kind = names[i].kind;
        /* py-spy's `-f flamegraph -o x.svg`: the flame graph in the file's shape */
        if (*kind == BF_CLI_OUT_FLAME && path && ends_with(path, ".svg")) *kind = BF_CLI_OUT_SVG;
        return 0;
      }
    bf_cli_error("unknown --format '%s' (known: " BF_CLI_OUT_FORMATS ")", format);
    return 2;
  }
  if (!path || strcmp(path, "-") == 0) {
    bf_cli_error("-o - (stdout) needs --format (" BF_CLI_OUT_FORMATS ")");
    return 2;
  }
  for (int i = 0; exts[i].ext; i++)
    if (ends_with(path, exts[i].ext)) {
      *kind = exts[i].kind;
      return 0;
    }
  bf_cli_error("cannot tell the format of '%s' from its extension; give --format ("
               BF_CLI_OUT_FORMATS ") or use .html, .svg, .speedscope.json, .pb.gz, .txt, .prof, .trace.json",
               path);
  return 2;
}

const char *bf_cli_out_kind_name(bf_cli_out_kind kind) {
  switch (kind) {
    case BF_CLI_OUT_FLAME: return "flame graph";
    case BF_CLI_OUT_SPEEDSCOPE: return "speedscope profile";
    case BF_CLI_OUT_PPROF: return "pprof profile";
    case BF_CLI_OUT_COLLAPSED: return "collapsed stacks";
    case BF_CLI_OUT_CHROME: return "Chrome trace";
    case BF_CLI_OUT_PSTATS: return "pstats profile";
    case BF_CLI_OUT_SVG: return "SVG flame graph";
    case BF_CLI_OUT_GECKO: return "Gecko profile (Firefox Profiler)";
  }
  return "?";
}

int bf_cli_write_output(bf_store *s, int64_t session_id, bf_cli_out_kind kind, const char *path, int tree) {
  bf_out_file of;
  if (bf_out_open(path, &of)) return 1;
  bf_sample_filter filter = {0};
  bf_view_opts vo = {0};
  filter.tree = vo.filter.tree = tree;
  int rc;
  switch (kind) {
    case BF_CLI_OUT_FLAME: rc = bf_view_flame(s, session_id, &vo, of.f); break;
    case BF_CLI_OUT_SPEEDSCOPE: rc = bf_export_speedscope(s, session_id, &filter, of.f); break;
    case BF_CLI_OUT_PPROF: rc = bf_export_pprof(s, session_id, &filter, of.f); break;
    case BF_CLI_OUT_COLLAPSED: rc = bf_export_collapsed(s, session_id, &filter, of.f); break;
    case BF_CLI_OUT_CHROME: rc = bf_export_chrome(s, session_id, &filter, of.f); break;
    case BF_CLI_OUT_PSTATS: rc = bf_export_pstats(s, session_id, &filter, of.f); break;
    case BF_CLI_OUT_SVG: rc = bf_view_flame_svg(s, session_id, &vo, of.f); break;
    case BF_CLI_OUT_GECKO: rc = bf_export_gecko(s, session_id, &filter, of.f); break;
    default: rc = -22;
  }
  if (rc < 0) bf_cli_error("cannot write '%s': %s", path, bf_store_errmsg(s));
  int crc = bf_out_close(&of, rc >= 0);
  return rc < 0 || crc ? 1 : 0;
}
