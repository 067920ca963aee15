/* fuzz_sampler.c — random bytes into every parser of untrusted target data:
 * the three line-table decoders, the ELF symbol/version reader, the
 * _Py_DebugOffsets validator, the frame walker and the thread-name readers
 * (dicts, ints, modules, instance attributes of 3.8-3.13; pynames.c) with
 * pure-Python Tasks' attributes (tasks_py.c), and
 * Python 3.14's asyncio debug offsets and Task lists (tasks_314.c), the
 * last three over a fake memory image in which any address at or above
 * FAKE_BASE wraps into the input, so random pointers lead somewhere and
 * walks go deep. Type checks are off over fake memory (no type addresses).
 *
 * Built two ways: with -DBF_LIBFUZZER under clang -fsanitize=fuzzer it is a
 * libFuzzer target; otherwise main() runs a fixed number of seeded random
 * inputs (the meson unit test `smp_fuzz`, fast enough for CI; run it under
 * -Db_sanitize=address,undefined for the real check).
 */
#include <elf.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "smp_int.h" /* sampling/internal/: on this test's include path only */
#include "tasks_int.h"

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

/* ---- a tiny fake CPython heap for the thread-name readers ---------------
 * runtime -> interp -> modules {"sys", "threading"} -> threading.__dict__
 * {"_limbo", "_active"} -> _active {ident: Thread} -> each Thread's _name,
 * laid out for one version's smp_names_layout. variant bit 0 picks the
 * instance dict over split/inline values; bit 1 a split modules dict
 * (3.8-3.10). Random inputs then mutate it, so every reader sees almost
 * valid structures, not only noise. */

#define HEAP_SIZE 65536
/* type addresses written into the heap's dicts, ints and modules (the type
 * objects themselves are never read) */
#define HEAP_DICT_T (FAKE_BASE + 0x10)
#define HEAP_LONG_T (FAKE_BASE + 0x20)
#define HEAP_MODULE_T (FAKE_BASE + 0x30)

typedef struct heap {
  uint8_t b[HEAP_SIZE];
  size_t top;
  const smp_layout *l;
  uint64_t thread_type;
} heap;

static uint64_t halloc(heap *hp, size_t n) {
  size_t off = (hp->top + 15) & ~(size_t)15;
  if (off + n > HEAP_SIZE) abort();
  hp->top = off + n;
  return FAKE_BASE + off;
}
static void hput(heap *hp, uint64_t addr, uint64_t v, size_t w) {
  memcpy(hp->b + (addr - FAKE_BASE), &v, w);
}

/* A compact str: kind 1 (ASCII or Latin-1) or 2 (UCS-2), code points cps. */
static uint64_t hstr(heap *hp, const uint32_t *cps, size_t n) {
  const smp_layout *l = hp->l;
  int kind = 1, ascii = 1;
  for (size_t i = 0; i < n; i++) {
    if (cps[i] > 0x7f) ascii = 0;
    if (cps[i] > 0xff) kind = 2;
  }
  uint64_t hdr = ascii ? l->uni_ascii_size : l->uni_compact_size;
  uint64_t a = halloc(hp, (size_t)hdr + (n + 1) * (size_t)kind);
  hput(hp, a + l->uni_length, n, 8);
  hput(hp, a + l->uni_state, (uint64_t)(kind << 2 | 1 << 5 | ascii << 6), 4);
  for (size_t i = 0; i < n; i++) hput(hp, a + hdr + i * (size_t)kind, cps[i], (size_t)kind);
  return a;
}
static uint64_t hstr_c(heap *hp, const char *s) {
  uint32_t cps[64];
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++) cps[i] = (unsigned char)s[i];
  return hstr(hp, cps, n);
}

static uint64_t hlong(heap *hp, uint64_t v) {
  const struct smp_names_layout *n = &hp->l->nm;
  uint64_t a = halloc(hp, (size_t)n->long_digit + 12);
  hput(hp, a + hp->l->ob_type, HEAP_LONG_T, 8);
  size_t nd = 0;
  for (uint64_t x = v; x; x >>= 30) hput(hp, a + n->long_digit + 4 * nd++, x & 0x3fffffff, 4);
  hput(hp, a + n->long_size, n->long_tagged ? (nd ? nd << 3 : 1) : nd, 8);
  return a;
}

/* A keys object with n entries (kind 0 general, 1 unicode, 2 split: values
 * not in the entries). */
