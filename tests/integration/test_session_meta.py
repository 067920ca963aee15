"""Session metadata: every session says which Python really ran it.

- Two interpreters that share one extension suffix (pyenv's 3.11.x and
  Debian's /usr/bin/python3.11 here) run the same script traced and sampled;
  each session's version, executable, prefix and SOABI must be what that
  interpreter says about itself (the oracle: `python -c` printing sys and
  sysconfig), not what the tracing extension was built against.
- Tracing counts the program and nothing of the runner: an independent
  sys.setprofile oracle, installed by sitecustomize before the script's first
  line and counting only the __main__ module frame's subtree, must agree on
  every Python function's call count (generators aside: setprofile counts each
  resume) for a script that ends normally, by sys.exit and by an exception.
- correlate, diff and gate warn in one line when their sessions ran different
  interpreters; `sessions` then shows each executable.
"""
import json
import os
import sqlite3
import subprocess
import textwrap

import pytest

import pythons
from conftest import run, last_line_id, session_row

PROBE = ("import sys, sysconfig, os, json; v = sys.version_info; "
         "lv = {'alpha': 'a', 'beta': 'b', 'candidate': 'rc'}.get(v.releaselevel); "
         "print(json.dumps({'version': '%d.%d.%d' % v[:3] + ('%s%d' % (lv, v.serial) if lv else ''), "
         "'executable': os.path.realpath(sys.executable), 'prefix': sys.prefix, "
         "'soabi': sysconfig.get_config_var('SOABI'), 'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX'), "
         "'debug': hasattr(sys, 'gettotalrefcount'), "
         "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED'))}))")

SPIN = """
import sys, time
def spin(t):
    end = time.perf_counter() + t
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n
spin(float(sys.argv[1]))
"""


def probe(python):
    r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, check=True, timeout=30)
    return json.loads(r.stdout)


def session(db, sid):
    return session_row(db, sid)


def shared_suffix_pair():
    """Two distinct interpreter files with one EXT_SUFFIX, or None."""
    by_suffix = {}
    for p in pythons.discover():
        if p["free_threaded"]:
            continue
        info = probe(p["path"])
        by_suffix.setdefault(info["ext_suffix"], {})[info["executable"]] = (p["path"], info)
    for suffix, exes in sorted(by_suffix.items()):
        if len(exes) >= 2:
            return suffix, [v for _, v in sorted(exes.items())][:2]
    return None


@pytest.fixture(scope="module")
def pair_db(tmp_path_factory):
    """One database: for each interpreter of the pair a traced and a sampled
    session of the same script. -> (db, [(path, info, traced_id, sampled_id)])."""
    pair = shared_suffix_pair()
    if pair is None:
        pytest.skip("no two interpreters share an extension suffix here (need e.g. pyenv 3.11.x "
                    "and /usr/bin/python3.11)")
    suffix, members = pair
    d = tmp_path_factory.mktemp("pair")
    script = d / "spin.py"
    script.write_text(textwrap.dedent(SPIN))
    db = str(d / "pair.db")
    out = []
    for path, info in members:
        tid = last_line_id(run(["trace", "--", path, str(script), "0.2"], db=db))
        sid = last_line_id(run(["record", "--rate", "200", "--", path, str(script), "0.6"], db=db))
        out.append((path, info, tid, sid))
    return db, suffix, out


def check_python_meta(s, info, source):
    py = s["extra"]["python"]
    assert s["python_version"] == info["version"], (s["python_version"], info)
    assert py["version"] == info["version"]
    assert py["executable"] == info["executable"]
    assert py["prefix"] == info["prefix"]
    assert py["soabi"] == info["soabi"] and py["ext_suffix"] == info["ext_suffix"]
    assert py["debug"] is info["debug"] and py["free_threaded"] is info["free_threaded"]
    assert py["implementation"] == "cpython" and py["source"] == source


