"""Exports of sessions made by the real lenses, fed to the real consumers:
pstats.Stats against real cProfile output of the same script (every Python
present), `go tool pprof`, speedscope's own schema, a strict Chrome-trace
check; and every export's totals against `replay`'s, to the sample."""
import json
import os
import subprocess
import sys

import pytest

from conftest import run, last_line_id

SCRIPT = r"""
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def even(n): return True if n == 0 else odd(n - 1)
def odd(n): return False if n == 0 else even(n - 1)
class Box:
    def __init__(self): self.items = []
    def put(self, x): self.items.append(x); return len(self.items)
def main():
    b = Box()
    for i in range(7):
        fib(12); even(9); b.put(i)
    d = {}
    for i in range(5): d.get(i); sorted([3, 1, 2], key=lambda v: -v)
main()
"""

KEEPER = r"""
import time
KEEP = []
def keep():  # 20 x 16 KiB kept per call, written (resident at once)
    for _ in range(20):
        KEEP.append(bytearray(b"x" * 16384))
        for _ in range(2000): pass
def compute():
    return sum(i for i in range(20000))
t = time.time()
while time.time() - t < 0.8: keep(); compute()
"""

# Entries (cc, nc) and caller tuples (nc, cc) of every function of the script,
# and of every C function it calls, restricted to callers in the script (the
# import machinery differs between the two runs; generators are left out:
# cProfile counts each resume as a call).
COMPARE = r"""
import json, pstats, sys
c = pstats.Stats(sys.argv[1]).stats
b = pstats.Stats(sys.argv[2]).stats
S = sys.argv[3]
mine = lambda k: k[0] == S
out = {"keys_c": sorted(k for k in c if mine(k)), "keys_b": sorted(k for k in b if mine(k)), "diff": [], "n": 0}
for k in c:
    cc = {repr(x): list(v[:2]) for x, v in c[k][4].items() if mine(x)}
    if not (mine(k) or cc):
        continue
    out["n"] += 1
    if k not in b:
        out["diff"].append([repr(k), "missing"])
        continue
    bc = {repr(x): list(v[:2]) for x, v in b[k][4].items() if mine(x)}
    if (mine(k) and c[k][:2] != b[k][:2]) or cc != bc:
        out["diff"].append([repr(k), c[k][:2], b[k][:2], cc, bc])
print(json.dumps(out))
"""


