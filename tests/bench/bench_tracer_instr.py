"""Tracer cost in instructions, not time: deterministic on a loaded host.

    /usr/bin/python3 tests/bench/bench_tracer_instr.py PYTHON TRACING_DIR [TRACING_DIR ...] [--calls 50000] [--memory]

Runs the six kinds of call of bench_tracer.py (tracer_kinds.py: f(), len(x),
str(i), P(), p.m(), next(g); --calls each) under `valgrind --tool=callgrind` once plain and once
inside a bifocal_trace.Profile per tracing directory (e.g. main's
build/tracing beside this tree's), and prints the instructions the tracer
added per call and each directory's difference from the first; each count is
the least of --repeat runs (a run now and then costs about 15% more for
either build, on 3.11 and 3.12 alike; why is not known). Callgrind counts user-space instructions, so a before/after
comparison does not depend on the load (it is no timing: cache misses and
branch prediction are not in it). Pythons that run through a chroot wrapper (the sid root's) cannot run
under the host's valgrind.
"""
import argparse
import os
import re
import subprocess
import sys

# tracer_kinds.py's loops, from the bench folder (argv[4])
CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[4])
import bifocal_trace
from tracer_kinds import KINDS
N = int(sys.argv[3])
def work():
    for _, k in KINDS:
        k(N, time.perf_counter_ns)
if sys.argv[2] != "plain":
    pr = bifocal_trace.Profile(memory=sys.argv[2] == "memory")
    pr.enable()
    work()
    pr.disable()
else:
    work()
"""


def instructions(python, tracing_dir, mode, calls, repeat):
    return min(instructions_once(python, tracing_dir, mode, calls) for _ in range(repeat))


def instructions_once(python, tracing_dir, mode, calls):
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, "-c", CHILD,
                        tracing_dir, mode, str(calls), os.path.dirname(os.path.abspath(__file__))], capture_output=True, text=True, timeout=1800,
                       env={"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"})
    m = re.search(r"Collected : (\d+)", r.stderr)
    if r.returncode != 0 or not m:
        raise SystemExit("callgrind failed for %s %s: %s" % (python, tracing_dir, r.stderr.strip()[-300:]))
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("python")
    ap.add_argument("tracing_dirs", nargs="+")
    ap.add_argument("--calls", type=int, default=50000, help="calls per kind")
    ap.add_argument("--repeat", type=int, default=3, help="runs per count (the least is kept)")
    ap.add_argument("--memory", action="store_true", help="trace with Profile(memory=True): the allocation "
                    "hooks too (str(i) and P() allocate and free a block per call)")
    a = ap.parse_args()
    n = 6 * a.calls
    plain = instructions(a.python, a.tracing_dirs[0], "plain", a.calls, a.repeat)
    first = None
    print("%s, %d calls (six kinds%s), callgrind instructions (least of %d runs); plain run %d" % (
        a.python, n, ", traced with --memory" if a.memory else "", a.repeat, plain))
    for d in a.tracing_dirs:
        added = instructions(a.python, d, "memory" if a.memory else "trace", a.calls, a.repeat) - plain
        first = added if first is None else first
        print("%-50s added %12d  (%.1f per call)  vs first %+.2f%%" % (d, added, added / n,
                                                                       100.0 * (added - first) / first))
    return 0


if __name__ == "__main__":
    sys.exit(main())
