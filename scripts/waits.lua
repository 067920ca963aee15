-- waits.lua — the kernel lens's waits joined with a trace's exact calls.
-- usage: bifocal run waits.lua SAMPLED TRACED [--per FUNC] [--requests N] [--limit N]
-- example: bifocal run waits.lua prod-noon repro --per handle --requests 1200
--
-- SAMPLED was recorded with `record --kernel` (wall clock): each wait target
-- ("recvfrom tcp 10.0.0.5:5432") with its share of the wall time and the
-- Python function it happens under (s:waits{}). TRACED is a `bifocal trace`
-- of a reproduction: exact calls and times per caller→callee edge. Joined
-- on the function identity (file, qualname, firstlineno) of the function a
-- wait happens under, the blocking call is that function's callee in the
-- trace with the most time (a C function such as socket.recv; the function
-- itself when it calls none). Per wait the join says
--   "socket.recv under fetch_rows is called 3x per request in the trace;
--    production waits 40 ms per call on tcp :5432"
-- calls per request: the blocking callee's calls per call of FUNC (--per;
-- by default the function the wait happens under). Production waits per
-- call: the wait's sampled wall time over the production calls, which are
-- --requests N times the calls per request when the production request count
-- is known (exact), else estimated from the time the production requests
-- spent not blocked (on a CPU or waiting for one, from the samples) over the
-- trace's time per request outside the blocking calls: an estimate that
-- assumes the code between the waits costs the same in both runs (the
-- tracer slows Python code, which lowers the count and raises the per-call
-- wait; give --requests when the count is known).

local usage = "usage: bifocal run waits.lua SAMPLED TRACED [--per FUNC] [--requests N] [--limit N]"
local pos, opt = bifocal.parse_args(arg, { per = "", requests = 0, limit = 10 }, usage)
if #pos ~= 2 then error(usage, 0) end

local db = assert(bifocal.open())
local sampled = assert(db:session(pos[1]))
local traced = assert(db:session(pos[2]))
if sampled.kind ~= "sampled" then error("session " .. pos[1] .. " is not a sampled session (record --kernel)", 0) end
if traced.kind ~= "traced" then error("session " .. pos[2] .. " is not a traced session (bifocal trace)", 0) end

local function key(f) return (f.file or "?") .. "\0" .. (f.qualname or "?") .. "\0" .. tostring(f.firstlineno or 0) end

local waits = sampled:waits{}
local any = false
for _, w in ipairs(waits) do if w.under then any = true end end
if not any then
  error("session " .. pos[1] .. " has no kernel waits: record it with --kernel (wall clock)", 0)
end

-- the trace: functions by identity, and each caller's callees
local tfun, tname = {}, {}
for _, r in ipairs(traced:functions{}) do
  tfun[key(r)] = r
  tname[r.qualname] = tname[r.qualname] or r
end
local callees = {}
for _, e in ipairs(traced:edges()) do
  if e.caller then
    local k = key(e.caller)
    callees[k] = callees[k] or {}
    table.insert(callees[k], e)
  end
end

-- the sampled functions by identity: the budget and the kernel split per function
local sfun = {}
for _, r in ipairs(sampled:functions{}) do sfun[key(r)] = r end
local budget_ns = (sampled.sample_count or 0) / ((sampled.achieved_rate_hz or 0) > 0 and sampled.achieved_rate_hz or 1) * 1e9

local function find_per(name)
  if name == "" then return nil end
  for _, r in ipairs(traced:functions{}) do
    if r.qualname == name or r.name == name or (r.qualname or ""):match("%." .. name:gsub("%p", "%%%0") .. "$") then return r end
  end
  error("--per " .. name .. ": no such function in the traced session " .. pos[2], 0)
