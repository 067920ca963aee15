"""Foundation: CLI skeleton, sessions, collapsed import in three dialects,
functions view shares, collapsed export round trip, and bad input handling."""
import json
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from conftest import ROOT, run, last_line_id
import collapsed

TOOLS = os.path.join(ROOT, "tests", "tools")


def funcs_by_name(db, sid):
    r = run(["replay", str(sid), "--view", "functions", "--json"], db=db)
    doc = json.loads(r.stdout)
    out = {}
    for f in doc["functions"]:
        # several functions may share a qualname across files; sum for comparison
        s, t = out.get(f["qualname"], (0.0, 0.0))
        out[f["qualname"]] = (s + f["self_share"], max(t, f["total_share"]))
    return doc, out


def test_help_and_version():
    r = run(["--help"])
    assert "usage: bifocal" in r.stdout and "sessions" in r.stdout
    r = run(["--version"])
    assert r.stdout.startswith("bifocal ")


def test_bad_flag_and_command(db):
    r = run(["--bogus"], check=False)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "unknown option" in r.stderr
    r = run(["frobnicate"], check=False)
    assert r.returncode != 0 and "unknown command" in r.stderr
    r = run(["sessions", "--nope"], db=db, check=False)
    assert r.returncode != 0


@pytest.mark.parametrize("dialect", ["austin", "pyspy", "flamegraph"])
def test_import_real_capture_shares(tmp_path, db, dialect):
    cap = str(tmp_path / ("cap." + dialect))
    subprocess.run([sys.executable, os.path.join(TOOLS, "pysample.py"), "--dialect", dialect,
                    "--duration", "0.8", "-o", cap], check=True, timeout=60)
    r = run(["import", cap, "--label", "cap-" + dialect], db=db)
    sid = last_line_id(r)
    doc, got = funcs_by_name(db, sid)
    want = collapsed.shares(cap)
    assert doc["session"]["kind"] == "imported"
    assert doc["session"]["mode"] == {"austin": "austin", "pyspy": "py-spy", "flamegraph": "flamegraph"}[dialect]
    assert set(got) == set(want)
    for name, (s, t) in want.items():
        assert abs(got[name][0] - s) < 1e-9, name
        assert abs(got[name][1] - t) < 1e-9, name
    if dialect == "austin":
        assert doc["session"]["rate_hz"] == pytest.approx(500, rel=1e-6)
        assert doc["session"]["duration_s"] == pytest.approx(0.8, rel=1e-6)
    if dialect == "pyspy":
        # identity as exact as the dialect allows: files kept
        assert any(f["file"].endswith("pysample.py") for f in doc["functions"])


def test_sessions_json_fields(tmp_path, db):
    p = tmp_path / "a.txt"
    p.write_text("main;work 3\nmain 1\n")
    sid = last_line_id(run(["import", str(p), "--label", "L1"], db=db))
    r = run(["sessions", "--json"], db=db)
    rows = json.loads(r.stdout)
    assert len(rows) == 1
    for k in ["id", "kind", "label", "clock", "mode", "rate_hz", "achieved_rate_hz", "samples", "missed",
              "invalid", "duration_s", "python", "status", "created"]:
        assert k in rows[0], k
    assert rows[0]["id"] == sid and rows[0]["label"] == "L1" and rows[0]["samples"] == 4
    r = run(["sessions"], db=db)
    assert "L1" in r.stdout and "imported" in r.stdout
    # $BIFOCAL_DB
    r = run(["sessions", "--json"], env={"BIFOCAL_DB": db})
    assert json.loads(r.stdout)[0]["id"] == sid
    # label resolves like an id
    r = run(["replay", "L1", "--view", "functions", "--json"], db=db)
    assert json.loads(r.stdout)["session"]["id"] == sid
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600


def test_functions_view_exact_and_sorted(tmp_path, db):
    p = tmp_path / "b.txt"
    p.write_text("a;b;c 6\na;b 2\na;d 2\n")
    sid = last_line_id(run(["import", str(p)], db=db))
    doc, got = funcs_by_name(db, sid)
    assert got["c"] == (0.6, 0.6) and got["b"] == (0.2, 0.8) and got["d"] == (0.2, 0.2)
    assert got["a"] == (0.0, 1.0)
    c = [f for f in doc["functions"] if f["qualname"] == "c"][0]
    lo, hi = c["self_ci"]
    assert lo < 0.6 < hi and 0.25 < lo and hi < 0.9  # Wilson 95% for 6/10
    assert c["self_samples"] == 6 and c["total_samples"] == 6 and c["calls"] is None
    r = run(["replay", str(sid), "--view", "functions", "--json", "--sort", "total", "--limit", "2"], db=db)
    fs = json.loads(r.stdout)["functions"]
    assert [f["qualname"] for f in fs] == ["a", "b"]
    r = run(["replay", str(sid)], db=db)
    assert "60.0%" in r.stdout and "c" in r.stdout


