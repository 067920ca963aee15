/* test_trc_map.c — the tracer's map (tracing/trc_map.c over common/pmap.c):
 * every stored key is found with its latest value, absent keys are 0, growth
 * keeps the table at most half full, pmap's reserved keys are refused, and
 * free leaves an empty map that can be reused. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "trc_map.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void) { /* xorshift64*: keys the collector never chose */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dULL;
}

static void test_empty(void) {
  trc_map m = {0};
  CHECK_EQ_INT(trc_map_get(&m, 1), 0);
  CHECK_EQ_INT(trc_map_get(&m, UINT64_MAX), 0);
  /* 0 and UINT64_MAX mark pmap's empty slots and tombstones */
  CHECK_EQ_INT(trc_map_put(&m, 0, 5), -EINVAL);
  CHECK_EQ_INT(trc_map_put(&m, UINT64_MAX, 5), -EINVAL);
  CHECK_EQ_INT(trc_map_put(&m, 3, 5), 0);
  CHECK_EQ_INT(trc_map_get(&m, 0), 0);
  CHECK_EQ_INT(trc_map_get(&m, UINT64_MAX), 0);
  CHECK_EQ_INT(trc_map_get(&m, 3), 5);
  CHECK_EQ_INT(trc_map_len(&m), 1);
  trc_map_free(&m);
  CHECK(m.m.slots == NULL && m.m.cap == 0 && trc_map_len(&m) == 0);
}

/* Addresses as the collector uses them: 16-byte aligned, close together. */
static void test_pointer_keys(void) {
  trc_map m = {0};
  const uint64_t base = 0x7f12345670000ULL;
  const uint32_t n = 50000;
  for (uint32_t i = 0; i < n; i++) CHECK_EQ_INT(trc_map_put(&m, base + 16ULL * i, i + 1), 0);
  CHECK_EQ_INT(trc_map_len(&m), n);
  CHECK((m.m.cap & (m.m.cap - 1)) == 0);
  CHECK(trc_map_len(&m) * 2 <= m.m.cap);
  int bad = 0;
  for (uint32_t i = 0; i < n; i++) bad += trc_map_get(&m, base + 16ULL * i) != i + 1;
  CHECK_EQ_INT(bad, 0);
  /* between the stored keys, and beyond them */
  for (uint32_t i = 0; i < 1000; i++) bad += trc_map_get(&m, base + 16ULL * i + 8) != 0;
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(trc_map_get(&m, base + 16ULL * n), 0);
  trc_map_free(&m);
}

/* Edge keys: caller << 32 | callee, many sharing the low or high half. */
static void test_edge_keys_and_overwrite(void) {
  trc_map m = {0};
  uint32_t v = 1;
  for (uint64_t caller = 0; caller < 60; caller++)
    for (uint64_t callee = 1; callee < 60; callee++)
      CHECK_EQ_INT(trc_map_put(&m, caller << 32 | callee, v++), 0);
  size_t n = trc_map_len(&m);
  CHECK_EQ_INT(n, 60 * 59);
  CHECK_EQ_INT(trc_map_get(&m, 7ULL << 32 | 9), 7 * 59 + 9);
  CHECK_EQ_INT(trc_map_put(&m, 7ULL << 32 | 9, 123456), 0); /* replace, not add */
  CHECK_EQ_INT(trc_map_len(&m), n);
  CHECK_EQ_INT(trc_map_get(&m, 7ULL << 32 | 9), 123456);
  CHECK_EQ_INT(trc_map_get(&m, 9ULL << 32 | 7), 9 * 59 + 7);
  CHECK_EQ_INT(trc_map_get(&m, 60ULL << 32 | 1), 0);
  trc_map_free(&m);
}

/* Random keys against a plain array as the oracle, reusing a freed map. */
static void test_random_against_array(void) {
  enum { N = 20000 };
  uint64_t *keys = malloc(N * sizeof *keys);
  CHECK(keys != NULL);
  if (!keys) return;
  trc_map m = {0};
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      do keys[i] = rng(); while (keys[i] == 0 || keys[i] == UINT64_MAX);
      CHECK_EQ_INT(trc_map_put(&m, keys[i], (uint32_t)i + 7), 0);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) bad += trc_map_get(&m, keys[i]) != (uint32_t)i + 7;
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(trc_map_len(&m), N); /* 64-bit random keys: no repeats expected */
    trc_map_free(&m);
    CHECK_EQ_INT(trc_map_get(&m, keys[0]), 0);
  }
  free(keys);
}

int main(void) {
  test_empty();
  test_pointer_keys();
  test_edge_keys_and_overwrite();
  test_random_against_array();
  return CHECK_DONE();
}
