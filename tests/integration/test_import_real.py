"""Imports of what other profilers really write, and bounds on hostile input:
a real austin 3.7 capture (recorded on this machine: `austin -i 2ms -o FILE
python3 work.py`, two threads, with austin's own :INVALID: samples), zero
counts, bifocal's own "[no Python frame]" lines, an old austin layout and an
unknown format refused with one line, /dev/zero and absurd counts refused
in bounded memory without growing the database."""
import json
import os
import subprocess
import sys

from conftest import run, last_line_id, bifocal_bin

DATA = os.path.join(os.path.dirname(__file__), "data")
AUSTIN = os.path.join(DATA, "austin-3.7-wall.austin")


def session(db, sid):
    for s in json.loads(run(["sessions", "--json"], db=db).stdout):
        if s["id"] == sid:
            return s
    raise AssertionError(sid)


def test_real_austin_capture_counts_invalid_samples(tmp_path):
    db = str(tmp_path / "a.db")
    lines = [l.rstrip("\n") for l in open(AUSTIN) if l.strip() and not l.startswith("#")]
    invalid = [l for l in lines if ":INVALID:" in l]
    assert invalid, "the capture must hold austin's invalid samples"
    sid = last_line_id(run(["import", AUSTIN], db=db))
    s = session(db, sid)
    assert s["samples"] == len(lines) - len(invalid)
    assert s["invalid"] == len(invalid)
    f = json.loads(run(["replay", str(sid), "--json", "--limit", "100000"], db=db).stdout)
    assert f["total_samples"] == len(lines) - len(invalid)
    work = [r for r in f["functions"] if r["qualname"] == "work"]
    assert work and work[0]["file"].endswith("aw2.py") and work[0]["total_samples"] > 100
    # samples without a frame (austin writes "P;T metric") are counted, not refused
    empty = [l for l in lines if len(l.rsplit(" ", 1)[0].split(";")) == 2]
    assert empty
    assert f["total_samples"] - sum(r["self_samples"] for r in f["functions"]) == len(empty)


def test_zero_counts_and_no_frame_lines(tmp_path):
    db = str(tmp_path / "z.db")
    p = tmp_path / "z.austin"
    p.write_text("# austin: 3.7.0\n# interval: 1000\n# mode: cpu\n\n"
                 "P1;T0:1;a.py:f:1 0\nP1;T0:1;a.py:f:1 10\nP1;T0:1;:INVALID: 0\nP1;T0:1 0\n")
    sid = last_line_id(run(["import", str(p)], db=db))
    s = session(db, sid)
    assert s["samples"] == 3 and s["invalid"] == 1
    c = tmp_path / "c.txt"
    c.write_text("a;b 0\na;c 3\n[no Python frame] 2\n")
    sid = last_line_id(run(["import", str(c)], db=db))
    f = json.loads(run(["replay", str(sid), "--json"], db=db).stdout)
    assert f["total_samples"] == 5
    assert sorted((r["qualname"], r["total_samples"]) for r in f["functions"]) == [("a", 3), ("c", 3)]
    out = tmp_path / "back.txt"
    run(["export", str(sid), "--format", "collapsed", "-o", str(out)], db=db)
    assert sorted(open(out).read().splitlines()) == ["[no Python frame] 2", "a;c 3"]


def test_unrecognised_layouts_are_refused(tmp_path):
    db = str(tmp_path / "r.db")
    old = tmp_path / "old.txt"  # austin before 3.0: line numbers as frames
    old.write_text("P42;T7f01;main (app.py);L13;work (app.py);L20 5\n")
    r = run(["import", str(old)], db=db, check=False)
    assert r.returncode == 1 and "'L<number>'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    js = tmp_path / "p.json"
    js.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "f"}]}) + "\n")
    r = run(["import", str(js)], db=db, check=False)
    assert r.returncode == 1 and "p.json:1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not os.path.exists(db) or json.loads(run(["sessions", "--json"], db=db).stdout) == []


MAXRSS = r"""
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)
sys.stderr.write(r.stderr)
"""


def test_hostile_imports_bounded(tmp_path):
    db = str(tmp_path / "h.db")
    run(["import", AUSTIN], db=db)
    size0 = os.path.getsize(db)
    # /dev/zero: no newline ever; refused after the 4 MiB line cap, in bounded memory
    r = subprocess.run([sys.executable, "-c", MAXRSS, bifocal_bin(), "--db", db, "import", "/dev/zero"],
                       capture_output=True, text=True, timeout=90)
    kb, rc = map(int, r.stdout.split())
    assert rc == 1 and "longer than 4 MiB" in r.stderr, r.stderr
    assert kb < 64 * 1024, "import /dev/zero peaked at %d KB" % kb
    # 29 bytes asking for 10^18 samples: one clear line, the database unchanged
    huge = tmp_path / "huge.txt"
    huge.write_text("main;work 999999999999999999\n")
    r = run(["import", str(huge)], db=db, check=False)
    assert r.returncode == 1 and "10^15" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert os.path.getsize(db) < size0 + 1024 * 1024
    assert len(json.loads(run(["sessions", "--json"], db=db).stdout)) == 1
