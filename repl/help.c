/* help.c — every option of every command, once: `bifocal help CMD`, the man
 * page (`bifocal help --man`, built into bifocal.1 at build time), the bash
 * and zsh completion scripts (`bifocal help --completion bash|zsh`) and the
 * REPL's option-value completion all read this table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "formats.h"

#ifndef BF_VERSION
#define BF_VERSION "0.0.0"
#endif

/* values: what completes after the option — a space list of words, "@file"
 * (a path), "@dir", "@session", "@export" / "@record" / "@view" (the names of
 * core/formats.c's rows with that role), or NULL (a free value, or no value
 * when the spelling names none). In help, "@exts" stands for the extensions
 * record -o tells formats by. */
typedef struct bf_opt_doc {
  const char *cmd;      /* NULL = global option */
  const char *spelling; /* "-p, --pid PID" */
  const char *values;
  const char *help;
} bf_opt_doc;

/* Rows several commands share, word for word. */
#define GIL_OPT(c) {c, "-g, --gil", NULL, "only the thread holding the GIL (py-spy -g)"}
#define NATIVE_OPTS(c)                                                                          \
  {c, "-n, --native", NULL, "merged Python and C stacks; stops each thread briefly (py-spy -n)"}, \
      {c, "--native-threads N|GLOB,...", NULL,                                                  \
       "only these thread ids or name globs get C stacks (implies --native)"}
#define NONBLOCKING_OPT(c) \
  {c, "--nonblocking", NULL, "accepted for py-spy: bifocal never pauses the target (except --native)"}
#define THREAD_OPT(c) \
  {c, "-t, --thread T", NULL, "only this thread (native id or name)"}
#define SINCE_UNTIL_OPTS(c)                                                       \
  {c, "--since S", NULL, "only samples from S seconds after the session start"}, \
      {c, "--until S", NULL, "only samples until S seconds after the session start"}

#define SAMPLE_OPTS(c)                                                                                  \
  {c, "-p, --pid PID", NULL, "the process to sample (also accepted as the only argument)"},            \
      {c, "-r, --rate HZ", NULL, "samples per second (default 200; 100 with --native)"},                \
      GIL_OPT(c),                                                                                      \
      {c, "-i, --idle", NULL, "count idle threads in the function table too (py-spy -i)"},              \
      NATIVE_OPTS(c),                                                                                  \
      {c, "-s, --subprocesses", NULL, "the Python child processes too, attached as they appear (py-spy -s)"}, \
      NONBLOCKING_OPT(c)

