"""Hostile inputs (issue #32): crafted databases through every read command,
triggers inside a database, a crafted sealed file, austin files whose numbers
overflow, Lua scripts that try to outlast their budget, names that carry
terminal controls, a killed redact, and an empty co_filename through a
collapsed round trip.

Every hostile run has a time bound: it must finish within 5 s with one line
on stderr, or read correctly. The truth is taken from outside bifocal: the
database's own rows through Python's sqlite3, the file we wrote, the
process's own resource usage (wait4), the wall clock."""
import base64
import ctypes
import ctypes.util
import json
import os
import signal
import sqlite3
import struct
import subprocess
import time
import zlib

import pytest

from conftest import bifocal_bin, run

BOUND_S = 5.0
# how long a run may go before it counts as a hang (well past BOUND_S)
HANG_S = float(os.environ.get("BIFOCAL_HOSTILE_HANG_S", "30"))

COLLAPSED = (
    "main (/srv/app/main.py:1:3);work (/srv/app/work.py:10:12);parse (/srv/app/parse.py:5:7) 60\n"
    "main (/srv/app/main.py:1:3);work (/srv/app/work.py:10:14) 30\n"
    "main (/srv/app/main.py:1:4) 10\n"
)


def timed(args, db=None, timeout=None, **kw):
    """Run bifocal; (CompletedProcess, elapsed s). The subprocess timeout is
    well past BOUND_S so a hang fails the assertion, not the harness."""
    timeout = timeout or HANG_S
    t0 = time.monotonic()
    try:
        r = run(args, db=db, check=False, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        pytest.fail("bifocal %s still ran after %d s" % (" ".join(args), timeout))
    return r, time.monotonic() - t0


def one_line_error(r):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode != 0, "expected a refusal, got rc 0:\n%s" % r.stdout
    assert len(lines) == 1, "expected one line on stderr, got:\n%s" % r.stderr
    return lines[0]


def base_db(tmp_path, name="h.db"):
    """A database with two imported sessions (ids 1 and 2)."""
    src = tmp_path / "base.txt"
    src.write_text(COLLAPSED)
    db = str(tmp_path / name)
    run(["import", str(src)], db=db)
    run(["import", str(src)], db=db)
    return db


def alter(db, sql):
    c = sqlite3.connect(db)
    c.executescript(sql)
    c.commit()
    c.close()


RECURSIVE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c)"

# name -> (SQL that makes the database hostile, the table the error must name)
ATTACKS = {
    "view-sessions": ("ALTER TABLE sessions RENAME TO s_real;"
                      "CREATE VIEW sessions AS %s SELECT s_real.* FROM s_real, c WHERE c.x<0;" % RECURSIVE,
                      "sessions"),
    "view-strings": ("ALTER TABLE strings RENAME TO st_real;"
                     "CREATE VIEW strings AS %s SELECT st_real.* FROM st_real, c WHERE c.x<0;" % RECURSIVE,
                     "strings"),
    "view-stacks": ("ALTER TABLE stacks RENAME TO k_real;"
                    "CREATE VIEW stacks AS %s SELECT k_real.* FROM k_real, c WHERE c.x<0;" % RECURSIVE,
                    "stacks"),
    "generated-column": ("ALTER TABLE strings RENAME TO st_old;"
                         "CREATE TABLE strings(id INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE,"
                         " g TEXT GENERATED ALWAYS AS (printf('%.*c', 200000000, 'x')) VIRTUAL);"
                         "INSERT INTO strings(id, s) SELECT id, s FROM st_old; DROP TABLE st_old;",
                         "strings"),
    "expression-index": ("CREATE INDEX evil ON functions(abs(firstlineno));", "functions"),
    "missing-column": ("ALTER TABLE threads DROP COLUMN name;", "threads"),
}

