"""Python-level thread names (threading.Thread.name) as the external sampler
reads them from every interpreter present: `dump`, `top`, and the thread list
of a recorded session (a thread started during the recording included), with
the OS name (/proc comm) as the fallback for threads threading does not know.
"""
import contextlib
import json
import os
import re
import subprocess
import sys
import time

from conftest import ROOT, bifocal_bin, last_line_id, run

DBSTAT = os.path.join(os.path.dirname(os.environ.get("BIFOCAL_BIN") or
                                      os.path.join(ROOT, "build", "bifocal")),
                      "sampling", "test_smp_dbstat")

NAMED = ["MainThread", "worker-a", "io-loop-\u00df", "bg-daemon",
         "ThreadPoolExecutor-0_0"]

TARGET = '''\
import _thread, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

stop = threading.Event()

def idle(ev):
    ev.wait()

def busy(ev):
    x = 0
    while not ev.is_set():
        x += 1

threading.Thread(target=busy, args=(stop,), name="worker-a").start()
threading.Thread(target=idle, args=(stop,), name="io-loop-\\u00df").start()
threading.Thread(target=idle, args=(stop,), name="bg-daemon", daemon=True).start()
pool = ThreadPoolExecutor(1)
pool.submit(idle, stop)
# a thread threading does not know: only its OS name can be shown
raw = []
_thread.start_new_thread(lambda: raw.append(_thread.get_native_id() if hasattr(_thread, "get_native_id") else 0) or stop.wait(), ())
while not raw:
    time.sleep(0.01)
print("ready %d" % raw[0], flush=True)
late_after = float(sys.argv[1])
if late_after > 0:
    time.sleep(late_after)
    threading.Thread(target=idle, args=(stop,), name="late-worker").start()
    print("late", flush=True)
time.sleep(float(sys.argv[2]))
stop.set()
pool.shutdown()
'''


