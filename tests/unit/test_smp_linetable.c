/* test_smp_linetable.c — the line-table decoders against tables and lines
 * produced by real interpreters (3.8 lnotab, 3.10 linetable, 3.12/3.13
 * location tables; vectors generated with code.co_lines / dis.findlinestarts),
 * plus the bounds of garbage input.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "smp_int.h" /* sampling/internal/: on this test's include path only */
#include "check.h"

typedef struct vec {
  int minor, kind, first;
  const char *tab;
  size_t len;
  struct {
    int addr, line;
  } exp[64];
  int nexp;
} vec;

static const vec vecs[] = {
  {8, SMP_LT_LNOTAB, 2, "\x00\x01\x08\x01\x08\x01\x14\x02\x04\x02\x0c\x01\x0a\x01\x02\x01\x02\xff", 18, {{0, 3}, {2, 3}, {4, 3}, {6, 3}, {8, 4}, {10, 4}, {12, 4}, {14, 4}, {16, 5}, {18, 5}, {20, 5}, {22, 5}, {24, 5}, {26, 5}, {28, 5}, {30, 5}, {32, 5}, {34, 5}, {36, 7}, {38, 7}, {40, 9}, {42, 9}, {44, 9}, {46, 9}, {48, 9}, {50, 9}, {52, 10}, {54, 10}, {56, 10}, {58, 10}, {60, 10}, {62, 11}, {64, 12}, {66, 11}, {68, 11}}, 35},
  {10, SMP_LT_310, 2, "\x08\x01\x08\x01\x14\x01\x04\x02\x0c\x02\x0a\x01\x02\x01\x02\x01\x04\xff", 18, {{0, 3}, {2, 3}, {4, 3}, {6, 3}, {8, 4}, {10, 4}, {12, 4}, {14, 4}, {16, 5}, {18, 5}, {20, 5}, {22, 5}, {24, 5}, {26, 5}, {28, 5}, {30, 5}, {32, 5}, {34, 5}, {36, 7}, {38, 7}, {40, 9}, {42, 9}, {44, 9}, {46, 9}, {48, 9}, {50, 9}, {52, 10}, {54, 10}, {56, 10}, {58, 10}, {60, 10}, {62, 11}, {64, 12}, {66, 11}, {68, 11}}, 35},
  {12, SMP_LT_LOCATIONS, 2, "\x80\x00\xd8\x08\x09\x88\x41\x89\x05\x80\x41\xd8\x07\x08\x88\x31\x82\x75\xdc\x18\x1d\x98\x61\x9b\x08\xd6\x0c\x21\x90\x31\x8a\x51\xd0\x0c\x21\x88\x01\xd1\x0c\x21\xe0\x0c\x10\x88\x01\xe4\x0d\x12\x90\x31\x8b\x58\xf2\x00\x01\x05\x0f\x88\x01\xd8\x08\x09\x88\x51\x89\x06\x89\x01\xf0\x03\x01\x05\x0f\xe0\x0c\x0d\xd8\x0c\x0d\xf0\x03\x01\x0c\x0f\xf0\x00\x01\x05\x0f\xf9\xf2\x0d\x00\x0d\x22", 95, {{0, 2}, {1, 3}, {2, 3}, {3, 3}, {4, 3}, {5, 3}, {6, 4}, {7, 4}, {8, 4}, {9, 4}, {10, 4}, {11, 5}, {12, 5}, {13, 5}, {14, 5}, {15, 5}, {16, 5}, {17, 5}, {18, 5}, {19, 5}, {20, 5}, {21, 5}, {22, 5}, {23, 5}, {24, 5}, {25, 5}, {26, 5}, {27, 5}, {28, 5}, {29, 5}, {30, 5}, {31, 5}, {32, 5}, {33, 5}, {34, 5}, {35, 5}, {36, 7}, {37, 7}, {38, 9}, {39, 9}, {40, 9}, {41, 9}, {42, 9}, {43, 9}, {44, 9}, {45, 9}, {46, 9}, {47, 9}, {48, 9}, {49, 9}, {50, 9}, {51, 9}, {52, 10}, {53, 10}, {54, 10}, {55, 10}, {56, 10}, {57, 10}, {58, 9}, {59, 11}, {60, 12}, {61, 11}, {62, 11}, {65, 5}}, 64},
  {13, SMP_LT_LOCATIONS, 2, "\x80\x00\xd8\x08\x09\x89\x05\x80\x41\xd8\x07\x08\x88\x31\x83\x75\xdc\x18\x1d\x98\x61\x9c\x08\xd3\x0c\x21\x99\x08\x90\x31\x8a\x51\x99\x08\x88\x01\xd0\x0c\x21\x88\x01\xe0\x0c\x10\x88\x01\xe4\x0d\x12\x90\x31\x8e\x58\x88\x01\xd8\x08\x09\x89\x06\x8a\x01\xf1\x03\x00\x0e\x16\xe0\x0c\x0d\xd8\x0c\x0d\xf0\x03\x01\x0c\x0f\xf0\x00\x01\x05\x0f\xf9\xf2\x0d\x00\x0d\x22", 89, {{0, 2}, {1, 3}, {2, 3}, {3, 3}, {4, 3}, {5, 4}, {6, 4}, {7, 4}, {8, 4}, {9, 4}, {10, 4}, {11, 5}, {12, 5}, {13, 5}, {14, 5}, {15, 5}, {16, 5}, {17, 5}, {18, 5}, {19, 5}, {20, 5}, {21, 5}, {22, 5}, {23, 5}, {24, 5}, {25, 5}, {26, 5}, {27, 5}, {28, 5}, {29, 5}, {30, 5}, {31, 5}, {32, 5}, {33, 5}, {34, 5}, {35, 5}, {36, 5}, {37, 7}, {38, 7}, {39, 9}, {40, 9}, {41, 9}, {42, 9}, {43, 9}, {44, 9}, {45, 9}, {46, 9}, {47, 9}, {48, 9}, {49, 9}, {50, 9}, {51, 9}, {52, 9}, {53, 10}, {54, 10}, {55, 10}, {56, 10}, {57, 10}, {58, 10}, {59, 9}, {60, 9}, {61, 11}, {62, 12}, {63, 11}}, 64},
};