def test_pstats_equals_real_cprofile(python, tmp_path):
    script = tmp_path / "work.py"
    script.write_text(SCRIPT)
    cprof = tmp_path / "c.prof"
    r = subprocess.run([python, "-m", "cProfile", "-o", str(cprof), str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    db = str(tmp_path / "t.db")
    sid = last_line_id(run(["trace", "--", python, str(script)], db=db))
    bprof = tmp_path / "b.prof"
    run(["export", str(sid), "--format", "pstats", "-o", str(bprof)], db=db)
    r = subprocess.run([python, "-c", COMPARE, str(cprof), str(bprof), str(script)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["keys_c"] == d["keys_b"]
    assert len(d["keys_c"]) == 9  # <module> fib even odd Box __init__ put main <lambda>
    assert d["n"] >= 13 and d["diff"] == [], d["diff"]


# ---- sessions of the real lenses (oldest and newest Python) ----------------------

import pythons  # noqa: E402
from views_helpers import require_tool  # noqa: E402

WORK = r"""
import threading, time, lib
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def work():
    return sum(i * i for i in range(3000))
def worker():
    t = time.time()
    while time.time() - t < 0.8: lib.work(); time.sleep(0.002)
th = threading.Thread(target=worker, name="worker"); th.start()
t = time.time()
while time.time() - t < 0.8: fib(14); work(); lib.work()
th.join()
"""
LIB = r"""
def work():
    s = 0
    for i in range(4000): s += i % 7
    return s
"""


def _ends():
    ps = pythons.discover()
    return [ps[0], ps[-1]] if len(ps) > 1 else ps


@pytest.fixture(scope="module", params=_ends(), ids=lambda p: p["tag"])
def lens(tmp_path_factory, request):
    """Sessions of the oldest and the newest Python present."""
    d = tmp_path_factory.mktemp("lens")
    py = request.param["path"]
    (d / "app.py").write_text(WORK)
    (d / "lib.py").write_text(LIB)
    db = str(d / "l.db")
    s = {
        "sampled": last_line_id(run(["record", "--rate", "400", "--", py, str(d / "app.py")], db=db, timeout=120)),
        "traced": last_line_id(run(["trace", "--", py, str(d / "app.py")], db=db, timeout=120)),
        "focus": last_line_id(run(["trace", "--focus", "*work*", "--", py, str(d / "app.py")], db=db, timeout=120)),
    }
    (d / "keeper.py").write_text(KEEPER)
    s["memory"] = last_line_id(run(["record", "--memory", "--rate", "400", "--", py, str(d / "keeper.py")], db=db,
                                   timeout=120))
    return db, s, d


def replay_json(db, sid):
    return json.loads(run(["replay", str(sid), "--json", "--limit", "100000"], db=db).stdout)


def go_pprof(d, *args):
    go = require_tool("go", "golang-go")
    env = dict(os.environ, HOME=str(d), GOCACHE=str(d / "gocache"), PPROF_TMPDIR=str(d), GOFLAGS="",
               GOTOOLCHAIN="local", GOPROXY="off")
    # no -symbolize=none: pprof then applies its name clean-up, as users see it
    r = subprocess.run([go, "tool", "pprof"] + list(args), capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def top_rows(out):
    rows, started = {}, False
    for line in out.splitlines():
        if line.strip().startswith("flat"):
            started = True
            continue
        if started and line.strip():
            p = line.split()
            rows[" ".join(p[5:])] = (p[0], p[3])
    return rows


def total_of(out):
    for line in out.splitlines():
        if "Total samples = " in line:
            return line.split("Total samples = ")[1].split()[0]
    raise AssertionError(out)


def test_pprof_sampled_in_go_tool_pprof(lens):
    db, s, d = lens
    pb = d / "s.pb.gz"
    run(["export", str(s["sampled"]), "--format", "pprof", "-o", str(pb)], db=db)
    out = go_pprof(d, "-top", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0", str(pb))
    r = replay_json(db, s["sampled"])
    # default index is what replay shares by (samples for a wall session), every sample kept
    assert "Type: samples" in out
    assert int(total_of(out)) == r["total_samples"], out
    rows = top_rows(out)
    mod = [k for k in rows if k.endswith(".<module>")]
    assert "app.<module>" in mod, out
    assert "<unknown>" not in out
    # same qualname in two files: two rows, each with replay's self samples
    by = {}
    for f in r["functions"]:
        if f["file"].endswith("/app.py") or f["file"].endswith("/lib.py"):
            by["%s.%s" % (os.path.basename(f["file"])[:-3], f["qualname"])] = f
    assert {"app.work", "lib.work", "app.fib"} <= set(by), sorted(by)
    for name, f in by.items():
        if f["self_samples"] or name in rows:
            assert int(rows[name][0]) == f["self_samples"], (name, rows.get(name), f)
    empty = r["total_samples"] - sum(f["self_samples"] for f in r["functions"])
    assert int(rows.get("[no Python frame]", ("0",))[0]) == empty
    raw = go_pprof(d, "-raw", str(pb))
    assert "samples/count[dflt] wall/nanoseconds" in raw
    assert len({l.strip() for l in raw.splitlines() if l.strip().startswith("thread:[")}) >= 2
    body = raw.split("samples/count[dflt] wall/nanoseconds\n")[1].split("Locations")[0]
    counts = [int(l.split()[0]) for l in body.splitlines() if l.strip() and ":" in l and not l.strip().startswith("thread")]
    assert sum(counts) == r["total_samples"]
    traces = go_pprof(d, "-traces", str(pb))
    assert "lib.work" in traces and "app.<module>" in traces


def test_pprof_traced_counts_calls_like_the_trace_view(lens):
    db, s, d = lens
    pb = d / "t.pb.gz"
    run(["export", str(s["traced"]), "--format", "pprof", "-o", str(pb)], db=db)
    r = replay_json(db, s["traced"])
    calls = go_pprof(d, "-top", "-sample_index=calls", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0",
                     str(pb))
    rows = top_rows(calls)
    for f in r["functions"]:
        if f["file"].endswith("/app.py") or f["file"].endswith("/lib.py"):
            name = "%s.%s" % (os.path.basename(f["file"])[:-3], f["qualname"])
            assert int(rows[name][0]) == f["calls"], (name, rows.get(name), f["calls"])
    fib = [f for f in r["functions"] if f["qualname"] == "fib"][0]
    assert fib["calls"] > 100 * fib["primitive_calls"] > 0  # recursion is in there
    out = go_pprof(d, "-top", str(pb))
    assert "Type: wall" in out and "app.<module>" in out
    traces = go_pprof(d, "-traces", "-sample_index=calls", str(pb))
    assert "app.fib\n" in traces and traces.count("app.fib") >= 2


def test_pprof_memory_bytes_in_go_tool_pprof(lens):
    """export --memory -f pprof: alloc_space/bytes is the default sample type;
    go tool pprof's total is replay --memory's growth to the byte, and each
    function's flat bytes its self growth (a parallel test: no shares)."""
    db, s, d = lens
    pb = d / "m.pb.gz"
    run(["export", str(s["memory"]), "--memory", "--format", "pprof", "-o", str(pb)], db=db)
    r = json.loads(run(["replay", str(s["memory"]), "--memory", "--json", "--limit", "100000"], db=db).stdout)
    raw = go_pprof(d, "-raw", str(pb))
    assert "samples/count alloc_space/bytes[dflt]" in raw, raw[:400]
    body = raw.split("samples/count alloc_space/bytes[dflt]\n")[1].split("Locations")[0]
    rows = [l.split() for l in body.splitlines() if l.strip() and ":" in l and not l.strip().startswith("thread")]
    assert sum(int(p[1].rstrip(":")) for p in rows) == r["memory"]["growth_bytes"] > 1 << 20
    assert sum(int(p[0]) for p in rows) == r["memory"]["growth_changes"]
    out = go_pprof(d, "-top", "-sample_index=alloc_space", "-unit=bytes", "-nodecount=100000", "-nodefraction=0",
                   "-edgefraction=0", str(pb))
    assert "Type: alloc_space" in out and "Total samples = %dB" % r["memory"]["growth_bytes"] in out, out
    top = {k: v[0] for k, v in top_rows(out).items()}
    keep = [f for f in r["functions"] if f["qualname"] == "keep"][0]
    assert top["keeper.keep"] == "%dB" % keep["self"]["growth_bytes"], (top, keep)


# ---- speedscope: its own schema, from its npm package ---------------------------

VALIDATE = r"""
const fs = require("fs");
const Ajv = require("ajv");
const ajv = new Ajv({allErrors: true, strict: false});
const validate = ajv.compile(JSON.parse(fs.readFileSync(process.argv[2], "utf8")));
for (const f of process.argv.slice(3)) {
  if (!validate(JSON.parse(fs.readFileSync(f, "utf8")))) {
    console.log(f + ": " + JSON.stringify(validate.errors.slice(0, 5)));
    process.exit(1);
  }
}
console.log("valid");
"""


def speedscope_schema():
    """speedscope's file-format schema and ajv, installed by .ci/setup with npm
    under $BIFOCAL_NPM_DIR (default ~/.cache/bifocal-npm)."""
    npm_dir = os.environ.get("BIFOCAL_NPM_DIR") or os.path.expanduser("~/.cache/bifocal-npm")
    mods = os.path.join(npm_dir, "node_modules")
    schema = os.path.join(mods, "speedscope", "dist", "release", "file-format-schema.json")
    node = require_tool("node", "nodejs")
    if not (os.path.exists(schema) and os.path.isdir(os.path.join(mods, "ajv"))):
        msg = "speedscope's schema or ajv missing under %s (npm install --prefix %s speedscope ajv@8)" % (mods, npm_dir)
        if os.environ.get("CI"):
            pytest.fail(msg + ": .ci/setup installs them")
        pytest.skip(msg)
    return node, mods, schema


def test_speedscope_validates_against_its_schema(lens):
    db, s, d = lens
    node, mods, schema = speedscope_schema()
    files = []
    for kind in ("sampled", "traced", "focus", "memory"):
        p = d / ("%s.speedscope.json" % kind)
        run(["export", str(s[kind])] + (["--memory"] if kind == "memory" else []) +
            ["--format", "speedscope", "-o", str(p)], db=db)
        files.append(str(p))
    js = d / "validate.js"
    js.write_text(VALIDATE)
    r = subprocess.run([node, str(js), schema] + files, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NODE_PATH=mods))
    assert r.returncode == 0 and "valid" in r.stdout, r.stdout + r.stderr
    # sampled: one time-ordered profile per thread, every sample's weight kept
    sp = json.load(open(files[0]))
    assert all(p["type"] == "sampled" and p["unit"] == "nanoseconds" for p in sp["profiles"])
    assert len(sp["profiles"]) == 2
    frames = sp["shared"]["frames"]
    for p in sp["profiles"]:
        assert p["samples"] and all(w > 0 for w in p["weights"])
    ev = json.load(open(files[2]))
    assert [p["type"] for p in ev["profiles"]] == ["evented", "evented"]  # *work* matches in both threads
    names = {frames_ev["name"] for frames_ev in ev["shared"]["frames"]}
    assert "work" in names
    assert frames and all("name" in f for f in frames)
    # memory: weights in bytes, summing to the growth charged to Python stacks
    mem = json.load(open(files[3]))
    assert {(p["type"], p["unit"]) for p in mem["profiles"]} == {("sampled", "bytes")}
    r = json.loads(run(["replay", str(s["memory"]), "--memory", "--json", "--limit", "100000"], db=db).stdout)
    framed = sum(f["self"]["growth_bytes"] for f in r["functions"])
    assert sum(sum(p["weights"]) for p in mem["profiles"]) == framed > 1 << 20


# ---- Chrome trace: a strict structural check --------------------------------------

def check_chrome(path):
    """Trace-event JSON as chrome://tracing and Perfetto read it: metadata
    names, "X" events with non-negative ts/dur, on each thread properly nested
    (every event inside its parent), the recorded depth equal to the nesting."""
    d = json.load(open(path))
    assert isinstance(d["traceEvents"], list) and d["displayTimeUnit"] in ("ms", "ns")
    meta = [e for e in d["traceEvents"] if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name"}
    xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
    assert {e["ph"] for e in d["traceEvents"]} <= {"M", "X"}
    by = {}
    for e in xs:
        assert isinstance(e["name"], str) and e["name"]
        assert e["ts"] >= 0 and e["dur"] >= 0 and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        by.setdefault(e["tid"], []).append(e)
    for es in by.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"], e["args"]["depth"]))
        stack = []
        for e in es:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            if stack:
                assert e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 1e-3, (e, stack[-1])
            stack.append(e)
    return d, xs


def test_chrome_trace_sampled_and_focus(lens):
    db, s, d = lens
    p = d / "sampled.chrome.json"
    run(["export", str(s["sampled"]), "--format", "chrome", "-o", str(p)], db=db)
    _, xs = check_chrome(p)
    r = replay_json(db, s["sampled"])
    assert sum(e["args"]["samples"] for e in xs if e["args"]["depth"] == 0) == r["total_samples"]
    assert len({e["tid"] for e in xs}) == 2
    assert any(e["name"] == "fib" for e in xs) and any(e["name"] == "work" for e in xs)
    p = d / "focus.chrome.json"
    run(["export", str(s["focus"]), "--format", "chrome", "-o", str(p)], db=db)
    _, xs = check_chrome(p)
    assert {e["name"] for e in xs if e["args"]["depth"] == 0} == {"work", "worker"}


# ---- one session, every export: replay's total, to the sample ----------------------

PSTATS_TOTAL = r"""
import io, pstats, sys
st = pstats.Stats(sys.argv[1], stream=io.StringIO())
print(repr(st.total_tt))
"""


def test_every_export_totals_equal_replay(lens):
    db, s, d = lens
    sid = str(s["sampled"])
    total = replay_json(db, s["sampled"])["total_samples"]
    got = {}
    # collapsed: counts per line
    p = d / "t.collapsed"
    run(["export", sid, "--format", "collapsed", "-o", str(p)], db=db)
    got["collapsed"] = sum(int(l.rsplit(" ", 1)[1]) for l in open(p) if l.strip())
    # pprof: the samples index, every sample kept
    p = d / "t.pb.gz"
    run(["export", sid, "--format", "pprof", "-o", str(p)], db=db)
    got["pprof"] = int(total_of(go_pprof(d, "-top", "-sample_index=samples", str(p))))
    # speedscope: one weight per run of samples; the count of samples is
    # weight / period on a wall session whose every sample weighs one period
    p = d / "t.speedscope.json"
    run(["export", sid, "--format", "speedscope", "-o", str(p)], db=db)
    sp = json.load(open(p))
    info = [x for x in json.loads(run(["sessions", "--json"], db=db).stdout) if x["id"] == s["sampled"]][0]
    lua = d / "w.lua"
    lua.write_text("local s = bifocal.open():session(%s)\nlocal w = 0\n"
                   "for smp in s:samples{} do w = w + smp.weight end\nprint(w)\n" % sid)
    weight = float(run(["run", str(lua)], db=db).stdout.strip())
    assert abs(sum(sum(p["weights"]) for p in sp["profiles"]) - weight) <= 1e-6 * weight
    got["speedscope"] = total if abs(sum(sum(p["weights"]) for p in sp["profiles"]) - weight) <= 1e-6 * weight else -1
    # chrome: samples of the outermost events
    p = d / "t.chrome.json"
    run(["export", sid, "--format", "chrome", "-o", str(p)], db=db)
    got["chrome"] = sum(e["args"]["samples"] for e in json.load(open(p))["traceEvents"]
                        if e["ph"] == "X" and e["args"]["depth"] == 0)
    # pstats carries seconds: its total time is every sample's weight, those
    # without a Python frame included (the "[no Python frame]" entry)
    p = d / "t.prof"
    run(["export", sid, "--format", "pstats", "-o", str(p)], db=db)
    r = subprocess.run([sys.executable, "-c", PSTATS_TOTAL, str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert abs(float(r.stdout) - weight / 1e9) <= 1e-9 * weight
    assert got == {k: total for k in got}, (got, total, info["samples"])


def test_focus_records_nested_matching_calls(python, tmp_path):
    """--focus records every call of a matching function, nested ones too:
    the Chrome export of fib(6) three times is 75 properly nested calls."""
    script = tmp_path / "fib.py"
    script.write_text("def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
                      "for _ in range(3): fib(6)\n")
    db = str(tmp_path / "f.db")
    sid = last_line_id(run(["trace", "--focus", "*fib*", "--", python, str(script)], db=db))
    p = tmp_path / "f.json"
    run(["export", str(sid), "--format", "chrome", "-o", str(p)], db=db)
    _, xs = check_chrome(p)
    assert len(xs) == 75 and {e["name"] for e in xs} == {"fib"}
    assert max(e["args"]["depth"] for e in xs) == 5 and sum(e["args"]["depth"] == 0 for e in xs) == 3
    sp = tmp_path / "f.speedscope.json"
    run(["export", str(sid), "--format", "speedscope", "-o", str(sp)], db=db)
    ev = json.load(open(sp))["profiles"][0]["events"]
    assert sum(e["type"] == "O" for e in ev) == 75
