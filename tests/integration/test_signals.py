"""Signals and lifetimes (issue 32, items 7-13 and 16): what a stop signal,
a repeated one, SIGKILL, a reused pid, many threads and a concurrent gc do to
record, trace and calibrate. The truth is the kernel's (is the child still
there, which pid is whose), the file system's and the workload's own names;
bifocal's answers are only checked against them. One interpreter (the one
running the tests): none of this depends on the Python version.
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import bifocal_bin, run, wait_session, wait_until

PY = sys.executable

# A busy workload that says its pid (the launched child's, behind any shim)
# into the file named by argv[1], then spins in a named function.
BUSY = '''\
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
def spin_here():
    x = 0
    end = time.time() + float(sys.argv[2])
    while time.time() < end:
        x += 1
spin_here()
'''


def busy_script(tmp_path):
    p = tmp_path / "busy.py"
    p.write_text(BUSY)
    return str(p)


def alive(pid):
    """pid exists and is not a zombie (/proc/PID/stat state)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def child_pid(pidfile, proc):
    def got():
        if proc.poll() is not None:
            raise AssertionError("bifocal ended (%s) before its child started" % proc.returncode)
        try:
            return int(open(pidfile).read())
        except (OSError, ValueError):
            return 0
    return wait_until(got, 30, what="the launched child's pid")


def popen(args, db=None):
    cmd = [bifocal_bin()] + (["--db", db] if db else []) + args
    env = dict(os.environ)
    env.pop("BIFOCAL_DB", None)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def sessions(db):
    return json.loads(run(["sessions", "--json"], db=db).stdout)


def audit(db):
    return json.loads(run(["audit", "--json"], db=db).stdout)


def spinner(tmp_path, life=60):
    """A Python process spinning for life seconds: (Popen, pid)."""
    pidfile = str(tmp_path / "spin.pid")
    p = subprocess.Popen([PY, busy_script(tmp_path), pidfile, str(life)])
    wait_until(lambda: os.path.exists(pidfile), 30, what="the spinner to start")
    return p


# ---- 7: -o survives timeout's double signal ---------------------------------

def test_output_file_survives_repeated_sigterm(tmp_path):
    """timeout sends SIGTERM to bifocal and then to its whole group; here a
    burst of SIGTERMs every 2 ms until bifocal exits lands in every window
    (finalising, writing the flame graph): the file must still be written."""
    t = spinner(tmp_path)
    out = tmp_path / "g.html"
    try:
        r = popen(["record", "-p", str(t.pid), "-o", str(out)])
        time.sleep(0.8)
        while r.poll() is None:
            r.send_signal(signal.SIGTERM)
            time.sleep(0.002)
        err = r.stderr.read()
        assert r.returncode == 0, (r.returncode, err)
        assert out.exists(), err
        assert out.read_text().rstrip().endswith("</html>")
    finally:
        t.kill()
        t.wait()


# ---- 8, 9: trace and calibrate on SIGHUP / SIGTERM ---------------------------

def test_trace_sighup_keeps_the_trace(tmp_path, db):
    pidfile = str(tmp_path / "c.pid")
    r = popen(["trace", "--", PY, busy_script(tmp_path), pidfile, "30"], db=db)
    child = child_pid(pidfile, r)
    time.sleep(0.3)
    r.send_signal(signal.SIGHUP)
    out, err = r.communicate(timeout=30)
    assert "ended before its trace was written" not in err, err
    s = sessions(db)
    assert [x["status"] for x in s] == ["interrupted"], (s, err)
    assert not alive(child)
    assert audit(db)[0]["outcome"] != "started"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_calibrate_stop_signal_finishes_both_sessions(tmp_path, db, sig):
    pidfile = str(tmp_path / "c.pid")
    r = popen(["calibrate", "--", PY, busy_script(tmp_path), pidfile, "30"], db=db)
    child = child_pid(pidfile, r)
    wait_until(lambda: any(x["kind"] == "sampled" for x in sessions(db)), 30, what="the sampled session")
    time.sleep(0.5)
    r.send_signal(sig)
    out, err = r.communicate(timeout=60)
    assert "malformed" not in err, err
    assert "calibration:" in out, (out, err)
    wait_until(lambda: not alive(child), 5, what="the traced program %d to end" % child)
    s = sessions(db)
    assert sorted(x["status"] for x in s) == ["interrupted", "interrupted"], (s, err)
    assert [a["outcome"] for a in audit(db)] != ["started"]


# ---- 10: children never outlive bifocal; SIGQUIT stops record ----------------

