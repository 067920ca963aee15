/* ident.c — names for functions their producer knows only in part (C
 * functions, native code, frames known by their text), and the tests that
 * tell them apart again; the contract is in ident.h. */
#include "ident.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *bf_ident_builtin(const char *module, const char *type, const char *name) {
  if (!module) module = "builtins";
  size_t n = strlen(module) + (type ? strlen(type) + 1 : 0) + strlen(name) + 2;
  char *out = malloc(n);
  if (!out) return NULL;
  if (type)
    snprintf(out, n, "%s.%s.%s", module, type, name);
  else
    snprintf(out, n, "%s.%s", module, name);
  return out;
}

char *bf_ident_native_name(char *buf, size_t len, const char *symbol, int has_start, uint64_t start) {
  if (symbol && symbol[0]) {
    if (symbol != buf) snprintf(buf, len, "%s", symbol);
  } else if (has_start) {
    snprintf(buf, len, "0x%llx", (unsigned long long)start);
  } else {
    snprintf(buf, len, "%s", BF_IDENT_NO_SYMBOL);
  }
  return buf;
}

int bf_ident_is_builtin(const char *file) {
  return file && strcmp(file, BF_IDENT_BUILTIN) == 0;
}

int bf_ident_is_unknown(const char *file, int64_t firstlineno) {
  return file && firstlineno == 0 && strcmp(file, BF_IDENT_UNKNOWN) == 0;
}

int bf_ident_is_native(const char *file, int64_t firstlineno) {
  if (!file || firstlineno != 0) return 0;
  if (strcmp(file, BF_IDENT_ANONYMOUS) == 0) return 1;
  size_t n = strlen(file);
  return file[0] == '/' && !(n >= 3 && strcmp(file + n - 3, ".py") == 0);
}
