#!/usr/bin/env python3
"""Views/exports benchmark on 1,000,000-sample sessions; prints figures and
exits 1 when a target is missed (functions view ≤ 1 s, flame HTML ≤ 3 s and
≤ 5 MB; Lua `for smp in s:samples{}` over a 20,000,000-sample session in
≤ 64 MB peak RSS, its rate printed). Targets are judged on the command's CPU time (user + system), which
a busy CI machine does not inflate; wall time is printed beside it. Two shapes: a server with a few dozen distinct stacks, and 20,000
distinct prefix-sharing stacks over 2,000 functions (depth 8..60).

    python3 tests/bench/bench_views.py [--bin build/bifocal] [--keep DIR]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TARGETS = {"functions": 1.0, "flame": 3.0}
LUA_MAX_RSS_KB = 64 * 1024
LUA_ITER = r"""
local s = bifocal.open():session(tonumber(arg[1]))
local n, t = 0, os.clock()
for smp in s:samples{} do n = n + smp.count end
print(string.format("%d %.3f", n, os.clock() - t))
"""
PEAK = r"""
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""


def lua_iteration(a, work):
    """Peak RSS and rate of a Lua script iterating every sample of a big session."""
    db = os.path.join(work, "lua.db")
    if os.path.exists(db):
        os.unlink(db)
    t = time.perf_counter()
    sid = subprocess.run([a.gen, db, "sampled", "--samples", str(a.lua_samples), "--threads", "1"],
                         capture_output=True, text=True, check=True).stdout.strip()
    print("%-10s %-18s %7.3f" % ("lua", "generate", time.perf_counter() - t))
    script = os.path.join(work, "iter.lua")
    with open(script, "w") as f:
        f.write(LUA_ITER)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PEAK, a.bin, "--db", db, "run", script, sid],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit("failed: lua iteration\n%s" % r.stderr)
    (n, cpu), kb = r.stdout.split("\n")[0].split(), int(r.stdout.split("\n")[1])
    good = kb <= LUA_MAX_RSS_KB and int(n) == a.lua_samples
    print("%-10s %-18s %7.3f %7s %12s  peak RSS %d KB (≤ %d KB) %s; %.2fM samples/s of CPU" % (
        "lua", "s:samples{} iter", wall, cpu, "", kb, LUA_MAX_RSS_KB, "ok" if good else "MISSED",
        int(n) / max(float(cpu), 1e-9) / 1e6))
    return good
FLAME_MAX_BYTES = 5 * 1024 * 1024


def timed(cmd):
    """(wall seconds, CPU seconds) of one run of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal"))
    ap.add_argument("--gen", default=os.path.join(ROOT, "build", "tests", "tools", "gen_sessions"))
    ap.add_argument("--samples", type=int, default=1000000)
    ap.add_argument("--lua-samples", type=int, default=20000000)
    ap.add_argument("--keep", help="directory to keep the database and outputs in")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="bf-bench-views-")
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "bench.db")
    if os.path.exists(db):
        os.unlink(db)
    ok = True
    print("bench_views: %d samples per session, %s" % (a.samples, work))
    print("%-10s %-18s %7s %7s %12s  %s" % ("SHAPE", "STEP", "WALL s", "CPU s", "BYTES", "TARGET (CPU)"))
    for shape, extra in (("server", ["--threads", "4"]), ("distinct", ["--distinct", "20000"])):
        t = time.perf_counter()
        r = subprocess.run([a.gen, db, "sampled", "--samples", str(a.samples)] + extra,
                           capture_output=True, text=True, check=True)
        sid = r.stdout.strip()
        print("%-10s %-18s %7.3f %7s %12s" % (shape, "generate", time.perf_counter() - t, "", ""))
        steps = [
            ("functions", ["replay", sid, "--view", "functions"], None),
            ("functions --json", ["replay", sid, "--view", "functions", "--json"], None),
            ("flame", ["replay", sid, "--view", "flame", "-o"], "flame.html"),
            ("heatmap", ["replay", sid, "--view", "heatmap"], None),
            ("gil", ["replay", sid, "--view", "gil"], None),
            ("stack", ["replay", sid, "--view", "stack"], None),
            ("export collapsed", ["export", sid, "--format", "collapsed", "-o"], "c.txt"),
            ("export speedscope", ["export", sid, "--format", "speedscope", "-o"], "s.json"),
            ("export pstats", ["export", sid, "--format", "pstats", "-o"], "p.prof"),
            ("export pprof", ["export", sid, "--format", "pprof", "-o"], "p.pb.gz"),
        ]
        for name, args, out in steps:
            cmd = [a.bin, "--db", db] + args
            path = None
            if out:
                path = os.path.join(work, shape + "-" + out)
                cmd.append(path)
            wall, dt = timed(cmd)
            size = os.path.getsize(path) if path else None
            target, verdict = "", ""
            if name in TARGETS:
                target = "≤ %.0f s" % TARGETS[name]
                verdict = "ok" if dt <= TARGETS[name] else "MISSED"
                ok &= dt <= TARGETS[name]
            if name == "flame":
                target += ", ≤ 5 MB"
                good = size <= FLAME_MAX_BYTES
                ok &= good
                verdict = "ok" if verdict == "ok" and good else "MISSED"
            print("%-10s %-18s %7.3f %7.3f %12s  %s %s" % (shape, name, wall, dt,
                                                           "" if size is None else "{:,}".format(size), target,
                                                           verdict))
    ok &= lua_iteration(a, work)
    print("bench_views: %s" % ("all targets met" if ok else "TARGET MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
