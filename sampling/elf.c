/* elf.c — just enough ELF64 reading to find CPython's symbols (_PyRuntime,
 * PyCode_Type, Py_Version) and its version string in a libpython or python
 * executable opened through /proc/PID/root, and, for native stacks, any
 * mapped object's function symbols, segments and .eh_frame_hdr index. The
 * file is untrusted: every offset and size is checked against the file size.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "smp_int.h"

#define SMP_ELF_MAX (512u << 20)

static int check(smp_elf *e) {
  if (e->size < sizeof(Elf64_Ehdr)) return -ENOEXEC;
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  if (memcmp(h->e_ident, ELFMAG, SELFMAG) != 0 || h->e_ident[EI_CLASS] != ELFCLASS64 ||
      h->e_ident[EI_DATA] != ELFDATA2LSB)
    return -ENOEXEC;
  /* lowest PT_LOAD vaddr: the load bias is the mapping start minus this */
  e->load_vaddr = 0;
  if (h->e_phentsize == sizeof(Elf64_Phdr) && h->e_phoff < e->size &&
      (uint64_t)h->e_phnum * sizeof(Elf64_Phdr) <= e->size - h->e_phoff) {
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(e->data + h->e_phoff);
    uint64_t lo = UINT64_MAX;
    for (unsigned i = 0; i < h->e_phnum; i++) {
      Elf64_Phdr p;
      memcpy(&p, &ph[i], sizeof p);
      if (p.p_type == PT_LOAD && p.p_vaddr < lo) lo = p.p_vaddr;
    }
    if (lo != UINT64_MAX) e->load_vaddr = lo & ~(uint64_t)0xfff;
  }
  return 0;
}

int smp_elf_load(const char *path, smp_elf *e) {
  memset(e, 0, sizeof *e);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      (uint64_t)st.st_size > SMP_ELF_MAX) {
    close(fd);
    return -ENOEXEC;
  }
  e->size = (size_t)st.st_size;
  /* mapped, not read: only the pages holding headers and symbols are touched */
  void *m = mmap(NULL, e->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    e->size = 0;
    return -errno;
  }
  e->data = m;
  e->mapped = 1;
  int rc = check(e);
  if (rc < 0) smp_elf_free(e);
  return rc;
}

int smp_elf_from_buffer(const unsigned char *buf, size_t len, smp_elf *e) {
  memset(e, 0, sizeof *e);
  e->data = malloc(len ? len : 1);
  if (!e->data) return -ENOMEM;
  memcpy(e->data, buf, len);
  e->size = len;
  int rc = check(e);
  if (rc < 0) smp_elf_free(e);
  return rc;
}

void smp_elf_free(smp_elf *e) {
  if (!e) return;
  if (e->mapped && e->data)
    munmap(e->data, e->size);
  else
    free(e->data);
  e->mapped = 0;
  e->data = NULL;
  e->size = 0;
}

/* Section header i, bounds-checked. */
static int shdr(const smp_elf *e, unsigned i, Elf64_Shdr *out) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  if (h->e_shentsize != sizeof(Elf64_Shdr) || i >= h->e_shnum) return -EINVAL;
  uint64_t off = h->e_shoff + (uint64_t)i * sizeof(Elf64_Shdr);
  if (h->e_shoff >= e->size || off + sizeof(Elf64_Shdr) > e->size || off < h->e_shoff)
    return -EINVAL;
  memcpy(out, e->data + off, sizeof *out);
  return 0;
}

static int in_file(const smp_elf *e, uint64_t off, uint64_t len) {
  return off <= e->size && len <= e->size - off;
}

static int lookup_in(const smp_elf *e, uint32_t type, const char *name, uint64_t *value,
                     uint64_t *size) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  size_t nlen = strlen(name);
  for (unsigned i = 0; i < h->e_shnum && i < 65536; i++) {
    Elf64_Shdr sh, str;
    if (shdr(e, i, &sh) < 0) return -EINVAL;
    if (sh.sh_type != type || sh.sh_type == SHT_NOBITS) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || !in_file(e, sh.sh_offset, sh.sh_size)) continue;
    if (shdr(e, sh.sh_link, &str) < 0 || !in_file(e, str.sh_offset, str.sh_size)) continue;
    const unsigned char *strs = e->data + str.sh_offset;
    uint64_t n = sh.sh_size / sizeof(Elf64_Sym);
    for (uint64_t k = 0; k < n; k++) {
      Elf64_Sym s;
      memcpy(&s, e->data + sh.sh_offset + k * sizeof s, sizeof s);
      if (s.st_name >= str.sh_size || str.sh_size - s.st_name <= nlen) continue;
      if (memcmp(strs + s.st_name, name, nlen + 1) != 0) continue;
      if (s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
      *value = s.st_value;
      *size = s.st_size;
      return 0;
    }
  }
  return -ENOENT;
}

