-- correlate.lua — the join of a sampled and a traced session, per function.
-- usage: bifocal run correlate.lua SAMPLED TRACED [--limit N] [--min-spearman R]
-- example: bifocal run correlate.lua prod-noon repro
--
-- One row per function (file, qualname, firstlineno), sorted by sampled self
-- share: the sampled estimate with its 95% interval next to the exact traced
-- calls and times, and the calls per second the two together imply for the
-- sampled run. Functions only the trace saw read "not observed", never 0%.
-- The Spearman rank correlation says whether both lenses rank the functions
-- alike (near 1: the sample is representative of the reproduction).
-- With --min-spearman R the script becomes a check (exit 1 below R).

local usage = "usage: bifocal run correlate.lua SAMPLED TRACED [--limit N] [--min-spearman R]"
local pos, opt = bifocal.parse_args(arg, { limit = 30, ["min-spearman"] = -2 }, usage)
if #pos ~= 2 then error(usage, 0) end

local sampled = assert(bifocal.session(pos[1]))
local traced = assert(bifocal.session(pos[2]))
local rows, sum = assert(bifocal.join(sampled, traced))
if sum.interpreters_differ then io.stderr:write("warning: ", sum.interpreters_differ, "\n") end

print(string.format("sampled %s × traced %s: %d samples over %.2f s (%s clock, %d thread%s)",
  sampled.id, traced.id, sum.samples, (sum.sampled_duration_ns or 0) / 1e9, sum.clock,
  sum.sampled_threads, sum.sampled_threads == 1 and "" or "s"))

local out = {}
for i, r in ipairs(rows) do
  if i > opt.limit then break end
  local ci = r.observed and string.format("[%s-%s]", bifocal.pct(r.self_ci[1]), bifocal.pct(r.self_ci[2])) or "not observed"
  out[#out + 1] = {
    r.observed and bifocal.pct(r.self_share) or "n/o", ci,
    r.observed and bifocal.pct(r.total_share) or "-",
    r.self_samples or 0,
    r.traced and r.calls or "untraced",
    r.per_call_ns and bifocal.fmt_ns(r.per_call_ns) or "-",
    r.traced_self_share and bifocal.pct(r.traced_self_share) or "-",
    r.calls_per_s and string.format("%.1f/s", r.calls_per_s) or "-",
    string.format("%s  %s:%d", r.qualname, r.file, r.firstlineno),
  }
end
bifocal.print_table({ "SELF", "95% CI", "TOTAL", "SAMPLES", "CALLS", "PER CALL", "TRACED SELF", "EST. CALLS", "FUNCTION" }, out)
if #rows > opt.limit then print(string.format("… %d more (--limit)", #rows - opt.limit)) end

if sum.spearman then
  print(string.format("\nSpearman rank correlation of sampled vs traced self time: %.3f over %d functions",
    sum.spearman, sum.n_both))
else
  print(string.format("\nSpearman rank correlation: n/a (%d functions seen by both)", sum.n_both))
end
print("EST. CALLS = sampled inclusive time ÷ traced time per call, per second of the sampled run")

if opt["min-spearman"] > -2 then
  bifocal.check(string.format("spearman >= %.2f", opt["min-spearman"]),
    sum.spearman ~= nil and sum.spearman >= opt["min-spearman"],
    sum.spearman and string.format("%.3f over %d functions", sum.spearman, sum.n_both) or "not enough functions")
end
