"""Untrusted input stays contained: the Lua sandbox (binary chunks refused on
every loader, time and Ctrl-C that stop long C calls, a memory cap, `load` of
text), sealed files with forged metadata, and names/labels that carry terminal
escapes or invalid UTF-8. Interpreter-independent: no Python target is run."""
import json
import os
import pty
import select
import signal
import socket
import sqlite3
import subprocess
import time

import pytest

from conftest import bifocal_bin, last_line_id, run, task_cpu_ns, wait_until


def script(tmp_path, code, name="s.lua"):
    p = tmp_path / name
    p.write_text(code)
    return str(p)


def brun(args, db=None, timeout=60):
    """Run bifocal with bytes output (names may not be UTF-8)."""
    cmd = [bifocal_bin()] + (["--db", db] if db else []) + list(args)
    env = dict(os.environ)
    env.pop("BIFOCAL_DB", None)
    env["NO_COLOR"] = "1"
    return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)


def crashed(r):
    return r.returncode < 0 or r.returncode > 2


# ---- binary chunks ----------------------------------------------------------

DUMP = 'local function dump() return string.dump(function() print("BYTECODE RAN") end) end\n'


@pytest.mark.parametrize("how,code", [
    ("load", 'assert(load(dump()))()'),
    ("load mode b", 'assert(load(dump(), "x", "b"))()'),
    ("load mode bt", 'assert(load(dump(), "x", "bt"))()'),
    ("load reader", 'local d, done = dump(), false\n'
                    'assert(load(function() if done then return nil end done = true return d end))()'),
    ("loadfile", 'assert(loadfile(FILE))()'),
    ("dofile", 'dofile(FILE)'),
    ("require", 'package.path = DIR .. "/?.lua"\nrequire("evil")'),
])
def test_bytecode_refused_by_every_loader(tmp_path, db, how, code):
    out = tmp_path / "out"
    out.mkdir()
    src = (DUMP + 'local DIR = bifocal.out_dir\nlocal FILE = DIR .. "/evil.lua"\n'
           'local f = assert(io.open(FILE, "wb")) f:write(dump()) f:close()\n' + code + "\n")
    r = run(["run", "--out", str(out), script(tmp_path, src)], db=db, check=False)
    assert r.returncode == 2, (how, r.stdout, r.stderr)
    assert "BYTECODE RAN" not in r.stdout
    assert "binary chunk" in r.stderr, r.stderr
    # the same chunk runs with --unsafe: the refusal is the sandbox's doing
    r = run(["run", "--unsafe", "--out", str(out), script(tmp_path, src)], db=db, check=False)
    assert "BYTECODE RAN" in r.stdout, (how, r.stderr)


def test_require_bytecode_on_disk_without_out(tmp_path, db):
    # any readable bytecode file on package.path, no --out needed
    mods = tmp_path / "mods"
    mods.mkdir()
    maker = script(tmp_path, 'local f = io.open(arg[1], "wb") f:write(string.dump(function() print("BYTECODE RAN") end)) f:close()',
                   "mk.lua")
    run(["run", "--unsafe", maker, str(mods / "m.lua")], db=db)
    s = script(tmp_path, 'package.path = arg[1] .. "/?.lua"\nprint(pcall(require, "m"))\n')
    r = run(["run", s, str(mods)], db=db)
    assert "BYTECODE RAN" not in r.stdout and "false" in r.stdout and "binary chunk" in r.stdout


def test_require_corrupted_chunks_never_crash(tmp_path, db):
    # 40 corrupted chunks (byte flips, truncations) through require and load:
    # every one is an error, none a crash
    out = tmp_path / "out"
    out.mkdir()
    src = r'''
local base = string.dump(function(a, b) local t = {} for i = 1, 10 do t[i] = a .. i end return t, b end)
package.path = bifocal.out_dir .. "/?.lua"
local n_err = 0
for seed = 1, 40 do
  math.randomseed(seed)
  local d = base
  if seed % 4 == 0 then d = d:sub(1, math.random(1, #d - 1)) end
  for _ = 1, math.random(1, 8) do
    local i = math.random(1, #d)
    d = d:sub(1, i - 1) .. string.char(math.random(0, 255)) .. d:sub(i + 1)
  end
  local name = "m" .. seed
  local f = assert(io.open(bifocal.out_dir .. "/" .. name .. ".lua", "wb")) f:write(d) f:close()
  local ok1 = pcall(require, name)
  local ok2 = load(d) ~= nil
  if not ok1 and not ok2 then n_err = n_err + 1 end
end
print("errors", n_err)
'''
    r = run(["run", "--out", str(out), script(tmp_path, src)], db=db, check=False)
    assert r.returncode == 0, r.stderr
    assert "errors\t40" in r.stdout