static const bf_opt_doc docs[] = {
    {NULL, "-D, --db DB", "@file", "the database (default $BIFOCAL_DB, else ./bifocal.db); -d is py-spy's --duration"},
    {NULL, "-h, --help", NULL, "the list of commands; `bifocal help CMD` for one command"},
    {NULL, "-V, --version", NULL, "print the version"},

    {"sessions", "-j, --json", NULL, "one JSON array of session objects"},

    {"import", "-l, --label L", NULL, "label of the new session"},
    {"import", "-t, --ttl T", NULL, "expire the session after T (90s, 30m, 12h, 7d; see gc)"},
    {"import", "-k, --key SECRET.key", "@file", "open a sealed export with this secret key (see keygen)"},
    {"import", "--from pyroscope", "pyroscope", "the fleet's merged profile from Pyroscope at URL (pyroscope://, pyroscope+https://, http(s)://)"},
    {"import", "--query SELECTOR", NULL, "with --from: the label selector, e.g. '{service_name=\"checkout\"}'"},
    {"import", "--since T", NULL, "with --from: window start (Unix seconds, now-1h, 2026-12-01T10:00:00Z; default now-1h)"},
    {"import", "--until T", NULL, "with --from: window end (default now)"},
    {"import", "--profile-type ID", NULL, "with --from: default process_cpu:cpu:nanoseconds:cpu:nanoseconds"},
    {"import", "--headers-file FILE", "@file", "with --from: extra 'Name: value' headers from a 0600 file of yours"},
    {"import", "--timeout S", NULL, "with --from: bound of the request (default 30)"},
    {"import", "--cacert FILE", "@file", "with --from: verify TLS against this CA bundle"},
    {"import", "--insecure", NULL, "with --from: do not verify TLS certificates"},

    {"replay", "-v, --view V", "@view", "the view (default functions)"},
    {"replay", "-j, --json", NULL, "machine-readable output (functions view)"},
    {"replay", "-n, --limit N", NULL, "at most N rows"},
    {"replay", "-s, --sort K", "self total", "order rows by self or total share"},
    THREAD_OPT("replay"),
    {"replay", "--task NAME", NULL, "only this asyncio task (record --async)"},
    SINCE_UNTIL_OPTS("replay"),
    {"replay", "-o, --output FILE", "@file", "write to FILE (atomically) instead of stdout; .svg: the flame graph "
                                             "as SVG; .html: every view as a page"},
    {"replay", "--html", NULL, "heatmap as an HTML page"},
    {"replay", "--buckets N", NULL, "heatmap time buckets (2 to 1000)"},
    {"replay", "--memory", NULL, "record --memory sessions: functions by resident growth/shrink/net, flame "
                                 "weighted by bytes of growth, heatmap as the resident-memory timeline"},
    {"replay", "--tree", NULL, "the session and its subprocesses' sessions (record -s) as one; "
                               "a child's own id shows that process alone"},

    {"export", "-f, --format F", "@export",
     "the output format (py-spy's flamegraph = svg, raw = collapsed, chrometrace = chrome)"},
    {"export", "-o, --output FILE", "@file", "the file to write ('-' for stdout)"},
    THREAD_OPT("export"),
    SINCE_UNTIL_OPTS("export"),
    {"export", "--encrypt-to PUBKEY", "@file", "with --format bifocal: sealed for the owner of PUBKEY"},
    {"export", "--tree", NULL, "the session and its subprocesses' sessions (record -s) as one"},
    {"export", "--memory", NULL, "record --memory sessions: collapsed, pprof (alloc_space) or speedscope "
                                 "weighted by bytes of resident growth"},

    {"record", "-p, --pid PID", NULL, "attach to a running process (py-spy -p)"},
    {"record", "-r, --rate HZ", NULL, "samples per second, 1 to 1000000 (default 1000; 100 with --native); "
                                      "Tachyon's 10khz, 500hz accepted"},
    {"record", "-d, --duration S", NULL, "stop after S (10, 10s, 2m); default: until the target exits or Ctrl-C"},
    {"record", "-o, --output FILE", "@file",
     "also write FILE; without --db (or $BIFOCAL_DB) only FILE is written, no database is kept"},
    {"record", "-f, --format F", "@record", "format of -o FILE (default: from the extension: @exts)"},
    {"record", "--collapsed, --flamegraph, --pstats, --gecko", NULL, "Tachyon's spellings of -f collapsed|flame|pstats|gecko"},
    {"record", "--mode M", "wall cpu gil exception", "Tachyon's spelling: --clock wall, --clock cpu, --gil, --exceptions"},
    {"record", "--exceptions", NULL, "only samples of threads handling (in except/finally) or raising an exception; "
                                     "wall clock (Tachyon --mode exception)"},
    {"record", "--opcodes", NULL, "the leaf frame's bytecode instruction, specialised form included (3.11+; "
                                  "replay --view opcodes; Tachyon --opcodes)"},
    {"record", "-a, --all-threads", NULL, "accepted for Tachyon: bifocal always samples every thread"},
    {"record", "--clock C", "wall cpu", "wall: every thread charged real time; cpu: only CPU time used"},
    GIL_OPT("record"),
    {"record", "-i, --idle", NULL, "keep idle threads (the default; py-spy -i)"},
    {"record", "--no-idle", NULL, "wall clock: leave out threads found idle"},
    NATIVE_OPTS("record"),
    {"record", "--kernel", NULL, "wall clock: the kernel lens (each sample's syscall and target, run-queue delay, page faults; see replay --view waits)"},
    {"record", "--async", NULL, "asyncio tasks as task:NAME threads (wall clock, not with --native)"},
    {"record", "-m, --memory", NULL, "also charge resident-memory growth and shrink to the stack that ran "
                                     "(austin -m; see replay --memory, docs/memory.md)"},
    {"record", "-s, --subprocesses", NULL, "follow Python children, one session each (py-spy -s); "
                                           "-o FILE holds the whole tree (replay/export --tree)"},
    NONBLOCKING_OPT("record"),
    {"record", "--label L", NULL, "a free label for the load window; usable as the session id"},
    {"record", "--commit SHA", NULL, "the code version (default: git rev-parse HEAD in the target's cwd)"},
    {"record", "--ttl T", NULL, "expire the session after T (90s, 30m, 12h, 7d; see gc)"},
    {"record", "--push URL", "otlp+http:// otlp+https:// pyroscope:// pyroscope+https://",
     "push each window as it closes (credentials as for push); unsent windows wait in the database"},
    {"record", "--every DURATION", NULL, "with --push: the window (1s .. 1h, default 10s)"},
    {"record", "--push-spool-max SIZE", NULL, "unsent windows kept at most (default 64MB), then the oldest are dropped"},
    {"record", "--push-headers FILE", "@file", "with --push: extra 'Name: value' headers from a 0600 file of yours"},
    {"record", "--push-wait S", NULL, "after the capture, keep pushing at most S more (default 5)"},
    {"record", "--push-timeout S", NULL, "bound of each push request (default 10)"},

    {"dump", "-p, --pid PID", NULL, "the process (also accepted as the only argument)"},
    {"dump", "-j, --json", NULL, "one JSON object: pid, python_version, threads with name, kernel (what the thread "
                                 "waits on: class, wait, run_delay_ns, major_faults) and frames (function, file, "
                                 "line; innermost first)"},
    {"dump", "-l, --locals", NULL, "each Python frame's local variables: int, bool, float, str, bytes and None "
                                   "shown (capped), other objects by type (py-spy -l)"},
    NATIVE_OPTS("dump"),
    {"dump", "-s, --subprocesses", NULL, "the Python child processes too ({\"processes\": [...]} with --json)"},
    NONBLOCKING_OPT("dump"),

    SAMPLE_OPTS("top"),
    {"top", "-d, --duration S", NULL, "sample for S (default 2s)"},
    {"top", "--limit N", NULL, "at most N function rows (default 20)"},

    SAMPLE_OPTS("live"),
    {"live", "--limit N", NULL, "at most N function rows (default: what fits the terminal)"},

    {"trace", "--clock C", "wall cpu", "time calls by wall or CPU clock"},
    {"trace", "--focus GLOB", NULL, "record every call (timeline) of functions matching GLOB"},
    {"trace", "--no-builtins", NULL, "leave out C functions"},
    {"trace", "--memory", NULL, "exact allocations per function and edge (allocator hooks)"},
    {"trace", "--tool-id N", NULL, "sys.monitoring tool id 0..5 (default: the first free)"},
    {"trace", "--label L", NULL, "a free label; usable as the session id"},
    {"trace", "--ttl T", NULL, "expire the session after T"},
    {"trace", "--commit SHA", NULL, "the code version (default: git rev-parse HEAD)"},
    {"trace", "--records N", NULL, "at most N focus-mode call records"},

    {"diff", "--threshold PP", NULL, "hide rows whose change is below PP percentage points (default 0.5)"},
    {"diff", "-j, --json", NULL, "machine-readable output"},
    {"diff", "--force", NULL, "compare even when clock, rate or mode differ"},
    {"diff", "-n, --limit N", NULL, "at most N rows"},
    {"diff", "-v, --view V", "functions flame", "functions table or differential flame graph"},
    {"diff", "-o, --output FILE", "@file", "write to FILE (the flame view is HTML)"},

    {"run", "-o, --out DIR", "@dir", "the only directory the script may write"},
    {"run", "-u, --unsafe", NULL, "lift the sandbox (os.execute, io.popen, C modules)"},
    {"run", "-t, --timeout S", NULL, "stop the script after S"},
    {"run", "-m, --memory SIZE", NULL, "cap the script's memory (default 1G; e.g. 256M)"},

    {"correlate", "-j, --json", NULL, "machine-readable output"},
    {"correlate", "-n, --limit N", NULL, "at most N rows"},

    {"calibrate", "-r, --rate HZ", NULL, "sampling rate"},
    {"calibrate", "-c, --clock C", "wall cpu", "the clock of both lenses"},
    {"calibrate", "-j, --json", NULL, "machine-readable report"},
    {"calibrate", "-m, --memory", NULL, "sampled growth shares against the trace's exact live shares"},
    {"calibrate", "-l, --label L", NULL, "label of both sessions"},
    {"calibrate", "-n, --limit N", NULL, "at most N functions in the report"},

    {"demo", "--dir DIR", "@dir", "where to put the demo database and pages (default ./bifocal-demo)"},
    {"demo", "--python PY", "@file", "the interpreter to run the workload with (default $BIFOCAL_PYTHON, else python3)"},
    {"demo", "--seconds S", NULL, "how long the workload runs, 1 to 60 (default 4)"},

    {"audit", "-j, --json", NULL, "one JSON array of audit rows"},

    {"redact", "-o, --output OUT.db", "@file", "the redacted copy to write"},
    {"redact", "-k, --keep PREFIX", NULL, "keep paths under PREFIX readable (repeatable)"},

    {"gc", "-f, --force", NULL, "sweep unused stacks and strings even while a capture may be running"},

    {"keygen", "-o, --output NAME", "@file", "write NAME.pub and NAME.key"},

    {"push", "--to URL", "otlp+http:// otlp+https:// pyroscope:// pyroscope+https://",
     "the backend (default $OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT)"},
    {"push", "--service NAME", NULL, "service.name (OTLP) or application name (Pyroscope); default $OTEL_SERVICE_NAME"},
    {"push", "--headers-file FILE", "@file", "extra 'Name: value' headers (credentials) from a 0600 file of yours"},
    {"push", "--timeout S", NULL, "bound of each request, redirects included (default 10)"},
    {"push", "--retries N", NULL, "retries after refusal, timeout, 5xx or 429 (default 3, at most 10)"},
    {"push", "--cacert FILE", "@file", "verify TLS against this CA bundle instead of the system's"},
    {"push", "--insecure", NULL, "do not verify TLS certificates (never the default)"},
    {"push", "-j, --json", NULL, "one JSON array with each session's outcome"},
    {"push", "--since S", NULL, "only samples from S seconds after the session start (one window)"},
    {"push", "--until S", NULL, "only samples until S seconds after the session start"},
    {"push", "--follow", NULL, "push a session being recorded window by window as each closes, until it ends"},
    {"push", "--every DURATION", NULL, "with --follow: the window (1s .. 1h, default 10s)"},
    {"push", "--resume", NULL, "send the windows record --push left in the spool for --to (all sessions, or those given)"},
};
#define NDOCS (sizeof docs / sizeof *docs)

