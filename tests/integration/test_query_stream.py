"""The query layer streams: a Lua script iterating every sample of a
3,000,000-sample session stays in bounded memory (the whole session in
memory would take ~130 MB), sees every sample once, and a db closed
mid-iteration gives one clear error."""
import os
import subprocess
import sys

from conftest import bifocal_bin
from views_helpers import gen

ITER = r"""
local db = bifocal.open()
local s = db:session(tonumber(arg[1]))
local n, w, last = 0, 0, {}
for smp in s:samples{} do
  n = n + smp.count; w = w + smp.weight
  local prev = last[smp.thread_id]
  assert(prev == nil or smp.ts_ns >= prev, "time order within a thread")
  last[smp.thread_id] = smp.ts_ns
end
local sc = 0
for _, st in ipairs(s:stacks{}) do sc = sc + st.count end
print(n, sc)
"""
CLOSE = r"""
local db = bifocal.open()
local s = db:session(tonumber(arg[1]))
for smp in s:samples{} do db:close() end
"""
PEAK = r"""
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""


def test_lua_samples_stream_in_bounded_memory(tmp_path):
    db = str(tmp_path / "big.db")
    n = 3000000
    sid = gen(db, "sampled", "--samples", str(n), "--threads", "2")
    script = tmp_path / "it.lua"
    script.write_text(ITER)
    r = subprocess.run([sys.executable, "-c", PEAK, bifocal_bin(), "--db", db, "run", str(script), str(sid)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert int(out[0]) == n and int(out[1]) == n
    kb = int(out[2])
    assert kb < 40 * 1024, "iterating %d samples peaked at %d KB" % (n, kb)
    script.write_text(CLOSE)
    r = subprocess.run([bifocal_bin(), "--db", db, "run", str(script), str(sid)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "closed during the iteration" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3
