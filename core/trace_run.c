/* trace_run.c — run a Python program under the tracer (see trace_run.h). */
#include "trace_run.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "jsonw.h"
#include "session_meta.h"

/* The runner bootstrap: import bifocal_trace from the directory given as the
 * first argument, take that directory off sys.path again, run the program. */
static const char trc_boot[] =
    "import sys;d=sys.argv.pop(1);sys.path.insert(0,d);import bifocal_trace as b;"
    "sys.path.remove(d);sys.exit(b._main(sys.argv[1:]))";

/* The same for an interpreter not known before it runs (a launcher script
 * such as a pyenv shim or a container's wrapper, a launcher command such as
 * `chroot ROOT`): the second argument lists the tracing directories, one
 * "FD<TAB>PATH" a line (FD: an inherited O_PATH descriptor of PATH, -1 if
 * none), the third is a file descriptor the bootstrap answers on before the
 * program runs: "ok" (bifocal_trace._main says it once the database is
 * reachable), or why it cannot trace ("impl NAME", "old X.Y.Z", "noext X.Y.Z
 * SUFFIX"; "nodb", "noload": it said why on stderr). Where PATH is that directory
 * here, it is imported from PATH; where the target's root differs (PATH is
 * missing or another directory), the extension is dlopen'ed as
 * /proc/self/fd/FD/NAME, or, with no /proc in the target (a plain chroot), from
 * a copy in the target's temporary directory, unlinked once loaded (a relative
 * dlopen from a working directory outside the root hangs in glibc's getcwd), and
 * bifocal_trace.py is read through FD. Python 2 must parse it, to say "old". */
static const char trc_boot_check[] =
    "import sys,os\n"
    "d=[l.split('\\t',1) for l in sys.argv.pop(1).split('\\n')];f=int(sys.argv.pop(1))\n"
    "def s(m,t=None):\n"
    " try:os.write(f,m if isinstance(m,bytes) else m.encode('utf-8','replace'));os.close(f)\n"
    " except OSError:\n"
    "  if t:sys.stderr.write('bifocal: %s\\n'%t)\n"
    "v=sys.version_info\n"
    "i=getattr(getattr(sys,'implementation',None),'name','?')\n"
    "if v<(3,8):s('old %d.%d.%d'%(v[0],v[1],v[2]),'Python %d.%d is too old to trace: bifocal supports "
    "CPython 3.8 and newer'%(v[0],v[1]));sys.exit(2)\n"
    "if i!='cpython':s('impl '+i,'%s is not a CPython interpreter bifocal can trace'%i);sys.exit(2)\n"
    "import _imp\n"
    "x=([e for e in _imp.extension_suffixes() if e.count('.')>=2]+[''])[0]\n"
    "n='_bifocal_trace'+x\n"
    "def w(k,p):\n"
    " try:os.stat(n,dir_fd=k);a=os.fstat(k)\n"
    " except (OSError,ValueError,OverflowError):return os.path.isfile(os.path.join(p,n)) and -1\n"
    " try:\n"
    "  b=os.stat(p)\n"
    "  if (a.st_dev,a.st_ino)==(b.st_dev,b.st_ino):return -1\n"
    " except OSError:pass\n"
    " return k\n"
    "h=None\n"
    "for k,p in d:\n"
    " k=w(int(k),p)\n"
    " if k is not None and k is not False:h=(k,p);break\n"
    "if not h:s('noext %d.%d.%d %s'%(v[0],v[1],v[2],x),'no tracing extension %s for Python %d.%d.%d is "
    "reachable from this interpreter: not in %s as seen here, and the handles bifocal passed for "
    "those directories were not inherited (a launcher closed them); build it for this Python, or "
    "launch it without closing inherited file descriptors'%(n,v[0],v[1],v[2],', '.join(p for k,p in d)));sys.exit(2)\n"
    "k,p=h\n"
    "try:\n"
    " if k<0:\n"
    "  sys.path.insert(0,p);import bifocal_trace as b;sys.path.remove(p)\n"
    " else:\n"
    "  import _frozen_importlib as B,_frozen_importlib_external as E\n"
    "  o='/proc/self/fd/%d/%s'%(k,n);u=None\n"
    "  try:g=os.stat(o).st_ino==os.stat(n,dir_fd=k).st_ino\n"
    "  except OSError:g=False\n"
    "  if not g:\n"
    "   r=os.open(n,os.O_RDONLY|os.O_CLOEXEC,dir_fd=k)\n"
    "   for t in (os.environ.get('TMPDIR'),'/tmp','/var/tmp','/dev/shm'):\n"
    "    if not t:continue\n"
    "    u=os.path.join(t,'.bifocal-%d%s'%(os.getpid(),x))\n"
    "    try:w=os.open(u,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_CLOEXEC,448);break\n"
    "    except OSError:u=None\n"
    "   if u is None:os.close(r);raise ImportError('no /proc here and no writable temporary directory to load it from')\n"
    "   try:\n"
    "    while 1:\n"
    "     c=os.read(r,1<<20)\n"
    "     if not c:break\n"
    "     while c:c=c[os.write(w,c):]\n"
    "   finally:\n"
    "    os.close(w);os.close(r)\n"
    "   o=u\n"
    "  try:\n"
    "   q=B.ModuleSpec('_bifocal_trace',E.ExtensionFileLoader('_bifocal_trace',o),origin=o)\n"
    "   m=B.module_from_spec(q);sys.modules['_bifocal_trace']=m;q.loader.exec_module(m)\n"
    "  finally:\n"
    "   if u:os.unlink(u)\n"
    "  r=os.open('bifocal_trace.py',os.O_RDONLY|os.O_CLOEXEC,dir_fd=k);t=[]\n"
    "  while 1:\n"
    "   c=os.read(r,1<<20)\n"
    "   if not c:break\n"
    "   t.append(c)\n"
    "  os.close(r)\n"
    "  m.__file__=os.path.join(p,n)\n"
    "  b=type(sys)('bifocal_trace');b.__file__=os.path.join(p,'bifocal_trace.py')\n"
    "  sys.modules['bifocal_trace']=b;exec(compile(b''.join(t),b.__file__,'exec'),b.__dict__)\n"
    "except ImportError as e:\n"
    " sys.stderr.write('bifocal: cannot load the tracing extension %s in this interpreter: %s (a "
    "library it links, libsqlite3.so.0, may be missing from the target\\'s root: install it "
    "there)\\n'%(os.path.join(p,n),str(e).replace('\\n',' ')));s('noload');sys.exit(2)\n"
    "for k,p in d:\n"
    " try:os.close(int(k))\n"
    " except (OSError,ValueError,OverflowError):pass\n"
    "sys.exit(b._main(sys.argv[1:],answer=s))";

