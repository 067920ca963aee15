"""One slowdown trial for the sampler benches: a fresh CPU-bound target,
alone or under one profiler started with its real command line, timing its
own work; what the profiler cost it, and what the profiler took.

The target (WORK below, any Python 3) spins on the work until a start time
(monotonic ns, `warm` seconds after the trial began: the profiler has
attached and settled by then), then runs `secs` seconds of
progress_target.CPU_WORK (a 19-deep recursion ending in a small loop) in
chunks of 20 calls, timing them with time.perf_counter_ns() and
time.thread_time_ns(), and writes what it measured to a JSON file:
  iters, wall_ns, cpu_ns      units of work done, wall and own-CPU ns taken
  nivcsw, nvcsw, minflt       getrusage(RUSAGE_THREAD) deltas over the work
  chunk_cpu_med_ns            median CPU ns of a chunk
It prints "ready" once started (attach then), "go" when the work starts and
"end" when it ends, so the caller can read the profiler's own CPU
(/proc/PID/task/*/schedstat) over the same span.

    r = trial(kind, py, bf, rate, secs, d, how="attach", clock=None, env=None,
              pin=None, warm=4.0, twin=None)
kind is None (alone), "bifocal" or "tachyon"; how "attach" (`bifocal record
--pid PID`, `python3.15 -m profiling.sampling attach PID`, run inside the
target's mount namespace when it has its own) or "launch" (`bifocal record --
PY work.py`, `python3.15 -m profiling.sampling run work.py`). pin: (target
cpus, profiler cpus) for taskset, or None. twin: a CPU on which an
unprofiled copy of the target works over the same span (same start time),
its figures returned as r["twin"].
Returns a dict: the target's figures, plus for a profiler prof_cpu_ns (its
CPU over the work span), samples and duration_s (what it stored and over how
long, by its own account), load (1-min load average at the end).
"""
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from progress_target import CPU_WORK  # noqa: E402

WORK = CPU_WORK + r"""
import json, os, resource
start, secs, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
sys.stdout.write("ready\n"); sys.stdout.flush()
while time.monotonic_ns() < start:
    f(18)
sys.stdout.write("go\n"); sys.stdout.flush()
ru0 = resource.getrusage(resource.RUSAGE_THREAD)
w0 = time.perf_counter_ns(); c0 = time.thread_time_ns()
stop = start + int(secs * 1e9)
chunks = []
n = 0
wn = w0
while wn < stop:
    cs = time.thread_time_ns()
    for _ in range(20):
        f(18)
    wn = time.perf_counter_ns()
    chunks.append(time.thread_time_ns() - cs)
    n += 20
c1 = time.thread_time_ns()
ru1 = resource.getrusage(resource.RUSAGE_THREAD)
sys.stdout.write("end\n"); sys.stdout.flush()
chunks.sort()
json.dump({"iters": n, "wall_ns": wn - w0, "cpu_ns": c1 - c0,
           "nivcsw": ru1.ru_nivcsw - ru0.ru_nivcsw, "nvcsw": ru1.ru_nvcsw - ru0.ru_nvcsw,
           "minflt": ru1.ru_minflt - ru0.ru_minflt,
           "chunk_cpu_med_ns": chunks[len(chunks) // 2] if chunks else 0}, open(out, "w"))
"""


