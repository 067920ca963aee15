"""What record --push costs the sampler: achieved rate, missed and invalid
ticks of `bifocal record -r RATE` with no push, with --push to a dead
endpoint (connections refused) and to a slow one (each request answered
after --slow seconds), rounds interleaved in shuffled order.

    /usr/bin/python3 tests/bench/bench_push_record.py [--rounds 3] [--seconds 8] [--rate 1000]
        [--every 1s] [--slow 5] [--python PATH]

Prints one row per condition: the median over rounds of the achieved rate,
the missed share (ticks not taken) and the invalid share, and the latest any
tick was taken (extra.max_late_ms, the worst over rounds): a sampler that
waited on a 5 s request would show a tick 5,000 ms late. Not a pass/fail test.
"""
import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import test_fleet as tf  # noqa: E402
from soak_push import BUSY  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--every", default="1s")
    ap.add_argument("--slow", type=float, default=5)
    ap.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python3")
    a = ap.parse_args()
    if not os.path.exists(a.python):
        a.python = sys.executable
    bifocal = os.environ.get("BIFOCAL_BIN", os.path.join(HERE, "..", "..", "build", "bifocal"))
    work = tempfile.mkdtemp(prefix="bench-push.")
    wl = os.path.join(work, "busy.py")
    open(wl, "w").write(BUSY)
    slow = tf.Receiver([("sleep", a.slow)])
    dead = tf.free_port()
    conds = {"no push": [], "dead endpoint": ["--push", "otlp+http://127.0.0.1:%d" % dead],
             "slow endpoint (%gs/request)" % a.slow: ["--push", "otlp+http://127.0.0.1:%d" % slow.port,
                                                     "--push-timeout", "%g" % (a.slow + 2)]}
    res = {k: [] for k in conds}
    env = dict(os.environ, OTEL_EXPORTER_OTLP_HEADERS="x-api-key=" + tf.SECRET)
    env.pop("BIFOCAL_DB", None)
    for rnd in range(a.rounds):
        order = list(conds)
        random.shuffle(order)
        for k in order:
            db = os.path.join(work, "r%d-%d.db" % (rnd, order.index(k)))
            extra = conds[k] + (["--every", a.every, "--push-wait", "0"] if conds[k] else [])
            r = subprocess.run([bifocal, "--db", db, "record", "-r", str(a.rate)] + extra +
                               ["--", a.python, wl, str(a.seconds)], capture_output=True, text=True, env=env,
                               timeout=a.seconds + 120)
            if r.returncode != 0:
                print("%s: record failed: %s" % (k, r.stderr.strip()[-400:]))
                continue
            s = json.loads(subprocess.run([bifocal, "--db", db, "sessions", "--json"], capture_output=True,
                                          text=True).stdout)[0]
            ticks = s["samples"] + s.get("missed", 0) + s.get("invalid", 0)
            con = sqlite3.connect(db)
            extra = json.loads(con.execute("SELECT extra_json FROM sessions").fetchone()[0] or "{}")
            con.close()
            res[k].append((s["achieved_rate_hz"], s.get("missed", 0) / max(1, ticks),
                           s.get("invalid", 0) / max(1, ticks), extra.get("max_late_ms", 0.0)))
            print("round %d %-28s %.1f Hz, missed %.3f%%, invalid %.3f%%, latest tick %.1f ms late" % (
                rnd, k, res[k][-1][0], 100 * res[k][-1][1], 100 * res[k][-1][2], res[k][-1][3]), flush=True)
    slow.close()
    print("\n%-30s %12s %10s %10s %12s   (median of %d rounds, -r %d, %g s, --every %s)" % (
        "condition", "achieved Hz", "missed", "invalid", "max late ms", a.rounds, a.rate, a.seconds, a.every))
    for k, v in res.items():
        if v:
            print("%-30s %12.1f %9.3f%% %9.3f%% %12.1f" % (k, statistics.median(x[0] for x in v),
                                                         100 * statistics.median(x[1] for x in v),
                                                         100 * statistics.median(x[2] for x in v),
                                                         max(x[3] for x in v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
