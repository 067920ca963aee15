/* err.c — bf_err's setters: printf into the fixed buffer, never allocating. */
#include "err.h"

#include <stdio.h>
#include <string.h>

int bf_err_vset(bf_err *e, int code, const char *fmt, va_list ap) {
  if (!e) return code;
  e->code = code;
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  return code;
}

int bf_err_set(bf_err *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bf_err_vset(e, code, fmt, ap);
  va_end(ap);
  return code;
}

int bf_err_prefix(bf_err *e, const char *fmt, ...) {
  if (!e) return 0;
  char head[BF_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  if (n < 0) return e->code;
  size_t hl = (size_t)n < sizeof head ? (size_t)n : sizeof head - 1;
  size_t ml = strlen(e->msg);
  if (hl + ml > sizeof e->msg - 1) ml = sizeof e->msg - 1 - hl;
  memmove(e->msg + hl, e->msg, ml); /* the tail of a message too long is cut */
  memcpy(e->msg, head, hl);
  e->msg[hl + ml] = 0;
  return e->code;
}

void bf_err_clear(bf_err *e) {
  if (!e) return;
  e->code = 0;
  e->msg[0] = 0;
}

const char *bf_err_msg(const bf_err *e, const char *fallback) {
  return e && e->msg[0] ? e->msg : fallback;
}
