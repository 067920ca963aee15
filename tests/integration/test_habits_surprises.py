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

from conftest import Tmux, bifocal_bin, run, last_line_id

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


@pytest.mark.parametrize("target", [["/nonexistent.py"], ["SRC/bad.py"], ["-c", "def f(:"]],
                         ids=["missing-script", "syntax-error", "syntax-error-c"])
def test_failed_trace_leaves_nothing(python, tmp_path, target):
    """A traced program that cannot start (no such script, one that does not
    compile) leaves no session and no ./bifocal.db it made, says why in one
    line, and exits as python would (2, 1); a database that was there keeps
    its sessions. The syntax errors once left an incomplete session and a
    traceback through the runner."""
    bad = script(tmp_path, "bad.py", "def f(:\n    pass\n")
    target = [bad if a == "SRC/bad.py" else a for a in target]
    work = tmp_path / "cwd"
    work.mkdir()
    r = subprocess.run([bifocal_bin(), "trace", "--", python] + target, cwd=str(work), capture_output=True,
                       text=True, env=env_no_db(), timeout=60)
    assert r.returncode == (2 if target == ["/nonexistent.py"] else 1), r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.startswith("bifocal: "), r.stderr
    assert ("/nonexistent.py" in r.stderr and "No such file" in r.stderr) if target == ["/nonexistent.py"] else \
        ("SyntaxError" in r.stderr and "line 1" in r.stderr and "not started" in r.stderr), r.stderr
    assert os.listdir(str(work)) == [], r.stderr
    db = str(work / "bifocal.db")
    sid = last_line_id(run(["trace", "--", python, "-c", "pass"], db=db))
    r = run(["trace", "--", python] + target, db=db, check=False)
    assert r.returncode != 0 and r.stdout == ""
    con = sqlite3.connect(db)
    assert con.execute("SELECT id FROM sessions").fetchall() == [(sid,)]
    con.close()


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


LATE_THREADING = """
import sys, time
t = time.monotonic()
while time.monotonic() - t < float(sys.argv[1]):
    sum(range(1000))
import threading
print("name", threading.current_thread().name, flush=True)
while time.monotonic() - t < float(sys.argv[2]):
    sum(range(1000))
"""


