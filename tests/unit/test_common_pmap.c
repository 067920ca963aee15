/* test_common_pmap.c — the pointer-keyed map against a plain array of the
 * same keys: random puts, gets and deletes (tombstones), growth, clean-up at
 * the same size, iteration, clear, reserve, and the reserved keys. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pmap.h"

typedef struct slot {
  uint64_t key;
  uint64_t val;
  char pad[8];
} slot;

#define NKEYS 5000

static uint64_t keys[NKEYS];
static uint64_t vals[NKEYS]; /* 0 = absent */

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int main(void) {
  bf_pmap m = BF_PMAP_INIT(slot);
  CHECK(bf_pmap_get(&m, 0x1000) == NULL);
  CHECK(bf_pmap_put(&m, 0, NULL) == NULL);
  CHECK(bf_pmap_put(&m, BF_PMAP_GONE, NULL) == NULL);
  CHECK(bf_pmap_del(&m, 0x1000) == 0);
  uint64_t seed = 88172645463325252ull;
  for (int i = 0; i < NKEYS; i++) keys[i] = (i % 2 ? rnd(&seed) | 1 : 0x7f0000000000ull + (uint64_t)i * 16);
  size_t live = 0;
  for (int round = 0; round < 200000; round++) {
    int i = (int)(rnd(&seed) % NKEYS);
    int op = (int)(rnd(&seed) % 3);
    if (op == 0) {
      int added = -1;
      slot *s = bf_pmap_put(&m, keys[i], &added);
      CHECK(s && s->key == keys[i]);
      CHECK_EQ_INT(added, vals[i] == 0);
      if (added) {
        CHECK(s->val == 0);
        live++;
      }
      s->val = vals[i] = (uint64_t)round + 1;
    } else if (op == 1) {
      CHECK_EQ_INT(bf_pmap_del(&m, keys[i]), vals[i] != 0);
      if (vals[i]) live--;
      vals[i] = 0;
    } else {
      slot *s = bf_pmap_get(&m, keys[i]);
      CHECK(vals[i] ? s && s->val == vals[i] : s == NULL);
    }
    CHECK_EQ_INT(m.len, live);
    CHECK(m.used * 2 <= m.cap);
    if (bf_check_failures > 10) return CHECK_DONE();
  }
  /* delete-heavy use cleans tombstones without growing forever */
  CHECK(m.cap <= 4 * 16384);
  size_t it = 0, n = 0;
  for (slot *s; (s = bf_pmap_next(&m, &it));) {
    n++;
    int found = 0;
    for (int i = 0; i < NKEYS; i++)
      if (keys[i] == s->key) found = vals[i] == s->val;
    CHECK(found);
  }
  CHECK_EQ_INT(n, live);
  size_t cap = m.cap;
  bf_pmap_clear(&m);
  CHECK_EQ_INT(m.len, 0);
  CHECK_EQ_INT(m.cap, cap);
  CHECK(bf_pmap_get(&m, keys[1]) == NULL);
  bf_pmap_free(&m);
  CHECK(bf_pmap_reserve(&m, 1000) == 0);
  cap = m.cap;
  for (uint64_t k = 1; k <= 1000; k++) CHECK(bf_pmap_put(&m, k << 12, NULL) != NULL);
  CHECK_EQ_INT(m.cap, cap); /* no growth within the reservation */
  CHECK_EQ_INT(m.len, 1000);
  bf_pmap_free(&m);
  return CHECK_DONE();
}
