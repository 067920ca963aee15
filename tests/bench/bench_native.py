#!/usr/bin/env python3
"""Intrusion of native stacks (`record --native`): per-stop time of each
thread (median, p99, max, from the session's extra_json) and the target's
slowdown, for 1, 10 and 100 Python threads, at the native default of 100 Hz.

"stop" runs from the moment waitpid sees a thread stopped to its PTRACE_CONT;
"intr" from PTRACE_INTERRUPT to that moment (the thread runs meanwhile).
Every target thread loops on zlib compression of a small buffer (C code that
releases the GIL), so threads really run in parallel and in C.
The slowdown compares the work done in the same wall time with and without
sampling (median of alternating runs).

usage: tests/bench/bench_native.py [--python EXE] [--threads 1,10,100]
                                   [--seconds S] [--runs N] [--rate HZ] [--nice N]
Interpreters default to the newest one found (tests/integration/pythons.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

WORK = r"""
import sys, threading, time, zlib
n, dur = int(sys.argv[1]), float(sys.argv[2])
data = bytes(range(256)) * 64
count = [0] * n
stop = time.monotonic() + dur
def work(i):
    c = 0
    while time.monotonic() < stop:
        zlib.compress(data, 6)
        c += 1
    count[i] = c
ts = [threading.Thread(target=work, args=(i,), name="w%d" % i) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(count))
"""


def us(ns):
    return "%.0f us" % (ns / 1e3) if ns < 1e6 else "%.2f ms" % (ns / 1e6)


def run_once(bifocal, py, script, db, nthreads, seconds, rate, sampled, nice):
    cmd = [py, script, str(nthreads), str(seconds)]
    if sampled:
        cmd = [bifocal, "--db", db, "record", "--native", "--rate", str(rate), "--"] + cmd
        if nice:  # the profiler above the target on a busy machine; the target at nice 0
            cmd = ["nice", "-n", str(nice)] + cmd[:-len([py, script, str(nthreads), str(seconds)])] + \
                ["nice", "-n", str(-nice), py, script, str(nthreads), str(seconds)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    work = int(r.stdout.split()[0])
    sid = int(r.stdout.split()[-1]) if sampled else None
    return work, sid


def session_extra(bifocal, db, sid):
    out = subprocess.run([bifocal, "--db", db, "sessions", "--json"], capture_output=True,
                         text=True, check=True).stdout
    for s in json.loads(out):
        if s["id"] == sid:
            return s, s["extra"]["native"]
    raise SystemExit("session %d not found" % sid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python")
    ap.add_argument("--threads", default="1,10,100")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--nice", type=int, default=0,
                    help="run bifocal at this nice value (e.g. -10, as root), the target at 0")
    a = ap.parse_args()
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    py = a.python or pythons.discover()[-1]["path"]
    print("bench_native: %s, %s Hz, %.1fs runs x %d, %d CPUs, load %.1f, bifocal nice %d" %
          (py, a.rate, a.seconds, a.runs, os.cpu_count(), os.getloadavg()[0], a.nice))
    print("%8s %10s %10s %10s %10s %9s %8s %9s %9s %9s" % (
        "threads", "stop p50", "stop p99", "stop max", "intr p50", "stops/s", "stopped",
        "late", "slowdown", "unwound"))
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "work.py")
        with open(script, "w") as f:
            f.write(WORK)
        db = os.path.join(d, "b.db")
        for nt in [int(x) for x in a.threads.split(",")]:
            base, samp, figs = [], [], []
            for i in range(a.runs):
                for sampled in ((False, True) if i % 2 == 0 else (True, False)):
                    w, sid = run_once(bifocal, py, script, db, nt, a.seconds, a.rate, sampled,
                                      a.nice)
                    (samp if sampled else base).append(w)
                    if sampled:
                        figs.append(session_extra(bifocal, db, sid))
            # the run with the median p50 stands for the row
            figs.sort(key=lambda f: f[1]["stop_p50_ns"])
            s, nat = figs[len(figs) // 2]
            slow = 100.0 * (1 - statistics.median(samp) / statistics.median(base))
            # share of each thread's time spent stopped (main thread + nt workers)
            stopped = 100.0 * nat["stopped_ns"] / max(s["duration_ns"] * (nt + 1), 1)
            print("%8d %10s %10s %10s %10s %9.0f %7.2f%% %9d %8.1f%% %9s" % (
                nt, us(nat["stop_p50_ns"]), us(nat["stop_p99_ns"]), us(nat["stop_max_ns"]),
                us(nat["interrupt_p50_ns"]), nat["stops"] / max(s["duration_s"], 1e-9), stopped,
                nat["late_stops"], slow,
                "%d/%d" % (nat["stops"] - nat["unwind_failed"], nat["stops"])))
    print("stop: one thread in one sample, from its stop seen by waitpid to PTRACE_CONT (the\n"
          "chosen threads stand still together, at most 2 ms waiting for each other, while\n"
          "registers, stack and the Python frames are read); intr: PTRACE_INTERRUPT to stop;\n"
          "stopped: share of each thread's time spent stopped; late: stops that came after\n"
          "that wait (no C frames that sample); slowdown: work the target did in the same\n"
          "time against unsampled runs (noisy on a busy machine: repeat with --runs)")


if __name__ == "__main__":
    main()
