/* test_smp_layouts.c — the _Py_DebugOffsets reader: synthetic 3.13, 3.14 and
 * 3.15 blobs (field positions as in those versions' headers) parse into the
 * expected layout; a bad cookie, an offset outside its section and a
 * free-threaded build are refused. Also the vendored 3.8-3.12 tables exist,
 * and the thread-name tables (3.8-3.13; 3.13 takes its modules dict offset
 * from _Py_DebugOffsets, 3.14+ has none).
 */
#include <errno.h>
#include <string.h>

#include "smp_int.h" /* sampling/internal/: on this test's include path only */
#include "check.h"

static void put(unsigned char *b, size_t pos, uint64_t v) { memcpy(b + pos, &v, 8); }

/* Field positions inside _Py_DebugOffsets of 3.13, 3.14 and 3.15 (as in
 * those versions' headers), each with the value the blob gives it. */
enum { F_GC, F_GIL_LOCKED, F_GIL_HOLDER, F_TS_SIZE, F_TS_NEXT, F_TS_FRAME, F_TS_TID, F_TS_NTID,
       F_FR_SIZE, F_FR_PREV, F_FR_EXEC, F_FR_INSTR, F_FR_OWNER, F_CO_SIZE, F_CO_FILE, F_CO_NAME,
       F_CO_QUAL, F_CO_LT, F_CO_FIRST, F_CO_ADAPT, F_OB_SIZE, F_OB_TYPE, F_TP_SIZE, F_TP_NAME,
       F_BY_SIZE, F_BY_OBSIZE, F_BY_SVAL, F_UN_SIZE, F_UN_STATE, F_UN_LEN, F_UN_ASCII, F_GC_SIZE,
       F_GC_COLL, F_MODULES, F_TS_BASE, F_TS_HOLDS, F_N };
static const size_t pos[3][F_N] = {
    {80, 136, 144, 152, 168, 184, 192, 200, 224, 232, 240, 248, 264, 272, 280, 288, 296, 304,
     312, 344, 352, 360, 368, 376, 512, 520, 528, 536, 544, 552, 560, 568, 576, 88, 0, 0},
    {88, 144, 152, 176, 192, 208, 216, 224, 248, 256, 264, 272, 288, 312, 320, 328, 336, 344,
     352, 384, 400, 408, 416, 424, 592, 600, 608, 616, 624, 632, 640, 648, 656, 96, 0, 0},
    {88, 144, 152, 176, 192, 208, 240, 248, 312, 320, 328, 336, 352, 376, 384, 392, 400, 408,
     416, 448, 464, 472, 480, 488, 688, 696, 704, 712, 720, 728, 736, 752, 760, 96, 216, 272},
};
static const uint64_t val[F_N] = {
    1024, 512, 520, 512, 8, 72, 144, 152, 80, 8, 0, 56, 70, 208, 112, 120,
    128, 136, 68, 200, 16, 8, 400, 24, 40, 16, 32, 64, 32, 16, 40, 400,
    44, 4000, 168, 176};

static void fill(unsigned char *b, int minor) {
  memset(b, 0, 1024);
  memcpy(b, "xdebugpy", 8);
  put(b, 8, 0x030000f0u | (uint64_t)minor << 16);
  put(b, 24, 4096); /* runtime size */
  put(b, 40, 40);   /* interpreters_head */
  put(b, 48, 8192); /* interp size */
  put(b, 64, 8);    /* next */
  put(b, 72, 16);   /* threads_head */
  for (int f = 0; f < F_N; f++)
    if (pos[minor - 13][f]) put(b, pos[minor - 13][f], val[f]);
}

