/* otlp.h — sessions as OpenTelemetry profiles (opentelemetry-proto 1.11.0,
 * profiles/v1development): an ExportProfilesServiceRequest, encoded by hand,
 * with one ResourceProfiles per session and one shared dictionary. The same
 * bytes decode as ProfilesData (its fields 1 and 2 are the request's). */
#ifndef BF_OTLP_H
#define BF_OTLP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"

typedef struct bf_otlp_opts {
  const char *service_name;        /* resource service.name; NULL: "unknown_service:bifocal" */
  const char *resource_attributes; /* OTEL_RESOURCE_ATTRIBUTES syntax ("k=v,k2=v2", values
                                      percent-decoded; a malformed pair is skipped); may be NULL */
} bf_otlp_opts;

/* Encode sessions ids[0..n) (f may be NULL; o may be NULL).
 * Per session: Resource (service.name, host.name, process.pid,
 * process.command_line, process.runtime.name/version, then the resource
 * attributes), scope "bifocal", and profiles sharing the session's context as
 * attributes (bifocal.session.*, clock, mode, rate, Python build, commit,
 * label, status, sample totals):
 *   sampled  — samples/count, and cpu|wall/nanoseconds, both with period;
 *   traced   — calls/count (exact: one sample per caller→callee edge, the
 *              callee first), and cpu|wall/nanoseconds over rebuilt paths;
 *   imported — samples/count.
 * Samples carry thread.id, thread.name and bifocal.task attributes. A time
 * window in f (since/until) narrows the profiles' time range to it, and so
 * their profile_id, derived from the session and that range.
 * OUT: *buf (caller frees), *len; untouched on failure (message on the handle). */
int bf_otlp_encode(bf_store *s, const int64_t *ids, size_t n, const bf_sample_filter *f,
                   const bf_otlp_opts *o, uint8_t **buf, size_t *len);

/* `export --format otlp`: bf_otlp_encode of one session, uncompressed, to out. */
int bf_export_otlp(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* The "k=v,k2=v2" lists of OTEL_RESOURCE_ATTRIBUTES and
 * OTEL_EXPORTER_OTLP_HEADERS (spec may be NULL): for each part with an '=',
 * its key and value trimmed of spaces and the value percent-decoded into dec
 * (at most cap bytes: the rest of a longer value is dropped), then fn(ud,
 * key, klen, dec, vlen); a part without '=' is skipped. Returns fn's first
 * nonzero return (the pairs after it are not read), else 0. */
int bf_otel_pairs(const char *spec, char *dec, size_t cap,
                  int (*fn)(void *ud, const char *k, size_t klen, const char *v, size_t vlen), void *ud);

#endif