def test_c_modules_and_loadlib_refused(tmp_path, db):
    s = script(tmp_path, 'package.cpath = "/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;/usr/lib/x86_64-linux-gnu/?.so"\n'
                         'local ok, e = pcall(require, "lpeg") print(ok, (e:gsub("\\n", " ")))\n'
                         'local ok2, e2 = pcall(package.loadlib, "/lib/x86_64-linux-gnu/libc.so.6", "*") print(ok2, e2)\n'
                         'print(#package.searchers, package.searchers[4])\n')
    r = run(["run", s], db=db)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("false") and "C module 'lpeg' is refused by the sandbox" in lines[0], lines
    assert lines[1].startswith("false") and "package.loadlib is refused by the sandbox" in lines[1], lines
    assert lines[2] == "3\tnil"


# ---- load of text --------------------------------------------------------------


def test_load_text_uses_sandbox_env(tmp_path, db):
    out = tmp_path / "out"
    out.mkdir()
    src = r'''
assert(load("return math.pi")() == math.pi)
assert(load("x_global = 7")) ; load("x_global = 7")() ; assert(x_global == 7)
local env = {y = 2}
assert(load("return y", "c", "t", env)() == 2)
assert(select(2, pcall(load("return math", "c", "t", nil))):match("nil value"))
local f = assert(io.open(bifocal.out_dir .. "/mod.lua", "w")) f:write("return {v = 42, pi = math.pi}") f:close()
package.path = bifocal.out_dir .. "/?.lua"
assert(require("mod").v == 42 and require("mod").pi == math.pi)
assert(loadfile(bifocal.out_dir .. "/mod.lua")().v == 42)
assert(dofile(bifocal.out_dir .. "/mod.lua").pi == math.pi)
assert(loadfile(bifocal.out_dir .. "/mod.lua", "t", {math = {pi = 3}})().pi == 3)
print("ok")
'''
    r = run(["run", "--out", str(out), script(tmp_path, src)], db=db)
    assert r.stdout.strip() == "ok"


# ---- time: --timeout and Ctrl-C inside long C calls ---------------------------

# (name, code, --timeout): the case at 2 s, the others shorter to keep
# the suite quick; each must end within the timeout + 3 s
PATHOLOGICAL = [
    ('find', 'print(string.rep("a", 3e5):find(".-.-.-.-.-b"))', 2),
    ('match', 'string.rep("a", 3e5):match("(.-)(.-)(.-)(.-)b")', 0.5),
    ('gmatch', 'for _ in string.rep("a", 3e5):gmatch(".-.-.-.-b") do end', 0.5),
    ('gsub', 'string.rep("a", 3e5):gsub(".-.-.-.-b", "x")', 0.5),
    ('method pcall loop', 'while true do pcall(string.find, string.rep("a", 3e5), ".-.-.-.-.-b") end', 0.5),
    ('rep', 'local s = string.rep("ab", 4e8, ",")', 0.5),
    ('table.move', 'table.move({}, 1, 1e15, 2)', 0.5),
]


