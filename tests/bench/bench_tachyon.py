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
  slowdown    what a profiler costs a CPU-bound target (slowdown_trial.py): per
              round and rate, one fresh target per arm (none, bifocal,
              Tachyon, optionally bifocal's cpu clocks), arms in an order
              rotated every round, each profiler started with its real
              command line (`bifocal record --pid PID`, Tachyon `attach PID`
              from inside the target's mount namespace; or --how launch:
              `bifocal record -- PY work.py`, Tachyon `run work.py`). The
              target times its own work after a warm-up (the profiler has
              attached by then): wall ns and its own CPU ns (thread_time_ns)
              per unit. By default (--twin pair) each target runs beside an
              unprofiled twin started with it, both pinned to CPU 1 and
              time-sliced there (they share the host's speed of the moment,
              which on this VM swings ±30% over seconds), the profiler
              pinned to CPU 0: a host with a core free for the profiler;
              the figure is then the interference (caches, locks) and the
              profiler's own CPU is the CPU it takes. Printed per arm:
              achieved samples/s, the profiler's CPU (its /proc schedstat
              over the target's work), the slowdown against the twin (or,
              --twin none, the round's unprofiled run) per wall second and
              per second of the target's own CPU (medians with the sign test's
              95% interval), per 1k samples/s, the target's involuntary
              switches, and each arm paired against Tachyon's in the same
              round (median difference, interval, sign test)

usage: tests/bench/bench_tachyon.py [--python PY3.15] [--rounds N] [--seconds S]
         [--only valid|invalid|cpu|impossible|slowdown ...]
         [--slow-rounds N] [--slow-seconds S] [--slow-rates 1000,10000,1000000]
         [--arms none,bifocal,tachyon,bifocal-cpu,...] [--how attach|launch]
         [--twin pair|same|free|none] [--pin TARGET_CPUS/PROFILER_CPUS] [--json FILE]
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

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pythons  # noqa: E402
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


# ---- slowdown: fresh targets, interleaved arms, paired per round ----------

# What each arm runs: (profiler, --clock/--mode, extra environment)
ARMS = {
    "none": (None, None, None),
    "bifocal": ("bifocal", None, None),
    "tachyon": ("tachyon", None, None),
    "bifocal-cpu": ("bifocal", "cpu", None),  # perf switch rings, SCHED_FIFO sampler
    "bifocal-cpu-nort": ("bifocal", "cpu", {"BIFOCAL_CPU_CLOCK_RT": "0"}),
    "bifocal-schedstat": ("bifocal", "cpu", {"BIFOCAL_CPU_CLOCK": "schedstat"}),
    "tachyon-cpu": ("tachyon", "cpu", None),
    "bifocal-memory": ("bifocal", "memory", None),  # record --memory (issue 29's far lens)
}


def median_ci(v, conf=0.95):
    """Median of v and a distribution-free interval for it (order
    statistics, the sign test's interval: the k-th smallest and largest, k
    the largest with P(Binomial(n, 1/2) < k) <= (1-conf)/2); (med, lo, hi),
    lo/hi None when n is too small for the confidence asked."""
    import math
    v = sorted(x for x in v if x is not None)
    n = len(v)
    if not n:
        return None, None, None
    med = statistics.median(v)
    k, cum = 0, 0.0
    while True:
        nxt = cum + math.comb(n, k) / 2.0 ** n
        if nxt > (1 - conf) / 2:
            break
        cum, k = nxt, k + 1
    if k == 0:
        return med, None, None
    return med, v[k - 1], v[n - k]


def sign_p(diffs):
    """Two-sided sign-test p of paired differences (zeros dropped)."""
    import math
    pos = sum(1 for d in diffs if d > 0)
    neg = sum(1 for d in diffs if d < 0)
    n = pos + neg
    if not n:
        return 1.0
    k = min(pos, neg)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n)


