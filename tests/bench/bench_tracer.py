"""Tracer overhead, side by side: untraced, empty-callback floor, cProfile,
bifocal (full trace) and bifocal focus on one function, per interpreter.

    /usr/bin/python3 tests/bench/bench_tracer.py [--repeat 5] [--python PATH ...]

All modes run in one process per interpreter, interleaved round by round (best
of --repeat rounds); the workload (recursive fib plus many builtin calls) is
timed inside the process, so startup and writing the store are not counted. Prints the best of --repeat runs and the ratios the tracer is
held to: bifocal added time / cProfile added time (target <= 0.6), bifocal
added / floor added, and focus run / untraced run (target <= 1.1).
Not a pass/fail test: it prints figures.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

CHILD = r"""
import sys, time, json
sys.path.insert(0, sys.argv[1])
rounds = int(sys.argv[2])

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def builtin_heavy(n):
    data = [3, 1, 2]
    s = 0
    for i in range(n):
        s += len(data) + abs(-i) + min(i, 7)
        if isinstance(i, int):
            data.append(i)
            data.pop()
    return s

def rare(n):
    return sorted(str(i) for i in range(n))

def workload():
    fib(25)
    builtin_heavy(150000)
    rare(100)

def timed():
    t0 = time.perf_counter()
    workload()
    return time.perf_counter() - t0

def base():
    return timed()

def floor():
    import _bifocal_trace_floor as fl
    fl.enable()
    try:
        return timed()
    finally:
        fl.disable()

def cprofile():
    import cProfile
    p = cProfile.Profile()
    p.enable()
    dt = timed()
    p.disable()
    return dt

def bifocal():
    import bifocal_trace
    p = bifocal_trace.Profile()
    p.enable()
    dt = timed()
    p.disable()
    return dt

def focus():
    import bifocal_trace
    p = bifocal_trace.Profile(focus="__main__:rare")
    p.enable()
    dt = timed()
    p.disable()
    assert [f for f in p.stats()["functions"] if f["qualname"] == "rare"][0]["calls"] == 1
    return dt

modes = {"base": base, "floor": floor, "cprofile": cprofile, "bifocal": bifocal, "focus": focus}
best, errs = {}, {}
workload()  # warm up (specialisation, caches)
for r in range(rounds):
    for name, fn in modes.items():
        if name in errs:
            continue
        try:
            dt = fn()
        except Exception as e:
            errs[name] = "%s: %s" % (type(e).__name__, e)
            continue
        best[name] = min(best.get(name, dt), dt)
print(json.dumps({"best": best, "errs": errs}))
"""

MODES = ["base", "floor", "cprofile", "bifocal", "focus"]


def measure_all(python, tracing_dir, rounds):
    """Best time per mode. All modes run in one process, interleaved round by
    round, so machine noise (other jobs) falls on every mode alike."""
    r = subprocess.run([python, "-c", CHILD, tracing_dir, str(rounds)], capture_output=True,
                       text=True, timeout=900)
    if r.returncode != 0:
        return {}, {"all": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    return doc["best"], doc["errs"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="rounds (best of)")
    ap.add_argument("--python", action="append", help="interpreter(s); default: every 3.12+ found")
    ap.add_argument("--all", action="store_true", help="every interpreter found, not only 3.12+")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    tracing_dir = os.path.join(a.build, "tracing")
    if a.python:
        pys = []
        for p in a.python:
            v = subprocess.run([p, "-c", "import sys;print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True).stdout.strip()
            pys.append((p, v or "?"))
    else:
        pys = [(d["path"], d["tag"]) for d in pythons.discover()
               if a.all or d["version"][:2] >= (3, 12)]
    print("%-7s %8s %8s %8s %8s %8s | %12s %12s %9s" % (
        "python", "base s", "floor s", "cProf s", "bifocal s", "focus s",
        "bf/cP added", "bf/floor add", "focus/base"))
    for path, tag in pys:
        t, errs = measure_all(path, tracing_dir, a.repeat)
        for m, err in errs.items():
            print("%-7s %s: %s" % (tag, m, err))
        if any(t.get(m) is None for m in ("base", "cprofile", "bifocal")):
            continue
        t = {m: t.get(m) for m in MODES}
        base = t["base"]
        add = {m: (t[m] - base) if t[m] is not None else float("nan") for m in MODES}
        fmt = lambda v: "%8.3f" % v if v is not None else "%8s" % "-"
        print("%-7s %s %s %s %s %s | %12.2f %12.2f %9.3f" % (
            tag, fmt(base), fmt(t["floor"]), fmt(t["cprofile"]), fmt(t["bifocal"]), fmt(t["focus"]),
            add["bifocal"] / add["cprofile"], add["bifocal"] / add["floor"] if t["floor"] else float("nan"),
            t["focus"] / base if t["focus"] else float("nan")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
