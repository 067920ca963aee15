"""The external sampler on every interpreter present: accuracy of a known CPU
split, idle marking, function identity, dump, and failure behaviour.

Tolerances: the sampled share of busy_a within busy_a+busy_b must be within
TOL_POINTS percentage points of the split the workload measures on itself
(time.thread_time per function); a sleeping thread must be >= 90% idle.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (ROOT, SUBPROCESS_TREE, bifocal_bin, last_line_id, run, task_cpu_ns, task_states, wait_session,
                      wait_until)
import pythons

TOL_POINTS = 7.0
DBSTAT = os.path.join(os.path.dirname(os.environ.get("BIFOCAL_BIN") or
                                      os.path.join(ROOT, "build", "bifocal")),
                      "sampling", "test_smp_dbstat")

WORK = '''\
import sys, threading, time

def busy_a(n):
    x = 0
    for i in range(n):
        x += i
    return x

def busy_b(n):
    x = 0
    for i in range(n):
        x += i
    return x

class K:
    def meth(self, dur):
        spent = {"a": 0.0, "b": 0.0}
        end = time.monotonic() + dur
        while time.monotonic() < end:
            t0 = time.thread_time()
            busy_a(7000)
            t1 = time.thread_time()
            busy_b(3000)
            t2 = time.thread_time()
            spent["a"] += t1 - t0
            spent["b"] += t2 - t1
        return spent

def sleeper():
    while True:
        time.sleep(10)

threading.Thread(target=sleeper, name="sleepy", daemon=True).start()
spent = K().meth(float(sys.argv[1]))
print("SPLIT %.4f" % (spent["a"] / (spent["a"] + spent["b"])))
'''

DUMPEE = '''\
import sys, time

def inner():
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    time.sleep(120)

def outer():
    inner()

outer()
'''


def line_of(src, text):
    for i, l in enumerate(src.splitlines(), 1):
        if text in l:
            return i
    raise AssertionError(text)


def version_of(python):
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.split()
    return tuple(int(x) for x in out)


def dbstat(db, sid):
    r = subprocess.run([DBSTAT, db, str(sid)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def functions(db, sid):
    r = run(["replay", str(sid), "--view", "functions", "--json", "--limit", "1000"], db=db)
    return json.loads(r.stdout)


def session(db, sid):
    return functions(db, sid)["session"]


@pytest.fixture
def work(tmp_path):
    p = tmp_path / "work.py"
    p.write_text(WORK)
    return str(p)


def record_split(python, db, work):
    """One cpu-clock capture of the workload: (session id, truth, functions view)."""
    # 1.5 s of the workload (was 3.0): ~1500 on-CPU samples at 1 kHz, a binomial
    # standard error of sqrt(0.7 * 0.3 / 1500) = 1.2 points on the 70:30 split,
    # so TOL_POINTS (7) is ~6 of them (the worst capture seen, ~4 sd, is 4.7
    # points at this length); a +-1 ms tick is 0.07% of the run
    r = run(["record", "--clock", "cpu", "--label", "split", "--", python, work, "1.5"], db=db)
    sid = last_line_id(r)
    truth = float([l for l in r.stdout.splitlines() if l.startswith("SPLIT")][0].split()[1])
    return sid, truth, functions(db, sid)


def split_of(fv, work):
    by = {f["qualname"]: f for f in fv["functions"] if f["file"] == work}
    a, b = by["busy_a"]["self_samples"], by["busy_b"]["self_samples"]
    return 100.0 * a / (a + b), a, b


def test_cpu_split_and_identity(python, db, work):
    sid, truth, fv = record_split(python, db, work)
    # One more capture when the first is off: on a heavily loaded 2-CPU machine
    # a capture was seen ~4 sd away once in several hundred; two in a row
    # would be a real bias.
    if abs(split_of(fv, work)[0] - 100.0 * truth) > TOL_POINTS:
        sid, truth, fv = record_split(python, db, work)
    s = fv["session"]
    assert s["kind"] == "sampled" and s["clock"] == "cpu" and s["mode"] == "all"
    assert s["status"] == "complete" and s["label"] == "split"
    assert s["python"].startswith("%d.%d." % version_of(python))
    assert s["pid"] > 0 and work in s["command"]
    by = {f["qualname"]: f for f in fv["functions"] if f["file"] == work}
    a, b = by["busy_a"]["self_samples"], by["busy_b"]["self_samples"]
    assert a + b >= 150, (a, b)
    share = 100.0 * a / (a + b)
    assert abs(share - 100.0 * truth) <= TOL_POINTS, (share, truth, a, b)
    # function identity: (file, qualname, firstlineno) of the code objects
    assert by["busy_a"]["firstlineno"] == line_of(WORK, "def busy_a")
    assert by["busy_b"]["firstlineno"] == line_of(WORK, "def busy_b")
    meth = "K.meth" if version_of(python) >= (3, 11) else "meth"
    assert by[meth]["firstlineno"] == line_of(WORK, "def meth")
    assert by["<module>"]["firstlineno"] == 1
    # current lines fall inside the functions' bodies
    for t in dbstat(db, sid):
        for leaf in t["leaves"]:
            if leaf["file"] == work and leaf["qualname"] == "busy_a":
                assert line_of(WORK, "def busy_a") <= leaf["line"] <= line_of(WORK, "def busy_a") + 4


def test_wall_idle_thread(python, db, work):
    r = run(["record", "--clock", "wall", "--rate", "500", "--", python, work, "1.0"], db=db)
    sid = last_line_id(r)
    threads = dbstat(db, sid)
    assert len(threads) == 2, threads
    sleepy = [t for t in threads if any(l["qualname"] == "sleeper" for l in t["leaves"])]
    busy = [t for t in threads if t not in sleepy]
    assert len(sleepy) == 1 and len(busy) == 1
    sl, bu = sleepy[0], busy[0]
    assert sl["samples"] >= 100
    assert sl["idle"] >= 0.9 * sl["samples"], sl
    assert bu["on_cpu"] >= 0.5 * bu["samples"], bu
    assert bu["gil"] >= 0.5 * bu["samples"], bu  # the busy thread holds the GIL
    assert sl["gil"] <= 0.1 * sl["samples"], sl
    s = session(db, sid)
    assert s["clock"] == "wall" and s["rate_hz"] == 500
    assert s["achieved_rate_hz"] > 100
    assert s["invalid"] <= 0.01 * s["samples"] + 5


@pytest.mark.parallel  # every sample is a GIL holder's: no rate or share
def test_gil_mode(python, db, work):
    r = run(["record", "--gil", "--rate", "500", "--", python, work, "0.6"], db=db)
    sid = last_line_id(r)
    assert session(db, sid)["mode"] == "gil"
    threads = dbstat(db, sid)
    total = sum(t["samples"] for t in threads)
    assert total > 0 and sum(t["gil"] for t in threads) == total


def start_dumpee(python, tmp_path):
    p = tmp_path / "dumpee.py"
    p.write_text(DUMPEE)
    proc = subprocess.Popen([python, str(p)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    # let it reach time.sleep(): nothing after the flush can block but that
    wait_until(lambda: task_states(proc.pid).get(proc.pid) == "S", 10, what="the dumpee to sleep")
    return proc, str(p)


@pytest.mark.parallel  # a stack of a sleeping target
def test_dump(python, tmp_path):
    proc, path = start_dumpee(python, tmp_path)
    try:
        r = run(["dump", str(proc.pid)])
        out = r.stdout
        assert "Process %d: Python %d.%d" % ((proc.pid,) + version_of(python)) in out
        want = ['File "%s", line %d, in <module>' % (path, len(DUMPEE.splitlines())),
                'File "%s", line %d, in outer' % (path, line_of(DUMPEE, "    inner()")),
                'File "%s", line %d, in inner' % (path, line_of(DUMPEE, "time.sleep(120)"))]
        pos = [out.find(w) for w in want]
        assert all(p >= 0 for p in pos), out
        assert pos == sorted(pos), out  # outermost first, like a traceback
        assert "Thread %d" % proc.pid in out and "idle" in out
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parallel  # status, commit, ttl, a 0.5 s capture under 3 s; any samples
def test_record_attach_duration_and_target_exit(python, db, tmp_path):
    proc, _ = start_dumpee(python, tmp_path)
    try:
        r = run(["record", "--pid", str(proc.pid), "--duration", "0.5", "--commit", "abc1234",
                 "--ttl", "1h"], db=db)
        s = session(db, last_line_id(r))
        assert s["status"] == "complete" and s["commit"] == "abc1234"
        assert 0.4 < s["duration_s"] < 3
        assert s["expires_at_ns"] > s["start_ns"]
        # the target exits while being recorded
        rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--pid",
                                str(proc.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        # the capture began (its session row), then let it take a few samples
        wait_until(lambda: rec.poll() is not None or len(json.loads(run(["sessions", "--json"], db=db).stdout)) > 1,
                   30, what="the second capture to begin")
        time.sleep(0.2)
        proc.kill()
        out, err = rec.communicate(timeout=30)
        assert rec.returncode == 0, err
        s = session(db, int(out.strip().splitlines()[-1]))
        assert s["status"] == "target-exited" and s["samples"] > 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parallel  # status; > 50 samples of ~500 (1 kHz, 0.5 s)
def test_sigint_finalises(python, db, tmp_path):
    p = tmp_path / "forever.py"
    p.write_text("import time\nwhile True:\n    sum(range(1000))\n")
    rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--", python,
                            str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    # wait for the session row (the capture has started), then let it sample
    wait_session(db, rec)
    time.sleep(0.5)
    rec.send_signal(signal.SIGINT)
    # a SIGINT sent to bifocal is passed on to the launched command, which is
    # waited for: its status (killed by SIGINT) is bifocal's
    assert rec.wait(timeout=30) in (130, 1)
    sid = int(rec.stdout.readline().strip())
    s = session(db, sid)
    assert s["status"] == "interrupted" and s["samples"] > 50, s
    with pytest.raises(ProcessLookupError):
        os.kill(s["pid"], 0)
    out, err = rec.communicate(timeout=30)
    assert "\r" not in err  # not a terminal: no progress noise


@pytest.mark.parallel  # messages
def test_failures(db, tmp_path):
    # no such process: a pid that was just reaped
    p = subprocess.Popen(["true"])
    p.wait()
    for cmd in (["dump", str(p.pid)], ["record", "--pid", str(p.pid)], ["top", str(p.pid)]):
        r = run(cmd, db=db, check=False)
        assert r.returncode != 0 and "no process" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    # not a Python process
    sl = subprocess.Popen(["sleep", "30"])
    try:  # exec'd (until then the child is a copy of this Python)
        wait_until(lambda: os.path.basename(os.readlink("/proc/%d/exe" % sl.pid)) == "sleep", 10)
        r = run(["dump", str(sl.pid)], check=False)
        assert r.returncode != 0 and "not a Python process" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    finally:
        sl.kill()
        sl.wait()
    bad = [["record"], ["record", "--rate", "0", "--pid", "1"], ["record", "--rate", "2e6", "--pid", "1"],
           ["record", "--clock", "moon", "--pid", "1"], ["record", "--pid", "x"],
           ["record", "--pid", "1", "--", "python3"], ["dump"], ["dump", "-5"], ["top", "1", "2"],
           ["record", "--duration", "soon", "--pid", "1"], ["record", "--", "/nonexistent/python"]]
    for cmd in bad:
        r = run(cmd, db=db, check=False)
        assert r.returncode != 0, cmd
        assert len(r.stderr.strip().splitlines()) == 1, (cmd, r.stderr)
    r = run(["live", "1"], check=False)
    assert r.returncode != 0 and "terminal" in r.stderr


@pytest.mark.parallel  # names the busy function
def test_top(python, tmp_path, work):
    # it runs until killed below (3 s of wall once ended before it had had
    # 150 ms of CPU, at load 14)
    proc = subprocess.Popen([python, work, "60"], stdout=subprocess.PIPE, text=True)
    try:  # past start-up: the workload burns CPU
        wait_until(lambda: task_cpu_ns(proc.pid) > 150e6, 30, what="the workload to run")
        r = run(["top", str(proc.pid), "--duration", "0.7"])
        assert "busy_a" in r.stdout and "self%" in r.stdout and "tid" in r.stdout
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parallel  # which functions, not how many samples
def test_subprocesses(python, db, tmp_path):
    p = tmp_path / "parent.py"
    p.write_text(SUBPROCESS_TREE)
    r = run(["record", "--subprocesses", "--", python, str(p)], db=db)
    parent = last_line_id(r)
    out = json.loads(run(["sessions", "--json"], db=db).stdout)
    rows = out if isinstance(out, list) else out.get("sessions", out)
    kids = [s for s in rows if s.get("parent_id") == parent]
    assert len(kids) == 1, rows
    names = {f["qualname"] for f in functions(db, kids[0]["id"])["functions"]}
    assert "child_busy" in names
    assert "parent_wait" in {f["qualname"] for f in functions(db, parent)["functions"]}


@pytest.mark.parallel  # no idle sample; > 50 of ~300
def test_no_idle(python, db, work):
    r = run(["record", "--no-idle", "--rate", "500", "--", python, work, "0.6"], db=db)
    threads = dbstat(db, last_line_id(r))
    total = sum(t["samples"] for t in threads)
    assert total > 50 and sum(t["idle"] for t in threads) == 0
    sleepy = [t for t in threads if any(l["qualname"] == "sleeper" for l in t["leaves"])]
    assert sum(t["samples"] for t in sleepy) <= 0.1 * total


def test_stalled_sampler_counts_missed_and_late(db, tmp_path):
    """A sampler that cannot run (stopped for 400 ms) drops those ticks as
    missed; it only catches up on ticks at most 10 ms late, and says how many
    it took late. Any interpreter will do: this is the record loop's rule."""
    python = pythons.discover()[-1]["path"]
    proc, _ = start_dumpee(python, tmp_path)
    try:
        rec = subprocess.Popen([bifocal_bin(), "--db", db, "record", "--pid", str(proc.pid),
                                "--rate", "1000", "--duration", "1.5"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_session(db, rec)  # the capture began: let it sample, then stall it 400 ms
        time.sleep(0.2)
        rec.send_signal(signal.SIGSTOP)
        time.sleep(0.4)
        rec.send_signal(signal.SIGCONT)
        out, err = rec.communicate(timeout=30)
        assert rec.returncode == 0, err
        r = run(["sessions", "--json"], db=db)
        s = [x for x in json.loads(r.stdout) if x["id"] == int(out.strip().splitlines()[-1])][0]
        # about 400 ticks lost in the stop (more on a busy machine, never fewer than ~300)
        assert 300 <= s["missed"] <= 1000, s
        assert s["samples"] + s["missed"] >= 1000, s
        extra = s["extra"]
        assert extra["late_ticks"] >= 0
        assert extra["max_late_ms"] <= 10.0 + 1e-6  # later than that is missed, not late
    finally:
        proc.kill()
        proc.wait()
