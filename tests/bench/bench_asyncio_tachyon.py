#!/usr/bin/env python3
"""asyncio running share beside Tachyon (prints figures, not a timed test).

1. One 3.15 target (the sid root's python3.15) whose burner task times its own
CPU steps, sampled in alternating windows, shuffled per round, by
`bifocal record --pid PID --async` and by 3.15's own sampler,
`python3.15 -m profiling.sampling attach --async-aware --async-mode all
--collapsed`, run inside the target's root and mount namespace (nsenter) so
it finds the files /proc/PID/maps names. Per window the truth is the
burner's busy time over the window's wall time, from its own progress lines
(CLOCK_MONOTONIC is the host's inside the root too).

Shares: bifocal, the tasks view's running share of task "burner"; Tachyon,
the share of the burner's samples whose stack under its task frame holds
the burn() call line (its running step), of all samples naming the task.

2. The integration tests' asyncio_workload.py (two loops, thousands of short
tasks) in one long run, windows alternating the same way; its burners'
running shares against the CPU steps each timed in the window (its
progress lines); Tachyon's own error rate beside.

usage: tests/bench/bench_asyncio_tachyon.py [--rounds N] [--seconds S] [--rate HZ]
"""
import argparse
import json
import os
import random
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
import asyncio, random, sys, time
pc = time.perf_counter
rnd = random.Random(7)
def burn(s):
    t = pc()
    while pc() - t < s:
        pass
    return pc() - t
async def burner():
    busy, n = 0.0, 0
    while True:
        busy += burn(rnd.uniform(0.002, 0.008))  # BURN
        await asyncio.sleep(rnd.uniform(0.002, 0.010))
        n += 1
        if n % 10 == 0:
            print(time.monotonic(), busy, flush=True)
async def sleeper():
    while True:
        await asyncio.sleep(rnd.uniform(0.01, 0.05))
async def short():
    await asyncio.sleep(0.001)
async def spawner():
    while True:
        for _ in range(20):
            asyncio.create_task(short())
        await asyncio.sleep(0.01)
async def main():
    asyncio.create_task(sleeper(), name="sleeper")
    asyncio.create_task(spawner(), name="spawner")
    t = asyncio.create_task(burner(), name="burner")
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await t
asyncio.run(main())
"""


def realtime():
    """`chrt -f 1` when this user may run a real-time sampler, else []: on a
    host whose load exceeds its CPUs a normal-priority sampler's ticks come
    in clumps (docs/sampling.md); both samplers get the same policy, the
    target keeps the normal one (both attach by pid)."""
    try:
        ok = subprocess.run(["chrt", "-f", "1", "true"], capture_output=True).returncode == 0
    except OSError:
        ok = False
    return ["chrt", "-f", "1"] if ok else []


RT = realtime()


class Target:
    def __init__(self, py, path):
        self.p = subprocess.Popen([py, path], stdout=subprocess.PIPE, text=True)
        self.progress = []
        for line in self.p.stdout:  # the burner's first lines may come before
            if line.strip() == "ready":
                break
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            f = line.split()
            if len(f) == 2:
                self.progress.append((float(f[0]), float(f[1])))

    def running(self, t0, t1):
        """The burner's busy share of [t0, t1] by its own clock."""
        pts = [p for p in self.progress if t0 <= p[0] <= t1]
        if len(pts) < 2:
            return float("nan")
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def stop(self):
        self.p.kill()
        self.p.wait()


def bifocal_shares(bifocal, db, pid, rate, secs, names):
    """One bifocal window: {task: (running share, samples)} for names."""
    subprocess.run(RT + [bifocal, "--db", db, "record", "--pid", str(pid), "--async", "--rate", str(rate),
                    "--duration", str(secs)], check=True, capture_output=True)
    sid = json.loads(subprocess.run([bifocal, "--db", db, "sessions", "--json"], check=True, capture_output=True,
                                    text=True).stdout)[-1]["id"]
    view = json.loads(subprocess.run([bifocal, "--db", db, "replay", str(sid), "--view", "tasks", "--json",
                                      "--limit", "100000"], check=True, capture_output=True, text=True).stdout)
    out = {}
    for n in names:
        t = [t for t in view["tasks"] if t["name"] == n]
        out[n] = (t[0]["running"]["share"], t[0]["samples"]) if t else (float("nan"), 0)
    return out


