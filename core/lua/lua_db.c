/* lua_db.c — bifocal.db (an open store, read-only) and what opens one:
 * bifocal.open, bifocal.session (a session of the default database),
 * db:session, db:sessions, and the session objects' metadata table.
 */
#include <stdlib.h>
#include <string.h>

#include "correlate.h"
#include "lua_int.h"

static const char DEFDB_KEY = 'd'; /* registry: default bifocal.db of bifocal.session() */

static bf_lua_db *todb(lua_State *L, int idx) { return luaL_checkudata(L, idx, DB_MT); }

bf_store *bf_lua_checkdb(lua_State *L, int idx) {
  bf_lua_db *d = todb(L, idx);
  if (!d->s) luaL_error(L, "attempt to use a closed database");
  return d->s;
}

/* Push a closed db userdata (acquire after, so a failure leaves nothing to leak). */
static bf_lua_db *newdb(lua_State *L) {
  bf_lua_db *d = lua_newuserdatauv(L, sizeof *d, 0);
  d->s = NULL;
  luaL_setmetatable(L, DB_MT);
  return d;
}

/* bifocal.open([path]) → db | nil, msg. Read-only. */
int bf_lua_open(lua_State *L) {
  bf_lua_ctx *c = bf_lua_getctx(L);
  const char *path = luaL_optstring(L, 1, c->db_path);
  bf_lua_db *d = newdb(L);
  bf_err msg = BF_ERR_INIT;
  int rc = bf_store_open(path, BF_STORE_READONLY, &d->s, &msg);
  if (rc < 0) {
    d->s = NULL;
    luaL_pushfail(L);
    lua_pushfstring(L, "%s", bf_err_msg(&msg, strerror(-rc)));
    return 2;
  }
  return 1;
}

int bf_lua_db_close(lua_State *L) {
  bf_lua_db *d = todb(L, 1);
  bf_store_close(d->s);
  d->s = NULL;
  return 0;
}

int bf_lua_db_tostring(lua_State *L) {
  bf_lua_db *d = todb(L, 1);
  if (d->s)
    lua_pushfstring(L, "bifocal.db (%s)", bf_store_path(d->s));
  else
    lua_pushliteral(L, "bifocal.db (closed)");
  return 1;
}

int bf_lua_db_path(lua_State *L) {
  lua_pushstring(L, bf_store_path(bf_lua_checkdb(L, 1)));
  return 1;
}

static void push_info(lua_State *L, const bf_session_info *in) {
  lua_createtable(L, 0, 28);
  bf_lua_set_int(L, "id", in->id);
  bf_lua_set_str(L, "kind", in->kind);
  bf_lua_set_str(L, "clock", in->clock);
  bf_lua_set_str(L, "mode", in->mode);
  lua_pushnumber(L, in->rate_hz);
  lua_setfield(L, -2, "rate_hz");
  lua_pushnumber(L, in->achieved_rate_hz);
  lua_setfield(L, -2, "achieved_rate_hz");
  bf_lua_set_int(L, "start_ns", in->start_ns);
  bf_lua_set_int(L, "duration_ns", in->duration_ns);
  lua_pushnumber(L, (double)in->duration_ns / 1e9);
  lua_setfield(L, -2, "duration_s");
  bf_lua_set_str(L, "host", in->host);
  bf_lua_set_int(L, "pid", in->pid);
  bf_lua_set_str(L, "command", in->command);
  bf_lua_set_str(L, "python_version", in->python_version);
  bf_lua_set_str(L, "python_build", in->python_build);
  bf_lua_set_str(L, "profiler_version", in->profiler_version);
  bf_lua_set_str(L, "commit", in->commit);
  bf_lua_set_str(L, "label", in->label);
  bf_lua_set_int(L, "samples", in->samples);
  bf_lua_set_int(L, "sample_count", in->samples); /* s.samples is the iterator method */
  bf_lua_set_int(L, "missed", in->missed);
  bf_lua_set_int(L, "invalid", in->invalid);
  bf_lua_set_int(L, "profiler_cpu_ns", in->profiler_cpu_ns);
  bf_lua_set_str(L, "status", in->status);
  bf_lua_set_int(L, "expires_at_ns", in->expires_at_ns);
  bf_lua_set_int(L, "parent_id", in->parent_id);
  bf_lua_set_bool(L, "redacted", in->redacted);
  bf_lua_set_int(L, "created_ns", in->created_ns);
  bf_lua_set_str(L, "extra_json", in->extra_json);
  char exe[1024], ver[64]; /* the interpreter that ran, from extra.python */
  bf_session_interp(in, exe, sizeof exe, ver, sizeof ver);
  if (exe[0]) bf_lua_set_str(L, "python_executable", exe);
}

/* Push a session userdata of the db at index dbi for session id (must exist). */
static int push_session(lua_State *L, int dbi, bf_store *s, int64_t id) {
  dbi = lua_absindex(L, dbi);
  bf_session_info *in = NULL;
  if (bf_store_session_get(s, id, &in) < 0) {
    luaL_pushfail(L);
    lua_pushstring(L, bf_store_errmsg(s));
    return 2;
  }
  int64_t *u = lua_newuserdatauv(L, sizeof *u, 2);
  *u = id;
  luaL_setmetatable(L, SESSION_MT);
  lua_pushvalue(L, dbi);
  lua_setiuservalue(L, -2, 1);
  push_info(L, in);
  bf_session_info_free(in);
  lua_setiuservalue(L, -2, 2);
  return 1;
}

/* db:session(id_or_label) → session | nil, msg */
int bf_lua_db_session(lua_State *L) {
  bf_store *s = bf_lua_checkdb(L, 1);
  int64_t id;
  if (lua_isinteger(L, 2)) {
    id = lua_tointeger(L, 2);
  } else {
    const char *key = luaL_checkstring(L, 2);
    if (bf_store_session_resolve(s, key, &id) < 0) {
      luaL_pushfail(L);
      lua_pushstring(L, bf_store_errmsg(s));
      return 2;
    }
  }
  return push_session(L, 1, s, id);
}

/* db:sessions() → array of session objects, oldest first */
int bf_lua_db_sessions(lua_State *L) {
  bf_store *s = bf_lua_checkdb(L, 1);
  bf_session_info **v = NULL;
  size_t n = 0;
  if (bf_store_session_list(s, &v, &n) < 0) return luaL_error(L, "%s", bf_store_errmsg(s));
  lua_createtable(L, (int)n, 0);
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t id = v[i]->id;
    bf_session_info_free(v[i]);
    if (push_session(L, 1, s, id) == 1)
      lua_rawseti(L, -2, ++k);
    else
      lua_pop(L, 2);
  }
  free(v);
  return 1;
}

/* bifocal.session(id_or_label) → session of the default database | nil, msg */
int bf_lua_default_session(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DEFDB_KEY) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushcfunction(L, bf_lua_open);
    lua_call(L, 0, 2);
    if (lua_isnil(L, -2)) return 2;
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &DEFDB_KEY);
  }
  lua_insert(L, 1);
  lua_settop(L, 2);
  return bf_lua_db_session(L);
}
