/* test_common_vec.c — the one grow helper: capacities double from the first
 * capacity, contents survive, zeroing covers exactly the new part, overflow
 * is refused without touching the array. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "strbuf.h"
#include "vec.h"

int main(void) {
  int *a = NULL;
  size_t cap = 0;
  CHECK_EQ_INT(bf_vec_grow((void **)&a, &cap, 0, sizeof *a, 16), 0); /* nothing needed: no allocation */
  CHECK(a == NULL && cap == 0);
  CHECK_EQ_INT(bf_vec_grow((void **)&a, &cap, 1, sizeof *a, 16), 0);
  CHECK_EQ_INT(cap, 16);
  for (int i = 0; i < 16; i++) a[i] = i * 3;
  CHECK_EQ_INT(bf_vec_grow((void **)&a, &cap, 16, sizeof *a, 16), 0); /* fits: unchanged */
  CHECK_EQ_INT(cap, 16);
  CHECK_EQ_INT(bf_vec_grow((void **)&a, &cap, 17, sizeof *a, 16), 0);
  CHECK_EQ_INT(cap, 32);
  CHECK_EQ_INT(bf_vec_grow((void **)&a, &cap, 200, sizeof *a, 16), 0); /* 32 → 64 → 128 → 256 */
  CHECK_EQ_INT(cap, 256);
  int kept = 1;
  for (int i = 0; i < 16; i++) kept &= a[i] == i * 3;
  CHECK(kept);
  /* overflow: refused, array and capacity untouched */
  int *before = a;
  CHECK_EQ_INT(bf_vec_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof *a, 16), -ENOMEM);
  CHECK(a == before && cap == 256);
  free(a);

  /* first capacity 0 means 1 */
  char *c = NULL;
  size_t ccap = 0;
  CHECK_EQ_INT(bf_vec_grow((void **)&c, &ccap, 3, 1, 0), 0);
  CHECK_EQ_INT(ccap, 4);
  free(c);

  /* zeroing: exactly the new elements */
  uint64_t *z = NULL;
  size_t zcap = 0;
  CHECK_EQ_INT(bf_vec_grow_zero((void **)&z, &zcap, 5, sizeof *z, 4), 0);
  CHECK_EQ_INT(zcap, 8);
  int zero = 1;
  for (size_t i = 0; i < zcap; i++) zero &= z[i] == 0;
  CHECK(zero);
  for (size_t i = 0; i < zcap; i++) z[i] = 0xabcdef;
  CHECK_EQ_INT(bf_vec_grow_zero((void **)&z, &zcap, 9, sizeof *z, 4), 0);
  CHECK_EQ_INT(zcap, 16);
  int ok = 1;
  for (size_t i = 0; i < 8; i++) ok &= z[i] == 0xabcdef;
  for (size_t i = 8; i < 16; i++) ok &= z[i] == 0;
  CHECK(ok);
  free(z);

  /* the growing string: appends past the first capacity, always terminated */
  bf_strbuf sb = {0};
  bf_strbuf_put(&sb, "", 0);
  CHECK(sb.s && sb.s[0] == 0 && sb.n == 0);
  for (int i = 0; i < 100; i++) bf_strbuf_put(&sb, "abc", 3);
  CHECK(!sb.oom && sb.n == 300 && strlen(sb.s) == 300 && memcmp(sb.s + 297, "abc", 3) == 0);
  free(sb.s);
  return CHECK_DONE();
}
