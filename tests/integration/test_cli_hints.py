"""The libraries say what is wrong with which session and name no option;
the command line adds the option that helps (repl/cli_hints.c). The lines a
user sees are pinned here word for word, so a library message edited without
its hint (or the other way round) fails, and a Lua script sees the library's
message without the command-line advice. No interpreter is needed except for
one short asyncio recording: sessions come from tests/tools/gen_sessions and
`bifocal import`."""
import pytest

import pythons
from conftest import run
from views_helpers import COLLAPSED, gen, last_line_id


@pytest.fixture(scope="module")
def hdb(tmp_path_factory):
    d = tmp_path_factory.mktemp("hints")
    path = str(d / "h.db")
    s = {"traced": gen(path, "traced"), "sampled": gen(path, "sampled", "--samples", "2000")}
    coll = d / "c.txt"
    coll.write_text(COLLAPSED)
    s["imported"] = last_line_id(run(["import", str(coll)], db=path))
    return path, s, d


def err_line(path, args):
    r = run(args, db=path, check=False)
    assert r.returncode == 1, (args, r.returncode, r.stderr)
    return r.stderr


def test_view_errors_carry_the_option_that_helps(hdb):
    path, s, _ = hdb
    t = s["traced"]
    assert err_line(path, ["replay", str(t), "--view", "heatmap"]) == (
        "bifocal: session %d is traced: it has no samples over time for a heatmap (see --view functions, "
        "--view flame, or export --format chrome for the call timeline)\n" % t)
    assert err_line(path, ["replay", str(t), "--view", "stack"]) == (
        "bifocal: session %d is traced: it has no sampled stacks (see --view flame for caller→callee paths)\n" % t)
    assert err_line(path, ["replay", str(t), "--view", "gil"]) == (
        "bifocal: session %d is traced: the GIL view needs a sampled session (bifocal record samples each "
        "thread's GIL and CPU state)\n" % t)
    assert err_line(path, ["replay", str(t), "--view", "tasks"]) == (
        "bifocal: session %d is traced: the tasks view needs a sampled session (record one with "
        "`bifocal record --async`)\n" % t)


def test_export_and_correlate_errors_carry_the_advice(hdb):
    path, s, d = hdb
    i = s["imported"]
    assert err_line(path, ["export", str(i), "--format", "chrome", "-o", str(d / "x.json")]) == (
        "bifocal: session %d is imported: its samples carry no times, so there is no timeline to export "
        "(try --format speedscope or collapsed)\n" % i)
    assert err_line(path, ["correlate", str(s["sampled"]), str(i)]) == (
        "bifocal: session %d is imported, not traced (see `bifocal sessions`)\n" % i)


def test_more_rows_footers_name_limit(hdb):
    path, s, _ = hdb
    r = run(["replay", str(s["imported"]), "--view", "functions", "--limit", "1"], db=path)
    assert "… 5 more (use --limit)\n" in r.stdout
    r = run(["replay", str(s["sampled"]), "--view", "heatmap", "--limit", "1"], db=path)
    assert " more functions (use --limit)\n" in r.stdout
    r = run(["diff", str(s["sampled"]), str(s["sampled"]), "--threshold", "0", "--limit", "1"], db=path)
    assert " more below 0.0 pp or past --limit\n" in r.stdout


LOOP = """
import asyncio, time
async def spin():
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        sum(range(2000))
        await asyncio.sleep(0)
asyncio.run(spin())
"""


def test_tasks_view_hints_name_record_async(hdb, tmp_path):
    path, s, _ = hdb
    r = run(["replay", str(s["sampled"]), "--view", "tasks"], db=path)
    assert ("no asyncio tasks observed (record with `bifocal record --async`; C and pure-Python Tasks of\n"
            "the main interpreter on CPython 3.8-3.15 are read)\n") in r.stdout, r.stdout
    # an event loop recorded without --async: the loop split is shown, task data is not
    ps = pythons.discover()
    if not ps:
        pytest.skip("no Python interpreter found to record an event loop")
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    sid = last_line_id(run(["record", "-r", "500", "--", ps[0]["path"], str(script)], db=path))
    r = run(["replay", str(sid), "--view", "tasks"], db=path)
    assert "(no task data: every callback counted as task code; record --async to tell them apart)\n" in r.stdout, (
        ps[0]["path"], r.stdout)


def test_lua_sees_the_library_message_without_cli_advice(hdb):
    path, s, d = hdb
    script = d / "join.lua"
    script.write_text("local a, b = bifocal.session(%d), bifocal.session(%d)\n"
                      "print(select(2, bifocal.join(a, b)))\n" % (s["sampled"], s["imported"]))
    r = run(["run", str(script)], db=path)
    assert r.stdout == "session %d is imported, not traced\n" % s["imported"]


def test_store_and_key_errors_carry_the_option_that_helps(hdb, tmp_path):
    path, s, d = hdb
    missing = str(tmp_path / "nope.db")
    assert err_line(missing, ["sessions"]) == (
        "bifocal: database '%s' does not exist yet (record or import something first, or pass --db)\n" % missing)
    other = str(tmp_path / "other.db")
    import sqlite3
    c = sqlite3.connect(other)
    c.execute("create table t(x)")
    c.commit()
    c.close()
    assert err_line(other, ["sessions"]) == (
        "bifocal: '%s' is a SQLite database but not a bifocal one (choose another file with --db)\n" % other)
    me = str(tmp_path / "me")
    run(["keygen", "-o", me], db=path)
    assert err_line(path, ["keygen", "-o", me]) == (
        "bifocal: '%s.pub' or '%s.key' already exists; choose another name (keygen -o NAME)\n" % (me, me))
    out = str(tmp_path / "x.bfs")
    i = str(s["imported"])
    assert err_line(path, ["export", i, "--format", "bifocal", "--encrypt-to", me + ".key", "-o", out]) == (
        "bifocal: '%s.key' is a secret key, not the recipient's public key (--encrypt-to takes the "
        "recipient's .pub file)\n" % me)
    assert err_line(path, ["export", i, "--format", "bifocal", "--encrypt-to", "zzz", "-o", out]) == (
        "bifocal: public key 'zzz': no such file and not a base64 public key (--encrypt-to takes a .pub "
        "file or its base64 text)\n")
    run(["export", i, "--format", "bifocal", "--encrypt-to", me + ".pub", "-o", out], db=path)
    assert err_line(path, ["import", out, "--key", me + ".pub"]) == (
        "bifocal: '%s.pub' is a public key, not your secret key (--key takes your .key file)\n" % me)