@pytest.mark.parametrize("what,code,limit", PATHOLOGICAL, ids=[p[0] for p in PATHOLOGICAL])
def test_timeout_stops_long_c_calls(tmp_path, db, what, code, limit):
    s = script(tmp_path, code + "\n")
    t0 = time.monotonic()
    r = run(["run", "--timeout", str(limit), "--memory", "8G", s], db=db, check=False, timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 2, (what, r.stdout, r.stderr)
    assert "timed out after %g s (--timeout)" % limit in r.stderr, r.stderr
    assert took < limit + 3.0, "%s took %.1f s under --timeout %g" % (what, took, limit)


def test_timeout_ends_a_blocking_read(tmp_path, db):
    # stdin is a pipe nobody writes to (and we keep it open): the read is cut
    # short at the deadline
    s = script(tmp_path, 'local l, err = io.read("l")\nprint("read returned", l, err)\nwhile true do end\n')
    p = subprocess.Popen([bifocal_bin(), "--db", db, "run", "--timeout", "0.5", s], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    took = time.monotonic() - t0
    out, err = p.stdout.read(), p.stderr.read()
    p.stdin.close()
    # the read returns EINTR at the deadline; the script then stops at once
    # (its next allocation or instruction), before or after printing it
    assert b"read returned" not in out or b"Interrupted system call" in out, out
    assert p.returncode == 2 and b"timed out after 0.5 s" in err, (p.returncode, err)
    assert took < 3.5


def _read_until(fd, needle, deadline):
    buf = b""
    while needle not in buf and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_ctrl_c_on_a_pty_stops_a_long_match(tmp_path, db):
    s = script(tmp_path, 'io.write("started\\n") io.stdout:flush()\n'
                         'print(string.rep("a", 3e5):find(".-.-.-.-.-b"))\n')
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.pop("BIFOCAL_DB", None)
        os.execv(bifocal_bin(), [bifocal_bin(), "--db", db, "run", s])
    try:
        out = _read_until(fd, b"started", time.monotonic() + 20)
        assert b"started" in out, out
        c0 = task_cpu_ns(pid)  # the match runs: the script burns CPU
        wait_until(lambda: task_cpu_ns(pid) - c0 > 100e6, 30, what="the long match to run")
        t0 = time.monotonic()
        os.write(fd, b"\x03")  # the terminal's Ctrl-C: SIGINT to the foreground group
        out += _read_until(fd, b"interrupted", t0 + 10)
        reaped = wait_until(lambda: (lambda r: r if r[0] else None)(os.waitpid(pid, os.WNOHANG)),
                            10 - (time.monotonic() - t0))
        status = reaped[1] if reaped else None
        took = time.monotonic() - t0
        assert status is not None, "still running 10 s after Ctrl-C"
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 2, status
        assert b"interrupted" in out, out
        assert took < 2.0, "Ctrl-C took %.2f s" % took
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        os.close(fd)


# ---- memory ----------------------------------------------------------------------


def test_memory_bomb_stopped_by_cap(tmp_path, db):
    bomb = script(tmp_path, 'local t, i = {}, 0\nwhile true do i = i + 1; t[i] = string.rep("x", 1e6) .. i end\n')
    # measured in a fresh child so ru_maxrss is this run's peak alone
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.stderr.write(r.stderr)\n")
    r = subprocess.run(["python3", "-c", code, bifocal_bin(), "--db", db, "run", "--memory", "96M", bomb],
                       capture_output=True, text=True, timeout=120)
    rc, maxrss_kb = map(int, r.stdout.split())
    assert rc == 2, r.stderr
    assert "exceeded the memory cap of 96 MiB" in r.stderr and "--memory" in r.stderr, r.stderr
    # the cap counts the interpreter's memory; allow 64 MiB for the program,
    # SQLite and the allocator's slack
    assert maxrss_kb < (96 + 64) * 1024, "peak RSS %d KiB" % maxrss_kb


def test_default_cap_is_1_gib(tmp_path, db):
    s = script(tmp_path, 'local s = string.rep("x", 2^31 - 1)\n')
    r = run(["run", s], db=db, check=False)
    assert r.returncode == 2 and "memory cap of 1024 MiB" in r.stderr, r.stderr
    r = run(["run", "--memory", "lots", s], db=db, check=False)
    assert r.returncode == 2 and "bad --memory 'lots'" in r.stderr


# ---- sealed files with forged metadata -------------------------------------------


@pytest.fixture
def sealed_env(tmp_path):
    a = str(tmp_path / "a.db")
    (tmp_path / "a.txt").write_text("main;work 10\nmain;idle 5\n")
    run(["import", str(tmp_path / "a.txt"), "--label", "sender"], db=a)
    run(["keygen", "-o", str(tmp_path / "k")])
    return a, str(tmp_path / "k")


def _seal_with_extra(tmp_path, a, key, extra, name):
    c = sqlite3.connect(a)
    c.execute("update sessions set extra_json=?", (extra,))
    c.commit()
    c.close()
    out = str(tmp_path / name)
    run(["export", "1", "--format", "bifocal", "--encrypt-to", key + ".pub", "-o", out], db=a)
    return out


@pytest.mark.parametrize("extra,why", [
    ('{}, "id": 1, "label": "release-1.4", "redacted": true, "host": "trusted-host"', "text after the object"),
    ('{"id": 1, "x": 2}', 'key "id" is one of bifocal\'s own session fields'),
    ('{"note": "ok", "redacted": true}', 'key "redacted"'),
    ('{not json}', "expected a string key"),
    ('{"a": "\xff"}', "invalid UTF-8"),
    ('[1, 2]', "expected an object"),
    ('{"a": 1, "a": 2}', 'appears twice'),
])
def test_sealed_import_refuses_forged_metadata(tmp_path, sealed_env, extra, why):
    a, key = sealed_env
    if "\xff" in extra:  # raw invalid byte in the stored text
        c = sqlite3.connect(a)
        c.execute("update sessions set extra_json=cast(? as text)", (b'{"a": "\xff"}',))
        c.commit()
        c.close()
        out = str(tmp_path / "s.bfs")
        run(["export", "1", "--format", "bifocal", "--encrypt-to", key + ".pub", "-o", out], db=a)
    else:
        out = _seal_with_extra(tmp_path, a, key, extra, "s.bfs")
    b = str(tmp_path / "b.db")
    r = run(["import", out, "--key", key + ".key"], db=b, check=False)
    assert r.returncode != 0
    assert "metadata (extra) is refused" in r.stderr and why in r.stderr and "nothing imported" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # nothing stored
    if os.path.exists(b):
        assert json.loads(run(["sessions", "--json"], db=b).stdout or "[]") == []


def test_sealed_import_keeps_good_metadata(tmp_path, sealed_env):
    a, key = sealed_env
    good = ('{"dialect": "x", "n": [1, 2, {"k": null}], "s": "\\u00e9", "exit_code": 0, '
            '"python": {"version": "3.12.1", "executable": "/usr/bin/python3"}, "native": {"stops": 3}}')
    out = _seal_with_extra(tmp_path, a, key, good, "g.bfs")
    b = str(tmp_path / "b.db")
    sid = last_line_id(run(["import", out, "--key", key + ".key"], db=b))
    [s] = json.loads(run(["sessions", "--json"], db=b).stdout)
    assert s["id"] == sid and s["label"] == "sender" and s["redacted"] is False
    assert s["extra"] == json.loads(good)  # figures our own producers write are not "forged"


def test_stored_malformed_extra_is_written_as_null(tmp_path, sealed_env):
    # a database damaged or written before the check: --json stays one document
    a, _ = sealed_env
    c = sqlite3.connect(a)
    c.execute("""update sessions set extra_json='{}, "id": 99, "label": "forged"'""")
    c.commit()
    c.close()
    [s] = json.loads(run(["sessions", "--json"], db=a).stdout)
    assert s["id"] == 1 and s["label"] == "sender" and s["extra"] is None
    doc = json.loads(run(["replay", "1", "--view", "functions", "--json"], db=a).stdout)
    assert doc["session"]["id"] == 1 and doc["session"]["label"] == "sender"


# ---- names and labels: inert on terminals, valid UTF-8 in JSON ----------------------

ESC_NAME = b"\x1b[2Jevil\xe2\x80\xae"  # clear screen + right-to-left override
BAD_NAME = b"bad\xff\xfename"
LABEL = b"rel\x1b[31m\nFAKE 99 imported"


@pytest.fixture
def hostile_db(tmp_path):
    db = str(tmp_path / "h.db")
    f = tmp_path / "h.txt"
    f.write_bytes(b"main;" + ESC_NAME + b" 10\nmain;" + BAD_NAME + b" 5\nmain\xc0\xaf;x\x07y 2\n")
    r = brun(["import", str(f), "--label", LABEL], db=db)
    assert r.returncode == 0, r.stderr
    return db


def _no_raw_controls(out):
    text = out.replace(b"\n", b"")
    assert b"\x1b" not in text and b"\x07" not in text and b"\r" not in text, out
    assert b"\xe2\x80\xae" not in out and b"\xff" not in out, out


def test_escape_sequences_shown_inert(hostile_db):
    r = brun(["sessions"], db=hostile_db)
    assert r.returncode == 0
    _no_raw_controls(r.stdout)
    assert len(r.stdout.splitlines()) == 2  # header + one row: the newline did not forge a line
    assert b"rel\\x1b[31m\\nFAKE" in r.stdout
    for view in ("functions", "stack"):
        r = brun(["replay", "1", "--view", view], db=hostile_db)
        assert r.returncode == 0, r.stderr
        _no_raw_controls(r.stdout)
        assert b"\\x1b[2Jevil\\u202e" in r.stdout and b"bad\\xff\\xfename" in r.stdout
        assert not any(l.startswith(b"FAKE") for l in r.stdout.splitlines())
    r = brun(["diff", "1", "1"], db=hostile_db)
    assert r.returncode == 0, r.stderr
    _no_raw_controls(r.stdout)
    assert r.stdout.count(b"rel\\x1b[31m\\nFAKE") == 2


def test_escape_sequences_inert_in_repl_and_scripts(hostile_db, tmp_path):
    env = dict(os.environ, NO_COLOR="1")
    env.pop("BIFOCAL_DB", None)
    p = subprocess.run([bifocal_bin(), "--db", hostile_db], input=b'= "a\\27[2Jb\\nc"\n= bifocal.session(1).label\n',
                       capture_output=True, timeout=30, env=env)
    _no_raw_controls(p.stdout)
    assert b'"a\\27[2Jb' in p.stdout and len(p.stdout.splitlines()) == 2  # %q form; no forged line
    s = script(tmp_path, 'local s = bifocal.session(1)\nlocal rows = {}\n'
                         'for _, f in ipairs(s:functions()) do rows[#rows + 1] = {f.name, f.self_samples} end\n'
                         'bifocal.print_table({"name", "n"}, rows)\nbifocal.check(s.label, true, s:functions()[1].name)\n')
    r = brun(["run", s], db=hostile_db)
    assert r.returncode == 0, r.stderr
    _no_raw_controls(r.stdout)
    assert b"\\x1b[2Jevil" in r.stdout


def test_invalid_utf8_gives_valid_json(hostile_db):
    for args in (["sessions", "--json"], ["replay", "1", "--view", "functions", "--json"]):
        r = brun(args, db=hostile_db)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout.decode("utf-8"))  # strict: raises on invalid UTF-8
    assert b"U+FFFD" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr  # said once
    names = {f["qualname"] for f in doc["functions"]}
    assert "bad\ufffd\ufffdname" in names and "\x1b[2Jevil\u202e" in names
    # the non-UTF-8 command line and label are in the session object
    assert doc["session"]["label"] == "rel\x1b[31m\nFAKE 99 imported"
    assert "\ufffd" not in doc["session"]["label"]


def test_invalid_utf8_command_line_in_json(tmp_path):
    db = str(tmp_path / "c.db")
    f = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9.txt")  # a Latin-1 file name
    with open(f, "wb") as fh:
        fh.write(b"a;b 3\n")
    r = brun(["import", f, "--label", b"caf\xe9"], db=db)
    assert r.returncode == 0, r.stderr
    r = brun(["replay", "1", "--view", "functions", "--json"], db=db)
    doc = json.loads(r.stdout.decode("utf-8"))
    assert doc["session"]["label"] == "caf\ufffd"
    assert "caf\ufffd.txt" in doc["session"]["command"]


# ---- redact cleans extra -------------------------------------------------------------


def test_redact_cleans_extra_keys_and_names(tmp_path, sealed_env):
    a, _ = sealed_env
    me = socket.gethostname()
    c = sqlite3.connect(a)
    c.execute("update sessions set host='build-7.corp.example', command='python /home/alice/app.py', extra_json=?",
              (json.dumps({"/srv/app/cfg.toml": 1, "build-7": {"who": "alice", "note": "ran on build-7.corp.example",
                                                               "plain": "kept", "mach": me}, "n": 3}),))
    c.commit()
    c.close()
    out = str(tmp_path / "r.db")
    run(["redact", "1", "-o", out], db=a)
    [s] = json.loads(run(["sessions", "--json"], db=out).stdout)
    text = json.dumps(s)
    for secret in ("/srv/app", "build-7", "alice", "corp.example"):
        assert secret not in text, (secret, text)
    if len(me) >= 2:
        assert '"%s"' % me not in text
    extra = s["extra"]
    assert extra["n"] == 3
    [inner] = [v for v in extra.values() if isinstance(v, dict)]
    assert inner["plain"] == "kept" and inner["who"].startswith("<path:")


def test_error_lines_inert(tmp_path):
    # a path or a Lua error quoting a hostile name cannot drive the terminal
    bad = os.path.join(os.fsencode(str(tmp_path)), b"x\x1b[2J.db")
    r = brun(["sessions"], db=bad)
    assert r.returncode != 0 and b"\x1b" not in r.stderr and b"x\\x1b[2J.db" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1
    s = script(tmp_path, 'error("name \\27[2J\\226\\128\\174 here")\n')
    r = brun(["run", s], db=str(tmp_path / "t.db"))
    assert r.returncode == 2 and b"\x1b" not in r.stderr and b"\xe2\x80\xae" not in r.stderr, r.stderr
    assert b"name \\x1b[2J\\u202e here" in r.stderr
