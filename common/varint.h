/* varint.h — LEB128 varints (the sample chunk codec, pprof's protobuf). No
 * project includes. */
#ifndef BF_VARINT_H
#define BF_VARINT_H

#include <stddef.h>
#include <stdint.h>

/* Writes v; returns bytes written (buf needs room for 10). */
size_t bf_varint_put(uint8_t *buf, uint64_t v);
/* Reads one varint from buf[0..len); returns bytes read, or 0 on truncated or
 * overlong (more than 10 bytes) input. OUT: *v. */
size_t bf_varint_get(const uint8_t *buf, size_t len, uint64_t *v);

#endif
