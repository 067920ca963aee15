/* map.c — the three-int64 map over pmap (see map.h), and the string hash. */
#include "map.h"

#include <errno.h>

uint64_t bf_hash_str(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

void bf_map3_free(bf_map3 *m) { bf_pmap_free(&m->pm); }

int bf_map3_put(bf_map3 *m, int64_t a, int64_t b, int64_t c, int64_t v) {
  m->pm.slot_size = sizeof(bf_map3_slot); /* a {0} map learns its slots here */
  for (uint64_t k = bf_pmap_hkey(bf_hash3(a, b, c));; k = bf_pmap_hnext(k)) {
    int added;
    bf_map3_slot *s = bf_pmap_put(&m->pm, k, &added);
    if (!s) return -ENOMEM;
    if (added) {
      s->a = a;
      s->b = b;
      s->c = c;
    } else if (s->a != a || s->b != b || s->c != c) {
      continue; /* another key with this hash: the chain's next */
    }
    s->v = v;
    return 0;
  }
}
