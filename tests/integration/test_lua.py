"""`bifocal run`: exit codes, file:line errors, the sandbox, timeouts, the Lua
API, and the shipped scripts (correlate, gate, short_paths, hypothesis)."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import bifocal_bin, run
from lua_story import import_pair, make_story


@pytest.fixture
def story(db):
    make_story(db)
    return db


def script(tmp_path, code, name="s.lua"):
    p = tmp_path / name
    p.write_text(code)
    return str(p)


# ---- exit codes and errors ---------------------------------------------------


def test_all_checks_hold_exit_0(story, tmp_path):
    s = script(tmp_path, 'local s = assert(bifocal.session("base"))\n'
                         'bifocal.check("parse is hot", s:func("parse").self_share > 0.3, "detail")\n')
    r = run(["run", s], db=story, check=False)
    assert r.returncode == 0, r.stderr
    assert "parse is hot" in r.stdout and "ok" in r.stdout and "verdict: PASS" in r.stdout


def test_failed_check_exit_1(story, tmp_path):
    s = script(tmp_path, 'bifocal.check("one", true)\nbifocal.check("two", 1 > 2, "nope")\n')
    r = run(["run", s], db=story, check=False)
    assert r.returncode == 1
    assert "FAILED" in r.stdout and "verdict: FAIL (2 checks, 1 failed)" in r.stdout


def test_no_checks_exit_0(tmp_path, db):
    r = run(["run", script(tmp_path, 'print("hi", ...)\n'), "a", "b"], db=db, check=False)
    assert r.returncode == 0 and r.stdout == "hi\ta\tb\n"


def test_runtime_error_file_line_exit_2(tmp_path, db):
    s = script(tmp_path, "local x = 1\n\nlocal y = nil\nprint(y.field)\n")
    r = run(["run", s], db=db, check=False)
    assert r.returncode == 2
    assert r.stderr.strip().startswith(s + ":4: attempt to index a nil value")


def test_error_without_position_gets_one(tmp_path, db):
    s = script(tmp_path, 'bifocal.check("x", true)\nerror("plain", 0)\n')
    r = run(["run", s], db=db, check=False)
    assert r.returncode == 2 and r.stderr.strip() == s + ":2: plain"
    s = script(tmp_path, "error({})\n", "t.lua")
    r = run(["run", s], db=db, check=False)
    assert r.returncode == 2 and r.stderr.strip() == s + ":1: (error object is a table value)"


def test_syntax_error_exit_2(tmp_path, db):
    s = script(tmp_path, "if then\n")
    r = run(["run", s], db=db, check=False)
    assert r.returncode == 2 and r.stderr.startswith(s + ":1:")


def test_missing_script_and_bad_options(tmp_path, db):
    r = run(["run", str(tmp_path / "nope.lua")], db=db, check=False)
    assert r.returncode == 2 and "cannot read script" in r.stderr
    r = run(["run"], db=db, check=False)
    assert r.returncode == 2 and "run needs a SCRIPT.lua" in r.stderr
    r = run(["run", "--timeout", "x", "a.lua"], db=db, check=False)
    assert r.returncode == 2 and "bad --timeout" in r.stderr
    r = run(["run", "--out", str(tmp_path / "missing"), script(tmp_path, "")], db=db, check=False)
    assert r.returncode == 2 and "is not a directory" in r.stderr


# ---- sandbox -----------------------------------------------------------------


@pytest.mark.parametrize("code,what", [
    ('os.execute("touch {marker}")', "os.execute is refused by the sandbox"),
    ('io.popen("touch {marker}")', "io.popen is refused by the sandbox"),
    ('package.loadlib("/lib/x86_64-linux-gnu/libc.so.6", "system")', "package.loadlib is refused by the sandbox"),
    ('require("lfs")', "C module 'lfs' is refused by the sandbox"),
    ('io.open("{marker}", "w"):write("x")', "refused by the sandbox"),
    ('io.open("{out}/../escape", "w")', "refused by the sandbox"),
    ('io.output("{marker}")', "refused by the sandbox"),
    ('os.rename("{out}/ok", "{marker}")', "refused by the sandbox"),
    ('os.remove("{marker}")', "refused by the sandbox"),
    ('os.tmpname()', "os.tmpname is refused by the sandbox"),
    ('load(string.dump(function() end), nil, "b")', "binary chunks are refused by the sandbox"),
    ('debug.sethook()', "attempt to call a nil value"),
])
def test_sandbox_refuses(tmp_path, db, code, what):
    out = tmp_path / "out"
    out.mkdir()
    (out / "ok").write_text("x")
    marker = tmp_path / "marker"
    s = script(tmp_path, code.format(marker=marker, out=out) + "\n")
    r = run(["run", "--out", str(out), s], db=db, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert what in r.stderr
    assert r.stderr.startswith(s + ":1:")
    assert not marker.exists()
    assert not (tmp_path / "escape").exists()


def test_sandbox_symlink_escape_refused(tmp_path, db):
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(str(tmp_path / "outside"), str(out / "link"))
    s = script(tmp_path, 'io.open("%s/link", "w")\n' % out)
    r = run(["run", "--out", str(out), s], db=db, check=False)
    assert r.returncode == 2 and "refused by the sandbox" in r.stderr
    assert not (tmp_path / "outside").exists()


def test_sandbox_no_out_no_writes(tmp_path, db):
    s = script(tmp_path, 'io.open("%s", "w")\n' % (tmp_path / "x"))
    r = run(["run", s], db=db, check=False)
    assert r.returncode == 2 and "give --out DIR" in r.stderr


def test_sandbox_allows_out_and_reading(tmp_path, db):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "in.txt").write_text("hello\n")
    s = script(tmp_path, 'local f = assert(io.open("%s")); local l = f:read("l"); f:close()\n'
                         'local o = assert(io.open("%s/res.txt", "w")); o:write(l); o:close()\n'
                         'print(bifocal.out_dir)\n' % (tmp_path / "in.txt", out))
    r = run(["run", "--out", str(out), s], db=db, check=False)
    assert r.returncode == 0, r.stderr
    assert (out / "res.txt").read_text() == "hello"
    assert r.stdout.strip() == os.path.realpath(str(out))


def test_unsafe_lifts_sandbox(tmp_path, db):
    marker = tmp_path / "marker"
    s = script(tmp_path, 'assert(os.execute("touch %s"))\nio.open("%s2", "w"):close()\n' % (marker, marker))
    r = run(["run", "--unsafe", s], db=db, check=False)
    assert r.returncode == 0, r.stderr
    assert marker.exists() and (tmp_path / "marker2").exists()


def test_timeout_stops_runaway(tmp_path, db):
    s = script(tmp_path, "local n = 0\nwhile true do pcall(function() while true do n = n + 1 end end) end\n")
    t0 = time.time()
    r = run(["run", "--timeout", "0.5", s], db=db, check=False, timeout=30)
    assert r.returncode == 2
    assert "timed out after 0.5 s" in r.stderr and r.stderr.startswith(s + ":")
    assert time.time() - t0 < 10


def test_ctrl_c_stops_runaway(tmp_path, db):
    s = script(tmp_path, 'io.write("started\\n") io.stdout:flush()\nwhile true do end\n')
    p = subprocess.Popen([bifocal_bin(), "--db", db, "run", s], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "started\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 2
    assert "interrupted" in err


# ---- the Lua API -----------------------------------------------------------------

API = r'''
local db = assert(bifocal.open())
assert(tostring(db):match("^bifocal.db"))
local all = db:sessions()
assert(#all == 5, #all)
local s = assert(db:session("base"))
assert(s.id == 1 and s.kind == "sampled" and s.clock == "wall" and s.rate_hz == 1000)
assert(s.duration_s == 2 and s.sample_count == 2000 and s:info().samples == 2000 and s.profiler_cpu_ns == 20000000)
assert(s == assert(db:session(1)))
assert(s:info().label == "base")
local t = assert(bifocal.session("repro"))
assert(t.kind == "traced")
-- expected failure: nil, message
local none, msg = db:session("no-such-label")
assert(none == nil and type(msg) == "string")
local nf, nmsg = s:func("tiny")
assert(nf == nil and nmsg:match("not observed"))
-- functions
local fs = s:functions()
assert(fs[1].qualname == "parse" and fs[1].self_samples == 900 and math.abs(fs[1].self_share - 0.45) < 1e-9)
assert(fs[1].self_ci[1] < 0.45 and fs[1].self_ci[2] > 0.45 and fs[1].calls == nil)
local byt = s:functions{sort = "total"}
assert(byt[1].total_share == 1.0)
local tp = assert(t:func("parse"))
assert(tp.calls == 300 and tp.self_ns == 1300000000 and tp.self_samples == nil)
assert(math.abs(tp.per_call_ns - 1600000000 / 300) < 1)
-- threads, samples, stacks
local th = s:threads()
assert(#th == 1 and th[1].native_tid == 1)
local n = 0
for smp in s:samples() do n = n + smp.count end
assert(n == 2000)
local n2 = 0
for smp in s:samples{ thread = 1, since = 0, ["until"] = 0.9 } do n2 = n2 + smp.count end
assert(n2 > 0 and n2 < 2000, n2)
local st = s:stacks()
assert(st[1].count == 900 and #st[1].frames == 3 and st[1].frames[3].qualname == "parse")
assert(#db:stack(st[1].stack_id) == 3)
-- edges and call records
local e = t:edges()
assert(#e == 6)
local roots = 0
for _, x in ipairs(e) do if x.caller == nil then roots = roots + 1; assert(x.callee.qualname == "main") end end
assert(roots == 1)
assert(#t:calls() == 3 and #t:calls("parse") == 2 and t:calls("parse")[1].duration_ns == 15000000)
-- join
local rows, sum = assert(bifocal.join(s, t))
assert(sum.n_both == 5 and sum.spearman > 0.5 and sum.budget_ns == 2e9)
local tiny, parse
for _, r in ipairs(rows) do
  if r.qualname == "tiny" then tiny = r end
  if r.qualname == "parse" then parse = r end
end
assert(tiny.observed == false and tiny.self_share == nil and tiny.self_ci == nil and tiny.calls == 100000)
assert(parse.observed and parse.traced and parse.calls == 300)
-- 55% of 2 s = 1.1 s at 1.6 s/300 calls per call → 206.25 calls in 2 s
assert(math.abs(parse.calls_per_s - (1.1 / (1.6 / 300)) / 2) < 1e-6, parse.calls_per_s)
local bad, bmsg = bifocal.join(t, s)
assert(bad == nil and bmsg:match("traced"))
assert(not pcall(bifocal.join, s, 42))   -- misuse raises
-- statistics
local S = bifocal.stats
assert(S.mean{1, 2, 3} == 2 and S.median{3, 1, 2} == 2 and S.percentile({1, 2, 3, 4, 5}, 100) == 5)
assert(math.abs(S.stdev{2, 4, 4, 4, 5, 5, 7, 9} - 2.138089935) < 1e-6)
assert(S.spearman({1, 2, 3, 4}, {10, 20, 30, 40}) == 1 and S.spearman({1, 2, 3}, {3, 2, 1}) == -1)
local lo, hi = S.wilson(50, 100)
assert(lo < 0.5 and hi > 0.5 and math.abs((lo + hi) / 2 - 0.5) < 1e-9)
local z, p = S.two_proportion(100, 1000, 200, 1000)
assert(z > 5 and p < 1e-6)
assert(not pcall(S.mean, {1, "x"}))
assert(bifocal.pct(0.1234) == "12.3%" and bifocal.pct(nil) == "not observed")
assert(bifocal.fmt_ns(1500000):match("ms"))
-- closed database
db:close()
assert(tostring(db) == "bifocal.db (closed)")
local ok, err = pcall(db.sessions, db)
assert(not ok and err:match("closed database"))
assert(not pcall(function() return s:functions() end))
print("api ok")
'''


def test_lua_api(story, tmp_path):
    r = run(["run", script(tmp_path, API)], db=story, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "api ok" in r.stdout


def test_open_missing_database_returns_nil_msg(tmp_path):
    s = script(tmp_path, 'local db, msg = bifocal.open("%s")\nassert(db == nil and msg)\nprint(msg)\n'
               % (tmp_path / "missing.db"))
    r = run(["run", s], check=False)
    assert r.returncode == 0, r.stderr


# ---- shipped scripts -----------------------------------------------------------------


def test_script_lookup_by_bare_name(story):
    r = run(["run", "correlate.lua", "base", "repro"], db=story, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", ["correlate.lua", "gate.lua", "short_paths.lua", "hypothesis.lua"])
def test_scripts_have_usage(name, db):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", name)
    with open(path) as f:
        head = f.read(2000)
    assert "-- usage: bifocal run " + name in head and "-- example: " in head
    r = run(["run", name], db=db, check=False)
    assert r.returncode == 2 and "usage: bifocal run " + name in r.stderr


def test_correlate_script(story):
    r = run(["run", "correlate.lua", "base", "repro"], db=story, check=False)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "FUNCTION" in lines[1] and "parse" in lines[2]
    assert any("tiny" in l and "not observed" in l for l in lines)
    assert "Spearman rank correlation of sampled vs traced self time" in r.stdout
    r = run(["run", "correlate.lua", "base", "repro", "--min-spearman", "1.01"], db=story, check=False)
    assert r.returncode == 1


def test_gate_passes_session_against_itself(story):
    r = run(["run", "gate.lua", "base", "base"], db=story, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: PASS" in r.stdout


def test_gate_fails_regressed(story):
    r = run(["run", "gate.lua", "base", "regressed", "--max-increase", "5"], db=story, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "self share of parse" in r.stdout and "FAILED" in r.stdout
    # a threshold above the growth (45% → 75%) passes
    r = run(["run", "gate.lua", "base", "regressed", "--max-increase", "40"], db=story, check=False)
    assert r.returncode == 0, r.stdout


def test_gate_refuses_different_rate(story):
    r = run(["run", "gate.lua", "base", "slowrate"], db=story, check=False)
    assert r.returncode == 2
    assert "refusing to compare" in r.stderr and "rate_hz differs" in r.stderr


def test_gate_fails_when_profiler_cost_grew(story):
    r = run(["run", "gate.lua", "base", "costly"], db=story, check=False)
    assert r.returncode == 1
    assert "profiler cost" in r.stdout and "FAILED" in r.stdout


def test_gate_imported_regression(db, tmp_path):
    a, b = import_pair(db, tmp_path, 1000, 3000)  # parse 50% → 75%
    r = run(["run", "gate.lua", str(a), str(b)], db=db, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "parse" in r.stdout
    r = run(["run", "gate.lua", str(a), str(a)], db=db, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_gate_noise_is_not_regression(db, tmp_path):
    # 10 vs 14 samples of 20/24: +8 pp but far within noise
    a, b = import_pair(db, tmp_path, 10, 14, other=10)
    r = run(["run", "gate.lua", str(a), str(b), "--min-samples", "5"], db=db, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "within sampling noise" in r.stdout


def test_short_paths_script(story):
    r = run(["run", "short_paths.lua", "repro", "base"], db=story, check=False)
    assert r.returncode == 0, r.stderr
    assert "tiny" in r.stdout and "not observed" in r.stdout and "RATE TO SEE" in r.stdout
    assert "parse" not in r.stdout.split("RATE TO SEE:")[0].split("FUNCTION", 1)[1]


def test_hypothesis_script(story):
    r = run(["run", "hypothesis.lua", "base", "repro"], db=story, check=False)
    assert r.returncode == 0, r.stdout + r.stderr  # parse 55% [52.8-57.2] ≥ 30%, 300/100 = 3 per handle
    assert "calls/s in production" in r.stdout
    r = run(["run", "hypothesis.lua", "base", "repro", "--min-share", "60"], db=story, check=False)
    assert r.returncode == 1


# ---- correlate command -----------------------------------------------------------------


def test_correlate_cli(story):
    r = run(["correlate", "base", "repro"], db=story)
    assert "spearman" in r.stdout and "not observed" in r.stdout
    j = json.loads(run(["correlate", "1", "2", "--json"], db=story).stdout)
    assert j["sampled"] == 1 and j["traced"] == 2 and j["n_both"] == 5
    by = {f["qualname"]: f for f in j["functions"]}
    assert by["tiny"]["observed"] is False and by["tiny"]["self_share"] is None and by["tiny"]["calls"] == 100000
    assert by["parse"]["self_share"] == pytest.approx(0.45) and by["parse"]["calls"] == 300
    assert by["parse"]["calls_per_s"] == pytest.approx((1.1 / (1.6 / 300)) / 2)
    assert j["functions"][0]["qualname"] == "parse"


def test_correlate_cli_errors(story):
    r = run(["correlate", "1", "3"], db=story, check=False)
    assert r.returncode == 1 and "not traced" in r.stderr
    r = run(["correlate", "1"], db=story, check=False)
    assert r.returncode == 2
    r = run(["correlate", "1", "nope"], db=story, check=False)
    assert r.returncode == 1
