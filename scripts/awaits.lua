-- awaits.lua — asyncio await sites: sampled waits joined with exact hits.
-- usage: bifocal run awaits.lua SAMPLED TRACED [--per FUNC] [--limit N]
-- example: bifocal run awaits.lua prod-noon repro --per handle
--
-- SAMPLED is a `record --async` session: each task's waiting samples are
-- charged to its await site (the innermost frame outside asyncio's own
-- files), and a "request" is one task whose outermost coroutine is FUNC
-- (--per; by default the coroutine whose tasks wait at that site most).
-- TRACED is a `bifocal trace` of a reproduction: exact suspensions per await
-- site, and the calls of FUNC. Per site the two give "this await is hit 3×
-- per request and waits 40 ms each": hits per request from the trace, wait
-- per request from the samples (with the 95% interval of its share), and
-- their quotient; and how long a request lasts (its task's first to last
-- sample; traced: its first step to its end, exact, under the tracer). Per-request figures assume the tasks of FUNC seen in the sampled
-- session ran whole (record them from start to end).

local usage = "usage: bifocal run awaits.lua SAMPLED TRACED [--per FUNC] [--limit N]"
local pos, opt = bifocal.parse_args(arg, { per = "", limit = 20 }, usage)
if #pos ~= 2 then error(usage, 0) end

local db = assert(bifocal.open())
local sampled = assert(db:session(pos[1]))
local traced = assert(db:session(pos[2]))
if sampled.kind ~= "sampled" then error("session " .. pos[1] .. " is not a sampled session (record --async)", 0) end
if traced.kind ~= "traced" then error("session " .. pos[2] .. " is not a traced session (bifocal trace)", 0) end