def slowdown_rounds(ctx):
    """Each round, for each rate: one fresh target per arm (none, bifocal,
    Tachyon, ...), the arms in an order rotated every round, each profiler
    with its real command line (ctx.how: attach to the running target, or
    launch it), over ctx.seconds of the target's work after its warm-up.
    Returns {rate: [round: {arm: trial dict}]} (slowdown_trial.trial's)."""
    from slowdown_trial import trial
    arms = ctx.arms
    res = {rate: [] for rate in ctx.rates}
    for r in range(ctx.rounds):
        for rate in ctx.rates:
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            got = {}
            for arm in order:
                who, clock, env = ARMS[arm]
                pin, twin = ctx.pin, None
                if ctx.twin == "pair":  # both targets share CPU 1 (time-sliced), the profiler CPU 0
                    pin, twin = ("1", "0"), 1
                elif ctx.twin:  # the profiled target on CPU b, its unprofiled twin on the other
                    b = r % 2
                    pin, twin = (str(b), str(b) if ctx.twin == "same" else None), 1 - b
                got[arm] = trial(who, ctx.py, ctx.bf, rate, ctx.seconds, ctx.dir, how=ctx.how,
                                 clock=clock, env=env, pin=pin, twin=twin)
                t = got[arm]
                if who and t.get("samples") and t["duration_s"] < ctx.seconds:
                    # it started sampling after the work began (a slow start-up under load)
                    print("  round %d, %s: %s sampled %.2f s of the %.1f s of work (left out)" % (
                        r + 1, rate, arm, t["duration_s"], ctx.seconds), flush=True)
                    t["samples"] = 0
                elif who and not t.get("samples"):  # it failed: left out of the figures, said
                    print("  round %d, %s: %s stored no samples (left out): %s" % (
                        r + 1, rate, arm, t.get("prof_text", "").strip()[-200:]), flush=True)
            res[rate].append(got)
            print("  round %d, %s Hz, load %.1f: %s" % (r + 1, rate, got[order[-1]]["load"], "; ".join(
                "%s %s" % (arm, fmt_trial(got[arm], base_of(ctx, got, arm))) for arm in arms)), flush=True)
    return res


def base_of(ctx, g, arm):
    """What arm's run in round g is measured against: the round's unprofiled
    run, or (--twin) the unprofiled twin that ran beside it."""
    return g[arm].get("twin") if ctx.twin else g["none"]


def per_unit(t, key):
    return t[key] / t["iters"] if t and t.get("iters") else None


def slow_pct(t, base, key):
    if t and "samples" in t and not t["samples"]:  # a profiler that failed
        return None
    a, b = per_unit(t, key), per_unit(base, key)
    return 100.0 * (a / b - 1) if a and b else None


def fmt_trial(t, base):
    if t is base or "samples" not in t and "twin" not in t:
        return "%.2f us wall, %.2f us cpu a unit" % (per_unit(t, "wall_ns") / 1e3, per_unit(t, "cpu_ns") / 1e3)
    if base is None:
        return "(no twin result)"
    if "samples" not in t:  # the twin null
        return "%+.1f%% wall %+.1f%% cpu" % (slow_pct(t, base, "wall_ns"), slow_pct(t, base, "cpu_ns"))
    if not t["samples"]:
        return "failed"
    rate = t["samples"] / t["duration_s"] if t.get("duration_s") else 0
    share = 100.0 * t["prof_cpu_ns"] / t["wall_ns"] if t.get("prof_cpu_ns") is not None else float("nan")
    return "%+.1f%% wall %+.1f%% cpu %.0f/s prof %.1f%%cpu" % (
        slow_pct(t, base, "wall_ns"), slow_pct(t, base, "cpu_ns"), rate, share)


def ci(m):
    if m[0] is None:
        return "n/a"
    return "%+6.2f [%s]" % (m[0], "%+.2f,%+.2f" % (m[1], m[2]) if m[1] is not None else "n too small")


