/* varint.h — LEB128 varints (the sample chunk codec, pprof's protobuf).
 * Inline: the chunk codec calls them several times per sample. No project
 * includes. */
#ifndef BF_VARINT_H
#define BF_VARINT_H

#include <stddef.h>
#include <stdint.h>

/* Writes v; returns bytes written (buf needs room for 10). */
static inline size_t bf_varint_put(uint8_t *buf, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  buf[n++] = (uint8_t)v;
  return n;
}

/* Reads one varint from buf[0..len); returns bytes read, or 0 on truncated or
 * overlong (more than 10 bytes) input. OUT: *v. */
static inline size_t bf_varint_get(const uint8_t *buf, size_t len, uint64_t *v) {
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

#endif