def test_thread_name_the_same_launched_or_attached(tmp_path):
    """A launched program that imports threading only after the sampler gave
    up waiting (3 s) kept its OS name (python3.11) while the same program
    attached later was MainThread; now the Python name replaces the OS one
    once it is readable. Truth: threading's own name, printed by the program."""
    py = "/usr/bin/python3.11"
    if not os.access(py, os.X_OK):
        pytest.skip("needs Debian's python3.11 (it does not import threading at start-up)")
    db = str(tmp_path / "n.db")
    app = script(tmp_path, "late.py", LATE_THREADING)
    r = run(["record", "--", py, app, "3.3", "6"], db=db)
    own = r.stdout.split("name ")[1].split()[0]
    assert own == "MainThread"
    p = subprocess.Popen([py, app, "0", "3"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().split() == ["name", own]
    attached = last_line_id(run(["record", "-p", str(p.pid), "-d", "1"], db=db))
    p.wait()
    con = sqlite3.connect(db)
    names = dict(con.execute("SELECT session_id, name FROM threads").fetchall())
    con.close()
    assert names == {last_line_id(r): own, attached: own}, names


@pytest.fixture()
def labelled_db(tmp_path):
    """Sessions 1 'before', 2 (no label), 3 'after', each with a `work` function."""
    db = str(tmp_path / "l.db")
    for label in ("before", None, "after"):
        coll = tmp_path / "c.txt"
        coll.write_text("main;work 10\nmain;werkzeug_handler 5\n")
        run(["import", str(coll)] + (["--label", label] if label else []), db=db)
    return db


NEWEST_FIRST = ["after", "3", "2", "before", "1"]


def test_shell_completion_offers_sessions_first(labelled_db, tmp_path):
    """bash: where a command expects a session (replay ID, diff A B, export
    ID) the labels and ids come first, newest first, and only there."""
    r = run(["help", "--sessions"], db=labelled_db)
    assert r.stdout.split("\n")[:-1] == NEWEST_FIRST
    assert run(["help", "--sessions"], db=str(tmp_path / "none.db")).stdout == ""
    assert not os.path.exists(tmp_path / "none.db")
    comp = tmp_path / "c.bash"
    comp.write_text(run(["help", "--completion", "bash"]).stdout)
    b = bifocal_bin()
    probe = "source %s; " % comp
    cases = [("replay ''", 2), ("--db %s replay ''" % labelled_db, 4), ("--db %s replay af" % labelled_db, 4),
             ("--db %s diff 3 ''" % labelled_db, 5), ("--db %s diff 3 1 ''" % labelled_db, 6),
             ("--db %s export ''" % labelled_db, 4), ("--db %s push 1 ''" % labelled_db, 5)]
    for words, cword in cases:
        probe += 'COMP_WORDS=(%s %s); COMP_CWORD=%d; _bifocal; echo "${COMPREPLY[*]}"; ' % (b, words, cword)
    r = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True, timeout=30,
                       cwd=str(tmp_path), env=env_no_db())
    assert r.returncode == 0 and r.stderr == "", r.stderr
    got = r.stdout.split("\n")
    assert got[0] == ""  # ./bifocal.db does not exist here: no sessions, no options without a dash
    assert got[1].split() == NEWEST_FIRST
    assert got[2] == "after"
    assert got[3].split() == NEWEST_FIRST
    assert "--threshold" in got[4].split() and "after" not in got[4].split()  # both sessions given
    assert got[5].split() == NEWEST_FIRST and got[6].split() == NEWEST_FIRST


def test_zsh_completion_offers_sessions_first(labelled_db, tmp_path):
    """zsh (in tmux, compinit on the generated _bifocal): `replay <Tab>`
    lists the sessions newest first, with --db passed on; `push 3 <Tab>`
    (any number of sessions) too."""
    import re
    import shutil
    from conftest import wait_until
    tmux, zsh = shutil.which("tmux"), shutil.which("zsh")
    if not tmux or not zsh:
        pytest.skip("needs tmux and zsh")
    zdir = tmp_path / "zc"
    zdir.mkdir()
    (zdir / "_bifocal").write_text(run(["help", "--completion", "zsh"]).stdout)
    with Tmux("bfzsh", "env HOME=%s TERM=xterm %s -f -i" % (zdir, zsh), 150, 30) as t:
        screen, keys = t.screen, t.keys
        keys("PS1='zz> '; fpath=(%s $fpath); autoload -Uz compinit; compinit -u -d %s/zcd; PATH=%s:$PATH"
             % (zdir, zdir, os.path.dirname(bifocal_bin())), "Enter")
        assert wait_until(lambda: screen().count("zz> ") >= 1, 15, interval=0.1), screen()
        listing = r"after\s+3\s+2\s+before\s+1"
        keys("%s --db %s replay " % (os.path.basename(bifocal_bin()), labelled_db), "Tab")
        assert wait_until(lambda: re.search(listing, screen()), 15, interval=0.1), screen()
        keys("C-u", "clear", "Enter")
        keys("%s --db %s push 3 " % (os.path.basename(bifocal_bin()), labelled_db), "Tab")
        assert wait_until(lambda: re.search(listing, screen()), 15, interval=0.1), screen()


def test_repl_completion_offers_sessions_first(labelled_db, tmp_path):
    """REPL: `replay <Tab><Tab>` lists the sessions newest first and no
    function names (they buried the labels); `use af<Tab>` completes."""
    import re
    import shutil
    from conftest import wait_until
    tmux = shutil.which("tmux")
    if not tmux:
        pytest.skip("tmux is not installed")
    cmd = "env HOME=%s NO_COLOR=1 TERM=xterm %s --db %s" % (tmp_path, bifocal_bin(), labelled_db)
    with Tmux("bfsess", cmd, 120, 20) as t:
        screen, keys = t.screen, t.keys
        assert wait_until(lambda: "bifocal>" in screen(), 10, interval=0.1), screen()
        keys("replay ", "Tab", "Tab")
        assert wait_until(lambda: re.search(r"after\s+3\s+2\s+before\s+1", screen()), 10, interval=0.1), screen()
        assert "work" not in screen()
        keys("C-u", "use af", "Tab")
        assert wait_until(lambda: "use after" in screen(), 10, interval=0.1), screen()


AUSTIN_APP = """
import time
t0 = time.monotonic()
def leaf(n):
    return sum(range(n))
def work():
    t = time.monotonic()
    while time.monotonic() - t < 0.9:
        leaf(3000)
def idle():
    time.sleep(0.4)
work()
t1 = time.monotonic()
idle()
t2 = time.monotonic()
print("work %.6f idle %.6f" % (t1 - t0, t2 - t1))
"""


@pytest.mark.parametrize("layout", [[], ["-a"], ["-f"]], ids=["default", "alt", "full"])
def test_import_debian_austin_1_0(tmp_path, layout):
    """Debian 12's own austin (1.0.1) writes `Thread X;func (file);L<line>;...
    usec` (-a: `func (file:line)` frames; -f: `usec mem+ mem-`), which import
    refused as austin's old layout. A real capture imports: every line a
    sample, the time shares those of the workload's own clock (±6 points;
    austin's own start-up is in its total), the lines of the frames kept."""
    from views_helpers import require_tool
    austin = require_tool("austin", "austin")
    ver = subprocess.run([austin, "-V"], capture_output=True, text=True).stdout + \
        subprocess.run([austin, "-V"], capture_output=True, text=True).stderr
    if "1.0" not in ver:
        pytest.skip("not austin 1.0 (%s): this test is for Debian 12's package" % ver.strip())
    import pythons
    py = [p["path"] for p in pythons.discover() if p["version"][:2] == (3, 8) and not p.get("container")]
    if not py:
        pytest.skip("austin 1.0.1 reads up to CPython 3.8; no 3.8 here")
    app = script(tmp_path, "app.py", AUSTIN_APP)
    cap = tmp_path / "austin.txt"
    r = subprocess.run([austin, "-i", "1000", "-o", str(cap)] + layout + [py[0], app], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    own = r.stdout.split()
    work_s, idle_s = float(own[1]), float(own[3])
    lines = [ln for ln in cap.read_text().splitlines() if ln.strip()]
    db = str(tmp_path / "a.db")
    sid = last_line_id(run(["import", str(cap)], db=db))
    js = json.loads(run(["replay", str(sid), "--view", "functions", "--json", "--limit", "1000"], db=db).stdout)
    assert js["session"]["mode"] == "austin1"
    assert js["total_samples"] == len(lines)
    f = {x["qualname"]: x for x in js["functions"]}
    want_idle = idle_s / (work_s + idle_s)
    assert abs(f["idle"]["total_share"] - want_idle) < 0.06, (f["idle"]["total_share"], want_idle)
    assert abs(f["work"]["total_share"] - (1 - want_idle)) < 0.08, (f["work"]["total_share"], 1 - want_idle)
    assert f["leaf"]["file"].endswith("app.py")
    coll = run(["export", str(sid), "-f", "collapsed", "-o", "-"], db=db).stdout
    assert "leaf (%s:5)" % f["leaf"]["file"] in coll or "leaf (%s:0:5)" % f["leaf"]["file"] in coll, coll[:400]


def test_heatmap_tells_same_named_functions_apart(tmp_path):
    """Two util.py with a `work` were two rows both reading `work`; each row
    now names as much of its file as tells them apart, on the terminal and
    in the page. Truth: a.util.work runs first (0.6 s), then b.util.work (0.4 s)."""
    src = tmp_path / "src"
    for pkg in ("a", "b"):
        (src / pkg).mkdir(parents=True)
        (src / pkg / "__init__.py").write_text("")
        (src / pkg / "util.py").write_text(textwrap.dedent("""
            import time
            def work(s):
                t = time.monotonic()
                while time.monotonic() - t < s:
                    sum(range(500))
            """))
    (src / "main.py").write_text("import a.util, b.util\na.util.work(0.6)\nb.util.work(0.4)\n")
    db = str(tmp_path / "h.db")
    sid = last_line_id(run(["record", "--", "/usr/bin/python3", str(src / "main.py")], db=db))
    text = run(["replay", str(sid), "--view", "heatmap", "--limit", "2"], db=db).stdout
    rows = [ln for ln in text.splitlines() if "util.py" in ln]
    assert [r.split()[:2] for r in rows] == [["work", "(a/util.py)"], ["work", "(b/util.py)"]], text
    share = [float(r.split()[-1].rstrip("%")) for r in rows]
    assert share[0] > share[1] > 0, share  # 0.6 s before 0.4 s
    page = tmp_path / "h.html"
    run(["replay", str(sid), "--view", "heatmap", "--limit", "2", "-o", str(page)], db=db)
    html = page.read_text()
    assert ">work (a/util.py)<" in html and ">work (b/util.py)<" in html
