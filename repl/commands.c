/* commands.c — the table of every `bifocal` command (one line each). */
#include <string.h>

#include "cli.h"

#define BF_DECL(n) int bf_cmd_##n(bf_cli *cli, int argc, char **argv);
BF_DECL(sessions)
BF_DECL(import)
BF_DECL(replay)
BF_DECL(export)
BF_DECL(diff)
#undef BF_DECL

const bf_cmd bf_cmds[] = {
    {"sessions", bf_cmd_sessions, "sessions [--json]", "list sessions with their metadata", NULL},
    {"import", bf_cmd_import, "import FILE [--label L] [--ttl T]",
     "import collapsed stacks (FlameGraph, py-spy raw, austin text)", NULL},
    {"replay", bf_cmd_replay,
     "replay ID [--view functions|flame|heatmap|gil|stack] [-o FILE] [--json] [--limit N]\n"
     "       [--sort self|total] [--thread T] [--since S] [--until S] [--html] [--buckets N]",
     "show a view of a session", NULL},
    {"export", bf_cmd_export,
     "export ID --format collapsed|speedscope|pstats|pprof|chrome -o FILE",
     "write a session in another tool's format", NULL},
    {"diff", bf_cmd_diff, "diff A B [--threshold PP] [--json] [--force] [--limit N] [--view flame -o F.html]",
     "per-function change of share between two sessions, with significance", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const bf_cmd *bf_cli_find(const char *name) {
  for (const bf_cmd *c = bf_cmds; c->name; c++)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}
