/* tasks_314.c — asyncio tasks of Python 3.14 and 3.15 through the
 * target's own offsets: _asyncio exports _Py_AsyncioModuleDebugOffsets
 * (symbol _AsyncioDebug, section .AsyncioDebug; in the _asyncio extension
 * on 3.14, built into the executable on 3.15) and links every pending C
 * Task into its thread state's list (tasks of finished threads move to the
 * interpreter's list). Written from CPython's Modules/_asynciomodule.c and
 * Include/internal/pycore_debug_offsets.h; checked on Debian sid's 3.14.10
 * and 3.15.2 (tests/integration/test_asyncio_tasks.py) and over fake memory
 * (tests/unit/test_smp_tasks314.c). Every offset is checked against its
 * section's size and the TaskObj layout before use; other versions are
 * refused.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "procmaps.h"
#include "tasks_int.h"

/* Positions of fields inside _Py_DebugOffsets (every field a uint64):
 * the interpreter frame, the generator object, the llist node and the int
 * object; and the frame states, per version (Include/internal/
 * pycore_debug_offsets.h and pycore_frame.h of 3.14 and 3.15). */
typedef struct pd_pos {
  int minor;
  size_t len, fr_size, fr_sp, gen_size, gen_iframe, gen_state, llist_next, long_tag, long_digit;
  int8_t await_lo, await_hi, exec; /* FRAME_SUSPENDED_YIELD_FROM(_LOCKED), FRAME_EXECUTING */
  /* slots above the awaited object at an await: 3.15 compiles an await as
   * GET_AWAITABLE, PUSH_NULL, ..., SEND, so a suspended coroutine's stack
   * ends [..., awaited, NULL] (seen in 3.15.2's frames) */
  uint8_t await_below;
} pd_pos;

static const pd_pos pd_poss[] = {
    {14, 760, 248, 296, 664, 680, 688, 696, 576, 584, -1, -1, 0, 0},
    {15, 888, 312, 360, 792, 808, 816, 824, 672, 680, 2, 3, 4, 1},
};

static int inside(uint64_t off, uint64_t w, uint64_t sz) { return sz <= (1u << 24) && off + w <= sz; }

/* The 3.14/3.15 positions of pydbg's version. OUT: *P. */
static int pd_version(const unsigned char *pydbg, size_t plen, const pd_pos **P, const char **msg) {
  *msg = "ok";
  if (plen < 24 || memcmp(pydbg, "xdebugpy", 8) != 0) {
    *msg = "_Py_DebugOffsets cookie not found";
    return -EINVAL;
  }
  uint64_t ver = rd64(pydbg + 8);
  *P = NULL;
  for (size_t i = 0; i < sizeof pd_poss / sizeof pd_poss[0]; i++)
    if ((ver >> 24) == 3 && (int)((ver >> 16) & 0xff) == pd_poss[i].minor) *P = &pd_poss[i];
  if (!*P) {
    *msg = "asyncio debug offsets are read for Python 3.14 and 3.15 only";
    return -ENOTSUP;
  }
  if (rd64(pydbg + 16) != 0) {
    *msg = "free-threaded builds are not supported";
    return -ENOTSUP;
  }
  if (plen < (*P)->len) {
    *msg = "debug offsets shorter than the layout of their version";
    return -EINVAL;
  }
  return 0;
}

