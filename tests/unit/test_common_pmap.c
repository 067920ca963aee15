/* test_common_pmap.c — the pointer-keyed map against a plain array of the
 * same keys: random puts, gets and deletes (tombstones), growth, clean-up at
 * the same size, iteration, clear, reserve, and the reserved keys; keys that
 * all hash to one slot (deletes inside the cluster, reinserts); and a
 * wide-keyed map through bf_pmap_hkey chains with a hash that collides. */
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

/* Keys whose Fibonacci hash has the same top 20 bits: one home slot in any
 * table up to 2^20 slots, so every lookup walks the one cluster. */
static void collisions(void) {
  uint64_t inv = 0x9E3779B97F4A7C15ull; /* its inverse mod 2^64, by Newton */
  for (int i = 0; i < 6; i++) inv *= 2 - 0x9E3779B97F4A7C15ull * inv;
  enum { NC = 1500 };
  static uint64_t ck[NC];
  for (uint64_t i = 0; i < NC; i++) ck[i] = ((0xABCDEull << 44) | (i * 7919 + 1)) * inv;
  bf_pmap m = BF_PMAP_INIT(slot);
  for (int i = 0; i < NC; i++) {
    slot *s = bf_pmap_put(&m, ck[i], NULL);
    CHECK(s != NULL);
    if (s) s->val = (uint64_t)i;
  }
  CHECK_EQ_INT(m.len, NC);
  for (int i = 0; i < NC; i += 2) CHECK_EQ_INT(bf_pmap_del(&m, ck[i]), 1); /* tombstones inside the cluster */
  size_t cap = m.cap;
  for (int i = 0; i < NC; i++) {
    slot *s = bf_pmap_get(&m, ck[i]);
    CHECK(i % 2 ? s && s->val == (uint64_t)i : s == NULL); /* found past the tombstones */
  }
  CHECK_EQ_INT(bf_pmap_del(&m, ck[0]), 0); /* twice: gone already */
  CHECK(bf_pmap_get(&m, 0) == NULL && bf_pmap_get(&m, BF_PMAP_GONE) == NULL); /* not an empty slot, nor a tombstone */
  for (int i = 0; i < NC; i += 2) { /* reinsert after delete: a fresh zeroed slot */
    int added = 0;
    slot *s = bf_pmap_put(&m, ck[i], &added);
    CHECK(s && added && s->val == 0);
    if (s) s->val = (uint64_t)i + 1000000;
  }
  CHECK_EQ_INT(m.len, NC);
  CHECK_EQ_INT(m.cap, cap); /* reinserting what was deleted does not grow */
  size_t it = 0, n = 0;
  for (slot *s; (s = bf_pmap_next(&m, &it));) n++;
  CHECK_EQ_INT(n, NC);
  for (int i = 0; i < NC; i++) {
    slot *s = bf_pmap_get(&m, ck[i]);
    CHECK(s && s->val == (uint64_t)i + (i % 2 ? 0 : 1000000));
  }
  bf_pmap_free(&m);
}

/* A map keyed by strings through a hash with only 8 values, one of them 0
 * and one UINT64_MAX (the reserved keys): the chains must find every string. */
typedef struct wide {
  uint64_t key;
  const char *text;
} wide;

static uint64_t bad_hash(const char *t) {
  static const uint64_t h[8] = {0, UINT64_MAX, UINT64_MAX - 1, 1, 2, 0x1000, 0x1001, 42};
  return h[strlen(t) % 8];
}

static wide *wide_find(const bf_pmap *m, const char *t) {
  for (uint64_t k = bf_pmap_hkey(bad_hash(t));; k = bf_pmap_hnext(k)) {
    wide *w = bf_pmap_get(m, k);
    if (!w || strcmp(w->text, t) == 0) return w;
  }
}

static void wide_keys(void) {
  enum { NW = 200 };
  static char texts[NW][NW + 1];
  bf_pmap m = BF_PMAP_INIT(wide);
  CHECK(bf_pmap_hkey(0) != 0 && bf_pmap_hkey(UINT64_MAX) != UINT64_MAX && bf_pmap_hnext(UINT64_MAX - 1) != UINT64_MAX);
  for (int i = 0; i < NW; i++) {
    memset(texts[i], 'a' + i % 26, (size_t)i);
    texts[i][i] = 0;
    CHECK(wide_find(&m, texts[i]) == NULL);
    for (uint64_t k = bf_pmap_hkey(bad_hash(texts[i]));; k = bf_pmap_hnext(k)) {
      int added = 0;
      wide *w = bf_pmap_put(&m, k, &added);
      CHECK(w != NULL);
      if (!w) return;
      if (!added) continue;
      w->text = texts[i];
      break;
    }
  }
  CHECK_EQ_INT(m.len, NW);
  for (int i = 0; i < NW; i++) {
    wide *w = wide_find(&m, texts[i]);
    CHECK(w && w->text == texts[i]);
  }
  CHECK(wide_find(&m, "not there") == NULL);
  bf_pmap_free(&m);
}

int main(void) {
  collisions();
  wide_keys();
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
