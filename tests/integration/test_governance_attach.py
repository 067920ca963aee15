"""Audit rows for the commands that reach into another process (issue 8).

Each test skips only while its command is absent from `bifocal --help`; the
assertions need nothing from the command but that it writes its audit row
(target pid and uid, command line, outcome, session) whether the attach
succeeds or not."""
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import bifocal_bin, run, wait_expired, wait_until

SPIN = "import time\nwhile True:\n    sum(range(1000))\n    time.sleep(0.001)\n"
# a launched target must end by itself: record waits for its command to exit
BRIEF = "import time\nt = time.time()\nwhile time.time() - t < 2:\n    sum(range(1000))\n"


def has_command(name):
    out = run(["--help"]).stdout
    return any(line.split()[:1] == [name] for line in out.splitlines())


def need(name):
    assert has_command(name), "`bifocal %s` missing from this build" % name


@pytest.fixture
def target():
    p = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\n" + SPIN],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"  # the interpreter runs
    yield p
    p.kill()
    p.wait()


def audit(db):
    return json.loads(run(["audit", "--json"], db=db).stdout)


def attach_row(db, command):
    rows = [r for r in audit(db) if r["command"] == command]
    assert len(rows) == 1, audit(db)
    r = rows[0]
    assert r["uid"] == os.getuid() and r["user"]
    assert r["time_ns"] > 0
    assert command in r["argv"]
    return r


def run_bounded(args, db, seconds):
    """Run a command that may not stop on its own; SIGINT it after seconds,
    and kill its whole process group (launched targets included) if needed."""
    p = subprocess.Popen([bifocal_bin(), "--db", db] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
    return p.returncode, out, err


def test_record_pid_is_audited(db, target):
    need("record")
    rc, out, err = run_bounded(["record", "--pid", str(target.pid), "--duration", "1"], db, 30)
    r = attach_row(db, "record")
    assert r["target_pid"] == target.pid
    assert r["target_uid"] == os.getuid()
    assert "--duration 1" in r["argv"]
    if rc == 0:
        assert r["outcome"] == "ok"
        assert r["session_id"] == int(out.strip().splitlines()[-1])
    else:
        assert r["outcome"] not in ("ok", "started")


def test_record_launch_is_audited(db):
    need("record")
    rc, out, err = run_bounded(["record", "--duration", "1", "--", sys.executable, "-c", BRIEF], db, 30)
    r = attach_row(db, "record")
    assert r["outcome"] == ("ok" if rc == 0 else r["outcome"])
    assert r["outcome"] != "started"
    assert sys.executable in r["argv"]


def test_dump_is_audited(db, target):
    need("dump")
    rc, out, err = run_bounded(["dump", str(target.pid)], db, 30)
    r = attach_row(db, "dump")
    assert r["target_pid"] == target.pid and r["target_uid"] == os.getuid()
    assert (r["outcome"] == "ok") == (rc == 0)


def test_top_is_audited(db, target):
    need("top")
    rc, out, err = run_bounded(["top", "--duration", "1", str(target.pid)], db, 30)
    r = attach_row(db, "top")
    assert r["target_pid"] == target.pid and r["target_uid"] == os.getuid()
    assert (r["outcome"] == "ok") == (rc == 0)


def test_live_is_audited(db, target):
    need("live")
    # live wants a terminal: give it a pseudo-terminal and press q
    master, slave = pty.openpty()
    p = subprocess.Popen([bifocal_bin(), "--db", db, "live", str(target.pid)], stdin=slave, stdout=slave,
                         stderr=subprocess.PIPE, close_fds=True)
    os.close(slave)
    screen = []

    def drawn():  # live has attached and drawn its first screen
        r, _, _ = select.select([master], [], [], 0.05)
        if r:
            try:
                screen.append(os.read(master, 65536))
            except OSError:
                pass
        return b"bifocal live" in b"".join(screen) or p.poll() is not None
    wait_until(drawn, 20, what="live's first screen")
    os.write(master, b"q")
    deadline = time.time() + 20
    while p.poll() is None and time.time() < deadline:
        try:
            os.read(master, 65536)  # keep the terminal drained
        except OSError:
            break
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    p.wait(timeout=10)
    os.close(master)
    r = attach_row(db, "live")
    assert r["target_pid"] == target.pid and r["target_uid"] == os.getuid()
    assert r["outcome"] == ("ok" if p.returncode == 0 else r["outcome"])
    assert r["outcome"] != "started"


def test_trace_is_audited(db, tmp_path):
    need("trace")
    script = tmp_path / "w.py"
    script.write_text("def f(n):\n    return sum(range(n))\nfor i in range(100):\n    f(1000)\n")
    rc, out, err = run_bounded(["trace", "--", sys.executable, str(script)], db, 60)
    r = attach_row(db, "trace")
    assert str(script) in r["argv"]
    if rc == 0:
        assert r["outcome"] == "ok" and r["session_id"] > 0
    else:
        assert r["outcome"] not in ("ok", "started")


def test_attach_to_missing_process_is_audited(db):
    need("dump")
    # a pid that is surely not running
    pid = 4194303
    rc, out, err = run_bounded(["dump", str(pid)], db, 30)
    assert rc != 0
    r = attach_row(db, "dump")
    assert r["target_pid"] == pid and r["target_uid"] == -1
    assert r["outcome"] not in ("ok", "started")


def sessions(db):
    return json.loads(run(["sessions", "--json"], db=db).stdout)


def test_record_ttl_expires_with_gc(db, target):
    need("record")
    keep = subprocess.run([bifocal_bin(), "--db", db, "record", "--pid", str(target.pid), "--duration", "0.5"],
                          capture_output=True, text=True, timeout=60)
    rc, out, err = run_bounded(["record", "--ttl", "1s", "--pid", str(target.pid), "--duration", "0.5"], db, 60)
    assert rc == 0 and keep.returncode == 0, err + keep.stderr
    gone = int(out.strip().splitlines()[-1])
    assert [s for s in sessions(db) if s["id"] == gone][0]["expires_at_ns"] > 0
    wait_expired(db, gone)
    run(["gc"], db=db)
    ids = [s["id"] for s in sessions(db)]
    assert gone not in ids and int(keep.stdout.strip().splitlines()[-1]) in ids


def test_trace_ttl_expires_with_gc(db, tmp_path):
    need("trace")
    script = tmp_path / "w.py"
    script.write_text("def f(n):\n    return sum(range(n))\nfor i in range(100):\n    f(1000)\n")
    rc, out, err = run_bounded(["trace", "--ttl", "1s", "--", sys.executable, str(script)], db, 60)
    assert rc == 0, err
    sid = int(out.strip().splitlines()[-1])
    assert [s for s in sessions(db) if s["id"] == sid][0]["expires_at_ns"] > 0
    wait_expired(db, sid)
    run(["gc"], db=db)
    assert sid not in [s["id"] for s in sessions(db)]
