/* cli_hints.c — the command line's advice on library errors. The libraries
 * (core/, sampling/, tracing/) say what is wrong with which thing and know no
 * option names; when one of their messages has a remedy on the command line,
 * this table names it, and bf_cli_error/bf_cli_warn add it to the line.
 */
#include <stddef.h>
#include <string.h>

#include "cli.h"

/* A message ending with `says` gets " (hint)". Each `says` is quoted from the
 * library (the file is named); change both together. */
static const struct {
  const char *says;
  const char *hint;
} hints[] = {
    /* core/view_heatmap.c */
    {"is traced: it has no samples over time for a heatmap",
     "see --view functions, --view flame, or export --format chrome for the call timeline"},
    /* core/view_stack.c */
    {"is traced: it has no sampled stacks", "see --view flame for caller→callee paths"},
    /* core/export_chrome.c */
    {"the chrome export of a traced session needs it recorded in focus mode", "try --format speedscope or pstats"},
    {"its samples carry no times, so there is no timeline to export", "try --format speedscope or collapsed"},
    /* core/view_tasks.c */
    {"the tasks view needs a sampled session", "record one with `bifocal record --async`"},
    /* core/view_gil.c */
    {"is traced: the GIL view needs a sampled session", "bifocal record samples each thread's GIL and CPU state"},
    /* core/store/handle.c (bfs opening a database that is not there) */
    {"does not exist yet", "record or import something first, or pass --db"},
    /* core/store/handle.c (bfs_fail_sql) */
    {"the disk is full; free some space", "or use another --db"},
    {"try again when that process is done", "or use another --db"},
    /* core/store/schema.c */
    {"is a SQLite database but not a bifocal one", "choose another file with --db"},
    /* core/share.c */
    {"is a secret key, not the recipient's public key", "--encrypt-to takes the recipient's .pub file"},
    {"no such file and not a base64 public key", "--encrypt-to takes a .pub file or its base64 text"},
    {"is a public key, not your secret key", "--key takes your .key file"},
    {"is not a bifocal public key", "make one with `bifocal keygen`"},
    {"is not a bifocal secret key", "make one with `bifocal keygen`"},
    {"already exists; choose another name", "keygen -o NAME"},
    /* sampling/attach.c (explain_eperm; yama's ptrace_scope is 0 to 3) */
    {"kernel.yama.ptrace_scope is 1",
     "run as root, `sudo sysctl kernel.yama.ptrace_scope=0`, or launch the target with `bifocal record -- CMD`"},
    {"kernel.yama.ptrace_scope is 2",
     "run as root, `sudo sysctl kernel.yama.ptrace_scope=0`, or launch the target with `bifocal record -- CMD`"},
    {"kernel.yama.ptrace_scope is 3",
     "run as root, `sudo sysctl kernel.yama.ptrace_scope=0`, or launch the target with `bifocal record -- CMD`"},
    /* sampling/native/native.c (bf_smp_native_new) */
    {"is not a comma list of thread ids or name globs", "see --native-threads"},
    /* sampling/native/native_threads.c (explain_trace: the thread has another tracer) */
    {"only one tracer at a time", "detach it, or record without --native"},
    /* core/correlate.c (bf_join_sessions) */
    {", not traced", "see `bifocal sessions`"},
};

const char *bf_cli_hint(const char *msg) {
  size_t n = msg ? strlen(msg) : 0;
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
    size_t k = strlen(hints[i].says);
    if (n >= k && strcmp(msg + n - k, hints[i].says) == 0) return hints[i].hint;
  }
  return NULL;
}
