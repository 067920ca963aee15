/* share.c — keygen, sealed export and verified import of one session.
 * The decrypted database only ever touches disk as a private temporary file
 * (0600, unlinked at once after use) because SQLite opens files, not buffers.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "clock.h"
#include "copy.h"
#include "share.h"
#include "jsonw.h"
#include "session_json.h"
#include "store_int.h"

#define INNER_MAGIC "BFSESS1\0"
#define INNER_HDR 16 /* magic + u64le length */
#define FPR_LEN 8
#define PUB_PREFIX "bifocal-pub-1 "
#define KEY_PREFIX "bifocal-key-1 "
/* A sealed database may inflate to at most BF_SHARE_MAX_RATIO times its
 * compressed size, or BF_SHARE_MIN_BOUND: an export of real sessions
 * compresses 2-3:1, an empty one (mostly empty pages) 50:1 at 90 KiB. */
#define BF_SHARE_MAX_RATIO 64
#define BF_SHARE_MIN_BOUND (64 << 20)

static void fingerprint(const unsigned char pk[crypto_box_PUBLICKEYBYTES], unsigned char out[FPR_LEN]) {
  crypto_generichash(out, FPR_LEN, pk, crypto_box_PUBLICKEYBYTES, NULL, 0);
}

static void hex(const unsigned char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
  out[2 * n] = 0;
}

/* Read a whole file (at most max bytes). OUT: *buf (caller frees), *len. */
static int read_all(const char *path, int64_t max, unsigned char **buf, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -EINVAL;
  }
  if (st.st_size > max) {
    close(fd);
    return -EFBIG;
  }
  unsigned char *b = malloc((size_t)st.st_size + 1);
  if (!b) {
    close(fd);
    return -ENOMEM;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  b[got] = 0;
  *buf = b;
  *len = got;
  return 0;
}

/* Write buf to path through a temporary and rename; mode applies on create. */
static int write_file(const char *path, int mode, int excl, const unsigned char *buf, size_t len,
                      const char *protect_db) {
  char *tmp = NULL;
  if (excl) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    ssize_t w = write(fd, buf, len);
    int e = (w == (ssize_t)len) ? 0 : (w < 0 ? -errno : -EIO);
    if (close(fd) != 0 && !e) e = -errno;
    if (e) unlink(path);
    return e;
  }
  /* like every -o: follow a symlink to its target; write a device or FIFO
   * in place; never replace the database being read (or its -wal/-shm) */
  char real[PATH_MAX], link[PATH_MAX];
  struct stat st;
  int direct = 0;
  snprintf(real, sizeof real, "%s", path);
  for (int hops = 0; lstat(real, &st) == 0 && S_ISLNK(st.st_mode); hops++) { /* dangling too */
    ssize_t n = hops < 40 ? readlink(real, link, sizeof link - 1) : -1;
    if (n < 0) return hops < 40 ? -errno : -ELOOP;
    link[n] = 0;
    char *slash = strrchr(real, '/');
    if (link[0] == '/' || !slash) snprintf(real, sizeof real, "%s", link);
    else if ((size_t)snprintf(slash + 1, sizeof real - (size_t)(slash + 1 - real), "%s", link) >=
             sizeof real - (size_t)(slash + 1 - real))
      return -ENAMETOOLONG;
  }
  path = real;
  if (stat(real, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return -EISDIR;
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) direct = 1;
    else if (!S_ISREG(st.st_mode)) return -EPERM;
    static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; protect_db && i < 4; i++) {
      char p[PATH_MAX + 16];
      struct stat d;
      snprintf(p, sizeof p, "%s%s", protect_db, sfx[i]);
      if (stat(p, &d) == 0 && d.st_dev == st.st_dev && d.st_ino == st.st_ino) return -EEXIST;
    }
  }
  int fd;
  if (direct) {
    fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
  } else {
    const char *slash = strrchr(path, '/');
    if (asprintf(&tmp, "%.*s.%s.bifocal-XXXXXX", slash ? (int)(slash - path + 1) : 0, path,
                 slash ? slash + 1 : path) < 0)
      return -ENOMEM;
    fd = mkostemp(tmp, O_CLOEXEC); /* 0600 */
    if (fd >= 0 && mode != 0600) fchmod(fd, (mode_t)mode);
  }
  if (fd < 0) {
    int e = -errno;
    free(tmp);
    return e;
  }
  size_t off = 0;
  int e = 0;
  while (off < len) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? -errno : -EIO;
      break;
    }
    off += (size_t)w;
  }
  if (!e && tmp && fsync(fd) != 0) e = -errno;
  if (close(fd) != 0 && !e) e = -errno;
  if (tmp) {
    if (!e && rename(tmp, path) != 0) e = -errno;
    if (e) unlink(tmp);
    free(tmp);
  }
  return e;
}

