/* test_smp_native.c — the pieces the native unwinder finds an eval loop and a
 * stripped object's functions with: the ELF readers (checked against what the
 * dynamic loader says about this very program), the rel32 jump scanner and
 * the split-part rule over hand-assembled code, the target-path rule, and
 * the merge of C frames with Python frames, including a call caught while
 * being entered (more eval frames than Python groups).
 */
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "native_int.h"

/* ---- ELF: this executable, against dl_iterate_phdr and /proc/self/maps ---- */

typedef struct self_info {
  uint64_t bias, eh_vaddr, lo, hi;
  int found;
} self_info;

static int self_phdrs(struct dl_phdr_info *info, size_t size, void *ud) {
  (void)size;
  self_info *s = ud;
  if (s->found) return 0;
  s->found = 1; /* the first object is the program itself */
  s->bias = info->dlpi_addr;
  s->lo = UINT64_MAX;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    if (p->p_type == PT_GNU_EH_FRAME) s->eh_vaddr = p->p_vaddr;
    if (p->p_type != PT_LOAD) continue;
    if (p->p_vaddr < s->lo) s->lo = p->p_vaddr;
    if (p->p_vaddr + p->p_memsz > s->hi) s->hi = p->p_vaddr + p->p_memsz;
  }
  return 0;
}

/* The executable mapping of /proc/self/exe: lo and file offset. */
static int self_exec_map(uint64_t *lo, uint64_t *off) {
  char exe[4096];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k <= 0) return -1;
  exe[k] = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[8192];
  int rc = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long long a, b, o;
    char perms[8];
    if (sscanf(line, "%llx-%llx %7s %llx", &a, &b, perms, &o) != 4 || perms[2] != 'x') continue;
    if (!strstr(line, exe)) continue;
    *lo = a;
    *off = o;
    rc = 0;
    break;
  }
  fclose(f);
  return rc;
}

__attribute__((noinline)) int test_smp_native_marker(int x) { return x * 3 + 1; }

static void test_elf_self(void) {
  smp_elf e;
  CHECK_EQ_INT(smp_elf_load("/proc/self/exe", &e), 0);
  self_info si = {0};
  dl_iterate_phdr(self_phdrs, &si);
  CHECK(si.found && si.eh_vaddr);

  /* load span and .eh_frame_hdr: where the loader has them */
  uint64_t lo = 0, hi = 0;
  CHECK_EQ_INT(smp_elf_load_span(&e, &lo, &hi), 0);
  CHECK_EQ_INT(lo, si.lo);
  CHECK_EQ_INT(hi, si.hi);
  uint64_t hdr = 0, table = 0, nfde = 0;
  CHECK_EQ_INT(smp_elf_eh_frame_index(&e, &hdr, &table, &nfde), 0);
  CHECK_EQ_INT(hdr, si.eh_vaddr);
  CHECK(table > hdr && nfde > 10);
  /* the table's first entry is a function start inside the text, relative to the header */
  int32_t first;
  memcpy(&first, (const void *)(uintptr_t)(si.bias + table), 4);
  CHECK(hdr + (uint64_t)(int64_t)first >= lo && hdr + (uint64_t)(int64_t)first < hi);

  /* the executable mapping's file offset → its address */
  uint64_t mlo = 0, moff = 0, va = 0;
  CHECK_EQ_INT(self_exec_map(&mlo, &moff), 0);
  CHECK_EQ_INT(smp_elf_vaddr_of_offset(&e, moff, &va), 0);
  CHECK_EQ_INT(si.bias + va, mlo);
  CHECK(smp_elf_vaddr_of_offset(&e, UINT64_MAX - 4, &va) == -ENOENT);

  /* function symbols: the marker, by address, with its size */
  smp_elf_sym *syms = NULL;
  size_t n = 0;
  CHECK_EQ_INT(smp_elf_functions(&e, &syms, &n), 0);
  CHECK(n > 10);
  for (size_t i = 1; i < n; i++) CHECK(syms[i - 1].value < syms[i].value);
  uint64_t mark = (uint64_t)(uintptr_t)&test_smp_native_marker - si.bias;
  const smp_elf_sym *s = smp_elf_function_at(syms, n, mark + 2);
  CHECK(s && strcmp(s->name, "test_smp_native_marker") == 0 && s->value == mark && s->size > 2);
  CHECK(smp_elf_function_at(syms, n, 0) == NULL);
  /* its bytes are the code that runs */
  const unsigned char *code;
  CHECK_EQ_INT(smp_elf_bytes_at(&e, mark, 8, &code), 0);
  CHECK(memcmp(code, (const void *)(uintptr_t)&test_smp_native_marker, 8) == 0);
  CHECK(smp_elf_bytes_at(&e, hi + 4096, 8, &code) < 0);
  free(syms);
  smp_elf_free(&e);
}