/* A session the bootstrap refused to run (bf_trace_outcome drops it). */
static int64_t trc_refused_session;

static const char trc_probe[] =
    "import sys,sysconfig,os;print(sys.implementation.name);"
    "print('%d.%d.%d'%sys.version_info[:3]);print(sysconfig.get_config_var('EXT_SUFFIX') or '');"
    "print(os.path.realpath(sys.executable) if sys.executable else '')";

static volatile sig_atomic_t trc_child_pid, trc_forwarded, trc_pending;

/* SIGINT/SIGTERM/SIGHUP/SIGQUIT while the program runs: bifocal waits for it
 * and passes the first such signal on, so the runner writes what it traced.
 * SIGINT stays SIGINT (KeyboardInterrupt); the others become SIGTERM, the
 * one the runner turns into an interrupted, written trace (Python would die
 * of SIGHUP or SIGQUIT without writing). A terminal's own SIGINT/SIGQUIT
 * already reached the program's process group: not sent twice. Repeated
 * signals are absorbed: a second SIGTERM would cut the runner's write. */
static void trc_forward(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  int from_tty = (sig == SIGINT || sig == SIGQUIT) && si && si->si_code == SI_KERNEL;
  if (from_tty || trc_forwarded) return;
  if (trc_child_pid <= 0) { /* between fork and the pid known: passed on then */
    trc_pending = sig;
    return;
  }
  trc_forwarded = 1;
  kill((pid_t)trc_child_pid, sig == SIGINT ? SIGINT : SIGTERM);
}

static int trc_has(const char *dir, const char *name) {
  char p[PATH_MAX];
  struct stat sb;
  if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Directory holding _bifocal_trace<suffix> and bifocal_trace.py: $BIFOCAL_TRACING_DIR,
 * beside the binary (build/tracing), or the install location. OUT: dir;
 * tried gets the places looked at. suffix NULL (not known yet): every such
 * place with bifocal_trace.py, newline-separated, in that order. Returns 0 or
 * -ENOENT. */
static int trc_find_ext(const char *suffix, char *dir, size_t len, char *tried, size_t tlen) {
  char modname[256], exe[PATH_MAX], base[PATH_MAX];
  char cands[8][PATH_MAX];
  int nc = 0;
  snprintf(modname, sizeof modname, "_bifocal_trace%s", suffix ? suffix : "");
  const char *env = getenv("BIFOCAL_TRACING_DIR");
  if (env && *env) snprintf(cands[nc++], PATH_MAX, "%s", env);
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(base, sizeof base, "%s", exe);
    snprintf(cands[nc++], PATH_MAX, "%.4000s/tracing", base);
    snprintf(cands[nc++], PATH_MAX, "%.4000s/../lib/bifocal/tracing", base);
    char pat[PATH_MAX];
    snprintf(pat, sizeof pat, "%.4000s/../lib/*/bifocal/tracing", base);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc && nc < 8; i++) snprintf(cands[nc++], PATH_MAX, "%s", g.gl_pathv[i]);
      globfree(&g);
    }
  }
  tried[0] = 0;
  if (!suffix) dir[0] = 0;
  for (int i = 0; i < nc; i++) {
    if (!suffix && trc_has(cands[i], "bifocal_trace.py")) {
      char *rp = realpath(cands[i], NULL);
      const char *d = rp ? rp : cands[i];
      size_t used = strlen(dir);
      if (!strchr(d, '\n') && used + strlen(d) + 2 < len)
        snprintf(dir + used, len - used, "%s%s", used ? "\n" : "", d);
      free(rp);
      continue;
    }
    if (suffix && trc_has(cands[i], modname) && trc_has(cands[i], "bifocal_trace.py")) {
      char *rp = realpath(cands[i], NULL);
      snprintf(dir, len, "%.*s", (int)(len - 1), rp ? rp : cands[i]);
      free(rp);
      return 0;
    }
    size_t used = strlen(tried);
    snprintf(tried + used, tlen - used, "%s%s", used ? ", " : "", cands[i]);
  }
  return !suffix && dir[0] ? 0 : -ENOENT;
}

