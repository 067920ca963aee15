"""Never damage, never lose, never leave behind (issue 12).

Output files: -o into a device, a FIFO, a symlink, onto the open database,
and onto a small full tmpfs (checked writes, nothing left behind). Signals
to `record`: passed on to a launched command, every sample kept. A database
write lock held by another process: the capture goes on, samples held in
memory. Thread churn: memory stays bounded. A sealed import killed with
SIGKILL leaves no plaintext. Error messages name the thing, cause and fix.

Oracles are the file system (stat, inode, content), the kernel (process
state, /proc RSS), SQLite itself and workloads that name their own time.
Interpreter-independent cases run once (with the newest interpreter found);
SIGTERM to a launched command runs on every interpreter.
"""
import glob
import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pythons  # noqa: E402
from conftest import (bifocal_bin, last_line_id, run, task_states, traced_or_stopped, wait_session,  # noqa: E402
                      wait_until)

WORK = """\
import sys, time
def work():
    t = time.time()
    while time.time() - t < float(sys.argv[1]):
        sum(range(1000))
work()
"""

FOREVER = "import time\nwhile True:\n    sum(range(1000))\n"

# A new function every 100 ms named by its time (at_<tenths>): a sample taken
# while the database is locked needs new rows, so it is only in the profile
# if it was held and written later.
GEN = """\
import sys, time
t0 = time.time()
while time.time() - t0 < float(sys.argv[1]):
    el = int((time.time() - t0) * 10)
    src = "def at_%d():\\n    t=time.time()\\n    while time.time()-t<0.01: sum(range(100))\\nat_%d()\\n" % (el, el)
    exec(compile(src, "gen_%d.py" % el, "exec"), {"time": time})
"""

CHURN = """\
import sys, threading, time
def work():
    t = time.time()
    while time.time() - t < 0.0005:
        pass
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    ts = [threading.Thread(target=work) for _ in range(10)]
    for t in ts: t.start()
    for t in ts: t.join()
    n += 10
print(n, flush=True)
"""


def newest_python():
    ps = pythons.discover()
    if not ps:
        pytest.skip("no CPython 3.8+ interpreter found")
    return ps[-1]["path"]


def runtime_up(target, timeout=30):
    """Wait until target runs a Python whose runtime is up: `record --pid`
    attaches once, and a container's wrapper (the sid root's python3.14/3.15)
    is a shell for a moment before it execs the interpreter in place."""
    def up():
        assert target.poll() is None, "the target exited (%s)" % target.returncode
        return run(["dump", str(target.pid)], check=False, timeout=30).returncode == 0
    wait_until(up, timeout=timeout, what="a Python runtime in pid %d" % target.pid, interval=0.05)


def sessions(db):
    return {s["id"]: s for s in json.loads(run(["sessions", "--json"], db=db).stdout)}


def env():
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    return e


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A database with two short sessions (flame views, diffs, exports)."""
    d = tmp_path_factory.mktemp("rel")
    w = d / "w.py"
    w.write_text(WORK)
    db = str(d / "r.db")
    py = newest_python()
    a = last_line_id(run(["record", "--duration", "2", "--", py, str(w), "0.6"], db=db))
    b = last_line_id(run(["record", "--duration", "2", "--", py, str(w), "0.6"], db=db))
    return db, a, b


def leftovers(d):
    return sorted(p for p in os.listdir(d) if "bifocal" in p or ".tmp" in p)


# ---- output files -----------------------------------------------------------------------------


def _private_null(tmp_path):
    """A null device node of the test's own, so a regression replaces it and
    not the machine's /dev/null (which every later test needs)."""
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as e:
        pytest.skip("cannot make a device node here (%s)" % e)
    return str(dev)