static uint64_t hkeys(heap *hp, const uint64_t *keys, const uint64_t *vals, size_t n, int kind) {
  const struct smp_names_layout *nm = &hp->l->nm;
  size_t esize = (size_t)(kind && nm->dk_log2 ? nm->dk_uentry_size : nm->dk_entry_size);
  uint64_t ek = kind && nm->dk_log2 ? nm->dk_uentry_key : nm->dk_entry_key;
  uint64_t ev = kind && nm->dk_log2 ? nm->dk_uentry_value : nm->dk_entry_value;
  uint64_t a = halloc(hp, (size_t)nm->dk_indices + 16 + n * esize);
  if (nm->dk_log2) {
    hput(hp, a + nm->dk_log2_size, 4, 1);
    hput(hp, a + nm->dk_log2_index_bytes, 4, 1);
    hput(hp, a + nm->dk_kind, (uint64_t)kind, 1);
  } else {
    hput(hp, a + nm->dk_size, 16, 8);
  }
  hput(hp, a + nm->dk_nentries, n, 8);
  for (size_t i = 0; i < n; i++) {
    uint64_t e = a + nm->dk_indices + 16 + i * esize;
    hput(hp, e + ek, keys[i], 8);
    if (kind != 2) hput(hp, e + ev, vals[i], 8);
  }
  return a;
}

/* A split values array (3.13: with its header) for n values. */
static uint64_t hvalues(heap *hp, const uint64_t *vals, size_t n) {
  const struct smp_names_layout *nm = &hp->l->nm;
  uint64_t a = halloc(hp, (size_t)nm->dv_values + 8 * n);
  if (nm->dv_valid) {
    hput(hp, a + nm->dv_capacity, n, 1);
    hput(hp, a + nm->dv_valid, 1, 1);
  }
  for (size_t i = 0; i < n; i++) hput(hp, a + nm->dv_values + 8 * i, vals[i], 8);
  return a;
}

static uint64_t hdict(heap *hp, const uint64_t *keys, const uint64_t *vals, size_t n, int kind,
                      int split) {
  const struct smp_names_layout *nm = &hp->l->nm;
  uint64_t d = halloc(hp, (size_t)nm->dict_size);
  hput(hp, d + hp->l->ob_type, HEAP_DICT_T, 8);
  if (split) {
    hput(hp, d + nm->dict_keys, hkeys(hp, keys, vals, n, nm->dk_log2 ? 2 : 0), 8);
    hput(hp, d + nm->dict_values, hvalues(hp, vals, n), 8);
  } else {
    hput(hp, d + nm->dict_keys, hkeys(hp, keys, vals, n, kind), 8);
  }
  return d;
}

/* A Thread instance whose _name is name (a str address). */
static uint64_t hthread(heap *hp, uint64_t name, int use_dict) {
  const struct smp_names_layout *nm = &hp->l->nm;
  uint64_t keys[3] = {hstr_c(hp, "_target"), hstr_c(hp, "_name"), hstr_c(hp, "_daemonic")};
  uint64_t vals[3] = {hstr_c(hp, "t"), name, hlong(hp, 0)};
  uint64_t base = halloc(hp, 32 + 64 + 8 * 3), obj = base + 32;
  hput(hp, obj + hp->l->ob_type, hp->thread_type, 8);
  uint64_t dict = hdict(hp, keys, vals, 3, 1, 0);
  uint64_t cached = hkeys(hp, keys, vals, 3, nm->dk_log2 ? 2 : 0);
  hput(hp, hp->thread_type + nm->ht_cached_keys, cached, 8);
  switch (nm->attr_mode) {
    case SMP_ATTR_DICTOFFSET:
      hput(hp, obj + 16, use_dict ? dict : hdict(hp, keys, vals, 3, 1, 1), 8);
      break;
    case SMP_ATTR_VALUES_PTR:
      if (use_dict) hput(hp, obj + (uint64_t)nm->obj_managed_dict, dict, 8);
      else hput(hp, obj + (uint64_t)nm->obj_values_ptr, hvalues(hp, vals, 3), 8);
      break;
    case SMP_ATTR_DORV:
      hput(hp, obj + (uint64_t)nm->obj_managed_dict, use_dict ? dict : hvalues(hp, vals, 3) - 1, 8);
      break;
    case SMP_ATTR_INLINE: {
      uint64_t iv = obj + nm->obj_inline_values;
      hput(hp, iv + nm->dv_capacity, 3, 1);
      hput(hp, iv + nm->dv_valid, !use_dict, 1);
      for (int i = 0; i < 3; i++) hput(hp, iv + nm->dv_values + 8 * (uint64_t)i, vals[i], 8);
      if (use_dict) hput(hp, obj + (uint64_t)nm->obj_managed_dict, dict, 8);
      break;
    }
  }
  return obj;
}