/* docs[i].values with the format lists filled in from core/formats.c (static,
 * built once per role), or NULL. */
static const char *values_of(size_t i) {
  static char lists[3][512];
  static const struct {
    const char *token;
    unsigned role;
    int aliases;
  } roles[] = {{"@export", BF_FMT_EXPORT, 0}, {"@record", BF_FMT_RECORD, 1}, {"@view", BF_FMT_VIEW, 0}};
  const char *v = docs[i].values;
  for (int r = 0; v && r < 3; r++)
    if (strcmp(v, roles[r].token) == 0) {
      if (!lists[r][0])
        snprintf(lists[r], sizeof lists[r], "%s", bf_format_list(roles[r].role, " ", roles[r].aliases ? BF_FMT_LIST_ALIASES : 0));
      return lists[r];
    }
  return v;
}

/* docs[i].help with "@exts" filled in (static until the next call). */
static const char *help_of(size_t i) {
  static char buf[1024];
  const char *h = docs[i].help, *at = strstr(h, "@exts");
  if (!at) return h;
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - h), h, bf_format_ext_list(" ", 1), at + 5);
  return buf;
}

/* docs[i] is an option of cmd (NULL: a global option). */
static int doc_of(size_t i, const char *cmd) {
  return cmd ? docs[i].cmd && strcmp(docs[i].cmd, cmd) == 0 : !docs[i].cmd;
}

