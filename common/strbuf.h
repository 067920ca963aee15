/* strbuf.h — a growing NUL-terminated string (grown by vec.h's helper).
 * No project includes. */
#ifndef BF_STRBUF_H
#define BF_STRBUF_H

#include <stddef.h>

/* A growing NUL-terminated string: {0} is empty; s is malloc'd (free it) and
 * NULL until the first put. Out of memory sets oom and drops later puts. */
typedef struct bf_strbuf {
  char *s;
  size_t n, cap;
  int oom;
} bf_strbuf;

/* Appends the n bytes at p. */
void bf_strbuf_put(bf_strbuf *b, const char *p, size_t n);

#endif
