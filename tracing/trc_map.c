/* trc_map.c — growing and freeing the collector's hash map (see trc_map.h). */
#include "trc_map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Rehash into twice the capacity (1024 to start). */
static int trc_map_grow(trc_map *m) {
  size_t ncap = m->cap ? m->cap * 2 : 1024;
  uint64_t *nk = calloc(ncap, sizeof *nk);
  uint32_t *nv = calloc(ncap, sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return -ENOMEM;
  }
  for (size_t j = 0; j < m->cap; j++) {
    if (!m->keys[j]) continue;
    size_t i = (size_t)trc_mix(m->keys[j]) & (ncap - 1);
    while (nk[i]) i = (i + 1) & (ncap - 1);
    nk[i] = m->keys[j];
    nv[i] = m->vals[j];
  }
  free(m->keys);
  free(m->vals);
  m->keys = nk;
  m->vals = nv;
  m->cap = ncap;
  return 0;
}

int trc_map_put(trc_map *m, uint64_t key, uint32_t val) {
  if ((m->n + 1) * 2 > m->cap && trc_map_grow(m) < 0) return -ENOMEM;
  size_t mask = m->cap - 1, i = (size_t)trc_mix(key) & mask;
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & mask;
  if (!m->keys[i]) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

void trc_map_free(trc_map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}
