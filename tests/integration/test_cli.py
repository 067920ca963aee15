"""py-spy command lines work as typed (issue 15).

The target is self-timing: its main thread alternates a `hot` phase and a
`cold` phase by the wall clock (HOT_SHARE of the time in `hot`), so the share
of `hot` that a wall-clock sampler must report is known without a profiler.
Tolerance: +-15 percentage points (a 2-core host shared with other jobs can
delay the target's own phase switches and the sampler's ticks).

Commands run from /proc: a directory where nothing can be created, even by
root (CI runs as root, so chmod 555 would not stop it)."""
import gzip
import json
import os
import pstats
import re
import subprocess
import time

import pytest

from conftest import bifocal_bin

HOT_SHARE = 0.75
WORK = """\
import random, sys, time

def hot(until):
    while time.perf_counter() < until:
        pass

def cold(until):
    while time.perf_counter() < until:
        pass

print("ready", flush=True)
# Phases of random length (no aliasing with a fixed-rate sampler); each cold
# phase makes up for any overshoot of the phases before (a preempted target),
# so over any window of a few tenths of a second hot holds 3/4 of the time.
hot_s = cold_s = 0.0
while True:
    t = time.perf_counter()
    hot(t + random.uniform(0.002, 0.02))
    u = time.perf_counter()
    hot_s += u - t
    cold(u + max(0.0, hot_s / 3 - cold_s))
    cold_s += time.perf_counter() - u
"""
TOL = 0.15


def line_of(text):
    return next(i for i, l in enumerate(WORK.splitlines(), 1) if l.startswith(text))


def start(python, tmp_path):
    src = tmp_path / "work.py"
    src.write_text(WORK)
    p = subprocess.Popen([python, str(src)], stdout=subprocess.PIPE, text=True, cwd=str(tmp_path))
    assert p.stdout.readline().strip() == "ready"
    return p, str(src)


def env_for(tmp_path):
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    e["XDG_STATE_HOME"] = str(tmp_path / "state")
    return e


def bf(args, env, cwd="/proc", timeout=60):
    t0 = time.monotonic()
    r = subprocess.run([bifocal_bin()] + args, capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=timeout)
    r.seconds = time.monotonic() - t0
    return r