int smp_elf_symbol(const smp_elf *e, const char *name, uint64_t *value, uint64_t *size) {
  uint64_t v, sz;
  int rc = lookup_in(e, SHT_DYNSYM, name, &v, &sz);
  if (rc == -ENOENT) rc = lookup_in(e, SHT_SYMTAB, name, &v, &sz);
  if (rc < 0) return rc;
  *value = v;
  *size = sz;
  return 0;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

int smp_elf_find_version(const smp_elf *e, const char *prefix, char *buf, size_t buflen) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  Elf64_Shdr names;
  if (shdr(e, h->e_shstrndx, &names) < 0 || !in_file(e, names.sh_offset, names.sh_size))
    return -EINVAL;
  size_t plen = strlen(prefix);
  for (unsigned i = 0; i < h->e_shnum && i < 65536; i++) {
    Elf64_Shdr sh;
    if (shdr(e, i, &sh) < 0) return -EINVAL;
    if (sh.sh_name >= names.sh_size || names.sh_size - sh.sh_name < 8) continue;
    if (memcmp(e->data + names.sh_offset + sh.sh_name, ".rodata", 8) != 0) continue;
    if (sh.sh_type == SHT_NOBITS || !in_file(e, sh.sh_offset, sh.sh_size)) continue;
    const unsigned char *p = e->data + sh.sh_offset;
    size_t n = sh.sh_size;
    for (size_t k = 1; k + plen + 2 < n; k++) {
      /* the literal may be tail-merged into a longer string ("Python-3.8.18") */
      unsigned char before = p[k - 1];
      if ((before != 0 && before != '/' && before != '-' && before != ' ') ||
          memcmp(p + k, prefix, plen) != 0)
        continue;
      size_t j = k + plen;
      if (!is_digit(p[j])) continue;
      while (j < n && j - k < 24 && (is_digit(p[j]) || (p[j] >= 'a' && p[j] <= 'z') || p[j] == '+'))
        j++;
      if (j >= n || p[j] != 0 || j - k + 1 > buflen) continue;
      memcpy(buf, p + k, j - k);
      buf[j - k] = 0;
      return 0;
    }
  }
  return -ENOENT;
}

/* ---- what the native unwinder needs: functions, segments, unwind index ---- */

static int sym_cmp(const void *a, const void *b) {
  const smp_elf_sym *x = a, *y = b;
  if (x->value != y->value) return x->value < y->value ? -1 : 1;
  /* at one address: a sized symbol first, then a global one, then by name */
  if ((x->size != 0) != (y->size != 0)) return x->size ? -1 : 1;
  if (x->global != y->global) return x->global ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Append the defined function symbols of one symbol table. */
static int funcs_in(const smp_elf *e, const Elf64_Shdr *sh, smp_elf_sym **v, size_t *n,
                    size_t *cap) {
  Elf64_Shdr str;
  if (sh->sh_entsize != sizeof(Elf64_Sym) || !in_file(e, sh->sh_offset, sh->sh_size)) return 0;
  if (shdr(e, sh->sh_link, &str) < 0 || str.sh_type == SHT_NOBITS ||
      !in_file(e, str.sh_offset, str.sh_size))
    return 0;
  const char *strs = (const char *)e->data + str.sh_offset;
  uint64_t count = sh->sh_size / sizeof(Elf64_Sym);
  for (uint64_t k = 0; k < count; k++) {
    Elf64_Sym s;
    memcpy(&s, e->data + sh->sh_offset + k * sizeof s, sizeof s);
    int type = ELF64_ST_TYPE(s.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s.st_shndx == SHN_UNDEF || !s.st_value) continue;
    /* the name must end inside the string table */
    if (s.st_name >= str.sh_size || !memchr(strs + s.st_name, 0, str.sh_size - s.st_name) ||
        !strs[s.st_name])
      continue;
    if (*n == *cap) {
      size_t nc = *cap ? *cap * 2 : 1024;
      smp_elf_sym *nv = realloc(*v, nc * sizeof *nv);
      if (!nv) return -ENOMEM;
      *v = nv;
      *cap = nc;
    }
    (*v)[(*n)++] = (smp_elf_sym){s.st_value, s.st_size, strs + s.st_name,
                                 ELF64_ST_BIND(s.st_info) != STB_LOCAL};
  }
  return 0;
}

int smp_elf_functions(const smp_elf *e, smp_elf_sym **syms, size_t *count) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  smp_elf_sym *v = NULL;
  size_t n = 0, cap = 0;
  for (unsigned i = 0; i < h->e_shnum && i < 65536; i++) {
    Elf64_Shdr sh;
    if (shdr(e, i, &sh) < 0) break;
    if (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) continue;
    if (funcs_in(e, &sh, &v, &n, &cap) < 0) {
      free(v);
      return -ENOMEM;
    }
  }
  if (n) qsort(v, n, sizeof *v, sym_cmp);
  /* one symbol per address (the first after sorting) */
  size_t w = 0;
  for (size_t i = 0; i < n; i++)
    if (!w || v[w - 1].value != v[i].value) v[w++] = v[i];
  *syms = v;
  *count = w;
  return 0;
}