/* Run the interpreter's probe: implementation, version, EXT_SUFFIX, executable. */
static int probe_interpreter(const bf_trace_opts *o, bf_trace_plan *p) {
  char probe[8192];
  char *pargv[] = {o->cmd[0], "-c", (char *)trc_probe, NULL};
  if (bf_meta_capture(pargv, NULL, probe, sizeof probe) != 0) {
    snprintf(p->err, sizeof p->err, "cannot run '%s' as a Python interpreter (is it on PATH?)", o->cmd[0]);
    return BF_TRACE_NOT_RUNNABLE;
  }
  char impl[64] = "";
  const char *exe_line = probe; /* 4th line: the executable (may hold spaces) */
  for (int i = 0; i < 3 && exe_line; i++) exe_line = strchr(exe_line, '\n') ? strchr(exe_line, '\n') + 1 : NULL;
  if (exe_line) snprintf(p->exe, sizeof p->exe, "%.*s", (int)strcspn(exe_line, "\n"), exe_line);
  if (sscanf(probe, "%63s %63s %127s", impl, p->version, p->suffix) != 3 || strcmp(impl, "cpython")) {
    snprintf(p->err, sizeof p->err, "'%s' is not a CPython interpreter bifocal can trace", o->cmd[0]);
    return BF_TRACE_UNTRACEABLE;
  }
  int major = 0, minor = 0;
  sscanf(p->version, "%d.%d", &major, &minor);
  if (major < 3 || (major == 3 && minor < 8)) {
    snprintf(p->err, sizeof p->err, "Python %s (%s) is too old to trace: bifocal supports CPython 3.8 and newer",
             p->version, o->cmd[0]);
    return BF_TRACE_UNTRACEABLE;
  }
  return BF_TRACE_READY;
}

/* cmd as execvp would find it (PATH searched when it has no '/'), resolved
 * (realpath). OUT: out. 0, or -1 when not found. */
static int trc_which(const char *cmd, char *out) {
  if (strchr(cmd, '/')) return realpath(cmd, out) ? 0 : -1;
  const char *path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";
  while (1) {
    size_t n = strcspn(path, ":");
    char cand[PATH_MAX];
    struct stat sb;
    if (snprintf(cand, sizeof cand, "%.*s%s%s", (int)n, path, n ? "/" : "", cmd) < (int)sizeof cand &&
        stat(cand, &sb) == 0 && S_ISREG(sb.st_mode) && access(cand, X_OK) == 0)
      return realpath(cand, out) ? 0 : -1;
    if (!path[n]) return -1;
    path += n + 1;
  }
}

/* EXT_SUFFIX as written in a _sysconfigdata file (untrusted: checked to be a
 * plain CPython suffix for major.minor). 0, or -1. */
static int trc_sysconfig_suffix(const char *file, int major, int minor, char *out, size_t len) {
  char buf[8192]; /* a longer line is read in pieces; the key's own line is short */
  static const char key[] = "'EXT_SUFFIX': '";
  FILE *f = fopen(file, "re");
  if (!f) return -1;
  int rc = -1;
  char want[32];
  snprintf(want, sizeof want, ".cpython-%d%d-", major, minor);
  /* the key sits in one line of build_time_vars; read line by line */
  while (fgets(buf, sizeof buf, f)) {
    const char *k = strstr(buf, key);
    if (!k) continue;
    k += sizeof key - 1;
    size_t n = strcspn(k, "'");
    if (k[n] == '\'' && n < len && n > strlen(want) + 3 && strncmp(k, want, strlen(want)) == 0 &&
        strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n && strncmp(k + n - 3, ".so", 3) == 0) {
      memcpy(out, k, n);
      out[n] = 0;
      rc = 0;
    }
    break;
  }
  fclose(f);
  return rc;
}