/* ---- jumps and split parts ------------------------------------------------ */

static void put_rel32(unsigned char *code, size_t at, uint64_t va, size_t len, uint64_t target) {
  int32_t rel = (int32_t)(int64_t)(target - (va + at + len));
  memcpy(code + at + len - 4, &rel, 4);
}

static void test_jumps(void) {
  unsigned char code[64];
  memset(code, 0x90, sizeof code); /* nops */
  uint64_t va = 0x1000;
  code[2] = 0xe9; /* jmp 0x5000 */
  put_rel32(code, 2, va, 5, 0x5000);
  code[10] = 0x0f; /* je 0x7000 */
  code[11] = 0x84;
  put_rel32(code, 10, va, 6, 0x7000);
  code[20] = 0xe8; /* call 0x9000: a call, not a jump */
  put_rel32(code, 20, va, 5, 0x9000);
  code[30] = 0xe9; /* jmp 0x1008: inside the code itself */
  put_rel32(code, 30, va, 5, 0x1008);
  code[40] = 0xe9; /* jmp 0x5000 again */
  put_rel32(code, 40, va, 5, 0x5000);
  uint64_t *t = NULL;
  size_t n = 0;
  CHECK_EQ_INT(nat_jump_targets(code, sizeof code, va, &t, &n), 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK_EQ_INT(t[0], 0x5000);
    CHECK_EQ_INT(t[1], 0x7000);
  }
  CHECK(nat_jumps_into(code, sizeof code, va, 0x6ff0, 0x7001));
  CHECK(!nat_jumps_into(code, sizeof code, va, 0x9000, 0x9001)); /* calls do not count */
  /* a jump cut by the end of the code is not read past it */
  CHECK(!nat_jumps_into(code, 13, va, 0x7000, 0x7001));

  /* the split-part rule: the eval symbol at 0x1000..0x1040 jumps to 0x5000 */
  unsigned char part[32];
  memset(part, 0x90, sizeof part);
  part[4] = 0x0f; /* jne back into the eval symbol */
  part[5] = 0x85;
  put_rel32(part, 4, 0x5000, 6, 0x1020);
  CHECK(nat_is_eval_part(0x1000, 0x1040, t, n, 0x5000, 0x5020, part, sizeof part));
  /* a function the eval symbol jumps to that never jumps back: a helper */
  unsigned char helper[32];
  memset(helper, 0x90, sizeof helper);
  helper[0] = 0xc3;
  CHECK(!nat_is_eval_part(0x1000, 0x1040, t, n, 0x5000, 0x5020, helper, sizeof helper));
  /* jumping back is not enough: the eval symbol must jump into it */
  CHECK(!nat_is_eval_part(0x1000, 0x1040, t, n, 0x6000, 0x6020, part, sizeof part));
  /* the eval symbol's own range is not a part of itself */
  CHECK(!nat_is_eval_part(0x1000, 0x1040, t, n, 0x1000, 0x1040, part, sizeof part));
  free(t);
}

/* ---- paths ------------------------------------------------------------------ */

static void test_target_path(void) {
  bf_smp_native *n = calloc(1, sizeof *n);
  snprintf(n->root, sizeof n->root, "/var/lib/root");
  n->root_len = strlen(n->root);
  CHECK(strcmp(nat_target_path(n, "/var/lib/root/usr/lib/libz.so"), "/usr/lib/libz.so") == 0);
  CHECK(strcmp(nat_target_path(n, "/var/lib/rootx/libz.so"), "/var/lib/rootx/libz.so") == 0);
  CHECK(strcmp(nat_target_path(n, "/usr/lib/libz.so"), "/usr/lib/libz.so") == 0);
  n->root_len = 0;
  CHECK(strcmp(nat_target_path(n, "/var/lib/root/x"), "/var/lib/root/x") == 0);
  free(n);
}

/* ---- merge -------------------------------------------------------------------- */

static bf_smp_code codes[16];
static nat_code ccodes[16];
static nat_ip ips[16];

static const bf_smp_code *pycode(int i, const char *name) {
  memset(&codes[i], 0, sizeof codes[i]);
  codes[i].filename = "/w.py";
  codes[i].qualname = name;
  codes[i].firstlineno = 1;
  return &codes[i];
}

