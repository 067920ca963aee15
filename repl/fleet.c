/* fleet.c — backends and credentials for push and import --from pyroscope
 * (see fleet.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "fleet.h"
#include "otlp.h"
#include "text.h"

static int add_header(dest *d, const char *name, size_t nlen, const char *value, size_t vlen, const char *from) {
  for (size_t i = 0; i < nlen; i++)
    if (name[i] <= ' ' || name[i] == ':' || (unsigned char)name[i] >= 0x7f) {
      bf_cli_error("a header name from %s is not a valid HTTP token: fix %s", from, from);
      return 2;
    }
  for (size_t i = 0; i < vlen; i++)
    if (value[i] == '\r' || value[i] == '\n' || value[i] == 0) {
      bf_cli_error("a header value from %s holds a line break: fix %s", from, from);
      return 2;
    }
  if (nlen == 0 || d->nhdr == MAX_HEADERS) {
    bf_cli_error("%s: %s", from, nlen ? "more than 32 headers" : "a header without a name");
    return 2;
  }
  char *h = malloc(nlen + vlen + 3);
  if (!h) return 1;
  sprintf(h, "%.*s: %.*s", (int)nlen, name, (int)vlen, value);
  d->hdr[d->nhdr++] = h;
  if (vlen) d->secret[d->nsecret++] = h + nlen + 2;
  return 0;
}

struct header_pairs {
  dest *d;
  const char *var;
};

static int header_pair(void *ud, const char *k, size_t klen, const char *v, size_t vlen) {
  struct header_pairs *h = ud;
  return add_header(h->d, k, klen, v, vlen, h->var);
}

/* OTEL_EXPORTER_OTLP_HEADERS: "k=v,k2=v2", values percent-decoded. */
int bf_fleet_otel_headers(dest *d, const char *var) {
  char dec[4096];
  struct header_pairs h = {d, var};
  return bf_otel_pairs(getenv(var), dec, sizeof dec, header_pair, &h);
}

static void b64(const char *in, size_t n, char *out) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)(unsigned char)in[i] << 16 | (i + 1 < n ? (uint32_t)(unsigned char)in[i + 1] << 8 : 0) |
                 (i + 2 < n ? (unsigned char)in[i + 2] : 0);
    out[o++] = t[v >> 18 & 63];
    out[o++] = t[v >> 12 & 63];
    out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? t[v & 63] : '=';
  }
  out[o] = 0;
}

/* Pyroscope: a bearer token, or basic auth, and the tenant, from the environment. */
int bf_fleet_pyroscope_auth(dest *d) {
  const char *tok = getenv("PYROSCOPE_AUTH_TOKEN"), *user = getenv("PYROSCOPE_BASIC_AUTH_USER"),
             *pw = getenv("PYROSCOPE_BASIC_AUTH_PASSWORD"), *tenant = getenv("PYROSCOPE_TENANT_ID");
  char v[8200];
  int rc = 0;
  if (tok && *tok && strlen(tok) < 4000) {
    snprintf(v, sizeof v, "Bearer %s", tok);
    rc = add_header(d, "Authorization", 13, v, strlen(v), "PYROSCOPE_AUTH_TOKEN");
  } else if (user && *user && strlen(user) + (pw ? strlen(pw) : 0) < 3000) {
    char up[6004], enc[8100];
    snprintf(up, sizeof up, "%s:%s", user, pw ? pw : "");
    b64(up, strlen(up), enc);
    snprintf(v, sizeof v, "Basic %s", enc);
    rc = add_header(d, "Authorization", 13, v, strlen(v), "PYROSCOPE_BASIC_AUTH_USER");
    if (!rc && pw && *pw) d->secret[d->nsecret++] = pw; /* the environment's copy: redacted too */
    memset(up, 0, sizeof up);
  }
  if (!rc && tenant && *tenant) rc = add_header(d, "X-Scope-OrgID", 13, tenant, strlen(tenant), "PYROSCOPE_TENANT_ID");
  memset(v, 0, sizeof v);
  return rc;
}

/* --headers-file FILE: "Name: value" lines; a regular file of this user that
 * nobody else can read or write. */
