/* lua_sandbox.h — internal to core/: the pieces of the Lua host that keep a
 * script inside its budget (time, Ctrl-C) even inside long C calls.
 */
#ifndef BF_LUA_SANDBOX_H
#define BF_LUA_SANDBOX_H

#include <lua.h>

/* Replace string.find, match, gmatch, gsub and rep (also reached as string
 * methods) with versions of the same semantics (Lua 5.4 manual §6.4.1) that
 * call bf_lua_budget every few thousand steps, so a pathological pattern or a
 * huge rep stops on --timeout and Ctrl-C. table.sort without a comparator
 * gets a checked comparator, and table.move counts its steps, for the same
 * reason. Call after luaL_openlibs. */
void bf_lua_bounded_strlib(lua_State *L);

/* Raise "timed out after S s (--timeout)" or "interrupted" when the running
 * chunk is over its deadline or Ctrl-C was pressed; return otherwise. Cheap
 * enough for every few thousand steps. */
void bf_lua_budget(lua_State *L);

#endif