static const nat_ip *cip(int i, const char *name, int eval, int interp) {
  memset(&ccodes[i], 0, sizeof ccodes[i]);
  ccodes[i].pub.filename = "/lib.so";
  ccodes[i].pub.qualname = name;
  ips[i] = (nat_ip){(uint64_t)(i + 1), &ccodes[i], eval, interp};
  return &ips[i];
}

/* Merge py (innermost first) with the C frames c (innermost first) and check
 * the merged names (innermost first) against want. */
static void merge_is(bf_smp_native *n, const bf_smp_frame *py, size_t np, const nat_ip **c, size_t nc,
                     const char *const *want, size_t nwant) {
  n->nframes = 0;
  for (size_t i = 0; i < nc; i++) n->cf[i].ip = c[i];
  CHECK_EQ_INT(nat_merge(n, py, np, nc), 0);
  CHECK_EQ_INT(n->nframes, nwant);
  for (size_t i = 0; i < n->nframes && i < nwant; i++)
    if (strcmp(n->frames[i].code->qualname, want[i]) != 0) {
      fprintf(stderr, "frame %zu: %s, want %s\n", i, n->frames[i].code->qualname, want[i]);
      bf_check_failures++;
    }
}

static void test_merge(void) {
  bf_smp_native *n = calloc(1, sizeof *n);
  n->cf = calloc(NAT_MAX_DEPTH, sizeof *n->cf);
  n->cap_cf = NAT_MAX_DEPTH;
  n->unwind_complete = 1;

  /* Python -> C extension -> Python -> zlib (3.12+: ENTRY ends a group) */
  bf_smp_frame py[] = {{pycode(0, "deeper"), 3, 0}, {pycode(1, "inner"), 5, BF_SMP_FRAME_ENTRY},
                       {pycode(2, "outer"), 7, 0}, {pycode(3, "<module>"), 9, BF_SMP_FRAME_ENTRY}};
  const nat_ip *c[] = {cip(0, "deflate", 0, 0),         cip(1, "_PyEval_EvalFrameDefault", 1, 1),
                       cip(2, "bfnat_call", 0, 0),      cip(3, "PyObject_CallObject", 0, 1),
                       cip(4, "0x3fb58", 1, 1),         cip(5, "PyEval_EvalCode", 0, 1),
                       cip(6, "Py_RunMain", 0, 1),      cip(7, "__libc_start_main", 0, 0)};
  const char *want[] = {"deflate", "deeper", "inner", "bfnat_call", "outer", "<module>"};
  merge_is(n, py, 4, c, 8, want, 6);
  CHECK_EQ_INT(n->mismatch + n->realigned + n->truncated, 0);

  /* a callback being entered from C: its eval call has begun, its frame is
   * not the thread's yet; the Python frames go to the outer eval call */
  bf_smp_frame py2[] = {{pycode(4, "dumps"), 3, 0}, {pycode(5, "<module>"), 9, BF_SMP_FRAME_ENTRY}};
  const nat_ip *c2[] = {cip(8, "_PyEval_EvalFrameDefault", 1, 1), cip(9, "PyObject_CallOneArg", 0, 1),
                        cip(10, "encoder_listencode", 0, 0),       cip(11, "0x3fb58", 1, 1),
                        cip(12, "PyEval_EvalCode", 0, 1)};
  const char *want2[] = {"PyObject_CallOneArg", "encoder_listencode", "dumps", "<module>"};
  merge_is(n, py2, 2, c2, 5, want2, 4);
  CHECK_EQ_INT(n->realigned, 1);
  CHECK_EQ_INT(n->mismatch, 0);

  /* the same C stack cut short: nothing to align from the outside */
  n->unwind_complete = 0;
  n->realigned = 0;
  const char *want3[] = {"dumps", "<module>"};
  merge_is(n, py2, 2, c2, 2, want3, 2);
  CHECK_EQ_INT(n->realigned, 0);
  n->unwind_complete = 1;

  /* a whole C stack without any eval frame: C frames cannot be placed */
  const nat_ip *c4[] = {c[0], c[2], c[5]};
  n->nframes = 0;
  for (size_t i = 0; i < 3; i++) n->cf[i].ip = c4[i];
  int64_t mm = n->mismatch;
  CHECK_EQ_INT(nat_merge(n, py, 4, 3), 1);
  CHECK_EQ_INT(n->mismatch, mm + 1);
  CHECK_EQ_INT(n->nframes, 4);

  free(n->frames);
  free(n->cf);
  free(n);
}

int main(void) {
  test_elf_self();
  test_jumps();
  test_target_path();
  test_merge();
  return CHECK_DONE();
}