@pytest.mark.parallel  # files and their content, no rate
def test_output_into_devices_fifos_and_symlinks(recorded, tmp_path):
    db, a, _ = recorded
    # a character device stays the device it is (as root this used to be replaced)
    null = _private_null(tmp_path)
    before = os.stat(null)
    run(["export", str(a), "--format", "collapsed", "-o", null], db=db)
    after = os.stat(null)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    # a FIFO is written into, not replaced
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    run(["export", str(a), "--format", "collapsed", "-o", str(fifo)], db=db)
    got = reader.communicate(timeout=30)[0]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    want = run(["export", str(a), "--format", "collapsed", "-o", "-"], db=db).stdout.encode()
    assert got == want and len(got) > 0
    # /dev/stdout (a link to a pipe here) is our stdout, never replaced
    r = run(["export", str(a), "--format", "collapsed", "-o", "/dev/stdout"], db=db)
    assert r.stdout.encode() == want and os.path.islink("/dev/stdout")
    # a symlink is followed: the link stays, its target gets the content
    target = tmp_path / "real.txt"
    link = tmp_path / "link.txt"
    os.symlink("real.txt", link)
    run(["export", str(a), "--format", "collapsed", "-o", str(link)], db=db)
    assert os.path.islink(link) and os.readlink(link) == "real.txt"
    assert target.read_bytes() == want
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    # an existing regular file is replaced whole; nothing else left in the directory
    target.write_text("old")
    run(["export", str(a), "--format", "collapsed", "-o", str(target)], db=db)
    assert target.read_bytes() == want
    assert leftovers(tmp_path) == []


@pytest.mark.parallel  # files and their content, no rate
def test_sealed_export_output(recorded, tmp_path):
    """The sealed export writes its file with the same rules as every -o."""
    db, a, _ = recorded
    keys = tmp_path / "k"
    run(["keygen", "-o", str(keys)])
    seal = ["export", str(a), "--format", "bifocal", "--encrypt-to", str(keys) + ".pub", "-o"]
    null = _private_null(tmp_path)
    before = os.stat(null)
    run(seal + [null], db=db)
    after = os.stat(null)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    link = tmp_path / "link.bfs"
    os.symlink("real.bfs", link)
    run(seal + [str(link)], db=db)
    assert os.path.islink(link) and (tmp_path / "real.bfs").read_bytes().startswith(b"BFSEAL1\n")
    line = _one_line(run(seal + [db], db=db, check=False))
    assert "refusing to write" in line and "open database" in line, line
    c = sqlite3.connect(db)  # (the audit row of the attempt is its only change)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert c.execute("SELECT count(*) FROM sessions WHERE id=?", (a,)).fetchone()[0] == 1
    c.close()
    assert leftovers(tmp_path) == []


