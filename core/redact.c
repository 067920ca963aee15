/* redact.c — the redaction rules (path tokens, JSON string scrubbing) on top
 * of the single-session extract of copy.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "copy.h"
#include "redact.h"
#include "jsonw.h"
#include "store_int.h"

#define MAX_WORDS 16

typedef struct redactor {
  unsigned char key[32];
  const bf_redact_opts *o;
  /* host and user names that must not survive in extra_json (keys or values) */
  char *words[MAX_WORDS];
  size_t nwords;
} redactor;

static void add_word(redactor *r, const char *w, size_t n) {
  if (!w || n < 2 || r->nwords >= MAX_WORDS) return;
  for (size_t i = 0; i < r->nwords; i++)
    if (strlen(r->words[i]) == n && strncasecmp(r->words[i], w, n) == 0) return;
  char *c = strndup(w, n);
  if (c) r->words[r->nwords++] = c;
}

/* A host name and its first label ("build-7.corp.example" and "build-7"). */
static void add_host(redactor *r, const char *h) {
  if (!h || !*h || strcmp(h, "localhost") == 0) return;
  add_word(r, h, strlen(h));
  const char *dot = strchr(h, '.');
  if (dot) add_word(r, h, (size_t)(dot - h));
}

/* User names seen in home directories of s ("/home/ann/...", "/Users/ann"). */
static void add_home_users(redactor *r, const char *s) {
  static const char *const homes[] = {"/home/", "/Users/", "/root", NULL};
  for (size_t k = 0; s && homes[k]; k++)
    for (const char *p = strstr(s, homes[k]); p; p = strstr(p + 1, homes[k])) {
      if (strcmp(homes[k], "/root") == 0) continue; /* "root" is no secret */
      const char *u = p + strlen(homes[k]);
      size_t n = strcspn(u, "/ \t\"'");
      add_word(r, u, n);
    }
}

static int is_word_char(unsigned char c) { return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'); }

/* 1 when body[0..n) holds one of r's words as a whole word (case-insensitive). */
static int has_word(const redactor *r, const char *body, size_t n) {
  for (size_t w = 0; w < r->nwords; w++) {
    size_t l = strlen(r->words[w]);
    for (size_t i = 0; i + l <= n; i++)
      if (strncasecmp(body + i, r->words[w], l) == 0 && (i == 0 || !is_word_char((unsigned char)body[i - 1])) &&
          (i + l == n || !is_word_char((unsigned char)body[i + l])))
        return 1;
  }
  return 0;
}

static void token_of(const unsigned char key[32], const char *s, size_t n, char *tok, size_t toklen) {
  unsigned char h[8];
  crypto_generichash(h, sizeof h, (const unsigned char *)s, n, key, 32);
  snprintf(tok, toklen, "<path:%02x%02x%02x%02x%02x%02x%02x%02x>", h[0], h[1], h[2], h[3], h[4], h[5], h[6],
           h[7]);
}

int bf_redact_path(const unsigned char key[32], const char *path, const char *const *keep, size_t nkeep,
                   char *tok, size_t toklen) {
  size_t n = strlen(path);
  /* "<builtin>", "<frozen importlib._bootstrap>", "<string>" and our own
   * tokens name no place on disk; anything bracketed with a slash might. */
  int bracketed = n >= 2 && path[0] == '<' && path[n - 1] == '>' && !strpbrk(path, "/\\");
  int kept = bracketed;
  for (size_t i = 0; !kept && i < nkeep; i++)
    if (keep[i][0] && strncmp(path, keep[i], strlen(keep[i])) == 0) kept = 1;
  if (kept) {
    snprintf(tok, toklen, "%s", path);
    return 1;
  }
  token_of(key, path, n, tok, toklen);
  return 0;
}

static char *map_file(void *ud, const char *file) {
  redactor *r = ud;
  size_t cap = strlen(file) + 32;
  char *out = malloc(cap);
  if (!out) return NULL;
  bf_redact_path(r->key, file, r->o ? r->o->keep : NULL, r->o ? r->o->nkeep : 0, out, cap);
  return out;
}

/* Python qualnames never hold a slash; frame text imported from FlameGraph
 * files may ("render (/srv/app/t.html:3)"). Words with a slash or backslash
 * become the token of that word, so a path reads the same here as in files. */
static char *map_qualname(void *ud, const char *q) {
  redactor *r = ud;
  size_t n = strlen(q);
  if (!strpbrk(q, "/\\")) return strdup(q);
  char *out = malloc(n * 24 + 64); /* a one-byte word can become a 23-byte token */
  if (!out) return NULL;
  static const char delim[] = " \t();:,;'\"";
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t w = strcspn(q + i, delim);
    if (w == 0) {
      out[o++] = q[i++];
      continue;
    }
    char word[4096];
    int path = memchr(q + i, '/', w) || memchr(q + i, '\\', w);
    if (path && w < sizeof word) {
      memcpy(word, q + i, w);
      word[w] = 0;
      char tok[64];
      if (bf_redact_path(r->key, word, r->o ? r->o->keep : NULL, r->o ? r->o->nkeep : 0, tok, sizeof tok)) {
        memcpy(out + o, q + i, w); /* kept: the word itself, not the bounded copy */
        o += w;
      } else {
        o += (size_t)sprintf(out + o, "%s", tok);
      }
    } else if (path) {
      o += (size_t)sprintf(out + o, "<path:long>"); /* absurdly long word: drop it */
    } else {
      memcpy(out + o, q + i, w);
      o += w;
    }
    i += w;
  }
  out[o] = 0;
  return out;
}

