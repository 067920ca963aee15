"""Benchmark: what the kernel lens costs (wall clock, 1 kHz).

1. Added sampler CPU per off-CPU thread-sample: a target with N threads
   blocked in recv (N = 1, 10, 100) recorded for D seconds at 1 kHz with the
   lens and with --no-kernel; (profiler CPU with - without) / thread-samples,
   the median of ROUNDS interleaved runs. With BEFORE_BIN=path/to/old/bifocal
   the old binary's runs are interleaved with the new one's (a before/after
   comparison from one run on the same host state).
2. The target's slowdown: a fixed amount of work (a Python loop that every
   10 iterations does a pipe round trip with a second thread, beside 10
   threads blocked in recv) timed by the target itself, run alone, under
   `bifocal record --kernel` (1 kHz) and under `strace -f -c`, interleaved,
   ROUNDS times; medians.

usage: BIFOCAL_BIN=build/bifocal [BEFORE_BIN=old/bifocal] [ROUNDS=3] \
         python3 tests/bench/bench_kernel.py [PYTHON] [SECONDS]
Prints one line per figure; no pass/fail.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

BIN = os.environ.get("BIFOCAL_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bifocal"))
PY = sys.argv[1] if len(sys.argv) > 1 else sys.executable
SEC = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
BEFORE = os.environ.get("BEFORE_BIN")
ROUNDS = int(os.environ.get("ROUNDS", "3"))

BLOCKED = r'''
import socket, sys, threading, time
n, dur = int(sys.argv[1]), float(sys.argv[2])
pairs = [socket.socketpair() for _ in range(n)]
for a, b in pairs:
    threading.Thread(target=a.recv, args=(1,), daemon=True).start()
time.sleep(dur)
'''

WORK = r'''
import os, socket, sys, threading, time
n = int(sys.argv[1])
pairs = [socket.socketpair() for _ in range(10)]
for a, b in pairs:
    threading.Thread(target=a.recv, args=(1,), daemon=True).start()
r1, w1 = os.pipe(); r2, w2 = os.pipe()
def pong():
    while os.read(r1, 1) == b"x":
        os.write(w2, b"y")
threading.Thread(target=pong, daemon=True).start()
t0 = time.perf_counter()
for i in range(n):
    sum(range(200))
    if i % 10 == 0:
        os.write(w1, b"x"); os.read(r2, 1)
print(time.perf_counter() - t0)
'''


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def session(db):
    con = sqlite3.connect(db)
    row = con.execute("SELECT samples, profiler_cpu_ns FROM sessions ORDER BY id DESC LIMIT 1").fetchone()
    con.close()
    return row


def record(d, args, nokernel, binary=BIN):
    db = os.path.join(d, "b.db")
    if os.path.exists(db):
        os.unlink(db)
    cmd = [binary, "--db", db, "record", "-r", "1000", "-d", str(SEC)] + ([] if nokernel else ["--kernel"]) + \
        ["--"] + args
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return session(db)


def main():
    d = tempfile.mkdtemp()
    try:
        blocked = os.path.join(d, "blocked.py")
        work = os.path.join(d, "work.py")
        open(blocked, "w").write(BLOCKED)
        open(work, "w").write(WORK)
        bins = [("before", BEFORE), ("after", BIN)] if BEFORE else [("", BIN)]
        for n in (1, 10, 100):
            args = [PY, blocked, str(n), str(SEC + 2)]
            got = {}
            for _ in range(ROUNDS):
                for name, b in bins:
                    for nk in (False, True):
                        s, c = record(d, args, nk, b)
                        got.setdefault((name, nk), []).append(c / 1e3 / s)
            for name, b in bins:
                w, wo = median(got[(name, False)]), median(got[(name, True)])
                print("blocked threads %3d%s: %.2f us of sampler CPU per thread-sample with the kernel lens, "
                      "%.2f without (%.2f us added; medians of %d)" % (
                          n, " " + name if name else "", w, wo, w - wo, ROUNDS))
        iters = str(int(os.environ.get("WORK_ITERS", "300000")))
        times = {"alone": [], "bifocal": [], "strace": []}
        st_ok = shutil.which("strace")
        for _ in range(ROUNDS):
            r = subprocess.run([PY, work, iters], capture_output=True, text=True, check=True)
            times["alone"].append(float(r.stdout.split()[0]))
            r = subprocess.run([BIN, "--db", os.path.join(d, "w.db"), "record", "--kernel", "-r", "1000", "--", PY,
                                work, iters], capture_output=True, text=True, check=True)
            times["bifocal"].append(float(r.stdout.split()[0]))
            if st_ok:
                r = subprocess.run(["strace", "-f", "-c", "-o", os.path.join(d, "st.txt"), PY, work, iters],
                                   capture_output=True, text=True, check=True)
                times["strace"].append(float(r.stdout.split()[0]))
        alone = median(times["alone"])
        print("target's own time for its work: alone %.3f s, under bifocal record --kernel -r 1000 %.3f s "
              "(%.1f%% slower)%s; medians of %d" % (
                  alone, median(times["bifocal"]), (median(times["bifocal"]) / alone - 1) * 100,
                  ", under strace -f -c %.3f s (%.1fx)" % (median(times["strace"]), median(times["strace"]) / alone)
                  if st_ok else "", ROUNDS))
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