/* The interpreter's version and extension suffix from its files, without
 * running it: an ELF binary named pythonX.Y (after links: a venv's python
 * leads to its base interpreter) whose PREFIX/lib/pythonX.Y/_sysconfigdata_*.py
 * files all give one EXT_SUFFIX. Returns 0 with p->version ("X.Y": the
 * runner records the full version), p->suffix and p->exe set; -1 when the
 * files do not say (a launcher script such as a pyenv shim, a free-threaded
 * or debug name, a copied venv binary): then the interpreter is asked. */
static int trc_files_probe(const bf_trace_opts *o, bf_trace_plan *p) {
  char exe[PATH_MAX];
  if (trc_which(o->cmd[0], exe) < 0) return -1;
  unsigned char magic[4];
  struct stat sb;
  if (stat(exe, &sb) < 0 || !S_ISREG(sb.st_mode)) return -1; /* never block on a FIFO */
  int fd = open(exe, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  ssize_t r = read(fd, magic, sizeof magic);
  close(fd);
  if (r != 4 || memcmp(magic, "\177ELF", 4) != 0) return -1;
  const char *base = strrchr(exe, '/') + 1; /* realpath: absolute */
  int major = 0, minor = 0, used = 0;
  if (sscanf(base, "python%d.%d%n", &major, &minor, &used) != 2 || base[used] || major != 3 || minor < 0 ||
      minor > 99)
    return -1;
  if (minor < 8) { /* too old whatever its files say */
    snprintf(p->version, sizeof p->version, "%d.%d", major, minor);
    snprintf(p->exe, sizeof p->exe, "%s", exe);
    p->from_files = 1;
    return 0;
  }
  char prefix[PATH_MAX];
  snprintf(prefix, sizeof prefix, "%.*s", (int)(base - 1 - exe), exe); /* .../bin */
  char *slash = strrchr(prefix, '/');
  if (!slash) return -1;
  *slash = 0; /* PREFIX ("" for /bin) */
  char suffix[128] = "";
  static const char *libs[] = {"lib", "lib64"};
  for (size_t l = 0; l < 2 && !suffix[0]; l++) {
    char pat[PATH_MAX + 64];
    snprintf(pat, sizeof pat, "%.4000s/%s/python%d.%d/_sysconfigdata_*.py", prefix, libs[l], major, minor);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) continue;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      char one[128];
      if (trc_sysconfig_suffix(g.gl_pathv[i], major, minor, one, sizeof one) < 0 ||
          (suffix[0] && strcmp(one, suffix) != 0)) {
        suffix[0] = 0; /* unreadable, or two that disagree: ask the interpreter */
        break;
      }
      snprintf(suffix, sizeof suffix, "%s", one);
    }
    globfree(&g);
  }
  if (!suffix[0]) return -1;
  snprintf(p->version, sizeof p->version, "%d.%d", major, minor);
  snprintf(p->suffix, sizeof p->suffix, "%s", suffix);
  snprintf(p->exe, sizeof p->exe, "%s", exe);
  p->from_files = 1;
  return 0;
}

/* Is w (a path or a name) named like an interpreter: python, python3, python3.15? */
static int trc_python_named(const char *w) {
  const char *b = strrchr(w, '/');
  b = b ? b + 1 : w;
  if (strncmp(b, "python", 6) != 0) return 0;
  b += 6;
  b += strspn(b, "0123456789.");
  return *b == 0;
}

