#!/usr/bin/env python3
"""Figures of the external sampler (prints them; not a timed test).

1. median cost per thread-sample on a 20-deep pure-Python stack, and
2. achieved rate / missed+invalid when 100 kHz is asked (both from the C
   benchmark build/sampling/bench_sampler), then
3. slowdown of a CPU-bound target sampled at 1 kHz: median of alternating
   runs with and without `bifocal record`, side by side.

usage: tests/bench/bench_sampler.py [--python EXE] [--runs N] [--seconds S]
Interpreters default to every one found (tests/integration/pythons.py).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

WORK = r"""
import sys, time
def f(n):
    if n == 0:
        x = 0
        for i in range(200):
            x += i
        return x
    return f(n - 1)
t = time.perf_counter()
for _ in range(int(sys.argv[1])):
    f(18)
print("%.6f" % (time.perf_counter() - t))
"""


def load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def slowdown(bifocal, py, runs, iters):
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "work.py")
        with open(script, "w") as f:
            f.write(WORK)
        db = os.path.join(d, "b.db")
        base, samp = [], []
        for i in range(runs):
            for sampled in ((False, True) if i % 2 == 0 else (True, False)):
                cmd = [py, script, str(iters)]
                if sampled:
                    cmd = [bifocal, "-d", db, "record", "--rate", "1000", "--"] + cmd
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                t = float(out.split()[0])  # the target's own timing is the first line
                (samp if sampled else base).append(t)
        return statistics.median(base), statistics.median(samp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", action="append")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--iters", type=int, default=120000)
    a = ap.parse_args()
    bench = os.path.join(ROOT, "build", "sampling", "bench_sampler")
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    pys = a.python or [p["path"] for p in pythons.discover()]
    print("bench_sampler: %d CPUs, load average %.2f at start" % (os.cpu_count(), load()))
    for py in pys:
        subprocess.run([bench, py, str(a.seconds)], check=False)
        b, s = slowdown(bifocal, py, a.runs, a.iters)
        print("%s: CPU-bound target at 1 kHz: median %.3fs sampled vs %.3fs alone "
              "(%d alternating runs each): slowdown %+.2f%%"
              % (py, s, b, a.runs, 100.0 * (s - b) / b))
    print("bench_sampler: load average %.2f at end" % load())


if __name__ == "__main__":
    main()