/* The next option word of a spelling ("-p" then "--pid" in "-p, --pid PID"):
 * returns where it starts, its length in *n, and moves *s past it; NULL
 * when no word is left (then *s is at the value name, or at the end). */
static const char *next_word(const char **s, size_t *n) {
  while (**s == ' ' || **s == ',') (*s)++;
  if (**s != '-') return NULL;
  const char *w = *s;
  *n = strcspn(w, " ,|=");
  *s += *n;
  return w;
}

/* cmd->usage with "@export", "@record", "@view" filled in from core/formats.c
 * (static until the next call). */
static const char *usage_of(const bf_cmd *cmd) {
  static char buf[2048];
  static const struct {
    const char *token;
    unsigned role;
  } roles[] = {{"@export", BF_FMT_EXPORT}, {"@record", BF_FMT_RECORD}, {"@view", BF_FMT_VIEW}};
  buf[0] = 0;
  for (const char *u = cmd->usage; *u;) {
    const char *at = strchr(u, '@');
    size_t n = strlen(buf);
    if (!at) {
      snprintf(buf + n, sizeof buf - n, "%s", u);
      break;
    }
    int r = 0;
    while (r < 3 && strncmp(at, roles[r].token, strlen(roles[r].token)) != 0) r++;
    snprintf(buf + n, sizeof buf - n, "%.*s%s", (int)(at - u), u,
             r < 3 ? bf_format_list(roles[r].role, "|", BF_FMT_LIST_NO_SEALED) : "@");
    u = at + (r < 3 ? strlen(roles[r].token) : 1);
  }
  return buf;
}