def test_sampled_session_names_the_build_that_ran(python, db, tmp_path):
    """A sampled session of every interpreter says what it is, each field
    against the interpreter's own word: version, executable and prefix as it
    sees them (also in a container), SOABI, debug and free-threaded flags,
    and the compiler and build date of its sys.version; the root of a
    containerized one is named."""
    entry = next(p for p in pythons.discover() if p["path"] == python)
    info = probe(python)
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True, check=True, timeout=30).stdout
    script = tmp_path / "spin.py"
    script.write_text(textwrap.dedent(SPIN))
    sid = last_line_id(run(["record", "--rate", "200", "--", python, str(script), "0.3"], db=db))
    s = session(db, sid)
    check_python_meta(s, info, "process")
    py = s["extra"]["python"]
    assert py["compiler"] and "[%s]" % py["compiler"] in version, (py, version)
    assert py["build_date"] and py["build_date"] in version, (py, version)
    assert s["python_build"] == ("debug" if info["debug"] else "release"), s["python_build"]
    if entry.get("container"):
        assert py["root"] == os.path.realpath(entry["root"]), py
    else:
        assert py["root"] is None, py


def test_shared_suffix_pair_records_the_interpreter_that_ran(pair_db):
    db, suffix, members = pair_db
    (pa, ia, _, _), (pb, ib, _, _) = members
    # the premise: one extension serves both, and they are different Pythons
    assert ia["ext_suffix"] == ib["ext_suffix"] == suffix
    assert ia["executable"] != ib["executable"]
    for path, info, tid, sid in members:
        check_python_meta(session(db, tid), info, "runtime")
        check_python_meta(session(db, sid), info, "process")
        assert session(db, sid)["kind"] == "sampled" and session(db, tid)["kind"] == "traced"


def test_calibrate_pair_records_the_interpreter_that_ran(pair_db, tmp_path):
    _, _, members = pair_db
    script = tmp_path / "spin.py"
    script.write_text(textwrap.dedent(SPIN))
    db = str(tmp_path / "cal.db")
    for path, info, _, _ in members:
        r = run(["calibrate", "--rate", "200", "--json", "--", path, str(script), "0.4"], db=db)
        doc = json.loads(r.stdout)
        assert "different interpreters" not in r.stderr, r.stderr
        check_python_meta(session(db, doc["traced_session"]), info, "runtime")
        check_python_meta(session(db, doc["sampled_session"]), info, "process")


def test_correlate_diff_gate_sessions_warn_on_different_interpreters(pair_db):
    db, _, members = pair_db
    (pa, ia, ta, sa), (pb, ib, tb, sb) = members
    r = run(["correlate", str(sa), str(tb)], db=db)
    warn = [l for l in r.stderr.splitlines() if "different interpreters" in l]
    assert len(warn) == 1 and r.stderr.count("\n") == 1, r.stderr
    assert ia["executable"] in warn[0] and ib["executable"] in warn[0]
    assert ia["version"] in warn[0] and ib["version"] in warn[0]
    doc = json.loads(run(["correlate", "--json", str(sa), str(tb)], db=db).stdout)
    assert ia["executable"] in doc["interpreters_differ"]
    # the same interpreter on both sides: no warning
    for s, t in ((sa, ta), (sb, tb)):
        r = run(["correlate", str(s), str(t)], db=db)
        assert "different interpreters" not in r.stderr, r.stderr
        assert json.loads(run(["correlate", "--json", str(s), str(t)], db=db).stdout)["interpreters_differ"] is None
    # correlate.lua (bifocal run) says it too
    r = run(["run", "correlate.lua", str(sa), str(tb)], db=db)
    assert sum("different interpreters" in l for l in r.stderr.splitlines()) == 1, r.stderr
    # diff warns and its A/B lines name each executable
    r = run(["diff", str(sa), str(sb)], db=db, env={"COLUMNS": "400"})
    assert sum("different interpreters" in l for l in r.stderr.splitlines()) == 1, r.stderr
    a_line = [l for l in r.stdout.splitlines() if l.startswith("A ")][0]
    assert ia["executable"][-20:] in a_line or "…" in a_line
    # gate.lua compares the two sampled sessions: a warning, not a refusal
    r = run(["run", "gate.lua", str(sa), str(sb)], db=db, check=False)
    assert r.returncode in (0, 1), r.stderr
    assert sum("different interpreters" in l for l in r.stderr.splitlines()) == 1, r.stderr
    # sessions: an EXECUTABLE column, since these sessions ran different ones
    out = run(["sessions"], db=db).stdout.splitlines()
    assert "EXECUTABLE" in out[0]
    for _, info, tid, sid in members:
        for i in (tid, sid):
            row = [l for l in out[1:] if l.split()[0] == str(i)][0]
            assert info["executable"] in row or "…" in row, row


