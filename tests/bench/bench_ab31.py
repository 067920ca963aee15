#!/usr/bin/env python3
"""Two builds side by side in one run: store ingest, sampler cost, views and
exports (issue 31's "store, sampler and tracer benchmarks unchanged, measured
before and after in one run"; the tracer has bench_tracer --against and
bench_tracer_instr.py).

Timing: ROUNDS rounds, each running every step once with each build, the
order flipped every round, so a host that changes speed over minutes loads
both alike; medians and [min-max] per build, and NEW/OLD.
  store    build/tests/bench/bench_store N: samples/s, wall and cpu clock
  sampler  build/sampling/bench_sampler PY S: part 1 (median and quietest
           block wall us, mean CPU us per thread-sample, stack only),
           part 2 achieved rate when 100 kHz is asked, part 3 profiler CPU
           per 1 kHz tick on a moving stack
  views    CPU seconds (user+sys) of replay views / exports / sessions --json
           on two gen_sessions sessions (server: 4 threads; distinct: 20,000
           stacks), made by OLD's gen_sessions; NEW reads a copy migrated by
           its own `gc` (the schema may differ). --real DB: a recorded
           session instead (made by OLD), copied the same way.
Instructions (--instr; load-independent: valgrind --tool=callgrind, user
space only, least of 3 runs; perf stat needs a PMU, which a VM may lack):
  store    whole bench_store N run, and bf_store_sample_add inclusive per sample
  sampler  bf_smp_sample inclusive per call (bench_sampler PY 0.001: part 1's
           40,000 calls and the few of parts 2-3)
  views    each step on 100,000-sample sessions

usage: bench_ab31.py OLD_TREE NEW_TREE WORKDIR [--rounds 5] [--python PY]...
                     [--only store,sampler,views] [--instr] [--store-n N]
                     [--real DB --real-sid ID]
(OLD_TREE/NEW_TREE: source trees with a built build/)
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys


def load():
    return os.getloadavg()[0]


def cpu_of(cmd):
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime, r


def gen_db(tree, db, samples):
    gen = os.path.join(tree, "build", "tests", "tools", "gen_sessions")
    if os.path.exists(db):
        os.unlink(db)
    sids = {}
    for shape, extra in (("server", ["--threads", "4"]), ("distinct", ["--distinct", "20000"])):
        sids[shape] = subprocess.run([gen, db, "sampled", "--samples", str(samples)] + extra,
                                     capture_output=True, text=True, check=True).stdout.strip()
    return sids


def migrated_copy(db, new_bin, dst):
    for ext in ("", "-wal", "-shm"):
        if os.path.exists(dst + ext):
            os.unlink(dst + ext)
    shutil.copy(db, dst)
    subprocess.run([new_bin, "--db", dst, "gc"], capture_output=True, check=True)
    return dst


def view_steps(sid, out):
    o = lambda n: os.path.join(out, n)
    return [("functions --json", ["replay", sid, "--view", "functions", "--json"]),
            ("flame html", ["replay", sid, "--view", "flame", "-o", o("flame.html")]),
            ("stack --json", ["replay", sid, "--view", "stack", "--json"]),
            ("export speedscope", ["export", sid, "--format", "speedscope", "-o", o("s.json")]),
            ("export chrome", ["export", sid, "--format", "chrome", "-o", o("c.json")]),
            ("export gecko", ["export", sid, "--format", "gecko", "-o", o("g.json")]),
            ("export pprof", ["export", sid, "--format", "pprof", "-o", o("p.pb.gz")]),
            ("sessions --json", ["sessions", "--json"])]


def rng(v):
    return "%.3g [%.3g-%.3g]" % (statistics.median(v), min(v), max(v))


def report(title, res, names, higher_better):
    print("\n%s (median [min-max] of %d; NEW/OLD of medians%s)" % (
        title, len(next(iter(res.values()))), ", higher is better" if higher_better else ""))
    for n in names:
        o, w = res[(n, "old")], res[(n, "new")]
        print("  %-34s OLD %-24s NEW %-24s %.3f" % (n, rng(o), rng(w),
                                                   statistics.median(w) / statistics.median(o)))


SMP = [("per sample wall us (median)", r"stack only\): median ([\d.]+) us"),
       ("per sample wall us (quietest block)", r"stack only\): median [\d.]+ us \(quietest of \d+ blocks ([\d.]+) us"),
       ("per sample CPU us (mean)", r"stack only\).*?mean ([\d.]+) us CPU"),
       ("readv per sample", r"stack only\).*?; ([\d.]+) process_vm_readv"),
       ("100 kHz asked, wall: achieved /s", r"\(wall clock\) for [\d.]+s: achieved (\d+)"),
       ("1 kHz moving stack: CPU us per tick", r"profiler CPU ([\d.]+) us per tick")]


def timing(a, trees, work):
    bins = {k: os.path.join(t, "build", "bifocal") for k, t in trees.items()}
    res = {}
    if "views" in a.only:
        if a.real:  # a recorded session (OLD's schema): a copy for each build
            rdbs = {"old": os.path.join(work, "real-old.db")}
            shutil.copy(a.real, rdbs["old"])
            rdbs["new"] = migrated_copy(a.real, bins["new"], os.path.join(work, "real-new.db"))
            shapes = {"recorded": (a.real_sid, rdbs)}
        else:
            db_old = os.path.join(work, "old.db")
            sids = gen_db(trees["old"], db_old, a.view_samples)
            dbs = {"old": db_old, "new": migrated_copy(db_old, bins["new"], os.path.join(work, "new.db"))}
            shapes = {shape: (sid, dbs) for shape, sid in sids.items()}
        for k in ("old", "new"):
            os.makedirs(os.path.join(work, k), exist_ok=True)
    for r in range(a.rounds):
        ks = ("old", "new") if r % 2 == 0 else ("new", "old")
        print("round %d (%s first), load %.1f" % (r + 1, ks[0].upper(), load()), flush=True)
        if "store" in a.only:
            for k in ks:
                out = subprocess.run([os.path.join(trees[k], "build", "tests", "bench", "bench_store"),
                                      str(a.store_n), work], capture_output=True, text=True).stdout
                for clock, rate in re.findall(r"store ingest \((\w+) clock.*?: (\d+) samples/s", out):
                    n = "store ingest %s clock: samples/s" % clock
                    res.setdefault(("store", n, k), []).append(float(rate))
        if "sampler" in a.only:
            for py in a.python:
                for k in ks:
                    out = subprocess.run([os.path.join(trees[k], "build", "sampling", "bench_sampler"),
                                          py, str(a.seconds)], capture_output=True, text=True).stdout
                    for n, pat in SMP:
                        m = re.search(pat, out)
                        if m:
                            res.setdefault(("sampler " + py, n, k), []).append(float(m.group(1)))
        if "views" in a.only:
            for shape, (sid, dbs) in shapes.items():
                for k in ks:
                    for n, args in view_steps(sid, os.path.join(work, k)):
                        c, p = cpu_of([bins[k], "--db", dbs[k]] + args)
                        if p.returncode:
                            raise SystemExit("failed %s %s: %s" % (k, args, p.stderr))
                        res.setdefault(("views " + shape, n + " CPU s", k), []).append(c)
    print("load at end %.1f" % load())
    groups = []
    for g, n, k in res:
        if (g, n) not in groups:
            groups.append((g, n))
    for g in dict.fromkeys(x[0] for x in groups):
        names = [n for gg, n in groups if gg == g]
        sub = {(n, k): v for (gg, n, k), v in res.items() if gg == g}
        report(g, sub, names, g == "store")


def callgrind(cmd, out, toggle=None):
    v = ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no",
         "--callgrind-out-file=" + out]
    if toggle:
        v.append("--toggle-collect=" + toggle)
    subprocess.run(v + cmd, capture_output=True, text=True)
    with open(out) as f:
        text = f.read()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    return (int(m.group(1)) if m else 0), text


def calls_to(text, fn):
    """Sum of the calls= counts of call arcs into fn, and their inclusive cost."""
    n, incl = 0, 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line == "cfn=" + fn:
            j = i + 1
            while not lines[j].startswith("calls="):
                j += 1
            n += int(lines[j].split("=")[1].split()[0])
            incl += int(lines[j + 1].split()[1])
    return n, incl


def instr(a, trees, work):
    print("instructions (callgrind, least of %d), load %.1f" % (a.instr_runs, load()), flush=True)
    rows = {}

    def least(name, k, vals):
        rows.setdefault(name, {})[k] = min(vals)
    if "store" in a.only:
        for k, t in trees.items():
            tot, per = [], []
            for i in range(a.instr_runs):
                total, text = callgrind([os.path.join(t, "build", "tests", "bench", "bench_store"),
                                         str(a.instr_store_n), work], os.path.join(work, "cg.store.%s" % k))
                n, incl = calls_to(text, "bf_store_sample_add")
                tot.append(total)
                per.append(incl / max(n, 1))
            least("store: bench_store %d, whole run" % a.instr_store_n, k, tot)
            least("store: bf_store_sample_add per sample (inclusive)", k, per)
    if "sampler" in a.only:
        for py in a.python:
            for k, t in trees.items():
                per = []
                for i in range(a.instr_runs):
                    total, text = callgrind([os.path.join(t, "build", "sampling", "bench_sampler"), py, "0.001"],
                                            os.path.join(work, "cg.smp.%s" % k), toggle="bf_smp_sample")
                    n, _ = calls_to(text, "bf_smp_sample")
                    per.append(total / max(n, 1))
                least("sampler %s: bf_smp_sample per call (inclusive)" % py, k, per)
    if "views" in a.only:
        db_old = os.path.join(work, "iold.db")
        sids = gen_db(trees["old"], db_old, a.instr_view_samples)
        bins = {k: os.path.join(t, "build", "bifocal") for k, t in trees.items()}
        dbs = {"old": db_old, "new": migrated_copy(db_old, bins["new"], os.path.join(work, "inew.db"))}
        for shape, sid in sids.items():
            for k in trees:
                os.makedirs(os.path.join(work, "i" + k), exist_ok=True)
                for n, args in view_steps(sid, os.path.join(work, "i" + k)):
                    vals = [callgrind([bins[k], "--db", dbs[k]] + args, os.path.join(work, "cg.v.%s" % k))[0]
                            for i in range(a.instr_runs)]
                    least("views %s %dk: %s" % (shape, a.instr_view_samples // 1000, n), k, vals)
    print("%-62s %15s %15s %8s" % ("instructions", "OLD", "NEW", "NEW/OLD"))
    for name, v in rows.items():
        print("%-62s %15.1f %15.1f %8.4f" % (name, v["old"], v["new"], v["new"] / v["old"] if v["old"] else 0))
    print("load at end %.1f" % load(), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("work")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", action="append")
    ap.add_argument("--only", default="store,sampler,views")
    ap.add_argument("--seconds", type=float, default=1.0, help="bench_sampler's parts 2-3 duration")
    ap.add_argument("--store-n", type=int, default=1000000)
    ap.add_argument("--view-samples", type=int, default=1000000)
    ap.add_argument("--real", help="views on this database's session --real-sid instead (made by OLD)")
    ap.add_argument("--real-sid", default="1")
    ap.add_argument("--instr", action="store_true", help="instruction counts instead of timing")
    ap.add_argument("--instr-runs", type=int, default=3)
    ap.add_argument("--instr-store-n", type=int, default=200000)
    ap.add_argument("--instr-view-samples", type=int, default=100000)
    a = ap.parse_args()
    a.only = a.only.split(",")
    a.python = a.python or [sys.executable]
    os.makedirs(a.work, exist_ok=True)
    trees = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    for k in ("old", "new"):
        rev = subprocess.run(["git", "-C", trees[k], "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        print("%s %s (%s)" % (k.upper(), trees[k], rev))
    (instr if a.instr else timing)(a, trees, a.work)


if __name__ == "__main__":
    main()