-- ---- a small strict JSON reader for the traced session's metadata ----------
local function json_decode(s)
  local i = 1
  local function ws() i = s:find("[^ \t\r\n]", i) or #s + 1 end
  local value
  local function str()
    local out, j = {}, i + 1
    while true do
      local c = s:sub(j, j)
      if c == "" then error("unterminated string") end
      if c == '"' then i = j + 1; return table.concat(out) end
      if c == "\\" then
        local e = s:sub(j + 1, j + 1)
        local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
        if e == "u" then
          out[#out + 1] = utf8.char(tonumber(s:sub(j + 2, j + 5), 16) or 0xFFFD)
          j = j + 6
        else
          out[#out + 1] = map[e] or e
          j = j + 2
        end
      else
        out[#out + 1] = c
        j = j + 1
      end
    end
  end
  function value()
    ws()
    local c = s:sub(i, i)
    if c == "{" then
      local t = {}
      i = i + 1; ws()
      if s:sub(i, i) == "}" then i = i + 1; return t end
      repeat
        ws()
        local k = str(); ws()
        assert(s:sub(i, i) == ":", "':' expected"); i = i + 1
        t[k] = value(); ws()
        local d = s:sub(i, i); i = i + 1
      until d ~= ","
      return t
    elseif c == "[" then
      local t = {}
      i = i + 1; ws()
      if s:sub(i, i) == "]" then i = i + 1; return t end
      repeat
        t[#t + 1] = value(); ws()
        local d = s:sub(i, i); i = i + 1
      until d ~= ","
      return t
    elseif c == '"' then
      return str()
    end
    local lit = s:match("^[%w%.%+%-]+", i)
    assert(lit, "bad JSON at " .. i)
    i = i + #lit
    if lit == "true" then return true elseif lit == "false" then return false elseif lit == "null" then return nil end
    return assert(tonumber(lit), "bad number " .. lit)
  end
  return value()
end

local function key(file, qualname, firstlineno) return file .. "\0" .. qualname .. "\0" .. firstlineno end

-- ---- traced: hits per await site, calls per function -------------------------
local ok, extra = pcall(json_decode, traced:info().extra_json or "{}")
local sites_traced = {}
for _, s in ipairs(ok and extra and extra.asyncio and extra.asyncio.await_sites or {}) do
  local k = key(s.file, s.qualname, s.firstlineno) .. "\0" .. s.line
  sites_traced[k] = (sites_traced[k] or 0) + s.hits
end
if not next(sites_traced) then
  error("traced session " .. traced.id .. " has no await sites (trace an asyncio program with this bifocal)", 0)
end
local lifetimes = {} -- outermost coroutine -> {tasks, total_ns}: traced task wall times
for _, t in ipairs(ok and extra and extra.asyncio and extra.asyncio.tasks or {}) do
  lifetimes[key(t.file, t.qualname, t.firstlineno)] = t
end
local calls = {}
for _, f in ipairs(traced:functions()) do
  if f.calls then calls[key(f.file, f.qualname, f.firstlineno)] = f end
end

-- ---- sampled: waits per await site, tasks per outermost coroutine ------------
local tasks = {}
for _, th in ipairs(sampled:threads()) do
  if th.native_tid < 0 and th.name and th.name:sub(1, 5) == "task:" then tasks[th.id] = th.name:sub(6) end
end
if not next(tasks) then error("sampled session " .. sampled.id .. " has no tasks (record it with --async)", 0) end
local WAITING = 0x400 -- sampling/tasks.h
local stacks = {}     -- stack id -> {root = coroutine key and name, site = key, frame = innermost}
local function info(stack_id)
  local v = stacks[stack_id]
  if v then return v end
  local fr = stack_id > 0 and db:stack(stack_id) or {}
  v = {}
  if fr[2] then v.root, v.root_name = key(fr[2].file, fr[2].qualname, fr[2].firstlineno), fr[2].qualname end
  for i = #fr, 2, -1 do
    if not fr[i].file:find("asyncio/", 1, true) then
      v.site = key(fr[i].file, fr[i].qualname, fr[i].firstlineno) .. "\0" .. fr[i].line
      v.frame = fr[i]
      break
    end
  end
  stacks[stack_id] = v
  return v
end
local wait = {}       -- site -> {ns, samples, by_root = {root -> ns}}
local root_tasks = {} -- root -> {tasks seen whole, ns, samples}
-- a task's wall time: its first to its last sample, from their timestamps (a
-- sampler that fell behind its rate misses ticks: counts times the interval
-- would come out short; a record of n merged ticks spans its weight)
local acc = {}        -- task thread id -> {root, name, ns, samples, first, last_end, by_site = {site -> n}}
local t_first, s_end  -- the first tick any task was seen; the session's last sample
for smp in sampled:samples() do
  if not s_end or smp.ts_ns + smp.weight > s_end then s_end = smp.ts_ns + smp.weight end
  local t = tasks[smp.thread_id]
  if t then
    local v = info(smp.stack_id)
    if not t_first or smp.ts_ns < t_first then t_first = smp.ts_ns end
    local a = acc[smp.thread_id]
    if v.root and not a then
      a = { root = v.root, name = v.root_name, ns = 0, samples = 0, first = smp.ts_ns, last_end = smp.ts_ns,
            by_site = {} }
      acc[smp.thread_id] = a
    end
    if a then
      a.ns, a.samples = a.ns + smp.weight, a.samples + smp.count
      if smp.ts_ns < a.first then a.first = smp.ts_ns end
      if smp.ts_ns + smp.weight > a.last_end then a.last_end = smp.ts_ns + smp.weight end
    end
    if smp.flags & WAITING ~= 0 and v.site then
      local w = wait[v.site] or { ns = 0, samples = 0, by_root = {}, by_root_n = {}, frame = v.frame }
      wait[v.site] = w
      w.ns, w.samples = w.ns + smp.weight, w.samples + smp.count
      if v.root then w.by_root[v.root] = (w.by_root[v.root] or 0) + smp.weight end
      if a then a.by_site[v.site] = (a.by_site[v.site] or 0) + smp.count end
    end
  end
end

-- Per-request figures come from the tasks seen whole: a task already running
-- when tasks were first read (e.g. attached to a live service, or started
-- before the reader was ready) or still running at the end of the session
-- would make a request look shorter than it is.
local interval = (sampled.achieved_rate_hz and sampled.achieved_rate_hz > 0) and 1e9 / sampled.achieved_rate_hz or 0
local partial = {}    -- root -> tasks left out
for _, a in pairs(acc) do
  local whole = a.first > t_first and a.last_end < s_end - interval
  local r = root_tasks[a.root] or { n = 0, ns = 0, samples = 0, life = 0, name = a.name }
  root_tasks[a.root] = r
  if whole then
    r.n, r.ns, r.samples, r.life = r.n + 1, r.ns + a.ns, r.samples + a.samples, r.life + (a.last_end - a.first)
    for site, n in pairs(a.by_site) do
      local w = wait[site]
      w.by_root_n[a.root] = (w.by_root_n[a.root] or 0) + n
    end
  else
    partial[a.root] = (partial[a.root] or 0) + 1
  end
end

-- ---- the join ----------------------------------------------------------------
local per_key
if opt.per ~= "" then
  local f = traced:func(opt.per)
  if not f then error("--per " .. opt.per .. ": no such function in traced session " .. traced.id, 0) end
  per_key = key(f.file, f.qualname, f.firstlineno)
end
local rows = {}
for site, w in pairs(wait) do
  local root = per_key
  if not root then
    local best = 0
    for r, ns in pairs(w.by_root) do if ns > best then root, best = r, ns end end
  end
  if per_key and not w.by_root[root] then goto continue end -- no request of FUNC waits here
  local rt, tf = root and root_tasks[root], root and calls[root]
  local hits = sites_traced[site]
  local row = { w = w, hits = hits, root = rt and rt.name or (tf and tf.qualname) or "?" }
  if rt and rt.n > 0 and rt.samples > 0 then
    -- the share of the requests' samples waiting here, times their wall time
    local k, life = w.by_root_n[root] or 0, rt.life / rt.n
    local lo, hi = bifocal.stats.wilson(k, rt.samples)
    row.wait_req = k / rt.samples * life
    row.ci = { lo * life, hi * life }
    row.life = life
  end
  if hits and tf and tf.calls > 0 then row.hits_req = hits / tf.calls end
  local lt = root and lifetimes[root]
  if lt and lt.tasks > 0 then row.traced_life = lt.total_ns / lt.tasks end
  if row.wait_req and row.hits_req and row.hits_req > 0 then row.each = row.wait_req / row.hits_req end
  rows[#rows + 1] = row
  ::continue::
end
table.sort(rows, function(a, b) return a.w.ns > b.w.ns end)

print(string.format("await sites · sampled %s × traced %s · a request = one task of its outermost coroutine%s",
  sampled.id, traced.id, opt.per ~= "" and (" (" .. opt.per .. ")") or ""))
for i, r in ipairs(rows) do
  if i > opt.limit then break end
  local f = r.w.frame
  print(string.format("%s  %s:%d  per %s: hits %s · waits %s [%s-%s] · each %s · a request lasts %s (traced %s)",
    bifocal.inert(f.qualname), bifocal.inert(f.file), f.line, bifocal.inert(r.root),
    r.hits_req and string.format("%.2f", r.hits_req) or "not traced",
    r.wait_req and bifocal.fmt_ns(r.wait_req) or "-",
    r.ci and bifocal.fmt_ns(r.ci[1]) or "-", r.ci and bifocal.fmt_ns(r.ci[2]) or "-",
    r.each and bifocal.fmt_ns(r.each) or "-", r.life and bifocal.fmt_ns(r.life) or "-",
    r.traced_life and bifocal.fmt_ns(r.traced_life) or "-"))
end
for root, n in pairs(partial) do
  local r = root_tasks[root]
  if r and (opt.per == "" or r.name == opt.per or per_key == root) then
    print(string.format("(%d task%s of %s left out of the per-request figures: running when tasks were first read or at the end)",
      n, n == 1 and "" or "s", bifocal.inert(r.name or "?")))
  end
end
