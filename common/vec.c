/* vec.c — the one grow helper (see vec.h). */
#include "vec.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int bf_vec_grow_slow(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : (first_cap ? first_cap : 1);
  while (nc < need) {
    if (nc > SIZE_MAX / 2) return -ENOMEM;
    nc *= 2;
  }
  if (elem && nc > SIZE_MAX / elem) return -ENOMEM;
  void *np = realloc(*p, nc * elem);
  if (!np) return -ENOMEM;
  *p = np;
  *cap = nc;
  return 0;
}

int bf_vec_grow_zero(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap) {
  size_t old = *cap;
  int rc = bf_vec_grow(p, cap, need, elem, first_cap);
  if (rc == 0 && *cap > old) memset((char *)*p + old * elem, 0, (*cap - old) * elem);
  return rc;
}
