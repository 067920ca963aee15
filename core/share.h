/* share.h — encrypted sharing of one session: libsodium sealed boxes around a
 * compressed single-session database, and the key files that go with them.
 *
 * Sealed file: "BFSEAL1\n" | 8-byte recipient fingerprint | crypto_box_seal of
 * ("BFSESS1\0" | u64le database length | zlib stream of the database).
 */
#ifndef BF_SHARE_H
#define BF_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "import.h"
#include "store.h"

#define BF_SHARE_MAGIC "BFSEAL1\n"
#define BF_SHARE_MAGIC_LEN 8
#define BF_SHARE_MAX_BYTES (1LL << 31) /* refuse bigger sealed files */

/* Make a key pair: name.pub (mode 0644, "bifocal-pub-1 BASE64") and name.key
 * (mode 0600, "bifocal-key-1 BASE64"). Refuses to overwrite either.
 * OUT: fpr (17 bytes) gets the public key's fingerprint in hex. Returns 0 or
 * a negative errno, also in err (may be NULL) with a one-line message. */
int bf_share_keygen(const char *name, char fpr[17], bf_err *err);

/* Seal session_id of src for the public key pub (a .pub file, or its text, or
 * bare base64) into out_path (mode 0600, written via a temporary and rename;
 * an existing file is replaced). Host and command line are kept: the file can
 * only be opened by the key's holder. Errors on src's handle. */
int bf_share_export(bf_store *src, int64_t session_id, const char *pub, const char *out_path);

/* 1 when path starts with BF_SHARE_MAGIC, 0 when not, negative errno when it
 * cannot be read. */
int bf_share_is_sealed(const char *path);

/* Open the sealed file at path with the secret key in key_path, verify it
 * (authentication, inner format, SQLite integrity, exactly one session) and
 * copy its session into dst with new ids; io's label and ttl (counted from
 * now), when set, replace the sender's. All or nothing: on any error dst is
 * unchanged and the message is on dst's handle. io may be NULL.
 * OUT: *new_id. */
int bf_share_import(bf_store *dst, const char *path, const char *key_path, const bf_import_opts *io,
                    int64_t *new_id);

#endif
