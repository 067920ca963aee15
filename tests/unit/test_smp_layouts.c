/* test_smp_layouts.c — the _Py_DebugOffsets reader: synthetic 3.13, 3.14 and
 * 3.15 blobs (field positions as in those versions' headers) parse into the
 * expected layout; a bad cookie, an offset outside its section and a
 * free-threaded build are refused in one line. Also the vendored 3.8-3.12
 * tables exist, and the thread-name tables (3.8-3.15; 3.13+ take the modules
 * dict, type flags, dict and int offsets from _Py_DebugOffsets, 3.15 also
 * the type sizes and the heap type's cached keys).
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

/* The thread-name fields' positions (DBG_POS_GENERATED in layouts.c: is_size,
 * tp_size, tp_flags, tp_basicsize, tp_dictoffset, ht_size, ht_cached_keys,
 * dict_size, ma_keys, ma_values, long_size, lv_tag, ob_digit; 0: absent)
 * and values: each differs from the vendored table, so a value read from
 * the blob is told apart from one taken from NAMES_GENERATED. */
enum { N_TP_SIZE, N_TP_FLAGS, N_TP_BASIC, N_TP_DICTOFF, N_HT_SIZE, N_HT_CACHED, N_DICT_SIZE,
       N_DICT_KEYS, N_DICT_VALUES, N_LONG_SIZE, N_LONG_TAG, N_LONG_DIGIT, N_N };
static const size_t npos[3][N_N] = {
    {368, 392, 0, 0, 0, 0, 448, 456, 464, 488, 496, 504},
    {416, 440, 0, 0, 0, 0, 528, 536, 544, 568, 576, 584},
    {480, 504, 512, 520, 528, 536, 624, 632, 640, 664, 672, 680},
};
static const uint64_t nval[N_N] = {400, 176, 40, 296, 960, 888, 56, 40, 48, 32, 8, 16};

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
  for (int f = 0; f < N_N; f++)
    if (npos[minor - 13][f]) put(b, npos[minor - 13][f], nval[f]);
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
    /* --mode exception: vendored exc_info where current_frame sits where the
     * headers put it; 3.15 only when its current_exception agrees too */
    CHECK_EQ_INT(l.ts_exc_info, minor == 15 ? 0 : 120);
    CHECK_EQ_INT(l.ei_prev, minor == 15 ? 0 : 8);
    if (minor == 15) {
      put(b, 288, 136); /* thread_state.current_exception */
      CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), 0);
      CHECK_EQ_INT(l.ts_exc_info, 144);
      CHECK_EQ_INT(l.ts_cur_exc, 136);
      fill(b, minor);
      CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), 0);
    }
    CHECK_EQ_INT(ft, 0);
    /* thread names: the vendored table under the target's own offsets */
    CHECK_EQ_INT(l.nm.minor, minor);
    CHECK_EQ_INT(l.nm.is_modules, 4000);
    CHECK_EQ_INT(l.nm.attr_mode, SMP_ATTR_INLINE);
    CHECK_EQ_INT(l.nm.tp_flags, 176);
    CHECK_EQ_INT(l.nm.dict_size, 56);
    CHECK_EQ_INT(l.nm.dict_keys, 40);
    CHECK_EQ_INT(l.nm.dict_values, 48);
    CHECK_EQ_INT(l.nm.long_size, 8);
    CHECK_EQ_INT(l.nm.long_digit, 16);
    CHECK_EQ_INT(l.nm.tp_basicsize, minor == 15 ? 40 : 32); /* 3.15 only: else vendored */
    CHECK_EQ_INT(l.nm.tp_dictoffset, minor == 15 ? 296 : 288);
    CHECK_EQ_INT(l.nm.ht_cached_keys, minor == 15 ? 888 : 880);
    CHECK_EQ_INT(l.nm.ht_size, minor == 15 ? 960 : minor == 14 ? 936 : 928);
    CHECK_EQ_INT(l.nm.dk_uentry_size, 16); /* never in _Py_DebugOffsets */
    /* one of them past its section: no names, the layout still fine */
    const size_t bad[][2] = {{pos[minor - 13][F_MODULES], 9000},
                             {npos[minor - 13][N_TP_FLAGS], 400},
                             {npos[minor - 13][N_DICT_VALUES], 56},
                             {npos[minor - 13][N_LONG_DIGIT], 30},
                             {npos[minor - 13][N_HT_CACHED], 960},
                             {npos[minor - 13][N_TP_BASIC], 1 << 20}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      if (!bad[i][0]) continue;
      put(b, bad[i][0], bad[i][1]);
      CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), 0);
      CHECK_EQ_INT(l.nm.minor, 0);
      fill(b, minor);
    }
    /* an offset past its section */
    put(b, pos[minor - 13][F_TS_FRAME], 4096);
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -EINVAL);
    fill(b, minor);
    put(b, 16, 1); /* free-threaded: refused in one line that says so */
    CHECK_EQ_INT(smp_layout_from_debug_offsets(b, sizeof b, &l, &ft, &msg), -ENOTSUP);
    CHECK_EQ_INT(ft, 1);
    CHECK(strstr(msg, "free-threaded") != NULL && strchr(msg, '\n') == NULL);
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
  CHECK_EQ_INT(smp_layout_names(14, &nm), 0);
  CHECK_EQ_INT(smp_layout_names(15, &nm), 0);
  CHECK_EQ_INT(nm.ht_cached_keys, 888); /* PyTypeObject grew in 3.15 */
  CHECK_EQ_INT(smp_layout_names(16, &nm), -ENOTSUP);
  CHECK_EQ_INT(smp_layout_builtin(7, &l), -ENOTSUP);
  CHECK_EQ_INT(smp_layout_builtin(13, &l), -ENOTSUP);
  return CHECK_DONE();
}
