/* session_meta.c — the one collector of session context (see session_meta.h). */
#include "session_meta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

char *bf_meta_join_argv(int argc, char *const *argv) {
  size_t len = 1;
  for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
  char *s = malloc(len);
  if (!s) return NULL;
  char *p = s;
  for (int i = 0; i < argc; i++) {
    size_t n = strlen(argv[i]);
    if (i) *p++ = ' ';
    memcpy(p, argv[i], n);
    p += n;
  }
  *p = 0;
  return s;
}

int bf_meta_capture(char *const argv[], const char *dir, char *buf, size_t len) {
  int fd[2];
  buf[0] = 0;
  if (pipe2(fd, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fd[1], 1);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    if (dir && chdir(dir) < 0) _exit(127);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < len && (r = read(fd[0], buf + n, len - 1 - n)) != 0) {
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    n += (size_t)r;
  }
  buf[n] = 0;
  close(fd[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `git rev-parse HEAD` in dir (NULL: here), or "" (quietly). */
static void git_run_head(const char *dir, char *out, size_t len) {
  char buf[128];
  char *argv[] = {"git", "rev-parse", "HEAD", NULL};
  out[0] = 0;
  if (bf_meta_capture(argv, dir, buf, sizeof buf) != 0) return;
  buf[strcspn(buf, "\n")] = 0;
  if (strlen(buf) >= 7 && strlen(buf) < len) memcpy(out, buf, strlen(buf) + 1);
}

/* The first line of file path (at most len-1 bytes, newline dropped); -1 when
 * it cannot be read or is empty. */
static int git_read_line(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC); /* worktrees may link files */
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  buf[strcspn(buf, "\r\n")] = 0;
  return buf[0] ? 0 : -1;
}

/* A full object name: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits. */
static int git_is_oid(const char *s) {
  size_t n = strspn(s, "0123456789abcdef");
  return (n == 40 || n == 64) && (s[n] == 0 || s[n] == ' ');
}

/* A ref name safe to join to a git directory: refs/..., no "..", no "//". */
static int git_ref_ok(const char *r) {
  return strncmp(r, "refs/", 5) == 0 && !strstr(r, "..") && !strstr(r, "//") && strlen(r) < 256 &&
         strspn(r, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@") ==
             strlen(r);
}

/* ref's object name from packed-refs in common: 0 found, -1 not there. */
static int git_packed(const char *common, const char *ref, char *oid, size_t len) {
  char path[PATH_MAX], line[512];
  if (snprintf(path, sizeof path, "%s/packed-refs", common) >= (int)sizeof path) return -1;
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  int rc = -1;
  size_t rl = strlen(ref);
  int cont = 0; /* this chunk continues a line longer than the buffer: skipped */
  while (fgets(line, sizeof line, f)) {
    int was_cont = cont;
    cont = !strchr(line, '\n');
    line[strcspn(line, "\r\n")] = 0;
    if (was_cont || !git_is_oid(line)) continue; /* "# pack-refs", "^peeled" */
    const char *name = strchr(line, ' ');
    if (name && strncmp(name + 1, ref, rl) == 0 && name[1 + rl] == 0) {
      size_t n = (size_t)(name - line);
      if (n < len) {
        memcpy(oid, line, n);
        oid[n] = 0;
        rc = 0;
      }
      break;
    }
  }
  fclose(f);
  return rc;
}

/* HEAD of the repository whose git directory is gitdir, read from its files:
 * HEAD, a loose ref (in gitdir, then the common directory of a linked
 * worktree) or packed-refs. 0 found; -1 when the files do not say (an unborn
 * branch, another ref store, garbage): git itself is then asked. */
static int git_read_head(const char *gitdir, char *out, size_t len) {
  char common[PATH_MAX], path[PATH_MAX], line[PATH_MAX], ref[300];
  snprintf(common, sizeof common, "%s", gitdir);
  if (snprintf(path, sizeof path, "%s/commondir", gitdir) < (int)sizeof path &&
      git_read_line(path, line, sizeof line) == 0) {
    int n = line[0] == '/' ? snprintf(common, sizeof common, "%s", line)
                           : snprintf(common, sizeof common, "%s/%s", gitdir, line);
    if (n >= (int)sizeof common) return -1;
  }
  if (snprintf(path, sizeof path, "%s/HEAD", gitdir) >= (int)sizeof path ||
      git_read_line(path, line, sizeof line) < 0)
    return -1;
  for (int depth = 0; depth < 5; depth++) {
    if (git_is_oid(line)) {
      size_t n = strspn(line, "0123456789abcdef");
      if (n >= len) return -1;
      memcpy(out, line, n);
      out[n] = 0;
      return 0;
    }
    if (strncmp(line, "ref: ", 5) != 0) return -1;
    snprintf(ref, sizeof ref, "%.299s", line + 5);
    if (!git_ref_ok(ref)) return -1;
    if ((snprintf(path, sizeof path, "%s/%s", gitdir, ref) >= (int)sizeof path ||
         git_read_line(path, line, sizeof line) < 0) &&
        (snprintf(path, sizeof path, "%s/%s", common, ref) >= (int)sizeof path ||
         git_read_line(path, line, sizeof line) < 0))
      return git_packed(common, ref, out, len) == 0 && git_is_oid(out) ? 0 : -1;
  }
  return -1;
}

/* The commit checked out in dir (NULL: here), or "" (quietly): the nearest
 * .git at or above dir (a directory, or a linked worktree's "gitdir:" file)
 * read directly; `git rev-parse HEAD` when $GIT_DIR is set or those files do
 * not say. No .git up to / means no repository: "". */
static void git_head(const char *dir, char *out, size_t len) {
  char d[PATH_MAX], dotgit[PATH_MAX + 8], gitdir[PATH_MAX], line[PATH_MAX];
  out[0] = 0;
  if (getenv("GIT_DIR")) {
    git_run_head(dir, out, len);
    return;
  }
  if (dir ? snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d : !getcwd(d, sizeof d)) return;
  for (;;) {
    struct stat sb;
    snprintf(dotgit, sizeof dotgit, "%s/.git", strcmp(d, "/") ? d : "");
    if (stat(dotgit, &sb) == 0) {
      int ok = 0;
      if (S_ISDIR(sb.st_mode)) {
        ok = snprintf(gitdir, sizeof gitdir, "%s", dotgit) < (int)sizeof gitdir;
      } else if (S_ISREG(sb.st_mode) && git_read_line(dotgit, line, sizeof line) == 0 &&
                 strncmp(line, "gitdir: ", 8) == 0 && line[8]) {
        const char *g = line + 8;
        ok = (g[0] == '/' ? snprintf(gitdir, sizeof gitdir, "%s", g)
                          : snprintf(gitdir, sizeof gitdir, "%s/%s", strcmp(d, "/") ? d : "", g)) <
             (int)sizeof gitdir;
      }
      if (!ok || git_read_head(gitdir, out, len) < 0) {
        out[0] = 0;
        git_run_head(dir, out, len);
      }
      return;
    }
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) {
      if (!strcmp(d, "/")) return;
      snprintf(d, sizeof d, "/");
    } else {
      *slash = 0;
    }
  }
}

/* /proc/PID/cmdline, NULs as spaces, trailing spaces dropped; "" if unknown. */
static void proc_cmdline(int pid, char *out, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  out[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = 0, r;
  while ((size_t)n < len - 1 && (r = read(fd, out + n, len - 1 - (size_t)n)) > 0) n += r;
  close(fd);
  out[n] = 0;
  for (ssize_t i = 0; i < n; i++)
    if (out[i] == 0) out[i] = ' ';
  while (n > 0 && out[n - 1] == ' ') out[--n] = 0;
}

void bf_meta_collect(const bf_meta_src *src, bf_meta *m, bf_session_info *info) {
  memset(m, 0, sizeof *m);
  memset(info, 0, sizeof *info);
  gethostname(m->host, sizeof m->host - 1);
  if (!src->command && src->pid > 0) proc_cmdline(src->pid, m->command, sizeof m->command);
  if (src->commit) {
    snprintf(m->commit, sizeof m->commit, "%s", src->commit);
  } else if (src->find_commit) {
    char cwd_link[64], cwd[600];
    ssize_t n = -1;
    if (src->pid > 0) {
      snprintf(cwd_link, sizeof cwd_link, "/proc/%d/cwd", src->pid);
      n = readlink(cwd_link, cwd, sizeof cwd - 1);
      if (n > 0) cwd[n] = 0;
    }
    if (src->pid <= 0 || n > 0) git_head(src->pid > 0 ? cwd : NULL, m->commit, sizeof m->commit);
  }
  info->kind = src->kind;
  info->clock = src->clock;
  info->mode = src->mode;
  info->start_ns = bf_wall_ns();
  info->host = m->host;
  info->pid = src->pid;
  info->command = src->command ? src->command : m->command[0] ? m->command : NULL;
  info->python_version = src->python_version;
  info->python_build = src->python_build;
  info->profiler_version = src->profiler_version;
  info->commit = m->commit[0] ? m->commit : NULL;
  info->label = src->label;
  info->status = "incomplete";
  info->expires_at_ns = src->ttl_ns > 0 ? info->start_ns + src->ttl_ns : 0;
}