int main(void) {
  for (size_t v = 0; v < sizeof vecs / sizeof vecs[0]; v++) {
    smp_line_range *r = NULL;
    size_t n = 0;
    CHECK_EQ_INT(smp_linetable_decode(vecs[v].kind, (const unsigned char *)vecs[v].tab, vecs[v].len,
                                      vecs[v].first, &r, &n), 0);
    CHECK(n > 0);
    for (int i = 0; i < vecs[v].nexp; i++) {
      int32_t got = smp_linetable_lookup(r, n, (uint32_t)vecs[v].exp[i].addr);
      if (got != vecs[v].exp[i].line)
        fprintf(stderr, "3.%d: addr %d: line %d, expected %d\n", vecs[v].minor,
                vecs[v].exp[i].addr, (int)got, vecs[v].exp[i].line);
      CHECK_EQ_INT(got, vecs[v].exp[i].line);
    }
    free(r);
  }
  /* garbage: truncated varints and a missing header bit never read past the end */
  static const unsigned char bad[] = {0xf0, 0x7f, 0x7f};
  smp_line_range *r = NULL;
  size_t n = 0;
  int rc = smp_linetable_decode(SMP_LT_LOCATIONS, bad, sizeof bad, 1, &r, &n);
  CHECK(rc == 0 || rc == -EINVAL);
  free(r);
  r = NULL;
  CHECK_EQ_INT(smp_linetable_decode(SMP_LT_LOCATIONS, (const unsigned char *)"\x01", 1, 1, &r, &n),
               -EINVAL);
  CHECK_EQ_INT(smp_linetable_decode(99, bad, sizeof bad, 1, &r, &n), -EINVAL);
  CHECK_EQ_INT(smp_linetable_lookup(NULL, 0, 5), -1);
  return CHECK_DONE();
}
