/* formats.c — the table of every export, record output and view (formats.h),
 * built from formats.def's rows, and the lookups the CLI builds its tables,
 * messages, help and completions from. A new format: its writer
 * (export_NAME.c or view_NAME.c) and one row in formats.def. */
#include "formats.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "store_int.h"

#define X BF_FMT_EXPORT
#define R BF_FMT_RECORD
#define V BF_FMT_VIEW
#define S BF_FMT_SAMPLED
#define T BF_FMT_TRACED
#define I BF_FMT_IMPORTED

/* Table order (formats.def's) is the order of every list shown to users. */
#define BF_FMT_FN_EXPORT(fn) fn, NULL
#define BF_FMT_FN_VIEW(fn) NULL, fn
#define BF_FMT_FN_NONE(fn) NULL, NULL
#define BF_FORMAT(name, aliases, exts, title, note, roles, kinds, flags, writer, fn) \
  {name, aliases, exts, title, note, roles, kinds, flags, BF_FMT_FN_##writer(fn)},
const bf_format bf_formats[] = {
#include "formats.def"
    {NULL, NULL, NULL, NULL, NULL, 0, 0, 0, NULL, NULL},
};
#undef BF_FORMAT

/* Is word one of the space-separated words of list? */
static int has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; p && *p;) {
    size_t m = strcspn(p, " ");
    if (m == n && strncmp(p, word, n) == 0) return 1;
    p += m;
    while (*p == ' ') p++;
  }
  return 0;
}

const bf_format *bf_format_find(unsigned role, const char *name) {
  for (const bf_format *f = bf_formats; f->name; f++)
    if ((f->roles & role) && strcmp(f->name, name) == 0) return f;
  for (const bf_format *f = bf_formats; f->name; f++)
    if ((f->roles & role) && has_word(f->aliases, name)) return f;
  return NULL;
}

int bf_format_named(const bf_format *fmt, const char *name) {
  return strcmp(fmt->name, name) == 0 || has_word(fmt->aliases, name);
}

int bf_format_has_suffix(const char *path, const char *suffix) {
  size_t a = strlen(path), b = strlen(suffix);
  return a >= b && strcasecmp(path + a - b, suffix) == 0;
}

const bf_format *bf_format_by_ext(const char *path) {
  const bf_format *best = NULL;
  size_t best_len = 0;
  for (const bf_format *f = bf_formats; f->name; f++) {
    if (!(f->roles & BF_FMT_RECORD)) continue;
    for (const char *p = f->exts; p && *p;) {
      size_t m = strcspn(p, " ");
      char ext[32];
      snprintf(ext, sizeof ext, "%.*s", (int)(m < sizeof ext ? m : sizeof ext - 1), p);
      if (m > best_len && bf_format_has_suffix(path, ext)) {
        best = f;
        best_len = m;
      }
      p += m;
      while (*p == ' ') p++;
    }
  }
  return best;
}

/* Append s to buf (cap bytes, NUL-terminated, cut when full). */
static void cat(char *buf, size_t cap, const char *s) {
  size_t n = strlen(buf);
  if (n + 1 < cap) snprintf(buf + n, cap - n, "%s", s);
}

static char list_buf[1024];

/* Is f listed for role as `how` says? */
static int listed(const bf_format *f, unsigned role, unsigned how) {
  return (f->roles & role) && !((how & BF_FMT_LIST_NO_SEALED) && (f->flags & BF_FMT_SEALED));
}

const char *bf_format_list(unsigned role, const char *sep, unsigned how) {
  list_buf[0] = 0;
  for (const bf_format *f = bf_formats; f->name; f++) {
    if (!listed(f, role, how)) continue;
    if (list_buf[0]) cat(list_buf, sizeof list_buf, sep);
    cat(list_buf, sizeof list_buf, f->name);
    if ((how & BF_FMT_LIST_NOTES) && f->note) {
      cat(list_buf, sizeof list_buf, " (");
      cat(list_buf, sizeof list_buf, f->note);
      cat(list_buf, sizeof list_buf, ")");
    }
  }
  for (const bf_format *f = bf_formats; (how & BF_FMT_LIST_ALIASES) && f->name; f++) {
    if (!listed(f, role, how)) continue;
    for (const char *p = f->aliases; p && *p;) {
      size_t m = strcspn(p, " ");
      char w[32];
      snprintf(w, sizeof w, "%.*s", (int)(m < sizeof w ? m : sizeof w - 1), p);
      /* an alias of two rows ("flamegraph") or a name of another ("flame") once */
      const bf_format *owner = bf_format_find(role, w);
      if (owner == f && strcmp(owner->name, w) != 0) {
        cat(list_buf, sizeof list_buf, sep);
        cat(list_buf, sizeof list_buf, w);
      }
      p += m;
      while (*p == ' ') p++;
    }
  }
  return list_buf;
}

const char *bf_format_ext_list(const char *sep, int all) {
  list_buf[0] = 0;
  for (const bf_format *f = bf_formats; f->name; f++) {
    if (!(f->roles & BF_FMT_RECORD) || !f->exts) continue;
    for (const char *p = f->exts; *p;) {
      size_t m = strcspn(p, " ");
      char w[32];
      snprintf(w, sizeof w, "%.*s", (int)(m < sizeof w ? m : sizeof w - 1), p);
      if (list_buf[0]) cat(list_buf, sizeof list_buf, sep);
      cat(list_buf, sizeof list_buf, w);
      if (!all) break;
      p += m;
      while (*p == ' ') p++;
    }
  }
  return list_buf;
}

int bf_format_write(const bf_format *fmt, bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  if (fmt->view_fn) return fmt->view_fn(s, session_id, o, out);
  if (fmt->export_fn) return fmt->export_fn(s, session_id, &o->filter, out);
  return bf_store_fail(s, -EINVAL, "format %s has no writer here (sealed exports go through bf_share_export)",
                       fmt->name);
}
