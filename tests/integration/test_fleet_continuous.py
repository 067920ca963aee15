"""record --push URL --every 1s: each window of a recording pushed as it
closes, spooled in the database while the backend misbehaves, retried with
backoff, bounded on disk, and sent later by push --resume. The loopback
receiver is fleet_helpers.py's (it checks path, content type, gzip and auth);
what arrived is decoded by protoc against the official profiles.proto and
checked against the session: every window once, in order, adding up to the
session's samples. No secret appears in any output, the audit log or the
database files. The push machinery does not depend on the interpreter, so
these tests record one (the newest host interpreter found), and each runs
on its own parallel worker (no module fixture holds them together: 58 s in
one worker before); the soak is tests/bench/soak_push.py."""
import gzip
import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pythons  # noqa: E402
from conftest import run  # noqa: E402
from fleet_helpers import BUSY, PASSWORD, SECRET, free_port, receiver  # noqa: E402,F401
from test_fleet import Otlp, assert_no_secret, decode, need_protoc, one, otlp_to, profiles, session_json  # noqa: E402

@pytest.fixture  # not module-scoped: the file's tests spread over the parallel workers
def interp():
    ps = [p for p in pythons.discover() if not p.get("container")]
    if not ps:
        pytest.skip("no host interpreter")
    return ps[-1]["path"]


def record_push(db, tmp_path, python, to, seconds=3.5, extra=(), env=None, timeout=90):
    """record -r 100 --push TO --every 1s of a busy workload; (CompletedProcess, wall seconds)."""
    wl = tmp_path / "busy.py"
    wl.write_text(BUSY)
    e = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=%s,x-team=prof" % SECRET,
         "PYROSCOPE_BASIC_AUTH_USER": "fleet", "PYROSCOPE_BASIC_AUTH_PASSWORD": PASSWORD}
    e.update(env or {})
    t = time.monotonic()
    r = run(["record", "-r", "100", "--push", to, "--every", "1s", "--push-wait", "3"] + list(extra) +
            ["--", python, str(wl), str(seconds)], db=db, check=False, env=e, timeout=timeout)
    return r, time.monotonic() - t


def spool(db, sid):
    con = sqlite3.connect(db)
    rows = con.execute("SELECT seq, window_start_ns, window_end_ns, state, attempts, bytes, payload IS NULL"
                       " FROM push_spool WHERE session_id=? ORDER BY seq", (int(sid),)).fetchall()
    con.close()
    return rows


def arrived(rcv, tmp_path, answer="ok"):
    """[(time_unix_nano, profile_id, samples)] of the requests answered `answer`."""
    out = []
    for q in rcv.requests:
        if q.get("answer") != answer:
            continue
        assert q["path"] == "/v1development/profiles"
        assert q["headers"]["Content-Type"] == "application/x-protobuf"
        assert q["headers"]["Content-Encoding"] == "gzip"
        assert q["headers"]["x-api-key"] == SECRET
        o = Otlp(decode(gzip.decompress(q["body"]), tmp_path))
        p = profiles(one(o.msg, "resource_profiles"))[0]
        out.append((one(p, "time_unix_nano"), one(p, "profile_id"), sum(one(s, "values") for s in p.get("samples", []))))
    return out


def check_complete(db, sid, got, info=None):
    """Every spooled window arrived once, in order, adding up to the session."""
    info = info or session_json(db, sid)
    rows = spool(db, sid)
    assert rows and [r[0] for r in rows] == list(range(len(rows)))
    assert rows[0][1] == 0 and all(rows[i][2] == rows[i + 1][1] for i in range(len(rows) - 1))
    assert len(rows) >= int(info["duration_s"])
    starts = [g[0] for g in got]
    assert starts == [info["start_ns"] + r[1] for r in rows], (starts, rows)
    assert len({g[1] for g in got}) == len(got)
    assert sum(g[2] for g in got) == info["samples"]
    assert all(r[3] == "sent" and r[6] for r in rows)


def last_id(r):
    return r.stdout.strip().splitlines()[-1]


def test_windows_arrive_complete_in_order_through_refusals(db, tmp_path, receiver, interp):
    need_protoc()
    rcv = receiver("503", "503", "ok")
    # the end waits for the backlog (it ends as soon as nothing waits)
    r, _ = record_push(db, tmp_path, interp, otlp_to(rcv), extra=["--push-wait", "15"])
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    got = arrived(rcv, tmp_path)
    check_complete(db, sid, got)
    assert [q["answer"] for q in rcv.requests[:3]] == ["503", "503", "ok"]
    assert "waits in the spool" in r.stderr and "takes windows again" in r.stderr
    push = json.loads(sqlite3.connect(db).execute("SELECT extra_json FROM sessions WHERE id=?",
                                                  (int(sid),)).fetchone()[0])["push"]
    assert push["windows"] == len(got) and push["sent"] == len(got) and push["dropped"] == 0 and push["waiting"] == 0
    assert "0 dropped" in r.stderr
    assert_no_secret(db, r.stdout, r.stderr)


