#!/usr/bin/env python3
"""CPU-clock accuracy, side by side: bifocal `record --clock cpu` and, when an
`austin` binary (3.x) is on PATH, `austin -s` (its CPU mode), on the same
oracle workload (tests/integration/test_cpu_clock.py: every leaf function
measures its own thread CPU time), quiet and beside two CPU-bound processes.
Prints each function's true share of the measured CPU and each profiler's
error in points, then the largest error. Both sample at 1 kHz.

Then the cost: the slowdown of a target's progress while `record --pid
--clock cpu --rate 1000` samples it, with the sampler at SCHED_FIFO (the
default) and without (BIFOCAL_CPU_CLOCK_RT=0), beside windows alone:
half-second windows inside one long-running target, sampled windows of the
two kinds alternating with windows alone, each compared with the mean of the
two windows alone around it (a host that changes speed over seconds cancels
out); medians. Two targets: one CPU-bound thread, and a switch-heavy one
(four threads bursting ~100 us of Python then sleeping 0.5 ms, contending
for the GIL: a context-switch record per switch is the clock's own cost).

usage: tests/bench/bench_cpu_clock.py [--python EXE] [--runs N] [--cpu-seconds S]
                                      [--windows N] [--austin EXE] [--only accuracy|cost]
Interpreters default to the oldest and the newest found (tests/integration/pythons.py);
austin: --austin, else `austin` on PATH, else /work/ext/bin/austin; austin 3.x
builds from github.com/P403n1x87/austin (Debian's austin 1.0 cannot read
3.11+). Not a timed test: prints figures only; quote them with the load
average it prints.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402
from progress_target import CPU_PROGRESS as CPU_BOUND, ProgressTarget  # noqa: E402

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


# Long-running targets reporting progress ("monotonic_ns cpu_ns iterations") every
# ~10 ms of work: one CPU-bound thread (progress_target.CPU_PROGRESS); four
# threads that burst and sleep.
SWITCHY = r"""
import sys, threading, time
done = [0]
def burst():
    while True:
        x = 0
        for i in range(2500):
            x ^= i
        done[0] += 1
        time.sleep(0.0005)
for _ in range(4):
    threading.Thread(target=burst, daemon=True).start()
while True:
    time.sleep(0.01)
    sys.stdout.write("%d %d %d\n" % (time.monotonic_ns(), time.process_time_ns(), done[0]))
    sys.stdout.flush()
"""


def slowdown(bifocal, py, source, n, secs=0.5):
    """Slowdowns (%) of the target's progress in sampled windows of each
    kind, per second of wall time and per second of its own CPU time:
    {"SCHED_FIFO": ([wall...], [cpu...]), "no SCHED_FIFO": (...)}."""
    kinds = (("SCHED_FIFO", {}), ("no SCHED_FIFO", {"BIFOCAL_CPU_CLOCK_RT": "0"}))
    spans = []  # (kind or None, t0, t1)
    with ProgressTarget(py, source) as tg:
        db = os.path.join(tg.dir, "w.db")
        for i in range(4 * n + 1):
            kind = None if i % 2 == 0 else kinds[(i // 2) % 2]
            run = (lambda k=kind: subprocess.run(
                [bifocal, "--db", db, "record", "--pid", str(tg.pid), "--clock", "cpu", "--rate", "1000",
                 "--duration", str(secs)], capture_output=True, check=True, env=dict(os.environ, **k[1]))) if kind else None
            spans.append((kind[0] if kind else None,) + tg.window(run, secs))
    r = [tg.rate(t0, t1) for _, t0, t1 in spans]
    out = {k[0]: ([], []) for k in kinds}
    for i in range(1, len(spans) - 1, 2):
        if r[i] and r[i - 1] and r[i + 1]:
            for j in (0, 1):
                out[spans[i][0]][j].append(100.0 * ((r[i - 1][j] + r[i + 1][j]) / 2 / r[i][j] - 1))
    return out


def find_austin(given):
    for a in ([given] if given else []) + [shutil.which("austin"), "/work/ext/bin/austin"]:
        if a and os.access(a, os.X_OK):
            return a
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--cpu-seconds", type=float, default=2.0)
    ap.add_argument("--windows", type=int, default=12,
                    help="sampled windows of each kind for the slowdown (0: skip it)")
    ap.add_argument("--austin", help="austin 3.x binary")
    ap.add_argument("--only", choices=("accuracy", "cost"))
    a = ap.parse_args()
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    print("load average at start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    austin = find_austin(a.austin)
    if austin:
        v = subprocess.run([austin, "-V"], capture_output=True, text=True).stdout.strip() or \
            subprocess.run([austin, "-V"], capture_output=True, text=True).stderr.strip()
        if not v.split()[-1].startswith("3."):
            print("austin on PATH is %r, not 3.x: left out" % v)
            austin = None
    if not austin:
        print("no austin 3.x (--austin, PATH, /work/ext/bin): bifocal alone "
              "(build austin from github.com/P403n1x87/austin)")
    ps = a.python or [p["path"] for p in (lambda l: [l[0], l[-1]] if len(l) > 1 else l)(pythons.discover())]
    tmp = tempfile.mkdtemp(prefix="bench_cpu_clock.")
    app = os.path.join(tmp, "app.py")
    with open(app, "w") as f:
        f.write(workload_source())
    worst = {"bifocal": 0.0, "austin": 0.0}
    for condition in ("quiet", "beside two CPU-bound processes") if a.only != "cost" else ():
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
    if a.only != "cost":
        print("\nlargest error: bifocal %.2f points%s" %
              (worst["bifocal"], ", austin -s %.2f points" % worst["austin"] if austin else ""))
    shutil.rmtree(tmp, ignore_errors=True)
    if a.windows <= 0 or a.only == "accuracy":
        return
    print("\ncost: median slowdown of the target's progress while `record --pid --clock cpu "
          "--rate 1000` samples it, %d half-second windows of each kind between windows alone "
          "(load average now %s)" % (a.windows, " ".join(open("/proc/loadavg").read().split()[:3])))
    for py in ps:
        for name, src in (("one CPU-bound thread", CPU_BOUND), ("four threads bursting and sleeping", SWITCHY)):
            sd = slowdown(bifocal, py, src, a.windows)
            print("  %s, %s:" % (py, name))
            for k, (w, c) in sd.items():
                print("    %-14s wall %s   per CPU-second %s" % (k, med(w), med(c)))


def med(v):
    if not v:
        return "n/a"
    q = sorted(v)
    return "%+6.2f%% (middle half %+.2f..%+.2f)" % (statistics.median(v), q[len(q) // 4], q[(3 * len(q)) // 4])



if __name__ == "__main__":
    main()