end
local per_fn = find_per(opt.per)
-- what FUNC reaches in the trace: a wait under a function it never calls
-- (another thread's loop) is counted per call of its own function instead
local reach = {}
if per_fn then
  local todo = { key(per_fn) }
  reach[todo[1]] = true
  while #todo > 0 do
    local k = table.remove(todo)
    for _, e in ipairs(callees[k] or {}) do
      local ck = key(e.callee)
      if not reach[ck] then reach[ck] = true; todo[#todo + 1] = ck end
    end
  end
end

local function short_target(text)
  -- "recvfrom tcp 127.0.0.1:5432" → "tcp 127.0.0.1:5432": the syscall is said by the callee
  local rest = text:match("^%S+%s+(.+)$")
  return rest or text
end

-- the words a blocking C function's name has for a syscall
local stems = {
  recvfrom = { "recv", "read" }, recvmsg = { "recv" }, recvmmsg = { "recv" }, read = { "read", "recv" },
  readv = { "read" }, pread64 = { "read" }, preadv = { "read" }, preadv2 = { "read" },
  write = { "write", "send" }, sendto = { "send" }, sendmsg = { "send" }, accept = { "accept" }, accept4 = { "accept" },
  connect = { "connect" }, futex = { "acquire", "lock", "wait", "join", "get" }, clock_nanosleep = { "sleep" },
  nanosleep = { "sleep" }, select = { "select", "sleep" }, pselect6 = { "select" }, poll = { "poll", "select" },
  ppoll = { "poll" }, epoll_wait = { "poll", "select" }, epoll_pwait = { "poll", "select" }, wait4 = { "wait" },
}
local function matches(callee, target)
  local sc = target:match("^(%S+)")
  for _, stem in ipairs(stems[sc] or {}) do
    if (callee.qualname or ""):lower():find(stem, 1, true) then return true end
  end
  return false
end

local function ms(ns) return bifocal.fmt_ns(ns) end

print(string.format("sampled %s × traced %s: %d samples over %.2f s (wall clock, kernel lens)",
  sampled.id, traced.id, sampled.sample_count or 0, sampled.duration_s or 0))

local out, lines = {}, {}
for _, w in ipairs(waits) do
  if #out >= opt.limit then break end
  if w.under and w.class ~= "cpu" and w.class ~= "runq" then
    local uk = key(w.under)
    local tu = tfun[uk]
    local blocking, edge = nil, nil
    -- the callee named like the syscall (recvfrom: *recv*), else the one with the most time
    for pass = 1, 2 do
      for _, e in ipairs(callees[uk] or {}) do
        if (pass == 2 or matches(e.callee, w.target)) and (not edge or e.total_ns > edge.total_ns) then edge = e end
      end
      if edge then break end
    end
    if edge then blocking = edge.callee.qualname else blocking = w.under.qualname end
    local per = (per_fn and reach[uk]) and per_fn or tu
    local calls_per_req, traced_per_call, req_ns, blocked_per_req
    if tu and per and per.calls and per.calls > 0 then
      local calls = edge and edge.calls or tu.calls
      local total = edge and edge.total_ns or tu.total_ns
      calls_per_req = calls / per.calls
      traced_per_call = calls > 0 and total / calls or nil
      req_ns = per.total_ns / per.calls
      blocked_per_req = total / per.calls
    end
    -- production calls of the blocking function
    local prod_calls, how
    if calls_per_req and opt.requests > 0 and (per == per_fn or not per_fn) then
      prod_calls, how = opt.requests * calls_per_req, string.format("%d requests", opt.requests)
    elseif calls_per_req then
      local sp = sfun[key(per)]
      local k = sp and sp.kernel
      local unblocked = k and ((k.cpu and k.cpu.share or 0) + (k.runq and k.runq.share or 0)) * budget_ns
      local outside = req_ns - blocked_per_req
      if unblocked and outside > 0 and unblocked / outside >= 1 then
        local reqs = unblocked / outside
        prod_calls, how = reqs * calls_per_req, string.format("~%.0f %s, est.", reqs,
          per == per_fn and "requests" or "calls of " .. bifocal.inert(per.qualname))
      end
    end
    local per_call = prod_calls and prod_calls > 0 and w.wall_ns / prod_calls or nil
    out[#out + 1] = {
      bifocal.pct(w.share), string.format("[%s-%s]", bifocal.pct(w.ci[1]), bifocal.pct(w.ci[2])),
      bifocal.inert(w.target), bifocal.inert(w.under.qualname),
      tu and bifocal.inert(blocking) or "untraced",
      calls_per_req and string.format("%.2f", calls_per_req) or "-",
      traced_per_call and ms(traced_per_call) or "-",
      per_call and ms(per_call) or "-",
      how or "-",
    }
    if tu and calls_per_req then
      lines[#lines + 1] = string.format("%s under %s is called %s× per %s in the trace (%s per call there); production waits %s per call on %s%s",
        bifocal.inert(blocking), bifocal.inert(w.under.qualname),
        (calls_per_req == math.floor(calls_per_req)) and string.format("%d", calls_per_req) or string.format("%.2f", calls_per_req),
        per ~= tu and "request (" .. bifocal.inert(per.qualname) .. ")" or "call of " .. bifocal.inert(w.under.qualname),
        traced_per_call and ms(traced_per_call) or "-",
        per_call and ms(per_call) or "? (give --requests)", bifocal.inert(short_target(w.target)),
        how and " (" .. how .. ")" or "")
    elseif not tu then
      lines[#lines + 1] = string.format("%s (%s of wall) waits under %s, which the trace did not see",
        bifocal.inert(w.target), bifocal.pct(w.share), bifocal.inert(w.under.qualname))
    end
  end
end
bifocal.print_table({ "WALL", "95% CI", "WAIT", "UNDER", "BLOCKING CALL", "CALLS/REQ", "TRACED/CALL", "PROD/CALL", "REQUESTS" }, out)
print("")
for _, l in ipairs(lines) do print(l) end