def test_sessions_of_one_interpreter_show_no_executable_column(tmp_path):
    ps = pythons.discover()
    if not ps:
        pytest.skip("no Python found")
    script = tmp_path / "spin.py"
    script.write_text(textwrap.dedent(SPIN))
    db = str(tmp_path / "one.db")
    py = ps[-1]["path"]
    run(["trace", "--", py, str(script), "0.05"], db=db)
    run(["trace", "--", py, str(script), "0.05"], db=db)
    assert "EXECUTABLE" not in run(["sessions"], db=db).stdout


# ---- the runner counts nothing of its own: a sys.setprofile oracle ----------

ORACLE = r'''
# sitecustomize: count Python calls of the __main__ module frame's subtree
# (main thread) from before the script's first line to its last; inert
# unless BIFOCAL_ORACLE_OUT is set.
import os, sys
_out = os.environ.get("BIFOCAL_ORACLE_OUT")
# (no pre-import of threading: the collector follows new threads on 3.8-3.11
# without importing it, so the program's own import is counted by both)
_GEN = 0x20 | 0x80 | 0x200
_counts, _gens, _main, _loaded = {}, set(), [], []

def _prof(frame, event, arg):
    if not _main:
        if (event == "call" and frame.f_back is None and frame.f_code.co_name == "<module>"
                and frame.f_globals.get("__name__") == "__main__"):
            _main.append(frame)
            _loaded.extend(sys.modules)
        else:
            return
    if event == "call":
        co = frame.f_code
        k = (co.co_filename, co.co_firstlineno, co.co_name)
        _counts[k] = _counts.get(k, 0) + 1
        if co.co_flags & _GEN:
            _gens.add(k)
    elif event == "return" and frame is _main[0]:
        sys.setprofile(None)
        import json
        with open(_out, "w") as f:
            json.dump({"counts": [[list(k), v] for k, v in _counts.items()],
                       "gens": [list(k) for k in _gens], "loaded": _loaded}, f)

if _out:
    sys.setprofile(_prof)
'''

HELPER = """
def helper(n):
    return n + 1
"""

# Uses what bifocal's runner uses (posixpath, abc, import machinery for
# sys.path[0], signal/types/enum it once preloaded), then ends as asked.
ORACLE_SCRIPT = """
import os, sys, collections.abc
import signal, types, enum, json
import helper_mod
def work():
    n = 0
    for i in range(20):
        n += len(os.path.join("a", "b", str(i)))
        n += os.path.abspath(os.path.dirname(__file__)) != ""
        cls = type("C%d" % i, (), {"__getitem__": lambda s, k: k, "__len__": lambda s: 0,
                                   "__iter__": lambda s: iter(())})
        n += issubclass(cls, collections.abc.Sized)
        n += isinstance({}, collections.abc.Mapping)
        n += helper_mod.helper(i)
    json.dumps({"n": n})
    return n
work()
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("boom")
"""

def _oracle_setup(tmp_path):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(ORACLE)
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "helper_mod.py").write_text(textwrap.dedent(HELPER))
    script = src / "prog.py"
    script.write_text(textwrap.dedent(ORACLE_SCRIPT))
    return str(site), str(script)


