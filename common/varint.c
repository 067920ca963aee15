/* varint.c — LEB128 varints (see varint.h). */
#include "varint.h"

size_t bf_varint_put(uint8_t *buf, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  buf[n++] = (uint8_t)v;
  return n;
}

size_t bf_varint_get(const uint8_t *buf, size_t len, uint64_t *v) {
  uint64_t r = 0;
  for (size_t i = 0; i < len && i < 10; i++) {
    r |= (uint64_t)(buf[i] & 0x7f) << (7 * i);
    if (!(buf[i] & 0x80)) {
      *v = r;
      return i + 1;
    }
  }
  return 0;
}
