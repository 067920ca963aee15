/* interp.c — which interpreter a sampled process runs, read from outside:
 * the executable (/proc/PID/exe), the libpython it mapped, the extension
 * suffix, compiler and build date compiled into that object, the install
 * prefix by CPython's own landmark (PREFIX/lib/pythonX.Y/os.py), the root
 * it runs in (a container's or chroot's), and version and build from the
 * attached handle. Paths are as the target sees them (its sys.executable,
 * sys.prefix). Everything read is untrusted and written out as JSON.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jsonw.h"
#include "procmaps.h"
#include "smp_int.h"
#include "text.h"

typedef struct libpython_find {
  char *buf;
  size_t len;
} libpython_find;

static int libpython_map(void *ud, const bf_procmap *m) {
  libpython_find *lf = ud;
  const char *p = strchr(m->name, '/');
  if (!p) return 0;
  const char *base = strrchr(p, '/') + 1;
  if (strncmp(base, "libpython3.", 11) == 0 && strstr(base, ".so") && strlen(p) < lf->len) {
    memcpy(lf->buf, p, strlen(p) + 1);
    return 1;
  }
  return 0;
}

/* Path of the first libpython3.* object mapped by pid, or "" (OUT: buf). */
static void find_libpython(int pid, char *buf, size_t len) {
  buf[0] = 0;
  libpython_find lf = {buf, len};
  bf_procmaps_foreach(pid, libpython_map, &lf);
}

/* The "." SOABI ".so" string CPython's importer keeps in .rodata
 * (_PyImport_DynLoadFiletab), e.g. ".cpython-311-x86_64-linux-gnu.so". */
static int find_ext_suffix(const smp_elf *e, char *buf, size_t len) {
  static const char pat[] = ".cpython-3";
  const unsigned char *p = e->data, *end = e->data + e->size;
  while (p < end && (p = memmem(p, (size_t)(end - p), pat, sizeof pat - 1)) != NULL) {
    const unsigned char *q = p;
    while (q < end && q - p < 96 && (isalnum(*q) || *q == '.' || *q == '_' || *q == '-')) q++;
    size_t n = (size_t)(q - p);
    if (p > e->data && p[-1] == 0 && q < end && *q == 0 && n > 13 && n < len &&
        memcmp(q - 3, ".so", 3) == 0) {
      memcpy(buf, p, n);
      buf[n] = 0;
      return 0;
    }
    p += sizeof pat - 1;
  }
  return -ENOENT;
}

/* The compiler CPython names in sys.version (Py_GetCompiler: "[GCC 16.2.0]",
 * "[Clang 18.1.3 ...]"), without the brackets. OUT: buf. */
static int find_compiler(const smp_elf *e, char *buf, size_t len) {
  static const char *const pats[] = {"[GCC ", "[Clang "};
  for (size_t i = 0; i < 2; i++) {
    size_t pl = strlen(pats[i]);
    const unsigned char *p = e->data, *end = e->data + e->size;
    while (p < end && (p = memmem(p, (size_t)(end - p), pats[i], pl)) != NULL) {
      const unsigned char *q = p + pl;
      while (q < end && q - p < 96 && *q >= 0x20 && *q < 0x7f && *q != ']') q++;
      size_t n = (size_t)(q - p) + 1; /* with ']' */
      /* 3.8-3.9 write "\n[GCC ...]" (sys.version had a line break) */
      int starts = p > e->data && (p[-1] == 0 || p[-1] == '\n');
      if (q < end && *q == ']' && starts && q + 1 < end && q[1] == 0 && n - 2 < len) {
        memcpy(buf, p + 1, n - 2);
        buf[n - 2] = 0;
        return 0;
      }
      p += pl;
    }
  }
  return -ENOENT;
}