/* Parse "PREFIX BASE64", or bare base64 when prefix may be omitted. */
static int parse_key(const char *text, const char *prefix, int bare_ok, unsigned char out[32]) {
  while (*text == ' ' || *text == '\t') text++;
  size_t pl = strlen(prefix);
  if (strncmp(text, prefix, pl) == 0)
    text += pl;
  else if (!bare_ok)
    return -EINVAL;
  size_t n = strcspn(text, " \t\r\n");
  size_t bin_len = 0;
  if (sodium_base642bin(out, 32, text, n, NULL, &bin_len, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      bin_len != 32)
    return -EINVAL;
  return 0;
}

int bf_share_keygen(const char *name, char fpr[17], bf_err *err) {
  if (sodium_init() < 0) {
    return bf_err_set(err, -EIO, "cannot initialise libsodium");
  }
  unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
  crypto_box_keypair(pk, sk);
  char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_ORIGINAL)];
  char line[160];
  char *pub_path = NULL, *key_path = NULL;
  int rc = -ENOMEM;
  if (asprintf(&pub_path, "%s.pub", name) < 0 || asprintf(&key_path, "%s.key", name) < 0) {
    bf_err_set(err, rc, "out of memory");
    goto out;
  }
  if (access(pub_path, F_OK) == 0 || access(key_path, F_OK) == 0) {
    rc = -EEXIST;
    bf_err_set(err, rc, "'%s' or '%s' already exists; choose another name", pub_path, key_path);
    goto out;
  }
  sodium_bin2base64(b64, sizeof b64, sk, sizeof sk, sodium_base64_VARIANT_ORIGINAL);
  int n = snprintf(line, sizeof line, KEY_PREFIX "%s\n", b64);
  if ((rc = write_file(key_path, 0600, 1, (unsigned char *)line, (size_t)n, NULL))) {
    bf_err_set(err, rc, "cannot write '%s': %s", key_path, strerror(-rc));
    goto out;
  }
  sodium_bin2base64(b64, sizeof b64, pk, sizeof pk, sodium_base64_VARIANT_ORIGINAL);
  n = snprintf(line, sizeof line, PUB_PREFIX "%s\n", b64);
  if ((rc = write_file(pub_path, 0644, 1, (unsigned char *)line, (size_t)n, NULL))) {
    bf_err_set(err, rc, "cannot write '%s': %s", pub_path, strerror(-rc));
    unlink(key_path);
    goto out;
  }
  unsigned char f[FPR_LEN];
  fingerprint(pk, f);
  hex(f, FPR_LEN, fpr);
out:
  sodium_memzero(sk, sizeof sk);
  sodium_memzero(line, sizeof line);
  sodium_memzero(b64, sizeof b64);
  free(pub_path);
  free(key_path);
  return rc;
}

static int load_pub(bf_store *s, const char *arg, unsigned char pk[32]) {
  unsigned char *buf = NULL;
  size_t len = 0;
  int rc;
  if (access(arg, F_OK) == 0) {
    if ((rc = read_all(arg, 4096, &buf, &len)))
      return bf_store_fail(s, rc, "cannot read public key '%s': %s", arg, strerror(-rc));
    if (strncmp((char *)buf, KEY_PREFIX, strlen(KEY_PREFIX)) == 0)
      rc = bf_store_fail(s, -EINVAL, "'%s' is a secret key, not the recipient's public key", arg);
    else if (parse_key((char *)buf, PUB_PREFIX, 1, pk))
      rc = bf_store_fail(s, -EINVAL, "'%s' is not a bifocal public key", arg);
    free(buf);
    return rc;
  }
  if (parse_key(arg, PUB_PREFIX, 1, pk))
    return bf_store_fail(s, -EINVAL, "public key '%s': no such file and not a base64 public key", arg);
  return 0;
}

