/* http.c — bf_http_send over libcurl's easy interface: one handle per call,
 * redirects followed by hand so that only same-origin ones are taken, the
 * response collected up to its bound, failures sorted into bf_http_result. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http.h"

typedef struct sink {
  bf_http_resp *r;
  size_t max, cap;
  int too_big;
} sink;

static size_t on_body(char *d, size_t sz, size_t nm, void *ud) {
  sink *k = ud;
  size_t n = sz * nm;
  if (k->r->len + n > k->max) {
    n = k->max - k->r->len;
    k->too_big = 1;
  }
  if (k->r->len + n + 1 > k->cap) {
    size_t cap = k->cap ? k->cap : 4096;
    while (cap < k->r->len + n + 1) cap *= 2;
    uint8_t *b = realloc(k->r->body, cap);
    if (!b) return 0;
    k->r->body = b;
    k->cap = cap;
  }
  memcpy(k->r->body + k->r->len, d, n);
  k->r->len += n;
  k->r->body[k->r->len] = 0;
  return k->too_big ? 0 : sz * nm;
}

static size_t on_header(char *d, size_t sz, size_t nm, void *ud) {
  bf_http_resp *r = ud;
  size_t n = sz * nm;
  if (n > 12 && strncasecmp(d, "Retry-After:", 12) == 0) {
    char v[32];
    size_t l = n - 12 < sizeof v - 1 ? n - 12 : sizeof v - 1;
    memcpy(v, d + 12, l);
    v[l] = 0;
    char *end;
    long s = strtol(v, &end, 10);
    while (*end == ' ' || *end == '\r' || *end == '\n') end++;
    /* the delta form only; an HTTP date reads as absent (the caller backs off) */
    r->retry_after_s = (*end == 0 && s >= 0 && end != v) ? s : -1;
  } else if (n >= 5 && strncmp(d, "HTTP/", 5) == 0) {
    r->retry_after_s = -1; /* a new response (after 100-continue or a redirect) */
  }
  return n;
}

void bf_http_url_public(const char *url, char *buf, size_t len) {
  const char *p = strstr(url, "://");
  const char *host = p ? p + 3 : url;
  const char *end = host + strcspn(host, "/?#");
  const char *at = memchr(host, '@', (size_t)(end - host));
  if (at) host = at + 1;
  size_t path = strcspn(end, "?#");
  snprintf(buf, len, "%.*s%.*s%.*s", p ? (int)(p + 3 - url) : 0, url, (int)(end - host), host, (int)path, end);
}

/* "scheme://host:port" of url into buf; 0, or -1 when it does not parse. */
static int origin(const char *url, char *buf, size_t len) {
  CURLU *u = curl_url();
  char *sc = NULL, *host = NULL, *port = NULL;
  int rc = -1;
  if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &sc, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    snprintf(buf, len, "%s://%s:%s", sc, host, port);
    rc = 0;
  }
  curl_free(sc);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return rc;
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static bf_http_result classify(CURLcode c, int too_big) {
  switch (c) {
    case CURLE_OK: return BF_HTTP_OK;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return BF_HTTP_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return BF_HTTP_TIMEOUT;
    case CURLE_WRITE_ERROR: return too_big ? BF_HTTP_TOO_BIG : BF_HTTP_TRANSFER;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE: return BF_HTTP_TLS;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_FAILED_INIT:
    case CURLE_OUT_OF_MEMORY: return BF_HTTP_USAGE;
    default: return BF_HTTP_TRANSFER;
  }
}

static const char *fix_of(bf_http_result r) {
  switch (r) {
    case BF_HTTP_CONNECT: return "check the host and port, and that the receiver runs";
    case BF_HTTP_TIMEOUT: return "the receiver is slow or unreachable; raise --timeout or try later";
    case BF_HTTP_TRANSFER: return "the connection broke; try again";
    case BF_HTTP_TOO_BIG: return "the receiver answered with more than the bound; is it the right endpoint?";
    case BF_HTTP_TLS: return "the certificate was refused; give --cacert FILE for a private CA";
    default: return "check the URL";
  }
}