/* Copy JSON text, replacing strings that could name a path, hold a command
 * line (values with a space) or name the host or a user (keys and values)
 * with tokens. Malformed JSON is replaced wholesale by null: it cannot be
 * scrubbed reliably. */
static char *map_json(void *ud, const char *json) {
  redactor *r = ud;
  if (bf_json_check_object(json, NULL, NULL) != 0) return strdup("null");
  size_t n = strlen(json);
  /* a risky string is >= 3 bytes and becomes a 26-byte token */
  char *out = malloc(n * 10 + 64);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    if (json[i] != '"') {
      out[o++] = json[i++];
      continue;
    }
    size_t start = i++;
    while (i < n && json[i] != '"') i += (json[i] == '\\') ? 2 : 1;
    if (i >= n) {
      free(out);
      return strdup("null");
    }
    i++; /* closing quote */
    size_t j = i;
    while (j < n && (json[j] == ' ' || json[j] == '\t' || json[j] == '\n' || json[j] == '\r')) j++;
    int is_key = j < n && json[j] == ':';
    const char *body = json + start + 1;
    size_t blen = i - start - 2;
    int risky = 0;
    for (size_t k = 0; k < blen; k++)
      if (body[k] == '/' || body[k] == '\\' || (body[k] == ' ' && !is_key)) risky = 1;
    if (has_word(r, body, blen)) risky = 1;
    if (!risky) {
      memcpy(out + o, json + start, i - start);
      o += i - start;
    } else {
      char tok[40];
      token_of(r->key, body, blen, tok, sizeof tok);
      o += (size_t)sprintf(out + o, "\"%s\"", tok);
    }
  }
  out[o] = 0;
  return out;
}

/* Write len bytes to fd; 0 or a negative errno. */
static int write_all(int fd, const unsigned char *buf, size_t len) {
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? -errno : -EIO;
    off += (size_t)w;
  }
  return 0;
}

/* Publish buf as the new file out_path (which must not exist), with nothing
 * visible until it is complete: an unnamed O_TMPFILE in out_path's directory,
 * linked into place at the end, so a kill (even SIGKILL) or a full disk
 * leaves nothing behind. Where the filesystem has no O_TMPFILE, a hidden
 * temporary that is removed on failure. 0 or a negative errno, message on s. */
