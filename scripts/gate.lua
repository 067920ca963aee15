-- gate.lua — a regression gate between two sampled sessions.
-- usage: bifocal run gate.lua BASE CANDIDATE [--max-increase PP] [--min-samples N] [--alpha A] [--max-cost-increase PP] [--total]
-- example: bifocal run gate.lua release-1.4 candidate --max-increase 5
--
-- Fails (exit 1) when a function's self share (total share with --total) grew
-- by more than PP percentage points (default 5) AND the growth is beyond
-- sampling noise (two-proportion z-test, significance A (default 0.01)
-- Bonferroni-corrected over the functions tested), or when the profiler's own
-- cost (profiler CPU time ÷ duration) grew by more than --max-cost-increase
-- points (default 1). Functions with fewer than N samples (default 20) in both
-- sessions are not tested. Sessions taken with a different clock, rate or mode
-- are refused (exit 2): their shares are not comparable.

local usage = "usage: bifocal run gate.lua BASE CANDIDATE [--max-increase PP] [--min-samples N] [--alpha A] [--max-cost-increase PP] [--total]"
local pos, opt = bifocal.parse_args(arg, {
  ["max-increase"] = 5, ["min-samples"] = 20, alpha = 0.01, ["max-cost-increase"] = 1, total = false,
}, usage)
if #pos ~= 2 then error(usage, 0) end

local base = assert(bifocal.session(pos[1]))
local cand = assert(bifocal.session(pos[2]))
for _, s in ipairs({ base, cand }) do
  if s.kind == "traced" then error(string.format("session %d is traced; the gate compares sampled sessions", s.id), 0) end
end
for _, field in ipairs({ "clock", "rate_hz", "mode" }) do
  if base[field] ~= cand[field] then
    error(string.format("refusing to compare sessions %d and %d: %s differs (%s vs %s); record both the same way",
      base.id, cand.id, field, tostring(base[field]), tostring(cand[field])), 0)
  end
end

-- a different interpreter is a finding, not a reason to refuse: say so once
for _, field in ipairs({ "python_version", "python_executable" }) do
  if base[field] and cand[field] and base[field] ~= cand[field] then
    io.stderr:write(string.format("warning: sessions %d and %d ran different interpreters: Python %s (%s) vs Python %s (%s)\n",
      base.id, cand.id, tostring(base.python_version), tostring(base.python_executable or "executable unknown"),
      tostring(cand.python_version), tostring(cand.python_executable or "executable unknown")))
    break
  end
end

local share_key = opt.total and "total_share" or "self_share"
local samples_key = opt.total and "total_samples" or "self_samples"
local function index(s)
  local by, n = {}, 0
  for _, f in ipairs(s:functions()) do
    by[f.file .. "\0" .. f.qualname .. "\0" .. f.firstlineno] = f
    n = n + (f.self_samples or 0)
  end
  return by, n
end
local bfun, bn = index(base)
local cfun, cn = index(cand)
if bn == 0 or cn == 0 then error("a session without samples cannot be gated", 0) end

-- functions tested: enough samples in either session
local tested = {}
for key, f in pairs(cfun) do
  local b = bfun[key]
  if (f[samples_key] or 0) >= opt["min-samples"] or (b and (b[samples_key] or 0) >= opt["min-samples"]) then
    tested[#tested + 1] = { key = key, b = b, c = f }
  end
end
local alpha = opt.alpha / math.max(#tested, 1)

local rows, worst = {}, 0
for _, t in ipairs(tested) do
  local p1 = t.b and t.b[share_key] or 0
  local p2 = t.c[share_key]
  local k1, k2 = p1 * bn, p2 * cn
  local z, p = bifocal.stats.two_proportion(k1, bn, k2, cn)
  local pp = (p2 - p1) * 100
  t.pp, t.z, t.p, t.p1, t.p2 = pp, z, p, p1, p2
  rows[#rows + 1] = t
  if pp > worst then worst = pp end
end
table.sort(rows, function(a, b) return a.pp > b.pp end)

local out = {}
for i = 1, math.min(#rows, 10) do
  local t = rows[i]
  out[#out + 1] = { t.b and bifocal.pct(t.p1) or "not observed", bifocal.pct(t.p2),
    string.format("%+.1f", t.pp), string.format("%.2g", t.p), t.c.qualname .. "  " .. t.c.file .. ":" .. t.c.firstlineno }
end
print(string.format("gate: base %d (%d samples) → candidate %d (%d samples), %s share, %d functions tested",
  base.id, bn, cand.id, cn, opt.total and "total" or "self", #tested))
bifocal.print_table({ "BASE", "CANDIDATE", "Δ PP", "P-VALUE", "FUNCTION" }, out)
print()

local regressed = 0
for _, t in ipairs(rows) do
  if t.pp > opt["max-increase"] then
    local significant = t.z > 0 and t.p < alpha
    if significant then regressed = regressed + 1 end
    bifocal.check(string.format("%s share of %s", opt.total and "total" or "self", t.c.qualname), not significant,
      string.format("%s → %s (%+.1f pp, p=%.2g%s)", t.b and bifocal.pct(t.p1) or "not observed", bifocal.pct(t.p2),
        t.pp, t.p, significant and "" or ", within sampling noise"))
  end
end
if regressed == 0 then
  bifocal.check(string.format("no share grew > %g pp beyond noise", opt["max-increase"]), true,
    string.format("largest growth %+.1f pp over %d functions", worst, #tested))
end

local function cost(s)
  if not s.duration_ns or s.duration_ns <= 0 or not s.profiler_cpu_ns or s.profiler_cpu_ns <= 0 then return nil end
  return s.profiler_cpu_ns / s.duration_ns
end
local c1, c2 = cost(base), cost(cand)
if c1 and c2 then
  bifocal.check("profiler cost", (c2 - c1) * 100 <= opt["max-cost-increase"],
    string.format("%s → %s of the run", bifocal.pct(c1, 2), bifocal.pct(c2, 2)))
else
  bifocal.check("profiler cost", true, "not recorded in both sessions (imported?)")
end
