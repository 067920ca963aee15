"""Exports of sessions made by the real lenses, fed to the real consumers:
pstats.Stats against real cProfile output of the same script (every Python
present), `go tool pprof`, speedscope's own schema, a strict Chrome-trace
check; and every export's totals against `replay`'s, to the sample."""
import json
import os
import subprocess

import pytest

from conftest import run, last_line_id

SCRIPT = r"""
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def even(n): return True if n == 0 else odd(n - 1)
def odd(n): return False if n == 0 else even(n - 1)
class Box:
    def __init__(self): self.items = []
    def put(self, x): self.items.append(x); return len(self.items)
def main():
    b = Box()
    for i in range(7):
        fib(12); even(9); b.put(i)
    d = {}
    for i in range(5): d.get(i); sorted([3, 1, 2], key=lambda v: -v)
main()
"""

# Entries (cc, nc) and caller tuples (nc, cc) of every function of the script,
# and of every C function it calls, restricted to callers in the script (the
# import machinery differs between the two runs; generators are left out:
# cProfile counts each resume as a call).
COMPARE = r"""
import json, pstats, sys
c = pstats.Stats(sys.argv[1]).stats
b = pstats.Stats(sys.argv[2]).stats
S = sys.argv[3]
mine = lambda k: k[0] == S
out = {"keys_c": sorted(k for k in c if mine(k)), "keys_b": sorted(k for k in b if mine(k)), "diff": [], "n": 0}
for k in c:
    cc = {repr(x): list(v[:2]) for x, v in c[k][4].items() if mine(x)}
    if not (mine(k) or cc):
        continue
    out["n"] += 1
    if k not in b:
        out["diff"].append([repr(k), "missing"])
        continue
    bc = {repr(x): list(v[:2]) for x, v in b[k][4].items() if mine(x)}
    if (mine(k) and c[k][:2] != b[k][:2]) or cc != bc:
        out["diff"].append([repr(k), c[k][:2], b[k][:2], cc, bc])
print(json.dumps(out))
"""


def test_pstats_equals_real_cprofile(python, tmp_path):
    script = tmp_path / "work.py"
    script.write_text(SCRIPT)
    cprof = tmp_path / "c.prof"
    r = subprocess.run([python, "-m", "cProfile", "-o", str(cprof), str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    db = str(tmp_path / "t.db")
    sid = last_line_id(run(["trace", "--", python, str(script)], db=db))
    bprof = tmp_path / "b.prof"
    run(["export", str(sid), "--format", "pstats", "-o", str(bprof)], db=db)
    r = subprocess.run([python, "-c", COMPARE, str(cprof), str(bprof), str(script)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["keys_c"] == d["keys_b"]
    assert len(d["keys_c"]) == 9  # <module> fib even odd Box __init__ put main <lambda>
    assert d["n"] >= 13 and d["diff"] == [], d["diff"]