@pytest.mark.parallel  # old file or new at whatever moment the kill lands
def test_killed_writer_leaves_nothing(recorded, tmp_path):
    """SIGKILL at any moment of a -o write leaves either the old file or the
    new one, and no temporary (it is an unnamed O_TMPFILE until complete)."""
    db, a, _ = recorded
    out = tmp_path / "f.html"
    out.write_text("old")
    for i in range(12):
        p = subprocess.Popen([bifocal_bin(), "--db", db, "replay", str(a), "--view", "flame", "-o",
                              str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
        time.sleep(0.005 * i)
        p.kill()
        p.wait()
        assert sorted(os.listdir(tmp_path)) == ["f.html"], os.listdir(tmp_path)
        body = out.read_text()
        assert body == "old" or body.rstrip().endswith("</html>"), body[-200:]


@pytest.mark.parallel  # files and their content, no rate
def test_output_onto_the_open_database_is_refused(recorded, tmp_path):
    db, a, _ = recorded
    before = open(db, "rb").read()
    link = tmp_path / "db-link"
    os.symlink(os.path.abspath(db), link)
    for dest in (db, str(link), db + "-wal"):
        if not os.path.exists(dest):
            continue
        r = run(["export", str(a), "--format", "collapsed", "-o", dest], db=db, check=False)
        assert r.returncode == 1, r
        assert "refusing to write" in r.stderr and "open database" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert open(db, "rb").read() == before
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()


def _mount_small_tmpfs(where):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % r.stderr.strip())


@pytest.mark.parallel  # files and their content, no rate
def test_full_disk_fails_cleanly(recorded, tmp_path):
    """On a full 64 KB tmpfs every -o writer exits non-zero, says 'No space',
    leaves no partial or temporary file and keeps an older file intact."""
    db, a, b = recorded
    small = tmp_path / "small"
    small.mkdir()
    _mount_small_tmpfs(small)
    try:
        (small / "old.html").write_bytes(b"x" * 1000)
        # fill the rest so that the outputs cannot fit
        fd = os.open(small / "fill", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 1024) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        cases = [
            ["replay", str(a), "--view", "flame", "-o", str(small / "f.html")],
            ["diff", str(a), str(b), "--view", "flame", "-o", str(small / "d.html")],
            ["export", str(a), "--format", "pprof", "-o", str(small / "p.pb.gz")],
            ["export", str(a), "--format", "speedscope", "-o", str(small / "s.json")],
            ["replay", str(a), "--view", "flame", "-o", str(small / "old.html")],
        ]
        for args in cases:
            r = run(args, db=db, check=False)
            assert r.returncode == 1, (args, r)
            assert "No space left" in r.stderr, (args, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert sorted(os.listdir(small)) == ["fill", "old.html"]
        assert (small / "old.html").read_bytes() == b"x" * 1000
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


# ---- signals ------------------------------------------------------------------------------------


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parallel  # status; > 100 samples of ~500 (1 kHz, 0.5 s)
def test_sigterm_reaches_launched_command(python, tmp_path):
    _stop_signal_reaches_launched_command(python, tmp_path, signal.SIGTERM)


@pytest.mark.parallel  # status; > 100 samples of ~500 (1 kHz, 0.5 s)
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_stop_signal_reaches_launched_command(tmp_path, sig):
    _stop_signal_reaches_launched_command(newest_python(), tmp_path, sig)


def _stop_signal_reaches_launched_command(python, tmp_path, sig):
    """SIGTERM/SIGHUP/SIGINT sent to `record -- CMD` reach CMD, which is waited
    for (no orphan); the session is finalised with its samples; bifocal's
    status is the command's."""
    db = str(tmp_path / "s.db")
    p = tmp_path / "forever.py"
    p.write_text(FOREVER)
    rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--", python, str(p)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                           start_new_session=True)
    try:
        wait_session(db, rec)
        time.sleep(0.5)
        child = sessions(db)[1]["pid"]
        rec.send_signal(sig)
        out, err = rec.communicate(timeout=30)
        left = _alive(child)
    finally:
        try:  # whatever happened, nothing of this test keeps running
            os.killpg(rec.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rec.wait()
    assert not left, "the launched command was left running"
    # Python dies of SIGTERM/SIGHUP; a KeyboardInterrupt exits via SIGINT (1 before 3.8)
    assert rec.returncode in (128 + sig, 1), (rec.returncode, err)
    s = sessions(db)[int(out.strip().splitlines()[-1])]
    assert s["status"] == "interrupted", s
    assert s["samples"] > 100, s


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGPIPE, signal.SIGHUP])
def test_signal_finalises_attached_session(tmp_path, sig):
    """SIGUSR1/SIGPIPE/SIGHUP used to kill `record --pid` (session left
    'incomplete', up to 1 s of samples lost): now it is finalised with one
    sample per tick taken."""
    py = newest_python()
    db = str(tmp_path / "s.db")
    w = tmp_path / "w.py"
    w.write_text(WORK)
    target = subprocess.Popen([py, str(w), "30"])
    runtime_up(target)
    rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--rate", "200", "--pid",
                            str(target.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env())
    try:
        wait_session(db, rec)
        time.sleep(1.5)
        rec.send_signal(sig)
        out, err = rec.communicate(timeout=30)
        assert rec.returncode == 0, err
        assert target.poll() is None  # an attached target is never touched
    finally:
        target.kill()
        target.wait()
        if rec.poll() is None:
            rec.kill()
    s = sessions(db)[last_line_id(subprocess.CompletedProcess([], 0, out))]
    assert s["status"] == "interrupted", s
    ticks = s["achieved_rate_hz"] * s["duration_s"]
    # one thread: every tick taken is one stored sample (a few may be torn/invalid)
    assert s["samples"] >= ticks - s["invalid"] - 2 and s["samples"] > 100, s


def test_usr1_stops_recording_but_waits_for_command(tmp_path):
    py = newest_python()
    db = str(tmp_path / "s.db")
    w = tmp_path / "w.py"
    w.write_text(WORK + "print('finished', flush=True)\n")
    rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--", py, str(w), "2.5"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    wait_session(db, rec)
    time.sleep(0.5)
    t0 = time.time()
    rec.send_signal(signal.SIGUSR1)
    out, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    assert "finished" in out  # the command ran to its end, under bifocal
    assert time.time() - t0 > 0.5
    s = sessions(db)[int(out.strip().splitlines()[-1])]
    assert s["status"] == "interrupted" and s["samples"] > 100, s
    assert s["duration_s"] < 2.4, s  # recording stopped at the signal


# ---- a database locked by another process --------------------------------------------------------

LOCKER = """\
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
c.execute("COMMIT")
"""


def test_locked_database_keeps_sampling(tmp_path):
    """Another process holds the write lock for 4 s of a 7 s capture: record
    keeps sampling, holds the samples (extra.lock_held > 0), writes them
    afterwards and exits 0; the functions made during the lock are there."""
    db = str(tmp_path / "l.db")
    g = tmp_path / "gen.py"
    g.write_text(GEN)
    lk = tmp_path / "lock.py"
    lk.write_text(LOCKER)
    t0 = time.time()
    target = subprocess.Popen([newest_python(), str(g), "9"])
    try:
        runtime_up(target)
        rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--pid", str(target.pid),
                                "--duration", "7"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env())
        wait_session(db, rec)
        time.sleep(1.0)
        t_lock = time.time()
        subprocess.run([sys.executable, str(lk), db, "4"], check=True, timeout=30)
        t_unlock = time.time()
        out, err = rec.communicate(timeout=60)
    finally:
        target.kill()
        target.wait()
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    assert rec.returncode == 0, err
    assert "locked" not in err, err
    s = sessions(db)[last_line_id(subprocess.CompletedProcess([], 0, out))]
    assert s["status"] == "complete", s
    ex = s["extra"]
    assert ex["lock_held"] > 0 and ex["lock_dropped"] == 0, ex
    # sampling never stopped: ticks over the whole 7 s (a loaded host still reaches 40%)
    assert s["achieved_rate_hz"] * s["duration_s"] > 0.4 * 1000 * 7, s
    # the tenths of a second inside the lock window (0.5 s margin each side:
    # the target's clock starts a little after t0) are all in the profile
    col = run(["export", str(s["id"]), "--format", "collapsed", "-o", "-"], db=db).stdout
    names = {int(m) for m in re.findall(r"at_(\d+)", col)}
    want = set(range(int((t_lock - t0) * 10) + 5, int((t_unlock - t0) * 10) - 5))
    assert len(want) >= 25, want
    # (a loaded host skips a few tenths outside the lock too)
    assert len(want & names) >= 0.6 * len(want), (sorted(want - names), sorted(names))


