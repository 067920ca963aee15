/* test_common_ident.c — function identity: the names stored sessions already
 * hold (spelled out here, not taken from ident.h, so a changed constant
 * fails), C-function qualnames as Python spells them, native names for each
 * thing the unwinder may know, and that each kind of frame a producer writes
 * is told apart by exactly the predicate meant for it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ident.h"

static int same(const char *a, const char *b) {
  return a && b && strcmp(a, b) == 0;
}

int main(void) {
  /* the strings in existing databases and exports */
  CHECK(same(BF_IDENT_BUILTIN, "<builtin>"));
  CHECK(same(BF_IDENT_UNKNOWN, "<unknown>"));
  CHECK(same(BF_IDENT_ANONYMOUS, "[anonymous]"));
  CHECK(same(BF_IDENT_NO_SYMBOL, "??"));

  /* qualnames of C functions: len is builtins.len, list.append is
   * builtins.list.append, time.sleep is time.sleep (module.__qualname__) */
  char *q = bf_ident_builtin("builtins", NULL, "len");
  CHECK(same(q, "builtins.len"));
  free(q);
  q = bf_ident_builtin("builtins", "list", "append");
  CHECK(same(q, "builtins.list.append"));
  free(q);
  q = bf_ident_builtin("collections", "OrderedDict", "move_to_end");
  CHECK(same(q, "collections.OrderedDict.move_to_end"));
  free(q);
  q = bf_ident_builtin(NULL, NULL, "print");
  CHECK(same(q, "builtins.print"));
  free(q);
  q = bf_ident_builtin(NULL, "dict", "get");
  CHECK(same(q, "builtins.dict.get"));
  free(q);
  q = bf_ident_builtin("", NULL, "");
  CHECK(same(q, "."));
  free(q);

  /* native names: symbol, else the start's offset, else "??" */
  char buf[64];
  CHECK(same(bf_ident_native_name(buf, sizeof buf, "PyObject_Call", 1, 0x3a40), "PyObject_Call"));
  CHECK(same(bf_ident_native_name(buf, sizeof buf, NULL, 1, 0x3a40), "0x3a40"));
  CHECK(same(bf_ident_native_name(buf, sizeof buf, "", 1, 0x7f00deadbeef), "0x7f00deadbeef"));
  CHECK(same(bf_ident_native_name(buf, sizeof buf, NULL, 0, 0x3a40), "??"));
  CHECK(same(bf_ident_native_name(buf, sizeof buf, NULL, 1, 0), "0x0"));
  /* the unwinder looks the symbol up into the same buffer */
  strcpy(buf, "_PyEval_EvalFrameDefault");
  CHECK(bf_ident_native_name(buf, sizeof buf, buf, 1, 0x10) == buf);
  CHECK(same(buf, "_PyEval_EvalFrameDefault"));
  buf[0] = 0; /* an empty symbol counts as none */
  CHECK(same(bf_ident_native_name(buf, sizeof buf, buf, 0, 0), "??"));
  char tiny[4];
  CHECK(same(bf_ident_native_name(tiny, sizeof tiny, NULL, 1, 0x12345), "0x1"));
  CHECK(same(bf_ident_native_name(tiny, sizeof tiny, "abcdef", 1, 0), "abc"));

  CHECK(same(bf_ident_or_unknown(NULL), "<unknown>"));
  CHECK(same(bf_ident_or_unknown("f.py"), "f.py"));

  /* every kind of frame a producer writes, and which predicate claims it:
   * builtin, unknown (text only), native, or none (a Python function) */
  static const struct {
    const char *file;
    int64_t first;
    int builtin, unknown, native;
  } kinds[] = {
      {"<builtin>", 0, 1, 0, 0},                    /* tracer: C function */
      {"<unknown>", 0, 0, 1, 0},                    /* import: collapsed stack frame */
      {"<unknown>", 12, 0, 0, 0},                   /* store: missing file, known line */
      {"/usr/lib/x86_64-linux-gnu/libc.so.6", 0, 0, 0, 1}, /* unwinder: a library */
      {"/opt/py/bin/python3.12", 0, 0, 0, 1},       /* unwinder: the executable */
      {"[anonymous]", 0, 0, 0, 1},                  /* unwinder: JIT or anonymous code */
      {"/srv/app/main.py", 12, 0, 0, 0},            /* sampler/tracer: Python */
      {"/srv/app/main.py", 0, 0, 0, 0},             /* import (austin): no first line */
      {"<frozen importlib._bootstrap>", 1, 0, 0, 0},
      {"<string>", 1, 0, 0, 0},
      {"builtin", 0, 0, 0, 0},
      {"<builtin>x", 0, 0, 0, 0},
      {"", 0, 0, 0, 0},
      {NULL, 0, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    CHECK_EQ_INT(bf_ident_is_builtin(kinds[i].file), kinds[i].builtin);
    CHECK_EQ_INT(bf_ident_is_unknown(kinds[i].file, kinds[i].first), kinds[i].unknown);
    CHECK_EQ_INT(bf_ident_is_native(kinds[i].file, kinds[i].first), kinds[i].native);
  }
  return CHECK_DONE();
}