/* __DATE__ ("Oct 26 2026") or __TIME__ ("15:12:11") at p. */
static int is_date(const unsigned char *p) {
  static const char mon[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  int m = 0;
  for (int i = 0; i < 12 && !m; i++) m = memcmp(p, mon + 3 * i, 3) == 0;
  return m && p[3] == ' ' && (p[4] == ' ' || isdigit(p[4])) && isdigit(p[5]) && p[6] == ' ' &&
         isdigit(p[7]) && isdigit(p[8]) && isdigit(p[9]) && isdigit(p[10]);
}
static int is_time(const unsigned char *p) {
  return isdigit(p[0]) && isdigit(p[1]) && p[2] == ':' && isdigit(p[3]) && isdigit(p[4]) &&
         p[5] == ':' && isdigit(p[6]) && isdigit(p[7]);
}

/* The build date and time of sys.version (getbuildinfo.c's __DATE__ and
 * __TIME__, stored within a few bytes of each other), as
 * "Oct 26 2026, 15:12:11". OUT: buf (at least 22 bytes). */
static int find_build_date(const smp_elf *e, char *buf, size_t len) {
  const unsigned char *d = e->data;
  size_t size = e->size;
  if (len < 22 || size < 64) return -ENOENT;
  for (size_t i = 1; i + 12 < size; i++) {
    if (d[i - 1] != 0 || !is_date(d + i) || d[i + 11] != 0) continue;
    size_t lo = i > 40 ? i - 40 : 1, hi = i + 40 < size - 9 ? i + 40 : size - 9;
    for (size_t j = lo; j < hi; j++)
      if (d[j - 1] == 0 && is_time(d + j) && d[j + 8] == 0) {
        snprintf(buf, len, "%.11s, %.8s", (const char *)d + i, (const char *)d + j);
        return 0;
      }
  }
  return -ENOENT;
}

int smp_interp_json(const bf_smp *h, int pid, char **out) {
  char link[64], exe[1024] = "", lib[1024], obj[1200], suffix[128] = "", prefix[1024] = "";
  char root[1024] = "", compiler[128] = "", date[32] = "";
  *out = NULL;
  snprintf(link, sizeof link, "/proc/%d/exe", pid);
  ssize_t n = readlink(link, exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  if (n > 10 && strcmp(exe + n - 10, " (deleted)") == 0) exe[n - 10] = 0;
  /* a target in a chroot or container: its root as the profiler sees it,
   * and its executable as it sees it (sys.executable) */
  snprintf(link, sizeof link, "/proc/%d/root", pid);
  n = readlink(link, root, sizeof root - 1);
  root[n > 0 ? n : 0] = 0;
  size_t rl = strlen(root);
  if (rl <= 1 || root[0] != '/')
    root[0] = 0;
  else if (strncmp(exe, root, rl) == 0 && exe[rl] == '/')
    memmove(exe, exe + rl, strlen(exe + rl) + 1);
  find_libpython(pid, lib, sizeof lib);
  if (lib[0])
    snprintf(obj, sizeof obj, "/proc/%d/root%s", pid, lib);
  else
    snprintf(obj, sizeof obj, "/proc/%d/exe", pid);
  smp_elf e = {0};
  if (smp_elf_load(obj, &e) == 0) {
    if (find_ext_suffix(&e, suffix, sizeof suffix) < 0) suffix[0] = 0;
    if (find_compiler(&e, compiler, sizeof compiler) < 0) compiler[0] = 0;
    if (find_build_date(&e, date, sizeof date) < 0) date[0] = 0;
    smp_elf_free(&e);
  }
  /* CPython's landmark search: PREFIX/bin/python → PREFIX/lib/pythonX.Y/os.py */
  const char *ver = bf_smp_python_version(h);
  int major = 0, minor = 0;
  char *slash = strrchr(exe, '/');
  if (slash && sscanf(ver, "%d.%d", &major, &minor) == 2 && slash - exe >= 4 &&
      strncmp(slash - 4, "/bin", 4) == 0) {
    char land[1400];
    int plen = (int)(slash - 4 - exe);
    struct stat sb;
    snprintf(land, sizeof land, "/proc/%d/root%.*s/lib/python%d.%d/os.py", pid, plen, exe, major, minor);
    if (stat(land, &sb) == 0 && S_ISREG(sb.st_mode)) snprintf(prefix, sizeof prefix, "%.*s", plen ? plen : 1, plen ? exe : "/");
  }
  const char *build = bf_smp_python_build(h);
  char soabi[128] = "";
  if (suffix[0]) snprintf(soabi, sizeof soabi, "%.*s", (int)strlen(suffix) - 4, suffix + 1);
  /* through the one JSON writer (common/jsonw.c): bytes that are not UTF-8
   * become U+FFFD */
  bf_jw w;
  if (bf_jw_mem(&w)) return -ENOMEM;
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "implementation", "cpython");
  bf_jw_kstr(&w, "version", ver[0] ? ver : NULL);
  bf_jw_kstr(&w, "executable", exe[0] ? exe : NULL);
  bf_jw_kstr(&w, "prefix", prefix[0] ? prefix : NULL);
  bf_jw_kstr(&w, "library", lib[0] ? lib : NULL);
  bf_jw_kstr(&w, "soabi", soabi[0] ? soabi : NULL);
  bf_jw_kstr(&w, "ext_suffix", suffix[0] ? suffix : NULL);
  bf_jw_kbool(&w, "debug", build && strstr(build, "debug") != NULL);
  bf_jw_kbool(&w, "free_threaded", build && strstr(build, "free-threaded") != NULL);
  bf_jw_kstr(&w, "compiler", compiler[0] ? compiler : NULL);
  bf_jw_kstr(&w, "build_date", date[0] ? date : NULL);
  bf_jw_kstr(&w, "root", root[0] ? root : NULL);
  bf_jw_kstr(&w, "source", "process");
  bf_jw_end(&w);
  if (!(*out = bf_jw_mem_done(&w))) return -ENOMEM;
  return 0;
}