def start(python, tmp_path, late_after=0.0, life=60.0):
    path = tmp_path / "names_target.py"
    path.write_text(TARGET, encoding="utf-8")
    proc = subprocess.Popen([python, str(path), str(late_after), str(life)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    assert line and line[0] == "ready", line
    return proc, int(line[1])


def stop(proc):
    proc.kill()
    proc.wait()
    proc.stdout.close()


def comm(pid, tid):
    with open("/proc/%d/task/%d/comm" % (pid, tid)) as f:
        return f.read().strip()


def dbstat(db, sid):
    r = subprocess.run([DBSTAT, db, str(sid)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def test_dump_shows_python_names(python, tmp_path):
    proc, raw_tid = start(python, tmp_path)
    try:
        out = run(["dump", str(proc.pid)]).stdout
        heads = re.findall(r'^Thread (\d+) "([^"]*)" \((.*)\)$', out, re.M)
        names = {int(tid): name for tid, name, _ in heads}
        for want in NAMED:
            assert want in names.values(), (want, out)
        assert names[proc.pid] == "MainThread", out
        # the OS name is shown too where it differs from the Python name
        main = [rest for tid, _, rest in heads if int(tid) == proc.pid][0]
        assert 'OS name "%s"' % comm(proc.pid, proc.pid) in main, out
        # a _thread thread is not in threading._active: its OS name stands
        if raw_tid:
            assert names[raw_tid] == comm(proc.pid, raw_tid), out
    finally:
        stop(proc)


def test_top_shows_python_names(python, tmp_path):
    proc, _ = start(python, tmp_path)
    try:
        out = run(["top", str(proc.pid), "--duration", "0.5"]).stdout
        for want in NAMED:
            assert want in out, (want, out)
    finally:
        stop(proc)


def test_record_names_threads(python, db, tmp_path):
    """Threads present at attach and one started a second into the recording
    are stored under their Python names; the thread list of the session (and
    the views naming threads) show them."""
    proc, raw_tid = start(python, tmp_path, late_after=1.0)
    try:
        r = run(["record", "--pid", str(proc.pid), "--duration", "3"], db=db)
        sid = last_line_id(r)
        assert proc.stdout.readline().strip() == "late"
    finally:
        stop(proc)
    names = [t["name"] for t in dbstat(db, sid)]
    for want in NAMED + ["late-worker"]:
        assert want in names, "%s not in %s" % (want, [(t["tid"], t["name"], t["samples"]) for t in dbstat(db, sid)])
    if raw_tid:
        assert any(t["tid"] == raw_tid and t["name"] for t in dbstat(db, sid)), names
    gil = run(["replay", str(sid), "--view", "gil"], db=db).stdout
    for want in ["MainThread", "worker-a", "io-loop-\u00df", "late-worker"]:
        assert want in gil, (want, gil)
    out = str(tmp_path / "s.json")
    run(["export", str(sid), "--format", "speedscope", "-o", out], db=db)
    with open(out, encoding="utf-8") as f:
        sp = f.read()
    assert "worker-a" in sp and ("io-loop-\\u00df" in sp or "io-loop-\u00df" in sp), sp[:2000]


def test_no_threading_module(python, tmp_path):
    """A target that never imports threading has no Python names: the OS
    name is shown, nothing fails."""
    path = tmp_path / "plain.py"
    path.write_text("import sys, time\n"
                    "print('threading' if 'threading' in sys.modules else 'ready', flush=True)\n"
                    "time.sleep(60)\n")
    proc = subprocess.Popen([python, "-S", str(path)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        if line == "threading":  # the interpreter imported threading itself
            return
        assert line == "ready", line
        out = run(["dump", str(proc.pid)]).stdout
        assert 'Thread %d "%s" (ident' % (proc.pid, comm(proc.pid, proc.pid)) in out, out
    finally:
        stop(proc)


def test_live_threads_view_shows_python_names(tmp_path):
    """`live` on a pseudo-terminal: press t for the thread table, which names
    threads by their Python names, then q. One interpreter is enough: the
    names come from the same reader the tests above cover everywhere."""
    import pty
    import select
    import signal
    sys.path.insert(0, os.path.dirname(__file__))
    import pythons
    python = pythons.discover()[-1]["path"]
    proc, _ = start(python, tmp_path)
    master, slave = pty.openpty()
    live = subprocess.Popen([bifocal_bin(), "--db", str(tmp_path / "l.db"), "live", str(proc.pid)],
                            stdin=slave, stdout=slave, stderr=subprocess.PIPE, close_fds=True)
    os.close(slave)
    screen = b""

    def drain(secs):
        nonlocal screen
        end = time.time() + secs
        while time.time() < end:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    screen += os.read(master, 65536)
                except OSError:
                    return
    try:
        drain(1.5)
        os.write(master, b"t")
        screen = b""
        drain(2.0)  # the screen is redrawn every half second
        text = screen.decode("utf-8", "replace")
        for want in ["MainThread", "worker-a", "io-loop-\u00df", "bg-daemon"]:
            assert want in text, (want, text[-2000:])
        assert "busy thread-samples" in text
        os.write(master, b"q")
        live.wait(timeout=20)
        assert live.returncode == 0, live.stderr.read()
    finally:
        if live.poll() is None:
            live.send_signal(signal.SIGINT)
            live.wait(timeout=10)
        os.close(master)
        stop(proc)


RENAME_TARGET = '''\
import sys, threading
stop = threading.Event()
t = threading.Thread(target=stop.wait, name="before-rename")
t.start()
print("ready", flush=True)
sys.stdin.readline()
t.name = "a-very-long-thread-name-xyz"  # from another thread: the OS name stays
print("renamed", flush=True)
sys.stdin.readline()
stop.set()
'''


@contextlib.contextmanager
def rename_target(python, tmp_path):
    """RENAME_TARGET running under python, once it said "ready": a newline on
    its stdin renames the thread, then it says "renamed". Killed at the end."""
    path = tmp_path / "rename_target.py"
    path.write_text(RENAME_TARGET, encoding="utf-8")
    proc = subprocess.Popen([python, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stdin.close()


def test_dump_follows_a_rename(python, tmp_path):
    """A thread renamed from another thread keeps its OS name (threading
    renames the OS thread only from itself, 3.14+) and the new name is longer
    than the OS's 15 bytes: dump shows threading's name, the new one after
    the rename, whole."""
    with rename_target(python, tmp_path) as proc:
        before = run(["dump", str(proc.pid)]).stdout
        assert '"before-rename"' in before, before
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "renamed"
        after = run(["dump", str(proc.pid)]).stdout
        heads = re.findall(r'^Thread (\d+) "([^"]*)" \((.*)\)$', after, re.M)
        renamed = [(tid, rest) for tid, name, rest in heads if name == "a-very-long-thread-name-xyz"]
        assert renamed, after
        # the OS never got the new name (3.14+ set it at start, older ones never)
        assert comm(proc.pid, int(renamed[0][0])) != "a-very-long-thread-name-xyz"
        assert not re.search(r'^Thread \d+ "before-rename"', after, re.M), after


def test_top_follows_a_rename(python, tmp_path):
    """top (and live, same table) shows a thread's new name once threading
    renamed it during the run: names are looked up again every 2 s."""
    with rename_target(python, tmp_path) as proc:
        top = subprocess.Popen([bifocal_bin(), "top", str(proc.pid), "--duration", "4", "--idle"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "renamed"
        out, err = top.communicate(timeout=60)
        assert top.returncode == 0, err
        assert "a-very-long-thread-name-xyz" in out and "before-rename" not in out, out