def tachyon(pid, rate, secs, out):
    """One Tachyon window into the collapsed file out. Returns its error
    rate as it prints it."""
    r = subprocess.run(RT + ["nsenter", "-t", str(pid), "-m", "-r", "-w", "/usr/bin/python3.15", "-m", "profiling.sampling",
                        "attach", "--async-aware", "--async-mode", "all", "-r", str(rate), "-d", str(secs),
                        "--collapsed", "-o", out, str(pid)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("Tachyon failed (%d): %s" % (r.returncode, (r.stderr or r.stdout)[-400:]))
    m = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("Error rate:")]
    return m[0].split(":", 1)[1].strip() if m else "?"


def tachyon_share(path, burn_line, task, coro):
    """Task's running share in a Tachyon collapsed file: of the samples
    naming the task, those whose stack under its frame holds coro's burn
    call line; and that sample count."""
    run = total = 0
    root = "<task>:%s:0" % task
    with open(path) as f:
        for line in f:
            stack, n = line.rsplit(" ", 1)
            frames = stack.split(";")
            if root not in frames:
                continue
            total += int(n)
            if any(fr.endswith(":%s:%d" % (coro, burn_line)) for fr in frames[frames.index(root) + 1:]):
                run += int(n)
    return (run / total if total else float("nan")), total


def workload_part(bifocal, py, tmp, rounds, secs, rate):
    """The integration tests' workload (tests/integration/asyncio_workload.py:
    two loops, thousands of short tasks) in one long run, windows alternating
    as in main(); the truth is each burner's CPU steps in the window, from
    the progress lines it prints."""
    wl = os.path.join(ROOT, "tests", "integration", "asyncio_workload.py")
    with open(wl) as f:
        line = next(n for n, l in enumerate(f, 1) if "cpu += burn(cpu_s)" in l)
    names = ("burner", "b-burner")
    truth_path = os.path.join(tmp, "truth.json")
    # long enough for every window on a loaded host (Tachyon starts in ~2 s)
    p = subprocess.Popen([py, wl, truth_path, str(2 * rounds * (secs + 4) + 4)], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, BIFOCAL_WORKLOAD_PROGRESS="1"))
    progress = {n: [] for n in names}

    def read():
        for l in p.stdout:
            f = l.split()
            if len(f) == 4 and f[0] == "P" and f[1] in progress:
                progress[f[1]].append((float(f[2]), float(f[3])))

    threading.Thread(target=read, daemon=True).start()

    def busy(n, t0, t1):
        pts = [x for x in progress[n] if t0 <= x[0] <= t1]
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) if len(pts) > 1 else float("nan")

    time.sleep(1.0)
    got = []
    rnd = random.Random(2)
    for r in range(rounds):
        order = ["bifocal", "tachyon"]
        rnd.shuffle(order)
        for who in order:
            s0 = time.monotonic()
            if who == "bifocal":
                sh, er = bifocal_shares(bifocal, os.path.join(tmp, "w%d.db" % r), p.pid, rate, secs, names), ""
            else:
                out = os.path.join(tmp, "w%d.txt" % r)
                er = tachyon(p.pid, rate, secs, out)
                sh = {n: tachyon_share(out, line, n, "burner") for n in names}
            got.append((who, sh, er, s0, time.monotonic()))
    p.kill()
    p.wait()
    print("asyncio_workload.py (two loops, thousands of short tasks), %d rounds of a %d s window; each burner's\n"
          "truth from its own CPU steps in the window:" % (rounds, secs))
    errs = {"bifocal": [], "tachyon": []}
    for who, sh, er, s0, s1 in got:
        cells = []
        for n in names:
            tr = busy(n, s0, s1)
            e = 100 * (sh[n][0] - tr)
            errs[who].append(e)
            cells.append("%s %5.1f%% of %5.1f%% (%+5.1f, %d samples)" % (n, 100 * sh[n][0], 100 * tr, e, sh[n][1]))
        print("  %-8s %s%s" % (who, "  ".join(cells), ("  Tachyon's error rate %s%%" % er) if er else ""))
    for who, xs in errs.items():
        print("%-8s running share error on asyncio_workload.py: median %+.1f points, worst %+.1f" % (
            who, statistics.median(xs), max(xs, key=abs)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=3, help="window length (Tachyon takes whole seconds)")
    ap.add_argument("--rate", type=int, default=1000)
    a = ap.parse_args()
    bifocal = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    ps = [p for p in pythons.discover() if p["version"][:2] == (3, 15) and p.get("container")]
    if not ps:
        raise SystemExit("no 3.15 of the sid root here (%s)" % (pythons.sid_missing() or "not discovered"))
    py = ps[0]["path"]
    tmp = tempfile.mkdtemp(prefix="bench_tachyon", dir="/tmp")  # /tmp is bound into the root
    path = os.path.join(tmp, "target.py")
    with open(path, "w") as f:
        f.write(TARGET)
    burn_line = next(n for n, l in enumerate(TARGET.splitlines(), 1) if "# BURN" in l)  # TARGET starts "\n": line 1 is empty
    print("asyncio running share of a burner task against its own clock, %s at %d Hz; %d rounds of a %d s\n"
          "window each, shuffled; load average %.1f on %d CPUs; samplers %s" % (
              py, a.rate, a.rounds, a.seconds, os.getloadavg()[0], os.cpu_count() or 1,
              "real-time (chrt -f 1)" if RT else "at normal priority (chrt refused)"))
    t = Target(py, path)
    got = {"bifocal": [], "tachyon": []}
    rnd = random.Random(1)
    try:
        for r in range(a.rounds):
            order = ["bifocal", "tachyon"]
            rnd.shuffle(order)
            for who in order:
                s0 = time.monotonic()
                if who == "bifocal":
                    share, n = bifocal_shares(bifocal, os.path.join(tmp, "b%d.db" % r), t.p.pid, a.rate, a.seconds,
                                              ("burner",))["burner"]
                else:
                    out = os.path.join(tmp, "t%d.txt" % r)
                    tachyon(t.p.pid, a.rate, a.seconds, out)
                    share, n = tachyon_share(out, burn_line, "burner", "burner")
                truth = t.running(s0, time.monotonic())
                got[who].append((share, truth))
                print("  round %d %-8s sampled %5.1f%%  truth %5.1f%%  error %+5.1f points  (%d samples of the task)"
                      % (r + 1, who, 100 * share, 100 * truth, 100 * (share - truth), n))
    finally:
        t.stop()
    for who, xs in got.items():
        errs = [100 * (s - tr) for s, tr in xs]
        print("%-8s running share error: median %+.1f points, worst %+.1f" % (
            who, statistics.median(errs), max(errs, key=abs)))
    workload_part(bifocal, py, tmp, a.rounds, a.seconds, a.rate)


if __name__ == "__main__":
    main()
    print("load average at the end: %.1f" % os.getloadavg()[0])
