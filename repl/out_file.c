/* out_file.c — the one checked writer for -o (see out_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"
#include "out_file.h"

static char *protected_db;
/* the temporary being written, removed if a signal ends the process first */
static char tmp_live[PATH_MAX + 32];
static volatile sig_atomic_t tmp_armed;
static struct sigaction old_sa[4];
static const int tmp_sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

void bf_out_protect(const char *db_path) {
  free(protected_db);
  protected_db = db_path ? strdup(db_path) : NULL;
}

static void on_fatal_signal(int sig) {
  if (tmp_armed) unlink(tmp_live);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void arm(const char *tmp) {
  snprintf(tmp_live, sizeof tmp_live, "%s", tmp);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  /* a signal the command already catches (record, trace: to finish what it
   * writes) stays caught; only one that would kill gets the clean-up */
  for (int i = 0; i < 4; i++) {
    sigaction(tmp_sigs[i], NULL, &old_sa[i]);
    if (old_sa[i].sa_handler == SIG_DFL) sigaction(tmp_sigs[i], &sa, NULL);
  }
  tmp_armed = 1;
}

static void disarm(void) {
  if (!tmp_armed) return;
  tmp_armed = 0;
  for (int i = 0; i < 4; i++) sigaction(tmp_sigs[i], &old_sa[i], NULL);
}

/* Follow symlinks (dangling ones too) to the path that will be written.
 * OUT: *out (malloc'd), *st and *exists. */
static int resolve(const char *path, char **out, struct stat *st, int *exists) {
  char *p = strdup(path);
  if (!p) return -ENOMEM;
  for (int hops = 0;; hops++) {
    if (lstat(p, st) != 0) {
      int e = errno;
      if (e != ENOENT) {
        free(p);
        return -e;
      }
      *exists = 0;
      break;
    }
    if (!S_ISLNK(st->st_mode)) {
      *exists = 1;
      break;
    }
    if (hops >= 40) {
      free(p);
      return -ELOOP;
    }
    char link[PATH_MAX];
    ssize_t n = readlink(p, link, sizeof link - 1);
    if (n < 0) {
      int e = errno;
      free(p);
      return -e;
    }
    link[n] = 0;
    char *next;
    const char *slash = strrchr(p, '/');
    if (link[0] == '/' || !slash) {
      next = strdup(link);
    } else if (asprintf(&next, "%.*s/%s", (int)(slash - p), p, link) < 0) {
      next = NULL;
    }
    free(p);
    if (!(p = next)) return -ENOMEM;
  }
  *out = p;
  return 0;
}

/* Is st the protected database or one of its side files? */
static const char *is_database(const struct stat *st) {
  static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
  if (!protected_db) return NULL;
  for (int i = 0; i < 4; i++) {
    char p[PATH_MAX + 16];
    struct stat d;
    snprintf(p, sizeof p, "%s%s", protected_db, sfx[i]);
    if (stat(p, &d) == 0 && d.st_dev == st->st_dev && d.st_ino == st->st_ino) return sfx[i];
  }
  return NULL;
}

/* Opens fd for writing as o->f, written into directly. 0, or 1 after the error. */
static int open_direct(bf_out_file *o, int fd, const char *path) {
  if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
    bf_cli_error("cannot write '%s': %m", path);
    if (fd >= 0) close(fd);
    return 1;
  }
  o->direct = 1;
  return 0;
}

/* /dev/stdout, /dev/fd/N, /proc/self/fd/N name a descriptor we hold (a pipe
 * or socket behind it has no path): its number, else -1. */
static int named_fd(const char *path) {
  int fdn = -1;
  char tail;
  if (strcmp(path, "/dev/stdout") == 0) return 1;
  if (strcmp(path, "/dev/stderr") == 0) return 2;
  if (sscanf(path, "/dev/fd/%d%c", &fdn, &tail) != 1 && sscanf(path, "/proc/self/fd/%d%c", &fdn, &tail) != 1)
    return -1;
  return fdn;
}

/* An existing target that is not a character device or FIFO: 0 when it may
 * be replaced (a regular file other than the database), else 1 after the error. */
static int check_replaceable(const char *path, const struct stat *st) {
  const char *sfx;
  if (S_ISDIR(st->st_mode)) {
    bf_cli_error("cannot write '%s': it is a directory; give a file name", path);
    return 1;
  }
  if (!S_ISREG(st->st_mode)) {
    bf_cli_error("refusing to write '%s': it is a %s, not a regular file; choose another output path",
                 path, S_ISBLK(st->st_mode) ? "block device" : S_ISSOCK(st->st_mode) ? "socket" : "special file");
    return 1;
  }
  if ((sfx = is_database(st))) {
    bf_cli_error("refusing to write '%s': it is the open database%s%s ('%s'); choose another output path",
                 path, *sfx ? "'s " : "", *sfx ? sfx + 1 : "", protected_db);
    return 1;
  }
  return 0;
}

/* The new file beside o->path: unnamed (O_TMPFILE) where the file system
 * allows, else a hidden temporary removed on a fatal signal. 0, or 1 after
 * the error. */