READ_COMMANDS = {
    "sessions": lambda t: ["sessions"],
    "sessions-json": lambda t: ["sessions", "--json"],
    "replay": lambda t: ["replay", "1", "--view", "functions"],
    "replay-flame": lambda t: ["replay", "1", "--view", "flame", "-o", str(t / "f.html")],
    "export": lambda t: ["export", "1", "--format", "collapsed", "-o", str(t / "o.txt")],
    "diff": lambda t: ["diff", "1", "2"],
    "redact": lambda t: ["redact", "1", "-o", str(t / "r.db")],
    "gc": lambda t: ["gc"],
    "run": lambda t: ["run", str(t / "read.lua")],
    "import": lambda t: ["import", str(t / "base.txt")],
}

READ_LUA = "local db = assert(bifocal.open())\nfor _, s in ipairs(db:sessions()) do print(s.id) end\n"


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("command", sorted(READ_COMMANDS))
def test_crafted_database_every_command(tmp_path, attack, command):
    db = base_db(tmp_path)
    sql, table = ATTACKS[attack]
    alter(db, sql)
    (tmp_path / "read.lua").write_text(READ_LUA)
    before = open(db, "rb").read()
    r, dt = timed(READ_COMMANDS[command](tmp_path), db=db)
    assert dt < BOUND_S, "%s on a %s database took %.1f s" % (command, attack, dt)
    line = one_line_error(r)
    assert "'%s'" % table in line and "altered outside bifocal" in line, line
    # nothing written: the refusal comes before any write
    assert open(db, "rb").read() == before
    assert not os.path.exists(tmp_path / "r.db") and not os.path.exists(tmp_path / "o.txt")


def test_crafted_database_lua_open_fails_softly(tmp_path):
    """bifocal.open() on a hostile file: nil and the message (no hang)."""
    db = base_db(tmp_path)
    alter(db, ATTACKS["view-sessions"][0])
    (tmp_path / "s.lua").write_text(
        "local db, msg = bifocal.open(%r)\nprint(db == nil, msg)\n" % db)
    r, dt = timed(["run", str(tmp_path / "s.lua")], db=str(tmp_path / "other.db"))
    assert dt < BOUND_S
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("true\t") and "'sessions' is a view" in r.stdout, r.stdout


def test_trigger_inside_database_never_runs(tmp_path):
    """Item 4: a trigger on audit (and on sessions) that deletes everything
    must not run during bifocal's own writes (gc, import)."""
    db = base_db(tmp_path)
    alter(db, "CREATE TRIGGER t1 AFTER INSERT ON audit BEGIN DELETE FROM sessions; DELETE FROM sample_chunks; END;"
              "CREATE TRIGGER t2 AFTER INSERT ON sessions BEGIN DELETE FROM sessions WHERE id<>new.id; END;"
              "CREATE TRIGGER t3 BEFORE DELETE ON sessions BEGIN SELECT RAISE(IGNORE); END;")
    r, dt = timed(["gc"], db=db)
    assert dt < BOUND_S and r.returncode == 0, r.stderr
    (tmp_path / "x.txt").write_text(COLLAPSED)
    r, dt = timed(["import", str(tmp_path / "x.txt")], db=db)
    assert dt < BOUND_S and r.returncode == 0, r.stderr
    c = sqlite3.connect(db)
    assert c.execute("SELECT count(*) FROM sessions").fetchone()[0] == 3
    assert c.execute("SELECT count(DISTINCT session_id) FROM sample_chunks").fetchone()[0] == 3
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()
    # and the sessions read back as they were written
    r = run(["replay", "1", "--view", "functions", "--json"], db=db)
    assert "parse" in r.stdout


