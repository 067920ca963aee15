/* elf.c — just enough ELF64 reading to find CPython's symbols (_PyRuntime,
 * PyCode_Type, Py_Version) and its version string in a libpython or python
 * executable opened through /proc/PID/root. The file is untrusted: every
 * offset and size is checked against the file size.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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
  e->data = malloc(e->size);
  if (!e->data) {
    close(fd);
    return -ENOMEM;
  }
  size_t got = 0;
  while (got < e->size) {
    ssize_t r = pread(fd, e->data + got, e->size - got, (off_t)got);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      break;
    }
    got += (size_t)r;
  }
  close(fd);
  if (got != e->size) {
    smp_elf_free(e);
    return -EIO;
  }
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
  free(e->data);
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