static int open_temporary(bf_out_file *o, const char *path) {
  /* a hidden temporary in the target's directory, so rename() is atomic */
  const char *slash = strrchr(o->path, '/');
  int dl = slash ? (int)(slash - o->path + 1) : 0;
  if (asprintf(&o->tmp, "%.*s.%s.bifocal-XXXXXX", dl, o->path, slash ? slash + 1 : o->path) < 0) {
    o->tmp = NULL;
    bf_cli_error("out of memory");
    return 1;
  }
  /* an unnamed file first (O_TMPFILE): killed while writing, even by
   * SIGKILL, it leaves nothing; it gets the temporary name only when done */
  char *dir = dl ? strndup(o->path, (size_t)dl) : strdup(".");
  int fd = dir ? open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600) : -1;
  free(dir);
  if (fd >= 0) {
    o->anon = 1;
    fchmod(fd, 0600); /* O_TMPFILE applies the umask */
  } else {
    fd = mkostemp(o->tmp, O_CLOEXEC); /* mode 0600; no O_TMPFILE here */
  }
  if (fd < 0) {
    bf_cli_error("cannot write '%s': %m; check the directory exists and is writable", path);
    free(o->tmp);
    o->tmp = NULL;
    return 1;
  }
  if (!o->anon) arm(o->tmp);
  if (!(o->f = fdopen(fd, "w"))) {
    bf_cli_error("cannot write '%s': %m", path);
    close(fd);
    if (!o->anon) unlink(o->tmp);
    disarm();
    free(o->tmp);
    o->tmp = NULL;
    return 1;
  }
  return 0;
}

int bf_out_open(const char *path, bf_out_file *o) {
  memset(o, 0, sizeof *o);
  o->arg = path;
  if (!path || strcmp(path, "-") == 0) {
    o->f = stdout;
    o->direct = 1;
    return 0;
  }
  struct stat st;
  int exists = 0, fdn = named_fd(path);
  if ((fdn >= 0 && fcntl(fdn, F_GETFD) >= 0) ||
      (stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))))
    return open_direct(o, fdn >= 0 ? fcntl(fdn, F_DUPFD_CLOEXEC, 3) : open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY),
                       path);
  int rc = resolve(path, &o->path, &st, &exists);
  if (rc < 0) {
    bf_cli_error("cannot write '%s': %s; choose another output path", path, strerror(-rc));
    return 1;
  }
  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) /* /dev/null, a tty, a pipe: write into it */
    rc = open_direct(o, open(o->path, O_WRONLY | O_CLOEXEC | O_NOCTTY), path);
  else if (exists && check_replaceable(path, &st))
    rc = 1;
  else
    rc = open_temporary(o, path);
  if (rc) {
    free(o->path);
    o->path = NULL;
  }
  return rc;
}

int bf_out_close(bf_out_file *o, int ok) {
  if (!o->f) return 1;
  int err = 0;
  if (ferror(o->f)) err = EIO; /* a write failed earlier; errno may be gone */
  if (fflush(o->f) != 0 && !err) err = errno ? errno : EIO;
  if (ferror(o->f) && !err) err = EIO;
  if (o->tmp && !err && ok && fsync(fileno(o->f)) != 0) err = errno;
  struct statvfs vfs; /* stdio keeps only "an error happened": ask the file system */
  if (err == EIO && o->tmp && fstatvfs(fileno(o->f), &vfs) == 0 && vfs.f_bavail == 0) err = ENOSPC;
  if (o->anon && ok && !err) { /* complete: give the unnamed file its temporary name */
    char fdp[64];
    snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", fileno(o->f));
    size_t n = strlen(o->tmp);
    for (int tries = 0;; tries++) {
      uint64_t r = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)tries * 0xBF58476D1CE4E5B9ull ^
                   (uint64_t)(uintptr_t)o;
      for (size_t k = n - 6; k < n; k++, r /= 36) o->tmp[k] = "abcdefghijklmnopqrstuvwxyz0123456789"[r % 36];
      if (linkat(AT_FDCWD, fdp, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW) == 0) {
        o->anon = 3; /* named now */
        break;
      }
      if (errno != EEXIST || tries >= 100) {
        err = errno;
        break;
      }
    }
  }
  if (o->f == stdout) {
    clearerr(stdout);
  } else if (fclose(o->f) != 0 && !err) {
    err = errno ? errno : EIO;
  }
  o->f = NULL;
  int rc = 0;
  if (ok && err) {
    bf_cli_error("cannot write '%s': %s%s", o->arg ? o->arg : "stdout", strerror(err),
                 err == ENOSPC ? " (free some space or write elsewhere)" : "");
  }
  if (!ok || err) rc = 1;
  if (o->tmp) {
    if (!rc && rename(o->tmp, o->path) != 0) {
      bf_cli_error("cannot write '%s': %m; check the directory is writable", o->arg);
      rc = 1;
    }
    if (rc) {
      if (o->anon != 1) unlink(o->tmp); /* only a name that was made */
    } else { /* make the rename itself durable */
      const char *slash = strrchr(o->path, '/');
      char *dir = slash ? strndup(o->path, (size_t)(slash - o->path + 1)) : strdup(".");
      int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
      if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
      }
      free(dir);
    }
    disarm();
    free(o->tmp);
    o->tmp = NULL;
  }
  free(o->path);
  o->path = NULL;
  return rc;
}