def test_sigint_ends_a_read(tmp_path):
    """Every read is interruptible: SIGINT/SIGTERM to a `run` reading the
    database ends it at once (a script's query stops with the script)."""
    db = base_db(tmp_path)
    (tmp_path / "loop.lua").write_text(
        "local db = assert(bifocal.open())\nwhile true do for _, s in ipairs(db:sessions()) do end end\n")
    for sig in (signal.SIGINT, signal.SIGTERM):
        p = subprocess.Popen([bifocal_bin(), "--db", db, "run", str(tmp_path / "loop.lua")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail("run did not stop on signal %d" % sig)
        assert time.monotonic() - t0 < 2.0
        assert p.returncode != 0 and "interrupted" in err, err


# ---- sealed files ------------------------------------------------------------------


def _sodium():
    name = ctypes.util.find_library("sodium") or "libsodium.so.23"
    try:
        na = ctypes.CDLL(name)
    except OSError:
        pytest.skip("libsodium not loadable from Python (%s)" % name)
    na.sodium_init()
    return na


def _key(path, prefix):
    t = open(path).read().strip()
    assert t.startswith(prefix)
    return base64.b64decode(t[len(prefix):])


def seal(pub_path, zbody, want_len):
    """A sealed file as `export --format bifocal` writes one (BFSEAL1,
    fingerprint, crypto_box_seal of BFSESS1 + u64le length + zlib body),
    made by hand: anyone with the public key can."""
    na = _sodium()
    pk = _key(pub_path, "bifocal-pub-1 ")
    plain = b"BFSESS1\0" + struct.pack("<Q", want_len) + zbody
    fpr = ctypes.create_string_buffer(8)
    na.crypto_generichash(fpr, ctypes.c_size_t(8), pk, ctypes.c_ulonglong(32), None, ctypes.c_size_t(0))
    c = ctypes.create_string_buffer(len(plain) + 48)
    assert na.crypto_box_seal(c, plain, ctypes.c_ulonglong(len(plain)), pk) == 0
    return b"BFSEAL1\n" + fpr.raw + c.raw


def zlib_zeros(mib):
    """zlib stream of mib MiB of zeros, built from one repeated block (fast)."""
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    blk = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    fin = c.flush(zlib.Z_FINISH)
    n = mib << 20
    return b"\x78\x9c" + blk * mib + fin + struct.pack(">I", ((n % 65521) << 16) | 1)


@pytest.fixture
def keys(tmp_path):
    run(["keygen", "-o", str(tmp_path / "k")])
    return str(tmp_path / "k.pub"), str(tmp_path / "k.key")


@pytest.mark.parametrize("attack", ["view-sessions", "view-strings", "generated-column"])
def test_sealed_crafted_database(tmp_path, keys, attack):
    """The crafted database sealed (public key only) hangs no import."""
    src = base_db(tmp_path, "src.db")
    alter(src, ATTACKS[attack][0] + "DELETE FROM s_real WHERE id=2;" if attack == "view-sessions" else
          ATTACKS[attack][0])
    c = sqlite3.connect(src)
    c.execute("PRAGMA journal_mode=DELETE")
    c.close()
    body = open(src, "rb").read()
    f = tmp_path / "evil.bfs"
    f.write_bytes(seal(keys[0], zlib.compress(body), len(body)))
    db = str(tmp_path / "dst.db")
    r, dt = timed(["import", str(f), "--key", keys[1]], db=db)
    assert dt < BOUND_S
    line = one_line_error(r)
    assert "nothing imported" in line and "'%s'" % ATTACKS[attack][1] in line, line


def test_sealed_zeros_bounded_by_file(tmp_path, keys):
    """Item 15: 2 MB of zlib'd zeros that claim 2,013,265,920 bytes are refused
    from the file's size, before anything is inflated or allocated."""
    z = zlib_zeros(1920)
    assert zlib.decompressobj().decompress(z[:4096])[:16] == bytes(16)
    f = tmp_path / "zeros.bfs"
    f.write_bytes(seal(keys[0], z, 2013265920))
    db = str(tmp_path / "dst.db")
    t0 = time.monotonic()
    p = subprocess.Popen([bifocal_bin(), "--db", db, "import", str(f), "--key", keys[1]],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.monotonic() - t0
    err = p.stderr.read().decode()
    p.stdout.close()
    p.stderr.close()
    assert os.waitstatus_to_exitcode(status) != 0
    assert dt < 2.0, "refused after %.1f s" % dt
    # the child's peak includes the forked test process before exec (~250
    # MB); inflating the claim took 1.97 GB
    assert ru.ru_maxrss < 800 * 1024, "peak RSS %d KiB" % ru.ru_maxrss
    assert "claims 2013265920 bytes" in err and len(err.strip().splitlines()) == 1, err


def test_sealed_real_export_still_imports(tmp_path, keys):
    src = base_db(tmp_path, "src.db")
    f = str(tmp_path / "ok.bfs")
    run(["export", "1", "--format", "bifocal", "--encrypt-to", keys[0], "-o", f], db=src)
    db = str(tmp_path / "dst.db")
    r = run(["import", f, "--key", keys[1]], db=db)
    assert r.stdout.strip() == "1"
    c = sqlite3.connect(db)
    assert c.execute("SELECT sum(n_samples) FROM sample_chunks").fetchone()[0] == 100


# ---- import arithmetic ---------------------------------------------------------------


def _sessions(db):
    if not os.path.exists(db):
        return 0
    c = sqlite3.connect(db)
    n = c.execute("SELECT count(*) FROM sessions").fetchone()[0]
    c.close()
    return n


def test_import_austin_metric_overflow(tmp_path):
    """Item 1: a metric of 9.3e15 us next to one of 100 overflowed the ns
    total (negative total_weight, `f` gone). Now: refused in one line."""
    f = tmp_path / "a.austin"
    f.write_text("# austin: 3.6.0\n# mode: wall\n"
                 "P1;T1;/a.py:main:1;/a.py:f:2 9300000000000000\n"
                 "P1;T1;/a.py:main:1;/a.py:g:3 100\n")
    db = str(tmp_path / "i.db")
    r, dt = timed(["import", str(f)], db=db)
    line = one_line_error(r)
    assert ":3:" in line or ":4:" in line, line
    assert "nothing imported" in line
    assert _sessions(db) == 0


def test_import_austin_large_metric_sums_exactly(tmp_path):
    """Near the bound, sums stay exact: two metrics of 4e14 us import, and
    the session's weight is their sum (checked from the file's numbers)."""
    f = tmp_path / "b.austin"
    f.write_text("# austin: 3.6.0\n# mode: cpu\n"
                 "P1;T1;/a.py:main:1;/a.py:f:2 400000000000000\n"
                 "P1;T1;/a.py:main:1;/a.py:g:3 400000000000000\n")
    db = str(tmp_path / "i.db")
    run(["import", str(f)], db=db)
    c = sqlite3.connect(db)
    extra = json.loads(c.execute("SELECT extra_json FROM sessions").fetchone()[0])
    assert extra["total_weight"] == 2 * 400000000000000 * 1000
    assert c.execute("SELECT sum(n_samples) FROM sample_chunks").fetchone()[0] == 2


@pytest.mark.parametrize("value", ["999999999999999999", "-5", "1e30", "12abc"])
def test_import_austin_duration_bounded(tmp_path, value):
    f = tmp_path / "d.austin"
    f.write_text("# austin: 3.6.0\n# duration: %s\nP1;T1;/a.py:main:1 100\n" % value)
    db = str(tmp_path / "i.db")
    r, _ = timed(["import", str(f)], db=db)
    line = one_line_error(r)
    assert "# duration: " in line and "microseconds" in line, line
    assert _sessions(db) == 0


def test_import_austin_duration_kept(tmp_path):
    f = tmp_path / "d.austin"
    f.write_text("# austin: 3.6.0\n# duration: 2500000\nP1;T1;/a.py:main:1 100\n")
    db = str(tmp_path / "i.db")
    run(["import", str(f)], db=db)
    c = sqlite3.connect(db)
    assert c.execute("SELECT duration_ns FROM sessions").fetchone()[0] == 2500000 * 1000


# ---- Lua budget ------------------------------------------------------------------------


LUA_ATTACKS = {
    # a finalizer that loops (Lua runs no hooks in finalizers)
    "gc-finalizer": "setmetatable({}, {__gc=function() while true do end end})\n",
    "gc-finalizer-during-run": "for i=1,1e9 do setmetatable({}, {__gc=function() while true do end end}) end\n",
    # an xpcall message handler that loops
    "xpcall-handler": "print(xpcall(function() error('x') end, function() while true do end end))\n",
    "xpcall-handler-loop": "while true do xpcall(function() error('x') end, function() while true do end end) end\n",
    # cheap loops around expensive C calls
    "utf8-len": "local s=('a'):rep(2^27) for i=1,1e9 do utf8.len(s) end\n",
    "table-concat": "local s=('a'):rep(2^20) local t={} for i=1,200 do t[i]=s end for i=1,1e9 do table.concat(t) end\n",
    "coroutine-utf8": "local s=('a'):rep(2^27) coroutine.wrap(function() for i=1,1e9 do utf8.len(s) end end)()\n",
    "pcall-swallow": "while true do pcall(function() while true do end end) end\n",
}


# the utf8.len loops get 3 s: building the 128 MB string must end before the
# deadline, so that the loop (0.6 s a call here) is what the budget stops
LUA_TIMEOUT = {"utf8-len": 3, "coroutine-utf8": 3}


@pytest.mark.parametrize("attack", sorted(LUA_ATTACKS))
def test_lua_timeout_holds(tmp_path, attack):
    """Item 2: --timeout ends every one of these within 2.5 s of it, with
    one line naming the timeout (or, for a finalizer that cannot be stopped
    from inside, the hard exit 2 s after it)."""
    p = tmp_path / "s.lua"
    p.write_text(LUA_ATTACKS[attack])
    limit = LUA_TIMEOUT.get(attack, 1)
    r, dt = timed(["run", "--timeout", str(limit), str(p)], db=str(tmp_path / "x.db"))
    assert dt < limit + 2.5 + (2 if "gc" in attack else 0), "%s ran %.1f s under --timeout %d" % (attack, dt, limit)
    line = one_line_error(r)
    assert "timed out after %d s" % limit in line or "did not stop within 2 s of its --timeout" in line, line


@pytest.mark.parametrize("attack", ["gc-finalizer", "xpcall-handler", "utf8-len", "pcall-swallow"])
def test_lua_ctrl_c_always_ends(tmp_path, attack):
    p = tmp_path / "s.lua"
    p.write_text(LUA_ATTACKS[attack])
    proc = subprocess.Popen([bifocal_bin(), "--db", str(tmp_path / "x.db"), "run", str(p)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("%s survived Ctrl-C" % attack)
    assert time.monotonic() - t0 < 3.5
    assert proc.returncode != 0
    assert "interrupted" in err or "2 s after Ctrl-C" in err, err


def test_lua_second_ctrl_c_exits_at_once(tmp_path):
    p = tmp_path / "s.lua"
    p.write_text(LUA_ATTACKS["gc-finalizer"])
    proc = subprocess.Popen([bifocal_bin(), "--db", str(tmp_path / "x.db"), "run", str(p)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=BOUND_S)
    assert time.monotonic() - t0 < 1.0
    assert proc.returncode == 2 and "interrupted again" in err, err


def test_lua_ordinary_script_unaffected(tmp_path):
    """The budget does not change what a well-behaved script computes:
    finalizers, xpcall handlers and coroutines work as in plain Lua."""
    p = tmp_path / "ok.lua"
    p.write_text(
        "local n = 0\n"
        "do local t = setmetatable({}, {__gc=function() n = n + 1 end}) end\n"
        "collectgarbage(); collectgarbage()\n"
        "local ok, m = xpcall(function() error('boom', 0) end, function(e) return 'handled ' .. e end)\n"
        "local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) return b * 2 end)\n"
        "local r1 = co(1); local r2 = co(21)\n"
        "local ok2, v = coroutine.resume(coroutine.create(function() return utf8.len('h\\u{e9}') end))\n"
        "print(n, ok, m, r1, r2, ok2, v)\n")
    r = run(["run", "--timeout", "30", str(p)], db=str(tmp_path / "x.db"))
    assert r.stdout.strip() == "1\tfalse\thandled boom\t2\t42\ttrue\t2", r.stdout


# ---- terminal controls in names ----------------------------------------------------


def _named_db(tmp_path, name):
    f = tmp_path / "n.txt"
    f.write_text("main (/a.py:1:2);%s (/a.py:5:6) 10\nmain (/a.py:1:3) 5\n" % name)
    db = str(tmp_path / "n.db")
    run(["import", str(f)], db=db)
    return db


EVIL = "evil\x1b]0;owned\x07\x1b[2J\u2028name"


def _sampled_named(tmp_path, python, name):
    """A sampled session of a function whose code object carries `name`
    (co_qualname on 3.11+, co_name before)."""
    w = tmp_path / "named.py"
    w.write_text(
        "import sys, time\n"
        "def hot():\n    s = 0\n    for i in range(20000):\n        s += i\n    return s\n"
        "kw = {'co_qualname': %r} if sys.version_info >= (3, 11) else {}\n"
        "hot.__code__ = hot.__code__.replace(co_name=%r, **kw)\n"
        "t = time.monotonic()\nwhile time.monotonic() - t < 1.5:\n    hot()\n" % (name, name))
    db = str(tmp_path / "s.db")
    r = run(["record", "--rate", "200", "--", python, str(w)], db=db, check=False)
    if r.returncode != 0:
        pytest.skip("cannot sample %s here: %s" % (python, r.stderr.strip()[:200]))
    return db


def test_heatmap_html_escapes_controls(tmp_path, python):
    """Item 6: ESC and BEL from a function name never reach the page raw."""
    db = _sampled_named(tmp_path, python, EVIL)
    out = tmp_path / "h.html"
    run(["replay", "1", "--view", "heatmap", "--html", "-o", str(out)], db=db)
    page = out.read_bytes()
    assert b"\x1b" not in page and b"\x07" not in page and "\u2028".encode() not in page
    assert b"evil\\x1b]0;owned\\x07\\x1b[2J\\u2028name" in page, page[:2000]


def test_heatmap_terminal_escapes_line_separator(tmp_path, python):
    db = _sampled_named(tmp_path, python, "a\u2028b\u2029c")
    r = run(["replay", "1", "--view", "heatmap"], db=db)
    assert "\u2028" not in r.stdout and "\u2029" not in r.stdout
    assert "a\\u2028b\\u2029c" in r.stdout, r.stdout


@pytest.mark.parametrize("view", ["functions", "stack"])
def test_line_separator_inert_in_terminal_views(tmp_path, view):
    """U+2028/U+2029 in a name are shown escaped, like other line breaks."""
    db = _named_db(tmp_path, "a\u2028b\u2029c")
    r = run(["replay", "1", "--view", view], db=db)
    assert "\u2028" not in r.stdout and "\u2029" not in r.stdout
    if view == "functions":
        assert "a\\u2028b\\u2029c" in r.stdout, r.stdout


# ---- redact --------------------------------------------------------------------------


def _big_db(tmp_path):
    lines = []
    for i in range(40000):
        lines.append("main (/srv/a%d.py:1:2);f%d (/srv/b%d.py:%d:%d) %d" % (i % 97, i, i % 13, i, i + 1, 1 + i % 7))
    f = tmp_path / "big.txt"
    f.write_text("\n".join(lines) + "\n")
    db = str(tmp_path / "big.db")
    run(["import", str(f)], db=db)
    return db


def test_killed_redact_leaves_nothing(tmp_path):
    """Item 14: SIGKILL at any moment of a redact leaves no OUT.tmp.PID,
    -wal or -shm beside its output (and no partial output)."""
    db = _big_db(tmp_path)
    out = tmp_path / "out" / "r.db"
    out.parent.mkdir()
    t0 = time.monotonic()
    run(["redact", "1", "-o", str(out)], db=db)
    full = time.monotonic() - t0
    os.unlink(out)
    for k in range(6):
        p = subprocess.Popen([bifocal_bin(), "--db", db, "redact", "1", "-o", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(full * (k + 1) / 8)
        p.kill()
        p.wait()
        left = sorted(os.listdir(out.parent))
        assert left in ([], ["r.db"]), left
        if left:
            c = sqlite3.connect(str(out))
            assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            c.close()
            os.unlink(out)


def test_redact_full_disk_names_the_disk(tmp_path):
    """On a full disk redact says so (not "cannot rollback")."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    db = _big_db(tmp_path)
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        r, _ = timed(["redact", "1", "-o", str(mnt / "r.db")], db=db)
        line = one_line_error(r)
        assert "disk is full" in line and "rollback" not in line.lower(), line
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)])


# ---- an empty co_filename through a collapsed round trip --------------------------------


def test_empty_filename_round_trip(tmp_path):
    """A function whose co_filename is "" keeps that identity through export
    collapsed and import (it read back as "<unknown>" with its line lost)."""
    db = str(tmp_path / "e.db")
    f = tmp_path / "e.txt"
    f.write_text("main (app.py:1:2);hot (:3:4) 5\n")
    run(["import", str(f)], db=db)
    out = tmp_path / "e.out"
    run(["export", "1", "--format", "collapsed", "-o", str(out)], db=db)
    db2 = str(tmp_path / "e2.db")
    run(["import", str(out)], db=db2)
    q = ("SELECT s1.s, s2.s, firstlineno FROM functions f JOIN strings s1 ON s1.id=file_id"
         " JOIN strings s2 ON s2.id=qualname_id ORDER BY 2")
    a = sqlite3.connect(db).execute(q).fetchall()
    b = sqlite3.connect(db2).execute(q).fetchall()
    assert ("", "hot", 3) in a
    assert a == b


def test_empty_filename_round_trip_sampled(tmp_path, python):
    """The same for a real function compiled with filename "" and sampled."""
    w = tmp_path / "emp.py"
    w.write_text(
        "import time\nns = {}\n"
        "exec(compile('def hot():\\n    s = 0\\n    for i in range(100000):\\n        s += i\\n    return s\\n',"
        " '', 'exec'), ns)\n"
        "t = time.monotonic()\nwhile time.monotonic() - t < 1.5:\n    ns['hot']()\n")
    db = str(tmp_path / "e.db")
    r = run(["record", "--rate", "200", "--", python, str(w)], db=db, check=False)
    if r.returncode != 0:
        pytest.skip("cannot sample %s here: %s" % (python, r.stderr.strip()[:200]))
    q = ("SELECT DISTINCT s1.s, s2.s, firstlineno FROM functions f JOIN strings s1 ON s1.id=file_id"
         " JOIN strings s2 ON s2.id=qualname_id WHERE s2.s='hot'")
    a = sqlite3.connect(db).execute(q).fetchall()
    assert a == [("", "hot", 1)], a
    out = tmp_path / "e.out"
    run(["export", "1", "--format", "collapsed", "-o", str(out)], db=db)
    db2 = str(tmp_path / "e2.db")
    run(["import", str(out)], db=db2)
    assert sqlite3.connect(db2).execute(q).fetchall() == a
