"""Soak of record --push: a long continuous push with the backend down for a
while, then back; prints what arrived against what was recorded.

    /usr/bin/python3 tests/bench/soak_push.py [--minutes 10] [--outage 3] [--every 10s]
        [--rate 100] [--python PATH] [--outage-at 3] [--keep DIR]

A loopback OTLP receiver (tests/integration/fleet_helpers.py's, which checks the
path, content type, gzip and the auth header) takes requests; at --outage-at
minutes it closes its listening socket (connections are refused) and opens it
again on the same port --outage minutes later. Meanwhile `bifocal record -r
RATE --push otlp+http://... --every W -- python busy.py` records a workload
that runs --minutes. Each arrived request is decoded by protoc against the
official profiles.proto; the script prints, and checks:

- windows recorded (the spool's rows) and windows arrived, by start time:
  complete (every window arrived), in order, no duplicate window;
- samples arrived (the sum of every window's values) against the session's;
- achieved rate and invalid share of the session (the sampler never waits on
  the network);
- how long after the backend's return the last spooled window arrived.

Exit 0 when every check holds, 1 otherwise. Not part of the suite (it runs
--minutes plus a few seconds); a short version runs with --minutes 1
--outage 0.33.
"""
import argparse
import gzip
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import test_fleet as tf  # noqa: E402
from fleet_helpers import BUSY, SECRET, Receiver  # noqa: E402

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--outage", type=float, default=3, help="minutes the backend is down")
    ap.add_argument("--outage-at", type=float, default=None, help="minute it goes down (default: a third in)")
    ap.add_argument("--every", default="10s")
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python3")
    ap.add_argument("--keep", default=None, help="directory to keep the database in")
    a = ap.parse_args()
    if not os.path.exists(a.python):
        a.python = sys.executable
    bifocal = os.environ.get("BIFOCAL_BIN", os.path.join(HERE, "..", "..", "build", "bifocal"))
    work = a.keep or tempfile.mkdtemp(prefix="soak-push.")
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "soak.db")
    for sfx in ("", "-wal", "-shm"):
        if os.path.exists(db + sfx):
            os.unlink(db + sfx)
    wl = os.path.join(work, "busy.py")
    open(wl, "w").write(BUSY)
    rcv = Receiver(["ok"])
    secret = SECRET
    env = dict(os.environ, OTEL_EXPORTER_OTLP_HEADERS="x-api-key=" + secret)
    env.pop("BIFOCAL_DB", None)
    seconds = a.minutes * 60
    at = (a.outage_at if a.outage_at is not None else a.minutes / 3) * 60
    cmd = [bifocal, "--db", db, "record", "-r", str(a.rate), "--push", "otlp+http://127.0.0.1:%d" % rcv.port,
           "--every", a.every, "--push-wait", "60", "--label", "soak", "--", a.python, wl, str(seconds)]
    print("soak: %s" % " ".join(cmd[:-4] + ["--", "python", "busy.py", "%g" % seconds]), flush=True)
    t0 = time.monotonic()
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    back_at = None
    down_wall = back_wall = 0
    if a.outage > 0:
        while time.monotonic() - t0 < at and rec.poll() is None:
            time.sleep(0.2)
        rcv.down()
        down_wall = time.time_ns()
        print("soak: backend down at %.0f s" % (time.monotonic() - t0), flush=True)
        while time.monotonic() - t0 < at + a.outage * 60 and rec.poll() is None:
            time.sleep(0.2)
        rcv.up()
        back_at = time.monotonic()
        back_wall = time.time_ns()
        print("soak: backend back at %.0f s" % (back_at - t0), flush=True)
    out, err = rec.communicate(timeout=seconds + 600)
    rcv.close()
    sid = out.strip().splitlines()[-1] if out.strip() else None
    ok = rec.returncode == 0 and sid is not None
    print("soak: record exited %d after %.0f s" % (rec.returncode, time.monotonic() - t0))
    if not ok:
        print(err)
        return 1
    info = tf.session_json(db, sid)
    con = sqlite3.connect(db)
    rows = con.execute("SELECT seq, window_start_ns, state, attempts, created_ns, sent_ns FROM push_spool WHERE session_id=? ORDER BY seq",
                       (int(sid),)).fetchall()
    con.close()
    starts, ids, total = [], [], 0
    for q in rcv.requests:
        assert q["path"] == "/v1development/profiles", q["path"]
        assert q["headers"].get("Content-Type") == "application/x-protobuf"
        assert q["headers"].get("Content-Encoding") == "gzip"
        assert q["headers"].get("x-api-key") == secret
        o = tf.Otlp(tf.decode(gzip.decompress(q["body"]), None))
        p = tf.profiles(tf.one(o.msg, "resource_profiles"))[0]
        starts.append(tf.one(p, "time_unix_nano"))
        ids.append(tf.one(p, "profile_id"))
        total += sum(tf.one(s, "values") for s in p.get("samples", []))
    every_ns = rows[1][1] - rows[0][1] if len(rows) > 1 else 0
    want = [info["start_ns"] + r[1] for r in rows]
    in_order = starts == sorted(starts)
    dups = len(starts) - len(set(starts))
    complete = sorted(set(starts)) == want
    spooled = sum(1 for r in rows if down_wall <= r[4] <= back_wall)
    invalid = info.get("invalid", 0) / max(1, info["samples"] + info.get("invalid", 0))
    print("soak: session %s: %.1f s, %d samples, %.1f Hz achieved of %d, %d missed, %d invalid (%.3f%%)" % (
        sid, info["duration_s"], info["samples"], info["achieved_rate_hz"], a.rate, info.get("missed", 0),
        info.get("invalid", 0), 100 * invalid))
    print("soak: windows recorded %d (every %.0f s), arrived %d, unique %d, duplicates %d, in order %s, complete %s" % (
        len(rows), every_ns / 1e9, len(starts), len(set(starts)), dups, in_order, complete))
    print("soak: windows closed while the backend was down: %d; spool states at the end: %s" % (
        spooled, dict((s, sum(1 for r in rows if r[2] == s)) for s in set(r[2] for r in rows))))
    print("soak: samples arrived %d of %d recorded" % (total, info["samples"]))
    backlog = [r for r in rows if r[4] <= back_wall and r[3] > 1 or down_wall <= r[4] <= back_wall]
    if back_wall and backlog:
        print("soak: the %d windows that waited were all delivered %.1f s after the backend came back" % (
            len(backlog), (max(r[5] for r in backlog) - back_wall) / 1e9))
    leak = any(secret.encode() in open(db + s, "rb").read() for s in ("", "-wal") if os.path.exists(db + s))
    leak = leak or secret in out or secret in err
    print("soak: secret found in the database or the output: %s" % leak)
    good = complete and in_order and dups == 0 and total == info["samples"] and not leak and all(
        r[2] == "sent" for r in rows)
    print("soak: %s" % ("PASS" if good else "FAIL"))
    if not good:
        print(err[-4000:])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
