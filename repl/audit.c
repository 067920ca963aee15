/* audit.c — who attached to what, when, with which command line. Everything
 * is captured at begin; end only fills in the outcome and the session. */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"

struct bf_audit {
  bf_store *s;
  int owns_store;
  int64_t row;
};

/* Real uid of pid from /proc/PID/status, or -1. */
static long long target_uid_of(long long pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%lld/status", pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  long long uid = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "Uid:", 4) == 0) {
      uid = strtoll(line + 4, NULL, 10);
      break;
    }
  fclose(f);
  return uid;
}

static void user_name(char *buf, size_t len) {
  uid_t uid = getuid();
  struct passwd pw, *res = NULL;
  char tmp[1024];
  const char *name = NULL;
  if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) == 0 && res) name = res->pw_name;
  const char *sudo = getenv("SUDO_USER");
  if (name && uid == 0 && sudo && *sudo)
    snprintf(buf, len, "%s (sudo by %s)", name, sudo);
  else if (name)
    snprintf(buf, len, "%s", name);
  else
    snprintf(buf, len, "uid %lld", (long long)uid);
}

/* Fill and add the row; 0 or negative errno (message on s). */
static int add_row(bf_cli *cli, bf_audit *a, const char *command, long long target_pid) {
  char user[300];
  user_name(user, sizeof user);
  bf_audit_entry e = {
      .user = user,
      .uid = (int64_t)getuid(),
      .target_pid = target_pid,
      .target_uid = target_pid > 0 ? target_uid_of(target_pid) : (int64_t)getuid(),
      .command = command,
      .argv = cli->cmdline,
      .outcome = "started",
  };
  return bf_store_audit_add(a->s, &e, &a->row);
}

int bf_audit_begin(bf_cli *cli, bf_store *s, const char *command, long long target_pid, bf_audit **out) {
  *out = NULL;
  bf_audit *a = calloc(1, sizeof *a);
  if (!a) {
    bf_cli_error("out of memory");
    return 1;
  }
  if (!s) {
    int rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s);
    if (rc) {
      free(a);
      return rc;
    }
    a->owns_store = 1;
  }
  a->s = s;
  if (add_row(cli, a, command, target_pid) < 0) {
    bf_cli_error("cannot write the audit row, so not running %s: %s", command, bf_store_errmsg(s));
    if (a->owns_store) bf_store_close(s);
    free(a);
    return 1;
  }
  *out = a;
  return 0;
}

int bf_audit_user_store(char *buf, size_t len) {
  const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
  int n;
  if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is invalid, ignore it */
    n = snprintf(buf, len, "%s/bifocal/audit.db", xdg);
  else if (home && home[0] == '/')
    n = snprintf(buf, len, "%s/.local/state/bifocal/audit.db", home);
  else
    return -ENOENT;
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* mkdir -p of path's directory, new levels 0700. */
static void make_parent(const char *path) {
  char d[4096];
  snprintf(d, sizeof d, "%s", path);
  char *slash = strrchr(d, '/');
  if (!slash || slash == d) return;
  *slash = 0;
  for (char *p = d + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(d, 0700);
      *p = '/';
    }
  mkdir(d, 0700);
}

int bf_audit_begin_look(bf_cli *cli, const char *command, long long target_pid, bf_audit **out) {
  *out = NULL;
  bf_audit *a = calloc(1, sizeof *a);
  if (!a) {
    bf_cli_error("out of memory");
    return 1;
  }
  char path[4096];
  const char *why = NULL;
  char whybuf[512];
  if (cli->db_named) {
    snprintf(path, sizeof path, "%s", cli->db_path);
  } else if (bf_audit_user_store(path, sizeof path) < 0) {
    why = "neither $XDG_STATE_HOME nor $HOME is an absolute path";
  } else {
    make_parent(path);
  }
  if (!why) {
    bf_err msg = BF_ERR_INIT;
    int orc = -1;
    /* a look-only command may start beside others on a fresh audit store: the
     * first open of a new file can race with another one creating it */
    for (int tries = 0; tries < 5 && orc < 0; tries++) {
      if (tries) usleep(50000);
      orc = bf_store_open(path, BF_STORE_CREATE, &a->s, &msg);
    }
    if (orc < 0) {
      snprintf(whybuf, sizeof whybuf, "%s", bf_err_msg(&msg, "cannot open it"));
      why = whybuf;
      a->s = NULL;
    } else if (add_row(cli, a, command, target_pid) < 0) {
      snprintf(whybuf, sizeof whybuf, "%s", bf_store_errmsg(a->s));
      why = whybuf;
    }
  }
  if (why) {
    bf_cli_warn("this %s is not audited: %s (name a writable database with --db DB)", command, why);
    bf_store_close(a->s);
    free(a);
    return 0;
  }
  a->owns_store = 1;
  *out = a;
  return 0;
}

/* One descriptor per database path, opened once and never closed (see
 * audit.h); -1 when the file cannot be opened. */
static int capture_fd(const char *db_path) {
  static struct {
    char path[4096];
    int fd;
  } fds[8];
  static int n;
  if (!db_path) return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(fds[i].path, db_path) == 0) return fds[i].fd;
  int fd = open(db_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0 || n == (int)(sizeof fds / sizeof *fds)) return fd; /* past 8 paths: unshared, still works */
  snprintf(fds[n].path, sizeof fds[n].path, "%s", db_path);
  fds[n++].fd = fd;
  return fd;
}

void bf_audit_capture_hold(const char *db_path) {
  int fd = capture_fd(db_path);
  if (fd >= 0) flock(fd, LOCK_SH);
}

void bf_audit_capture_release(const char *db_path) {
  int fd = capture_fd(db_path);
  if (fd >= 0) flock(fd, LOCK_UN);
}

int bf_audit_capture_running(const char *db_path) {
  int fd = capture_fd(db_path);
  if (fd < 0) return 0;
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) return errno == EWOULDBLOCK;
  flock(fd, LOCK_UN);
  return 0;
}

void bf_audit_end(bf_audit *a, const char *outcome, int64_t session_id) {
  if (!a) return;
  /* finishing the row must not lose to another writer's lock: a capture
   * ends on a short busy timeout (samples are held meanwhile, see
   * sampling/record.c); the row gets as long as a command gets to begin */
  bf_store_set_busy_timeout(a->s, 30000);
  if (bf_store_audit_update(a->s, a->row, outcome ? outcome : "ok", session_id) < 0)
    bf_cli_warn("audit row %lld not updated: %s", (long long)a->row, bf_store_errmsg(a->s));
  if (a->owns_store) bf_store_close(a->s);
  free(a);
}

static const int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
static struct sigaction stops_old[4];
static volatile sig_atomic_t stops_sig;

static void stops_handler(int sig) {
  if (!stops_sig) stops_sig = sig;
  bf_store_interrupt(); /* async-signal-safe: a flag the progress handler reads */
}

void bf_audit_stops_catch(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = stops_handler;
  sigemptyset(&sa.sa_mask);
  stops_sig = 0;
  for (size_t i = 0; i < 4; i++) sigaction(stop_sigs[i], &sa, &stops_old[i]);
}

int bf_audit_stops_caught(void) {
  if (stops_sig) bf_store_interrupt_clear();
  return stops_sig;
}

void bf_audit_stops_release(void) {
  int sig = stops_sig;
  for (size_t i = 0; i < 4; i++) sigaction(stop_sigs[i], &stops_old[i], NULL);
  if (sig) {
    bf_store_interrupt_clear();
    fflush(NULL);
    signal(sig, SIG_DFL);
    raise(sig);
  }
}
