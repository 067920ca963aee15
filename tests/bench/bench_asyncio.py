#!/usr/bin/env python3
"""Figures of the asyncio task reader (`bifocal record --async`; prints them,
not a timed test).

1. cost per sample (the profiler's CPU time per tick: thread walk, task
   registry, task chains, store writes) with 10 / 1,000 / 10,000 live tasks,
   each parked three coroutines deep on an Event, beside the same without
   --async;
2. the target's slowdown at 100 Hz and 1 kHz with 1,000 tasks: inside one
   long-running target, windows of `bifocal record --pid --async` alternate
   with windows alone, and each sampled window's progress rate (a task doing
   fixed CPU steps) is compared with the mean of the windows alone around it:
   per wall second (what a user sees, but on a shared host mostly the other
   load) and per second of the target's own CPU time (the interference of
   the reads with the target itself); beside them the profiler's own CPU
   share, which a host with a spare core absorbs.

usage: tests/bench/bench_asyncio.py [--python EXE] [--windows N] [--seconds S]
"""
import argparse
import json
import os
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
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
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
    print("target slowdown with 1,000 tasks (median of %d windows of %.1f s; negative = noise):" %
          (a.windows, a.seconds))
    for rate, use_async in ((100, False), (100, True), (1000, True)):
        t = Target(py, 1000, path)
        out, cpu, prof = [], [], []
        try:
            time.sleep(a.seconds)
            for w in range(a.windows):
                a0 = time.monotonic()
                time.sleep(a.seconds)
                s0 = time.monotonic()
                record_last = record(bifocal, os.path.join(tmp, "s%d.db" % rate), t.p.pid, rate, a.seconds, use_async)
                s1 = time.monotonic()
                time.sleep(a.seconds)
                a1 = time.monotonic()
                base = (t.rate(a0, s0) + t.rate(s1, a1)) / 2
                out.append(1 - t.rate(s0, s1) / base)
                base = (t.rate(a0, s0, True) + t.rate(s1, a1, True)) / 2
                cpu.append(1 - t.rate(s0, s1, True) / base)
                _, s = record_last
                prof.append(s["profiler_cpu_s"] / s["duration_s"])
        finally:
            t.stop()
        print("  %5d Hz%s: wall progress %+.2f%% (windows: %s); CPU per step %+.2f%% (%s); "
              "profiler %.1f%% of a CPU" % (rate, "" if use_async else " without --async",
                                          100 * statistics.median(out), " ".join("%+.1f" % (100 * x) for x in out),
                                          100 * statistics.median(cpu), " ".join("%+.1f" % (100 * x) for x in cpu),
                                          100 * statistics.median(prof)))


if __name__ == "__main__":
    main()
    print("load average at the end: %.1f" % os.getloadavg()[0])