@pytest.mark.parametrize("cmd", ["record", "trace"])
def test_sigkill_takes_the_launched_child(tmp_path, db, cmd):
    pidfile = str(tmp_path / "c.pid")
    # the child's output goes elsewhere: its pipes would keep communicate() waiting
    r = subprocess.Popen([bifocal_bin(), "--db", db, cmd, "--", PY, busy_script(tmp_path), pidfile, "60"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = child_pid(pidfile, r)
    r.kill()
    r.wait()
    try:
        wait_until(lambda: not alive(child), 10, what="the launched child %d to die with bifocal" % child)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_sigquit_stops_record_and_its_child(tmp_path, db):
    pidfile = str(tmp_path / "c.pid")
    r = popen(["record", "--", PY, busy_script(tmp_path), pidfile, "60"], db=db)
    child = child_pid(pidfile, r)
    wait_session(db, r)
    time.sleep(0.3)
    r.send_signal(signal.SIGQUIT)
    try:
        out, err = r.communicate(timeout=30)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
    assert r.returncode > 0, (r.returncode, err)  # the child's SIGTERM, passed through
    assert [x["status"] for x in sessions(db)] == ["interrupted"], err
    assert not alive(child)
    assert audit(db)[0]["outcome"] != "started"


# ---- 11: a reused pid is not followed ----------------------------------------

REUSE = r'''
import json, os, signal, subprocess, sys, time
B, db, PY = sys.argv[1], sys.argv[2], sys.executable
a = subprocess.Popen([PY, "-c", "def first_prog():\n while 1: pass\nfirst_prog()"])
time.sleep(0.3)
r = subprocess.Popen([B, "--db", db, "record", "-r", "20", "-p", str(a.pid)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
time.sleep(1.0)
a.kill(); a.wait()
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the next fork takes a.pid
    f.write(str(a.pid - 1))
b = subprocess.Popen([PY, "-c", "def impostor():\n while 1: pass\nimpostor()"])
took = b.pid == a.pid
end = time.time() + 5  # the old sampler re-attached after 64 torn ticks (3.2 s)
while r.poll() is None and time.time() < end:
    time.sleep(0.1)
if r.poll() is None:
    r.send_signal(signal.SIGINT)
out, err = r.communicate()
b.kill(); b.wait()
print(json.dumps({"took": took, "rc": r.returncode, "err": err}))
'''


def test_reused_pid_is_not_sampled(tmp_path, db):
    if not shutil.which("unshare"):
        pytest.skip("needs unshare(1) for a PID namespace")
    drv = tmp_path / "reuse.py"
    drv.write_text(REUSE)
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", PY, str(drv), bifocal_bin(), db],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0 and "unshare" in p.stderr:
        pytest.skip("cannot make a PID namespace here: %s" % p.stderr.strip())
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["took"], "the impostor did not get the pid (ns_last_pid): %s" % res
    s = sessions(db)
    assert [x["status"] for x in s] == ["target-exited"], (s, res)
    coll = run(["export", str(s[0]["id"]), "-f", "collapsed", "-o", "-"], db=db).stdout
    assert "first_prog" in coll
    assert "impostor" not in coll, coll


# ---- 12: a writer holding the lock while a record ends ------------------------

def test_audit_row_finished_under_another_writers_lock(tmp_path, db):
    t = spinner(tmp_path)
    try:
        r = popen(["record", "-p", str(t.pid), "-d", "1"], db=db)
        wait_session(db, r)
        c = sqlite3.connect(db, timeout=30, isolation_level=None)
        c.execute("BEGIN IMMEDIATE")  # held past the record's end
        time.sleep(2.0)
        c.execute("COMMIT")
        c.close()
        out, err = r.communicate(timeout=60)
        assert r.returncode == 0, err
    finally:
        t.kill()
        t.wait()
    a = audit(db)
    assert a[0]["outcome"] == "ok" and a[0]["session_id"] == int(out.split()[-1]), (a, err)
    assert sessions(db)[0]["status"] == "complete"


def test_record_signalled_while_waiting_for_a_lock_finishes_its_row(tmp_path, db):
    """The second writer's side: a record that waits for another writer's
    lock and is stopped meanwhile still ends with its row and session done."""
    t = spinner(tmp_path)
    try:
        run(["import", os.path.join(os.path.dirname(__file__), "data", "austin-3.7-wall.austin")], db=db)
        c = sqlite3.connect(db, timeout=30, isolation_level=None)
        c.execute("BEGIN IMMEDIATE")
        r = popen(["record", "-p", str(t.pid)], db=db)
        time.sleep(0.5)
        r.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        c.execute("COMMIT")
        c.close()
        out, err = r.communicate(timeout=60)
    finally:
        t.kill()
        t.wait()
    a = audit(db)
    assert len(a) == 1 and a[0]["outcome"] != "started" and a[0]["session_id"], (a, err)
    assert [x["status"] for x in sessions(db) if x["kind"] == "sampled"] == ["interrupted"]


# ---- 13: names of 2,000 threads -----------------------------------------------

THREADS = '''\
import threading, time
ev = threading.Event()
for i in range(2000):
    threading.Thread(target=ev.wait, name="w%04d" % i, daemon=True).start()
print("ready", flush=True)
time.sleep(120)
'''


def test_two_thousand_thread_names(tmp_path):
    path = tmp_path / "threads.py"
    path.write_text(THREADS)
    p = subprocess.Popen([PY, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        out = run(["dump", str(p.pid)], timeout=120).stdout
    finally:
        p.kill()
        p.wait()
    named = {"w%04d" % i for i in range(2000)}
    seen = {w for w in named if '"%s"' % w in out}
    assert len(seen) == 2000, "%d of 2000 thread names shown" % len(seen)


# ---- 16: gc --force during a capture ------------------------------------------

RECURSE = '''\
import sys
def a(n):
    return b(n) if n else sum(range(50))
def b(n):
    return a(n - 1)
with open(sys.argv[1], "w") as f:
    f.write("up")
while True:
    for k in range(30):
        a(k)
'''


def test_gc_force_during_capture_keeps_it_readable(tmp_path, db):
    path = tmp_path / "rec.py"
    path.write_text(RECURSE)
    up = tmp_path / "up"
    t = subprocess.Popen([PY, str(path), str(up)])
    try:
        wait_until(up.exists, 30, what="the workload")
        run(["record", "-p", str(t.pid), "-d", "1", "--ttl", "1s"], db=db)
        time.sleep(1.1)  # expired: its stacks are shared with the next capture
        r = popen(["record", "-p", str(t.pid), "-d", "3"], db=db)
        wait_until(lambda: len(sessions(db)) == 2, 30, what="the second capture")
        time.sleep(0.3)
        for _ in range(15):
            run(["gc", "--force"], db=db)
            time.sleep(0.1)
        out, err = r.communicate(timeout=60)
        assert r.returncode == 0, err
    finally:
        t.kill()
        t.wait()
    sid = int(out.split()[-1])
    coll = run(["export", str(sid), "-f", "collapsed", "-o", "-"], db=db)
    assert ";b (" in coll.stdout or "b (" in coll.stdout
    run(["gc", "--force"], db=db)  # with no capture running it does sweep
    run(["export", str(sid), "-f", "collapsed", "-o", "-"], db=db)


# ---- every command: gc finishes its row before a stop signal takes effect ----

def test_gc_stop_signal_waits_for_its_audit_row(tmp_path, db):
    run(["import", os.path.join(os.path.dirname(__file__), "data", "austin-3.7-wall.austin")], db=db)
    c = sqlite3.connect(db, timeout=30, isolation_level=None)
    c.execute("BEGIN IMMEDIATE")  # gc waits for this lock (5 s) to write its row
    g = popen(["gc"], db=db)
    time.sleep(0.5)
    g.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    c.execute("COMMIT")
    c.close()
    out, err = g.communicate(timeout=30)
    assert g.returncode == -signal.SIGTERM, (g.returncode, err)
    rows = [a for a in audit(db) if a["command"] == "gc"]
    assert len(rows) == 1 and rows[0]["outcome"].startswith("ok"), rows


def test_redact_stop_signal_ends_its_audit_row(tmp_path, db):
    """A stop signal during redact's copy: nothing is written beside or at
    the output, the audit row says it was interrupted (main left it at
    'started'), and the process ends by that signal."""
    src = tmp_path / "many.txt"
    with open(src, "w") as f:  # enough distinct stacks that the copy takes a while
        for i in range(6000):
            f.write(";".join("m%d.py:f%d:%d" % (i % 97, (i * 7 + k) % 3000, k) for k in range(12)))
            f.write(" %d\n" % (1 + i % 5))
    run(["import", str(src)], db=db)
    out = tmp_path / "out.db"
    t0 = time.time()
    g = popen(["redact", "1", "-o", str(out)], db=db)
    wait_until(lambda: any(a["command"] == "redact" for a in audit(db)), 30, what="redact's audit row")
    time.sleep(0.2)
    g.send_signal(signal.SIGTERM)
    _, err = g.communicate(timeout=60)
    if g.returncode == 0:
        pytest.skip("redact finished in %.1f s, before the signal landed" % (time.time() - t0))
    assert g.returncode == -signal.SIGTERM, (g.returncode, err)
    assert "interrupted by signal" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == sorted(x for x in os.listdir(tmp_path) if not x.startswith("out.db"))
    rows = [a for a in audit(db) if a["command"] == "redact"]
    assert len(rows) == 1 and rows[0]["outcome"].startswith("interrupted by signal 15"), rows
