/* exports.h — a session in other tools' formats (collapsed, speedscope, pstats,
 * pprof, Chrome, Gecko, and the memory forms). Every function writes to a
 * caller-given FILE and reports errors on the store handle; none prints
 * anything else. */
#ifndef BF_EXPORTS_H
#define BF_EXPORTS_H

#include <stdio.h>

#include "store.h"

/* Collapsed stacks (FlameGraph input): one line per distinct stack,
 * frames "qualname (file:firstlineno:line)" outermost first, then the count
 * (or weight for cpu-clock and imported sessions). Re-importable by
 * bf_import_collapsed with the same function shares. */
int bf_export_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* speedscope JSON (https://www.speedscope.app/file-format-schema.json): shared
 * frames; sampled/imported sessions one time-ordered "sampled" profile per
 * thread (weights in ns, or samples for imports); traced sessions one
 * "evented" profile per thread from focus call records, else rebuilt paths. */
int bf_export_speedscope(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* pstats (.prof) in marshal format, loadable by pstats.Stats on Python 3.8+,
 * in cProfile's shapes: keys (file, firstlineno, co_name) or ("~", 0, C label),
 * entries (cc, nc, tt, ct, callers), caller entries (nc, cc, tt, ct).
 * Traced: cc/nc = primitive/all calls, tt/ct = self/total seconds, callers from
 * edges. Sampled: cc = samples with the function on the stack, nc = frames
 * of it counting recursion, tt/ct = self/total seconds of
 * sample weight; imported: seconds = samples / rate (1 kHz when unknown). */
int bf_export_pstats(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* pprof: gzip-compressed profile.proto with value types samples/count (traced:
 * calls/count) and cpu|wall/nanoseconds (not for imports); default index as
 * replay shares; unique module-qualified function names; every sample kept. */
int bf_export_pprof(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* Chrome/Perfetto trace-event JSON: a per-thread timeline of a sampled
 * session, or the focus-mode call records of a traced one. -ENODATA for
 * imports and traced sessions without call records. */
int bf_export_chrome(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* Gecko profile format (Firefox Profiler, format version 30): per sampled
 * thread its string, frame and stack tables and samples [stack, ms since
 * meta.startTime, 0]; frames "qualname (file:firstlineno)" with their line.
 * -ENODATA for traced and imported sessions (no sample times). */
int bf_export_gecko(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* ---- memory (sessions recorded with record --memory; view_memory.c) ---------
 * Each returns -ENODATA (message on the handle) for a session without memory
 * rows. */

/* Collapsed stacks weighted by bytes of resident growth. */
int bf_export_memory_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);
/* pprof with sample types samples/count (changes that grew) and
 * alloc_space/bytes (resident growth, the default); no period. */
int bf_export_pprof_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);
/* speedscope: one "sampled" profile per thread, unit "bytes" of growth. */
int bf_export_speedscope_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

#endif
