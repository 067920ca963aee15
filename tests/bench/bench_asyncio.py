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
   fixed CPU steps) is compared with the mean of the windows alone around it.

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
            print(time.monotonic(), n, flush=True)
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
            if len(f) == 2:
                self.progress.append((float(f[0]), int(f[1])))

    def rate(self, t0, t1):
        pts = [(t, n) for t, n in self.progress if t0 <= t <= t1]
        if len(pts) < 2:
            return float("nan")
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

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
    print("asyncio tasks (%s)" % py)
    print("cost per sample at 1 kHz (profiler CPU per tick, store writes included):")
    for n in (10, 1000, 10000):
        t = Target(py, n, path)
        try:
            plain, _ = record(bifocal, os.path.join(tmp, "c%d.db" % n), t.p.pid, 1000, 2, False)
            cost, s = record(bifocal, os.path.join(tmp, "a%d.db" % n), t.p.pid, 1000, 2, True)
        finally:
            t.stop()
        print("  %6d tasks: %8.1f us/sample with --async (%.1f us without); achieved %.0f Hz, %d missed" %
              (n, cost * 1e6, plain * 1e6, s["achieved_rate_hz"], s["missed"]))
    print("target slowdown with 1,000 tasks (median of %d windows of %.1f s; negative = noise):" %
          (a.windows, a.seconds))
    for rate, use_async in ((100, False), (100, True), (1000, True)):
        t = Target(py, 1000, path)
        out = []
        try:
            time.sleep(a.seconds)
            for w in range(a.windows):
                a0 = time.monotonic()
                time.sleep(a.seconds)
                s0 = time.monotonic()
                record(bifocal, os.path.join(tmp, "s%d.db" % rate), t.p.pid, rate, a.seconds, use_async)
                s1 = time.monotonic()
                time.sleep(a.seconds)
                a1 = time.monotonic()
                base = (t.rate(a0, s0) + t.rate(s1, a1)) / 2
                out.append(1 - t.rate(s0, s1) / base)
        finally:
            t.stop()
        print("  %5d Hz%s: %+.2f%% (windows: %s)" % (rate, "" if use_async else " without --async",
                                                 100 * statistics.median(out),
                                                 " ".join("%+.1f" % (100 * x) for x in out)))


if __name__ == "__main__":
    main()
