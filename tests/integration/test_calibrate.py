"""calibrate: one run traced and sampled at once; the big functions' exact
shares must fall inside (or very near) the sampled 95% intervals."""
import json
import os
import textwrap

import pytest

from conftest import ROOT, run

WORKLOAD = textwrap.dedent("""
    import sys, time
    def heavy():
        s = 0
        for i in range(3000):
            s += i * i
        return s
    def light():
        s = 0
        for i in range(1000):
            s += i
        return s
    def tiny(x):
        return x + 1
    def main():
        t0 = time.time()
        while time.time() - t0 < float(sys.argv[1]):
            heavy(); light()
            for i in range(20):
                tiny(i)
    main()
""")


def test_calibrate_json(tmp_path, db, python):
    w = tmp_path / "w.py"
    w.write_text(WORKLOAD)
    r = run(["calibrate", "--rate", "2000", "--clock", "cpu", "--json", "--", python, str(w), "1.5"],
            db=db, timeout=120)
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    fs = {f["qualname"]: f for f in doc["functions"]}
    for k in ("heavy", "light", "tiny", "main"):
        assert k in fs, k
    for f in doc["functions"]:
        for key in ("file", "qualname", "firstlineno", "estimate", "ci", "exact", "covered", "calls", "samples"):
            assert key in f
    h, l = fs["heavy"], fs["light"]
    assert h["calls"] == l["calls"] and h["calls"] > 10
    assert fs["tiny"]["calls"] == 20 * h["calls"]
    # heavy does ~3x light's work: exact shares say so, and the estimate agrees
    # within 8 points (tolerance for sampling noise and the tracer's own cost)
    assert h["exact"] > l["exact"]
    assert abs(h["estimate"] - h["exact"]) < 0.08, (h, l)
    assert abs(l["estimate"] - l["exact"]) < 0.08, (h, l)
    assert doc["sampled_session"] != doc["traced_session"]
    assert doc["recommended_rate_hz"] >= 1
    sessions = json.loads(run(["sessions", "--json"], db=db).stdout)
    kinds = sorted(s["kind"] for s in sessions)
    assert kinds == ["sampled", "traced"]


def test_calibrate_table_and_bad_args(tmp_path, db):
    r = run(["calibrate"], db=db, check=False)
    assert r.returncode == 2 and "needs a command" in r.stderr
    r = run(["calibrate", "--rate", "0", "--", "python3", "-c", "pass"], db=db, check=False)
    assert r.returncode == 2 and "--rate" in r.stderr