def task_cpu_ns(pid):
    """CPU ns of all threads of pid so far (schedstat), or None once gone."""
    tot, seen = 0, False
    for p in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            tot += int(open(p).read().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            pass
    return tot if seen else None


def tachyon_attach_prefix(py, pid):
    """How Tachyon attaches to pid: the interpreter py itself, or, when the
    target runs under another root (a container, the sid root's wrapper: each
    wrapper call is a mount namespace of its own), that root's interpreter run
    inside the target's mount namespace and root, as `docker exec` would. From
    another namespace Tachyon cannot open the files /proc/PID/maps names (it
    shows their host paths) and fails at once: "Failed to find the PyRuntime
    section in process N"."""
    try:
        same = os.stat("/proc/%d/root" % pid).st_ino == os.stat("/").st_ino and \
            os.readlink("/proc/%d/ns/mnt" % pid) == os.readlink("/proc/self/ns/mnt")
    except OSError:
        same = True
    if same:
        return [py]
    exe = os.path.basename(os.readlink("/proc/%d/exe" % pid))
    return ["nsenter", "-t", str(pid), "-m", "-r", "-w", exe]


def _taskset(cpus):
    return ["taskset", "-c", cpus] if cpus else []


def _bf_mode(clock):
    """bifocal's options for an arm's clock: a --clock name, or "memory"
    (the wall clock with the far memory lens, record --memory)."""
    if not clock:
        return []
    return ["--memory"] if clock == "memory" else ["--clock", clock]


def trial(kind, py, bf, rate, secs, d, how="attach", clock=None, env=None, pin=None, warm=4.0,
          twin=None):
    script = os.path.join(d, "slow_work.py")
    with open(script, "w") as f:
        f.write(WORK)
    start = time.monotonic_ns() + int(warm * 1e9)
    if twin is not None:  # an unprofiled copy over the same span, pinned to CPU twin
        out2 = os.path.join(d, "slow_twin.json")
        if os.path.exists(out2):
            os.unlink(out2)
        tw = subprocess.Popen(_taskset(str(twin)) + [py, script, str(start), str(secs), out2],
                              stdout=subprocess.DEVNULL)
    out = os.path.join(d, "slow_out.json")
    db = os.path.join(d, "slow.db")
    coll = os.path.join(d, "slow.collapsed")
    for p in (out, db, db + "-wal", db + "-shm", coll):
        if os.path.exists(p):
            os.unlink(p)
    tpin, ppin = pin or (None, None)
    targs = [py, script, str(start), str(secs), out]
    penv = dict(os.environ, **(env or {}))
    prof = tgt = None
    if kind is None:
        tgt = subprocess.Popen(_taskset(tpin) + targs, stdout=subprocess.PIPE, text=True)
    elif how == "attach":
        tgt = subprocess.Popen(_taskset(tpin) + targs, stdout=subprocess.PIPE, text=True)
        if tgt.stdout.readline().strip() != "ready":  # it runs Python: attach now
            raise SystemExit("slowdown_trial: the target did not start")
        if kind == "bifocal":
            cmd = [bf, "--db", db, "record", "--pid", str(tgt.pid), "--rate", str(rate)] + _bf_mode(clock)
        else:
            cmd = tachyon_attach_prefix(py, tgt.pid) + [
                "-m", "profiling.sampling", "attach", "-r", str(rate), "-d", "3600",
                "--collapsed", "-o", coll] + (["--mode", clock] if clock else []) + [str(tgt.pid)]
        prof = subprocess.Popen(_taskset(ppin) + cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=penv)
    else:  # launch: the profiler starts the target; its stdout is the target's
        if kind == "bifocal":
            cmd = [bf, "--db", db, "record", "--rate", str(rate)] + _bf_mode(clock) + ["--"] + _taskset(tpin) + targs
        else:
            cmd = [py, "-m", "profiling.sampling", "run", "-r", str(rate), "--collapsed", "-o",
                   coll] + (["--mode", clock] if clock else []) + [script] + targs[2:]
        prof = subprocess.Popen(_taskset(ppin) + cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=penv)
    reader = tgt if tgt else prof
    marks = {}
    text = []

    def watch():
        for line in reader.stdout:
            s = line.strip()
            if s in ("go", "end") and s not in marks:
                marks[s] = task_cpu_ns(prof.pid) if prof else 0
            else:
                text.append(line)
    th = threading.Thread(target=watch, daemon=True)
    th.start()
    if tgt:
        tgt.wait(timeout=secs + warm + 120)
    if prof:
        try:
            prof.wait(timeout=120)
        except subprocess.TimeoutExpired:
            prof.kill()
            prof.wait()
            raise SystemExit("slowdown_trial: %s did not end after its target" % kind)
    th.join(timeout=10)
    ptext = "".join(text) if reader is prof else (prof.stdout.read() if prof else "")
    if not os.path.exists(out):
        raise SystemExit("slowdown_trial: the target wrote no result (%s %s): %s"
                         % (kind, how, ptext[-500:]))
    r = json.load(open(out))
    r["load"] = os.getloadavg()[0]
    if twin is not None:
        tw.wait(timeout=secs + warm + 120)
        r["twin"] = json.load(open(out2)) if os.path.exists(out2) else None
    if not prof:
        return r
    g, e = marks.get("go"), marks.get("end")
    r["prof_cpu_ns"] = (e - g) if g is not None and e is not None else None
    r["samples"], r["duration_s"] = 0, 0.0
    r["prof_text"] = ptext[-300:]
    if kind == "tachyon":
        m = re.search(r"Captured ([\d,]+) samples in ([\d.]+) seconds", ptext)
        if m:
            r["samples"], r["duration_s"] = int(m.group(1).replace(",", "")), float(m.group(2))
    else:
        ss = subprocess.run([bf, "--db", db, "sessions", "--json"], capture_output=True, text=True)
        for s in json.loads(ss.stdout or "[]")[:1]:  # a fresh database: its one session
            r["samples"], r["duration_s"] = s["samples"], s["duration_s"]
    return r