void bf_cli_usage(const bf_cmd *cmd, FILE *f) {
  fprintf(f, "usage: bifocal %s\n  %s\n", usage_of(cmd), cmd->summary);
  if (cmd->help) fprintf(f, "\n%s\n", cmd->help);
  int any = 0;
  for (size_t i = 0; i < NDOCS; i++) {
    if (!doc_of(i, cmd->name)) continue;
    if (!any++) fputs("\noptions:\n", f);
    int w = (int)strlen(docs[i].spelling);
    fprintf(f, "  %s%*s%s\n", docs[i].spelling, w < 28 ? 28 - w : 1, w < 28 ? "" : " ", help_of(i));
    if (values_of(i) && values_of(i)[0] != '@') fprintf(f, "  %28sone of: %s\n", "", values_of(i));
  }
  fprintf(f, "%s  -h, --help                  this help\n", any ? "" : "\noptions:\n");
  fputs("\nglobal: --db DB (-D DB) names the database (default $BIFOCAL_DB, else ./bifocal.db)\n", f);
}

/* Option words of cmd (NULL = global), "--pid --rate ..." plus short ones. */
static void option_words(const char *cmd, FILE *f) {
  for (size_t i = 0; i < NDOCS; i++) {
    if (!doc_of(i, cmd)) continue;
    const char *s = docs[i].spelling, *w;
    size_t n;
    while ((w = next_word(&s, &n))) fprintf(f, " %.*s", (int)n, w);
  }
  fputs(" --help", f);
}

void bf_cli_option_names(const char *cmd, void (*fn)(void *ud, const char *opt), void *ud) {
  for (size_t i = 0; i < NDOCS; i++) {
    if (!doc_of(i, cmd)) continue;
    const char *s = docs[i].spelling, *at;
    size_t n;
    while ((at = next_word(&s, &n))) {
      char w[64];
      snprintf(w, sizeof w, "%.*s", (int)(n < 63 ? n : 63), at);
      if (w[1] == '-') fn(ud, w); /* long spellings only: they say what they do */
    }
  }
  fn(ud, "--help");
}

const char *bf_cli_option_values(const char *cmd, const char *opt) {
  for (size_t i = 0; i < NDOCS; i++) {
    if (!values_of(i) || !doc_of(i, cmd)) continue;
    const char *s = docs[i].spelling;
    size_t n = strlen(opt);
    for (const char *p = strstr(s, opt); p; p = strstr(p + 1, opt))
      if ((p == s || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0 || p[n] == ',')) return values_of(i);
  }
  return NULL;
}

/* roff-escape: backslashes and leading dots/quotes; '-' as \- for options. */
static void roff(FILE *f, const char *s) {
  if (*s == '.' || *s == '\'') fputs("\\&", f);
  for (; *s; s++) {
    if (*s == '\\')
      fputs("\\e", f);
    else if (*s == '-')
      fputs("\\-", f);
    else
      fputc(*s, f);
  }
}

/* The FORMATS section: every row of core/formats.c. */
static void man_formats(FILE *f) {
  static const char *const role_names[] = {"export", "record \\-o", "replay \\-\\-view"};
  static const char *const kind_names[] = {"sampled", "traced", "imported"};
  fputs(".SH FORMATS\nWhat export \\-\\-format, record \\-o FILE [\\-f FORMAT] and replay \\-\\-view write.\n", f);
  for (const bf_format *x = bf_formats; x->name; x++) {
    fputs(".TP\n.B ", f);
    roff(f, x->name);
    if (x->aliases) {
      fputs(" \\fR(also ", f);
      roff(f, x->aliases);
      fputs(")\\fP", f);
    }
    fputc('\n', f);
    roff(f, x->title);
    fputs(x->note ? ", " : "", f);
    if (x->note) roff(f, x->note);
    fputs("; for", f);
    for (int b = 0, n = 0; b < 3; b++)
      if (x->roles & (1u << b)) fprintf(f, "%s %s", n++ ? "," : "", role_names[b]);
    fputs("; sessions", f);
    for (int b = 0, n = 0; b < 3; b++)
      if (x->kinds & (1u << b)) fprintf(f, "%s %s", n++ ? "," : "", kind_names[b]);
    if (x->exts) {
      fputs("; files ", f);
      roff(f, x->exts);
    }
    fputs(".\n", f);
  }
}

