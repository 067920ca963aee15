/* commands.c — the table of every `bifocal` command (one line each). In a
 * usage line "@export", "@record" and "@view" stand for the names of
 * core/formats.c's rows with that role, joined by '|'. */
#include <string.h>

#include "cli.h"

#define BF_DECL(n) int bf_cmd_##n(bf_cli *cli, int argc, char **argv);
BF_DECL(sessions)
BF_DECL(import)
BF_DECL(replay)
BF_DECL(export)
BF_DECL(record)
BF_DECL(attach)
BF_DECL(dump)
BF_DECL(top)
BF_DECL(live)
BF_DECL(trace)
BF_DECL(diff)
BF_DECL(calibrate)
BF_DECL(demo)
BF_DECL(run)
BF_DECL(correlate)
BF_DECL(audit)
BF_DECL(redact)
BF_DECL(gc)
BF_DECL(keygen)
BF_DECL(push)
#undef BF_DECL

const bf_cmd bf_cmds[] = {
    {"sessions", bf_cmd_sessions, "sessions [--json]", "list sessions with their metadata", NULL},
    {"import", bf_cmd_import, "import FILE [--label L] [--ttl T] [--key SECRET.key] | import --from pyroscope URL --query SEL [--since T] [--until T] [--label L]", "import collapsed stacks (FlameGraph, py-spy raw, austin text), a sealed export, or a fleet-merged profile from Pyroscope", NULL},
    {"replay", bf_cmd_replay, "replay ID [--view @view] [-o FILE] [--json] [--limit N] [--sort self|total] [--thread T] [--since S] [--until S] [--html] [--buckets N] [--tree] [--memory]", "show a view of a session", NULL},
    {"export", bf_cmd_export, "export ID --format @export -o FILE [--thread T] [--since S] [--until S] [--tree] [--memory] | export ID --format bifocal --encrypt-to PUBKEY -o FILE", "write a session in another tool's format, or sealed for one recipient", NULL},
    {"attach", bf_cmd_attach, "attach [record options] PID", "record an existing process (Tachyon's spelling of record -p PID)", NULL},
    {"record", bf_cmd_record, "record [-r HZ] [-d S] [-o FILE [-f FMT]] [--clock wall|cpu] [-g] [-i|--no-idle] [-n] [-s] [--async] [-m] [--label L] [--commit SHA] [--ttl T] [--push URL [--every 10s] [--push-spool-max 64MB]] (-p PID | -- CMD ...)", "sample a Python process into a new session; prints its id", NULL},
    {"dump", bf_cmd_dump, "dump [-j] [-l] [-n] [-s] (-p PID | PID)", "current Python stack of every thread of a process, once, and what each waits on", NULL},
    {"top", bf_cmd_top, "top [-d S] [-r HZ] [-g] [-i] [-n] [-s] [--limit N] (-p PID | PID)", "sample a process for a while and print its hottest functions", NULL},
    {"live", bf_cmd_live, "live [-r HZ] [-g] [-i] [-n] [-s] (-p PID | PID)", "refreshing top-like view of a process (q quit, s sort, t threads)", NULL},
    {"trace", bf_cmd_trace, "trace [--clock wall|cpu] [--focus GLOB] [--no-builtins] [--memory] [--tool-id N] [--label L] [--ttl T] [--records N] -- python[3.X] (script.py | -m module | -c cmd) [ARGS]", "exact call counts, edges and call times of a Python run (prints the session id)", NULL},
    {"diff", bf_cmd_diff, "diff A B [--threshold PP] [--json] [--force] [--limit N] [--view flame -o F.html]", "per-function change of share between two sessions, with significance", NULL},
    {"run", bf_cmd_run, "run [--out DIR] [--unsafe] [--timeout S] [--memory SIZE] SCRIPT.lua [ARGS]", "run a Lua check; exit 0 all checks held, 1 one failed, 2 script error", "Sandboxed by default: no os.execute, io.popen, package.loadlib, C modules or binary\nchunks, and files may be written only under --out DIR. --unsafe lifts the sandbox.\nCtrl-C or --timeout S stops a runaway script; --memory SIZE caps its memory (default 1G).\nA bare SCRIPT name is also looked up among the shipped scripts."},
    {"correlate", bf_cmd_correlate, "correlate SAMPLED TRACED [--json] [--limit N]", "join a sampled and a traced session per function", NULL},
    {"calibrate", bf_cmd_calibrate, "calibrate [--rate HZ] [--clock wall|cpu] [--json] [--label L] [--memory] -- python script.py ARGS", "trace and sample the same run; report how far the estimates are from the truth", NULL},
    {"demo", bf_cmd_demo, "demo [--dir DIR] [--python PY] [--seconds S]", "the whole story on a bundled workload: sample, trace, correlate, gate, flame graph", NULL},
    {"audit", bf_cmd_audit, "audit [--json]", "who attached to which process, when, and how it ended", NULL},
    {"redact", bf_cmd_redact, "redact ID -o OUT.db [--keep PREFIX ...]",
     "copy a session with file paths hashed and host/command line dropped", NULL},
    {"gc", bf_cmd_gc, "gc [--force]", "delete expired sessions (--ttl) and reclaim the space", NULL},
    {"push", bf_cmd_push, "push SESSION... [--to URL] [--service NAME] [--headers-file FILE] [--timeout S] [--retries N] [--cacert FILE] [--insecure] [--since S] [--until S] [--json] | push ID --follow [--every 10s] [--to URL] | push --resume [SESSION...] --to URL",
     "send sessions to a fleet backend: OTLP profiles (otlp+http://HOST:4318) or Pyroscope (pyroscope://HOST:4040)",
     "Credentials come from OTEL_EXPORTER_OTLP_HEADERS, PYROSCOPE_AUTH_TOKEN, PYROSCOPE_BASIC_AUTH_USER/PASSWORD\nor --headers-file FILE (mode 0600, 'Name: value' lines); they are never stored or printed.\nEach request is bounded by --timeout S (default 10) and retried --retries N times (default 3)\non refusal, timeouts, 5xx and 429 (Retry-After honoured up to 30 s)."},
    {"keygen", bf_cmd_keygen, "keygen [-o NAME]", "make NAME.pub / NAME.key for encrypted sharing", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const bf_cmd *bf_cli_find(const char *name) {
  for (const bf_cmd *c = bf_cmds; c->name; c++)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}
