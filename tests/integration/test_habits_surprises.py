"""Silent surprises of issue 28, each now said out loud: a --focus that
matches nothing, focus records dropped by a full ring, a failed record that
left an empty ./bifocal.db, -d on a launched command, thread names that
depended on how the process was found. The truth is the workload's own
(its call counts, its clock, threading's names) or the file system."""
import json
import os
import sqlite3
import subprocess
import textwrap
import time

import pytest

from conftest import bifocal_bin, run, last_line_id

FIB = """
import sys
calls = 0
def fib(n):
    global calls
    calls += 1
    return n if n < 2 else fib(n - 1) + fib(n - 2)
fib(int(sys.argv[1]))
print("fib calls", calls)
"""


def script(tmp_path, name, src):
    d = tmp_path / "src"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text(textwrap.dedent(src))
    return str(p)


def env_no_db():
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    return e


def test_focus_matching_nothing_fails(python, tmp_path):
    """`--focus fib` (a bare name: patterns are MODULE:QUALNAME) recorded
    nothing with exit 0; now it fails, names the pattern and a spelling that
    matches, and the session is still kept."""
    db = str(tmp_path / "t.db")
    r = run(["trace", "--focus", "fib", "--", python, script(tmp_path, "fib.py", FIB), "12"], db=db, check=False)
    assert r.returncode == 1, r.stderr
    assert "fib calls 465" in r.stdout
    assert "--focus 'fib' matched no function that was called" in r.stderr and "'*:fib'" in r.stderr
    sid = last_line_id(r)
    text = run(["replay", str(sid), "--view", "functions"], db=db).stdout
    assert "focus: no call matched the focus pattern" in text


def test_focus_dropped_records_are_shown(python, tmp_path):
    """A ring of 100 records under 465 fib calls drops 365: the trace says
    so, and so do the functions view, its JSON and the speedscope file."""
    db = str(tmp_path / "t.db")
    r = run(["trace", "--focus", "*:fib", "--records", "100", "--", python, script(tmp_path, "fib.py", FIB), "12"],
            db=db, check=False)
    assert r.returncode == 0, r.stderr
    calls = int(r.stdout.split("fib calls ")[1].split()[0])  # the workload's own count
    assert calls == 465
    sid = last_line_id(r)
    assert "100 call records kept, %d dropped" % (calls - 100) in r.stderr and "--records" in r.stderr
    text = run(["replay", str(sid), "--view", "functions"], db=db).stdout
    assert "focus: 100 call records kept, %d dropped" % (calls - 100) in text
    js = json.loads(run(["replay", str(sid), "--view", "functions", "--json"], db=db).stdout)
    assert js["focus_records"] == {"kept": 100, "dropped": calls - 100}
    fib = [f for f in js["functions"] if f["qualname"] == "fib"][0]
    assert fib["calls"] == calls and fib["records_kept"] + fib["records_dropped"] == calls
    out = tmp_path / "s.json"
    run(["export", str(sid), "-f", "speedscope", "-o", str(out)], db=db)
    assert "%d focus calls dropped" % (calls - 100) in json.loads(out.read_text())["name"]


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("args", [["--", "nosuchcmd"], ["-p", "DEAD"], ["-p", "1"]],
                         ids=["nosuchcmd", "gone-pid", "not-python"])
def test_failed_record_leaves_no_database(tmp_path, args):
    """A record that fails before its first sample leaves no ./bifocal.db
    (nor -wal/-shm) in the directory it ran in."""
    args = [str(dead_pid()) if a == "DEAD" else a for a in args]
    r = subprocess.run([bifocal_bin(), "record"] + args, cwd=str(tmp_path), capture_output=True, text=True,
                       env=env_no_db(), timeout=60)
    assert r.returncode != 0 and r.stdout == ""
    assert sorted(os.listdir(tmp_path)) == [], r.stderr


def test_failed_record_keeps_an_existing_database(tmp_path):
    """The same failure against a database that was there before: it stays,
    with its session, whether it held one or was empty."""
    coll = tmp_path / "c.txt"
    coll.write_text("main;work 10\n")
    db = str(tmp_path / "bifocal.db")
    sid = last_line_id(run(["import", str(coll)], db=db))
    r = subprocess.run([bifocal_bin(), "record", "--", "nosuchcmd"], cwd=str(tmp_path), capture_output=True,
                       text=True, env=env_no_db(), timeout=60)
    assert r.returncode != 0
    con = sqlite3.connect(db)
    assert con.execute("SELECT id FROM sessions").fetchall() == [(sid,)]
    con.close()
    empty = str(tmp_path / "empty.db")
    open(empty, "wb").close()  # a file that existed, even empty, is not ours to delete
    r = run(["record", "--", "nosuchcmd"], db=empty, check=False)
    assert r.returncode != 0 and os.path.exists(empty)


APP = """
import signal, sys, time
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
t = time.monotonic()
while time.monotonic() - t < float(sys.argv[1]):
    sum(range(1000))
print("app done", flush=True)
"""


@pytest.mark.parametrize("sigterm", ["default", "ignore"])
def test_duration_stops_the_launched_command(tmp_path, sigterm):
    """`record -d 1 -- python3 app.py 6` waited 6 s for the command, saying
    nothing; now, like py-spy, the command is stopped when the duration ends
    (SIGTERM; SIGKILL 2 s later when it ignores that), bifocal says so and
    exits 0 with the session recorded."""
    db = str(tmp_path / "r.db")
    app = script(tmp_path, "app.py", APP)
    t0 = time.monotonic()
    r = run(["record", "-d", "1", "--", "/usr/bin/python3", app, "6", sigterm], db=db, check=False, timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "app done" not in r.stdout, "the command ran to its end"
    assert took < (2.8 if sigterm == "default" else 4.8), took
    want = "Terminated" if sigterm == "default" else "Killed"
    assert "still running when the 1s of --duration ended: it was stopped (%s), as py-spy does" % want in r.stderr
    con = sqlite3.connect(db)
    dur, status = con.execute("SELECT duration_ns, status FROM sessions WHERE id=?", (last_line_id(r),)).fetchone()
    con.close()
    assert status == "complete" and 0.9e9 < dur < 1.5e9