def test_429_retry_after_is_honoured(db, tmp_path, receiver, interp):
    need_protoc()
    rcv = receiver(("429", 2), "ok")
    r, _ = record_push(db, tmp_path, interp, otlp_to(rcv), seconds=2.5, extra=["--push-wait", "15"])
    assert r.returncode == 0, r.stderr
    gap = rcv.requests[1]["t"] - rcv.requests[0]["t"]
    assert 1.9 < gap < 4, gap
    check_complete(db, last_id(r), arrived(rcv, tmp_path))
    assert_no_secret(db, r.stdout, r.stderr)


def test_cut_mid_body_is_retried_with_the_same_bytes(db, tmp_path, receiver, interp):
    need_protoc()
    rcv = receiver("cut", "ok")
    r, _ = record_push(db, tmp_path, interp, otlp_to(rcv), seconds=2.5, extra=["--push-wait", "15"])
    assert r.returncode == 0, r.stderr
    a, b = rcv.requests[:2]
    assert a["body"] == b["body"]  # the receiver may hold both: the same profile id, its dedup key
    check_complete(db, last_id(r), arrived(rcv, tmp_path))
    assert_no_secret(db, r.stdout, r.stderr)


def test_dead_backend_keeps_everything_spooled_then_resume_sends_it(db, tmp_path, receiver, interp):
    need_protoc()
    port = free_port()
    r, took = record_push(db, tmp_path, interp, "otlp+http://127.0.0.1:%d" % port)
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    info = session_json(db, sid)
    rows = spool(db, sid)
    assert rows and all(x[3] == "pending" and not x[6] for x in rows)
    assert "push --resume %s" % sid in r.stderr and "0 sent" in r.stderr
    assert took < 3.5 + 3 + 8, took  # the workload, --push-wait 3, start-up
    # the backend comes back on the same port: push --resume sends what waits, in order
    rcv = receiver("ok", port=port)
    e = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=%s,x-team=prof" % SECRET}
    to = "otlp+http://127.0.0.1:%d" % port
    other = run(["push", "--resume", sid, "--to", "otlp+http://127.0.0.1:%d" % free_port()], db=db, check=False, env=e)
    assert other.returncode == 0 and "nothing waits" in other.stderr  # windows are spooled for their destination
    p = run(["push", "--resume", sid, "--to", to], db=db, check=False, env=e)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("pushed to") == len(rows)
    check_complete(db, sid, arrived(rcv, tmp_path), info)
    again = run(["push", "--resume", sid, "--to", to], db=db, check=False, env=e)
    assert again.returncode == 0 and "nothing waits" in again.stderr
    assert len(rcv.requests) == len(rows)  # nothing twice
    assert_no_secret(db, r.stdout, r.stderr, p.stdout, p.stderr)


def test_spool_bound_drops_the_oldest_and_says_so(db, tmp_path, interp):
    port = free_port()
    r, _ = record_push(db, tmp_path, interp, "otlp+http://127.0.0.1:%d" % port, extra=["--push-spool-max", "1500"])
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    rows = spool(db, sid)
    waiting = [x for x in rows if x[3] == "pending"]
    dropped = [x for x in rows if x[3] == "dropped"]
    assert dropped and waiting
    # the oldest went first; what waits fits the bound; dropped rows keep no payload
    assert max(x[0] for x in dropped) < min(x[0] for x in waiting)
    assert sum(x[5] for x in waiting) <= 1500 and all(x[6] for x in dropped)
    assert "passed its bound (1500 bytes)" in r.stderr and "%d dropped" % len(dropped) in r.stderr
    con = sqlite3.connect(db)
    extra = json.loads(con.execute("SELECT extra_json FROM sessions WHERE id=?", (int(sid),)).fetchone()[0])
    audit = con.execute("SELECT outcome FROM audit WHERE command='record --push' AND session_id=?",
                        (int(sid),)).fetchall()
    con.close()
    assert extra["push"]["dropped"] == len(dropped) and extra["push"]["spool_max_bytes"] == 1500
    assert audit and all("dropped" in a[0] for a in audit)
    # nothing recorded is lost locally: the session has every sample
    info = session_json(db, sid)
    assert info["samples"] > 100
    coll = run(["export", sid, "-f", "collapsed", "-o", "-"], db=db).stdout
    assert sum(int(line.rsplit(" ", 1)[1]) for line in coll.splitlines() if line) == info["samples"]
    assert_no_secret(db, r.stdout, r.stderr)


