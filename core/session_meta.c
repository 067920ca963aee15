/* session_meta.c — the one collector of session context (see session_meta.h). */
#include "session_meta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

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
static void git_head(const char *dir, char *out, size_t len) {
  char buf[128];
  char *argv[] = {"git", "rev-parse", "HEAD", NULL};
  out[0] = 0;
  if (bf_meta_capture(argv, dir, buf, sizeof buf) != 0) return;
  buf[strcspn(buf, "\n")] = 0;
  if (strlen(buf) >= 7 && strlen(buf) < len) memcpy(out, buf, strlen(buf) + 1);
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
  info->start_ns = bf_now_ns();
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