# ---- memory under thread churn -----------------------------------------------------------------


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_thread_churn_memory_bounded(tmp_path):
    """Hundreds of short threads a second: record's RSS stops growing (it
    grew ~4 KB per thread ever seen before). Bound: < 3 MB growth between
    second 2.5 and second 7, with thousands of threads born meanwhile."""
    py = newest_python()
    db = str(tmp_path / "c.db")
    c = tmp_path / "churn.py"
    c.write_text(CHURN)
    target = subprocess.Popen([py, str(c), "8.5"], stdout=subprocess.PIPE, text=True)
    rec = target  # until bifocal starts
    try:
        runtime_up(target)
        rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--pid", str(target.pid),
                                "--duration", "7.5"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env())
        time.sleep(2.5)
        early = _rss_kb(rec.pid)
        time.sleep(4.5)
        late = _rss_kb(rec.pid)
        out, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        born = int(target.communicate(timeout=30)[0].strip())
    finally:
        for p in (target, rec):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert born > 1500, born  # churn really happened (~200-1300 threads/s here)
    assert late - early < 3072, (early, late, born)
    con = sqlite3.connect(db)
    nthreads = con.execute("SELECT count(*) FROM threads").fetchone()[0]
    con.close()
    assert nthreads > 500, nthreads  # and they were sampled


# ---- sealed import ----------------------------------------------------------------------------


