"""Tracer overhead measured the way users run it, per kind of call.

    /usr/bin/python3 tests/bench/bench_tracer.py [--runs 7] [--all] [--warm] [--python PATH ...]
        [--against OTHER/bifocal] [--floor]

Fresh processes, interleaved run by run (order shuffled each run): plain
`python kinds.py`, `python -m cProfile -o /dev/null kinds.py` (3.15+: `-m
profiling.tracing`, where cProfile moved) and
`bifocal trace -- python kinds.py`. The script times each kind of call inside
itself (perf_counter_ns around a loop of 200k calls: Python function, builtin
len(x), type call str(i), class instantiation P() (Python __init__), method
p.m(), generator next(g)). Added time = median traced - median plain; the table
prints bifocal's added time as a share of cProfile's (targets: 3.12+ <= 0.5 over
all kinds and <= 0.6 per kind; 3.8-3.11 (setprofile) <= 0.7).

Then the whole program: wall time of a fresh `bifocal trace` of a call-heavy
script (fib, builtins, classes, generators; start-up and store write included)
against `python` and `python -m cProfile -o /dev/null`, with the part spent
outside the script's own body (start-up, and for bifocal, writing the store).

--warm adds the in-process figures: all modes in one warmed process, best of
--repeat rounds (includes the empty-callback floor and focus mode), and per
kind of call the floor (the same events with empty callbacks), cProfile and
bifocal, medians of --repeat interleaved rounds: how much of each kind's cost
is the interpreter's and how much the collector's own.
Not a pass/fail test: it prints figures.
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pythons  # noqa: E402

# The per-kind script of the fresh-process runs: tracer_kinds.py's loops,
# timed inside the script (the bench folder, where tracer_kinds.py is, on its
# path: the sid root's wrappers bind /work and /tmp, so it is there too).
KINDS_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, %r)
from tracer_kinds import KINDS
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
perf_counter_ns = getattr(time, sys.argv[2] if len(sys.argv) > 2 else "perf_counter_ns")
out = {}
for name, fn in KINDS:
    out[name] = fn(N, perf_counter_ns)
print("BENCH " + json.dumps(out))
""" % HERE

KINDS = [("func", "Python function f()"), ("builtin", "builtin len(x)"), ("type", "type call str(i)"),
         ("class", "class instantiation P()"), ("method", "method p.m()"), ("gen", "generator next(g)")]

# A call-heavy program: the whole-program figure.
PROGRAM_SCRIPT = r"""
import sys
from time import perf_counter_ns
t0 = perf_counter_ns()

class Node:
    def __init__(self, v, left=None, right=None):
        self.v, self.left, self.right = v, left, right
    def total(self):
        s = self.v
        if self.left is not None:
            s += self.left.total()
        if self.right is not None:
            s += self.right.total()
        return s

def build(d):
    return Node(d) if d == 0 else Node(d, build(d - 1), build(d - 1))

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def words(n):
    for i in range(n):
        yield str(i)

def main(scale):
    s = fib(22)
    for _ in range(scale):
        s += build(12).total()
    s += sum(len(w) for w in words(100000 * scale))
    d = {}
    for i in range(50000 * scale):
        d[i % 97] = max(d.get(i % 97, 0), abs(i - 500))
    return s

if sys.argv[1:] != ["empty"]:
    main(3)
print("BODY %d" % (perf_counter_ns() - t0))
"""


_CPROFILE = {}


def cprofile_module(python):
    """The module `python -m` runs for cProfile: profiling.tracing on 3.15+."""
    if python not in _CPROFILE:
        v = subprocess.run([python, "-c", "import sys;print(sys.version_info >= (3, 15))"],
                           capture_output=True, text=True, timeout=60).stdout.strip()
        _CPROFILE[python] = "profiling.tracing" if v == "True" else "cProfile"
    return _CPROFILE[python]


def run_mode(mode, python, script, args, db, bifocal):
    if mode == "plain":
        cmd = [python, script] + args
    elif mode == "floor":  # the same events with empty callbacks (_bifocal_trace_floor), then the script
        cmd = [python, "-c", FLOOR_BOOT, os.path.dirname(bifocal["bifocal"]) + "/tracing", script] + args
    elif mode == "cprofile":  # 3.15 moved it to profiling.tracing (cProfile stays as a shim)
        cmd = [python, "-m", cprofile_module(python), "-o", os.devnull, script] + args
    else:  # "bifocal", or "before": the --against binary
        cmd = [bifocal[mode], "--db", db, "trace", "--", python, script] + args
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode,
                                                   (r.stderr.strip().splitlines() or ["?"])[-1]))
    return wall, cpu, r.stdout


