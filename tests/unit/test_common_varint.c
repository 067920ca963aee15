/* test_common_varint.c — LEB128: the protobuf spec's encodings, round trips
 * at every length boundary, truncated and overlong input refused. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "varint.h"

int main(void) {
  uint8_t b[16];
  uint64_t v = 0;
  CHECK_EQ_INT(bf_varint_put(b, 300), 2); /* protobuf docs: 300 = ac 02 */
  CHECK(b[0] == 0xac && b[1] == 0x02);
  CHECK_EQ_INT(bf_varint_put(b, 0), 1);
  CHECK(b[0] == 0);
  CHECK_EQ_INT(bf_varint_put(b, UINT64_MAX), 10);
  CHECK_EQ_INT(bf_varint_get(b, 10, &v), 10);
  CHECK(v == UINT64_MAX);
  int bad = 0;
  for (int bits = 0; bits < 64; bits++) {
    uint64_t x[] = {(1ULL << bits) - 1, 1ULL << bits, (1ULL << bits) + 1};
    for (int j = 0; j < 3; j++) {
      size_t n = bf_varint_put(b, x[j]);
      size_t want = 1;
      for (uint64_t y = x[j] >> 7; y; y >>= 7) want++;
      uint64_t back = 0;
      if (n != want || bf_varint_get(b, n, &back) != n || back != x[j]) bad++;
      if (n > 1 && bf_varint_get(b, n - 1, &back) != 0) bad++; /* truncated */
    }
  }
  CHECK_EQ_INT(bad, 0);
  memset(b, 0x80, sizeof b); /* 11+ continuation bytes: overlong */
  CHECK_EQ_INT(bf_varint_get(b, sizeof b, &v), 0);
  CHECK_EQ_INT(bf_varint_get(b, 0, &v), 0);
  return CHECK_DONE();
}
