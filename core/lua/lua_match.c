/* lua_match.c — string.find/match/gmatch/gsub/rep with a work budget.
 * Lua's own matcher runs a whole search inside one C call, where no
 * instruction hook fires: ("a"):rep(3e5):find(".-.-.-.-.-b") would run for
 * hours past the deadline and Ctrl-C. These implement the same pattern language
 * (Lua 5.4 manual §6.4.1, results and errors alike; the fuzz target compares
 * them with the stock functions) and count their steps, calling the host's
 * budget function (bf_lua_bounded_strlib) every BUDGET_STEPS steps.
 */
#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>

#include "lua_bifocal.h"

#define BUDGET_STEPS 0x3fffu /* check the clock every 16k steps (~0.1 ms) */
#define MAX_CAPTURES 32
#define MAX_DEPTH 200 /* recursion of the matcher, as Lua's MAXCCALLS */
#define CAP_OPEN (-1) /* capture started, not closed yet */
#define CAP_POS (-2)  /* position capture "()" */
#define ESC '%'

static const char BUDGET_KEY = 'b'; /* registry: budget_box of the host */

typedef struct budget_box {
  void (*fn)(lua_State *L);
} budget_box;

/* The host's budget: raises when the running chunk must stop. */
static void check_budget(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
  budget_box *b = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (b && b->fn) b->fn(L);
}

typedef struct mstate {
  const char *src, *src_end; /* subject */
  const char *pat_end;
  lua_State *L;
  int depth_left;
  int level; /* captures in use */
  unsigned steps;
  struct {
    const char *at;
    ptrdiff_t len; /* or CAP_OPEN / CAP_POS */
  } cap[MAX_CAPTURES];
} mstate;

static inline void step(mstate *m) {
  if ((++m->steps & BUDGET_STEPS) == 0) check_budget(m->L);
}

static const char *do_match(mstate *m, const char *s, const char *p);

/* End of the single-character class starting at p ("x", "%a", "[...]"). */
static const char *class_end(mstate *m, const char *p) {
  char c = *p++;
  if (c == ESC) {
    if (p == m->pat_end) luaL_error(m->L, "malformed pattern (ends with '%%')");
    return p + 1;
  }
  if (c == '[') {
    if (*p == '^') p++;
    do {
      if (p == m->pat_end) luaL_error(m->L, "malformed pattern (missing ']')");
      if (*p++ == ESC && p < m->pat_end) p++;
    } while (*p != ']');
    return p + 1;
  }
  return p;
}

static int in_class(int c, int cl) {
  int r;
  switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    default: return cl == c;
  }
  return isupper(cl) ? !r : r;
}

/* c against the set [p .. close], p at '[' and close at its ']'. */
static int in_set(int c, const char *p, const char *close) {
  int want = 1;
  if (p[1] == '^') {
    want = 0;
    p++;
  }
  while (++p < close) {
    if (*p == ESC) {
      p++;
      if (in_class(c, (unsigned char)*p)) return want;
    } else if (p[1] == '-' && p + 2 < close) {
      p += 2;
      if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p) return want;
    } else if ((unsigned char)*p == c) {
      return want;
    }
  }
  return !want;
}

static int single(mstate *m, const char *s, const char *p, const char *ep) {
  if (s >= m->src_end) return 0;
  int c = (unsigned char)*s;
  switch (*p) {
    case '.': return 1;
    case ESC: return in_class(c, (unsigned char)p[1]);
    case '[': return in_set(c, p, ep - 1);
    default: return (unsigned char)*p == c;
  }
}

static const char *balance(mstate *m, const char *s, const char *p) {
  if (p >= m->pat_end - 1) luaL_error(m->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= m->src_end || *s != *p) return NULL;
  char open = p[0], close = p[1];
  int depth = 1;
  while (++s < m->src_end) {
    step(m);
    if (*s == close) {
      if (--depth == 0) return s + 1;
    } else if (*s == open) {
      depth++;
    }
  }
  return NULL;
}

static const char *greedy(mstate *m, const char *s, const char *p, const char *ep) {
  ptrdiff_t n = 0;
  while (single(m, s + n, p, ep)) {
    step(m);
    n++;
  }
  for (; n >= 0; n--) {
    const char *r = do_match(m, s + n, ep + 1);
    if (r) return r;
  }
  return NULL;
}

static const char *lazy(mstate *m, const char *s, const char *p, const char *ep) {
  for (;;) {
    const char *r = do_match(m, s, ep + 1);
    if (r) return r;
    if (!single(m, s, p, ep)) return NULL;
    s++;
  }
}

