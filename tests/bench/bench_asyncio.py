#!/usr/bin/env python3
"""Figures of the asyncio task reader (`bifocal record --async`; prints them,
not a timed test).

1. cost per sample (the profiler's CPU time per tick: thread walk, task
   registry, task chains, store writes) with 10 / 1,000 / 10,000 live tasks,
   each parked three coroutines deep on an Event, beside the same without
   --async;
2. the target's slowdown at 100 Hz and 1 kHz with 1,000 tasks: inside one
   long-running target, rounds of four windows in a shuffled order (alone,
   100 Hz without --async, 100 Hz and 1 kHz with it; each sampled window a
   fresh `bifocal record --pid`), and each sampled window's progress rate (a
   task doing fixed CPU steps) is compared with its round's window alone:
   per second of the target's own CPU time (the reads' interference with the
   target itself, and the cache refills after the switches a busy host
   forces on it) and per wall second (what a user sees, but on a shared host
   mostly the other load); beside them the target's involuntary context
   switches, whether it was ever stopped or traced (polled every 20 ms), and
   the profiler's own CPU, which a host with a spare core absorbs.

usage: tests/bench/bench_asyncio.py [--python EXE] [--windows N] [--seconds S]
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

TARGET = r"""
import asyncio, sys, time
N = int(sys.argv[1])
async def leaf(ev):
    await ev.wait()
async def mid(ev):
    await leaf(ev)
async def top(ev):
    await mid(ev)
async def worker():
    n = 0
    while True:
        x = 0
        for i in range(2000):
            x += i
        n += 1
        if n % 20 == 0:
            print(time.monotonic(), n, time.process_time(), flush=True)
        await asyncio.sleep(0)
