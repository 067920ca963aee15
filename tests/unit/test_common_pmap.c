/* test_common_pmap.c — the pointer-keyed map against a plain array of the
 * same keys: random puts, gets and deletes (tombstones), growth, clean-up at
 * the same size, iteration, clear, reserve, and the reserved keys; keys that
 * all hash to one slot (deletes inside the cluster, reinserts); and a
 * wide-keyed map through bf_pmap_hkey chains with a hash that collides;
 * churn (the tracer's live blocks: put, take with bf_pmap_del_slot, put)
 * that must not fill the table with tombstones; deletes while iterating. */
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

/* used must equal the live keys plus the tombstones actually in the table. */
static void check_used(const bf_pmap *m) {
  size_t live = 0, gone = 0;
  for (size_t i = 0; i < m->cap; i++) {
    uint64_t k = *(const uint64_t *)(const void *)(m->slots + i * m->slot_size);
    live += k != 0 && k != BF_PMAP_GONE;
    gone += k == BF_PMAP_GONE;
  }
  CHECK_EQ_INT(live, m->len);
  CHECK_EQ_INT(live + gone, m->used);
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
  check_used(&m);
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

/* Blocks allocated and freed in waves, addresses reused (as an allocator
 * does): the table stays at its reserved size and mostly clean. */
static void churn(void) {
  bf_pmap m = BF_PMAP_INIT(slot);
  CHECK(bf_pmap_reserve(&m, 4000) == 0);
  size_t cap = m.cap;
  uint64_t seed = 0x1234567ull;
  enum { NB = 3000 };
  static uint64_t live[NB];
  for (int wave = 0; wave < 300; wave++) {
    for (int i = 0; i < NB; i++) {
      live[i] = 0x7f0000000000ull + (rnd(&seed) % 20000) * 16;
      int added = 0;
      slot *s = bf_pmap_put_sz(&m, live[i], &added, sizeof *s); /* the tracer's forms */
      CHECK(s != NULL);
      if (!s) return;
      if (added) {
        CHECK(s->val == 0 && s->pad[7] == 0); /* zeroed, though the slot held another key before */
        s->val = live[i] ^ 0x55;
        s->pad[7] = 1;
      }
    }
    for (int i = NB; i-- > 0;) {
      slot *s = bf_pmap_get_sz(&m, live[i], sizeof *s);
      if (!s) continue; /* the same address twice in the wave */
      CHECK(s->val == (live[i] ^ 0x55));
      slot copy = *s;
      if (i % 2) bf_pmap_del_slot_sz(&m, s, sizeof *s);
      else bf_pmap_del_slot(&m, s);
      CHECK(copy.key == live[i] && bf_pmap_get(&m, live[i]) == NULL);
    }
    CHECK_EQ_INT(m.len, 0);
    if (wave % 50 == 0) check_used(&m);
  }
  CHECK_EQ_INT(m.cap, cap); /* never grew past the reservation */
  CHECK_EQ_INT(m.used, 0);  /* every tombstone ended up before an empty slot */
  /* one key put and deleted on its own leaves no tombstone */
  CHECK(bf_pmap_put(&m, 0x4000, NULL) != NULL);
  CHECK_EQ_INT(bf_pmap_del(&m, 0x4000), 1);
  CHECK_EQ_INT(m.used, 0);
  bf_pmap_free(&m);
}

/* Deleting the slot just returned by bf_pmap_next visits every key once. */
static void delete_while_iterating(void) {
  bf_pmap m = BF_PMAP_INIT(slot);
  for (uint64_t k = 1; k <= 3000; k++) CHECK(bf_pmap_put(&m, k * 48, NULL) != NULL);
  size_t it = 0, seen = 0;
  for (slot *s; (s = bf_pmap_next_sz(&m, &it, sizeof *s));) {
    seen++;
    if (s->key % 96 == 0) bf_pmap_del_slot(&m, s);
  }
  CHECK_EQ_INT(seen, 3000);
  CHECK_EQ_INT(m.len, 1500);
  check_used(&m);
  for (uint64_t k = 1; k <= 3000; k++) CHECK((bf_pmap_get(&m, k * 48) != NULL) == (k % 2 == 1));
  bf_pmap_free(&m);
}

int main(void) {
  churn();
  delete_while_iterating();
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
    if (round % 10000 == 0) check_used(&m);
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