def test_huge_answer_and_4xx_are_refused_then_resumed(db, tmp_path, receiver, interp):
    need_protoc()
    rcv = receiver("huge", "400", "ok")
    r, _ = record_push(db, tmp_path, interp, otlp_to(rcv), seconds=2.5, extra=["--push-wait", "15"])
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    rows = spool(db, sid)
    assert [x[3] for x in rows[:2]] == ["refused", "refused"] and all(x[3] == "sent" for x in rows[2:])
    assert "larger than 1048576 bytes" in r.stderr and "HTTP 400" in r.stderr
    assert "push --resume" in r.stderr
    n = len(rcv.requests)
    e = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=%s,x-team=prof" % SECRET}
    p = run(["push", "--resume", sid, "--to", otlp_to(rcv)], db=db, check=False, env=e)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("pushed to") == 2 and len(rcv.requests) == n + 2
    assert all(x[3] == "sent" for x in spool(db, sid))
    assert_no_secret(db, r.stdout, r.stderr, p.stdout, p.stderr)


@pytest.mark.serial  # an achieved rate
def test_slow_backend_never_holds_the_sampler_or_the_end(db, tmp_path, receiver, interp):
    rcv = receiver(("sleep", 30))
    r, took = record_push(db, tmp_path, interp, otlp_to(rcv), seconds=5,
                          extra=["--push-timeout", "3", "--push-wait", "1"])
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    # the workload's 5 s, one second of --push-wait, one request's 3 s bound, start-up
    assert took < 5 + 1 + 3 + 6, took
    assert "timed out" in r.stderr.lower() or "timeout" in r.stderr.lower()
    info = session_json(db, sid)
    # a sampler waiting on the 3 s requests (from the first window's close at
    # about 2.5 s on) would reach 50 Hz at most
    assert info["achieved_rate_hz"] > 60, info
    assert len(rcv.requests) >= 1 and all(x[3] == "pending" for x in spool(db, sid))
    assert_no_secret(db, r.stdout, r.stderr)


def test_pyroscope_windows(db, tmp_path, receiver, interp):
    rcv = receiver("ok")
    r, _ = record_push(db, tmp_path, interp, "pyroscope://127.0.0.1:%d" % rcv.port, seconds=2.5,
                       extra=["--push-wait", "15"])
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    rows = spool(db, sid)
    assert all(x[3] == "sent" for x in rows) and len(rcv.requests) == len(rows)
    info = session_json(db, sid)
    froms = [int(q["query"]["from"][0]) for q in rcv.requests]
    assert froms == sorted(froms) and froms[0] == info["start_ns"] // 10**9
    for q in rcv.requests:
        assert q["path"] == "/ingest" and q["query"]["format"] == ["pprof"]
        assert q["headers"]["Authorization"].startswith("Basic ")
    assert_no_secret(db, r.stdout, r.stderr)


