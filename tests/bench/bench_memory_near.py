"""The memory lenses' cost on one program, in one run: trace --memory against
tracemalloc and memray, and record --memory at 100 Hz and 1 kHz.

    /usr/bin/python3 tests/bench/bench_memory_near.py [--runs 7] [--python PATH ...]

Fresh processes, interleaved run by run (order shuffled each run), on each
interpreter: plain `python alloc.py`, `bifocal trace` (calls only),
`bifocal trace --memory`, `python -X tracemalloc` (one frame, its default),
`bifocal record --memory -r 100` and `-r 1000` (the far lens, launched by the
real command line as users do) and, where the interpreter has it (the Debian
sid root's python3.14 with python3-memray), `python -m memray run`. alloc.py times its own work with
perf_counter (start-up, tool set-up and writing results excluded) and
allocates the way programs do: small objects (tuples, dicts, str), lists that
grow, bytes of 1-64 KiB, most freed, some kept. Slowdown = median work time
under the tool / median plain; process wall time (start-up and the tool's
writing included) beside it. Goals: trace --memory under tracemalloc's
slowdown; record --memory at 100 Hz within 1%. Not a pass/fail test: it prints figures.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BIFOCAL = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
SID_314 = "/var/lib/bifocal/bin/python3.14"

ALLOC = r'''
import sys, time
KEEP = []
def small(n):
    out = []
    for i in range(n):
        out.append((i, str(i), {"k": i}))
    return len(out)
def blobs(n):
    for i in range(n):
        b = bytes(1024 * (1 + i % 64))
        if i % 16 == 0:
            KEEP.append(b)
def grow(n):
    xs = []
    for i in range(n):
        xs.append(i * 2)
    KEEP.append(xs[: n // 100])
def work(rounds):
    for _ in range(rounds):
        small(20000)
        blobs(2000)
        grow(50000)
t0, c0 = time.perf_counter(), time.process_time()
work(int(sys.argv[1]))
sys.stderr.write("WORK_S %.6f %.6f\n" % (time.perf_counter() - t0, time.process_time() - c0))
'''


def has_memray(python):
    return subprocess.run([python, "-c", "import memray"], capture_output=True).returncode == 0


def modes(python, db, tmp):
    m = {"plain": [python],
         "trace": [BIFOCAL, "--db", db, "trace", "--", python],
         "trace --memory": [BIFOCAL, "--db", db, "trace", "--memory", "--", python],
         "tracemalloc": [python, "-X", "tracemalloc"],
         "record 100Hz": [BIFOCAL, "--db", db, "record", "-r", "100", "--", python],
         "record -m 100Hz": [BIFOCAL, "--db", db, "record", "--memory", "-r", "100", "--", python],
         "record -m 1kHz": [BIFOCAL, "--db", db, "record", "--memory", "-r", "1000", "--", python]}
    if has_memray(python):
        m["memray"] = [python, "-m", "memray", "run", "-q", "-f", "-o", os.path.join(tmp, "m.bin")]
    return m


def one(cmd, script, rounds):
    t0 = os.times().elapsed
    r = subprocess.run(cmd + [script, str(rounds)], capture_output=True, text=True, timeout=600)
    wall = os.times().elapsed - t0
    work = [ln.split()[1:3] for ln in r.stderr.splitlines() if ln.startswith("WORK_S ")]
    if r.returncode != 0 or not work:
        raise SystemExit("bench: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-400:]))
    return float(work[0][0]), wall, float(work[0][1])


def bench(python, runs, rounds):
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "alloc.py")
        with open(script, "w") as f:
            f.write(ALLOC)
        db = os.path.join(tmp, "b.db")
        ms = modes(python, db, tmp)
        got = {k: ([], [], []) for k in ms}
        for _ in range(runs):
            order = list(ms)
            random.shuffle(order)
            for k in order:
                w, t, c = one(ms[k], script, rounds)
                got[k][0].append(w)
                got[k][1].append(t)
                got[k][2].append(c)
                if os.path.exists(db):
                    os.unlink(db)
    base_w = statistics.median(got["plain"][0])
    base_t = statistics.median(got["plain"][1])
    print("\n%s  (%d interleaved runs, medians; work = the program's own clock)" % (python, runs))
    base_c = statistics.median(got["plain"][2])
    print("  %-15s %9s %9s %9s %9s %9s %9s" % ("MODE", "WORK s", "SLOWDOWN", "CPU s", "CPU x", "WALL s", "WALL x"))
    for k, (w, t, c) in got.items():
        mw, mt, mc = statistics.median(w), statistics.median(t), statistics.median(c)
        print("  %-15s %9.3f %8.3fx %9.3f %8.3fx %9.3f %8.2fx" % (k, mw, mw / base_w, mc, mc / base_c, mt, mt / base_t))
    tm = statistics.median(got["tracemalloc"][0])
    bm = statistics.median(got["trace --memory"][0])
    print("  trace --memory / tracemalloc slowdown: %.2f (goal < 1)" % ((bm / base_w) / (tm / base_w)))
    if "memray" in got:
        mr = statistics.median(got["memray"][0])
        print("  trace --memory / memray slowdown:      %.2f" % ((bm / base_w) / (mr / base_w)))
    for k in ("record 100Hz", "record -m 100Hz", "record -m 1kHz"):
        print("  %-15s: %+.2f%% work time, %+.2f%% work CPU time (goal for record -m at 100 Hz: <= 1%%)"
              % (k, (statistics.median(got[k][0]) / base_w - 1) * 100, (statistics.median(got[k][2]) / base_c - 1) * 100))
    print("  load average after: %.2f %.2f %.2f" % os.getloadavg())


def default_pythons():
    """The sid root's python3.14 (it has memray) and pyenv's newest."""
    import glob
    pys = [p for p in (SID_314,) if os.path.exists(p)]
    pyenv = sorted(glob.glob("/root/.pyenv/versions/3.1[0-9]*/bin/python3"))
    return pys + pyenv[-1:]


def add_run_args(ap):
    """--runs, --rounds and --python, as the benches of alloc.py take them."""
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="work rounds per run")
    ap.add_argument("--python", action="append", help="interpreter (repeatable); default: "
                    "the sid root's python3.14 and pyenv's newest")


def pythons_of(a):
    """The interpreters a names (default_pythons() without --python), once
    the load average is printed."""
    pys = a.python or default_pythons()
    print("load average: %.2f %.2f %.2f" % os.getloadavg())
    return pys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_args(ap)
    a = ap.parse_args()
    pys = pythons_of(a)
    os.nice(5)
    for p in pys:
        bench(p, a.runs, a.rounds)


if __name__ == "__main__":
    main()
