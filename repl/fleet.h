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

/* d with push's defaults (3 retries, 10 s, 1 MiB answers, 3 same-origin
 * redirects, OTEL_SERVICE_NAME); then bf_fleet_push_dest: --to URL (NULL:
 * the OTLP variables), compression, the credentials of its kind and the
 * headers file (may be NULL). 0 or the exit status (said on stderr). */
void bf_fleet_dest_init(dest *d);
int bf_fleet_push_dest(dest *d, const char *to, const char *hfile);

/* One request's body, URL (d->url, plus Pyroscope's query) and type. */
typedef struct bf_push_payload {
  char *body; /* caller frees */
  size_t len;
  char url[8192];
  char ctype[128];
} bf_push_payload;

/* How sending went. error (code 0: the message alone) is redacted
 * (bf_fleet_redact). */
typedef struct bf_push_outcome {
  int ok;
  long status;
  int attempts;
  size_t bytes;
  int retryable;       /* the last failure may pass (refused, timeout, 5xx, 429) */
  long retry_after_ms; /* the last answer's Retry-After; -1 when none */
  bf_err error;
} bf_push_outcome;

/* Session id (its info in) encoded for d, d->filter's window of it
 * (cmd_push.c). 0 or a negative errno (message on s). OUT: *p. */
int bf_push_encode(const dest *d, bf_store *s, int64_t id, const bf_session_info *in, bf_push_payload *p);

/* Send p to d, with d->retries retries after a failure that may pass
 * (backoff from 0.5 s doubling to 8 s, or the answer's Retry-After up to
 * 30 s). OUT: *out. */
void bf_push_send(const dest *d, const bf_push_payload *p, bf_push_outcome *out);

/* push --resume [SESSION...]: the windows record --push left in the spool
 * for d (pending or refused), per session in window order, each with
 * d->retries; a session stops at its first window that is not delivered
 * (push_record.c). 0, or 1 when any stays. */
int bf_push_resume(bf_cli *cli, const dest *d, bf_store *s, char **ids, int nids);

/* record --push URL --every D [--push-spool-max SIZE] [--push-headers FILE]
 * [--push-wait S] [--push-timeout S] (push_record.c). */
typedef struct bf_push_cfg {
  const char *to, *hfile;
  int64_t every_ns, spool_max_bytes;
  long wait_ms, timeout_ms; /* after the capture; one request (0: 10 s) */
  int others;               /* an option of --push's was given (it needs --push) */
} bf_push_cfg;
#define BF_PUSH_OPT 0x3000
#define BF_PUSH_RECORD_OPTIONS                                                                         \
  {"push", required_argument, NULL, BF_PUSH_OPT}, {"every", required_argument, NULL, BF_PUSH_OPT + 1}, \
      {"push-spool-max", required_argument, NULL, BF_PUSH_OPT + 2},                                    \
      {"push-headers", required_argument, NULL, BF_PUSH_OPT + 3},                                      \
      {"push-wait", required_argument, NULL, BF_PUSH_OPT + 4},                                         \
      {"push-timeout", required_argument, NULL, BF_PUSH_OPT + 5}

/* One of those options (c in BF_PUSH_OPT..+5) into cfg. 0, or 2 (said). */
int bf_push_record_opt(int c, const char *arg, bf_push_cfg *cfg);

/* record's pusher: a process of its own (nice +10, the stop signals
 * blocked, killed with its parent) with its own connection to db_path. It
 * waits for *o->session_started (set here), spools each window of cfg->every_ns once closed (a sample 1.5 s past its
 * end is stored, or the session ended, or 10 s passed without a sample) and
 * sends the spooled windows in order, retrying with backoff (Retry-After
 * honoured); past cfg->spool_max_bytes the oldest waiting windows are
 * dropped and said (stderr, an audit row). Nothing here blocks the caller.
 * OUT: *out. 0 or the exit status (said). */
typedef struct bf_push_rec bf_push_rec;
struct bf_smp_record_opts;
int bf_push_rec_start(const bf_push_cfg *cfg, const char *db_path, struct bf_smp_record_opts *o, bf_push_rec **out);

/* The capture ended (its session sid finalised, 0: none): spool the last
 * window, send for at most cfg->wait_ms more (plus one request's timeout),
 * let the process end (stopped past that bound plus 5 s), note extra.push
 * on the session and say on stderr what was sent and what waits. Frees p; accepts NULL. 0 or 1 (said). */
int bf_push_rec_end(bf_push_rec *p, bf_store *st, int64_t sid);

/* `import --from pyroscope ...` (cmd_import_pyroscope.c), which cmd_import.c
 * hands its arguments to when --from is among them. */
int bf_cmd_import_pyroscope(bf_cli *cli, int argc, char **argv);

/* Does an import command line use an option of --from's (--from, --query,
 * --since, --until, --profile-type, --headers-file, --timeout, --cacert,
 * --insecure)? Then it is bf_cmd_import_pyroscope's. */
int bf_import_is_fleet(int argc, char **argv);

#endif
