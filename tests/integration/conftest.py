"""Shared fixtures: the bifocal binary, the interpreters present, a scratch DB;
polling helpers (wait_until and friends) in place of fixed sleeps; the markers
that keep timing-sensitive tests out of the parallel run (see SERIAL_FILES)."""
import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pythons  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def bifocal_bin():
    b = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    if not os.access(b, os.X_OK):
        pytest.exit("bifocal binary not found at %s (build first or set BIFOCAL_BIN)" % b, 2)
    return b


@pytest.fixture(scope="session")
def bifocal():
    return bifocal_bin()


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "t.db")


def run(args, db=None, check=True, timeout=120, input=None, env=None):
    """Run bifocal with args; returns CompletedProcess (text)."""
    cmd = [bifocal_bin()]
    if db:
        cmd += ["--db", db]
    cmd += list(args)
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    if env:
        e.update(env)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input, env=e)
    if check and r.returncode != 0:
        raise AssertionError("bifocal %s failed (%d):\nstdout:%s\nstderr:%s" %
                             (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


class Tmux:
    """cmd in a detached tmux session of its own server (socket TAG-PID),
    width x height, TERM=xterm: screen() is what it shows, keys(*k) sends
    tmux send-keys words, resize(w, h); leaving the `with` kills the server."""

    def __init__(self, tag, cmd, width, height):
        import shutil
        self.tmux, self.sock = shutil.which("tmux"), "%s-%d" % (tag, os.getpid())
        subprocess.run([self.tmux, "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", str(width), "-y", str(height), cmd], check=True, env=dict(os.environ, TERM="xterm"))

    def screen(self):
        return subprocess.run([self.tmux, "-L", self.sock, "capture-pane", "-p", "-t", "t"], capture_output=True,
                              text=True).stdout

    def keys(self, *k):
        subprocess.run([self.tmux, "-L", self.sock, "send-keys", "-t", "t"] + list(k), check=True)

    def resize(self, width, height):
        subprocess.run([self.tmux, "-L", self.sock, "resize-window", "-t", "t", "-x", str(width), "-y", str(height)],
                       check=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run([self.tmux, "-L", self.sock, "kill-server"], capture_output=True)


def wait_until(pred, timeout=10.0, what=None, interval=0.01):
    """Poll pred() until it returns something true, and return that. Polls
    every `interval` s at first, backing off to 0.1 s. After `timeout` seconds
    raise AssertionError naming `what` (the condition waited for), or return
    the last false value when what is None and the caller checks it."""
    deadline = time.monotonic() + timeout
    wait = interval
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            if what is None:
                return v
            raise AssertionError("timed out after %g s waiting for %s" % (timeout, what))
        time.sleep(wait)
        wait = min(wait * 2, 0.1)


def wait_session(db, proc=None, timeout=30):
    """Wait until db holds a session (a capture has begun: its row is written
    once recording started); fail early if proc (a Popen) exits first."""
    def ready():
        if proc is not None and proc.poll() is not None:
            raise AssertionError("bifocal exited (%s) before a session appeared" % proc.returncode)
        r = run(["sessions", "--json"], db=db, check=False)
        return r.returncode == 0 and r.stdout.strip().startswith("[{")
    wait_until(ready, timeout, what="a session in %s" % db, interval=0.05)


def task_files(pid, name):
    """{tid: text of /proc/PID/task/TID/<name>} for every thread of pid;
    threads that vanish while read are left out."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/%s" % (pid, tid, name)) as f:
                out[int(tid)] = f.read()
        except OSError:
            continue
    return out


def task_states(pid):
    """{tid: state letter} of every thread of pid (/proc/PID/task/TID/stat)."""
    out = {}
    for tid, text in task_files(pid, "stat").items():
        try:
            out[tid] = text.rsplit(")", 1)[1].split()[0]
        except IndexError:
            continue
    return out


def task_cpu_ns(pid):
    """CPU time (ns, user + system) all threads of pid have run so far
    (/proc/PID/task/TID/schedstat)."""
    total = 0
    for text in task_files(pid, "schedstat").values():
        try:
            total += int(text.split()[0])
        except (ValueError, IndexError):
            continue
    return total


def pidns_start(args, timeout=10):
    """Start args (an interpreter, then its arguments) as pid 1 of its own PID
    namespace (`unshare --pid --fork --mount-proc`, root only); returns (the
    unshare Popen, the interpreter's host pid). The caller kills and waits
    for the Popen when done (also on failure)."""
    u = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc"] + list(args))
    pid, give_up = None, time.monotonic() + timeout
    while pid is None and time.monotonic() < give_up:  # unshare's child is the interpreter
        try:
            with open("/proc/%d/task/%d/children" % (u.pid, u.pid)) as f:
                kids = f.read().split()
            if kids and "python" in os.readlink("/proc/%s/exe" % kids[0]):
                pid = int(kids[0])
        except OSError:
            pass
        if pid is None:
            time.sleep(0.02)
    if pid is None:
        u.kill()
        u.wait()
        raise AssertionError("the workload never started under unshare: %s" % " ".join(args))
    return u, pid


def traced_or_stopped(pid):
    """[(tid, state, tracer pid)] of pid's threads that still have a tracer
    or stand stopped ('t'/'T'); [] when none."""
    bad = []
    for tid, st in sorted(task_files(pid, "status").items()):
        fields = dict(line.split(":", 1) for line in st.splitlines() if ":" in line)
        state = fields.get("State", "").split()[0]
        if fields.get("TracerPid", "0").strip() != "0" or state in ("t", "T"):
            bad.append((str(tid), state, fields.get("TracerPid", "").strip()))
    return bad


# A parent that runs a busy child process: the subprocess-tree workload of
# test_sampler.py and test_cli.py.
SUBPROCESS_TREE = '''\
import subprocess, sys
CHILD = """
import time
def child_busy():
    end = time.time() + 0.8
    while time.time() < end:
        pass
child_busy()
"""
def parent_wait():
    subprocess.run([sys.executable, "-c", CHILD], check=True)
parent_wait()
'''


def tracer_of(pid):
    """TracerPid of pid's main thread (0 when none), or None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0


def wait_expired(db, sid, timeout=30):
    """Wait until session sid's --ttl has passed by the wall clock (what gc
    compares expires_at_ns with)."""
    r = run(["sessions", "--json"], db=db)
    exp = [x for x in json.loads(r.stdout) if x["id"] == sid][0]["expires_at_ns"]
    assert exp > 0, "session %d has no expiry" % sid
    wait_until(lambda: time.time_ns() > exp, timeout, what="session %d to expire" % sid)


def last_line_id(r):
    return int(r.stdout.strip().splitlines()[-1])


def pytest_generate_tests(metafunc):
    if "python" in metafunc.fixturenames:
        ps = pythons.discover()
        metafunc.parametrize("python", [p["path"] for p in ps], ids=[p["tag"] + ":" + ("sid" if p.get("container") else os.path.basename(os.path.dirname(os.path.dirname(p["path"])))) for p in ps])


# Files whose tests hold figures that depend on the CPU the host leaves them
# (achieved rates, CPU shares beside hogs, torn-stack rates, slowdowns,
# coverage): they run alone, one at a time, after the parallel part
# (tests/run_pytest.sh serial). A test elsewhere can ask for the same with
# @pytest.mark.serial; a test in one of these files that holds no such figure
# says so with @pytest.mark.parallel (and why) and runs in the parallel part.
# Everything else must pass on a busy host (the parallel part is one): poll
# for states (wait_until), judge CPU-time targets by CPU time
# (test_views_bench.py), stopped targets by the CPU they use (test_native.py).
SERIAL_FILES = {
    "test_asyncio_tasks.py",      # slowdown and per-task shares
    "test_asyncio_pytasks.py",    # per-task shares (pure-Python Tasks)
    "test_calibrate.py",          # coverage of sampled vs traced shares
    "test_consistent_stacks.py",  # torn-stack rates beside CPU hogs
    "test_cpu_clock.py",          # CPU shares against the workload's own clock
    "test_kernel_lens.py",        # kernel-state shares against each thread's own schedstat, CPU hogs
    "test_memory_far.py",         # memory growth shares against the workload's own statm
    "test_modes_exception.py",    # time in handlers against the workload's own clock
    "test_reliability.py",        # achieved rate under a lock, RSS over time, Ctrl-Z
    "test_sampler.py",            # achieved rates, missed ticks, dump timing
}

# The parallel part (pytest-xdist --dist loadgroup) hands out single tests,
# except that the tests of a file sharing a module-scoped fixture, or a
# module-level _CACHE of recordings (test_asyncio_tasks.py's way), go to one
# worker together (built once). Files holding its longest work start first,
# so that none is left to run alone at the end.
LONGEST_FIRST = ("test_views_bench.py", "test_demo.py", "test_cli.py", "test_native.py")


# A test whose path does not depend on the interpreter (a CPU clock, a /proc
# read, a command line, a pusher reading the database: the interpreter only
# through the sampler's or the tracer's per-version reads, which other tests
# check on every interpreter) says so with @pytest.mark.few_pythons and runs
# on figure_tags() only: the oldest interpreter (3.8-3.10's frames, a
# thread's tid in glibc's pthread, the setprofile tracer), 3.12 (the last
# vendored offset table, 3.11+'s frames, the first sys.monitoring tracer) and
# the sid root's 3.14 and 3.15 (_Py_DebugOffsets, another root); the others
# skip it and say why (suite time). A test that depends on a version's
# offsets (asyncio task offsets, exception state, the torn-stack check's
# opcode classes, function identity) stays on every interpreter.
FIGURE_TAGS = ("3.12", "3.14", "3.15")


def figure_tags():
    """The tags few_pythons tests run on: FIGURE_TAGS and the oldest found."""
    ps = pythons.discover()
    return sorted({ps[0]["tag"]} | set(FIGURE_TAGS), key=lambda t: tuple(int(x) for x in t.split("."))) if ps \
        else list(FIGURE_TAGS)


def _figure_skipped(item):
    """Is item a few_pythons test parametrized with an interpreter outside figure_tags()?"""
    if not item.get_closest_marker("few_pythons"):
        return False
    spec = getattr(item, "callspec", None)
    py = spec.params.get("python") if spec else None
    tags = [p["tag"] for p in pythons.discover() if p["path"] == py]
    return bool(tags) and tags[0] not in figure_tags()


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: timing-sensitive; runs alone after the parallel part")
    config.addinivalue_line("markers", "few_pythons: the same path on every interpreter: runs on the oldest, "
                            "3.12, 3.14 and 3.15 (conftest.figure_tags())")
    config.addinivalue_line("markers", "parallel: in a SERIAL_FILES file, but holds no timing figure: "
                            "runs in the parallel part")


def _shares_a_wide_fixture(item):
    if isinstance(getattr(getattr(item, "module", None), "_CACHE", None), dict):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if defs and defs[-1].scope in ("class", "module", "package"):
            return True
    return False


def _second_311(item):
    """Is item parametrized with Debian's python3.11 while pyenv's 3.11 is here too?"""
    spec = getattr(item, "callspec", None)
    py = spec.params.get("python") if spec else None
    if py != "/usr/bin/python3.11":
        return False
    return any(p["path"] != py and p["tag"] == "3.11" for p in pythons.discover())


@pytest.hookimpl(tryfirst=True)  # before -m selects and xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = os.path.basename(str(item.fspath))
        if name in SERIAL_FILES and not item.get_closest_marker("parallel"):
            item.add_marker("serial")
        if item.get_closest_marker("serial") and _second_311(item):
            item.add_marker(pytest.mark.skip(reason="timing figures on 3.11 are held by pyenv's 3.11; Debian's "
                                             "3.11 runs the parallel part (suite time)"))
        elif _figure_skipped(item):
            item.add_marker(pytest.mark.skip(reason="the same path on every interpreter: held by %s "
                                             "(conftest.figure_tags(); suite time)" % ", ".join(figure_tags())))
        if _shares_a_wide_fixture(item):
            item.add_marker(pytest.mark.xdist_group(name))
    first = {n: i for i, n in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: first.get(os.path.basename(str(it.fspath)), len(first)))


def session_row(db, sid):
    """Session sid's row of the sessions table, its extra_json parsed as "extra"."""
    import sqlite3
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    r = dict(con.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())
    con.close()
    r["extra"] = json.loads(r["extra_json"]) if r.get("extra_json") else {}
    return r
