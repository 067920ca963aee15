/* output.c — `record -o FILE [-f FORMAT]`: pick the output format from the
 * format name (bifocal's or py-spy's) or the file's extension, both from the
 * table of formats (core/formats.c), and write a session through it and
 * out_file.c. */
#include <string.h>

#include "cli.h"
#include "formats.h"
#include "out_file.h"

int bf_cli_out_kind_of(const char *path, const char *format, bf_cli_out_kind *kind) {
  if (format) {
    const bf_format *f = bf_format_find(BF_FMT_RECORD, format);
    if (f) {
      /* a name two rows answer to takes the file's shape: py-spy's `-f flamegraph -o x.svg` */
      const bf_format *e = path ? bf_format_by_ext(path) : NULL;
      if (e && bf_format_named(e, format)) f = e;
      *kind = f;
      return 0;
    }
    bf_cli_error("unknown --format '%s' (known: %s)", format, bf_format_list(BF_FMT_RECORD, ", ", BF_FMT_LIST_ALIASES));
    return 2;
  }
  if (!path || strcmp(path, "-") == 0) {
    bf_cli_error("-o - (stdout) needs --format (%s)", bf_format_list(BF_FMT_RECORD, ", ", BF_FMT_LIST_ALIASES));
    return 2;
  }
  const bf_format *f = bf_format_by_ext(path);
  if (f) {
    *kind = f;
    return 0;
  }
  char known[1024];
  snprintf(known, sizeof known, "%s", bf_format_list(BF_FMT_RECORD, ", ", BF_FMT_LIST_ALIASES));
  bf_cli_error("cannot tell the format of '%s' from its extension; give --format (%s) or use %s", path, known,
               bf_format_ext_list(", ", 0));
  return 2;
}

const char *bf_cli_out_kind_name(bf_cli_out_kind kind) { return kind ? kind->title : "?"; }

int bf_cli_write_output(bf_store *s, int64_t session_id, bf_cli_out_kind kind, const char *path, int tree) {
  bf_out_file of;
  if (bf_out_open(path, &of)) return 1;
  bf_view_opts vo = {0};
  vo.filter.tree = tree;
  int rc = bf_format_write(kind, s, session_id, &vo, of.f);
  if (rc < 0) bf_cli_error("cannot write '%s': %s", path, bf_store_errmsg(s));
  int crc = bf_out_close(&of, rc >= 0);
  return rc < 0 || crc ? 1 : 0;
}
