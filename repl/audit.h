/* audit.h — the audit trail of commands that reach into other processes
 * (record, live, top, dump, trace) or take data out (redact, sealed export)
 * or destroy it (gc). One row per run, written *before* the command acts, so
 * a crash or kill leaves the row with outcome "started".
 */
#ifndef BF_AUDIT_H
#define BF_AUDIT_H

#include <stdint.h>

#include "cli.h"
#include "store.h"

typedef struct bf_audit bf_audit;

/* Write the row: time, user name and uid (with the sudo caller when run via
 * sudo), target pid and its uid (from /proc/PID/status; -1 when unreadable;
 * our own uid when pid is 0), command,
 * the whole command line (cli->cmdline, options included), outcome "started".
 * s: an open writable store, borrowed until bf_audit_end; NULL = open
 * cli->db_path (created if missing) just for the audit.
 * Launching commands (record/trace -- CMD) call it once the child exists,
 * before the first read of its memory, with the child's pid.
 * Returns 0, or an exit status after printing one line: a command that cannot
 * be audited must not go on. OUT: *out (finish with bf_audit_end). */
int bf_audit_begin(bf_cli *cli, bf_store *s, const char *command, long long target_pid, bf_audit **out);

/* For commands that only look (dump, top, live, and record -o without a
 * named database): they need no writable database. The row goes to the named
 * database (--db / $BIFOCAL_DB) when there is one, else to the per-user audit
 * store $XDG_STATE_HOME/bifocal/audit.db (~/.local/state/bifocal/audit.db).
 * When neither can be written the command goes on: one warning on stderr says
 * so and *out is NULL (bf_audit_end accepts it). Returns 0, or 1 when out of
 * memory (said on stderr). OUT: *out. */
int bf_audit_begin_look(bf_cli *cli, const char *command, long long target_pid, bf_audit **out);

/* The per-user audit store path (see above) into buf; -ENAMETOOLONG or
 * -ENOENT (no $XDG_STATE_HOME and no $HOME). */
int bf_audit_user_store(char *buf, size_t len);

/* Record how it ended: outcome NULL = "ok", else the one-line error;
 * session_id 0 = none. Frees a. Accepts NULL. Never fails loudly: a failed
 * update leaves "started" in the row and prints one warning. */
void bf_audit_end(bf_audit *a, const char *outcome, int64_t session_id);

/* A capture (record, trace, calibrate) writing into the database at
 * db_path holds a shared flock(2) on that file from bf_audit_capture_hold to
 * bf_audit_capture_release; bf_audit_capture_running says whether any
 * process holds one (1) or none (0), so gc --force never sweeps rows a live
 * capture still needs. The descriptor stays open until exit: closing any
 * descriptor of a file drops the process's SQLite (fcntl) locks on it. */
void bf_audit_capture_hold(const char *db_path);
/* Stop signals (INT, TERM, HUP, QUIT) during a command that works on the
 * database alone (redact): from bf_audit_stops_catch on, the first one
 * interrupts the store's statements (bf_store_interrupt) instead of ending
 * the process, so the command fails as "interrupted" and can still end its
 * audit row; bf_audit_stops_caught says which came (0: none) and clears the
 * interrupt so that row can be written; bf_audit_stops_release restores the
 * old dispositions and, when one came, ends the process by it. */
void bf_audit_stops_catch(void);
int bf_audit_stops_caught(void);
void bf_audit_stops_release(void);
void bf_audit_capture_release(const char *db_path);
int bf_audit_capture_running(const char *db_path);

#endif