int bf_share_export(bf_store *src, int64_t session_id, const char *pub, const char *out_path) {
  if (sodium_init() < 0) return bf_store_fail(src, -EIO, "cannot initialise libsodium");
  unsigned char pk[crypto_box_PUBLICKEYBYTES];
  int rc = load_pub(src, pub, pk);
  if (rc) return rc;
  unsigned char *db = NULL, *plain = NULL, *sealed = NULL;
  size_t db_len = 0, plain_len = 0;
  /* the one-session copy is made in memory: no plaintext ever on disk, so a
   * kill leaves nothing behind */
  bf_store *mem = NULL;
  bf_err msg = BF_ERR_INIT;
  int64_t new_id = 0;
  if ((rc = bf_store_open_memory(&mem, &msg))) {
    bf_store_fail(src, rc, "%s", bf_err_msg(&msg, "cannot open a database in memory"));
    goto out;
  }
  if ((rc = bf_session_copy(src, session_id, mem, NULL, &new_id)) || (rc = bf_store_flush(mem))) {
    bf_store_fail(src, rc, "%s", bf_store_errmsg(mem));
    bf_store_close(mem);
    goto out;
  }
  rc = bf_store_image(mem, BF_SHARE_MAX_BYTES, &db, &db_len);
  bf_store_close(mem);
  if (rc) {
    rc = bf_store_fail(src, rc == -EFBIG ? -EFBIG : -ENOMEM,
                       rc == -EFBIG ? "the session is too large to seal" : "out of memory");
    goto out;
  }
  uLongf zlen = compressBound((uLong)db_len);
  if (!(plain = malloc(INNER_HDR + zlen))) {
    rc = bf_store_fail(src, -ENOMEM, "out of memory");
    goto out;
  }
  memcpy(plain, INNER_MAGIC, 8);
  for (int i = 0; i < 8; i++) plain[8 + i] = (unsigned char)((uint64_t)db_len >> (8 * i));
  if (compress2(plain + INNER_HDR, &zlen, db, (uLong)db_len, 6) != Z_OK) {
    rc = bf_store_fail(src, -EIO, "compression failed");
    goto out;
  }
  plain_len = INNER_HDR + zlen;
  size_t out_len = BF_SHARE_MAGIC_LEN + FPR_LEN + crypto_box_SEALBYTES + plain_len;
  if (!(sealed = malloc(out_len))) {
    rc = bf_store_fail(src, -ENOMEM, "out of memory");
    goto out;
  }
  memcpy(sealed, BF_SHARE_MAGIC, BF_SHARE_MAGIC_LEN);
  fingerprint(pk, sealed + BF_SHARE_MAGIC_LEN);
  if (crypto_box_seal(sealed + BF_SHARE_MAGIC_LEN + FPR_LEN, plain, plain_len, pk) != 0) {
    rc = bf_store_fail(src, -EIO, "encryption failed");
    goto out;
  }
  if ((rc = write_file(out_path, 0600, 0, sealed, out_len, bf_store_path(src))))
    bf_store_fail(src, rc, rc == -EEXIST ? "refusing to write '%s': it is the open database; choose another output path"
                           : rc == -ENOSPC ? "cannot write '%s': %s (free some space or write elsewhere)"
                                          : "cannot write '%s': %s",
                  out_path, strerror(-rc));
out:
  if (db) sodium_memzero(db, db_len);
  if (plain) sodium_memzero(plain, plain_len);
  free(db);
  free(plain);
  free(sealed);
  return rc;
}