def test_collapsed_round_trip(tmp_path, db):
    cap = str(tmp_path / "cap.pyspy")
    subprocess.run([sys.executable, os.path.join(TOOLS, "pysample.py"), "--dialect", "pyspy",
                    "--duration", "0.5", "-o", cap], check=True, timeout=60)
    s1 = last_line_id(run(["import", cap], db=db))
    out = str(tmp_path / "exp.txt")
    run(["export", str(s1), "--format", "collapsed", "-o", out], db=db)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    s2 = last_line_id(run(["import", out], db=db))
    a = json.loads(run(["replay", str(s1), "--json", "--limit", "1000"], db=db).stdout)["functions"]
    b = json.loads(run(["replay", str(s2), "--json", "--limit", "1000"], db=db).stdout)["functions"]
    key = lambda f: (f["file"], f["qualname"], f["firstlineno"])
    assert {key(f): (f["self_share"], f["total_share"]) for f in a} == \
           {key(f): (f["self_share"], f["total_share"]) for f in b}


def _digest(path):
    return open(path, "rb").read() if os.path.exists(path) else None


def test_bad_inputs(tmp_path, db):
    # missing database
    r = run(["sessions"], db=str(tmp_path / "nope.db"), check=False)
    assert r.returncode != 0 and "does not exist" in r.stderr and len(r.stderr.splitlines()) == 1
    # random bytes file
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    before = _digest(junk)
    for args in (["sessions"], ["import", str(tmp_path / "x")]):
        r = run(args, db=str(junk), check=False)
        assert r.returncode != 0 and len(r.stderr.splitlines()) == 1
    assert _digest(junk) == before
    (tmp_path / "ok.txt").write_text("a 1\n")
    r = run(["import", str(tmp_path / "ok.txt")], db=str(junk), check=False)
    assert r.returncode != 0 and "not a SQLite database" in r.stderr
    assert _digest(junk) == before
    # a SQLite file that is not ours
    foreign = str(tmp_path / "foreign.db")
    c = sqlite3.connect(foreign)
    c.execute("create table t(x)")
    c.commit()
    c.close()
    before = _digest(foreign)
    r = run(["import", str(tmp_path / "ok.txt")], db=foreign, check=False)
    assert r.returncode != 0 and "not a bifocal" in r.stderr
    assert _digest(foreign) == before
    # a database from a newer schema
    newer = str(tmp_path / "newer.db")
    run(["import", str(tmp_path / "ok.txt")], db=newer)
    c = sqlite3.connect(newer)
    c.execute("pragma user_version=7")
    c.commit()
    c.close()
    r = run(["sessions"], db=newer, check=False)
    assert r.returncode != 0 and "newer" in r.stderr
    # malformed collapsed line: nothing half-imported
    run(["import", str(tmp_path / "ok.txt")], db=db)
    bad = tmp_path / "bad.txt"
    bad.write_text("a;b 3\n" * 1000 + "a;b three\n")
    r = run(["import", str(bad)], db=db, check=False)
    assert r.returncode != 0 and "bad.txt:1001" in r.stderr and len(r.stderr.splitlines()) == 1
    assert len(json.loads(run(["sessions", "--json"], db=db).stdout)) == 1
    # binary garbage as a capture
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 4)
    r = run(["import", str(garbage)], db=db, check=False)
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1
    assert len(json.loads(run(["sessions", "--json"], db=db).stdout)) == 1
    # unknown session id
    r = run(["replay", "999", "--view", "functions"], db=db, check=False)
    assert r.returncode != 0 and "no session '999'" in r.stderr
    # missing import file
    r = run(["import", str(tmp_path / "missing.txt")], db=db, check=False)
    assert r.returncode != 0 and "cannot read" in r.stderr
    c = sqlite3.connect(db)
    assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
    c.close()
