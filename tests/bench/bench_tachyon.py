#!/usr/bin/env python3
"""bifocal and Tachyon (3.15's `python3.15 -m profiling.sampling`) side by side
on the same 3.15 workloads, interleaved (the two profilers take turns, the
order flipped every round, so both see the same phases of a busy host);
prints one table of medians over the rounds (figures, not a timed test).

  valid/s     stored samples of a 20-deep spinning stack per second of
              sampling, each asked for 1 MHz (both profilers' maximum)
  invalid     samples given up as errors (Tachyon's "Error rate", bifocal's
              invalid ticks) on a 31-deep recursion returning every few
              microseconds, at 10 kHz
  cpu error   largest |sampled - measured| CPU share (points) over the
              functions of tests/integration/test_cpu_clock.py's oracle (threads
              bursting and sleeping, C without the GIL, waits; every function
              times itself with time.thread_time_ns), those of >= 1% true share
              (Tachyon --mode cpu -a, bifocal --clock cpu; 1 kHz)
  impossible  stored samples whose stack cannot have existed, at 1 kHz, on
              tests/integration/test_consistent_stacks.py's workload and
              check (every caller on a call line, no function deeper than it
              recurses, rooted at <module>)
  slowdown    progress of one long-running CPU-bound target (its own reports)
              in windows where a profiler is attached at 1 kHz (Tachyon
              `attach`, `bifocal record --pid`), against the windows alone
              on either side

usage: tests/bench/bench_tachyon.py [--python PY3.15] [--rounds N] [--seconds S]
The 3.15 interpreter defaults to the sid root's wrapper found by
tests/integration/pythons.py (it runs the root's python3.15 as a container
would, with /tmp bound in, so both profilers read the same files).
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pythons  # noqa: E402
from progress_target import CPU_PROGRESS, ProgressTarget  # noqa: E402
import test_consistent_stacks as cs  # noqa: E402  (its workload and check)
import test_cpu_clock as cc  # noqa: E402  (its CPU-clock oracle workload)

DEEP20 = '''\
import sys, time
end = time.monotonic() + float(sys.argv[1])
def f(n):
    if n == 0:
        x = 0
        while time.monotonic() < end:
            x += 1
        return
    return f(n - 1)
f(18)
'''

def sh(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


# ---- the two profilers: run a workload, return what each stored ----------

def tachyon(py, rate, script, args, d, mode=None, all_threads=False):
    """Tachyon's run: (stacks [(frames, weight)], summary dict)."""
    out = os.path.join(d, "tachyon.collapsed")
    cmd = [py, "-m", "profiling.sampling", "run", "-r", str(rate), "--collapsed", "-o", out]
    if mode:
        cmd += ["--mode", mode]
    if all_threads:
        cmd += ["-a"]
    r = sh(cmd + [script] + args)
    text = r.stdout + r.stderr
    summ = {"captured": 0, "seconds": 0.0, "error_pct": float("nan"), "missed": 0}
    m = re.search(r"Captured (\d+) samples in ([\d.]+) seconds", text)
    if m:
        summ["captured"], summ["seconds"] = int(m.group(1)), float(m.group(2))
    m = re.search(r"Error rate: ([\d.]+)", text)
    if m:
        summ["error_pct"] = float(m.group(1))
    m = re.search(r"missed (\d+) samples", text)
    if m:
        summ["missed"] = int(m.group(1))
    stacks = []
    for line in open(out) if os.path.exists(out) else []:
        stack, _, w = line.strip().rpartition(" ")
        parts = stack.split(";")
        frames = []
        for p in parts[1:]:  # parts[0] is tid:N
            if p.count(":") < 2:  # a pseudo-frame (<GC>, <native>): bifocal shows none
                continue
            f, q, ln = p.rsplit(":", 2)
            frames.append((q, os.path.basename(f), int(ln) if ln.lstrip("-").isdigit() else 0))
        # `run` starts the script through runpy: its frames sit below <module>
        while frames and frames[0][1].startswith("<frozen runpy"):
            frames.pop(0)
        stacks.append((parts[0], frames, int(w)))
    return stacks, summ


def bifocal(bf, py, rate, script, args, d, clock=None):
    """bifocal record: (stacks [(thread, frames, weight)], session dict)."""
    db = os.path.join(d, "b.db")
    for x in ("", "-wal", "-shm"):
        if os.path.exists(db + x):
            os.unlink(db + x)
    cmd = [bf, "--db", db, "record", "--rate", str(rate)]
    if clock:
        cmd += ["--clock", clock]
    for _ in range(2):  # once more if the launch failed (say so)
        r = sh(cmd + ["--", py, script] + args)
        sid = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else None
        if sid:
            break
        print("bench_tachyon: bifocal record failed, once more: %s" % r.stderr.strip(), flush=True)
    if not sid:
        raise SystemExit("bench_tachyon: bifocal record failed: %s" % r.stderr.strip())
    sess = [s for s in json.loads(sh([bf, "--db", db, "sessions", "--json"]).stdout)
            if str(s["id"]) == sid][0]
    text = sh([bf, "--db", db, "export", sid, "--format", "collapsed", "-o", "-"]).stdout
    stacks = []
    for frames, w in cs.parse_collapsed(text):
        stacks.append((None, [(q, os.path.basename(f), ln) for q, f, ln in frames], w))
    return stacks, sess


