-- memory.lua — the memory join: a sampled session's growth per function next
-- to a traced session's exact allocations, per function.
-- usage: bifocal run memory.lua SAMPLED TRACED [--limit N] [--max-kept-per-call BYTES]
-- example: bifocal run memory.lua prod-noon repro
--
-- SAMPLED was recorded with `record --memory` (resident growth charged to the
-- stack that ran), TRACED with `trace --memory` (exact allocations through the
-- allocator hooks). One row per function (file, qualname, firstlineno), by
-- sampled growth: its share of all growth with the 95% interval, and offline
-- how many bytes it allocates per call and how many of them it keeps (still
-- live when the trace ended). The headline answers "the function that grows
-- most in production allocates N bytes per call offline and keeps M of
-- them". With --max-kept-per-call B it becomes a check (exit 1 when that
-- function keeps more than B bytes per call).
-- Resident growth lags allocation and freed memory is not always returned to
-- the OS: read the sampled share as where the process grew, the traced bytes
-- as what the code allocates (docs/memory.md).

local usage = "usage: bifocal run memory.lua SAMPLED TRACED [--limit N] [--max-kept-per-call BYTES]"
local pos, opt = bifocal.parse_args(arg, { limit = 20, ["max-kept-per-call"] = -1 }, usage)
if #pos ~= 2 then error(usage, 0) end

local sampled = assert(bifocal.session(pos[1]))
local traced = assert(bifocal.session(pos[2]))
local srows, ssum = sampled:memory{}
if not srows then error(ssum, 0) end
local trows, tsum = traced:memory{}
if not trows then error(tsum, 0) end
if ssum.lens ~= "sampled" then error(string.format("session %s is traced; give a sampled one first", sampled.id), 0) end
if tsum.lens ~= "traced" then error(string.format("session %s is sampled; give a traced one second", traced.id), 0) end

local function key(r) return (r.file or "?") .. "\0" .. (r.qualname or "?") .. "\0" .. tostring(r.firstlineno or 0) end
local by_key = {}
for _, r in ipairs(trows) do by_key[key(r)] = r end

local function bytes(v)
  if v == nil then return "-" end
  local a = math.abs(v)
  if a >= 1073741824 then return string.format("%.2f GiB", v / 1073741824) end
  if a >= 1048576 then return string.format("%.1f MiB", v / 1048576) end
  if a >= 1024 then return string.format("%.1f KiB", v / 1024) end
  return string.format("%.0f B", v)
end

print(string.format("sampled %s × traced %s: %s of resident growth (%s shrink) over %d changes; %s allocated offline, %s still live",
  sampled.id, traced.id, bytes(ssum.growth_bytes), bytes(ssum.shrink_bytes), ssum.changes,
  bytes(tsum.alloc_bytes), bytes(tsum.live_bytes)))

local out, head = {}, nil
for _, r in ipairs(srows) do
  if r.growth_bytes > 0 then
    local t = by_key[key(r)]
    if not head then head = { s = r, t = t } end
    if #out < opt.limit then
      out[#out + 1] = {
        bifocal.pct(r.growth_share),
        string.format("[%s-%s]", bifocal.pct(r.growth_ci and r.growth_ci[1] or 0), bifocal.pct(r.growth_ci and r.growth_ci[2] or 0)),
        bytes(r.growth_bytes), bytes(r.shrink_bytes),
        t and t.calls or "untraced",
        t and bytes(t.alloc_bytes_per_call) or "-",
        t and bytes(t.live_bytes_per_call) or "-",
        t and bifocal.pct(t.live_share) or "-",
        string.format("%s  %s:%d", bifocal.inert(r.qualname), bifocal.inert(r.file), r.firstlineno),
      }
    end
  end
end
bifocal.print_table({ "GROWTH", "95% CI", "GREW", "SHRANK", "CALLS", "ALLOC/CALL", "KEPT/CALL", "KEPT SHARE", "FUNCTION" }, out)

if not head then
  print("\nthe sampled session saw no growth")
elseif not head.t then
  print(string.format("\nthe function that grows most in production, %s (%s of growth), was not traced offline",
    bifocal.inert(head.s.qualname), bifocal.pct(head.s.growth_share)))
else
  local t = head.t
  print(string.format("\nthe function that grows most in production, %s (%s of growth), allocates %s per call offline and keeps %s of them (%d calls, %s kept in all)",
    bifocal.inert(head.s.qualname), bifocal.pct(head.s.growth_share), bytes(t.alloc_bytes_per_call),
    bytes(t.live_bytes_per_call), t.calls, bytes(t.live_bytes)))
end
-- where the trace says the memory is kept, for comparison
local kept = {}
for _, r in ipairs(trows) do if (r.live_bytes or 0) > 0 then kept[#kept + 1] = r end end
table.sort(kept, function(a, b) return a.live_bytes > b.live_bytes end)
if kept[1] then
  print(string.format("offline, %s keeps the most: %s (%s of what is still live)", bifocal.inert(kept[1].qualname),
    bytes(kept[1].live_bytes), bifocal.pct(kept[1].live_share)))
end

if opt["max-kept-per-call"] >= 0 then
  local per = head and head.t and head.t.live_bytes_per_call
  bifocal.check(string.format("top grower keeps <= %s per call", bytes(opt["max-kept-per-call"])),
    per ~= nil and per <= opt["max-kept-per-call"],
    per and string.format("%s keeps %s per call", head.s.qualname, bytes(per)) or "the top grower was not traced")
end