/* One option of the man page: spelling, help and the values it takes. */
static void man_option(FILE *f, size_t i) {
  fputs(".TP\n.B ", f);
  roff(f, docs[i].spelling);
  fputc('\n', f);
  roff(f, help_of(i));
  if (values_of(i) && values_of(i)[0] != '@') {
    fputs(" (", f);
    roff(f, values_of(i));
    fputc(')', f);
  }
  fputc('\n', f);
}

static void man_page(FILE *f) {
  fputs(".TH BIFOCAL 1 \"\" \"bifocal " BF_VERSION "\" \"User Commands\"\n"
        ".SH NAME\nbifocal \\- sampling and tracing profiler workbench for CPython\n"
        ".SH SYNOPSIS\n.B bifocal\n[\\fB\\-\\-db\\fR \\fIDB\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n.br\n"
        ".B bifocal\n[\\fB\\-\\-db\\fR \\fIDB\\fR]\n"
        ".SH DESCRIPTION\nbifocal looks at a Python program through two lenses and keeps what both see in "
        "one SQLite file: an external sampler that reads a live process's memory (record, top, live, dump) "
        "and an exact in-process tracer (trace). Lua scripts (run) join the two. Without a command it starts "
        "an interactive REPL.\n.PP\nThe short options of record, top and dump are py-spy's: "
        "a py-spy command line works as typed.\n"
        ".SH OPTIONS\n",
        f);
  for (size_t i = 0; i < NDOCS; i++)
    if (doc_of(i, NULL)) man_option(f, i);
  fputs(".SH COMMANDS\n", f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) {
    fputs(".SS ", f);
    roff(f, c->name);
    fputs("\n.B bifocal ", f);
    roff(f, usage_of(c));
    fputs("\n.PP\n", f);
    roff(f, c->summary);
    fputs(".\n", f);
    if (c->help) {
      fputs(".PP\n", f);
      for (const char *p = c->help; *p;) { /* one roff line per help line */
        size_t n = strcspn(p, "\n");
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        roff(f, line);
        fputc('\n', f);
        p += n;
        if (*p) p++;
      }
    }
    for (size_t i = 0; i < NDOCS; i++)
      if (doc_of(i, c->name)) man_option(f, i);
  }
  man_formats(f);
  fputs(".SH ENVIRONMENT\n.TP\n.B BIFOCAL_DB\nthe database when \\-\\-db is not given.\n"
        ".TP\n.B XDG_STATE_HOME\ndump, top and live audit into $XDG_STATE_HOME/bifocal/audit.db "
        "(~/.local/state/bifocal/audit.db) when no \\-\\-db is named.\n"
        ".TP\n.B NO_COLOR\nno colour on terminals.\n"
        ".TP\n.B OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES\n"
        "push to OTLP: the endpoint, request headers (credentials), service.name and resource attributes.\n"
        ".TP\n.B PYROSCOPE_AUTH_TOKEN, PYROSCOPE_BASIC_AUTH_USER, PYROSCOPE_BASIC_AUTH_PASSWORD, PYROSCOPE_TENANT_ID\n"
        "push to Pyroscope: bearer or basic authentication and the X\\-Scope\\-OrgID tenant; never stored or printed.\n"
        ".SH EXIT STATUS\n0 success; 1 failure (one line on stderr says why); 2 bad usage. "
        "bifocal run: 0 all checks held, 1 one failed, 2 script error.\n"
        ".SH SEE ALSO\n.BR py\\-spy (1),\n.BR austin (1)\n",
        f);
}

int bf_cli_session_args(const char *cmd) {
  if (strcmp(cmd, "use") == 0) return 1; /* the REPL's */
  const bf_cmd *c = bf_cli_find(cmd);
  if (!c) return 0;
  /* the usage line's leading placeholders: "replay ID", "diff A B", "push SESSION..." */
  static const char *const names[] = {"ID", "A", "B", "SAMPLED", "TRACED", "SESSION", NULL};
  const char *u = c->usage + strcspn(c->usage, " ");
  int n = 0;
  for (;;) {
    while (*u == ' ') u++;
    size_t len = strcspn(u, " ");
    int many = len > 3 && strncmp(u + len - 3, "...", 3) == 0;
    size_t w = many ? len - 3 : len;
    int hit = 0;
    for (int i = 0; names[i] && !hit; i++) hit = strlen(names[i]) == w && strncmp(u, names[i], w) == 0;
    if (!hit) return n;
    if (many) return -1;
    n++;
    u += len;
  }
}