static const char *open_capture(mstate *m, const char *s, const char *p, ptrdiff_t what) {
  if (m->level >= MAX_CAPTURES) luaL_error(m->L, "too many captures");
  m->cap[m->level].at = s;
  m->cap[m->level].len = what;
  m->level++;
  const char *r = do_match(m, s, p);
  if (!r) m->level--;
  return r;
}

static const char *close_capture(mstate *m, const char *s, const char *p) {
  int l = m->level - 1;
  while (l >= 0 && m->cap[l].len != CAP_OPEN) l--;
  if (l < 0) luaL_error(m->L, "invalid pattern capture");
  m->cap[l].len = s - m->cap[l].at;
  const char *r = do_match(m, s, p);
  if (!r) m->cap[l].len = CAP_OPEN;
  return r;
}

static const char *back_ref(mstate *m, const char *s, int digit) {
  int l = digit - '1';
  if (l < 0 || l >= m->level || m->cap[l].len == CAP_OPEN)
    luaL_error(m->L, "invalid capture index %%%d", l + 1);
  size_t len = (size_t)m->cap[l].len;
  if ((size_t)(m->src_end - s) >= len && memcmp(m->cap[l].at, s, len) == 0) return s + len;
  return NULL;
}

/* The end of the match of p at s, or NULL. Tail positions loop instead of
 * recursing, so depth grows only with nested alternatives. */
static const char *do_match(mstate *m, const char *s, const char *p) {
  if (m->depth_left-- == 0) luaL_error(m->L, "pattern too complex");
  for (;;) {
    step(m);
    if (p == m->pat_end) break;
    if (*p == '(') {
      s = p[1] == ')' ? open_capture(m, s, p + 2, CAP_POS) : open_capture(m, s, p + 1, CAP_OPEN);
      break;
    }
    if (*p == ')') {
      s = close_capture(m, s, p + 1);
      break;
    }
    if (*p == '$' && p + 1 == m->pat_end) {
      s = s == m->src_end ? s : NULL;
      break;
    }
    if (*p == ESC && p[1] == 'b') {
      s = balance(m, s, p + 2);
      if (!s) break;
      p += 4;
      continue;
    }
    if (*p == ESC && p[1] == 'f') {
      p += 2;
      if (*p != '[') luaL_error(m->L, "missing '[' after '%%f' in pattern");
      const char *ep = class_end(m, p);
      int prev = s == m->src ? 0 : (unsigned char)s[-1];
      int cur = s < m->src_end ? (unsigned char)*s : 0;
      if (!in_set(prev, p, ep - 1) && in_set(cur, p, ep - 1)) {
        p = ep;
        continue;
      }
      s = NULL;
      break;
    }
    if (*p == ESC && isdigit((unsigned char)p[1])) {
      s = back_ref(m, s, (unsigned char)p[1]);
      if (!s) break;
      p += 2;
      continue;
    }
    const char *ep = class_end(m, p);
    if (!single(m, s, p, ep)) {
      if (*ep == '*' || *ep == '?' || *ep == '-') {
        p = ep + 1;
        continue;
      }
      s = NULL;
      break;
    }
    if (*ep == '?') {
      const char *r = do_match(m, s + 1, ep + 1);
      if (r) {
        s = r;
        break;
      }
      p = ep + 1;
      continue;
    }
    if (*ep == '+') {
      s = greedy(m, s + 1, p, ep);
      break;
    }
    if (*ep == '*') {
      s = greedy(m, s, p, ep);
      break;
    }
    if (*ep == '-') {
      s = lazy(m, s, p, ep);
      break;
    }
    s++;
    p = ep;
  }
  m->depth_left++;
  return s;
}

static void mstate_init(mstate *m, lua_State *L, const char *s, size_t ls, const char *p, size_t lp) {
  m->L = L;
  m->src = s;
  m->src_end = s + ls;
  m->pat_end = p + lp;
  m->steps = 0;
  m->depth_left = MAX_DEPTH;
  m->level = 0;
}

static void mstate_reset(mstate *m) {
  m->level = 0;
  m->depth_left = MAX_DEPTH;
}

/* Capture i (0-based) of a match [s, e); pushes a position capture as an
 * integer and returns CAP_POS, else returns its length with *at set. */
static ptrdiff_t get_capture(mstate *m, int i, const char *s, const char *e, const char **at) {
  if (i >= m->level) {
    if (i != 0) luaL_error(m->L, "invalid capture index %%%d", i + 1);
    *at = s;
    return e - s;
  }
  ptrdiff_t len = m->cap[i].len;
  *at = m->cap[i].at;
  if (len == CAP_OPEN) luaL_error(m->L, "unfinished capture");
  if (len == CAP_POS) lua_pushinteger(m->L, (m->cap[i].at - m->src) + 1);
  return len;
}