async def main():
    ev = asyncio.Event()
    ts = [asyncio.create_task(top(ev), name="idle-%d" % i) for i in range(N)]
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await worker()
asyncio.run(main())
"""


class Target:
    def __init__(self, py, n, path):
        self.p = subprocess.Popen([py, path, str(n)], stdout=subprocess.PIPE, text=True)
        self.progress = []
        assert self.p.stdout.readline().strip() == "ready"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            f = line.split()
            if len(f) == 3:
                self.progress.append((float(f[0]), int(f[1]), float(f[2])))

    def rate(self, t0, t1, cpu=False):
        """Steps per wall second, or (cpu) per second of the target's own
        CPU time: the latter leaves out time the host gave to others."""
        pts = [p for p in self.progress if t0 <= p[0] <= t1]
        if len(pts) < 2:
            return float("nan")
        return (pts[-1][1] - pts[0][1]) / (pts[-1][2 if cpu else 0] - pts[0][2 if cpu else 0])

    def stop(self):
        self.p.kill()
        self.p.wait()


def record(bifocal, db, pid, rate, secs, use_async):
    args = [bifocal, "--db", db, "record", "--pid", str(pid), "--rate", str(rate), "--duration", str(secs)]
    if use_async:
        args.append("--async")
    subprocess.run(args, check=True, capture_output=True)
    s = json.loads(subprocess.run([bifocal, "--db", db, "sessions", "--json"], check=True,
                                  capture_output=True, text=True).stdout)[-1]
    ticks = s["achieved_rate_hz"] * s["duration_s"]
    return s["profiler_cpu_s"] / ticks if ticks else float("nan"), s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=None)
    ap.add_argument("--windows", type=int, default=12, help="rounds of the slowdown part")
    ap.add_argument("--seconds", type=float, default=3.0, help="window length of the slowdown part")
    a = ap.parse_args()
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    ps = [p for p in pythons.discover() if not p["free_threaded"] and p["version"][:2] <= (3, 13)]
    py = a.python or ps[-1]["path"]
    tmp = tempfile.mkdtemp(prefix="bench_asyncio")
    path = os.path.join(tmp, "target.py")
    with open(path, "w") as f:
        f.write(TARGET)
    print("asyncio tasks (%s); load average %.1f on %d CPUs" % (py, os.getloadavg()[0], os.cpu_count() or 1))
    print("cost per sample (profiler CPU per tick, store writes included): a 1 s and a 3 s\n"
          "recording (2 s and 8 s at 100 Hz); steady = extra CPU / extra ticks of the longer one, first = what the first\n"
          "ticks cost beyond that (every task's name and thread interned once):")
    for n, rate in ((10, 1000), (1000, 1000), (10000, 1000), (1000, 100)):
        t = Target(py, n, path)
        d1, d3 = (1, 3) if rate >= 1000 else (2, 8)
        try:
            plain, _ = record(bifocal, os.path.join(tmp, "c%d.db" % n), t.p.pid, rate, 2, False)
            _, s1 = record(bifocal, os.path.join(tmp, "a%d.db" % n), t.p.pid, rate, d1, True)
            _, s3 = record(bifocal, os.path.join(tmp, "b%d.db" % n), t.p.pid, rate, d3, True)
        finally:
            t.stop()
        k1, k3 = (x["achieved_rate_hz"] * x["duration_s"] for x in (s1, s3))
        steady = (s3["profiler_cpu_s"] - s1["profiler_cpu_s"]) / (k3 - k1) if k3 > k1 else float("nan")
        first = s1["profiler_cpu_s"] - k1 * steady
        print("  %6d tasks at %4d Hz: %8.1f us/sample steady with --async (%.1f us without), first %.0f ms; "
              "achieved %.0f Hz: %.1f%% of a CPU" % (n, rate, steady * 1e6, plain * 1e6, first * 1e3,
                                                     s3["achieved_rate_hz"], 100 * steady * s3["achieved_rate_hz"]))
    slowdown(bifocal, py, path, tmp, a.windows, a.seconds)


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(line.split(":", 1) for line in f if ":" in line)


def median_ci(xs):
    """Median and its distribution-free 95% interval (order statistics)."""
    xs, n = sorted(xs), len(xs)
    j = 0
    while j + 1 < n and sum(math.comb(n, i) for i in range(j + 1)) / 2 ** n <= 0.025:
        j += 1
    return statistics.median(xs), xs[j], xs[n - 1 - j]


def slowdown(bifocal, py, path, tmp, rounds, secs):
    """Rounds of four windows in a shuffled order inside one target: alone,
    100 Hz without --async, 100 Hz and 1 kHz with it. Each sampled window's
    progress per second of the target's own CPU (and per wall second) is
    compared with the alone window of its round."""
    configs = [("alone", None), ("100 Hz without --async", (100, False)), ("100 Hz", (100, True)),
               ("1000 Hz", (1000, True))]
    got = {c: [] for c, _ in configs}
    stopped = []
    t = Target(py, 1000, path)
    rnd = random.Random(1)
    try:
        time.sleep(secs)
        for r in range(rounds):
            order = list(configs)
            rnd.shuffle(order)
            for name, how in order:
                st0 = proc_status(t.p.pid)
                s0 = time.monotonic()
                prof = float("nan")
                if how:
                    done = []
                    th = threading.Thread(target=lambda: done.append(record(
                        bifocal, os.path.join(tmp, "s.db"), t.p.pid, how[0], secs, how[1])))
                    th.start()
                    while th.is_alive():  # is the target ever stopped or traced?
                        st = proc_status(t.p.pid)
                        if st["State"].split()[0] in "tT" or st["TracerPid"].strip() != "0":
                            stopped.append(name)
                        th.join(0.02)
                    _, sess = done[0]
                    prof = sess["profiler_cpu_s"] / sess["duration_s"]
                    tick = sess["profiler_cpu_s"] / (sess["achieved_rate_hz"] * sess["duration_s"])
                else:
                    time.sleep(secs)
                    tick = float("nan")
                s1 = time.monotonic()
                st1 = proc_status(t.p.pid)
                nvcs = (int(st1["nonvoluntary_ctxt_switches"]) - int(st0["nonvoluntary_ctxt_switches"])) / (s1 - s0)
                got[name].append((t.rate(s0, s1, True), t.rate(s0, s1), nvcs, prof, tick))
    finally:
        t.stop()
    print("target slowdown with 1,000 tasks: %d rounds of 4 windows of %.1f s in a shuffled order, each sampled\n"
          "window against its round's window alone; median [95%% interval of the median] (negative = noise):"
          % (rounds, secs))
    alone = got["alone"]
    print("  %-24s target %.1f us CPU per step; %.0f involuntary context switches/s" % (
        "alone", 1e6 / statistics.median(x[0] for x in alone), statistics.median(x[2] for x in alone)))
    for name, how in configs[1:]:
        cpu = [100 * (1 - x[0] / y[0]) for x, y in zip(got[name], alone)]
        wall = [100 * (1 - x[1] / y[1]) for x, y in zip(got[name], alone)]
        m, lo, hi = median_ci(cpu)
        wm, wlo, whi = median_ci(wall)
        print("  %-24s CPU per step %+.2f%% [%+.1f, %+.1f]; wall %+.1f%% [%+.1f, %+.1f]; %.0f involuntary "
              "switches/s; profiler %.1f%% of a CPU, %.0f us per tick" % (
                  name, m, lo, hi, wm, wlo, whi, statistics.median(x[2] for x in got[name]),
                  100 * statistics.median(x[3] for x in got[name]), 1e6 * statistics.median(x[4] for x in got[name])))
    print("  target stopped or traced while sampled: %s" % (", ".join(sorted(set(stopped))) or "never"))

if __name__ == "__main__":
    main()
    print("load average at the end: %.1f" % os.getloadavg()[0])
