#!/usr/bin/env python3
"""Figures of the external sampler (prints them; not a timed test).

1. median cost per thread-sample on a 20-deep pure-Python stack, and
2. achieved rate / missed+invalid when 100 kHz is asked (both from the C
   benchmark build/sampling/bench_sampler), then
3. slowdown of a CPU-bound target sampled at 1 kHz, two ways: inside one
   long-running target, half-second windows of `bifocal record --pid`
   alternating with windows alone (adjacent windows share the host's speed
   of the moment, so this is the precise one); and whole launched runs with
   and without `bifocal record --`, in alternating pairs.

usage: tests/bench/bench_sampler.py [--python EXE] [--runs N] [--windows N] [--seconds S]
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
from progress_target import CPU_PROGRESS as PROGRESS, CPU_WORK as F, ProgressTarget  # noqa: E402

WORK = F + r"""
t, c = time.perf_counter(), time.process_time()
for _ in range(int(sys.argv[1])):
    f(18)
print("%.6f %.6f" % (time.perf_counter() - t, time.process_time() - c))
"""


def windows(bifocal, py, n, secs):
    """Slowdown measured inside one target: n windows of `bifocal record
    --pid --rate 1000` (attach, sample, detach) alternating with windows
    alone, each about secs long. Each sampled window's progress rate is
    compared with the mean of the two windows alone around it, so a host
    that changes speed over seconds cancels out. Returns the per-window
    slowdowns of wall-clock and of the target's CPU-time progress."""
    spans = []  # (sampled, t0, t1) in monotonic ns
    with ProgressTarget(py, PROGRESS) as tg:
        db = os.path.join(tg.dir, "w.db")
        for i in range(2 * n + 1):
            sampled = i % 2 == 1
            run = (lambda: subprocess.run([bifocal, "--db", db, "record", "--pid", str(tg.pid), "--rate", "1000",
                                           "--duration", str(secs)], capture_output=True, check=True)) if sampled else None
            spans.append((sampled,) + tg.window(run, secs))
        torn = torn_rates(bifocal, db)
    r = [tg.rate(t0, t1) for _, t0, t1 in spans]
    wall, cpu = [], []
    for i in range(1, len(spans) - 1, 2):
        on, before, after = r[i], r[i - 1], r[i + 1]
        if not (on and before and after):
            continue
        wall.append((before[0] + after[0]) / 2 / on[0])
        cpu.append((before[1] + after[1]) / 2 / on[1])
    return wall, cpu, torn


def torn_rates(bifocal, db):
    """'X% re-read, Y% cut at a caller, Z% given up' over the sessions of db
    (torn stacks: changed while read; see the docs, Consistent stacks)."""
    import json
    r = subprocess.run([bifocal, "--db", db, "sessions", "--json"], capture_output=True, text=True)
    try:
        rows = json.loads(r.stdout)
    except ValueError:
        return "torn: n/a"
    ticks = sum(s["samples"] + s["invalid"] for s in rows) or 1
    ret = sum((s.get("extra") or {}).get("torn_retried", 0) for s in rows)
    inv = sum((s.get("extra") or {}).get("torn_invalid", 0) for s in rows)
    cut = sum((s.get("extra") or {}).get("torn_cut", 0) for s in rows)
    return "torn: %.3f%% of samples re-read, %.3f%% cut at a caller, %.3f%% given up" % (
        100.0 * ret / ticks, 100.0 * cut / ticks, 100.0 * inv / ticks)


def load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def slowdown(bifocal, py, runs, iters):
    """Alternating pairs (order flipped every pair) of the same CPU-bound
    target, alone and under `bifocal record --rate 1000`. Returns the median
    of the per-pair ratios of the target's own wall time and of its own CPU
    time (user+sys: immune to preemption by other load on the machine), and
    the medians of the two wall-time groups."""
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "work.py")
        with open(script, "w") as f:
            f.write(WORK)
        db = os.path.join(d, "b.db")
        base, samp, wall_r, cpu_r = [], [], [], []
        for i in range(runs):
            pair = {}
            for sampled in ((False, True) if i % 2 == 0 else (True, False)):
                cmd = [py, script, str(iters)]
                if sampled:
                    cmd = [bifocal, "--db", db, "record", "--rate", "1000", "--"] + cmd
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                # the target's own timing is the first line: wall and CPU seconds
                wall, cpu = (float(x) for x in out.split("\n")[0].split()[:2])
                pair[sampled] = (wall, cpu)
                (samp if sampled else base).append(wall)
            wall_r.append(pair[True][0] / pair[False][0])
            cpu_r.append(pair[True][1] / pair[False][1])
        return (statistics.median(base), statistics.median(samp), wall_r, cpu_r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", action="append")
    ap.add_argument("--runs", type=int, default=9,
                    help="alternating pairs of whole launched runs (0: skip)")
    ap.add_argument("--windows", type=int, default=20,
                    help="sampled windows, each between two windows alone")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--iters", type=int, default=60000)
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness increment for the benchmark and its targets (root may use a "
                         "negative one to stand out from other load on a shared machine)")
    ap.add_argument("--autogroup-nice", type=int, default=None,
                    help="set this session's scheduler autogroup niceness (Linux, root for < 0): "
                         "with autogroups, plain nice does not help against other sessions' load")
    a = ap.parse_args()
    if a.nice:
        os.nice(a.nice)
    old_group_nice = None
    if a.autogroup_nice is not None:
        try:
            with open("/proc/self/autogroup") as f:
                old_group_nice = int(f.read().split()[-1])
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(a.autogroup_nice))
        except (OSError, ValueError) as e:
            print("bench_sampler: cannot set autogroup nice: %s" % e)
    try:
        run_all(a)
    finally:
        if old_group_nice is not None:  # the group outlives us: give it back
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(old_group_nice))


def run_all(a):
    bench = os.path.join(ROOT, "build", "sampling", "bench_sampler")
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    pys = a.python or [p["path"] for p in pythons.discover()]
    print("bench_sampler: %d CPUs, load average %.2f at start, nice %d"
          % (os.cpu_count(), load(), os.nice(0)), flush=True)
    def pct(r):
        if not r:
            return "n/a"
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        return "%+.2f%% (quartiles %+.1f%% .. %+.1f%%)" % (
            100.0 * (statistics.median(r) - 1), 100.0 * (q[0] - 1), 100.0 * (q[2] - 1))
    for py in pys:
        subprocess.run([bench, py, str(a.seconds)], check=False)
        ww, wc, torn = windows(bifocal, py, a.windows, 0.5)
        print("%s: CPU-bound target, 1 kHz in %d windows of `record --pid` alternating with "
              "windows alone: median slowdown of its progress: wall %s; its CPU time %s; %s"
              % (py, len(ww), pct(ww), pct(wc), torn), flush=True)
        if a.runs:
            b, s, wr, cr = slowdown(bifocal, py, a.runs, a.iters)
            print("%s: CPU-bound target under `record -- ...` at 1 kHz: median %.3fs sampled "
                  "vs %.3fs alone (%d alternating pairs of whole runs); per-pair slowdown: "
                  "wall %s; target CPU time %s" % (py, s, b, a.runs, pct(wr), pct(cr)),
                  flush=True)
    print("bench_sampler: load average %.2f at end" % load())


if __name__ == "__main__":
    main()
