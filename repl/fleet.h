/* fleet.h — what `push` and `import --from pyroscope` share: the backend a
 * URL names, and the credentials for it (from the environment or a 0600
 * headers file), kept in memory only and scrubbed from every message. */
#ifndef BF_REPL_FLEET_H
#define BF_REPL_FLEET_H

#include <stddef.h>

#include "cli.h"
#include "http.h"
#include "store.h"

#define MAX_HEADERS 32

typedef enum { DEST_OTLP, DEST_PYROSCOPE } dest_kind;

typedef struct dest {
  dest_kind kind;
  char url[2048];   /* http(s)://host:port/path (no query) */
  char shown[512];  /* what messages name: the URL without user information */
  char *hdr[MAX_HEADERS + 1]; /* "Name: value", owned */
  size_t nhdr;
  const char *secret[MAX_HEADERS]; /* header values, borrowed from hdr, redacted from messages */
  size_t nsecret;
  const char *service;
  int gzip;
  bf_http_req rq; /* bounds and TLS options */
  bf_sample_filter filter; /* push --since/--until: one window of each session */
  int retries;
} dest;

/* --to URL (NULL: the OTLP endpoint variables) into d->url, d->shown and
 * d->kind; pyroscope URLs get pyro_path ("/ingest", or the querier's method)
 * after any path of their own. 0 or the exit status (said on stderr). */
int bf_fleet_dest(dest *d, const char *to, const char *pyro_path);

/* OTLP headers from the variable var ("k=v,..."), Pyroscope's bearer/basic
 * auth and tenant from PYROSCOPE_*, and a headers file (a regular file of this
 * user, mode 0600 or stricter): added to d. 0 or the exit status. */
int bf_fleet_otel_headers(dest *d, const char *var);
int bf_fleet_pyroscope_auth(dest *d);
int bf_fleet_headers_file(dest *d, const char *path);

/* msg with every credential replaced by "[redacted]", shown inert, into buf. */
void bf_fleet_redact(const dest *d, const char *msg, char *buf, size_t len);

/* Wipes and frees the headers. */
void bf_fleet_dest_free(dest *d);

/* `import --from pyroscope ...` (cmd_import_pyroscope.c), which cmd_import.c
 * hands its arguments to when --from is among them. */
int bf_cmd_import_pyroscope(bf_cli *cli, int argc, char **argv);

/* Does an import command line use an option of --from's (--from, --query,
 * --since, --until, --profile-type, --headers-file, --timeout, --cacert,
 * --insecure)? Then it is bf_cmd_import_pyroscope's. */
int bf_import_is_fleet(int argc, char **argv);

#endif
