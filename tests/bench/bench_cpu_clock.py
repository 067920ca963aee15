#!/usr/bin/env python3
"""CPU-clock accuracy, side by side: bifocal `record --clock cpu` and, when an
`austin` binary (3.x) is on PATH, `austin -s` (its CPU mode), on the same
oracle workload (tests/integration/test_cpu_clock.py: every leaf function
measures its own thread CPU time), quiet and beside two CPU-bound processes.
Prints each function's true share of the measured CPU and each profiler's
error in points, then the largest error. Both sample at 1 kHz.

usage: tests/bench/bench_cpu_clock.py [--python EXE] [--runs N] [--cpu-seconds S]
Interpreters default to the oldest and the newest found (tests/integration/pythons.py);
austin 3.x builds from github.com/P403n1x87/austin (Debian's austin 1.0 cannot
read 3.11+). Not a timed test: prints figures only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

MEASURED = ("steady", "crunch", "nap", "digest", "squeeze", "wait_io", "parse")


def workload_source():
    """The oracle workload of the integration test, read from its file."""
    src = open(os.path.join(ROOT, "tests", "integration", "test_cpu_clock.py")).read()
    start = src.index("WORKLOAD = r'''") + len("WORKLOAD = r'''")
    return src[start:src.index("'''", start)]


def shares(weights):
    tot = float(sum(weights.get(q, 0) for q in MEASURED)) or 1.0
    return {q: 100.0 * weights.get(q, 0) / tot for q in MEASURED}


def run_bifocal(bifocal, py, app, cpu_s, tmp):
    db, out = os.path.join(tmp, "b.db"), os.path.join(tmp, "truth.json")
    for f in (db, out):
        if os.path.exists(f):
            os.unlink(f)
    r = subprocess.run([bifocal, "--db", db, "record", "--clock", "cpu", "--", py, app, str(cpu_s), out],
                       capture_output=True, text=True, check=True)
    sid = r.stdout.strip().splitlines()[-1]
    fv = json.loads(subprocess.run([bifocal, "--db", db, "replay", sid, "--view", "functions", "--json",
                                    "--limit", "1000"], capture_output=True, text=True, check=True).stdout)
    w = {f["qualname"]: f["self_share"] for f in fv["functions"] if f["file"] == app}
    with open(out) as f:
        return shares(json.load(f)), shares(w), fv["session"]["extra"].get("cpu_clock", {})


def run_austin(austin, py, app, cpu_s, tmp):
    out, prof = os.path.join(tmp, "truth.json"), os.path.join(tmp, "austin.txt")
    for f in (out, prof):
        if os.path.exists(f):
            os.unlink(f)
    env = dict(os.environ, AUSTIN_NO_LOGGING="1")
    subprocess.run([austin, "-s", "-i", "1ms", "-o", prof, py, app, str(cpu_s), out],
                   capture_output=True, text=True, check=True, env=env)
    w = {}
    with open(prof) as f:
        for line in f:
            if not line.startswith("P"):
                continue
            stack, _, metric = line.rstrip("\n").rpartition(" ")
            leaf = stack.split(";")[-1]
            parts = leaf.rsplit(":", 2)  # file:function:line
            if len(parts) == 3 and parts[0] == app:
                w[parts[1]] = w.get(parts[1], 0) + int(metric)
    with open(out) as f:
        return shares(json.load(f)), shares(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--cpu-seconds", type=float, default=2.0)
    a = ap.parse_args()
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    austin = shutil.which("austin")
    if austin:
        v = subprocess.run([austin, "-V"], capture_output=True, text=True).stdout.strip() or \
            subprocess.run([austin, "-V"], capture_output=True, text=True).stderr.strip()
        if not v.split()[-1].startswith("3."):
            print("austin on PATH is %r, not 3.x: left out" % v)
            austin = None
    if not austin:
        print("no austin 3.x on PATH: bifocal alone (build austin from github.com/P403n1x87/austin)")
    ps = a.python or [p["path"] for p in (lambda l: [l[0], l[-1]] if len(l) > 1 else l)(pythons.discover())]
    tmp = tempfile.mkdtemp(prefix="bench_cpu_clock.")
    app = os.path.join(tmp, "app.py")
    with open(app, "w") as f:
        f.write(workload_source())
    worst = {"bifocal": 0.0, "austin": 0.0}
    for condition in ("quiet", "beside two CPU-bound processes"):
        hogs = [] if condition == "quiet" else \
            [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            for py in ps:
                for run in range(a.runs):
                    truth, b, cc = run_bifocal(bifocal, py, app, a.cpu_seconds, tmp)
                    at, au = run_austin(austin, py, app, a.cpu_seconds, tmp) if austin else (None, None)
                    print("\n%s, %s, run %d  (bifocal: %s)" % (condition, py, run + 1,
                                                               cc.get("method", "?")))
                    print("  %-8s %7s %9s %7s   %7s %9s %7s" % ("function", "true%", "bifocal%", "err",
                                                               "true%", "austin%", "err"))
                    for q in MEASURED:
                        eb = b[q] - truth[q]
                        worst["bifocal"] = max(worst["bifocal"], abs(eb))
                        row = "  %-8s %7.2f %9.2f %+7.2f" % (q, truth[q], b[q], eb)
                        if austin:
                            ea = au[q] - at[q]
                            worst["austin"] = max(worst["austin"], abs(ea))
                            row += "   %7.2f %9.2f %+7.2f" % (at[q], au[q], ea)
                        print(row)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    print("\nlargest error: bifocal %.2f points%s" %
          (worst["bifocal"], ", austin -s %.2f points" % worst["austin"] if austin else ""))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