int bf_trace_prepare(const bf_trace_opts *o, bf_trace_plan *p) {
  memset(p, 0, sizeof *p);
  /* A launcher (chroot ROOT, env, nsenter ...) ends at the first word named
   * like an interpreter; the runner's -c goes after that word. */
  int interp = 0;
  if (!trc_python_named(o->cmd[0]))
    for (int i = 1; i < o->ncmd; i++)
      if (trc_python_named(o->cmd[i])) {
        interp = i;
        break;
      }
  p->interp = interp;
  /* Interpreter options come before the program; -X/-W take a value. */
  int first = interp + 1;
  while (first < o->ncmd && o->cmd[first][0] == '-' && strcmp(o->cmd[first], "-m") &&
         strcmp(o->cmd[first], "-c") && strcmp(o->cmd[first], "-")) {
    if ((!strcmp(o->cmd[first], "-X") || !strcmp(o->cmd[first], "-W")) && first + 1 < o->ncmd) first++;
    first++;
  }
  if (first >= o->ncmd) {
    snprintf(p->err, sizeof p->err, "nothing to run: give a script, -m MODULE or -c CMD after '%s'",
             o->cmd[interp]);
    return BF_TRACE_UNTRACEABLE;
  }
  p->first = first;
  int rc = 0;
  char found[PATH_MAX];
  if (interp > 0 && trc_which(o->cmd[0], found) < 0) {
    snprintf(p->err, sizeof p->err, "cannot run '%s' (the launcher before %s): not found (is it on PATH?)",
             o->cmd[0], o->cmd[interp]);
    return BF_TRACE_NOT_RUNNABLE;
  }
  /* behind a launcher the interpreter's files are not the host's to read */
  if (interp > 0 || trc_files_probe(o, p) < 0) {
    if (trc_which(o->cmd[0], found) == 0) {
      /* it exists but its files do not say: the runner's bootstrap checks it */
      char tried[4 * PATH_MAX];
      p->boot_check = 1;
      snprintf(p->exe, sizeof p->exe, "%s", found);
      if (trc_find_ext(NULL, p->extdir, sizeof p->extdir, tried, sizeof tried) < 0) {
        snprintf(p->err, sizeof p->err,
                 "bifocal's tracing module (bifocal_trace.py) is not installed: looked in %s; rebuild "
                 "(meson compile -C build) or set BIFOCAL_TRACING_DIR",
                 tried[0] ? tried : "(nowhere)");
        return BF_TRACE_UNTRACEABLE;
      }
      if (!(p->command = bf_meta_join_argv(o->ncmd, o->cmd))) {
        snprintf(p->err, sizeof p->err, "out of memory");
        return BF_TRACE_NO_MEMORY;
      }
      return BF_TRACE_READY;
    }
    rc = probe_interpreter(o, p); /* not found: says so */
    if (rc) return rc;
  } else {
    int major = 0, minor = 0;
    sscanf(p->version, "%d.%d", &major, &minor);
    if (minor < 8) {
      snprintf(p->err, sizeof p->err,
               "Python %s (%s) is too old to trace: bifocal supports CPython 3.8 and newer", p->version,
               o->cmd[0]);
      return BF_TRACE_UNTRACEABLE;
    }
  }
  char tried[4 * PATH_MAX];
  if (trc_find_ext(p->suffix, p->extdir, sizeof p->extdir, tried, sizeof tried) < 0) {
    snprintf(p->err, sizeof p->err,
             "no tracing extension was built for Python %s (%s): looked for "
             "_bifocal_trace%s in %s; install that Python's headers and rebuild "
             "(meson setup --reconfigure build), or set BIFOCAL_TRACING_DIR",
             p->version, o->cmd[0], p->suffix, tried[0] ? tried : "(nowhere)");
    return BF_TRACE_UNTRACEABLE;
  }
  if (!(p->command = bf_meta_join_argv(o->ncmd, o->cmd))) {
    snprintf(p->err, sizeof p->err, "out of memory");
    return BF_TRACE_NO_MEMORY;
  }
  return BF_TRACE_READY;
}

/* Until the runner writes what it saw inside, say which interpreter was
 * started, so a program killed outright still leaves that (malloc'd). */
static char *probe_extra(const bf_trace_plan *p) {
  bf_jw w;
  if (bf_jw_mem(&w)) return NULL;
  bf_jw_obj(&w);
  bf_jw_key(&w, "python");
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "implementation", "cpython");
  bf_jw_kstr(&w, "version", p->version);
  bf_jw_kstr(&w, "executable", p->exe[0] ? p->exe : NULL);
  bf_jw_kstr(&w, "ext_suffix", p->suffix);
  bf_jw_kstr(&w, "source", p->from_files ? "files" : "probe");
  bf_jw_end(&w);
  bf_jw_end(&w);
  return bf_jw_mem_done(&w);
}

int bf_trace_begin(bf_store *s, const bf_trace_opts *o, bf_trace_plan *p) {
  bf_meta meta;
  bf_session_info info;
  bf_meta_src ms = {.kind = "traced", .clock = o->clock, .mode = o->focus ? "focus" : "trace",
                    .command = p->command, .commit = o->commit, .find_commit = 1,
                    .python_version = p->boot_check ? NULL : p->version,
                    .profiler_version = BF_VERSION, .label = o->label,
                    .ttl_ns = o->ttl_ns};
  bf_meta_collect(&ms, &meta, &info);
  snprintf(p->commit, sizeof p->commit, "%s", meta.commit);
  char *pre_extra = p->boot_check ? NULL : probe_extra(p); /* the runner says, once it runs */
  info.extra_json = pre_extra;
  int rc = bf_store_session_begin(s, &info, &p->session_id);
  free(pre_extra);
  return rc;
}

/* The runner's command line (malloc'd; the strings are borrowed). dirs: the
 * bootstrap's directory argument; bufs[4]: the answer's descriptor, bufs[5]:
 * the database directory's descriptor and identity (boot_check). */