@pytest.mark.parallel  # no file left at whatever moment the kill lands
def test_sealed_import_killed_leaves_no_plaintext(recorded, tmp_path):
    db, a, _ = recorded
    keys = tmp_path / "k"
    run(["keygen", "-o", str(keys)])
    sealed = tmp_path / "s.bfs"
    run(["export", str(a), "--format", "bifocal", "--encrypt-to", str(keys) + ".pub", "-o",
         str(sealed)], db=db)
    tmpd = tmp_path / "tmp"
    tmpd.mkdir()
    e = env()
    e["TMPDIR"] = str(tmpd)
    for delay in (0.0, 0.01, 0.03, 0.08):
        dst = tmp_path / ("d%s.db" % delay)
        p = subprocess.Popen([bifocal_bin(), "--db", str(dst), "import", str(sealed), "--key",
                              str(keys) + ".key"], env=e, cwd=str(tmpd),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert os.listdir(tmpd) == [], os.listdir(tmpd)
    # and a full import writes nothing but the destination
    r = run(["import", str(sealed), "--key", str(keys) + ".key"], db=str(tmp_path / "ok.db"),
            env={"TMPDIR": str(tmpd)})
    assert os.listdir(tmpd) == []
    assert r.stdout.strip()


# ---- Ctrl-Z during record --native ----------------------------------------------------------------

THREADS = """\
import sys, threading, time, zlib
data = bytes(1 << 15)
stop = time.monotonic() + float(sys.argv[1])
def work():
    while time.monotonic() < stop:
        zlib.compress(data, 6)
ts = [threading.Thread(target=work) for _ in range(2)]
for t in ts: t.start()
print("ready", flush=True)
work()
for t in ts: t.join()
print("done", flush=True)
"""


def test_sigtstp_releases_native_target(tmp_path):
    """Ctrl-Z (SIGTSTP) of `record --native` at 1000 Hz: while bifocal stands
    stopped, no thread of the target is traced or stopped (it was 7 of 9
    times before); SIGCONT resumes sampling and the session completes."""
    py = newest_python()
    db = str(tmp_path / "n.db")
    w = tmp_path / "t.py"
    w.write_text(THREADS)
    # the duration leaves room for three suspends on a loaded host: a record
    # that ends before the third one would be reaped by send_signal's poll()
    target = subprocess.Popen([py, str(w), "10"], stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    rec = None
    try:
        rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--native", "--rate", "1000",
                                "--pid", str(target.pid), "--duration", "8"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                               # its own process group under ours, as a shell's job: in an
                               # orphaned group (a CI runner's) the kernel discards a stop
                               # by SIGTSTP, so bifocal would rightly go on sampling
                               preexec_fn=lambda: os.setpgid(0, 0))
        wait_session(db, rec)
        for _ in range(3):
            time.sleep(0.4)
            rec.send_signal(signal.SIGTSTP)
            # wait until bifocal itself is stopped
            wait_until(lambda: task_states(rec.pid).get(rec.pid) == "T", 5,
                       what="bifocal to stop on SIGTSTP")
            # it released the target before it stopped (the same 0.2 s grace as ever)
            wait_until(lambda: traced_or_stopped(target.pid) == [], 0.2)
            assert traced_or_stopped(target.pid) == []
            rec.send_signal(signal.SIGCONT)
        out, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        s = sessions(db)[last_line_id(subprocess.CompletedProcess([], 0, out))]
        assert s["status"] == "complete" and s["samples"] > 100, s
        assert target.wait(timeout=30) == 0
        assert "done" in target.stdout.read()
    finally:
        if rec is not None and rec.poll() is None:
            rec.kill()
            rec.send_signal(signal.SIGCONT)
            rec.wait()
        if target.poll() is None:
            target.kill()
            target.wait()


# ---- errors: the thing, the cause, the fix, once ----------------------------------------------------


def copy_db(db, path):
    """A copy of the store db at path (SQLite's online backup); path as a str."""
    path = str(path)
    src, dst = sqlite3.connect(db), sqlite3.connect(path)
    src.backup(dst)
    src.close()
    dst.close()
    return path


def _one_line(r):
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, r
    return lines[0]


@pytest.mark.parallel  # a message
def test_error_corrupt_chunk(recorded, tmp_path):
    db, a, _ = recorded
    bad = copy_db(db, tmp_path / "bad.db")
    dst = sqlite3.connect(bad)
    dst.execute("UPDATE sample_chunks SET data=x'ffffffffffffffffffff01' "
                "WHERE id=(SELECT min(id) FROM sample_chunks WHERE session_id=?)", (a,))
    dst.commit()
    dst.close()
    out = str(tmp_path / "red.db")
    line = _one_line(run(["redact", str(a), "-o", out], db=bad, check=False))
    assert "sample chunk of session %d is corrupt" % a in line and "again" in line, line
    assert not os.path.exists(out)
    keys = tmp_path / "k"
    run(["keygen", "-o", str(keys)])
    line = _one_line(run(["export", str(a), "--format", "bifocal", "--encrypt-to",
                          str(keys) + ".pub", "-o", str(tmp_path / "s.bfs")], db=bad, check=False))
    assert "is corrupt" in line, line
    assert leftovers(tmp_path) == []


@pytest.mark.parallel  # a message
@pytest.mark.parametrize("version", [0, -1])
def test_error_schema_version_reset(recorded, tmp_path, version):
    db, a, _ = recorded
    bad = copy_db(db, tmp_path / "v.db")
    dst = sqlite3.connect(bad)
    dst.execute("PRAGMA user_version=%d" % version)
    dst.commit()
    dst.close()
    for args in (["sessions"], ["import", "/dev/null"]):
        line = _one_line(run(args, db=bad, check=False))
        assert "schema version %d" % version in line and "PRAGMA user_version=" in line, line
        assert "already exists" not in line


@pytest.mark.parallel  # a message
def test_error_read_only_directory(recorded, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for a read-only bind mount")
    db, a, _ = recorded
    src = tmp_path / "src"
    src.mkdir()
    copy_db(db, src / "r.db")
    ro = tmp_path / "ro"
    ro.mkdir()
    r = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot bind-mount: %s" % r.stderr.strip())
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        rdb = str(ro / "r.db")
        # readers work (the file is fully checkpointed: read as immutable)
        assert str(a) in run(["sessions"], db=rdb).stdout
        line = _one_line(run(["import", "/dev/null"], db=rdb, check=False))
        assert "directory" in line and "not writable" in line and "move the database" in line, line
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


@pytest.mark.parallel  # a message
def test_error_old_pythons(tmp_path):
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    olds = sorted(glob.glob(os.path.join(root or "/nonexistent", "versions", "[23].[0-7].*", "bin",
                                         "python[23].[0-9]")))
    if not olds:
        pytest.skip("no Python older than 3.8 under pyenv (2.7/3.6/3.7 are tested when present)")
    for exe in olds:
        ver = ".".join(os.path.basename(exe)[6:].split(".")[:2])
        p = subprocess.Popen([exe, "-c", "import sys, time\nsys.stdout.write('ready\\n')\n"
                              "sys.stdout.flush()\ntime.sleep(5)"], stdout=subprocess.PIPE,
                             universal_newlines=True)
        try:
            assert p.stdout.readline().strip() == "ready"  # the interpreter runs
            line = _one_line(run(["dump", str(p.pid)], check=False))
            assert "unsupported Python version %s" % ver in line and "3.8" in line, (exe, line)
        finally:
            p.kill()
            p.wait()


@pytest.mark.parallel  # a message
def test_error_zombie(tmp_path):
    p = subprocess.Popen(["true"])
    # not reaped yet: a zombie
    wait_until(lambda: task_states(p.pid).get(p.pid) == "Z", 5, what="a zombie")
    try:
        line = _one_line(run(["dump", str(p.pid)], check=False))
        assert "zombie" in line and "has exited" in line, line
    finally:
        p.wait()


@pytest.mark.parallel  # a message (the lock is held 8 s, past the import's wait)
def test_error_lock_once(recorded, tmp_path):
    db, a, _ = recorded
    mine = copy_db(db, tmp_path / "l.db")
    lk = tmp_path / "lock.py"
    lk.write_text(LOCKER)
    holder = subprocess.Popen([sys.executable, str(lk), mine, "8"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        col = tmp_path / "c.txt"
        col.write_text("main;work 10\n")
        line = _one_line(run(["import", str(col)], db=mine, check=False))
        assert "locked by another process" in line and "try again" in line, line
    finally:
        holder.kill()
        holder.wait()


def _seal(pub_path, db_bytes):
    """A sealed export made here (libsodium through ctypes), as any holder of
    the public key could: BFSEAL1, fingerprint, sealed box of a compressed db."""
    import base64
    import ctypes
    import ctypes.util
    import struct
    import zlib
    name = ctypes.util.find_library("sodium")
    if not name:
        pytest.skip("libsodium not found for ctypes")
    na = ctypes.CDLL(name)
    assert na.sodium_init() >= 0
    pk = base64.b64decode(open(pub_path).read().split()[1])
    fpr = ctypes.create_string_buffer(8)
    na.crypto_generichash(fpr, ctypes.c_size_t(8), pk, ctypes.c_ulonglong(32), None, ctypes.c_size_t(0))
    plain = b"BFSESS1\0" + struct.pack("<Q", len(db_bytes)) + zlib.compress(db_bytes)
    box = ctypes.create_string_buffer(len(plain) + 48)
    assert na.crypto_box_seal(box, plain, ctypes.c_ulonglong(len(plain)), pk) == 0
    return b"BFSEAL1\n" + fpr.raw + box.raw


@pytest.mark.parallel  # a message
def test_error_corrupt_sealed_chunk(recorded, tmp_path):
    """A sealed file whose enclosed session has a corrupt chunk: one line
    naming the file and the cause (it used to print "'x.bfs': ; nothing
    imported"), and the database is left as it was."""
    db, a, _ = recorded
    keys = tmp_path / "k"
    run(["keygen", "-o", str(keys)])
    one = str(tmp_path / "one.db")
    run(["redact", str(a), "-o", one], db=db)  # a one-session database
    c = sqlite3.connect(one)
    c.execute("UPDATE sample_chunks SET data=x'ffffffffffffffffffff01' "
              "WHERE id=(SELECT min(id) FROM sample_chunks)")
    c.commit()
    c.close()
    sealed = tmp_path / "c_chunk.bfs"
    sealed.write_bytes(_seal(str(keys) + ".pub", open(one, "rb").read()))
    dst = str(tmp_path / "dst.db")
    run(["import", "/dev/null"], db=dst, check=False)  # create it
    before = run(["sessions", "--json"], db=dst, check=False).stdout
    line = _one_line(run(["import", str(sealed), "--key", str(keys) + ".key"], db=dst, check=False))
    assert "c_chunk.bfs" in line and "corrupt" in line and "nothing imported" in line, line
    assert run(["sessions", "--json"], db=dst, check=False).stdout == before


# ---- smaller promises ----------------------------------------------------------------------------


def test_killed_capture_counts_its_chunks(tmp_path):
    """A capture killed with SIGKILL never finalised its row; `sessions` shows
    the samples its chunks hold, not 0."""
    py = newest_python()
    db = str(tmp_path / "k.db")
    p = tmp_path / "forever.py"
    p.write_text(FOREVER)
    rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--", py, str(p)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(),
                           start_new_session=True)
    try:
        wait_session(db, rec)
        time.sleep(2.0)  # chunks are written about once a second
    finally:
        os.killpg(rec.pid, signal.SIGKILL)
        rec.wait()
    s = sessions(db)[1]
    con = sqlite3.connect(db)
    in_chunks = con.execute("SELECT sum(n_samples) FROM sample_chunks WHERE session_id=1").fetchone()[0]
    con.close()
    assert s["status"] == "incomplete" and in_chunks and s["samples"] == in_chunks, (s, in_chunks)


@pytest.mark.parallel  # files and their content, no rate
def test_readers_leave_no_wal_files(recorded, tmp_path):
    db, a, _ = recorded
    mine = copy_db(db, tmp_path / "r.db")
    assert not os.path.exists(mine + "-wal")
    run(["sessions"], db=mine)
    run(["replay", str(a)], db=mine)
    r = run(["replay", "999"], db=mine, check=False)  # fails
    assert r.returncode != 0
    assert sorted(os.listdir(tmp_path)) == ["r.db"], os.listdir(tmp_path)


@pytest.mark.parallel  # file modes
def test_lua_out_files_are_private(recorded, tmp_path):
    db, _, _ = recorded
    out = tmp_path / "out"
    out.mkdir()
    s = tmp_path / "w.lua"
    s.write_text('local f = io.open(bifocal.out_dir .. "/report.txt", "w")\nf:write("x")\nf:close()\n'
                 'io.output(bifocal.out_dir .. "/second.txt")\nio.write("y")\nio.close()\n')
    old = os.umask(0o022)
    try:
        r = run(["run", "--out", str(out), str(s)], db=db, check=False)
    finally:
        os.umask(old)
    assert r.returncode == 0, r
    for name in ("report.txt", "second.txt"):
        assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o600, name
