#!/usr/bin/env python3
"""Two binaries on bench_views.py's sessions, interleaved: the views and exports
of tests/bench/bench_views.py (plus heatmap/stack --json and the gecko export)
on a 1,000,000-sample "server" (4 threads) and "distinct" (20,000 stacks)
session, CPU seconds (user + system) of each command, ROUNDS rounds that
alternate which binary goes first; prints the medians and NEW/BASE. For a
refactor that must not slow the views (a busy machine moves single runs by
25% either way; compare medians, and steps the change did not touch).

    python3 tests/bench/bench_views_ab.py BASE_BIN NEW_BIN build/tests/tools/gen_sessions WORKDIR [ROUNDS=5]
"""
import os, resource, statistics, subprocess, sys
base, new, gen, work = sys.argv[1:5]
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 5
db = os.path.join(work, "bench.db")
os.makedirs(work, exist_ok=True)
if os.path.exists(db): os.unlink(db)
sids = {}
for shape, extra in (("server", ["--threads", "4"]), ("distinct", ["--distinct", "20000"])):
    sids[shape] = subprocess.run([gen, db, "sampled", "--samples", "1000000"] + extra,
                                 capture_output=True, text=True, check=True).stdout.strip()
def steps(sid, tag):
    o = lambda n: os.path.join(work, tag + "-" + n)
    return [("functions", ["replay", sid, "--view", "functions"]),
            ("functions --json", ["replay", sid, "--view", "functions", "--json"]),
            ("flame", ["replay", sid, "--view", "flame", "-o", o("flame.html")]),
            ("heatmap", ["replay", sid, "--view", "heatmap"]),
            ("heatmap --json", ["replay", sid, "--view", "heatmap", "--json"]),
            ("gil", ["replay", sid, "--view", "gil"]),
            ("stack", ["replay", sid, "--view", "stack"]),
            ("stack --json", ["replay", sid, "--view", "stack", "--json"]),
            ("export collapsed", ["export", sid, "--format", "collapsed", "-o", o("c.txt")]),
            ("export speedscope", ["export", sid, "--format", "speedscope", "-o", o("s.json")]),
            ("export gecko", ["export", sid, "--format", "gecko", "-o", o("g.json")]),
            ("export pstats", ["export", sid, "--format", "pstats", "-o", o("p.prof")]),
            ("export pprof", ["export", sid, "--format", "pprof", "-o", o("p.pb.gz")])]
def cpu(cmd):
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode: raise SystemExit("failed %s: %s" % (cmd, r.stderr))
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime
res = {}
for r in range(rounds):
    for shape, sid in sids.items():
        for name, args in steps(sid, shape):
            order = [("base", base), ("new", new)] if r % 2 == 0 else [("new", new), ("base", base)]
            for tag, b in order:
                res.setdefault((shape, name, tag), []).append(cpu([b, "--db", db] + args))
print("%-9s %-18s %9s %9s %7s  (CPU s, median of %d, interleaved)" % ("SHAPE", "STEP", "BASE", "NEW", "NEW/BASE", rounds))
for shape in sids:
    for name, _ in steps("0", shape):
        mb, mn = statistics.median(res[(shape, name, "base")]), statistics.median(res[(shape, name, "new")])
        print("%-9s %-18s %9.3f %9.3f %7.3f" % (shape, name, mb, mn, mn / mb if mb else 0))