int bf_cli_complete_sessions(const bf_cli *cli, FILE *f) {
  bf_store *s = NULL;
  if (bf_store_open(cli->db_path, BF_STORE_READONLY, &s, NULL) < 0) return 0; /* none yet: nothing */
  bf_session_info **v = NULL;
  size_t n = 0;
  if (bf_store_session_list(s, &v, &n) == 0) {
    for (size_t i = n; i-- > 0;) { /* newest first */
      if (v[i]->label && !strchr(v[i]->label, '\n')) fprintf(f, "%s\n", v[i]->label);
      fprintf(f, "%lld\n", (long long)v[i]->id);
    }
    for (size_t i = 0; i < n; i++) bf_session_info_free(v[i]);
    free(v);
  }
  bf_store_close(s);
  return fflush(f) ? 1 : 0;
}

static void bash_sessions(FILE *f);

static void bash_completion(FILE *f) {
  fputs("# bash completion for bifocal (generated by `bifocal help --completion bash`)\n"
        "_bifocal() {\n"
        "  local cur prev cmd i db ci\n"
        "  cur=${COMP_WORDS[COMP_CWORD]}\n"
        "  prev=${COMP_WORDS[COMP_CWORD-1]}\n"
        "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
        "    case ${COMP_WORDS[i]} in\n"
        "      -D|--db) db=${COMP_WORDS[i+1]}; ((i++)) ;;\n"
        "      -*) ;;\n"
        "      *) cmd=${COMP_WORDS[i]}; ci=$i; break ;;\n"
        "    esac\n"
        "  done\n"
        "  case $prev in\n"
        "    -D|--db) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
        "  esac\n"
        "  if [[ -z $cmd ]]; then\n"
        "    COMPREPLY=($(compgen -W \"help",
        f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) fprintf(f, " %s", c->name);
  option_words(NULL, f);
  fputs("\" -- \"$cur\"))\n    return\n  fi\n", f);
  bash_sessions(f);
  fputs("  case $cmd in\n", f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) {
    fprintf(f, "    %s)\n      case $prev in\n", c->name);
    for (size_t i = 0; i < NDOCS; i++) {
      if (!doc_of(i, c->name) || !values_of(i)) continue;
      const char *s = docs[i].spelling, *w;
      size_t n;
      fputs("        ", f);
      for (int first = 1; (w = next_word(&s, &n)); first = 0) fprintf(f, "%s%.*s", first ? "" : "|", (int)n, w);
      const char *v = values_of(i);
      if (strcmp(v, "@file") == 0)
        fputs(") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", f);
      else if (strcmp(v, "@dir") == 0)
        fputs(") COMPREPLY=($(compgen -d -- \"$cur\")); return ;;\n", f);
      else
        fprintf(f, ") COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return ;;\n", v);
    }
    fputs("      esac\n", f);
    int ns = bf_cli_session_args(c->name);
    if (ns) /* sessions first, where the command expects one */
      fprintf(f, "      _bifocal_at_session %d && return\n", ns);
    fputs("      COMPREPLY=($(compgen -W \"", f);
    option_words(c->name, f);
    fputs("\" -- \"$cur\"))\n", f);
    /* arguments that are files */
    if (!strcmp(c->name, "import") || !strcmp(c->name, "run"))
      fputs("      [[ $cur != -* ]] && COMPREPLY+=($(compgen -f -- \"$cur\"))\n", f);
    fputs("      ;;\n", f);
  }
  fputs("    help) COMPREPLY=($(compgen -W \"", f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) fprintf(f, " %s", c->name);
  fputs("\" -- \"$cur\")) ;;\n  esac\n}\ncomplete -F _bifocal bifocal\n", f);
}

/* bash: _bifocal_at_session N offers the database's session labels and ids
 * (newest first, unsorted) when the word being completed is one of the
 * command's first N arguments (-1: any), else fails. */
static void bash_sessions(FILE *f) {
  fputs("  _bifocal_at_session() {\n"
        "    local n=0 j\n"
        "    [[ $cur == -* ]] && return 1\n"
        "    for ((j = ci + 1; j < COMP_CWORD; j++)); do [[ ${COMP_WORDS[j]} != -* ]] && ((n++)); done\n"
        "    ((${1} >= 0 && n >= ${1})) && return 1\n"
        "    local list\n"
        "    list=$(\"${COMP_WORDS[0]}\" ${db:+--db \"$db\"} help --sessions 2>/dev/null)\n"
        "    local IFS=$'\\n'\n"
        "    COMPREPLY=($(compgen -W \"$list\" -- \"$cur\"))\n"
        "    compopt -o nosort 2>/dev/null\n"
        "    return 0\n"
        "  }\n",
        f);
}