def slowdown_report(ctx, res):
    """Print, per rate and arm: achieved samples/s, the profiler's CPU, the
    target's slowdown per wall second and per second of its own CPU (median
    and 95% interval over rounds, each against the round's unprofiled run),
    that per 1k samples/s, the target's involuntary switches, and each
    profiler arm paired against Tachyon's in the same round (sign test)."""
    rows = []
    for rate in ctx.rates:
        rounds = res[rate]
        loads = [t["load"] for g in rounds for t in g.values()]
        print("\n%s Hz asked, %d rounds, %.0f s of work each, load %.1f-%.1f (median %.1f):"
              % (rate, len(rounds), ctx.seconds, min(loads), max(loads), statistics.median(loads)))
        print("  %-18s %9s %8s %21s %21s %10s %9s" % ("arm", "samples/s", "prof CPU", "slowdown wall %",
                                                    "slowdown own CPU %", "/1k smp/s", "invol/s"))
        for arm in ctx.arms:
            ts = [g[arm] for g in rounds]
            base = [base_of(ctx, g, arm) for g in rounds]
            inv = statistics.median(t["nivcsw"] / (t["wall_ns"] / 1e9) for t in ts)
            if arm == "none" and ctx.twin:  # the method's own null: two unprofiled twins
                w = median_ci([slow_pct(t, b, "wall_ns") for t, b in zip(ts, base)])
                c = median_ci([slow_pct(t, b, "cpu_ns") for t, b in zip(ts, base)])
                print("  %-18s %9s %8s %21s %21s %10s %9.0f" % ("none (twin null)", "", "", ci(w), ci(c), "", inv))
                continue
            if arm == "none":
                print("  %-18s %9s %8s %21s %21s %10s %9.0f" % (arm, "", "", "", "", "", inv))
                continue
            rates = [t["samples"] / t["duration_s"] for t in ts if t.get("duration_s") and t["samples"]]
            ach = statistics.median(rates) if rates else 0
            share = statistics.median([100.0 * t["prof_cpu_ns"] / t["wall_ns"] for t in ts
                                       if t.get("prof_cpu_ns") is not None and t["samples"]] or [0])
            w = median_ci([slow_pct(t, b, "wall_ns") for t, b in zip(ts, base)])
            c = median_ci([slow_pct(t, b, "cpu_ns") for t, b in zip(ts, base)])
            per1k = w[0] / (ach / 1000.0) if ach else float("nan")
            print("  %-18s %9.0f %7.2f%% %21s %21s %+10.3f %9.0f" % (arm, ach, share, ci(w), ci(c), per1k, inv))
            rows.append((rate, arm, ach, share, w, c))
        if "tachyon" in ctx.arms:
            for arm in ctx.arms:
                if arm in ("none", "tachyon"):
                    continue
                for key, what in (("wall_ns", "wall"), ("cpu_ns", "own CPU")):
                    d = [(slow_pct(g[arm], base_of(ctx, g, arm), key),
                          slow_pct(g["tachyon"], base_of(ctx, g, "tachyon"), key)) for g in rounds]
                    d = [x - y for x, y in d if x is not None and y is not None]
                    m = median_ci(d)
                    if m[0] is None:
                        continue
                    print("  %s - tachyon, per unit of %s: median %+.2f points [%s], %s slower in %d of "
                          "%d rounds, sign test p=%.3f" % (
                              arm, what, m[0], "%+.2f,%+.2f" % (m[1], m[2]) if m[1] is not None else "n/a",
                              arm, sum(1 for x in d if x > 0), len(d), sign_p(d)))
    return rows


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
    ap.add_argument("--slow-rounds", type=int, help="slowdown rounds (default: --rounds)")
    ap.add_argument("--slow-seconds", type=float, default=5.0, help="target work per slowdown run")
    ap.add_argument("--slow-rates", default="1000", help="asked rates, comma-separated (1000000: max)")
    ap.add_argument("--arms", default="none,bifocal,tachyon", help="comma-separated, of: " + ",".join(ARMS))
    ap.add_argument("--how", choices=["attach", "launch"], default="attach")
    ap.add_argument("--pin", help="TARGET_CPUS/PROFILER_CPUS for taskset (attach only), e.g. 1/0")
    ap.add_argument("--twin", choices=["pair", "same", "free", "none"], default="pair",
                    help="run each target beside an unprofiled twin and measure against it: (pair, the "
                         "default) both sharing CPU 1, time-sliced, the profiler on CPU 0; or on the other "
                         "CPU, the profiler on the profiled target's CPU (same) or unpinned (free); none: "
                         "against the round's unprofiled run, nothing pinned but by --pin")
    ap.add_argument("--json", help="write every slowdown trial here")
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
        ctx.rounds = a.slow_rounds or a.rounds
        ctx.seconds = a.slow_seconds
        ctx.rates = [int(x) for x in a.slow_rates.split(",")]
        ctx.arms = ["none"] + [x for x in a.arms.split(",") if x != "none"]
        ctx.how = a.how
        ctx.pin = tuple(a.pin.split("/")) if a.pin else None
        ctx.twin = None if a.twin == "none" else a.twin
        print("slowdown: %s, arms %s, rates %s, %d rounds of %.1f s work%s" % (
            ctx.how, ",".join(ctx.arms), ctx.rates, ctx.rounds, ctx.seconds,
            ", target on CPU %s, profiler on CPU %s" % ctx.pin if ctx.pin else ""), flush=True)
        res = slowdown_rounds(ctx)
        slowdown_report(ctx, res)
        if a.json:
            json.dump({str(k): v for k, v in res.items()}, open(a.json, "w"))
    w = max(len(r[0]) for r in rows) if rows else 10
    if rows:
        print("\n%-*s  %12s  %12s" % (w, "median of %d interleaved rounds" % a.rounds, "Tachyon", "bifocal"))
    for label, t, b in rows:
        print("%-*s  %12s  %12s" % (w, label, t, b))
    for n in ctx.notes:
        print("  " + n)
    print("load %.2f at end" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
