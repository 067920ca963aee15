#!/usr/bin/env python3
"""Cost per sample of pure-Python asyncio Tasks (`bifocal record --async`
on a target whose tasks are asyncio.tasks._PyTask, made by
loop.set_task_factory), beside the same target with C Tasks: bench_asyncio.py's
target (N tasks parked three coroutines deep on an Event, one worker) and
its steady-state measure (extra profiler CPU / extra ticks of a 6 s over a 2 s
`record --pid`). Prints figures; not a timed test.

usage: tests/bench/bench_asyncio_pytasks.py [--python EXE] [--rate HZ]
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_asyncio as B  # noqa: E402

FACTORY = ("    asyncio.get_running_loop().set_task_factory(\n"
           "        lambda loop, coro, **kw: asyncio.tasks._PyTask(coro, loop=loop, **kw))\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=None)
    ap.add_argument("--rate", type=int, default=100)
    a = ap.parse_args()
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(B.ROOT, "build", "bifocal")
    ps = [p for p in B.pythons.discover() if not p["free_threaded"] and p["version"][:2] <= (3, 13)]
    py = a.python or ps[-1]["path"]
    tmp = tempfile.mkdtemp(prefix="bench_pytasks")
    targets = {"C Task": B.TARGET, "_PyTask": B.TARGET.replace("async def main():\n", "async def main():\n" + FACTORY)}
    assert targets["_PyTask"] != B.TARGET
    print("pure-Python tasks (%s), %d Hz; load average %.1f on %d CPUs" % (py, a.rate, os.getloadavg()[0],
                                                                          os.cpu_count() or 1))
    for kind, src in targets.items():
        path = os.path.join(tmp, kind.replace(" ", "") + ".py")
        with open(path, "w") as f:
            f.write(src)
        for n in (10, 100, 1000):
            t = B.Target(py, n, path)
            try:
                plain, _ = B.record(bifocal, os.path.join(tmp, "p%s%d.db" % (kind[0], n)), t.p.pid, a.rate, 2, False)
                _, s1 = B.record(bifocal, os.path.join(tmp, "a%s%d.db" % (kind[0], n)), t.p.pid, a.rate, 2, True)
                _, s3 = B.record(bifocal, os.path.join(tmp, "b%s%d.db" % (kind[0], n)), t.p.pid, a.rate, 6, True)
            finally:
                t.stop()
            k1, k3 = (x["achieved_rate_hz"] * x["duration_s"] for x in (s1, s3))
            steady = (s3["profiler_cpu_s"] - s1["profiler_cpu_s"]) / (k3 - k1) if k3 > k1 else float("nan")
            print("  %-7s %5d tasks: %8.0f us/sample with --async (%.0f us without); achieved %.0f Hz" %
                  (kind, n, steady * 1e6, plain * 1e6, s3["achieved_rate_hz"]))


if __name__ == "__main__":
    main()
    print("load average at the end: %.1f" % os.getloadavg()[0])
