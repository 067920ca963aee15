#!/usr/bin/env python3
"""The cost of `record --memory` (the far lens's memory): the slowdown of a
fresh target launched by the real command line, `bifocal record --memory -r
HZ -- python workload.py`, at 100 Hz and 1 kHz, against the same program run
alone and under `record` without --memory (what memory adds on top of
sampling stacks). The workload allocates, keeps and frees (lists of bytes
objects, bytearrays) for a fixed amount of work and prints its own elapsed
wall and CPU time (perf_counter and process_time around the work, so
interpreter start-up and bifocal's attach are not counted; on a busy host
the CPU time is the steadier figure). Configurations alternate run by run (a host that
changes speed over seconds touches all alike); medians of --runs.

Also bifocal's own CPU time per tick with and without --memory (from the
sessions' profiler_cpu_s: steady where the target's times are not). Then the
price of one read of each source the lens could use on a target
with a 200 MiB heap: /proc/PID/statm (what it reads) and
/proc/PID/smaps_rollup (walks every mapping under the target's mmap lock).

With --attach (the steadier method on a loaded host): one long-lived target
repeats a fixed chunk of that work and prints each chunk's CPU time (its
thread's, time.thread_time_ns); the bench attaches `record [--memory] -r HZ -p
PID -d W` for windows of W seconds in turn with windows left alone, CYCLES
times, and reports per configuration the median over cycles of (median CPU
per chunk in the window) / (that of the alone windows on either side) - 1:
the same process, warm, compared with itself seconds apart. Also bifocal's
own CPU per tick in each configuration (the sessions' profiler_cpu_s).

usage: tests/bench/bench_memory_far.py [--python EXE] [--runs N] [--work N]
       tests/bench/bench_memory_far.py --attach [--python EXE] [--cycles N] [--window S]
Not a timed test: prints figures only; quote them with the load average it
prints.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

# the work both the fresh runs and the attached windows do
CHURN = r'''
def churn(n):
    keep = []
    for i in range(n):
        b = [bytes(64) for _ in range(50)]
        if i % 10 == 0:
            keep.append(bytearray(16384))
        if len(keep) > 400:
            del keep[:200]
        s = 0
        for k in range(300):
            s += k
    return len(keep)
'''

WORKLOAD = r'''
import sys, time
''' + CHURN + r'''t, c = time.perf_counter(), time.process_time()
churn(int(sys.argv[1]))
print("%.6f %.6f" % (time.perf_counter() - t, time.process_time() - c))
'''


def run_once(bifocal, python, src, work, cfg, db):
    cmd = [python, src, str(work)]
    if cfg:
        cmd = [bifocal, "--db", db, "record"] + cfg + ["--"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    wall, cpu = r.stdout.strip().splitlines()[0].split()
    per_tick = float("nan")
    if cfg:  # bifocal's own CPU per tick (the session's profiler_cpu_s over its ticks)
        s = json.loads(subprocess.run([bifocal, "--db", db, "sessions", "--json"], capture_output=True,
                                      text=True).stdout)[-1]
        ticks = s["achieved_rate_hz"] * s["duration_s"]
        per_tick = s["profiler_cpu_s"] / ticks * 1e6 if ticks > 0 else float("nan")
    return float(wall), float(cpu), per_tick


def read_cost(python):
    p = subprocess.Popen([python, "-c", "import time; x = [bytearray(1 << 20) for _ in range(200)]; print(1, flush=True);"
                          " time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()  # the heap is made
        out = {}
        for name in ("statm", "smaps_rollup"):
            fd = os.open("/proc/%d/%s" % (p.pid, name), os.O_RDONLY)
            n = 1000
            t = time.perf_counter()
            try:
                for _ in range(n):
                    os.pread(fd, 4096, 0)
                out[name] = (time.perf_counter() - t) / n * 1e6
            except OSError as e:  # the target ended (killed from outside)
                out[name] = float("nan")
                print("read of %s failed: %s" % (name, e))
            os.close(fd)
        return out
    finally:
        p.kill()
        p.wait()


CHUNKS = r'''
import os, sys, time
''' + CHURN + r'''n = int(sys.argv[1])
print(os.getpid(), flush=True)
out = []
while not os.path.exists(sys.argv[2]):
    c = time.thread_time_ns()
    churn(n)
    out.append("%d %d" % (time.monotonic_ns(), time.thread_time_ns() - c))
    if len(out) >= 50:
        print("\n".join(out), flush=True)
        out = []
print("\n".join(out), flush=True)
'''


def attach_bench(a, python):
    """Windows of record attached to one warm target, between windows alone."""
    import threading
    cfgs = [("record -r 100", ["-r", "100"]), ("record --memory -r 100", ["--memory", "-r", "100"]),
            ("record -r 1000", ["-r", "1000"]), ("record --memory -r 1000", ["--memory", "-r", "1000"])]
    with tempfile.TemporaryDirectory() as d:
        src, stop = os.path.join(d, "chunks.py"), os.path.join(d, "stop")
        with open(src, "w") as f:
            f.write(CHUNKS)
        p = subprocess.Popen([python, src, str(a.chunk), stop], stdout=subprocess.PIPE, text=True)
        pid = int(p.stdout.readline())
        chunks = []
        reader = threading.Thread(target=lambda: chunks.extend(tuple(map(int, l.split())) for l in p.stdout if l.strip()))
        reader.start()
        windows = []  # (config or "alone", start_ns, end_ns, bifocal us per tick)
        try:
            time.sleep(1.0)  # warm
            for c in range(a.cycles):
                for name, cfg in cfgs:
                    t0 = time.monotonic_ns()
                    time.sleep(a.window)
                    windows.append(("alone", t0, time.monotonic_ns(), float("nan")))
                    db = os.path.join(d, "w%d.db" % len(windows))
                    t0 = time.monotonic_ns()
                    r = subprocess.run([a.bifocal, "--db", db, "record"] + cfg + ["-p", str(pid), "-d", str(a.window)],
                                       capture_output=True, text=True, timeout=120)
                    t1 = time.monotonic_ns()
                    if r.returncode != 0:
                        raise SystemExit("failed: record %s -p %d\n%s" % (" ".join(cfg), pid, r.stderr))
                    sess = json.loads(subprocess.run([a.bifocal, "--db", db, "sessions", "--json"], capture_output=True,
                                                     text=True).stdout)[-1]
                    ticks = sess["achieved_rate_hz"] * sess["duration_s"]
                    windows.append((name, t0, t1, sess["profiler_cpu_s"] / ticks * 1e6 if ticks > 0 else float("nan")))
                    os.unlink(db)
            t0 = time.monotonic_ns()
            time.sleep(a.window)
            windows.append(("alone", t0, time.monotonic_ns(), float("nan")))
        finally:
            open(stop, "w").close()
            reader.join(timeout=60)
            p.wait(timeout=60)
    skip = 0.3e9  # attach and the first samples' code-object reads
    def med_cpu(w):
        v = [cpu for end, cpu in chunks if w[1] + skip <= end - cpu and end <= w[2]]
        return (statistics.median(v), len(v)) if v else (float("nan"), 0)
    print("chunks: %d, window %.1f s, %d cycles; load average now %.2f" % (len(chunks), a.window, a.cycles,
                                                                          os.getloadavg()[0]))
    print("%-26s %12s %12s %12s %10s %14s" % ("configuration", "slowdown", "q1", "q3", "chunks/w", "bifocal us/tick"))
    alone_cpu = [med_cpu(w)[0] for w in windows if w[0] == "alone"]
    print("%-26s %12s %12s %12s %10s %14s" % ("alone (median ms/chunk)", "%.3f" % (statistics.median(alone_cpu) / 1e6),
                                               "", "", "", ""))
    for name, _ in cfgs:
        rel, n, tick = [], [], []
        for i, w in enumerate(windows):
            if w[0] != name:
                continue
            m, k = med_cpu(w)
            ref = [med_cpu(windows[j])[0] for j in (i - 1, i + 1) if 0 <= j < len(windows) and windows[j][0] == "alone"]
            if k and ref:
                rel.append((m / statistics.mean(ref) - 1) * 100)
                n.append(k)
            tick.append(w[3])
        q = statistics.quantiles(rel, n=4) if len(rel) >= 2 else [float("nan")] * 3
        print("%-26s %+11.2f%% %+11.2f%% %+11.2f%% %10d %14.1f" % (name, statistics.median(rel), q[0], q[2],
                                                                    statistics.median(n), statistics.median(tick)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", help="interpreter (default: the newest found)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--work", type=int, default=3000, help="workload iterations (about 0.5 s on a quiet host)")
    ap.add_argument("--bifocal", default=os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal"))
    ap.add_argument("--attach", action="store_true", help="windows attached to one warm target (see above)")
    ap.add_argument("--cycles", type=int, default=8, help="--attach: cycles of the four configurations")
    ap.add_argument("--window", type=float, default=2.0, help="--attach: seconds of each window")
    ap.add_argument("--chunk", type=int, default=500, help="--attach: workload iterations per chunk (~10 ms)")
    a = ap.parse_args()
    python = a.python or pythons.discover()[-1]["path"]
    print("load average: %.2f %.2f %.2f" % os.getloadavg())
    print("python: %s" % python)
    if a.attach:
        return attach_bench(a, python)
    cfgs = [("alone", None), ("record -r 100", ["-r", "100"]), ("record --memory -r 100", ["--memory", "-r", "100"]),
            ("record -r 1000", ["-r", "1000"]), ("record --memory -r 1000", ["--memory", "-r", "1000"])]
    times = {name: [] for name, _ in cfgs}
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "work.py")
        with open(src, "w") as f:
            f.write(WORKLOAD)
        for i in range(a.runs):
            for name, cfg in cfgs:
                times[name].append(run_once(a.bifocal, python, src, a.work, cfg, os.path.join(d, "b%d.db" % i)))
    base = [statistics.median(t[k] for t in times["alone"]) for k in (0, 1)]
    print("%-26s %9s %9s %12s %9s %9s %12s" % ("configuration", "wall s", "slowdown", "vs no memory", "cpu s",
                                               "slowdown", "vs no memory"))
    for name, _ in cfgs:
        plain = name.replace("--memory ", "")
        cols = []
        for k in (0, 1):
            m = statistics.median(t[k] for t in times[name])
            p = statistics.median(t[k] for t in times[plain])
            cols += [m, (m / base[k] - 1) * 100, "" if plain == name else "%+.2f%%" % ((m / p - 1) * 100)]
        print("%-26s %9.4f %+8.2f%% %12s %9.4f %+8.2f%% %12s" % tuple([name] + cols))
    def per_tick(name):  # runs whose session could not be read are left out
        v = [t[2] for t in times[name] if not math.isnan(t[2])]
        return "%s %.1f" % (name, statistics.median(v)) if v else "%s n/a" % name
    print("bifocal's own CPU per tick (median, us):", ", ".join(per_tick(name) for name, cfg in cfgs if cfg))
    print("runs: %d each, interleaved; load average now %.2f" % (a.runs, os.getloadavg()[0]))
    rc = read_cost(python)
    print("one read of the target's /proc/PID/statm: %.2f us; of smaps_rollup (200 MiB heap): %.2f us"
          % (rc["statm"], rc["smaps_rollup"]))


if __name__ == "__main__":
    main()
