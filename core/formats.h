/* formats.h — every output bifocal writes, described once: the exports
 * (`export --format`), the files of `record -o FILE` and the views of `replay
 * --view`. The CLI's lookups, error lists, help, man page and shell and REPL
 * completions are all built from bf_formats[], whose rows are formats.def's:
 * a new format is its writer's file and one row there. */
#ifndef BF_FORMATS_H
#define BF_FORMATS_H

#include <stdio.h>

#include "exports.h"
#include "store.h"
#include "views.h"

/* Where a format is offered (bf_format.roles). */
enum {
  BF_FMT_EXPORT = 1, /* bifocal export --format NAME */
  BF_FMT_RECORD = 2, /* bifocal record -o FILE [-f NAME] */
  BF_FMT_VIEW = 4,   /* bifocal replay --view NAME */
};

/* The session kinds a format can show (bf_format.kinds); the writer itself
 * refuses the others with -ENODATA and a message naming the session. */
enum {
  BF_FMT_SAMPLED = 1,
  BF_FMT_TRACED = 2,
  BF_FMT_IMPORTED = 4,
  BF_FMT_ANY = 7,
};

/* What a format's output is like (bf_format.flags). */
enum {
  BF_FMT_BINARY = 1, /* bytes, not text: refused on a terminal */
  BF_FMT_HTML = 2,   /* an HTML page: refused on a terminal */
  BF_FMT_JSON = 4,   /* a view with a --json form */
  BF_FMT_SEALED = 8, /* export only through --encrypt-to (no writer here) */
};

/* An export writer (the session through f) or a view writer (through o,
 * whose filter is the same window). Both report errors on s's handle. */
typedef int (*bf_export_fn)(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);
typedef int (*bf_view_fn)(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

typedef struct bf_format {
  const char *name;    /* "speedscope" */
  const char *aliases; /* other names, space-separated ("raw"), or NULL */
  const char *exts;    /* record -o extensions, space-separated, the one to suggest first; or NULL */
  const char *title;   /* "speedscope profile" (record: "wrote TITLE to FILE") */
  const char *note;    /* shown after the name in lists ("with --encrypt-to"), or NULL */
  unsigned roles, kinds, flags;
  bf_export_fn export_fn; /* exactly one of the two, except for BF_FMT_SEALED */
  bf_view_fn view_fn;
} bf_format;

extern const bf_format bf_formats[]; /* terminated by {NULL} */

/* Every row's writer, declared from formats.def (so a new writer's file
 * includes this header and needs no prototype of its own elsewhere). */
#define BF_FMT_DECL_EXPORT(fn) int fn(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);
#define BF_FMT_DECL_VIEW(fn) int fn(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);
#define BF_FMT_DECL_NONE(fn)
#define BF_FORMAT(name, aliases, exts, title, note, roles, kinds, flags, writer, fn) BF_FMT_DECL_##writer(fn)
#include "formats.def"
#undef BF_FORMAT

/* The format of role `role` called name: a row's own name first, then an
 * alias, each in table order. NULL when none. */
const bf_format *bf_format_find(unsigned role, const char *name);

/* Does fmt answer to name (its name or one of its aliases)? */
int bf_format_named(const bf_format *fmt, const char *name);

/* The record format for path by its extension (longest match, any case), or
 * NULL. */
const bf_format *bf_format_by_ext(const char *path);

/* Does path end with suffix (any case)? */
int bf_format_has_suffix(const char *path, const char *suffix);

/* How bf_format_list lists (bits). */
enum {
  BF_FMT_LIST_ALIASES = 1,  /* the aliases too, after all names */
  BF_FMT_LIST_NOTES = 2,    /* each name followed by " (note)" */
  BF_FMT_LIST_NO_SEALED = 4 /* leave out BF_FMT_SEALED rows */
};

/* The names of role's formats in table order, joined by sep ("collapsed,
 * speedscope, ..."), as `how` says. Static storage, rebuilt per call. */
const char *bf_format_list(unsigned role, const char *sep, unsigned how);

/* The first extension of each record format that has one, joined by sep.
 * Static storage, rebuilt per call. */
const char *bf_format_ext_list(const char *sep, int all);

/* Write session_id of s as fmt to out: exports get o->filter. Returns the
 * writer's result (-EINVAL for a sealed row). */
int bf_format_write(const bf_format *fmt, bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

#endif