static int publish(bf_store *s, const char *out_path, const unsigned char *buf, size_t len) {
  char dir[PATH_MAX], tmp[PATH_MAX + 32] = "", proc[64];
  const char *slash = strrchr(out_path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out_path) + (slash == out_path) : 1,
           slash ? out_path : ".");
  int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    snprintf(tmp, sizeof tmp, "%s/.%s.bifocal-XXXXXX", dir, slash ? slash + 1 : out_path);
    fd = mkostemp(tmp, O_CLOEXEC);
  }
  if (fd < 0)
    return bf_store_fail(s, -errno, "cannot create '%s': %s", out_path, strerror(errno));
  int rc = write_all(fd, buf, len);
  if (!rc && fsync(fd) != 0) rc = -errno;
  if (!rc) {
    if (tmp[0]) {
      if (link(tmp, out_path) != 0) rc = -errno; /* refuses an existing target, unlike rename */
    } else {
      snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
      if (linkat(AT_FDCWD, proc, AT_FDCWD, out_path, AT_SYMLINK_FOLLOW) != 0) rc = -errno;
    }
  }
  close(fd);
  if (tmp[0]) unlink(tmp);
  if (rc == -ENOSPC || rc == -EDQUOT)
    return bf_store_fail(s, rc, "cannot write '%s': the disk is full (%zu bytes needed); free some space or write "
                                "elsewhere; nothing written",
                         out_path, len);
  if (rc == -EEXIST)
    return bf_store_fail(s, rc, "'%s' already exists; remove it or choose another output file", out_path);
  if (rc) return bf_store_fail(s, rc, "cannot write '%s': %s; nothing written", out_path, strerror(-rc));
  return 0;
}

/* bf_session_extract, built in memory: the copy never touches the disk until
 * the finished file is published, so nothing (no temporary, no -wal/-shm) is
 * left beside out_path when redact is killed or the disk fills up. */
static int extract(bf_store *src, int64_t session_id, const char *out_path, const bf_copy_opts *co,
                   int64_t *new_id) {
  struct stat st;
  if (lstat(out_path, &st) == 0)
    return bf_store_fail(src, -EEXIST, "'%s' already exists; remove it or choose another output file", out_path);
  bf_store *mem = NULL;
  bf_err msg = BF_ERR_INIT;
  unsigned char *img = NULL;
  size_t len = 0;
  int64_t id = 0;
  int rc = bf_store_open_memory(&mem, &msg);
  if (rc) return bf_store_fail(src, rc, "cannot open a database in memory: %s", bf_err_msg(&msg, strerror(-rc)));
  if ((rc = bf_session_copy(src, session_id, mem, co, &id)) || (rc = bf_store_mark_redacted(mem)) ||
      (rc = bf_store_flush(mem)) || (rc = bf_store_image(mem, (size_t)1 << 40, &img, &len))) {
    /* a copy failure may be src's (then src holds the message) */
    if (bf_store_errmsg(mem)[0]) bf_store_fail(src, rc, "%s", bf_store_errmsg(mem));
    bf_store_close(mem);
    return rc;
  }
  bf_store_close(mem);
  rc = publish(src, out_path, img, len);
  sodium_memzero(img, len);
  free(img);
  if (!rc && new_id) *new_id = id;
  return rc;
}

int bf_redact_session(bf_store *src, int64_t session_id, const char *out_path, const bf_redact_opts *o,
                      int64_t *new_id) {
  if (sodium_init() < 0) return bf_store_fail(src, -EIO, "cannot initialise libsodium");
  redactor r = {.o = o};
  randombytes_buf(r.key, sizeof r.key);
  bf_session_info *in = NULL;
  if (bf_store_session_get(src, session_id, &in) == 0 && in) {
    add_host(&r, in->host);
    add_home_users(&r, in->command);
    bf_session_info_free(in);
  }
  char host[256];
  if (gethostname(host, sizeof host) == 0) {
    host[sizeof host - 1] = 0;
    add_host(&r, host);
  }
  struct passwd *pw = getpwuid(getuid());
  if (pw && pw->pw_name && strcmp(pw->pw_name, "root") != 0) add_word(&r, pw->pw_name, strlen(pw->pw_name));
  const char *envs[] = {getenv("USER"), getenv("LOGNAME"), getenv("HOME")};
  for (size_t i = 0; i < 2; i++)
    if (envs[i] && strcmp(envs[i], "root") != 0) add_word(&r, envs[i], strlen(envs[i]));
  add_home_users(&r, envs[2]);
  bf_copy_opts co = {.map_file = map_file,
                     .map_qualname = map_qualname,
                     .map_json = map_json,
                     .ud = &r,
                     .drop_host_command = 1,
                     .mark_redacted = 1};
  int rc = extract(src, session_id, out_path, &co, new_id);
  sodium_memzero(r.key, sizeof r.key);
  for (size_t i = 0; i < r.nwords; i++) free(r.words[i]);
  return rc;
}