static char **runner_argv(const bf_trace_opts *o, const bf_trace_plan *p, char bufs[6][64], char *dbabs,
                          const char *dirs) {
  char **cargv = calloc((size_t)o->ncmd + 42, sizeof *cargv);
  if (!cargv) return NULL;
  snprintf(bufs[0], 32, "%lld", (long long)p->session_id);
  snprintf(bufs[1], 32, "%ld", o->tool_id);
  snprintf(bufs[2], 32, "%ld", o->records);
  snprintf(bufs[3], 32, "%.3f", (double)o->ttl_ns / 1e9);
  int k = 0;
  for (int i = 0; i < p->first; i++) cargv[k++] = o->cmd[i];
  cargv[k++] = "-c";
  cargv[k++] = (char *)(p->boot_check ? trc_boot_check : trc_boot);
  cargv[k++] = (char *)dirs;
  if (p->boot_check) cargv[k++] = bufs[4]; /* the answer's file descriptor */
  char *fixed[] = {"--db",    dbabs,   "--session", bufs[0], "--clock",   (char *)o->clock, "--tool-id",
                   bufs[1],   "--records", bufs[2], "--ttl-s", bufs[3], "--command",      p->command};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) cargv[k++] = fixed[i];
  if (p->boot_check) {
    cargv[k++] = "--db-dir"; /* FD:DEV:INO of the database's directory */
    cargv[k++] = bufs[5];
  }
  if (o->focus) {
    cargv[k++] = "--focus";
    cargv[k++] = (char *)o->focus;
  }
  if (!o->builtins) cargv[k++] = "--no-builtins";
  if (o->memory) cargv[k++] = "--memory";
  if (o->label) {
    cargv[k++] = "--label";
    cargv[k++] = (char *)o->label;
  }
  if (p->commit[0]) {
    cargv[k++] = "--commit";
    cargv[k++] = (char *)p->commit;
  }
  cargv[k++] = "--";
  for (int i = p->first; i < o->ncmd; i++) cargv[k++] = o->cmd[i];
  cargv[k] = NULL;
  return cargv;
}

#define TRC_MAX_FDS 12 /* the answer, the database's directory, the tracing directories */

/* fork + exec cargv; an exec failure comes back through a close-on-exec pipe.
 * keep: descriptors (close-on-exec here) the program inherits, -1 ignored. */
static pid_t spawn(char **cargv, const struct sigaction old[4], const int *keep, int nkeep, int *exec_errno) {
  int ep[2];
  *exec_errno = 0;
  if (pipe2(ep, O_CLOEXEC) < 0) return -1;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    static const int sigs[4] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &old[i], NULL);
    /* bifocal killed outright (SIGKILL): the runner gets SIGTERM, writes
     * what it traced and ends; bifocal gone before this line: end now */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    close(ep[0]);
    for (int i = 0; i < nkeep; i++)
      if (keep[i] >= 0) fcntl(keep[i], F_SETFD, 0); /* inherited by the runner's bootstrap */
    execvp(cargv[0], cargv);
    int e = errno;
    ssize_t w = write(ep[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  close(ep[1]);
  if (pid > 0) {
    ssize_t r;
    while ((r = read(ep[0], exec_errno, sizeof *exec_errno)) < 0 && errno == EINTR) {
    }
    if (r != (ssize_t)sizeof *exec_errno) *exec_errno = 0;
  }
  close(ep[0]);
  return pid;
}

/* The bootstrap's answer (see trc_boot_check) as the exit status and p->err;
 * 0 when it went on to run the program, -1 when there was no answer. */
static int trc_boot_answer(const bf_trace_opts *o, bf_trace_plan *p, const char *ans, int exit_code) {
  char what[16] = "", ver[64] = "", more[128] = "";
  const char *py = o->cmd[p->interp];
  if (sscanf(ans, "%15s %63s %127s", what, ver, more) < 1) what[0] = 0;
  if (!strcmp(what, "ok")) return 0;
  if (!strcmp(what, "impl")) {
    snprintf(p->err, sizeof p->err, "'%s' is not a CPython interpreter bifocal can trace", py);
  } else if (!strcmp(what, "old")) {
    snprintf(p->err, sizeof p->err,
             "Python %s (%s) is too old to trace: bifocal supports CPython 3.8 and newer", ver, py);
  } else if (!strcmp(what, "noext")) {
    char dirs[sizeof p->extdir];
    snprintf(dirs, sizeof dirs, "%s", p->extdir);
    for (char *c = dirs; *c; c++)
      if (*c == '\n') *c = ',';
    snprintf(p->err, sizeof p->err,
             "no tracing extension was built for Python %s (%s): looked for _bifocal_trace%s in %s; "
             "install that Python's headers and rebuild (meson setup --reconfigure build), or set "
             "BIFOCAL_TRACING_DIR",
             ver, py, more, dirs);
  } else if (!strcmp(what, "nodb") || !strcmp(what, "noload")) {
    return exit_code ? exit_code : 2; /* the runner said why, on the program's stderr */
  } else if (p->err[0]) {
    return exit_code ? exit_code : 127;
  } else {
    return -1;
  }
  return 2;
}

/* No answer: the interpreter never ran the bootstrap, or a launcher closed
 * the descriptor on the way and the program ran all the same. The session
 * decides: written, the program ran; still incomplete, it did not (the
 * bootstrap's own refusals exit 2 and said why on stderr). Returns the exit
 * status, with p->err and trc_refused_session set when it did not run. */
static int trc_no_answer(const bf_trace_opts *o, bf_trace_plan *p, int exit_code) {
  bf_store *st = NULL;
  bf_session_info *got = NULL;
  int written = 0;
  if (bf_store_open(o->db_path, BF_STORE_READONLY, &st, NULL) == 0 &&
      bf_store_session_get(st, p->session_id, &got) == 0)
    written = !(got->status && strcmp(got->status, "incomplete") == 0);
  bf_session_info_free(got);
  bf_store_close(st);
  if (written) return exit_code;
  trc_refused_session = p->session_id;
  if (exit_code == 2) return 2;
  snprintf(p->err, sizeof p->err, "cannot run '%s' as a Python interpreter (exit status %d)",
           o->cmd[p->interp], exit_code);
  return exit_code ? exit_code : 127;
}

/* O_PATH descriptor of dir (close-on-exec), or -1. */
static int trc_open_dir(const char *dir) { return open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC); }

