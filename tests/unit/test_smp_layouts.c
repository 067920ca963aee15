/* test_smp_layouts.c — the _Py_DebugOffsets reader: synthetic 3.13 and 3.14
 * blobs (field positions as in those versions' headers) parse into the
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

/* positions: {interp_head, threads_head, ts_current_frame, fr_executable,
 * co_qualname, un_state} and the sizes that bound them */
static void fill(unsigned char *b, int minor) {
  memset(b, 0, 1024);
  memcpy(b, "xdebugpy", 8);
  put(b, 8, minor == 13 ? 0x030d00f0 : 0x030e00f0);
  int m14 = minor == 14;
  put(b, 24, 4096);                   /* runtime size */
  put(b, 40, 40);                     /* interpreters_head */
  put(b, 48, 8192);                   /* interp size */
  put(b, 64, 8);                      /* next */
  put(b, 72, 16);                     /* threads_head */
  put(b, m14 ? 88 : 80, 1024);        /* gc */
  put(b, m14 ? 144 : 136, 512);       /* gil locked */
  put(b, m14 ? 152 : 144, 520);       /* gil holder */
  put(b, m14 ? 176 : 152, 512);       /* tstate size */
  put(b, m14 ? 192 : 168, 8);         /* next */
  put(b, m14 ? 208 : 184, 72);        /* current_frame */
  put(b, m14 ? 216 : 192, 144);       /* thread_id */
  put(b, m14 ? 224 : 200, 152);       /* native_thread_id */
  put(b, m14 ? 248 : 224, 80);        /* frame size */
  put(b, m14 ? 256 : 232, 8);         /* previous */
  put(b, m14 ? 264 : 240, 0);         /* executable */
  put(b, m14 ? 272 : 248, 56);        /* instr_ptr */
  put(b, m14 ? 288 : 264, 70);        /* owner */
  put(b, m14 ? 312 : 272, 208);       /* code size */
  put(b, m14 ? 320 : 280, 112);       /* filename */
  put(b, m14 ? 328 : 288, 120);       /* name */
  put(b, m14 ? 336 : 296, 128);       /* qualname */
  put(b, m14 ? 344 : 304, 136);       /* linetable */
  put(b, m14 ? 352 : 312, 68);        /* firstlineno */
  put(b, m14 ? 384 : 344, 200);       /* co_code_adaptive */
  put(b, m14 ? 400 : 352, 16);        /* pyobject size */
  put(b, m14 ? 408 : 360, 8);         /* ob_type */
  put(b, m14 ? 416 : 368, 400);       /* type size */
  put(b, m14 ? 424 : 376, 24);        /* tp_name */
  put(b, m14 ? 592 : 512, 40);        /* bytes size */
  put(b, m14 ? 600 : 520, 16);        /* ob_size */
  put(b, m14 ? 608 : 528, 32);        /* ob_sval */
  put(b, m14 ? 616 : 536, 64);        /* unicode size */
  put(b, m14 ? 624 : 544, 32);        /* state */
  put(b, m14 ? 632 : 552, 16);        /* length */
  put(b, m14 ? 640 : 560, 40);        /* ascii size */
  put(b, m14 ? 648 : 568, 400);       /* gc size */
  put(b, m14 ? 656 : 576, 44);        /* collecting */
  put(b, m14 ? 96 : 88, 4000);        /* imports_modules */
}

int main(void) {
  unsigned char b[1024];
  smp_layout l;
  int ft;
  const char *msg;
  for (int minor = 13; minor <= 14; minor++) {
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
    CHECK_EQ_INT(l.executable_tagged, minor == 14);
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
    put(b, minor == 13 ? 184 : 208, 4096);
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
  }
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