# ---- the figures ------------------------------------------------------------

def main_weight(stacks, name):
    """Stored samples of the thread whose stacks show the workload file."""
    per = collections.Counter()
    for tid, frames, w in stacks:
        if any(f == name for _, f, _ in frames):
            per[tid] += w
    return max(per.values()) if per else 0


def valid_rate(who, ctx):
    stacks, info = run_one(who, ctx, 1000000, "deep20.py", [str(ctx.seconds)])
    n = main_weight(stacks, "deep20.py")
    secs = info["seconds"] if who == "tachyon" else info["duration_s"]
    return n / secs if secs else 0.0


def invalid_pct(who, ctx):
    stacks, info = run_one(who, ctx, 10000, "fast.py", [str(ctx.seconds)])
    if who == "tachyon":
        return info["error_pct"]
    ticks = info["samples"] + info["invalid"]
    return 100.0 * info["invalid"] / ticks if ticks else float("nan")


def cpu_error(who, ctx):
    truth_file = os.path.join(ctx.dir, "truth.json")
    if os.path.exists(truth_file):
        os.unlink(truth_file)
    stacks, _ = run_one(who, ctx, 1000, "oracle.py", ["%.1f" % ctx.seconds, truth_file],
                        cpu=True, all_threads=True)
    truth = json.load(open(truth_file))
    got = dict.fromkeys(cc.MEASURED, 0)
    for _, frames, w in stacks:
        if frames and frames[-1][1] == "oracle.py" and frames[-1][0] in got:
            got[frames[-1][0]] += w  # self: the measured function is the leaf
        elif len(frames) > 1 and frames[-2][1] == "oracle.py" and frames[-2][0] in got:
            got[frames[-2][0]] += w  # ... under one C or library frame (sleep, select)
    n, t = sum(got.values()), float(sum(truth.values()))
    if not n or not t:
        return float("nan")
    diff = {q: 100.0 * got[q] / n - 100.0 * truth.get(q, 0) / t for q in cc.MEASURED}
    ctx.notes.append("%s cpu sampled-measured (points): %s" % (who, ", ".join(
        "%s %+.1f" % (q, diff[q]) for q in cc.MEASURED)))
    return max(abs(diff[q]) for q in cc.MEASURED if 100.0 * truth.get(q, 0) / t >= cc.MIN_SHARE)


def impossible_pct(who, ctx):
    stacks, _ = run_one(who, ctx, 1000, "work.py", [str(ctx.seconds)], all_threads=True)
    calls = cs.call_lines(cs.WORK)
    total = bad = 0
    for _, frames, w in stacks:
        if not any(f == "work.py" for _, f, _ in frames):
            continue
        total += w
        bad += w if cs.check_stack(frames, "work.py", calls, cs.MAXDEPTH) else 0
    return 100.0 * bad / total if total else float("nan")


def slowdown_windows(ctx):
    """Inside one long-running CPU-bound target (progress_target.py's 19-deep
    recursion, reporting its own progress): windows of steady sampling by
    Tachyon `attach` and by `bifocal record --pid` (start-up and exit outside
    the window), each at 1 kHz, between windows alone; each
    profiled window's progress rate against the mean of the two alone around
    it (adjacent windows share the host's speed). Returns {who: [slowdown %]}
    per wall second, and {who: [slowdown %]} per second of the target's own
    CPU (what a step costs it, free of the host's steal and scheduling)."""
    out = {"tachyon": [], "bifocal": []}
    per_cpu = {"tachyon": [], "bifocal": []}
    secs = ctx.seconds
    with ProgressTarget(ctx.py, CPU_PROGRESS) as tg:
        def prof(who):
            # the profiler runs 1.5 s longer than the window, which starts
            # 0.5 s after it (start-up and attach done) and ends 1 s before
            # it stops: the window holds steady sampling only, for both
            dur = secs + 1.5
            if who == "tachyon":
                cmd = [ctx.py, "-m", "profiling.sampling", "attach", "-r", "1000", "-d", str(dur),
                       "--collapsed", "-o", os.path.join(ctx.dir, "w.collapsed"), str(tg.pid)]
            else:
                cmd = [ctx.bf, "--db", os.path.join(ctx.dir, "w.db"), "record", "--pid", str(tg.pid),
                       "--rate", "1000", "--duration", str(dur)]
            return cmd

        def window(cmd):
            if cmd is None:
                return tg.window(None, secs)
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            span = tg.window(None, secs)
            p.wait(timeout=60)
            return span
        spans = [(None,) + window(None)]
        for r in range(ctx.rounds):
            for who in (("tachyon", "bifocal") if r % 2 == 0 else ("bifocal", "tachyon")):
                spans.append((who,) + window(prof(who)))
                spans.append((None,) + window(None))
        rates = [tg.rate(t0, t1) for _, t0, t1 in spans]
    for i in range(1, len(spans) - 1, 2):
        on, before, after = rates[i], rates[i - 1], rates[i + 1]
        if on and before and after:
            out[spans[i][0]].append(100.0 * ((before[0] + after[0]) / 2 / on[0] - 1))
            per_cpu[spans[i][0]].append(100.0 * ((before[1] + after[1]) / 2 / on[1] - 1))
    return out, per_cpu


