/* fuzz_sampler.c — random bytes into every parser of untrusted target data:
 * the three line-table decoders, the ELF symbol/version reader, the
 * _Py_DebugOffsets validator and the frame walker (over a fake memory image
 * in which any address at or above FAKE_BASE wraps into the input, so random
 * pointers lead somewhere and walks go deep).
 *
 * Built two ways: with -DBF_LIBFUZZER under clang -fsanitize=fuzzer it is a
 * libFuzzer target; otherwise main() runs a fixed number of seeded random
 * inputs (the meson unit test `smp_fuzz`, fast enough for CI; run it under
 * -Db_sanitize=address,undefined for the real check).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "../../sampling/smp_int.h"

#define FAKE_BASE 0x100000000000ull

typedef struct image {
  const uint8_t *data;
  size_t size;
} image;

static ssize_t fake_readv(void *ud, const struct iovec *l, size_t nl, const struct iovec *r,
                          size_t nr) {
  image *im = ud;
  (void)nl;
  ssize_t total = 0;
  for (size_t i = 0; i < nr; i++) {
    uint64_t a = (uint64_t)(uintptr_t)r[i].iov_base;
    if (a < FAKE_BASE || !im->size || r[i].iov_len > (1u << 20)) {
      if (total) return total;
      errno = EFAULT;
      return -1;
    }
    unsigned char *dst = l[i].iov_base;
    size_t pos = (size_t)((a - FAKE_BASE) % im->size), left = r[i].iov_len;
    while (left) {
      size_t n = im->size - pos < left ? im->size - pos : left;
      memcpy(dst, im->data + pos, n);
      dst += n;
      left -= n;
      pos = 0;
    }
    total += (ssize_t)r[i].iov_len;
  }
  return total;
}

static void fuzz_one(const uint8_t *data, size_t size) {
  if (size < 2) return;
  uint8_t sel = data[0];
  data++;
  size--;
  switch (sel % 4) {
    case 0: { /* line tables */
      smp_line_range *r = NULL;
      size_t n = 0;
      if (smp_linetable_decode(1 + (sel >> 2) % 3, data, size, (int)(sel * 7) - 100, &r, &n) == 0) {
        for (uint32_t a = 0; a < 64; a++) (void)smp_linetable_lookup(r, n, a * 3);
        free(r);
      }
      break;
    }
    case 1: { /* ELF */
      smp_elf e;
      if (smp_elf_from_buffer(data, size, &e) == 0) {
        uint64_t v, s;
        char buf[32];
        (void)smp_elf_symbol(&e, "_PyRuntime", &v, &s);
        (void)smp_elf_find_version(&e, "3.10.", buf, sizeof buf);
        smp_elf_free(&e);
      }
      break;
    }
    case 2: { /* _Py_DebugOffsets, with a valid cookie and version half the time */
      unsigned char blob[1024];
      memset(blob, 0, sizeof blob);
      memcpy(blob, data, size < sizeof blob ? size : sizeof blob);
      if (sel & 4) {
        memcpy(blob, "xdebugpy", 8);
        uint64_t ver = (sel & 8) ? 0x030e00f0 : 0x030d00f0, ft = 0;
        memcpy(blob + 8, &ver, 8);
        memcpy(blob + 16, &ft, 8);
      }
      smp_layout l;
      int free_threaded;
      const char *msg;
      (void)smp_layout_from_debug_offsets(blob, size < sizeof blob ? size : sizeof blob, &l,
                                          &free_threaded, &msg);
      break;
    }
    default: { /* the frame walker over a fake memory image */
      bf_smp *h = bf_smp_new();
      if (!h) return;
      image im = {data, size};
      smp_layout l;
      int minor = 8 + (sel >> 2) % 5;
      if (smp_layout_builtin(minor, &l) == 0) {
        smp_set_reader(h, fake_readv, &im);
        smp_set_layout(h, &l, FAKE_BASE + (sel % 64));
        for (int i = 0; i < 3; i++) (void)smp_walk(h, i == 2 ? BF_SMP_WANT_GIL_ONLY : 0);
      }
      bf_smp_free(h);
      break;
    }
  }
}

#ifdef BF_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_one(data, size);
  return 0;
}
#else
int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 20000;
  uint64_t s = 0x5eed5eed12345678ull;
  uint8_t *buf = malloc(8192);
  if (!buf) return 1;
  for (long it = 0; it < iters; it++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    size_t len = 2 + (size_t)(s % 8190);
    uint64_t x = s;
    for (size_t i = 0; i < len; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      /* half the inputs are mostly small values and FAKE_BASE-like pointers,
       * which reach deeper into the walker than uniform noise */
      if ((it & 1) && (i & 7) == 5)
        buf[i] = 0x10;
      else if ((it & 1) && (i & 7) > 5)
        buf[i] = 0;
      else
        buf[i] = (uint8_t)x;
    }
    buf[0] = (uint8_t)it;
    fuzz_one(buf, len);
  }
  free(buf);
  printf("fuzz_sampler: %ld inputs, no crash\n", iters);
  return 0;
}
#endif