def spawn(args, env, cwd="/proc"):
    p = subprocess.Popen([bifocal_bin()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=cwd, env=env)
    p.t0 = time.monotonic()
    return p


def finish(p, timeout=60):
    out, err = p.communicate(timeout=timeout)
    p.seconds = time.monotonic() - p.t0
    return p.returncode, out, err


def test_py_spy_command_lines_from_a_read_only_directory(python, tmp_path):
    """record -p PID -r 200 -d 2 -o flame.html, top -p PID -d 1, dump -p PID --json,
    all at once against one target, from /proc, with no database named."""
    target, src = start(python, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    env = env_for(tmp_path)
    try:
        rec = spawn(["record", "-p", str(target.pid), "-r", "200", "-d", "2", "-o", str(out / "flame.html")], env)
        top = spawn(["top", "-p", str(target.pid), "-d", "1"], env)
        dump = spawn(["dump", "-p", str(target.pid), "--json"], env)
        d_rc, d_out, d_err = finish(dump)
        t_rc, t_out, t_err = finish(top)
        r_rc, r_out, r_err = finish(rec)
    finally:
        target.kill()
        target.wait()
    # durations: what -d asked, plus attach and writing (loaded host: generous upper bounds)
    assert r_rc == 0, r_err
    assert 2.0 <= rec.seconds < 8, rec.seconds
    assert t_rc == 0, t_err
    assert 1.0 <= top.seconds < 6, top.seconds
    assert d_rc == 0, d_err
    assert dump.seconds < 5, dump.seconds
    # no database, no warning about audit, nothing beside the output
    assert sorted(os.listdir(out)) == ["flame.html"], os.listdir(out)
    assert "not audited" not in r_err + t_err + d_err
    assert r_out == "", r_out  # no session id: nothing was kept
    html = (out / "flame.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "hot" in html and "work.py" in html
    # top: the hot function's self share matches the target's own clock
    row = next(l for l in t_out.splitlines() if re.search(r"\bhot \(work\.py:%d\)" % line_of("def hot"), l))
    self_pct = float(row.split()[0].rstrip("%"))
    assert abs(self_pct / 100 - HOT_SHARE) <= TOL, t_out
    # dump --json: threads, names, frames with file/line/function (innermost first)
    d = json.loads(d_out)
    assert d["pid"] == target.pid and d["python_version"].startswith("3.")
    main = next(t for t in d["threads"] if t["native_tid"] == target.pid)
    assert main["name"] and main["os_name"]
    fr = main["frames"]
    assert fr[-1]["function"] == "<module>" and fr[-1]["file"] == src
    assert fr[0]["function"] in ("hot", "cold") and fr[0]["file"] == src
    lo = line_of("def " + fr[0]["function"])
    assert lo < fr[0]["line"] <= lo + 2 and fr[0]["firstlineno"] == lo
    # each attach audited in the per-user store, with its outcome
    a = bf(["--db", str(tmp_path / "state" / "bifocal" / "audit.db"), "audit", "--json"], env)
    rows = [(x["command"], x["target_pid"], x["outcome"]) for x in json.loads(a.stdout)]
    assert sorted(rows) == sorted([(c, target.pid, "ok") for c in ("record", "top", "dump")]), rows


@pytest.fixture(scope="module")
def newest():
    import pythons
    ps = pythons.discover()
    if not ps:
        pytest.skip("no Python interpreter found")
    return ps[-1]["path"]


def collapsed_share(text, fn):
    total = hit = 0
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        total += float(n)
        if stack.split(";")[-1].startswith(fn + " "):
            hit += float(n)
    return hit / total


def test_record_output_formats(newest, tmp_path):
    """-o picks the format from the extension, -f (bifocal's or py-spy's names) overrides it."""
    target, src = start(newest, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    env = env_for(tmp_path)
    cases = {
        "stacks.txt": [],
        "p.speedscope.json": [],
        "p.prof": [],
        "p.pb.gz": [],
        "raw.data": ["-f", "raw"],  # py-spy's name for collapsed stacks
        "s.data": ["--format", "speedscope"],
    }
    try:
        procs = {name: spawn(["record", "-p", str(target.pid), "-d", "1", "-r", "250", "-o", str(out / name)] + extra,
                             env) for name, extra in cases.items()}
        res = {name: finish(p) for name, p in procs.items()}
    finally:
        target.kill()
        target.wait()
    for name, (rc, so, se) in res.items():
        assert rc == 0, (name, se)
        assert "wrote" in se and name in se
    assert sorted(os.listdir(out)) == sorted(cases)
    for name in ("stacks.txt", "raw.data"):
        share = collapsed_share((out / name).read_text(), "hot")
        assert abs(share - HOT_SHARE) <= TOL, (name, share)
    for name in ("p.speedscope.json", "s.data"):
        doc = json.loads((out / name).read_text())
        assert "speedscope" in doc["$schema"] and any(f["name"].startswith("hot") for f in doc["shared"]["frames"])
    st = pstats.Stats(str(out / "p.prof"))
    hot = [k for k in st.stats if k[2] == "hot" and k[0] == src]
    assert hot and st.stats[hot[0]][2] > 0  # tt: self seconds
    assert gzip.decompress((out / "p.pb.gz").read_bytes())  # a gzip'd profile.proto


def test_record_output_beside_a_named_store(newest, tmp_path):
    target, _ = start(newest, tmp_path)
    env = env_for(tmp_path)
    db = str(tmp_path / "keep.db")
    try:
        r = bf(["--db", db, "record", "-p", str(target.pid), "-d", "0.5", "-o", str(tmp_path / "f.html")], env)
    finally:
        target.kill()
        target.wait()
    assert r.returncode == 0, r.stderr
    sid = int(r.stdout.strip().splitlines()[-1])  # the session is kept and named
    s = json.loads(bf(["-D", db, "sessions", "--json"], env).stdout)
    assert [x["id"] for x in s] == [sid]
    assert (tmp_path / "f.html").stat().st_size > 0


def test_dash_d_is_refused_where_it_meant_the_database(tmp_path):
    env = env_for(tmp_path)
    for args in (["-d", "x.db", "sessions"], ["sessions", "-d", "x.db"], ["replay", "1", "-d", "x.db"],
                 ["dump", "-d", "1", "123"], ["-dx.db"]):
        r = bf(args, env, cwd=str(tmp_path))
        assert r.returncode == 2, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--db" in lines[0] and "-d" in lines[0], (args, r.stderr)
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)
    # the new spellings
    for args in (["--db", "n.db", "sessions"], ["-D", "n.db", "sessions"], ["sessions", "--db=n.db"]):
        r = bf(args, env, cwd=str(tmp_path))
        assert r.returncode == 1 and "n.db" in r.stderr and "does not exist" in r.stderr, r.stderr
    bad = bf(["record", "-p", "1", "-d", "soon"], env)
    assert bad.returncode == 2 and "bad --duration 'soon'" in bad.stderr


def test_look_commands_run_when_no_audit_store_can_be_written(newest, tmp_path):
    target, _ = start(newest, tmp_path)
    env = env_for(tmp_path)
    env["XDG_STATE_HOME"] = "/proc/nonexistent"
    try:
        r = bf(["dump", str(target.pid)], env)
        t = bf(["top", "-p", str(target.pid), "-d", "0.3", "--gil", "--idle"], env)
    finally:
        target.kill()
        target.wait()
    for x in (r, t):
        assert x.returncode == 0, x.stderr
        warn = [l for l in x.stderr.splitlines() if "not audited" in l]
        assert len(warn) == 1 and len(x.stderr.splitlines()) == 1, x.stderr
    assert "Thread %d" % target.pid in r.stdout and "GIL holder only" in t.stdout
