/* lua_module.c — the `bifocal` module itself: luaopen_bifocal (metatables,
 * functions, the parts written in Lua), its per-state settings, the checks
 * and their verdict, and the formatting helpers. Printing the verdict is the
 * host's (bf_lua_module_opts.show_verdict): the library never prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ident.h"
#include "lua_int.h"
#include "text.h"
#include "util.h"

static const char CTX_KEY = 'c';    /* registry: bf_lua_ctx userdata */
static const char CHECKS_KEY = 'k'; /* registry: array of {name, ok, detail} */

bf_lua_ctx *bf_lua_getctx(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CTX_KEY);
  bf_lua_ctx *c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return c;
}

static bf_lua_ctx *new_ctx(lua_State *L) {
  bf_lua_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  snprintf(c->db_path, sizeof c->db_path, "bifocal.db");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CTX_KEY);
  return c;
}

void bf_lua_module_setup(lua_State *L, const bf_lua_module_opts *o) {
  bf_lua_ctx *c = bf_lua_getctx(L);
  if (!c) c = new_ctx(L);
  if (o->db_path) snprintf(c->db_path, sizeof c->db_path, "%s", o->db_path);
  snprintf(c->out_dir, sizeof c->out_dir, "%s", o->out_dir ? o->out_dir : "");
  c->show_verdict = o->show_verdict;
}

/* ---- checks and the verdict ---------------------------------------------------- */

/* bifocal.check(name, ok, [detail]) → ok (boolean) */
static int l_check(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checkany(L, 2);
  int ok = lua_toboolean(L, 2);
  const char *detail = lua_isnoneornil(L, 3) ? NULL : luaL_tolstring(L, 3, NULL);
  bf_lua_ctx *c = bf_lua_getctx(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CHECKS_KEY);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  lua_pushboolean(L, ok);
  lua_setfield(L, -2, "ok");
  if (detail) {
    lua_pushstring(L, detail);
    lua_setfield(L, -2, "detail");
  }
  lua_rawseti(L, -2, ++c->n_checks);
  if (!ok) c->n_failed++;
  lua_pushboolean(L, ok);
  return 1;
}

int bf_lua_checks(lua_State *L, int *n_failed) {
  bf_lua_ctx *c = bf_lua_getctx(L);
  if (n_failed) *n_failed = c ? c->n_failed : 0;
  return c ? c->n_checks : 0;
}

void bf_lua_check_at(lua_State *L, int i, const char **name, int *ok, const char **detail) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CHECKS_KEY);
  lua_rawgeti(L, -1, i);
  lua_getfield(L, -1, "name");
  lua_getfield(L, -2, "ok");
  lua_getfield(L, -3, "detail");
  *name = lua_tostring(L, -3);
  *ok = lua_toboolean(L, -2);
  *detail = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
  lua_pop(L, 5);
}

/* bifocal.verdict() → passed, n_failed (the host shows the table of checks) */
static int l_verdict(lua_State *L) {
  bf_lua_ctx *c = bf_lua_getctx(L);
  if (c->show_verdict) c->show_verdict(L);
  lua_pushboolean(L, c->n_failed == 0);
  lua_pushinteger(L, c->n_failed);
  return 2;
}

/* ---- formatting helpers ---------------------------------------------------------- */

static int l_fmt_ns(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_pushliteral(L, "-");
    return 1;
  }
  char buf[32];
  bf_fmt_ns(luaL_checknumber(L, 1), buf, sizeof buf);
  lua_pushstring(L, buf);
  return 1;
}

/* bifocal.pct(share [, digits]) → "12.3%" ("not observed" for nil) */
static int l_pct(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_pushliteral(L, "not observed");
    return 1;
  }
  double v = luaL_checknumber(L, 1);
  int d = (int)luaL_optinteger(L, 2, 1);
  luaL_argcheck(L, d >= 0 && d <= 9, 2, "digits must be 0..9");
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f%%", d, v * 100);
  lua_pushstring(L, buf);
  return 1;
}

/* bifocal.inert(s): s with control characters and invalid UTF-8 as escapes
 * (\n, \x1b, \u202e), safe to print on a terminal. */
/* bifocal.is_builtin(file): true when a row's file names a C function. */
static int l_is_builtin(lua_State *L) {
  lua_pushboolean(L, bf_ident_is_builtin(luaL_optstring(L, 1, NULL)));
  return 1;
}