def run_one(who, ctx, rate, name, args, cpu=False, all_threads=False):
    script = os.path.join(ctx.dir, name)
    if who == "tachyon":
        return tachyon(ctx.py, rate, script, args, ctx.dir, mode="cpu" if cpu else None,
                       all_threads=all_threads)
    return bifocal(ctx.bf, ctx.py, rate, script, args, ctx.dir, clock="cpu" if cpu else None)


class Ctx:
    pass


def find_315():
    for p in pythons.discover():
        if tuple(p["version"][:2]) == (3, 15):
            return p["path"]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", help="a python3.15 with profiling.sampling (default: sid root's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each profiled run")
    ap.add_argument("--only", action="append",
                    choices=["valid", "invalid", "cpu", "impossible", "slowdown"])
    a = ap.parse_args()
    ctx = Ctx()
    ctx.notes = []
    ctx.py = a.python or find_315()
    if not ctx.py:
        raise SystemExit("bench_tachyon: no Python 3.15 found (build the sid root: .ci/setup)")
    ctx.bf = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    ctx.seconds = a.seconds
    ctx.dir = tempfile.mkdtemp(prefix="bf_tachyon_", dir="/tmp")  # /tmp: seen by the root too
    for name, src in (("deep20.py", DEEP20), ("fast.py", cs.FAST), ("oracle.py", cc.WORKLOAD),
                      ("work.py", cs.WORK)):
        with open(os.path.join(ctx.dir, name), "w") as f:
            f.write(src)
    ver = sh([ctx.py, "-c", "import sys; print(sys.version.split()[0])"]).stdout.strip()
    print("bench_tachyon: Python %s (%s), bifocal %s, %d rounds of %.1f s runs, load %.2f at start"
          % (ver, ctx.py, ctx.bf, a.rounds, a.seconds, os.getloadavg()[0]), flush=True)
    metrics = [("valid", "valid samples/s, 20 deep, asked 1 MHz", valid_rate, "%.0f"),
               ("invalid", "invalid %, 31-deep fast recursion, 10 kHz", invalid_pct, "%.3f"),
               ("cpu", "cpu clock error, points (oracle workload, 1 kHz)", cpu_error, "%.2f"),
               ("impossible", "impossible stacks %, 1 kHz", impossible_pct, "%.3f")]
    rows = []
    for key, label, fn, fmt in metrics:
        if a.only and key not in a.only:
            continue
        got = {"tachyon": [], "bifocal": []}
        for r in range(a.rounds):
            for who in (("tachyon", "bifocal") if r % 2 == 0 else ("bifocal", "tachyon")):
                got[who].append(fn(who, ctx))
        print("  %s: tachyon %s; bifocal %s" % (key, [fmt % v for v in got["tachyon"]],
                                                [fmt % v for v in got["bifocal"]]), flush=True)
        rows.append((label, fmt % statistics.median(got["tachyon"]),
                     fmt % statistics.median(got["bifocal"])))
    if not a.only or "slowdown" in a.only:
        ctx.rounds = a.rounds
        slow, slow_cpu = slowdown_windows(ctx)
        print("  slowdown: tachyon %s; bifocal %s" % (["%+.2f" % v for v in slow["tachyon"]],
                                                      ["%+.2f" % v for v in slow["bifocal"]]))
        print("  slowdown per target CPU s: tachyon %s; bifocal %s" % (
            ["%+.2f" % v for v in slow_cpu["tachyon"]], ["%+.2f" % v for v in slow_cpu["bifocal"]]))
        med = lambda v: "%+.2f" % statistics.median(v) if v else "n/a"  # noqa: E731
        rows.append(("target slowdown %, 1 kHz (windows in one target)", med(slow["tachyon"]),
                     med(slow["bifocal"])))
        rows.append(("  the same per second of the target's CPU", med(slow_cpu["tachyon"]),
                     med(slow_cpu["bifocal"])))
    w = max(len(r[0]) for r in rows) if rows else 10
    print("\n%-*s  %12s  %12s" % (w, "median of %d interleaved rounds" % a.rounds, "Tachyon", "bifocal"))
    for label, t, b in rows:
        print("%-*s  %12s  %12s" % (w, label, t, b))
    for n in ctx.notes:
        print("  " + n)
    print("load %.2f at end" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
