/* test_formats.c — the table of outputs (core/formats.c) is consistent: names
 * unique, each row one writer, every name and alias and extension finds its
 * own row, the py-spy spellings land where py-spy puts them. */
#include <string.h>

#include "check.h"
#include "formats.h"

/* Each space-separated word of list, NUL-terminated into w, to fn. */
static void each_word(const char *list, void (*fn)(const bf_format *, const char *), const bf_format *f) {
  for (const char *p = list; p && *p;) {
    size_t m = strcspn(p, " ");
    char w[64];
    snprintf(w, sizeof w, "%.*s", (int)m, p);
    fn(f, w);
    p += m;
    while (*p == ' ') p++;
  }
}

static void ext_finds_row(const bf_format *f, const char *ext) {
  char path[96];
  snprintf(path, sizeof path, "/tmp/Out%s", ext);
  CHECK(bf_format_by_ext(path) == f);
}

static void alias_finds_a_row(const bf_format *f, const char *alias) {
  /* an alias may be shared (flamegraph), but its own row answers to it */
  CHECK(bf_format_named(f, alias));
  for (unsigned role = 1; role <= BF_FMT_VIEW; role <<= 1)
    if (f->roles & role) CHECK(bf_format_find(role, alias) != NULL);
}

int main(void) {
  int n = 0;
  for (const bf_format *f = bf_formats; f->name; f++, n++) {
    CHECK(f->title && f->roles && f->kinds);
    int writers = (f->export_fn != NULL) + (f->view_fn != NULL);
    CHECK_EQ_INT(writers, (f->flags & BF_FMT_SEALED) ? 0 : 1);
    for (const bf_format *g = bf_formats; g < f; g++) CHECK(strcmp(f->name, g->name) != 0);
    for (unsigned role = 1; role <= BF_FMT_VIEW; role <<= 1)
      if (f->roles & role) CHECK(bf_format_find(role, f->name) == f);
    if (f->roles & BF_FMT_RECORD) CHECK(f->exts != NULL);
    if (f->roles & BF_FMT_RECORD) each_word(f->exts, ext_finds_row, f);
    each_word(f->aliases, alias_finds_a_row, f);
  }
  CHECK(n >= 15);
  /* py-spy: export -f flamegraph is the SVG; record -f flamegraph the page */
  CHECK(strcmp(bf_format_find(BF_FMT_EXPORT, "flamegraph")->name, "svg") == 0);
  CHECK(strcmp(bf_format_find(BF_FMT_RECORD, "flamegraph")->name, "flame") == 0);
  CHECK(strcmp(bf_format_find(BF_FMT_RECORD, "raw")->name, "collapsed") == 0);
  CHECK(bf_format_find(BF_FMT_VIEW, "pprof") == NULL);
  CHECK(bf_format_find(BF_FMT_EXPORT, "nope") == NULL);
  /* longest extension wins, any case */
  CHECK(strcmp(bf_format_by_ext("a.SPEEDSCOPE.json")->name, "speedscope") == 0);
  CHECK(strcmp(bf_format_by_ext("a.gecko.json")->name, "gecko") == 0);
  CHECK(strcmp(bf_format_by_ext("a.json")->name, "speedscope") == 0);
  CHECK(strcmp(bf_format_by_ext("a.pb.gz")->name, "pprof") == 0);
  CHECK(bf_format_by_ext("a.otlp.pb") != NULL && strcmp(bf_format_by_ext("a.otlp.pb")->name, "pprof") == 0);
  CHECK(bf_format_by_ext("a.gz") == NULL);
  CHECK(bf_format_by_ext("") == NULL);
  /* lists: in table order (a new row adds to them without breaking these) */
  const char *views = bf_format_list(BF_FMT_VIEW, ", ", 0);
  CHECK(strncmp(views, "functions, flame, heatmap, gil, stack, tasks", 44) == 0);
  const char *ex = bf_format_list(BF_FMT_EXPORT, ", ", BF_FMT_LIST_NOTES);
  CHECK(strncmp(ex, "collapsed, speedscope, pstats, pprof, chrome, svg, gecko, otlp, ", 64) == 0);
  CHECK(strcmp(ex + strlen(ex) - 29, ", bifocal (with --encrypt-to)") == 0);
  CHECK(strstr(bf_format_list(BF_FMT_EXPORT, "|", BF_FMT_LIST_NO_SEALED), "bifocal") == NULL);
  const char *rec = bf_format_list(BF_FMT_RECORD, " ", BF_FMT_LIST_ALIASES);
  CHECK(strstr(rec, "otlp") == NULL && strstr(rec, " raw") && strstr(rec, " flamegraph"));
  CHECK(strstr(strstr(rec, "flamegraph") + 1, "flamegraph") == NULL); /* listed once */
  CHECK(strncmp(bf_format_ext_list(", ", 0), ".html, .txt, ", 13) == 0);
  return CHECK_DONE();
}