/* One request (no redirect followed). */
static CURLcode attempt(CURL *h, const bf_http_req *rq, const char *url, struct curl_slist *hdrs, long left_ms,
                        sink *k, char *ebuf) {
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, left_ms > 1 ? left_ms : 1L);
  long ct = rq->connect_timeout_ms > 0 ? rq->connect_timeout_ms : 5000;
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ct < left_ms ? ct : (left_ms > 1 ? left_ms : 1L));
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, rq->insecure ? 0L : 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, rq->insecure ? 0L : 2L);
  if (rq->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, rq->ca_file);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "bifocal/" BF_VERSION);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, k);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, k->r);
  if (!rq->method || strcmp(rq->method, "POST") == 0) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
  }
  ebuf[0] = 0;
  return curl_easy_perform(h);
}

bf_http_result bf_http_send(const bf_http_req *rq, bf_http_resp *resp, bf_err *err) {
  memset(resp, 0, sizeof *resp);
  resp->retry_after_s = -1;
  char pub[512], org0[512], orgn[512], ebuf[CURL_ERROR_SIZE], url[4096];
  bf_http_url_public(rq->url, pub, sizeof pub);
  if (origin(rq->url, org0, sizeof org0) || strlen(rq->url) >= sizeof url) {
    bf_err_set(err, BF_HTTP_USAGE, "'%s' is not a URL bifocal can send to (expected http://HOST:PORT/...)", pub);
    return BF_HTTP_USAGE;
  }
  snprintf(url, sizeof url, "%s", rq->url);
  static int inited;
  if (!inited && curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK) inited = 1;
  CURL *h = curl_easy_init();
  struct curl_slist *hdrs = NULL;
  /* no "Expect: 100-continue" round trip: the body goes at once */
  hdrs = curl_slist_append(hdrs, "Expect:");
  for (size_t i = 0; rq->headers && rq->headers[i]; i++) hdrs = curl_slist_append(hdrs, rq->headers[i]);
  if (!h || !hdrs) {
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    bf_err_set(err, BF_HTTP_USAGE, "cannot set up libcurl (out of memory)");
    return BF_HTTP_USAGE;
  }
  long timeout = rq->timeout_ms > 0 ? rq->timeout_ms : 10000, deadline = now_ms() + timeout;
  sink k = {.r = resp, .max = rq->max_response ? rq->max_response : 1 << 20};
  bf_http_result res = BF_HTTP_OK;
  for (int hop = 0;; hop++) {
    resp->len = 0;
    k.too_big = 0;
    CURLcode c = attempt(h, rq, url, hdrs, deadline - now_ms(), &k, ebuf);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    if ((res = classify(c, k.too_big)) != BF_HTTP_OK) {
      if (res == BF_HTTP_TOO_BIG)
        bf_err_set(err, res, "%s: the response is larger than %zu bytes: %s", pub, k.max, fix_of(res));
      else
        bf_err_set(err, res, "%s: %s: %s", pub, ebuf[0] ? ebuf : curl_easy_strerror(c), fix_of(res));
      break;
    }
    char *ctype = NULL, *loc = NULL;
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
    snprintf(resp->content_type, sizeof resp->content_type, "%s", ctype ? ctype : "");
    if (resp->status < 300 || resp->status >= 400) break;
    curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc);
    if (!loc) break; /* a 3xx without Location is the answer */
    char lpub[512];
    bf_http_url_public(loc, lpub, sizeof lpub);
    if (origin(loc, orgn, sizeof orgn) || strcmp(orgn, org0) != 0 || strlen(loc) >= sizeof url) {
      bf_err_set(err, BF_HTTP_REDIRECT, "%s redirects to another origin (%s): not followed, so the request's headers stay with "
               "%s; send to the new address directly", pub, lpub, org0);
      res = BF_HTTP_REDIRECT;
      break;
    }
    if (hop >= rq->max_redirects) {
      bf_err_set(err, BF_HTTP_REDIRECT, "%s: more than %d redirects: send to the final address directly", pub, rq->max_redirects);
      res = BF_HTTP_REDIRECT;
      break;
    }
    snprintf(url, sizeof url, "%s", loc);
  }
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(h);
  return res;
}

void bf_http_resp_free(bf_http_resp *resp) {
  if (!resp) return;
  free(resp->body);
  resp->body = NULL;
  resp->len = 0;
}