static void push_capture(mstate *m, int i, const char *s, const char *e) {
  const char *at;
  ptrdiff_t len = get_capture(m, i, s, e, &at);
  if (len != CAP_POS) lua_pushlstring(m->L, at, (size_t)len);
}

/* Push the captures (the whole match when the pattern has none and s is set). */
static int push_captures(mstate *m, const char *s, const char *e) {
  int n = m->level == 0 && s ? 1 : m->level;
  luaL_checkstack(m->L, n, "too many captures");
  for (int i = 0; i < n; i++) push_capture(m, i, s, e);
  return n;
}

static size_t start_index(lua_Integer pos, size_t len) {
  if (pos > 0) return (size_t)pos;
  if (pos == 0) return 1;
  if (pos < -(lua_Integer)len) return 1;
  return len + (size_t)pos + 1;
}

static int has_specials(const char *p, size_t lp) {
  for (size_t i = 0; i < lp; i++)
    if (strchr("^$*+?.([%-", p[i]) && p[i]) return 1;
  return 0;
}

static int find_or_match(lua_State *L, int find) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  size_t init = start_index(luaL_optinteger(L, 3, 1), ls);
  if (init > ls + 1) {
    luaL_pushfail(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || !has_specials(p, lp))) {
    const char *hit = lp == 0 ? s + init - 1 : memmem(s + init - 1, ls - (init - 1), p, lp);
    if (hit) {
      lua_pushinteger(L, (hit - s) + 1);
      lua_pushinteger(L, (lua_Integer)((hit - s) + lp));
      return 2;
    }
    luaL_pushfail(L);
    return 1;
  }
  mstate m;
  int anchor = *p == '^';
  if (anchor) {
    p++;
    lp--;
  }
  mstate_init(&m, L, s, ls, p, lp);
  const char *at = s + init - 1;
  do {
    mstate_reset(&m);
    const char *e = do_match(&m, at, p);
    if (e) {
      if (!find) return push_captures(&m, at, e);
      lua_pushinteger(L, (at - s) + 1);
      lua_pushinteger(L, e - s);
      return push_captures(&m, NULL, NULL) + 2;
    }
  } while (at++ < m.src_end && !anchor);
  luaL_pushfail(L);
  return 1;
}

static int b_find(lua_State *L) { return find_or_match(L, 1); }
static int b_match(lua_State *L) { return find_or_match(L, 0); }

typedef struct gm_state {
  const char *next, *last; /* where to search next; end of the last match */
  mstate m;
} gm_state;

static int gmatch_next(lua_State *L) {
  gm_state *g = lua_touserdata(L, lua_upvalueindex(3));
  const char *p = lua_tostring(L, lua_upvalueindex(2));
  g->m.L = L;
  for (const char *s = g->next; s <= g->m.src_end; s++) {
    mstate_reset(&g->m);
    const char *e = do_match(&g->m, s, p);
    if (e && e != g->last) {
      g->next = g->last = e;
      return push_captures(&g->m, s, e);
    }
  }
  return 0;
}

static int b_gmatch(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  size_t init = start_index(luaL_optinteger(L, 3, 1), ls) - 1;
  if (init > ls) init = ls + 1;
  lua_settop(L, 2);
  gm_state *g = lua_newuserdatauv(L, sizeof *g, 0);
  mstate_init(&g->m, L, s, ls, p, lp);
  g->next = s + init;
  g->last = NULL;
  lua_pushcclosure(L, gmatch_next, 3);
  return 1;
}

static void add_repl_string(mstate *m, luaL_Buffer *b, const char *s, const char *e) {
  lua_State *L = m->L;
  size_t l;
  const char *r = lua_tolstring(L, 3, &l);
  const char *pc;
  while ((pc = memchr(r, ESC, l)) != NULL) {
    luaL_addlstring(b, r, (size_t)(pc - r));
    pc++;
    if (*pc == ESC) {
      luaL_addchar(b, *pc);
    } else if (*pc == '0') {
      luaL_addlstring(b, s, (size_t)(e - s));
    } else if (isdigit((unsigned char)*pc)) {
      const char *at;
      ptrdiff_t len = get_capture(m, *pc - '1', s, e, &at);
      if (len == CAP_POS)
        luaL_addvalue(b);
      else
        luaL_addlstring(b, at, (size_t)len);
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", ESC);
    }
    l -= (size_t)(pc + 1 - r);
    r = pc + 1;
  }
  luaL_addlstring(b, r, l);
}