static int l_inert(lua_State *L) {
  const char *s = luaL_checkstring(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char buf[256];
  const char *r = bf_inert(s, buf, sizeof buf);
  if (r == s) {
    lua_settop(L, 1);
    return 1;
  }
  /* escape in pieces so any length fits */
  size_t n = strlen(s), at = 0;
  while (at < n) {
    char piece[64], out[64 * 6 + 8];
    size_t k = n - at < 60 ? n - at : 60;
    /* do not split a UTF-8 sequence: back up to a lead byte */
    while (k < n - at && k > 1 && ((unsigned char)s[at + k] & 0xC0) == 0x80) k--;
    memcpy(piece, s + at, k);
    piece[k] = 0;
    luaL_addstring(&b, bf_inert(piece, out, sizeof out));
    at += k;
  }
  luaL_pushresult(&b);
  return 1;
}

/* Parts of the module written in Lua: table printing and value display. */
static const char prelude[] =
    "local bifocal = ...\n"
    "function bifocal.print_table(header, rows)\n"
    "  local w = {}\n"
    "  local function cell(v) if v == nil then return '-' end return bifocal.inert(tostring(v)) end\n"
    "  for i, h in ipairs(header) do w[i] = utf8.len(h) or #h end\n"
    "  for _, r in ipairs(rows) do for i = 1, #header do\n"
    "    local s = cell(r[i]); local l = utf8.len(s) or #s; if l > w[i] then w[i] = l end end end\n"
    "  local function line(r)\n"
    "    local out = {}\n"
    "    for i = 1, #header do\n"
    "      local s = cell(r[i]); local pad = string.rep(' ', w[i] - (utf8.len(s) or #s))\n"
    "      if i == #header then out[i] = s elseif type(r[i]) == 'number' then out[i] = pad .. s else out[i] = s .. pad "
    "end\n"
    "    end\n"
    "    io.write(table.concat(out, '  '), '\\n')\n"
    "  end\n"
    "  line(header)\n"
    "  for _, r in ipairs(rows) do line(r) end\n"
    "end\n"
    "function bifocal.parse_args(args, defaults, usage)\n"
    "  defaults = defaults or {}\n"
    "  local pos, opt = {}, {}\n"
    "  for k, v in pairs(defaults) do opt[k] = v end\n"
    "  local function bad(msg) error(msg .. (usage and ('\\n' .. usage) or ''), 3) end\n"
    "  local i = 1\n"
    "  while i <= #args do\n"
    "    local a = args[i]\n"
    "    local name, val = a:match('^%-%-([%w%-_]+)=(.*)$')\n"
    "    if not name then name = a:match('^%-%-([%w%-_]+)$') end\n"
    "    if name then\n"
    "      local d = defaults[name]\n"
    "      if d == nil then bad('unknown option --' .. name) end\n"
    "      if type(d) == 'boolean' then opt[name] = true\n"
    "      else\n"
    "        if val == nil then i = i + 1; val = args[i] end\n"
    "        if val == nil then bad('option --' .. name .. ' needs a value') end\n"
    "        if type(d) == 'number' then\n"
    "          local n = tonumber(val)\n"
    "          if not n then bad('option --' .. name .. ' needs a number, not ' .. val) end\n"
    "          val = n\n"
    "        end\n"
    "        opt[name] = val\n"
    "      end\n"
    "    else pos[#pos + 1] = a end\n"
    "    i = i + 1\n"
    "  end\n"
    "  return pos, opt\n"
    "end\n"
    "function bifocal.repr(v, depth)\n"
    "  depth = depth or 2\n"
    "  if type(v) == 'string' then return string.format('%q', v) end\n"
    "  if type(v) ~= 'table' or depth <= 0 then return tostring(v) end\n"
    "  local parts, n = {}, #v\n"
    "  for i = 1, math.min(n, 20) do parts[#parts + 1] = bifocal.repr(v[i], depth - 1) end\n"
    "  if n > 20 then parts[#parts + 1] = '... (' .. n .. ' items)' end\n"
    "  local keys = {}\n"
    "  for k in pairs(v) do if not (math.type(k) == 'integer' and k >= 1 and k <= n) then keys[#keys + 1] = k end end\n"
    "  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)\n"
    "  for _, k in ipairs(keys) do\n"
    "    local ks = (type(k) == 'string' and k:match('^[%a_][%w_]*$')) and k or '[' .. bifocal.repr(k, 0) .. ']'\n"
    "    parts[#parts + 1] = ks .. ' = ' .. bifocal.repr(v[k], depth - 1)\n"
    "  end\n"
    "  return '{' .. table.concat(parts, ', ') .. '}'\n"
    "end\n";

static const luaL_Reg db_meth[] = {{"session", bf_lua_db_session}, {"sessions", bf_lua_db_sessions},
                                   {"stack", bf_lua_db_stack},     {"path", bf_lua_db_path},
                                   {"close", bf_lua_db_close},     {NULL, NULL}};
static const luaL_Reg db_metameth[] = {{"__index", NULL},
                                       {"__gc", bf_lua_db_close},
                                       {"__close", bf_lua_db_close},
                                       {"__tostring", bf_lua_db_tostring},
                                       {NULL, NULL}};
static const luaL_Reg session_meth[] = {
    {"info", bf_lua_session_info},       {"functions", bf_lua_session_functions}, {"func", bf_lua_session_func},
    {"threads", bf_lua_session_threads}, {"samples", bf_lua_session_samples},     {"stacks", bf_lua_session_stacks},
    {"edges", bf_lua_session_edges},     {"calls", bf_lua_session_calls},         {"memory", bf_lua_session_memory},
    {NULL, NULL}};
static const luaL_Reg session_metameth[] = {{"__index", bf_lua_session_index},
                                            {"__tostring", bf_lua_session_tostring},
                                            {"__eq", bf_lua_session_eq},
                                            {NULL, NULL}};
static const luaL_Reg samples_metameth[] = {{"__gc", bf_lua_samples_release},
                                            {"__close", bf_lua_samples_release},
                                            {"__tostring", bf_lua_samples_tostring},
                                            {NULL, NULL}};
static const luaL_Reg stats_funcs[] = {{"mean", bf_lua_st_mean},
                                       {"median", bf_lua_st_median},
                                       {"percentile", bf_lua_st_percentile},
                                       {"stdev", bf_lua_st_stdev},
                                       {"spearman", bf_lua_st_spearman},
                                       {"wilson", bf_lua_st_wilson},
                                       {"two_proportion", bf_lua_st_two_proportion},
                                       {NULL, NULL}};
static const luaL_Reg bifocal_funcs[] = {{"open", bf_lua_open},
                                         {"session", bf_lua_default_session},
                                         {"join", bf_lua_join},
                                         {"check", l_check},
                                         {"verdict", l_verdict},
                                         {"fmt_ns", l_fmt_ns},
                                         {"pct", l_pct},
                                         {"inert", l_inert},
                                         {"is_builtin", l_is_builtin},
                                         {NULL, NULL}};

/* Metatable name with metameth, and meth in a table at field (NULL: none). */
static void create_meta(lua_State *L, const char *name, const luaL_Reg *metameth, const luaL_Reg *meth,
                        const char *field) {
  luaL_newmetatable(L, name);
  luaL_setfuncs(L, metameth, 0);
  if (meth) {
    int n = 0;
    while (meth[n].name) n++;
    lua_createtable(L, 0, n); /* luaL_newlibtable */
    luaL_setfuncs(L, meth, 0);
    lua_setfield(L, -2, field);
  }
  lua_pop(L, 1);
}

static void create_metas(lua_State *L) {
  create_meta(L, DB_MT, db_metameth, db_meth, "__index");
  create_meta(L, SESSION_MT, session_metameth, session_meth, "__methods");
  create_meta(L, SAMPLES_MT, samples_metameth, NULL, NULL);
}

int luaopen_bifocal(lua_State *L) {
  if (!bf_lua_getctx(L)) new_ctx(L); /* opened without bf_lua_module_setup */
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CHECKS_KEY);
  create_metas(L);
  luaL_newlib(L, bifocal_funcs);
  luaL_newlib(L, stats_funcs);
  lua_setfield(L, -2, "stats");
  lua_pushliteral(L, BF_VERSION);
  lua_setfield(L, -2, "version");
  bf_lua_ctx *c = bf_lua_getctx(L);
  if (c->out_dir[0]) {
    lua_pushstring(L, c->out_dir);
    lua_setfield(L, -2, "out_dir");
  }
  if (luaL_loadbuffer(L, prelude, sizeof prelude - 1, "=bifocal") != LUA_OK) return lua_error(L);
  lua_pushvalue(L, -2);
  lua_call(L, 1, 0);
  return 1;
}