int bf_fleet_headers_file(dest *d, const char *path) {
  FILE *f = fopen(path, "r");
  struct stat st;
  if (!f) {
    bf_cli_error("cannot read headers file '%s': %s", path, strerror(errno));
    return 2;
  }
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
    fclose(f);
    bf_cli_error("headers file '%s' must be a regular file of yours that only you can read (chmod 600 '%s')", path,
                 path);
    return 2;
  }
  char line[4200];
  int rc = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    size_t n = strcspn(line, "\r\n");
    line[n] = 0;
    if (n == 0 || line[0] == '#') continue;
    char *colon = strchr(line, ':');
    if (!colon) {
      rc = 2;
      bf_cli_error("headers file '%s': a line without ':' (expected 'Name: value')", path);
      break;
    }
    char *v = colon + 1;
    while (*v == ' ') v++;
    rc = add_header(d, line, (size_t)(colon - line), v, strlen(v), "the headers file");
  }
  memset(line, 0, sizeof line);
  fclose(f);
  return rc;
}

/* --to URL (or the OTLP endpoint variables) into d->url and d->kind. */
int bf_fleet_dest(dest *d, const char *to, const char *pyro_path) {
  char buf[2048];
  const char *rest, *scheme, *path;
  if (!to) {
    const char *sig = getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"), *base = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (sig && *sig) {
      snprintf(buf, sizeof buf, "otlp+%s", sig);
    } else if (base && *base) {
      size_t n = strlen(base);
      snprintf(buf, sizeof buf, "otlp+%.*s/v1development/profiles", (int)(n && base[n - 1] == '/' ? n - 1 : n), base);
    } else {
      bf_cli_error("push needs --to URL (otlp+http://HOST:4318, pyroscope://HOST:4040) or OTEL_EXPORTER_OTLP_ENDPOINT");
      return 2;
    }
    to = buf;
  }
  if (strncmp(to, "otlp+http://", 12) == 0 || strncmp(to, "otlp+https://", 13) == 0) {
    d->kind = DEST_OTLP;
    scheme = to[9] == 's' ? "https://" : "http://";
    rest = to + (to[9] == 's' ? 13 : 12);
    path = "/v1development/profiles";
  } else if (strncmp(to, "pyroscope://", 12) == 0 || strncmp(to, "pyroscope+https://", 18) == 0 ||
             strncmp(to, "pyroscope+http://", 17) == 0) {
    d->kind = DEST_PYROSCOPE;
    scheme = to[9] == '+' && to[14] == 's' ? "https://" : "http://";
    rest = strstr(to, "://") + 3;
    path = pyro_path;
  } else {
    char pub[512];
    bf_http_url_public(to, pub, sizeof pub);
    bf_cli_error("'%s' is not a push destination: use otlp+http://HOST:4318, otlp+https://..., pyroscope://HOST:4040 "
                 "or pyroscope+https://...", pub);
    return 2;
  }
  size_t hostlen = strcspn(rest, "/?#");
  if (hostlen == 0 || strchr(rest, '?') || strchr(rest, '#')) {
    bf_cli_error("push --to: expected SCHEME://HOST[:PORT][/PATH] without a query");
    return 2;
  }
  /* an explicit path is kept (a collector or Pyroscope behind a prefix) */
  const char *given = rest + hostlen;
  size_t gl = strlen(given);
  while (gl && given[gl - 1] == '/') gl--;
  int n;
  if (d->kind == DEST_OTLP && gl)
    n = snprintf(d->url, sizeof d->url, "%s%.*s%.*s", scheme, (int)hostlen, rest, (int)gl, given);
  else
    n = snprintf(d->url, sizeof d->url, "%s%.*s%.*s%s", scheme, (int)hostlen, rest, (int)gl, given, path);
  if (n < 0 || (size_t)n >= sizeof d->url) {
    bf_cli_error("push --to: the URL is too long");
    return 2;
  }
  bf_http_url_public(d->url, d->shown, sizeof d->shown);
  return 0;
}

void bf_fleet_dest_free(dest *d) {
  for (size_t i = 0; i < d->nhdr; i++) {
    memset(d->hdr[i], 0, strlen(d->hdr[i]));
    free(d->hdr[i]);
  }
}

void bf_fleet_redact(const dest *d, const char *msg, char *buf, size_t len) {
  char tmp[2048];
  snprintf(tmp, sizeof tmp, "%s", msg);
  for (size_t i = 0; i < d->nsecret; i++) {
    size_t sl = strlen(d->secret[i]);
    if (sl < 4) continue; /* too short to tell from ordinary text */
    char *p;
    while ((p = strstr(tmp, d->secret[i]))) {
      char rest[2048];
      snprintf(rest, sizeof rest, "%s", p + sl);
      snprintf(p, sizeof tmp - (size_t)(p - tmp), "[redacted]%s", rest);
    }
  }
  char inert[2048];
  snprintf(buf, len, "%s", bf_inert(tmp, inert, sizeof inert));
}