int bf_share_is_sealed(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  char hdr[BF_SHARE_MAGIC_LEN];
  ssize_t n = read(fd, hdr, sizeof hdr);
  close(fd);
  return n == BF_SHARE_MAGIC_LEN && memcmp(hdr, BF_SHARE_MAGIC, BF_SHARE_MAGIC_LEN) == 0;
}

static int load_secret(bf_store *s, const char *key_path, unsigned char sk[32]) {
  struct stat st;
  if (stat(key_path, &st) != 0)
    return bf_store_fail(s, -errno, "cannot read key '%s': %s", key_path, strerror(errno));
  unsigned char *buf = NULL;
  size_t len = 0;
  int rc = read_all(key_path, 4096, &buf, &len);
  if (rc) return bf_store_fail(s, rc, "cannot read key '%s': %s", key_path, strerror(-rc));
  if (strncmp((char *)buf, PUB_PREFIX, strlen(PUB_PREFIX)) == 0)
    rc = bf_store_fail(s, -EINVAL, "'%s' is a public key, not your secret key", key_path);
  else if (parse_key((char *)buf, KEY_PREFIX, 0, sk))
    rc = bf_store_fail(s, -EINVAL, "'%s' is not a bifocal secret key", key_path);
  sodium_memzero(buf, len);
  free(buf);
  return rc;
}

/* Check the decrypted database before trusting anything in it: anyone who has
 * the public key can make a sealed file, so its content is untrusted input. */
static int verify_db(bf_store *dst, bf_store *in, const char *path, int64_t *session_id) {
  if (bf_store_check_untrusted(in)) return bf_store_fail(dst, -EBADMSG, "'%s': the enclosed database is damaged; nothing imported", path);
  bf_session_info **list = NULL;
  size_t n = 0;
  if (bf_store_session_list(in, &list, &n))
    return bf_store_fail(dst, -EBADMSG, "'%s': %s; nothing imported", path, bf_store_errmsg(in));
  bf_err why = BF_ERR_INIT;
  int bad_meta = 0;
  if (n == 1) {
    *session_id = list[0]->id;
    /* its metadata ends up inside our JSON: one well-formed object that does
     * not pose as our own fields, or nothing is imported */
    bad_meta = list[0]->extra_json &&
               bf_json_check_object(list[0]->extra_json, bf_session_reserved_extra_keys, &why) != 0;
  }
  for (size_t i = 0; i < n; i++) bf_session_info_free(list[i]);
  free(list);
  if (bad_meta)
    return bf_store_fail(dst, -EBADMSG, "'%s': the session's metadata (extra) is refused: %s; nothing imported", path,
                         why.msg);
  if (n != 1)
    return bf_store_fail(dst, -EBADMSG, "'%s' holds %zu sessions, expected exactly one; nothing imported", path, n);
  return 0;
}

