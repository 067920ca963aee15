"""Two builds' `trace --memory` on bench_memory_near.py's allocation-heavy
program, interleaved: for a change to the tracer's allocation hooks or their
tables that must not slow them.

    /usr/bin/python3 tests/bench/bench_trace_memory_ab.py BASE_BIN NEW_BIN [--runs 7] [--python PATH ...]

Fresh processes by the real command line (`BIN --db DB trace --memory --
python alloc.py N`, each binary with the tracer built beside it), run by run
alternating which build goes first, plain `python alloc.py` between them.
Prints per interpreter the medians (and the fastest runs' ratio, which a
busy machine moves less) of the program's own work time and CPU
time (perf_counter / process_time around its work), their slowdown over
plain and NEW/BASE, and checks that both builds counted the same blocks per
function (the program is deterministic). Not a pass/fail test.
"""
import argparse
import os
import sqlite3
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_memory_near import ALLOC, add_run_args, one, pythons_of  # noqa: E402

COUNTS = ("SELECT q.s, m.allocs, m.frees, m.alloc_bytes FROM trace_memory m JOIN functions f "
          "ON f.id = m.function_id JOIN strings q ON q.id = f.qualname_id JOIN strings fs ON fs.id = f.file_id "
          "WHERE fs.s LIKE '%alloc.py' ORDER BY q.s")


def counts(db):
    con = sqlite3.connect(db)
    rows = con.execute(COUNTS).fetchall()
    con.close()
    return rows


def bench(python, bins, runs, rounds):
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "alloc.py")
        with open(script, "w") as f:
            f.write(ALLOC)
        db = os.path.join(tmp, "b.db")
        names = ["BASE", "NEW"]
        got = {k: ([], []) for k in ["plain"] + names}
        seen = {}
        for r in range(runs):
            order = names if r % 2 == 0 else names[::-1]
            for k in [order[0], "plain", order[1]]:
                cmd = [python] if k == "plain" else [bins[k], "--db", db, "trace", "--memory", "--", python]
                w, _, c = one(cmd, script, rounds)
                got[k][0].append(w)
                got[k][1].append(c)
                if k != "plain":
                    seen.setdefault(k, counts(db))
                if os.path.exists(db):
                    os.unlink(db)
    pw, pc = statistics.median(got["plain"][0]), statistics.median(got["plain"][1])
    print("\n%s  (%d alternating runs, medians; work = the program's own clock)" % (python, runs))
    print("  %-6s %9s %9s %9s %9s   %s" % ("BUILD", "WORK s", "SLOWDOWN", "CPU s", "CPU x", "work s per run"))
    for k, (w, c) in got.items():
        mw, mc = statistics.median(w), statistics.median(c)
        print("  %-6s %9.3f %8.3fx %9.3f %8.3fx   %s" % (k, mw, mw / pw, mc, mc / pc, " ".join("%.3f" % x for x in w)))
    nb, bb = statistics.median(got["NEW"][0]), statistics.median(got["BASE"][0])
    nc, bc = statistics.median(got["NEW"][1]), statistics.median(got["BASE"][1])
    print("  NEW/BASE: work %.3f, CPU %.3f (medians); fastest runs: work %.3f, CPU %.3f"
          % (nb / bb, nc / bc, min(got["NEW"][0]) / min(got["BASE"][0]), min(got["NEW"][1]) / min(got["BASE"][1])))
    same = seen.get("BASE") == seen.get("NEW")
    print("  per-function allocs/frees/bytes of alloc.py equal in both builds: %s (%d functions)"
          % ("yes" if same else "NO", len(seen.get("NEW") or [])))
    if not same:
        for a, b in zip(seen.get("BASE") or [], seen.get("NEW") or []):
            if a != b:
                print("    BASE %s\n    NEW  %s" % (a, b))
    print("  load average after: %.2f %.2f %.2f" % os.getloadavg())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("new")
    add_run_args(ap)
    a = ap.parse_args()
    pys = pythons_of(a)
    os.environ["PYTHONHASHSEED"] = "0"  # the same program, block for block, in every run
    os.nice(5)
    for p in pys:
        bench(p, {"BASE": a.base, "NEW": a.new}, a.runs, a.rounds)


if __name__ == "__main__":
    main()
