/* test_common_map.c — the one hash map against a brute-force oracle: random
 * inserts, overwrites and lookups (present and absent keys, keys that differ
 * in one component only) over many growths; the string hash's basis and
 * spread. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "map.h"

enum { N = 50000 };
static int64_t ka[N], kb[N], kc[N], kv[N];

static int64_t oracle(size_t n, int64_t a, int64_t b, int64_t c, int *found) {
  for (size_t i = n; i-- > 0;) /* newest write wins */
    if (ka[i] == a && kb[i] == b && kc[i] == c) {
      *found = 1;
      return kv[i];
    }
  *found = 0;
  return 0;
}

/* The number of distinct keys among the first n written (ka in [-150, 150),
 * kb in [0, 200), kc in [0, 3)). */
static size_t distinct_all(size_t n) {
  static unsigned char seen[300 * 200 * 3];
  size_t d = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char *p = &seen[((ka[i] + 150) * 200 + kb[i]) * 3 + kc[i]];
    d += !*p;
    *p = 1;
  }
  return d;
}

int main(void) {
  bf_map3 m = {0};
  CHECK(bf_map3_get(&m, 1, 2, 3) == NULL); /* empty map */
  unsigned seed = 12345;
  size_t n = 0;
  for (; n < N; n++) {
    /* small ranges force repeats (overwrites) and near-miss keys */
    ka[n] = rand_r(&seed) % 300 - 150;
    kb[n] = rand_r(&seed) % 200;
    kc[n] = rand_r(&seed) % 3;
    kv[n] = (int64_t)rand_r(&seed) << 20 | (int64_t)n;
    CHECK_EQ_INT(bf_map3_put(&m, ka[n], kb[n], kc[n], kv[n]), 0);
  }
  size_t distinct = 0, bad = 0;
  for (int64_t a = -150; a < 150; a++)
    for (int64_t b = 0; b < 200; b += 7)
      for (int64_t c = 0; c < 4; c++) { /* c == 3 is never stored */
        int found;
        int64_t want = oracle(n, a, b, c, &found);
        int64_t *got = bf_map3_get(&m, a, b, c);
        if (found != (got != NULL) || (got && *got != want)) bad++;
        distinct += found;
      }
  CHECK_EQ_INT(bad, 0);
  CHECK(distinct > 1000);
  CHECK(bf_map3_len(&m) == distinct_all(n)); /* one slot per distinct key */
  CHECK(m.pm.len * 2 <= m.pm.cap);            /* pmap's load factor: at most 1/2 */
  bf_map3_free(&m);
  CHECK(bf_map3_len(&m) == 0 && m.pm.cap == 0 && bf_map3_get(&m, ka[0], kb[0], kc[0]) == NULL);
  CHECK_EQ_INT(bf_map3_put(&m, INT64_MIN, INT64_MAX, 0, -1), 0); /* usable after free; extreme keys */
  CHECK(bf_map3_get(&m, INT64_MIN, INT64_MAX, 0) && *bf_map3_get(&m, INT64_MIN, INT64_MAX, 0) == -1);
  bf_map3_free(&m);

  /* the string hash: FNV-1a's prime with offset basis 1469598103934665603
   * (a digit short of the published basis; only the spread depends on it):
   * the empty string hashes to the basis, one step by hand for "a", and no
   * two of 100,000 distinct short strings collide */
  CHECK(bf_hash_str("", 0) == 1469598103934665603ULL);
  CHECK(bf_hash_str("a", 1) == ((1469598103934665603ULL ^ 'a') * 1099511628211ULL));
  CHECK(bf_hash_str("foobarbaz", 6) == bf_hash_str("foobar", 6)); /* only n bytes */
  bf_map3 seen = {0};
  int collisions = 0;
  for (int i = 0; i < 100000; i++) {
    char s[32];
    int len = snprintf(s, sizeof s, "mod%d.f%d", i % 97, i);
    uint64_t h = bf_hash_str(s, (size_t)len);
    if (bf_map3_get(&seen, (int64_t)h, 0, 0)) collisions++;
    CHECK_EQ_INT(bf_map3_put(&seen, (int64_t)h, 0, 0, i), 0);
  }
  CHECK_EQ_INT(collisions, 0);
  bf_map3_free(&seen);
  return CHECK_DONE();
}
