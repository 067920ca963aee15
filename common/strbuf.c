/* strbuf.c — the growing string (see strbuf.h). */
#include "strbuf.h"

#include <string.h>

#include "vec.h"

void bf_strbuf_put(bf_strbuf *b, const char *p, size_t n) {
  if (b->oom) return;
  if (bf_vec_grow((void **)&b->s, &b->cap, b->n + n + 1, 1, 64)) {
    b->oom = 1;
    return;
  }
  memcpy(b->s + b->n, p, n);
  b->n += n;
  b->s[b->n] = 0;
}
