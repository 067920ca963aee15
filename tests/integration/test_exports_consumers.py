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


# ---- sessions of the real lenses (newest Python) ------------------------------

import pythons  # noqa: E402
from views_helpers import require_tool  # noqa: E402

WORK = r"""
import threading, time, lib
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def work():
    return sum(i * i for i in range(3000))
def worker():
    t = time.time()
    while time.time() - t < 0.8: lib.work(); time.sleep(0.002)
th = threading.Thread(target=worker, name="worker"); th.start()
t = time.time()
while time.time() - t < 0.8: fib(14); work(); lib.work()
th.join()
"""
LIB = r"""
def work():
    s = 0
    for i in range(4000): s += i % 7
    return s
"""


@pytest.fixture(scope="module")
def lens(tmp_path_factory):
    d = tmp_path_factory.mktemp("lens")
    py = pythons.discover()[-1]["path"]
    (d / "app.py").write_text(WORK)
    (d / "lib.py").write_text(LIB)
    db = str(d / "l.db")
    s = {
        "sampled": last_line_id(run(["record", "--rate", "400", "--", py, str(d / "app.py")], db=db, timeout=120)),
        "traced": last_line_id(run(["trace", "--", py, str(d / "app.py")], db=db, timeout=120)),
    }
    return db, s, d


def replay_json(db, sid):
    return json.loads(run(["replay", str(sid), "--json", "--limit", "100000"], db=db).stdout)


def go_pprof(d, *args):
    go = require_tool("go", "golang-go")
    env = dict(os.environ, HOME=str(d), GOCACHE=str(d / "gocache"), PPROF_TMPDIR=str(d), GOFLAGS="",
               GOTOOLCHAIN="local", GOPROXY="off")
    # no -symbolize=none: pprof then applies its name clean-up, as users see it
    r = subprocess.run([go, "tool", "pprof"] + list(args), capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def top_rows(out):
    rows, started = {}, False
    for line in out.splitlines():
        if line.strip().startswith("flat"):
            started = True
            continue
        if started and line.strip():
            p = line.split()
            rows[" ".join(p[5:])] = (p[0], p[3])
    return rows


def total_of(out):
    for line in out.splitlines():
        if "Total samples = " in line:
            return line.split("Total samples = ")[1].split()[0]
    raise AssertionError(out)


def test_pprof_sampled_in_go_tool_pprof(lens):
    db, s, d = lens
    pb = d / "s.pb.gz"
    run(["export", str(s["sampled"]), "--format", "pprof", "-o", str(pb)], db=db)
    out = go_pprof(d, "-top", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0", str(pb))
    r = replay_json(db, s["sampled"])
    # default index is what replay shares by (samples for a wall session), every sample kept
    assert "Type: samples" in out
    assert int(total_of(out)) == r["total_samples"], out
    rows = top_rows(out)
    mod = [k for k in rows if k.endswith(".<module>")]
    assert "app.<module>" in mod, out
    assert "<unknown>" not in out
    # same qualname in two files: two rows, each with replay's self samples
    by = {}
    for f in r["functions"]:
        if f["file"].endswith("/app.py") or f["file"].endswith("/lib.py"):
            by["%s.%s" % (os.path.basename(f["file"])[:-3], f["qualname"])] = f
    assert {"app.work", "lib.work", "app.fib"} <= set(by), sorted(by)
    for name, f in by.items():
        if f["self_samples"] or name in rows:
            assert int(rows[name][0]) == f["self_samples"], (name, rows.get(name), f)
    empty = r["total_samples"] - sum(f["self_samples"] for f in r["functions"])
    assert int(rows.get("[no Python frame]", ("0",))[0]) == empty
    raw = go_pprof(d, "-raw", str(pb))
    assert "samples/count[dflt] wall/nanoseconds" in raw
    assert len({l.strip() for l in raw.splitlines() if l.strip().startswith("thread:[")}) >= 2
    body = raw.split("samples/count[dflt] wall/nanoseconds\n")[1].split("Locations")[0]
    counts = [int(l.split()[0]) for l in body.splitlines() if l.strip() and ":" in l and not l.strip().startswith("thread")]
    assert sum(counts) == r["total_samples"]
    traces = go_pprof(d, "-traces", str(pb))
    assert "lib.work" in traces and "app.<module>" in traces


def test_pprof_traced_counts_calls_like_the_trace_view(lens):
    db, s, d = lens
    pb = d / "t.pb.gz"
    run(["export", str(s["traced"]), "--format", "pprof", "-o", str(pb)], db=db)
    r = replay_json(db, s["traced"])
    calls = go_pprof(d, "-top", "-sample_index=calls", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0",
                     str(pb))
    rows = top_rows(calls)
    for f in r["functions"]:
        if f["file"].endswith("/app.py") or f["file"].endswith("/lib.py"):
            name = "%s.%s" % (os.path.basename(f["file"])[:-3], f["qualname"])
            assert int(rows[name][0]) == f["calls"], (name, rows.get(name), f["calls"])
    fib = [f for f in r["functions"] if f["qualname"] == "fib"][0]
    assert fib["calls"] > 100 * fib["primitive_calls"] > 0  # recursion is in there
    out = go_pprof(d, "-top", str(pb))
    assert "Type: wall" in out and "app.<module>" in out
    traces = go_pprof(d, "-traces", "-sample_index=calls", str(pb))
    assert "app.fib\n" in traces and traces.count("app.fib") >= 2
