"""Benchmark: what the kernel lens costs (wall clock, 1 kHz).

1. Added sampler CPU per off-CPU thread-sample: a target with N threads
   blocked in recv (N = 1, 10, 100) recorded for D seconds with the lens and
   with --no-kernel; (profiler CPU with - without) / thread-samples.
2. The target's slowdown: a CPU-bound loop beside a thread that blocks and
   wakes every millisecond (a pipe ping-pong) counts its own iterations, run
   alone, under `bifocal record` (lens on) and under `strace -f -c` (the same
   workload, the same run of this script).

usage: BIFOCAL_BIN=build/bifocal python3 tests/bench/bench_kernel.py [PYTHON] [SECONDS]
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

BLOCKED = r'''
import socket, sys, threading, time
n, dur = int(sys.argv[1]), float(sys.argv[2])
pairs = [socket.socketpair() for _ in range(n)]
for a, b in pairs:
    threading.Thread(target=a.recv, args=(1,), daemon=True).start()
time.sleep(dur)
'''

WORK = r'''
import os, sys, threading, time
dur = float(sys.argv[1])
r1, w1 = os.pipe(); r2, w2 = os.pipe()
def pong():
    while os.read(r1, 1) == b"x":
        os.write(w2, b"y")
threading.Thread(target=pong, daemon=True).start()
def ping():
    while True:
        os.write(w1, b"x"); os.read(r2, 1); time.sleep(0.001)
threading.Thread(target=ping, daemon=True).start()
n, end = 0, time.monotonic() + dur
while time.monotonic() < end:
    sum(range(200)); n += 1
print(n / dur)
'''


def session(db):
    con = sqlite3.connect(db)
    row = con.execute("SELECT samples, profiler_cpu_ns FROM sessions ORDER BY id DESC LIMIT 1").fetchone()
    con.close()
    return row


def record(d, args, nokernel):
    db = os.path.join(d, "b.db")
    if os.path.exists(db):
        os.unlink(db)
    cmd = [BIN, "--db", db, "record", "-d", str(SEC)] + ([] if nokernel else ["--kernel"]) + ["--"] + args
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return session(db)


def main():
    d = tempfile.mkdtemp()
    try:
        blocked = os.path.join(d, "blocked.py")
        work = os.path.join(d, "work.py")
        open(blocked, "w").write(BLOCKED)
        open(work, "w").write(WORK)
        for n in (1, 10, 100):
            args = [PY, blocked, str(n), str(SEC + 2)]
            s1, c1 = record(d, args, False)
            s0, c0 = record(d, args, True)
            print("blocked threads %3d: %.2f us of sampler CPU per thread-sample with the kernel lens, "
                  "%.2f without (%.2f us added; %d / %d samples)" % (
                      n, c1 / 1e3 / s1, c0 / 1e3 / s0, c1 / 1e3 / s1 - c0 / 1e3 / s0, s1, s0))
        alone = float(subprocess.run([PY, work, str(SEC)], capture_output=True, text=True).stdout)
        db = os.path.join(d, "w.db")
        r = subprocess.run([BIN, "--db", db, "record", "--kernel", "--", PY, work, str(SEC)], capture_output=True,
                           text=True)
        under = float(r.stdout.split()[0])
        st = None
        if shutil.which("strace"):
            r = subprocess.run(["strace", "-f", "-c", "-o", os.path.join(d, "st.txt"), PY, work, str(SEC)],
                               capture_output=True, text=True)
            st = float(r.stdout.split()[0])
        print("target loop rate: alone %.0f/s, under bifocal record (kernel lens) %.0f/s (%.1f%% slower)%s" % (
            alone, under, (1 - under / alone) * 100,
            ", under strace -f -c %.0f/s (%.1f%% slower)" % (st, (1 - st / alone) * 100) if st else ""))
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