#define HEAP_THREADS 4
static const uint64_t heap_idents[HEAP_THREADS] = {0x7f0011223b80ull, 0x7f00112236c0ull, 42,
                                                    0xfedcba9876543210ull};

/* Build the heap for layout l. OUT: *runtime. Expected names: heap_names. */
static void heap_build(heap *hp, const smp_layout *l, int variant, uint64_t *runtime) {
  const struct smp_names_layout *nm = &l->nm;
  memset(hp, 0, sizeof *hp);
  hp->l = l;
  hp->top = 16;
  *runtime = halloc(hp, (size_t)l->rt_interp_head + 8);
  uint64_t interp = halloc(hp, (size_t)nm->is_modules + 8);
  hput(hp, *runtime + l->rt_interp_head, interp, 8);
  hp->thread_type = halloc(hp, (size_t)nm->ht_size);
  uint64_t flags = nm->tpf_heaptype | nm->tpf_managed_dict | nm->tpf_inline_values;
  hput(hp, hp->thread_type + nm->tp_flags, flags, 8);
  hput(hp, hp->thread_type + nm->tp_dictoffset, nm->attr_mode == SMP_ATTR_DICTOFFSET ? 16 : 0, 8);
  hput(hp, hp->thread_type + nm->tp_basicsize, 16, 8);
  uint32_t ss[] = {'i', 'o', '-', 0xdf}, om[] = {'w', 0x3a9};
  uint64_t names[HEAP_THREADS] = {hstr_c(hp, "MainThread"), hstr_c(hp, "worker-a"),
                                  hstr(hp, ss, 4), hstr(hp, om, 2)};
  uint64_t ak[HEAP_THREADS], av[HEAP_THREADS];
  for (int i = 0; i < HEAP_THREADS; i++) {
    ak[i] = hlong(hp, heap_idents[i]);
    av[i] = hthread(hp, names[i], (variant & 1) ^ (i & 1));
  }
  uint64_t active = hdict(hp, ak, av, HEAP_THREADS, 0, 0);
  uint64_t mk[2] = {hstr_c(hp, "_limbo"), hstr_c(hp, "_active")};
  uint64_t mv[2] = {hdict(hp, NULL, NULL, 0, 0, 0), active};
  uint64_t module = halloc(hp, (size_t)nm->md_dict + 8);
  hput(hp, module + l->ob_type, HEAP_MODULE_T, 8);
  hput(hp, module + nm->md_dict, hdict(hp, mk, mv, 2, 1, 0), 8);
  uint64_t sk[2] = {hstr_c(hp, "sys"), hstr_c(hp, "threading")};
  uint64_t sv[2] = {halloc(hp, 64), module};
  hput(hp, interp + nm->is_modules, hdict(hp, sk, sv, 2, 1, (variant & 2) && !nm->dk_log2), 8);
}

static const char *const heap_names[HEAP_THREADS] = {"MainThread", "worker-a", "io-\xc3\x9f",
                                                     "w\xce\xa9"};

/* Type checks on for some variants (as on a real target), off for others. */
static void heap_types(bf_smp *h, int variant) {
  if (!(variant & 1)) return;
  h->dict_type_addr = HEAP_DICT_T;
  h->long_type_addr = HEAP_LONG_T;
  h->module_type_addr = HEAP_MODULE_T;
}

/* The readers on the unmutated heap of every version and variant must find
 * exactly the names put there. */