int bf_share_import(bf_store *dst, const char *path, const char *key_path, const bf_import_opts *io,
                    int64_t *new_id) {
  if (sodium_init() < 0) return bf_store_fail(dst, -EIO, "cannot initialise libsodium");
  unsigned char sk[crypto_box_SECRETKEYBYTES], pk[crypto_box_PUBLICKEYBYTES];
  unsigned char *file = NULL, *plain = NULL, *db = NULL;
  size_t file_len = 0, plain_len = 0, db_len = 0;
  bf_store *in = NULL;
  int rc = load_secret(dst, key_path, sk);
  if (rc) return rc;
  crypto_scalarmult_base(pk, sk);
  if ((rc = read_all(path, BF_SHARE_MAX_BYTES, &file, &file_len))) {
    bf_store_fail(dst, rc, "cannot read '%s': %s", path, strerror(-rc));
    goto out;
  }
  size_t hdr = BF_SHARE_MAGIC_LEN + FPR_LEN;
  if (file_len < hdr + crypto_box_SEALBYTES + INNER_HDR || memcmp(file, BF_SHARE_MAGIC, BF_SHARE_MAGIC_LEN) != 0) {
    rc = bf_store_fail(dst, -EBADMSG, "'%s' is not a sealed bifocal export (or is truncated); nothing imported", path);
    goto out;
  }
  unsigned char f[FPR_LEN];
  fingerprint(pk, f);
  if (sodium_memcmp(f, file + BF_SHARE_MAGIC_LEN, FPR_LEN) != 0) {
    char want[2 * FPR_LEN + 1], have[2 * FPR_LEN + 1];
    hex(file + BF_SHARE_MAGIC_LEN, FPR_LEN, want);
    hex(f, FPR_LEN, have);
    rc = bf_store_fail(dst, -EACCES,
                       "'%s' is encrypted to key %s, not to '%s' (%s); nothing imported", path, want, key_path, have);
    goto out;
  }
  plain_len = file_len - hdr - crypto_box_SEALBYTES;
  if (!(plain = malloc(plain_len))) {
    rc = bf_store_fail(dst, -ENOMEM, "out of memory");
    goto out;
  }
  if (crypto_box_seal_open(plain, file + hdr, file_len - hdr, pk, sk) != 0) {
    rc = bf_store_fail(dst, -EBADMSG, "'%s' fails authentication: tampered, truncated or not for this key; nothing imported",
                       path);
    goto out;
  }
  uint64_t want_len = 0;
  for (int i = 0; i < 8; i++) want_len |= (uint64_t)plain[8 + i] << (8 * i);
  if (memcmp(plain, INNER_MAGIC, 8) != 0 || want_len == 0 || want_len > (uint64_t)BF_SHARE_MAX_BYTES) {
    rc = bf_store_fail(dst, -EBADMSG, "'%s': unknown content format; nothing imported", path);
    goto out;
  }
  /* The size comes from the file, not from its own header: nothing bigger
   * than what a bifocal database can compress from is allocated or inflated. */
  uint64_t zlen = plain_len - INNER_HDR, bound = zlen * BF_SHARE_MAX_RATIO;
  if (bound < BF_SHARE_MIN_BOUND) bound = BF_SHARE_MIN_BOUND;
  if (want_len > bound) {
    rc = bf_store_fail(dst, -EBADMSG,
                       "'%s' claims %llu bytes of database from %llu compressed, more than a bifocal export ever "
                       "compresses (%d:1 above %d MiB); it was not made by bifocal; nothing imported",
                       path, (unsigned long long)want_len, (unsigned long long)zlen, BF_SHARE_MAX_RATIO,
                       BF_SHARE_MIN_BOUND >> 20);
    goto out;
  }
  /* decrypted only into memory: nothing readable is ever on disk, so no
   * kill (even SIGKILL) can leave plaintext behind */
  uLongf got = (uLongf)want_len;
  if (!(db = bf_store_image_buf_alloc(want_len)) ||
      uncompress(db, &got, plain + INNER_HDR, (uLong)(plain_len - INNER_HDR)) != Z_OK || got != want_len) {
    rc = bf_store_fail(dst, db ? -EBADMSG : -ENOMEM, "'%s': enclosed data does not decompress; nothing imported", path);
    goto out;
  }
  db_len = (size_t)got;
  bf_err msg = BF_ERR_INIT;
  rc = bf_store_open_image(db, db_len, path, &in, &msg);
  db = NULL; /* owned by the store now */
  if (rc) {
    rc = bf_store_fail(dst, -EBADMSG, "'%s': enclosed database: %s; nothing imported", path, bf_err_msg(&msg, "unreadable"));
    goto out;
  }
  int64_t sid = 0;
  if ((rc = verify_db(dst, in, path, &sid))) goto out;
  bf_copy_opts co = {.label = io ? io->label : NULL};
  if (io && io->ttl_ns > 0) co.expires_at_ns = bf_wall_ns() + io->ttl_ns;
  if ((rc = bf_session_copy(in, sid, dst, &co, new_id))) {
    char m[512];
    snprintf(m, sizeof m, "%s", bf_store_errmsg(dst));
    bf_store_fail(dst, rc, "'%s': %s; nothing imported", path, m);
  }
out:
  bf_store_close(in);
  sodium_memzero(sk, sizeof sk);
  if (plain) sodium_memzero(plain, plain_len);
  if (db) sodium_memzero(db, db_len);
  free(file);
  free(plain);
  bf_store_image_buf_free(db);
  return rc;
}