MODES = ["plain", "cprofile", "bifocal"]  # + "before" with --against, "floor" with --floor

# --floor: the interpreter's own cost of the events the collector subscribes,
# measured in a fresh process like the others (sys.argv and __main__ as python
# would set them for the script).
FLOOR_BOOT = ("import sys; d = sys.argv.pop(1); sys.path.insert(0, d); import _bifocal_trace_floor as F; "
              "sys.path.remove(d); sys.argv.pop(0); g = {'__name__': '__main__', '__file__': sys.argv[0], "
              "'__builtins__': __builtins__}; c = compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'); "
              "F.enable(); exec(c, g)")


def fresh_kinds(python, tmp, bifocal, runs, n, timer, floor=False):
    script = os.path.join(tmp, "kinds.py")
    with open(script, "w") as f:
        f.write(KINDS_SCRIPT)
    db = os.path.join(tmp, "kinds.db")
    modes = MODES + (["floor"] if floor else [])
    got = {m: {k: [] for k, _ in KINDS} for m in modes}
    for _ in range(runs):
        order = list(modes)
        random.shuffle(order)
        for m in order:
            _, _, out = run_mode(m, python, script, [str(n), timer], db, bifocal)
            line = [l for l in out.splitlines() if l.startswith("BENCH ")][-1]
            for k, v in json.loads(line[6:]).items():
                got[m][k].append(v / n)
    return {m: {k: statistics.median(v) for k, v in d.items()} for m, d in got.items()}


def fresh_program(python, tmp, bifocal, runs):
    script = os.path.join(tmp, "program.py")
    with open(script, "w") as f:
        f.write(PROGRAM_SCRIPT)
    db = os.path.join(tmp, "program.db")
    res = {}
    for which, args in (("heavy", []), ("empty", ["empty"])):
        walls = {m: [] for m in MODES}
        cpus = {m: [] for m in MODES}
        bodies = {m: [] for m in MODES}
        for _ in range(runs):
            order = list(MODES)
            random.shuffle(order)
            for m in order:
                wall, cpu, out = run_mode(m, python, script, args, db, bifocal)
                body = int([l for l in out.splitlines() if l.startswith("BODY ")][-1].split()[1])
                walls[m].append(wall)
                cpus[m].append(cpu)
                bodies[m].append(body / 1e9)
        res[which] = {m: (statistics.median(walls[m]), statistics.median(bodies[m]),
                          statistics.median(cpus[m])) for m in MODES}
    return res