int tk314_parse_gen(const unsigned char *pydbg, size_t plen, tk314 *out, const char **msg) {
  const pd_pos *P;
  int rc = pd_version(pydbg, plen, &P, msg);
  if (rc) return rc;
  uint64_t fr_size = rd64(pydbg + P->fr_size), fr_sp = rd64(pydbg + P->fr_sp);
  uint64_t g_size = rd64(pydbg + P->gen_size), g_iframe = rd64(pydbg + P->gen_iframe),
           g_state = rd64(pydbg + P->gen_state), l_next = rd64(pydbg + P->llist_next);
  uint64_t lv_tag = rd64(pydbg + P->long_tag), lv_digit = rd64(pydbg + P->long_digit);
  int good = fr_size <= 1024 && inside(fr_sp, 8, fr_size) && fr_sp + 8 <= 80 && g_size <= 1024 &&
             inside(g_iframe, fr_size, g_size) && g_state + 5 == g_iframe && g_iframe <= 160 &&
             (l_next == 0 || l_next == 8) && lv_tag >= 8 && lv_tag + 8 <= lv_digit && lv_digit <= 56;
  if (!good) {
    *msg = "_Py_DebugOffsets' generator and frame offsets do not match the layout of 3.14/3.15";
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  out->gen_iframe = g_iframe;
  out->gen_frame_state = g_state;
  out->fr_stackpointer = fr_sp;
  out->llist_next = l_next;
  out->long_tag = lv_tag;
  out->long_digit = lv_digit;
  out->minor = P->minor;
  out->fs_await_lo = P->await_lo;
  out->fs_await_hi = P->await_hi;
  out->fs_exec = P->exec;
  out->await_below = P->await_below;
  return 0;
}

int tk314_parse(const unsigned char *adbg, size_t alen, const unsigned char *pydbg, size_t plen,
                tk314 *out, const char **msg) {
  tk314 g;
  int rc = tk314_parse_gen(pydbg, plen, &g, msg);
  if (rc) return rc;
  if (alen < TK314_ASYNCIO_LEN) {
    *msg = "debug offsets shorter than the layout of their version";
    return -EINVAL;
  }
  const unsigned char *a = adbg;
  uint64_t t_size = rd64(a), t_name = rd64(a + 8), t_awaited_by = rd64(a + 16), t_is_task = rd64(a + 24),
           t_by_is_set = rd64(a + 32), t_coro = rd64(a + 40), t_node = rd64(a + 48);
  uint64_t i_size = rd64(a + 56), i_head = rd64(a + 64);
  uint64_t s_size = rd64(a + 72), s_head = rd64(a + 96);
  /* TaskObj: ... awaited_by; int state; char is_task, awaited_by_is_set;
   * bit fields; int num_cancels; fut_waiter, coro, name, context; node */
  int good = t_size <= 512 && inside(t_name, 8, t_size) && inside(t_coro, 8, t_size) && inside(t_node, 16, t_size) &&
             t_awaited_by + 12 == t_is_task && t_by_is_set == t_is_task + 1 && t_name == t_coro + 8 &&
             t_coro >= t_is_task + 16 && t_node >= t_name + 16 && inside(i_head, 16, i_size) &&
             inside(s_head, 16, s_size) && s_size <= 65536 && inside(rd64(a + 80), 8, s_size) &&
             inside(rd64(a + 88), 8, s_size);
  if (!good) {
    *msg = "asyncio debug offsets do not match the Task layout of 3.14/3.15";
    return -EINVAL;
  }
  g.task_size = t_size;
  g.task_fut_state = t_awaited_by + 8;
  g.task_fut_waiter = t_coro - 8;
  g.task_coro = t_coro;
  g.task_name = t_name;
  g.task_node = t_node;
  g.is_tasks_head = i_head;
  g.ts_tasks_head = s_head;
  *out = g;
  return 0;
}

/* Walk one list whose head node is at head. */
static void list_walk(bf_smp *h, const tk314 *o, uint64_t head, uint64_t *addrs, size_t max, size_t *n) {
  uint64_t node = 0;
  if (smp_read(h, head + o->llist_next, &node, 8) < 0) return;
  for (size_t steps = 0; node && node != head && *n < max && steps < max; steps++) {
    if (node < o->task_node) return;
    addrs[(*n)++] = node - o->task_node;
    if (smp_read(h, node + o->llist_next, &node, 8) < 0) return;
  }
}

int tk314_tasks(bf_smp *h, const tk314 *o, uint64_t interp, uint64_t *addrs, size_t max, size_t *n) {
  uint64_t ts = 0;
  if (!interp || smp_read(h, interp + h->lay.is_tstate_head, &ts, 8) < 0) return -EIO;
  for (int i = 0; ts && i < SMP_MAX_THREADS && *n < max; i++) {
    list_walk(h, o, ts + o->ts_tasks_head, addrs, max, n);
    uint64_t next = 0;
    if (smp_read(h, ts + h->lay.ts_next, &next, 8) < 0 || next == ts) break;
    ts = next;
  }
  list_walk(h, o, interp + o->is_tasks_head, addrs, max, n);
  return 0;
}

/* ---- where _AsyncioDebug lives ---- */

/* The address (vaddr) and size of the ELF64 section called name: stripped
 * builds keep sections, not symbols. */
static int elf_section(const smp_elf *e, const char *name, uint64_t *addr, uint64_t *size) {
  const unsigned char *d = e->data;
  if (e->size < 64 || memcmp(d, "\x7f" "ELF", 4) != 0 || d[4] != 2) return -ENOENT;
  uint64_t shoff = rd64(d + 40);
  uint32_t shentsize = d[58] | (uint32_t)d[59] << 8, shnum = d[60] | (uint32_t)d[61] << 8,
           shstrndx = d[62] | (uint32_t)d[63] << 8;
  if (shentsize < 64 || shnum > 4096 || shstrndx >= shnum || shoff > e->size ||
      (uint64_t)shnum * shentsize > e->size - shoff)
    return -ENOENT;
  const unsigned char *str = d + shoff + (uint64_t)shstrndx * shentsize;
  uint64_t stroff = rd64(str + 24), strsize = rd64(str + 32);
  if (stroff > e->size || strsize > e->size - stroff) return -ENOENT;
  size_t len = strlen(name) + 1;
  for (uint32_t i = 0; i < shnum; i++) {
    const unsigned char *sh = d + shoff + (uint64_t)i * shentsize;
    uint32_t nm = rd32(sh);
    if (nm >= strsize || strsize - nm < len || memcmp(d + stroff + nm, name, len) != 0) continue;
    *addr = rd64(sh + 16);
    *size = rd64(sh + 32);
    return *addr ? 0 : -ENOENT;
  }
  return -ENOENT;
}

typedef struct find_q {
  char path[3][512]; /* _asyncio extension, libpython, executable */
  uint64_t lo[3], hi[3];
} find_q;

static int find_map(void *ud, const bf_procmap *m) {
  find_q *q = ud;
  if (m->name[0] != '/' || m->off != 0) return 0;
  const char *base = strrchr(m->name, '/') + 1;
  int k = strncmp(base, "_asyncio.", 9) == 0 && strstr(base, ".so") ? 0
          : strncmp(base, "libpython3", 10) == 0                   ? 1
          : strncmp(base, "python3", 7) == 0                       ? 2
                                                                   : -1;
  if (k < 0 || q->path[k][0]) return 0;
  snprintf(q->path[k], sizeof q->path[k], "%s", m->name);
  q->lo[k] = m->lo;
  q->hi[k] = m->hi;
  return 0;
}

/* Load the file mapped at [lo, hi) as path in pid's maps. maps names it as
 * this process sees it (a target chrooted or in a container shows its host
 * path), so the mapping's own link comes first, then the path inside the
 * target's root, then the path as named. */
static int load_mapped(int pid, const char *path, uint64_t lo, uint64_t hi, smp_elf *elf) {
  char file[600];
  snprintf(file, sizeof file, "/proc/%d/map_files/%llx-%llx", pid, (unsigned long long)lo, (unsigned long long)hi);
  if (smp_elf_load(file, elf) == 0) return 0;
  snprintf(file, sizeof file, "/proc/%d/root%s", pid, path);
  if (smp_elf_load(file, elf) == 0) return 0;
  return smp_elf_load(path, elf);
}

int tk314_find_gen(bf_smp *h, tk314 *out, const char **msg) {
  unsigned char pyd[TK314_PYDEBUG_LEN];
  /* 3.14's is shorter than what is read: _PyRuntime goes on after it */
  if (smp_read(h, h->runtime_addr, pyd, sizeof pyd) < 0) {
    *msg = "cannot read _Py_DebugOffsets";
    return -EIO;
  }
  return tk314_parse_gen(pyd, sizeof pyd, out, msg);
}

int tk314_find(bf_smp *h, unsigned *none, tk314 *out, const char **msg) {
  find_q q;
  memset(&q, 0, sizeof q);
  *msg = "the _asyncio module is not loaded";
  if (h->pid <= 0 || bf_procmaps_foreach(h->pid, find_map, &q) < 0) return -ENOENT;
  unsigned char pyd[TK314_PYDEBUG_LEN], ad[TK314_ASYNCIO_LEN];
  if (smp_read(h, h->runtime_addr, pyd, sizeof pyd) < 0) {
    *msg = "cannot read _Py_DebugOffsets";
    return -EIO;
  }
  for (int k = 0; k < 3; k++) {
    if (!q.path[k][0] || (*none & (1u << k))) continue;
    smp_elf elf = {0};
    uint64_t val, sz;
    if (load_mapped(h->pid, q.path[k], q.lo[k], q.hi[k], &elf) < 0) continue;
    int rc = smp_elf_symbol(&elf, "_AsyncioDebug", &val, &sz);
    if (rc < 0) rc = elf_section(&elf, ".AsyncioDebug", &val, &sz);
    uint64_t addr = q.lo[k] - elf.load_vaddr + val;
    smp_elf_free(&elf);
    if (rc < 0) {
      if (k > 0) *none |= 1u << k; /* libpython and the executable stay what they are */
      continue;
    }
    if (sz && sz < sizeof ad) {
      *msg = "_AsyncioDebug is shorter than the layout of 3.14/3.15";
      return -EINVAL;
    }
    if (smp_read(h, addr, ad, sizeof ad) < 0) {
      *msg = "cannot read _AsyncioDebug";
      return -EIO;
    }
    return tk314_parse(ad, sizeof ad, pyd, sizeof pyd, out, msg);
  }
  return -ENOENT;
}
