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


@pytest.mark.few_pythons  # 3.8: the setprofile tracer; 3.12+: sys.monitoring
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


# ---- the cpu clock inside its intervals (issue 21) --------------------------
# Threads that burst and sleep, C code without the GIL, an I/O wait: the
# workload of test_cpu_clock.py, whose functions time their own thread CPU.
# calibrate --clock cpu traces and samples one run of it; the exact traced
# shares are the oracle. Tolerances:
#  - every function with an exact share >= 1% is judged; at most one of them
#    (of about seven) may fall outside its 95% interval (if each missed 5% of
#    the time independently, two misses would happen ~4% of the time); one
#    capture that misses more is recorded once more (noise on a shared 2-CPU
#    host; two in a row would be a real fault);
#  - the interval is never narrower than the independent-samples (Wilson) one
#    and comes from at least 5 time blocks (batch means);
#  - the oracle itself: the exact shares of the seven self-timed functions
#    agree with their own thread_time_ns() totals within 4 points.
# Oldest and newest interpreter only, 1.5 s of the workload's CPU each.
from test_cpu_clock import MEASURED, WORKLOAD as CPU_WORKLOAD, _ends, _id  # noqa: E402
import pythons  # noqa: E402

CAL_MIN_EXACT = 0.01
CAL_MAX_MISSES = 1
CAL_ORACLE_POINTS = 4.0


def _calibrate_cpu(tmp_path, python, k):
    app = tmp_path / "app.py"
    app.write_text(CPU_WORKLOAD)
    out = tmp_path / ("truth%d.json" % k)
    db = str(tmp_path / ("cal%d.db" % k))
    r = run(["calibrate", "--clock", "cpu", "--json", "--", python, str(app), "1.5", str(out)], db=db, timeout=180)
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    with open(out) as f:
        truth = json.load(f)
    fs = {f["qualname"]: f for f in doc["functions"] if f["file"] == str(app)}
    return doc, fs, truth


def _misses(fs):
    return [(q, f["estimate"], f["ci"], f["exact"]) for q, f in fs.items()
            if f["exact"] >= CAL_MIN_EXACT and not (f["ci"][0] <= f["exact"] <= f["ci"][1])]


@pytest.mark.parametrize("py", _ends(pythons.discover()), ids=_id)
def test_calibrate_cpu_clock_inside_intervals(tmp_path, py):
    for k in range(2):
        doc, fs, truth = _calibrate_cpu(tmp_path, py["path"], k)
        assert doc["clock"] == "cpu" and doc["interval_blocks"] >= 5, doc
        judged = [q for q, f in fs.items() if f["exact"] >= CAL_MIN_EXACT]
        assert len(judged) >= 5, fs.keys()
        for f in fs.values():
            assert f["ci"][0] <= f["ci_independent"][0] + 1e-12 and f["ci"][1] >= f["ci_independent"][1] - 1e-12
        tt = float(sum(truth.values()))
        ex = sum(fs[q]["exact"] for q in MEASURED if q in fs)
        for q in MEASURED:
            exact = 100.0 * fs[q]["exact"] / ex if q in fs else 0.0
            assert abs(exact - 100.0 * truth.get(q, 0) / tt) <= CAL_ORACLE_POINTS, (q, exact, truth)
        misses = _misses(fs)
        if len(misses) <= CAL_MAX_MISSES:
            return
        print("capture %d: %d of %d judged functions outside their intervals: %s" % (k, len(misses), len(judged), misses))
    pytest.fail("two captures in a row had more than %d function(s) with >= 1%% exact share outside their "
                "95%% intervals: %s" % (CAL_MAX_MISSES, misses))