static int heap_selftest(void) {
  static heap hp;
  for (int minor = 8; minor <= 13; minor++)
    for (int variant = 0; variant < 4; variant++) {
      smp_layout l;
      uint64_t rt;
      if (smp_layout_builtin(minor > 12 ? 12 : minor, &l) || smp_layout_names(minor, &l.nm)) return 1;
      heap_build(&hp, &l, variant, &rt);
      image im = {hp.b, sizeof hp.b};
      bf_smp *h = bf_smp_new();
      if (!h) return 1;
      smp_set_reader(h, fake_readv, &im);
      smp_set_layout(h, &l, rt);
      heap_types(h, variant);
      smp_pynames_refresh(h, 0);
      int ok = h->npn == HEAP_THREADS;
      for (size_t i = 0; ok && i < h->npn; i++)
        ok = h->pn[i].ident == heap_idents[i] && strcmp(h->pn[i].name, heap_names[i]) == 0;
      if (!ok) {
        fprintf(stderr, "fuzz_sampler: 3.%d variant %d: %zu names read:", minor, variant, h->npn);
        for (size_t i = 0; i < h->npn; i++)
          fprintf(stderr, " %llx=%s", (unsigned long long)h->pn[i].ident, h->pn[i].name);
        fprintf(stderr, "\n");
      }
      bf_smp_free(h);
      if (!ok) return 1;
    }
  return 0;
}

/* One input: build a heap for the version and variant it picks, flip the
 * bytes it names, read names. */
static void fuzz_names(const uint8_t *data, size_t size) {
  static heap hp;
  if (size < 2) return;
  int minor = 8 + data[0] % 6, variant = data[1] & 3;
  smp_layout l;
  uint64_t rt;
  if (smp_layout_builtin(minor > 12 ? 12 : minor, &l) || smp_layout_names(minor, &l.nm)) return;
  heap_build(&hp, &l, variant, &rt);
  for (size_t i = 2; i + 2 < size && i < 2 + 3 * 64; i += 3) /* (offset, value) triples */
    hp.b[((size_t)data[i] << 8 | data[i + 1]) % hp.top] = data[i + 2];
  image im = {hp.b, sizeof hp.b};
  bf_smp *h = bf_smp_new();
  if (!h) return;
  smp_set_reader(h, fake_readv, &im);
  smp_set_layout(h, &l, rt);
  heap_types(h, data[1] >> 2);
  smp_pynames_refresh(h, 0);
  if (h->npn > SMP_PYNAME_MAX) abort();
  for (size_t i = 0; i < h->npn; i++)
    if (!h->pn[i].name || strlen(h->pn[i].name) > SMP_PYNAME_LEN) abort();
  bf_smp_free(h);
}

