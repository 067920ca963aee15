-- hypothesis.lua — state a performance hypothesis and let bifocal check it.
-- usage: bifocal run hypothesis.lua SAMPLED TRACED [--func parse] [--min-share 30] [--per handle] [--ratio 3]
-- example: bifocal run hypothesis.lua prod-noon repro --func parse --min-share 30 --per handle --ratio 3
--
-- "parse is at least 30% of the time in production, and is called 3 times per
-- request (handle)". Copy this file and edit the checks: each bifocal.check
-- adds a row to the verdict; the exit status is 1 when any of them fails.

local usage = "usage: bifocal run hypothesis.lua SAMPLED TRACED [--func F] [--min-share PCT] [--per G] [--ratio R]"
local pos, opt = bifocal.parse_args(arg, { func = "parse", ["min-share"] = 30, per = "handle", ratio = 3 }, usage)
if #pos ~= 2 then error(usage, 0) end

local prod = assert(bifocal.session(pos[1]))   -- far lens: estimates from production
local repro = assert(bifocal.session(pos[2]))  -- near lens: exact counts offline

-- 1. Its share of time in production, with 95% confidence (the whole interval
--    must clear the bar, not only the point estimate).
local f = prod:func(opt.func)
bifocal.check(string.format("%s ≥ %g%% of samples", opt.func, opt["min-share"]),
  f ~= nil and f.total_ci[1] * 100 >= opt["min-share"],
  f and string.format("%s [%s-%s] inclusive, %d samples", bifocal.pct(f.total_share),
    bifocal.pct(f.total_ci[1]), bifocal.pct(f.total_ci[2]), f.total_samples) or "not observed")

-- 2. Calls per request, exactly, from the trace.
local callee, caller = repro:func(opt.func), repro:func(opt.per)
local ratio = callee and caller and caller.calls > 0 and callee.calls / caller.calls
bifocal.check(string.format("%s called %g× per %s", opt.func, opt.ratio, opt.per),
  ratio ~= nil and math.abs(ratio - opt.ratio) < 1e-9,
  ratio and string.format("%d calls / %d = %.2f", callee.calls, caller.calls, ratio) or "not traced")

-- 3. Both lenses together: the production call rate this implies.
local rows = bifocal.join(prod, repro)
for _, r in ipairs(rows) do
  if r.qualname == (f and f.qualname) and r.calls_per_s then
    print(string.format("%s: about %.0f calls/s in production (%s per call offline)",
      r.qualname, r.calls_per_s, bifocal.fmt_ns(r.per_call_ns)))
  end
end