const smp_elf_sym *smp_elf_function_at(const smp_elf_sym *syms, size_t n, uint64_t vaddr) {
  size_t lo = 0, hi = n;
  while (lo < hi) { /* first symbol above vaddr */
    size_t mid = lo + (hi - lo) / 2;
    if (syms[mid].value <= vaddr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo ? &syms[lo - 1] : NULL;
}

/* Program header i, bounds-checked. */
static int phdr(const smp_elf *e, unsigned i, Elf64_Phdr *out) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  if (h->e_phentsize != sizeof(Elf64_Phdr) || i >= h->e_phnum) return -EINVAL;
  uint64_t off = h->e_phoff + (uint64_t)i * sizeof(Elf64_Phdr);
  if (off < h->e_phoff || !in_file(e, off, sizeof(Elf64_Phdr))) return -EINVAL;
  memcpy(out, e->data + off, sizeof *out);
  return 0;
}

int smp_elf_vaddr_of_offset(const smp_elf *e, uint64_t off, uint64_t *vaddr) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  for (unsigned i = 0; i < h->e_phnum; i++) {
    Elf64_Phdr p;
    if (phdr(e, i, &p) < 0) return -EINVAL;
    if (p.p_type != PT_LOAD) continue;
    /* the kernel maps from the page holding p_offset */
    uint64_t plo = p.p_offset & ~(uint64_t)0xfff;
    if (p.p_offset > UINT64_MAX - p.p_filesz || off < plo || off >= p.p_offset + p.p_filesz) continue;
    if (p.p_vaddr < p.p_offset - plo) return -EINVAL;
    *vaddr = p.p_vaddr - (p.p_offset - plo) + (off - plo);
    return 0;
  }
  return -ENOENT;
}

int smp_elf_bytes_at(const smp_elf *e, uint64_t vaddr, uint64_t len, const unsigned char **p) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  for (unsigned i = 0; i < h->e_phnum; i++) {
    Elf64_Phdr ph;
    if (phdr(e, i, &ph) < 0) return -EINVAL;
    if (ph.p_type != PT_LOAD || vaddr < ph.p_vaddr || vaddr - ph.p_vaddr >= ph.p_filesz) continue;
    uint64_t rel = vaddr - ph.p_vaddr;
    if (len > ph.p_filesz - rel || ph.p_offset > UINT64_MAX - rel ||
        !in_file(e, ph.p_offset + rel, len))
      return -ERANGE;
    *p = e->data + ph.p_offset + rel;
    return 0;
  }
  return -ENOENT;
}

/* Size of a fixed-size DWARF pointer encoding's value, or 0. */
static unsigned pe_size(unsigned enc) {
  switch (enc & 0x0f) {
    case 0x00: return 8; /* absptr */
    case 0x02: case 0x0a: return 2;
    case 0x03: case 0x0b: return 4;
    case 0x04: case 0x0c: return 8;
    default: return 0;
  }
}

int smp_elf_eh_frame_index(const smp_elf *e, uint64_t *hdr_vaddr, uint64_t *table_vaddr,
                           uint64_t *nfde) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  for (unsigned i = 0; i < h->e_phnum; i++) {
    Elf64_Phdr ph;
    if (phdr(e, i, &ph) < 0) return -EINVAL;
    if (ph.p_type != PT_GNU_EH_FRAME) continue;
    const unsigned char *p;
    if (ph.p_filesz < 4 || smp_elf_bytes_at(e, ph.p_vaddr, ph.p_filesz, &p) < 0) return -EINVAL;
    /* version, eh_frame_ptr encoding, fde_count encoding, table encoding */
    unsigned fp = pe_size(p[1]), fc = pe_size(p[2]);
    if (p[0] != 1 || p[1] == 0xff || !fp || !fc || (p[2] & 0x70) != 0) return -ENOTSUP;
    /* the binary-search table libunwind reads: pairs of 4-byte offsets
     * relative to the header (DW_EH_PE_datarel | DW_EH_PE_sdata4) */
    if (p[3] != 0x3b) return -ENOTSUP;
    uint64_t at = 4 + fp, count = 0;
    if (at + fc > ph.p_filesz) return -EINVAL;
    memcpy(&count, p + at, fc); /* little-endian, unsigned counts only */
    if ((p[2] & 0x08) && fc < 8 && (count >> (fc * 8 - 1))) return -EINVAL;
    at += fc;
    if (count > (ph.p_filesz - at) / 8) return -EINVAL;
    *hdr_vaddr = ph.p_vaddr;
    *table_vaddr = ph.p_vaddr + at;
    *nfde = count;
    return 0;
  }
  return -ENOENT;
}

int smp_elf_load_span(const smp_elf *e, uint64_t *lo, uint64_t *hi) {
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
  uint64_t l = UINT64_MAX, u = 0;
  for (unsigned i = 0; i < h->e_phnum; i++) {
    Elf64_Phdr p;
    if (phdr(e, i, &p) < 0) return -EINVAL;
    if (p.p_type != PT_LOAD) continue;
    if (p.p_vaddr > UINT64_MAX - p.p_memsz) return -EINVAL;
    if (p.p_vaddr < l) l = p.p_vaddr;
    if (p.p_vaddr + p.p_memsz > u) u = p.p_vaddr + p.p_memsz;
  }
  if (l >= u) return -ENOENT;
  *lo = l;
  *hi = u;
  return 0;
}