/* The bootstrap's directory argument for boot_check ("FD\tPATH" lines, each
 * descriptor also put in fds) into out. 0, or -1 when it does not fit. */
static int trc_dirs_arg(const char *extdir, int *fds, int *nfds, char *out, size_t len) {
  size_t used = 0;
  out[0] = 0;
  for (const char *d = extdir; *d;) {
    size_t n = strcspn(d, "\n");
    char one[PATH_MAX];
    snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one ? n : sizeof one - 1), d);
    int fd = *nfds < TRC_MAX_FDS ? trc_open_dir(one) : -1;
    if (fd >= 0) fds[(*nfds)++] = fd;
    int w = snprintf(out + used, len - used, "%s%d\t%s", used ? "\n" : "", fd, one);
    if (w < 0 || (size_t)w >= len - used) return -1;
    used += (size_t)w;
    d += n;
    if (*d) d++;
  }
  return 0;
}

int bf_trace_exec(const bf_trace_opts *o, bf_trace_plan *p) {
  char dbabs[PATH_MAX], bufs[6][64];
  if (o->db_path[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) || snprintf(dbabs, sizeof dbabs, "%s/%s", cwd, o->db_path) >= (int)sizeof dbabs)
      snprintf(dbabs, sizeof dbabs, "%s", o->db_path);
  } else {
    snprintf(dbabs, sizeof dbabs, "%s", o->db_path);
  }
  int fds[TRC_MAX_FDS + 2], nfds = 0;
  int ans[2] = {-1, -1}; /* the bootstrap's answer (boot_check) */
  char dirs[sizeof p->extdir + 16 * TRC_MAX_FDS];
  snprintf(dirs, sizeof dirs, "%s", p->extdir);
  if (p->boot_check) {
    if (pipe2(ans, O_CLOEXEC) < 0) {
      snprintf(p->err, sizeof p->err, "cannot start '%s': %s", o->cmd[0], strerror(errno));
      trc_refused_session = p->session_id;
      return 1;
    }
    fds[nfds++] = ans[1];
    /* the target may see other paths (another root): its directories by handle too */
    char dbdir[PATH_MAX];
    const char *slash = strrchr(dbabs, '/');
    snprintf(dbdir, sizeof dbdir, "%.*s", slash ? (int)(slash - dbabs) + (slash == dbabs) : 1,
             slash ? dbabs : ".");
    int dbfd = trc_open_dir(dbdir);
    struct stat sb;
    if (dbfd >= 0 && fstat(dbfd, &sb) == 0) {
      fds[nfds++] = dbfd;
      snprintf(bufs[5], 64, "%d:%llu:%llu", dbfd, (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
    } else {
      if (dbfd >= 0) close(dbfd);
      snprintf(bufs[5], 64, "-1:0:0");
    }
    if (trc_dirs_arg(p->extdir, fds, &nfds, dirs, sizeof dirs) < 0) snprintf(dirs, sizeof dirs, "%s", p->extdir);
  }
  snprintf(bufs[4], 32, "%d", ans[1]);
  int exit_code = 1;
  char **cargv = runner_argv(o, p, bufs, dbabs, dirs);
  if (!cargv) {
    snprintf(p->err, sizeof p->err, "out of memory");
    if (ans[0] >= 0) close(ans[0]);
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  struct sigaction fwd = {0}, old[4];
  fwd.sa_sigaction = trc_forward;
  fwd.sa_flags = SA_SIGINFO;
  sigemptyset(&fwd.sa_mask);
  trc_forwarded = trc_pending = 0;
  sigaction(SIGINT, &fwd, &old[0]);
  sigaction(SIGQUIT, &fwd, &old[1]);
  sigaction(SIGTERM, &fwd, &old[2]);
  sigaction(SIGHUP, &fwd, &old[3]);
  int status = 0, exec_errno;
  pid_t pid = spawn(cargv, old, fds, nfds, &exec_errno);
  for (int i = 0; i < nfds; i++) close(fds[i]); /* ans[1] among them */
  if (pid < 0) {
    snprintf(p->err, sizeof p->err, "cannot start '%s': %s", o->cmd[0], strerror(errno));
  } else {
    if (exec_errno) snprintf(p->err, sizeof p->err, "cannot run '%s': %s", cargv[0], strerror(exec_errno));
    trc_child_pid = pid;
    if (trc_pending && !trc_forwarded) {
      trc_forwarded = 1;
      kill(pid, trc_pending == SIGINT ? SIGINT : SIGTERM);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    trc_child_pid = 0;
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
  }
  if (ans[0] >= 0) {
    char buf[256];
    ssize_t n = 0, r;
    while (n < (ssize_t)sizeof buf - 1 && (r = read(ans[0], buf + n, sizeof buf - 1 - (size_t)n)) != 0) {
      if (r < 0) {
        if (errno == EINTR) continue;
        break;
      }
      n += r;
    }
    buf[n] = 0;
    close(ans[0]);
    int rc = pid < 0 ? 1 : trc_boot_answer(o, p, buf, exit_code);
    if (rc < 0) {
      exit_code = trc_no_answer(o, p, exit_code);
    } else if (rc > 0) { /* it never ran the program: no session */
      trc_refused_session = p->session_id;
      exit_code = rc;
    }
  }
  sigaction(SIGINT, &old[0], NULL);
  sigaction(SIGQUIT, &old[1], NULL);
  sigaction(SIGTERM, &old[2], NULL);
  sigaction(SIGHUP, &old[3], NULL);
  free(cargv);
  return exit_code;
}

int bf_trace_outcome(bf_store *s, int64_t session_id) {
  if (session_id && session_id == trc_refused_session) {
    int rc = bf_store_session_delete(s, session_id);
    return rc < 0 ? rc : -ENOENT;
  }
  bf_session_info *got = NULL;
  int rc = bf_store_session_get(s, session_id, &got);
  if (rc == 0) rc = got->status && strcmp(got->status, "incomplete") == 0 ? BF_TRACE_INCOMPLETE : BF_TRACE_WRITTEN;
  bf_session_info_free(got);
  return rc;
}

void bf_trace_plan_free(bf_trace_plan *p) {
  if (!p) return;
  free(p->command);
  p->command = NULL;
}

/* ---- in the target: SQLite names relative to a working directory outside the root ---- */

static sqlite3_vfs trc_cwd_vfs, *trc_cwd_base;

/* A relative name stays as given (the working directory is the database's
 * directory); an absolute one goes to the default VFS as usual. */
static int trc_cwd_full_pathname(sqlite3_vfs *vfs, const char *name, int n_out, char *out) {
  (void)vfs;
  if (name[0] == '/') return trc_cwd_base->xFullPathname(trc_cwd_base, name, n_out, out);
  size_t len = strlen(name);
  if (n_out <= 0 || len >= (size_t)n_out) return SQLITE_CANTOPEN;
  memcpy(out, name, len + 1);
  return SQLITE_OK;
}

int bf_trace_cwd_db_push(void) {
  sqlite3_vfs *base = sqlite3_vfs_find(NULL);
  if (!base || base == &trc_cwd_vfs) return -EIO;
  trc_cwd_base = base;
  /* every other method is the default VFS's own, on a copy of its struct
   * (they read only its pAppData and sizes through the pointer) */
  trc_cwd_vfs = *base;
  trc_cwd_vfs.pNext = NULL;
  trc_cwd_vfs.zName = "bifocal-cwd";
  trc_cwd_vfs.xFullPathname = trc_cwd_full_pathname;
  return sqlite3_vfs_register(&trc_cwd_vfs, 1) == SQLITE_OK ? 0 : -EIO;
}

void bf_trace_cwd_db_pop(void) {
  /* the default was at the head of the list, behind this one: it is again */
  sqlite3_vfs_unregister(&trc_cwd_vfs);
  if (trc_cwd_base && sqlite3_vfs_find(NULL) != trc_cwd_base) sqlite3_vfs_register(trc_cwd_base, 1);
}