int main(void) {
  unsigned char b[1024];
  smp_layout l;
  int ft;
  const char *msg;
  for (int minor = 13; minor <= 15; minor++) {
    fill(b, minor);
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), 0);
    CHECK_EQ_INT(l.rt_interp_head, 40);
    CHECK_EQ_INT(l.is_tstate_head, 16);
    CHECK_EQ_INT(l.is_gc_collecting, 1024 + 44);
    CHECK_EQ_INT(l.ts_frame, 72);
    CHECK_EQ_INT(l.ts_native_thread_id, 152);
    CHECK_EQ_INT(l.fr_instr, 56);
    CHECK_EQ_INT(l.fr_owner, 70);
    CHECK_EQ_INT(l.co_qualname, 128);
    CHECK_EQ_INT(l.co_code_adaptive, 200);
    CHECK_EQ_INT(l.uni_compact_size, 56);
    CHECK_EQ_INT(l.executable_tagged, minor >= 14);
    CHECK_EQ_INT(l.ts_thread_id, 144);
    CHECK_EQ_INT(l.ts_base_frame, minor == 15 ? 168 : 0); /* 3.15 only */
    CHECK_EQ_INT(l.ts_holds_gil, minor == 15 ? 176 : 0);
    CHECK(l.ts_read >= (minor == 15 ? 184u : 160u));
    CHECK_EQ_INT(ft, 0);
    /* thread names: 3.13 from the vendored table and the target's modules
     * offset; 3.14 is not known (no names) */
    CHECK_EQ_INT(l.nm.minor, minor == 13 ? 13 : 0);
    if (minor == 13) {
      CHECK_EQ_INT(l.nm.is_modules, 4000);
      CHECK_EQ_INT(l.nm.attr_mode, SMP_ATTR_INLINE);
      put(b, 88, 9000); /* past the interpreter's size: no names, layout still fine */
      CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), 0);
      CHECK_EQ_INT(l.nm.minor, 0);
      fill(b, minor);
    }
    /* an offset past its section */
    put(b, pos[minor - 13][F_TS_FRAME], 4096);
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -EINVAL);
    fill(b, minor);
    put(b, 16, 1); /* free-threaded */
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -ENOTSUP);
    CHECK_EQ_INT(ft, 1);
    fill(b, minor);
    b[0] = 'X';
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -EINVAL);
    fill(b, minor);
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, 100, &l, &ft, &msg), -EINVAL); /* short */
    /* a blob of a newer version's length but cut short of its own */
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, minor == 15 ? 800 : 500, &l, &ft, &msg), -EINVAL);
  }
  /* 3.15's positions are not 3.14's: read with 3.14's, its thread id would
   * be base_frame (a wrong but in-bounds offset), so the version decides */
  fill(b, 15);
  CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), 0);
  CHECK_EQ_INT(l.ts_thread_id, 144);
  /* an unknown minor version (3.16, 3.12 with a cookie) is refused in one
   * line naming the known ones, whatever its fields say */
  fill(b, 15);
  put(b, 8, 0x031000f0);
  CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -ENOTSUP);
  CHECK(strstr(msg, "3.13, 3.14, 3.15") != NULL);
  put(b, 8, 0x030c00f0);
  CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -EINVAL);
  static const int modes[] = {SMP_ATTR_DICTOFFSET, SMP_ATTR_DICTOFFSET, SMP_ATTR_DICTOFFSET,
                               SMP_ATTR_VALUES_PTR, SMP_ATTR_DORV};
  for (int minor = 8; minor <= 12; minor++) {
    CHECK_EQ_INT(smp_layout_builtin(minor, &l), 0);
    CHECK(l.ts_read > 0 && l.fr_read > 0 && l.co_fp_len > 0 && l.co_fp_len < 256);
    CHECK_EQ_INT(l.nm.minor, minor);
    CHECK_EQ_INT(l.nm.attr_mode, modes[minor - 8]);
    CHECK_EQ_INT(l.nm.dk_log2, minor >= 11);
    CHECK_EQ_INT(l.nm.long_tagged, minor >= 12);
  }
  struct smp_names_layout nm;
  CHECK_EQ_INT(smp_layout_names(13, &nm), 0);
  CHECK_EQ_INT(smp_layout_names(14, &nm), -ENOTSUP);
  CHECK_EQ_INT(smp_layout_builtin(7, &l), -ENOTSUP);
  CHECK_EQ_INT(smp_layout_builtin(13, &l), -ENOTSUP);
  return CHECK_DONE();
}
