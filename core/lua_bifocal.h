/* lua_bifocal.h — the `bifocal` Lua 5.4 module (core/lua/): database,
 * sessions, functions, samples, edges, call records, join, statistics,
 * checks and their verdict, plus the string library with a work budget.
 * Follows lauxlib/liolib conventions: misuse raises, expected failure returns
 * nil, message. The library never prints: the host (repl/lua_host.h) shows
 * the verdict and decides when a running chunk must stop.
 */
#ifndef BF_LUA_BIFOCAL_H
#define BF_LUA_BIFOCAL_H

#include <lua.h>

typedef struct bf_lua_module_opts {
  const char *db_path;                /* bifocal.open() with no argument (NULL: "bifocal.db"); copied */
  const char *out_dir;                /* bifocal.out_dir, a resolved directory (NULL: absent); copied */
  void (*show_verdict)(lua_State *L); /* bifocal.verdict() calls it to show the checks; NULL: shows nothing */
} bf_lua_module_opts;

/* Settings of the module in L; call before luaopen_bifocal (luaL_requiref).
 * Without it the module opens "bifocal.db" and bifocal.verdict() shows
 * nothing. Raises only on out of memory. */
void bf_lua_module_setup(lua_State *L, const bf_lua_module_opts *o);

/* Open the `bifocal` module (also used as luaL_requiref's openf). */
int luaopen_bifocal(lua_State *L);

/* The number of checks bifocal.check made so far. OUT: *n_failed (may be NULL). */
int bf_lua_checks(lua_State *L, int *n_failed);

/* Check i, 1 <= i <= bf_lua_checks(L). OUT: *name, *ok, *detail (NULL when
 * none); the strings are borrowed from L until it is closed. */
void bf_lua_check_at(lua_State *L, int i, const char **name, int *ok, const char **detail);

/* Replace string.find, match, gmatch, gsub and rep (also reached as string
 * methods) with versions of the same semantics (Lua 5.4 manual §6.4.1) that
 * call budget(L) every few thousand steps, so a pathological pattern or a huge
 * rep stops on the host's deadline or Ctrl-C: budget raises (lua_error) to
 * stop the chunk, returns to let it go on. table.sort without a comparator
 * gets a checked comparator, and table.move counts its steps, for the same
 * reason. Call after luaL_openlibs. */
void bf_lua_bounded_strlib(lua_State *L, void (*budget)(lua_State *L));

#endif