/* zsh: a single-quoted word (help text) with ' escaped and [ ] : inert. */
static void zsh_word(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '\'')
      fputs("'\\''", f);
    else if (*s == '[' || *s == ']')
      fputc(*s == '[' ? '(' : ')', f);
    else if (*s == ':')
      fputs("\\:", f);
    else
      fputc(*s, f);
  }
}

static void zsh_completion(FILE *f) {
  fputs("#compdef bifocal\n# zsh completion for bifocal (generated by `bifocal help --completion zsh`)\n"
        "_bifocal() {\n  local curcontext=\"$curcontext\" state line\n  typeset -A opt_args\n"
        "  local _bifocal_exe=${words[1]} _bifocal_db\n"
        "  _arguments -C \\\n    '(-D --db)'{-D,--db}'[the database]:database:_files' \\\n"
        "    '(-)'{-h,--help}'[list the commands]' \\\n    '(-)'{-V,--version}'[print the version]' \\\n"
        "    '1:command:->cmd' \\\n    '*::arg:->args'\n"
        "  _bifocal_db=${opt_args[--db]:-${opt_args[-D]}}\n"
        "  case $state in\n    cmd)\n"
        "      local -a cmds\n      cmds=(\n        'help:help on a command'\n",
        f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) {
    fprintf(f, "        '%s:", c->name);
    zsh_word(f, c->summary);
    fputs("'\n", f);
  }
  fputs("      )\n      _describe command cmds ;;\n    args)\n      case $line[1] in\n", f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) {
    fprintf(f, "        %s)\n          _arguments \\\n", c->name);
    for (size_t i = 0; i < NDOCS; i++) {
      if (!doc_of(i, c->name)) continue;
      const char *s = docs[i].spelling, *w;
      size_t n;
      char words[4][48];
      int nw = 0;
      while (nw < 4 && (w = next_word(&s, &n))) snprintf(words[nw++], sizeof words[0], "%.*s", (int)(n < 47 ? n : 47), w);
      int takes = *s && *s != '-'; /* a value name follows */
      for (int k = 0; k < nw; k++) {
        fprintf(f, "            '%s[", words[k]);
        zsh_word(f, help_of(i));
        fputc(']', f);
        if (takes) {
          const char *v = values_of(i);
          if (!v)
            fputs(":value: ", f);
          else if (strcmp(v, "@file") == 0)
            fputs(":file:_files", f);
          else if (strcmp(v, "@dir") == 0)
            fputs(":directory:_files -/", f);
          else
            fprintf(f, ":value:(%s)", v);
        }
        fputs("' \\\n", f);
      }
    }
    int ns = bf_cli_session_args(c->name);
    for (int k = 1; k <= ns; k++) fprintf(f, "            '%d:session:_bifocal_sessions' \\\n", k);
    fprintf(f, "            '(-h --help)'{-h,--help}'[this help]' \\\n            '*: :%s' ;;\n",
            ns < 0 ? "_bifocal_sessions" : "_files");
  }
  fputs("        help) _describe command cmds 2>/dev/null || _values command", f);
  for (const bf_cmd *c = bf_cmds; c->name; c++) fprintf(f, " %s", c->name);
  fputs(" ;;\n      esac ;;\n  esac\n}\n"
        "# session labels and ids of the database, newest first (an unsorted group)\n"
        "_bifocal_sessions() {\n  local -a s\n"
        "  s=(${(f)\"$(${_bifocal_exe:-bifocal} ${_bifocal_db:+--db} $_bifocal_db help --sessions 2>/dev/null)\"})\n"
        "  compadd -V sessions -a s\n}\n"
        "_bifocal \"$@\"\n",
        f);
}

int bf_cli_help(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--man") == 0) {
    man_page(stdout);
    return fflush(stdout) ? 1 : 0;
  }
  if (argc > 2 && strcmp(argv[1], "--completion") == 0) {
    if (strcmp(argv[2], "bash") == 0)
      bash_completion(stdout);
    else if (strcmp(argv[2], "zsh") == 0)
      zsh_completion(stdout);
    else {
      bf_cli_error("no completion for shell '%s' (bash or zsh)", argv[2]);
      return 2;
    }
    return fflush(stdout) ? 1 : 0;
  }
  if (argc > 1) {
    const bf_cmd *c = bf_cli_find(argv[1]);
    if (!c) {
      bf_cli_error("unknown command '%s' (try `bifocal --help`)", argv[1]);
      return 2;
    }
    bf_cli_usage(c, stdout);
    return 0;
  }
  return -1;
}
