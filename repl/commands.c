/* commands.c — the table of every `bifocal` command (one line each). */
#include <string.h>

#include "cli.h"

#define BF_DECL(n) int bf_cmd_##n(bf_cli *cli, int argc, char **argv);
BF_DECL(sessions)
BF_DECL(import)
BF_DECL(replay)
BF_DECL(export)
BF_DECL(audit)
BF_DECL(redact)
BF_DECL(gc)
BF_DECL(keygen)
#undef BF_DECL

const bf_cmd bf_cmds[] = {
    {"sessions", bf_cmd_sessions, "sessions [--json]", "list sessions with their metadata", NULL},
    {"import", bf_cmd_import, "import FILE [--label L] [--ttl T] [--key SECRET.key]",
     "import collapsed stacks (FlameGraph, py-spy raw, austin text) or a sealed export", NULL},
    {"replay", bf_cmd_replay,
     "replay ID --view functions [--json] [--limit N] [--sort self|total] [--thread T]",
     "show a view of a session", NULL},
    {"export", bf_cmd_export, "export ID --format collapsed|bifocal [--encrypt-to PUBKEY] -o FILE",
     "write a session in another tool's format, or sealed for one recipient", NULL},
    {"audit", bf_cmd_audit, "audit [--json]", "who attached to which process, when, and how it ended", NULL},
    {"redact", bf_cmd_redact, "redact ID -o OUT.db [--keep PREFIX ...]",
     "copy a session with file paths hashed and host/command line dropped", NULL},
    {"gc", bf_cmd_gc, "gc [--force]", "delete expired sessions (--ttl) and reclaim the space", NULL},
    {"keygen", bf_cmd_keygen, "keygen [-o NAME]", "make NAME.pub / NAME.key for encrypted sharing", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const bf_cmd *bf_cli_find(const char *name) {
  for (const bf_cmd *c = bf_cmds; c->name; c++)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}