def test_usage(db, tmp_path, interp):
    r = run(["record", "--push", "otlp+http://u:%s@127.0.0.1:1" % PASSWORD, "--", interp, "-c", "pass"], db=db,
            check=False)
    assert r.returncode == 2 and "user information" in r.stderr and PASSWORD not in r.stderr
    r = run(["record", "--push", "otlp+http://127.0.0.1:1", "--every", "0.5s", "--", interp, "-c", "pass"], db=db,
            check=False)
    assert r.returncode == 2 and "--every takes 1s" in r.stderr
    r = run(["record", "--push", "otlp+http://127.0.0.1:1", "--push-spool-max", "lots", "--", interp, "-c", "pass"],
            db=db, check=False)
    assert r.returncode == 2 and "--push-spool-max" in r.stderr
    r = run(["record", "--push", "ftp://x", "--", interp, "-c", "pass"], db=db, check=False)
    assert r.returncode == 2 and "not a push destination" in r.stderr
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    r = subprocess.run([os.environ.get("BIFOCAL_BIN", "build/bifocal"), "record", "-o", str(tmp_path / "x.svg"),
                        "--push", "otlp+http://127.0.0.1:1", "--", interp, "-c", "pass"], capture_output=True,
                       text=True, env=e, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 2 and "--db DB" in r.stderr
    r = run(["push", "--resume", "--json", "--to", "otlp+http://127.0.0.1:1"], db=db, check=False)
    assert r.returncode == 2
    r = run(["record", "--every", "2s", "--", interp, "-c", "pass"], db=db, check=False)
    assert r.returncode == 2 and "go with --push URL" in r.stderr


def test_sigterm_keeps_every_window_spooled(db, tmp_path, interp):
    """A stop signal ends the capture; the pusher spools the last window and
    gives up within --push-wait, and the spool covers the whole session; other
    processes read the database all along."""
    wl = tmp_path / "busy.py"
    wl.write_text(BUSY)
    e = dict(os.environ, OTEL_EXPORTER_OTLP_HEADERS="x-api-key=" + SECRET)
    e.pop("BIFOCAL_DB", None)
    p = subprocess.Popen([os.environ.get("BIFOCAL_BIN", "build/bifocal"), "--db", db, "record", "-r", "100",
                          "--push", "otlp+http://127.0.0.1:%d" % free_port(), "--every", "1s", "--push-wait", "2",
                          "--", interp, str(wl), "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=e)
    try:
        from conftest import wait_session
        # readers that open and close the database from the first moment (a
        # pusher inside the recorder's process once cost the recorder its
        # locks, and such a reader's close deleted the WAL: sessions stayed [])
        wait_session(db, p)
        time.sleep(2.5)
        p.terminate()
        t = time.monotonic()
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
    assert took < 2 + 4, took
    sid = out.strip().splitlines()[-1]
    info = session_json(db, sid)
    assert info["status"] == "interrupted"
    rows = spool(db, sid)
    assert rows and all(x[3] == "pending" for x in rows)
    assert rows[-1][2] >= info["duration_s"] * 1e9 - 1e6 and len(rows) >= int(info["duration_s"])
    assert "push --resume %s" % sid in err
    assert_no_secret(db, out, err)


def test_a_v1_database_migrates(db, tmp_path, interp):
    """A database of schema 1 (no push_spool) opens, migrates, keeps its sessions."""
    src = tmp_path / "in.collapsed"
    src.write_text("main;work 10\n")
    run(["import", str(src), "--label", "old"], db=db)
    con = sqlite3.connect(db)
    # schema 1 had neither push_spool nor the memory tables of schema 3
    con.executescript("DROP TABLE push_spool; DROP TABLE memory_samples; DROP TABLE memory_timeline;"
                      " PRAGMA user_version=1;")
    con.close()
    r = run(["import", str(src), "--label", "new"], db=db)
    assert r.returncode == 0
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] >= 2
    assert con.execute("SELECT count(*) FROM push_spool").fetchone()[0] == 0
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    labels = [s["label"] for s in json.loads(run(["sessions", "--json"], db=db).stdout)]
    assert "old" in labels and "new" in labels


def test_resume_sends_only_what_bifocal_spooled(db, tmp_path, receiver, interp):
    """A spool row changed by hand (a header smuggled into the content type, a
    path into the URL) is not sent with the user's credentials."""
    rcv = receiver("503")
    r, _ = record_push(db, tmp_path, interp, otlp_to(rcv), seconds=2, extra=["--push-wait", "0"])
    assert r.returncode == 0, r.stderr
    sid = last_id(r)
    rows = spool(db, sid)
    assert rows and all(x[3] == "pending" for x in rows)
    n = len(rcv.requests)
    rcv.script[:] = ["ok"]
    e = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=%s,x-team=prof" % SECRET}
    for col, val in (("content_type", "application/x-protobuf\r\nX-Evil: 1"), ("url_suffix", "/../admin")):
        con = sqlite3.connect(db)
        con.execute("UPDATE push_spool SET %s=? WHERE session_id=? AND seq=0" % col, (val, int(sid)))
        con.commit()
        con.close()
        p = run(["push", "--resume", sid, "--to", otlp_to(rcv)], db=db, check=False, env=e)
        assert p.returncode == 1 and "not as bifocal writes it" in p.stderr, p.stderr
        assert len(rcv.requests) == n
        con = sqlite3.connect(db)
        con.execute("UPDATE push_spool SET content_type='application/x-protobuf', url_suffix='' WHERE seq=0")
        con.commit()
        con.close()
    p = run(["push", "--resume", sid, "--to", otlp_to(rcv)], db=db, check=False, env=e)
    assert p.returncode == 0, p.stderr
    assert len(rcv.requests) == n + len(rows) and not any("X-Evil" in q["headers"] for q in rcv.requests)
    assert_no_secret(db, r.stdout, r.stderr, p.stdout, p.stderr)
