/* http.h — one HTTP request through libcurl, bounded in every dimension:
 * whole-transfer and connect timeouts, response size, redirects (same origin
 * only, so headers carrying secrets never reach another host), http/https
 * only, TLS certificates and host names verified unless the caller says not.
 * Messages never contain header values or URL user information. */
#ifndef BF_HTTP_H
#define BF_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct bf_http_req {
  const char *method;               /* "POST" (default when NULL) or "GET" */
  const char *url;                  /* http:// or https:// */
  const char *const *headers;       /* "Name: value" lines, NULL-terminated; may be NULL */
  const void *body;                 /* POST body (may be NULL with body_len 0) */
  size_t body_len;
  long timeout_ms;                  /* whole request, redirects included; 0: 10 s */
  long connect_timeout_ms;          /* 0: min(timeout, 5 s) */
  size_t max_response;              /* response body bytes kept; 0: 1 MiB; more is an error */
  int max_redirects;                /* same-origin redirects followed (method and body kept) */
  const char *ca_file;              /* CA bundle instead of the system's; may be NULL */
  int insecure;                     /* 1: do not verify TLS certificates (never the default) */
} bf_http_req;

typedef struct bf_http_resp {
  long status;                      /* HTTP status of the last response; 0 when none came */
  uint8_t *body;                    /* caller frees (bf_http_resp_free); NUL-terminated */
  size_t len;
  char content_type[128];
  long retry_after_s;               /* Retry-After in seconds (delta form); -1 when absent */
} bf_http_resp;

typedef enum {
  BF_HTTP_OK = 0,       /* a response arrived (any status) */
  BF_HTTP_CONNECT,      /* refused, unreachable, DNS: nothing was sent */
  BF_HTTP_TIMEOUT,      /* the bound passed */
  BF_HTTP_TRANSFER,     /* the connection broke mid-way (the server may have the request) */
  BF_HTTP_TOO_BIG,      /* the response passed max_response */
  BF_HTTP_TLS,          /* certificate or handshake refused */
  BF_HTTP_REDIRECT,     /* a redirect to another origin, or too many */
  BF_HTTP_USAGE,        /* bad URL or scheme, or libcurl could not be set up */
} bf_http_result;

/* Send rq. OUT: *resp (zeroed first; body set whenever a response came, also
 * on BF_HTTP_TOO_BIG: the part kept); when the result is not BF_HTTP_OK, err
 * (may be NULL) gets it as code and one line naming the host, the cause and
 * the fix. */
bf_http_result bf_http_send(const bf_http_req *rq, bf_http_resp *resp, bf_err *err);

/* Accepts a zeroed response. */
void bf_http_resp_free(bf_http_resp *resp);

/* url without user information or query ("https://host:port/path") into buf. */
void bf_http_url_public(const char *url, char *buf, size_t len);

#endif
