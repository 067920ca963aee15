"""Views and exports on sessions made by the real lenses: `bifocal record`
(sampler) and `bifocal trace` (tracer, plain and focus mode) on a small
threaded workload, with the newest Python present."""
import json
import subprocess
import sys

import pytest

import pythons
from conftest import run, last_line_id

WORK = r"""
import json, threading, time
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def parse():
    for _ in range(100): json.loads('{"a": [1, 2, 3], "b": "x"}')
def handle():
    parse(); fib(16)
def worker():
    t = time.time()
    while time.time() - t < 1.0: fib(14); time.sleep(0.001)
th = threading.Thread(target=worker, name="worker"); th.start()
t = time.time()
while time.time() - t < 1.0: handle()
th.join()
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    py = pythons.discover()[-1]["path"]
    script = d / "work.py"
    script.write_text(WORK)
    db = str(d / "r.db")
    s = {
        "sampled": last_line_id(run(["record", "--rate", "500", "--", py, str(script)], db=db, timeout=120)),
        "traced": last_line_id(run(["trace", "--", py, str(script)], db=db, timeout=120)),
        "focus": last_line_id(run(["trace", "--focus", "*handle*", "--", py, str(script)], db=db, timeout=120)),
    }
    return db, s, d


def test_views_on_real_sessions(real):
    db, s, d = real
    for view in ("functions", "flame", "heatmap", "gil", "stack"):
        out = d / ("sampled-%s.out" % view)
        run(["replay", str(s["sampled"]), "--view", view, "-o", str(out)], db=db)
        assert out.stat().st_size > 0
    f = json.loads(run(["replay", str(s["sampled"]), "--json"], db=db).stdout)
    assert any(r["qualname"] == "fib" for r in f["functions"])
    g = json.loads(run(["replay", str(s["sampled"]), "--view", "gil", "--json"], db=db).stdout)
    assert len(g["threads"]) >= 2
    for view, ok in (("functions", True), ("flame", True), ("heatmap", False), ("gil", False), ("stack", False)):
        r = run(["replay", str(s["traced"]), "--view", view, "-o", str(d / "t.out")], db=db, check=False)
        assert (r.returncode == 0) == ok, (view, r.stderr)
        if not ok:
            assert "traced" in r.stderr


def test_exports_on_real_sessions(real):
    db, s, d = real
    for kind in ("sampled", "traced"):
        for fmt in ("speedscope", "pstats", "pprof"):
            run(["export", str(s[kind]), "--format", fmt, "-o", str(d / ("%s.%s" % (kind, fmt)))], db=db)
    t = json.loads(run(["replay", str(s["traced"]), "--json", "--limit", "1000"], db=db).stdout)
    fib = [r for r in t["functions"] if r["qualname"] == "fib"][0]
    code = ("import pstats, sys; st = pstats.Stats(sys.argv[1]).stats\n"
            "print([v[1] for k, v in st.items() if k[2] == 'fib'][0])")
    r = subprocess.run([sys.executable, "-c", code, str(d / "traced.pstats")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == fib["calls"]
    run(["export", str(s["focus"]), "--format", "chrome", "-o", str(d / "focus.json")], db=db)
    ev = json.load(open(d / "focus.json"))["traceEvents"]
    assert any(e["ph"] == "X" and e["name"] == "handle" for e in ev)
