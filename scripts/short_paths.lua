-- short_paths.lua — functions called many times that sampling barely saw.
-- usage: bifocal run short_paths.lua TRACED SAMPLED [--min-calls N] [--max-samples K] [--builtins]
-- example: bifocal run short_paths.lua repro prod-noon --min-calls 1000
--
-- Not observed is not not executed: a function whose calls are much shorter
-- than the sampling interval can run millions of times and get no sample.
-- For every function the trace saw called at least N times (default 1000)
-- that got at most K samples (default 2) in the sampled session, this lists
-- the time the trace says it takes per call and in all, the samples expected
-- at the session's rate, and the rate that would have been needed to see it
-- with 95% probability (≥ 3 expected samples) and to size it (≥ 30 samples).
-- Its expected time in the sampled run is its traced share of time × the
-- sampled thread time (the workload mix is assumed to be the same).
-- C functions (bifocal.is_builtin) are left out unless --builtins is given: a
-- sampler without --native never sees them, however long they run.
-- Traced per-call times include the tracer's own overhead, so for the
-- shortest functions the needed rates are on the low side.

local usage = "usage: bifocal run short_paths.lua TRACED SAMPLED [--min-calls N] [--max-samples K] [--builtins]"
local pos, opt = bifocal.parse_args(arg, { ["min-calls"] = 1000, ["max-samples"] = 2, builtins = false }, usage)
if #pos ~= 2 then error(usage, 0) end

local traced = assert(bifocal.session(pos[1]))
local sampled = assert(bifocal.session(pos[2]))
local rows, sum = assert(bifocal.join(sampled, traced))
local rate = sampled.rate_hz and sampled.rate_hz > 0 and sampled.rate_hz or sampled.achieved_rate_hz

local function hz(v)
  if not v then return "-" end
  if v > 1e6 then return "> 1 MHz (trace it)" end
  if v >= 1e3 then return string.format("%.1f kHz", v / 1e3) end
  return string.format("%.0f Hz", v)
end

local out = {}
for _, r in ipairs(rows) do
  if r.traced and r.calls >= opt["min-calls"] and (opt.builtins or not bifocal.is_builtin(r.file)) and (r.self_samples or 0) <= opt["max-samples"]
      and (r.total_samples or 0) <= opt["max-samples"] then
    local share = sum.traced_ns > 0 and r.total_ns / sum.traced_ns or 0
    local secs = share * (sum.budget_ns or 0) / 1e9
    local expected = rate and secs * rate or nil
    out[#out + 1] = {
      r.calls, bifocal.fmt_ns(r.per_call_ns), bifocal.fmt_ns(r.total_ns), bifocal.pct(share, 2),
      r.observed and r.total_samples or "not observed",
      expected and string.format("%.2f", expected) or "-",
      secs > 0 and hz(3 / secs) or "-", secs > 0 and hz(30 / secs) or "-",
      string.format("%s  %s:%d", r.qualname, r.file, r.firstlineno),
      sort = r.calls,
    }
  end
end
table.sort(out, function(a, b) return a.sort > b.sort end)
print(string.format("traced %d × sampled %d at %s: functions called ≥ %d times with ≤ %d samples",
  traced.id, sampled.id, hz(rate), opt["min-calls"], opt["max-samples"]))
if #out == 0 then
  print("none: every often-called function was seen by sampling")
else
  bifocal.print_table({ "CALLS", "PER CALL", "TRACED TIME", "SHARE", "SAMPLES", "EXPECTED", "RATE TO SEE", "RATE TO SIZE", "FUNCTION" }, out)
  print("\nRATE TO SEE: ≥ 95% chance of at least one sample; RATE TO SIZE: about 30 samples (±35% interval)")
end