/* Append the replacement of match [s, e); 1 when it changed the text. */
static int add_repl(mstate *m, luaL_Buffer *b, const char *s, const char *e, int tr) {
  lua_State *L = m->L;
  if (tr == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    int n = push_captures(m, s, e);
    lua_call(L, n, 1);
  } else if (tr == LUA_TTABLE) {
    push_capture(m, 0, s, e);
    lua_gettable(L, 3);
  } else {
    add_repl_string(m, b, s, e);
    return 1;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, (size_t)(e - s));
    return 0;
  }
  if (!lua_isstring(L, -1)) return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  luaL_addvalue(b);
  return 1;
}

static int b_gsub(lua_State *L) {
  size_t ls, lp;
  const char *src = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  const char *last = NULL;
  int tr = lua_type(L, 3);
  lua_Integer max_n = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
  luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE, 3,
                   "string/function/table");
  int anchor = *p == '^';
  if (anchor) {
    p++;
    lp--;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  mstate m;
  mstate_init(&m, L, src, ls, p, lp);
  lua_Integer n = 0;
  int changed = 0;
  while (n < max_n) {
    mstate_reset(&m);
    const char *e = do_match(&m, src, p);
    if (e && e != last) {
      n++;
      changed |= add_repl(&m, &b, src, e, tr);
      src = last = e;
    } else if (src < m.src_end) {
      luaL_addchar(&b, *src++);
    } else {
      break;
    }
    if (anchor) break;
  }
  if (!changed) {
    lua_pushvalue(L, 1);
  } else {
    luaL_addlstring(&b, src, (size_t)(m.src_end - src));
    luaL_pushresult(&b);
  }
  lua_pushinteger(L, n);
  return 2;
}

static int b_rep(lua_State *L) {
  size_t l, lsep;
  const char *s = luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  const char *sep = luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  const size_t max = (size_t)INT_MAX; /* Lua's own limit for one string.rep */
  if (l + lsep < l || l + lsep > max / (size_t)n) return luaL_error(L, "resulting string too large");
  size_t total = (size_t)n * l + (size_t)(n - 1) * lsep;
  luaL_Buffer b;
  char *w = luaL_buffinitsize(L, &b, total);
  size_t since = 0; /* bytes copied since the last budget check */
  while (n-- > 1) {
    memcpy(w, s, l);
    w += l;
    if (lsep) {
      memcpy(w, sep, lsep);
      w += lsep;
    }
    since += l + lsep + 1;
    if (since > (1u << 22)) {
      since = 0;
      check_budget(L);
    }
  }
  memcpy(w, s, l);
  luaL_pushresultsize(&b, total);
  return 1;
}

/* table.sort's default order, as a C comparator that counts its calls. */
static int checked_lt(lua_State *L) {
  lua_Integer *calls = lua_touserdata(L, lua_upvalueindex(1));
  if ((++*calls & BUDGET_STEPS) == 0) check_budget(L);
  lua_pushboolean(L, lua_compare(L, 1, 2, LUA_OPLT));
  return 1;
}

static int b_sort(lua_State *L) {
  if (lua_isnoneornil(L, 2)) {
    lua_settop(L, 1);
    lua_Integer *calls = lua_newuserdatauv(L, sizeof *calls, 0);
    *calls = 0;
    lua_pushcclosure(L, checked_lt, 1);
  }
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 2, 0);
  return 0;
}

/* table.move with the same checks and order as Lua's, counting its steps:
 * table.move({}, 1, 1e15, 2) would otherwise loop in C for days. */
static int b_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2);
  lua_Integer e = luaL_checkinteger(L, 3);
  lua_Integer t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1; /* destination table */
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lua_type(L, tt) != LUA_TTABLE) luaL_checktype(L, tt, LUA_TTABLE);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
      for (lua_Integer i = 0; i < n; i++) {
        if ((i & BUDGET_STEPS) == BUDGET_STEPS) check_budget(L);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    } else {
      for (lua_Integer i = n - 1; i >= 0; i--) {
        if ((i & BUDGET_STEPS) == BUDGET_STEPS) check_budget(L);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

void bf_lua_bounded_strlib(lua_State *L, void (*budget)(lua_State *L)) {
  budget_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->fn = budget;
  lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
  static const luaL_Reg fns[] = {{"find", b_find}, {"match", b_match}, {"gmatch", b_gmatch},
                                 {"gsub", b_gsub}, {"rep", b_rep}, {NULL, NULL}};
  if (lua_getglobal(L, "string") == LUA_TTABLE) luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
  if (lua_getglobal(L, "table") == LUA_TTABLE) {
    lua_getfield(L, -1, "sort");
    lua_pushcclosure(L, b_sort, 1);
    lua_setfield(L, -2, "sort");
    lua_pushcfunction(L, b_move);
    lua_setfield(L, -2, "move");
  }
  lua_pop(L, 1);
}