static void fuzz_one(const uint8_t *data, size_t size) {
  if (size < 2) return;
  uint8_t sel = data[0];
  data++;
  size--;
  switch (sel % 5) {
    case 0: { /* line tables */
      smp_line_range *r = NULL;
      size_t n = 0;
      if (smp_linetable_decode(1 + (sel >> 2) % 3, data, size, (int)(sel * 7) - 100, &r, &n) == 0) {
        for (uint32_t a = 0; a < 64; a++) (void)smp_linetable_lookup(r, n, a * 3);
        free(r);
      }
      break;
    }
    case 1: { /* ELF; half the time the input behind a valid header */
      smp_elf e;
      unsigned char *img = NULL;
      const unsigned char *in = data;
      size_t len = size;
      if ((sel & 4) && size > 8 && (img = calloc(1, size + 64))) {
        Elf64_Ehdr h;
        memset(&h, 0, sizeof h);
        memcpy(h.e_ident, ELFMAG, SELFMAG);
        h.e_ident[EI_CLASS] = ELFCLASS64;
        h.e_ident[EI_DATA] = ELFDATA2LSB;
        h.e_phoff = 64;
        h.e_phentsize = sizeof(Elf64_Phdr);
        h.e_phnum = data[0] % 8;
        h.e_shoff = 64 + (uint64_t)(data[1] % 4) * sizeof(Elf64_Phdr);
        h.e_shentsize = sizeof(Elf64_Shdr);
        h.e_shnum = data[2] % 8;
        h.e_shstrndx = data[3] % 8;
        memcpy(img, &h, sizeof h);
        memcpy(img + 64, data, size);
        in = img;
        len = size + 64;
      }
      if (smp_elf_from_buffer(in, len, &e) == 0) {
        uint64_t v, s, a, b, c;
        char buf[32];
        (void)smp_elf_symbol(&e, "_PyRuntime", &v, &s);
        (void)smp_elf_find_version(&e, "3.10.", buf, sizeof buf);
        /* what the native unwinder reads (sampling/native/native_unwind.c) */
        smp_elf_sym *syms = NULL;
        size_t n = 0;
        if (smp_elf_functions(&e, &syms, &n) == 0) {
          for (size_t i = 0; i < n; i++)
            if (!syms[i].name || (i && syms[i - 1].value >= syms[i].value)) abort();
          const smp_elf_sym *f = smp_elf_function_at(syms, n, n ? syms[n / 2].value + 1 : 0);
          if (n && (!f || f->value > syms[n / 2].value + 1)) abort();
          free(syms);
        }
        const unsigned char *p;
        if (smp_elf_vaddr_of_offset(&e, sel * 64u, &v) == 0 && smp_elf_bytes_at(&e, v, 16, &p) == 0 &&
            (p < e.data || p + 16 > e.data + e.size))
          abort();
        if (smp_elf_eh_frame_index(&e, &a, &b, &c) == 0 && (b < a || c > e.size)) abort();
        (void)smp_elf_load_span(&e, &a, &b);
        smp_elf_free(&e);
      }
      free(img);
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
      /* 3.14 asyncio offsets (tasks_314.c): the input's tail as _AsyncioDebug,
       * then the Task list walker over the input as memory */
      tk314 o;
      if (size > TK314_ASYNCIO_LEN) (void)tk314_parse(data + size - TK314_ASYNCIO_LEN, TK314_ASYNCIO_LEN, blob,
                                                      sizeof blob, &o, &msg);
      static const tk314 t314 = {168, 104, 120, 128, 136, 152, 1024, 1016, 72, 67, 64, 0, 16, 24, 14, -1, -1, 0, 0};
      bf_smp *h = bf_smp_new();
      image im = {data, size};
      if (h && smp_layout_builtin(12, &l) == 0) {
        uint64_t addrs[64];
        size_t n = 0;
        smp_set_reader(h, fake_readv, &im);
        smp_set_layout(h, &l, FAKE_BASE);
        (void)tk314_tasks(h, &t314, FAKE_BASE + (sel & 0xff) * 8, addrs, 64, &n);
        if (n > 64) abort();
      }
      bf_smp_free(h);
      break;
    }
    case 4: { /* thread names (pynames.c): a fake heap, mutated, then noise */
      fuzz_names(data, size);
      bf_smp *h = bf_smp_new();
      if (!h) return;
      image im = {data, size};
      smp_layout l;
      int minor = 8 + (sel >> 3) % 5, names_minor = 8 + (sel >> 3) % 6;
      if (smp_layout_builtin(minor, &l) == 0 && smp_layout_names(names_minor, &l.nm) == 0) {
        smp_set_reader(h, fake_readv, &im);
        smp_set_layout(h, &l, FAKE_BASE + (sel & 7) * 8);
        smp_pynames_refresh(h, 0);
        for (size_t i = 0; i < h->npn; i++)
          if (!h->pn[i].name || strlen(h->pn[i].name) > SMP_PYNAME_LEN) abort();
        for (int i = 0; i < 2; i++) (void)smp_walk(h, 0); /* names onto threads */
        /* pure-Python Tasks' attributes (tasks_py.c) over the same heap */
        bf_smp_tasks *tk = bf_smp_tasks_new(h);
        tk_py *py = tk_py_new();
        for (uint64_t off = 0; tk && py && off < size && off < 64 * 16; off += 16) {
          tk_py_task pt;
          if (tk_py_read(tk, py, FAKE_BASE + off, &pt) == 1 && !pt.coro) abort();
        }
        /* and all at once (the batched reader, layouts learned per class) */
        uint64_t pa[64];
        tk_py_task pts[64];
        int prc[64];
        size_t np = 0;
        for (uint64_t off = 0; off < size && np < 64; off += 16) pa[np++] = FAKE_BASE + off;
        for (int round = 0; tk && py && np && round < 2; round++)
          if (tk_py_read_many(tk, py, pa, np, pts, prc) >= 0)
            for (size_t i = 0; i < np; i++)
              if (prc[i] == 1 && (!pts[i].coro || !pts[i].name_obj)) abort();
        tk_py_free(py);
        bf_smp_tasks_free(tk);
      }
      bf_smp_free(h);
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
        h->none_addr = FAKE_BASE + 16; /* --mode exception's chain walk runs too */
        for (int i = 0; i < 3; i++)
          (void)smp_walk(h, i == 2 ? BF_SMP_WANT_GIL_ONLY : i == 1 ? BF_SMP_WANT_EXC | BF_SMP_WANT_OPCODE : 0);
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
  if (heap_selftest()) return 1;
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