def interpreters(a, min_version):
    if a.python:
        pys = []
        for p in a.python:
            v = subprocess.run([p, "-c", "import sys;print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True).stdout.strip()
            pys.append((p, v or "?"))
        return pys
    out, seen = [], set()
    for d in pythons.discover():
        if d.get("free_threaded") or not (a.all or d["version"][:2] >= min_version):
            continue
        tag = d["tag"]
        if tag in seen:  # a second build of one version (e.g. Debian's beside pyenv's)
            tag += " " + d["path"]
        seen.add(d["tag"])
        out.append((d["path"], tag))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh runs per mode (median of)")
    ap.add_argument("--calls", type=int, default=200000, help="calls per kind")
    ap.add_argument("--python", action="append", help="interpreter(s); default: every 3.12+ found")
    ap.add_argument("--all", action="store_true", help="every interpreter found, not only 3.12+")
    ap.add_argument("--warm", action="store_true", help="also the warmed in-process table")
    ap.add_argument("--repeat", type=int, default=15, help="--warm: rounds (best of)")
    ap.add_argument("--timer", default="perf_counter_ns", choices=["perf_counter_ns", "thread_time_ns"],
                    help="clock the script times each kind with (thread_time_ns: CPU time, "
                         "steadier on a contended host)")
    ap.add_argument("--no-program", action="store_true", help="skip the whole-program figure")
    ap.add_argument("--no-kinds", action="store_true", help="skip the per-kind table")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--floor", action="store_true",
                    help="per-kind table: also the empty-callback floor in fresh processes")
    ap.add_argument("--against", metavar="BIFOCAL",
                    help="another bifocal binary (e.g. main's build) run interleaved with this one: "
                         "before/after in one run")
    a = ap.parse_args()
    bifocal = {"bifocal": os.path.join(a.build, "bifocal")}
    if a.against:
        bifocal["before"] = a.against
        MODES.append("before")
    pys = interpreters(a, (3, 12))
    tmp = tempfile.mkdtemp(prefix="bench_tracer.")
    print("load average at start: %.1f %.1f %.1f" % os.getloadavg())
    print("\nFresh process per run, median of %d interleaved runs, %d calls per kind, timed with "
          "time.%s." % (a.runs, a.calls, a.timer))
    print("Cell: bifocal added ns/call / cProfile added ns/call = share (bifocal trace -- python "
          "kinds.py vs python -m cProfile -o /dev/null kinds.py vs python kinds.py)\n")
    rows = {}
    for path, tag in ([] if a.no_kinds else pys):
        try:
            rows[tag] = fresh_kinds(path, tmp, bifocal, a.runs, a.calls, a.timer, a.floor)
        except RuntimeError as e:
            print("%-6s %s" % (tag, e))
    tags = list(rows)
    for who in [m for m in MODES + (["floor"] if a.floor else []) if m not in ("plain", "cprofile")] if tags else []:
        if who == "before":
            print("\nThe same runs, --against %s (interleaved with the above):\n" % a.against)
        if who == "floor":
            print("\nThe same runs, the floor: the interpreter's cost of the same events with empty "
                  "callbacks (_bifocal_trace_floor), as a share of cProfile's added time; no collector "
                  "can go below it with these events (on 3.8-3.11 a type call str(i) fires none: "
                  "its added time is the tracing interpreter's, all floor):\n")
        print("| kind of call | " + " | ".join(tags) + " |")
        print("|---|" + "---|" * len(tags))
        for k, label in KINDS + [("all", "all kinds")]:
            cells = []
            for tag in tags:
                med = rows[tag]
                ks = [k] if k != "all" else [kk for kk, _ in KINDS]
                add_b = sum(med[who][kk] - med["plain"][kk] for kk in ks)
                add_c = sum(med["cprofile"][kk] - med["plain"][kk] for kk in ks)
                cells.append("%.2f (%.0f / %.0f ns)" % (add_b / add_c if add_c > 0 else float("nan"),
                                                        add_b, add_c))
            print("| %s | %s |" % (label, " | ".join(cells)))
    if not a.no_program:
        print("\nWhole program, fresh process (median of %d interleaved runs): wall s, and CPU s "
              "of the whole process tree (steadier on a busy host); bifocal's time outside the "
              "script body is start-up and writing the store\n" % a.runs)
        print("| python | python | cProfile | bifocal trace | bifocal added / cProfile added "
              "(wall; CPU) | bifocal outside body: start-up + store write |")
        print("|---|---|---|---|---|---|")
        for path, tag in pys:
            try:
                r = fresh_program(path, tmp, bifocal, a.runs)
            except RuntimeError as e:
                print("%-6s %s" % (tag, e))
                continue
            h, e = r["heavy"], r["empty"]
            out = {m: h[m][0] - h[m][1] for m in MODES}
            for who in [m for m in MODES if m not in ("plain", "cprofile")]:
                startup = e[who][0] - e[who][1]
                add_b = h[who][0] - h["plain"][0]
                add_c = h["cprofile"][0] - h["plain"][0]
                cadd_b = h[who][2] - h["plain"][2]
                cadd_c = h["cprofile"][2] - h["plain"][2]
                print("| %s | %.3f (CPU %.3f) | %.3f (CPU %.3f) | %.3f (CPU %.3f) | %.2f; %.2f | %.3f s "
                      "(python's own: %.3f; start-up of an empty traced script %.3f, so writing ~%.3f; "
                      "empty script CPU: bifocal %.3f, cProfile %.3f, python %.3f) |" % (
                          tag + (" --against" if who == "before" else ""), h["plain"][0], h["plain"][2],
                          h["cprofile"][0], h["cprofile"][2], h[who][0], h[who][2],
                          add_b / add_c if add_c > 0 else float("nan"),
                          cadd_b / cadd_c if cadd_c > 0 else float("nan"), out[who], out["plain"],
                          startup, max(0.0, out[who] - startup),
                          e[who][2], e["cprofile"][2], e["plain"][2]))
    print("\nload average at end: %.1f %.1f %.1f" % os.getloadavg())
    if a.warm:
        warm_table(a)
        warm_kinds_table(a)
    return 0


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

WARM_MODES = ["base", "floor", "cprofile", "bifocal", "focus"]


def measure_all(python, tracing_dir, rounds):
    """Best time per mode. All modes run in one process, interleaved round by
    round, so machine noise (other jobs) falls on every mode alike."""
    r = subprocess.run([python, "-c", CHILD, tracing_dir, str(rounds)], capture_output=True,
                       text=True, timeout=900)
    if r.returncode != 0:
        return {}, {"all": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    return doc["best"], doc["errs"]


# Per kind, in one process: the interpreter's floor (the same events with empty
# callbacks, _bifocal_trace_floor), cProfile and bifocal, each kind timed with
# the thread's CPU clock, median of interleaved rounds.
KINDS_CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, %r)
from tracer_kinds import KINDS as KS
N, rounds = int(sys.argv[2]), int(sys.argv[3])
clk = time.thread_time_ns
import cProfile, bifocal_trace, _bifocal_trace_floor as floor
def one(mode):
    out = {}
    for name, fn in KS:
        if mode == "cprofile":
            p = cProfile.Profile(); p.enable(); out[name] = fn(N, clk); p.disable()
        elif mode == "bifocal":
            p = bifocal_trace.Profile(); p.enable(); out[name] = fn(N, clk); p.disable()
        elif mode == "floor":
            floor.enable(); out[name] = fn(N, clk); floor.disable()
        else:
            out[name] = fn(N, clk)
    return out
modes = ["base", "floor", "cprofile", "bifocal"]
got = {m: {k: [] for k, _ in KS} for m in modes}
for m in modes:
    one(m)  # warm up
for r in range(rounds):
    for m in modes:
        for k, v in one(m).items():
            got[m][k].append(v / N)
print(json.dumps({m: {k: statistics.median(v) for k, v in d.items()} for m, d in got.items()}))
""" % HERE


def warm_kinds_table(a):
    tracing_dir = os.path.join(a.build, "tracing")
    print("\nWarmed, in-process, per kind (100k calls, median of %d interleaved rounds, thread "
          "CPU time): added ns/call of the floor (same events, empty callbacks), cProfile and "
          "bifocal; bifocal / cProfile, and the floor's share of cProfile\n" % a.repeat)
    print("| python | kind | floor ns | cProfile ns | bifocal ns | bifocal - floor ns | "
          "bifocal / cProfile | floor / cProfile |")
    print("|---|---|---|---|---|---|---|---|")
    for path, tag in interpreters(a, (3, 12)):
        r = subprocess.run([path, "-c", KINDS_CHILD, tracing_dir, "100000", str(a.repeat)],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            print("| %s | failed: %s |" % (tag, (r.stderr.strip().splitlines() or ["?"])[-1]))
            continue
        med = json.loads(r.stdout.strip().splitlines()[-1])
        for k in [k for k, _ in KINDS] + ["all"]:
            ks = [k] if k != "all" else [kk for kk, _ in KINDS]
            add = {m: sum(med[m][kk] - med["base"][kk] for kk in ks)
                   for m in ("floor", "cprofile", "bifocal")}
            c = add["cprofile"]
            print("| %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %s |" % (
                tag, k, add["floor"], c, add["bifocal"], add["bifocal"] - add["floor"],
                "%.2f" % (add["bifocal"] / c) if c > 5 else "-",
                "%.2f" % (add["floor"] / c) if c > 5 else "-"))


def warm_table(a):
    tracing_dir = os.path.join(a.build, "tracing")
    pys = interpreters(a, (3, 12))
    print("\nWarmed, in-process (fib(25) + 150k loops of six builtins; best of %d interleaved "
          "rounds; start-up and store write not counted)\n" % a.repeat)
    print("%-7s %8s %8s %8s %8s %8s | %12s %12s %9s" % (
        "python", "base s", "floor s", "cProf s", "bifocal s", "focus s",
        "bf/cP added", "bf/floor add", "focus/base"))
    for path, tag in pys:
        t, errs = measure_all(path, tracing_dir, a.repeat)
        for m, err in errs.items():
            print("%-7s %s: %s" % (tag, m, err))
        if any(t.get(m) is None for m in ("base", "cprofile", "bifocal")):
            continue
        t = {m: t.get(m) for m in WARM_MODES}
        base = t["base"]
        add = {m: (t[m] - base) if t[m] is not None else float("nan") for m in WARM_MODES}
        fmt = lambda v: "%8.3f" % v if v is not None else "%8s" % "-"
        print("%-7s %s %s %s %s %s | %12.2f %12.2f %9.3f" % (
            tag, fmt(base), fmt(t["floor"]), fmt(t["cprofile"]), fmt(t["bifocal"]), fmt(t["focus"]),
            add["bifocal"] / add["cprofile"], add["bifocal"] / add["floor"] if t["floor"] else float("nan"),
            t["focus"] / base if t["focus"] else float("nan")))


if __name__ == "__main__":
    sys.exit(main())