def _bifocal_counts(db, sid):
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT sf.s, sq.s, f.firstlineno, t.calls FROM trace_functions t "
        "JOIN functions f ON f.id = t.function_id JOIN strings sf ON sf.id = f.file_id "
        "JOIN strings sq ON sq.id = f.qualname_id WHERE t.session_id = ?", (sid,)).fetchall()
    roots = con.execute(
        "SELECT sq.s, t.calls FROM trace_edges t JOIN functions f ON f.id = t.callee_id "
        "JOIN strings sq ON sq.id = f.qualname_id WHERE t.session_id = ? "
        "AND t.caller_id NOT IN (SELECT id FROM functions)",
        (sid,)).fetchall()
    con.close()
    counts = {(fn, line, q.rsplit(".", 1)[-1]): n for fn, q, line, n in rows if fn != "<builtin>"}
    return counts, roots


@pytest.mark.parametrize("how,rc", [("normal", 0), ("exit", 3), ("raise", 1)])
def test_counts_equal_a_setprofile_oracle_started_before_the_script(python, db, tmp_path, how, rc):
    if any(p["path"] == python and p["free_threaded"] for p in pythons.discover()):
        pytest.skip("%s is a free-threaded build: the tracer refuses those" % python)
    site, script = _oracle_setup(tmp_path)
    out = str(tmp_path / "oracle.json")
    # both runs: same interpreter, same sys.path (the inert sitecustomize in
    # both), same working directory and hash seed
    env = dict(os.environ, PYTHONPATH=site, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BIFOCAL_ORACLE_OUT", None)
    r = subprocess.run([python, script, how], env=dict(env, BIFOCAL_ORACLE_OUT=out), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == rc, r.stderr
    oracle = json.load(open(out))
    gens = {tuple(k) for k in oracle["gens"]}
    ref = {tuple(k): v for k, v in oracle["counts"] if tuple(k) not in gens}
    r = run(["trace", "--", python, script, how], db=db, check=False,
            env={"PYTHONPATH": site, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == rc, r.stderr
    got, roots = _bifocal_counts(db, last_line_id(r))
    got = {k: v for k, v in got.items() if k not in gens}
    diff = {k: (ref.get(k), got.get(k)) for k in set(ref) | set(got) if ref.get(k) != got.get(k)}
    assert not diff, "calls differ (oracle, bifocal): %r" % sorted(diff.items(), key=str)[:40]
    # the functions the runner itself uses are covered, with real counts
    names = {k[2] for k in ref}
    for f in ("join", "__subclasscheck__", "helper", "work"):
        assert f in names, f
    assert any(k[2] == "__init__" and "zipimport" in k[0] for k in ref), "sys.path[0]'s finder not built by the program"
    # modules python had not loaded when the script began are the program's to
    # import (and count), whatever bifocal's runner needs for itself
    for mod in ("signal", "types", "enum", "json"):
        if mod not in oracle["loaded"]:
            assert [k for k in got if k[2] == "<module>" and
                    os.path.splitext(os.path.basename(k[0]))[0] in (mod, "__init__") and
                    (mod in k[0])], "%s was imported before the program" % mod
    # nothing runs at the root but the program
    assert roots == [("<module>", 1)], roots



def _git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git"] + list(args), cwd=str(cwd), capture_output=True, text=True,
                          env=env, timeout=30)


def _traced_commit(cwd, db, python, path=None):
    """The commit a `bifocal trace` started in cwd recorded (None: none);
    path: $PATH for bifocal (the interpreter is given by its full path)."""
    from conftest import bifocal_bin
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    env.pop("BIFOCAL_DB", None)
    env.pop("GIT_DIR", None)
    r = subprocess.run([bifocal_bin(), "--db", db, "trace", "--", python, "-c", "pass"], cwd=str(cwd),
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return session(db, last_line_id(r))["commit_id"]


def test_trace_records_the_commit_git_says(tmp_path):
    """The commit of a traced session is read from .git's files (no git
    process); the oracle is `git rev-parse HEAD` run in the same directory:
    loose and packed refs, a detached HEAD, a subdirectory, a linked worktree
    (a `gitdir:` file), an unborn branch, and garbage .git files (no commit,
    no failure)."""
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("git is not installed")
    python = os.path.realpath(pythons.discover()[0]["path"])
    db = str(tmp_path / "c.db")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "sub").mkdir()
    nogit = str(tmp_path / "empty-path")  # $PATH without git: the commit must come from the files
    os.mkdir(nogit)
    assert _git(repo, "init", "-q", "-b", "main").returncode == 0
    for i in range(2):
        (repo / "f").write_text(str(i))
        _git(repo, "add", "f")
        assert _git(repo, "commit", "-q", "-m", "c%d" % i).returncode == 0
    wt = tmp_path / "wt"
    assert _git(repo, "worktree", "add", "-q", "-b", "side", str(wt), "HEAD~1").returncode == 0

    def oracle(d):
        r = _git(d, "rev-parse", "HEAD")
        return r.stdout.strip() if r.returncode == 0 else None

    cases = [("loose ref", repo), ("subdirectory", repo / "sub"), ("linked worktree", wt)]
    got = [(name, _traced_commit(d, db, python, nogit), oracle(d)) for name, d in cases]
    assert _git(repo, "pack-refs", "--all").returncode == 0
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    got.append(("packed ref", _traced_commit(repo, db, python, nogit), oracle(repo)))
    got.append(("worktree, packed", _traced_commit(wt, db, python, nogit), oracle(wt)))
    assert _git(repo, "checkout", "-q", "--detach", "HEAD~1").returncode == 0
    got.append(("detached", _traced_commit(repo, db, python, nogit), oracle(repo)))
    for name, mine, want in got:
        assert want and mine == want, (name, mine, want)
    assert got[0][1] != got[2][1]  # the worktree is on the other commit

    unborn = tmp_path / "unborn"
    unborn.mkdir()
    assert _git(unborn, "init", "-q").returncode == 0
    assert oracle(unborn) is None and _traced_commit(unborn, db, python) is None
    for name, content in (("file", "gitdir: /nonexistent/x\n"), ("file2", "\x00\xff garbage"),
                          ("dir", None)):
        g = tmp_path / ("garbage-" + name)
        g.mkdir()
        if content is None:
            (g / ".git").mkdir()
            (g / ".git" / "HEAD").write_text("ref: refs/heads/../../../../etc/passwd\n")
        else:
            (g / ".git").write_bytes(content.encode("latin-1"))
        assert oracle(g) is None, name
        assert _traced_commit(g, db, python) is None, name


def test_killed_trace_still_says_which_python_without_asking_it_twice(tmp_path):
    """A program killed outright leaves the session bifocal began before
    starting it. For a real interpreter binary that session already names it,
    from the interpreter's files (its name and _sysconfigdata, no extra
    interpreter run); a launcher script it cannot read (a shim) is not run
    twice either: its session says nothing of the interpreter until the runner
    does. The oracle is the interpreter's own sys/sysconfig."""
    db = str(tmp_path / "k.db")
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    seen = 0
    for p in pythons.discover():
        if p["free_threaded"]:
            continue
        info = probe(p["path"])
        shim = tmp_path / ("shim-" + info["version"])
        shim.write_text("#!/bin/sh\nexec %s \"$@\"\n" % info["executable"])
        shim.chmod(0o755)
        # a container's wrapper (the sid root's) is itself such a launcher
        # script, and the executable it names exists only inside the root
        launchers = [p["path"]] if p.get("container") else [p["path"], str(shim)]
        for launcher in launchers:
            r = run(["trace", "--", launcher, "-c", kill], db=db, check=False)
            assert r.returncode == 128 + 9, r.stderr
            sid = max(row[0] for row in sqlite3.connect(db).execute("SELECT id FROM sessions"))
            s = session(db, sid)
            assert s["status"] == "incomplete", s
            if p.get("container") and "python" in s["extra"]:  # the runner named it after all
                assert info["version"].startswith(s["python_version"] or "-"), (s, info)
                continue
            if launcher == str(shim) or p.get("container"):
                assert s["python_version"] is None and "python" not in s["extra"], s
                continue
            py = s["extra"]["python"]
            assert py["executable"] == info["executable"] and py["ext_suffix"] == info["ext_suffix"], (py, info)
            if py["source"] == "files":  # name and _sysconfigdata: major.minor only
                assert s["python_version"] == ".".join(info["version"].split(".")[:2])
                seen += 1
            else:
                assert py["source"] == "probe" and s["python_version"] == info["version"][:len(s["python_version"])]
    assert seen, "no interpreter's files were read (every one was asked)"


def test_launcher_script_is_checked_by_the_runner(tmp_path):
    """An interpreter bifocal cannot read before it runs (a launcher script)
    is started once: the runner's bootstrap says whether it can be traced.
    A traced run records the interpreter that ran (oracle: its own sys); an
    old Python, a non-Python and a missing extension are refused in one line
    with no session left behind."""
    db = str(tmp_path / "l.db")
    py = pythons.discover()[0]
    info = probe(py["path"])
    shim = tmp_path / "py-shim"
    starts = tmp_path / "starts"
    shim.write_text("#!/bin/sh\necho started >> %s\nexec %s \"$@\"\n" % (starts, info["executable"]))
    shim.chmod(0o755)
    r = run(["trace", "--", str(shim), "-c", "import sys; sys.exit(3)"], db=db, check=False)
    assert r.returncode == 3, r.stderr
    assert starts.read_text().count("started") == 1  # the launcher ran once: no probe run
    s = session(db, last_line_id(r))
    assert s["status"] == "complete" and s["python_version"] == info["version"]
    assert s["extra"]["python"]["executable"] == info["executable"]
    refused = []
    old = [p for p in sorted(os.popen("ls -d ~/.pyenv/versions/3.[0-7].*/bin/python3.[0-7] 2>/dev/null").read().split())]
    if old:
        refused.append(("#!/bin/sh\nexec %s \"$@\"\n" % old[0], 2, "too old"))
    refused.append(("#!/bin/sh\nexit 0\n", 127, "as a Python interpreter"))
    for i, (text, rc, msg) in enumerate(refused):
        bad = tmp_path / ("bad-%d" % i)
        bad.write_text(text)
        bad.chmod(0o755)
        r = run(["trace", "--", str(bad), "-c", "pass"], db=db, check=False)
        assert r.returncode == rc and msg in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert r.stdout.strip() == ""
    e = dict(os.environ, BIFOCAL_TRACING_DIR=str(tmp_path / "empty-tracing"))
    os.mkdir(e["BIFOCAL_TRACING_DIR"])
    with open(os.path.join(e["BIFOCAL_TRACING_DIR"], "bifocal_trace.py"), "w") as f:
        f.write("raise SystemExit('must not be imported')\n")
    import shutil
    from conftest import bifocal_bin
    solo = tmp_path / "solo"  # a bifocal with no extension beside it: only the .py in $BIFOCAL_TRACING_DIR
    solo.mkdir()
    shutil.copy(bifocal_bin(), str(solo / "bifocal"))
    r = subprocess.run([str(solo / "bifocal"), "--db", db, "trace", "--", str(shim), "-c", "pass"],
                       capture_output=True, text=True, env=e, timeout=60)
    assert r.returncode == 2 and "no tracing extension was built for Python " + info["version"] in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
    n = sqlite3.connect(db).execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    assert n == 1  # only the traced run
