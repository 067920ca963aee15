"""Exports checked in the tools that read them: pstats.Stats on every Python
present, `go tool pprof`, speedscope's format, Chrome trace events, and the
collapsed export → import round trip. Files are 0600 and written atomically."""
import glob
import json
import os
import stat
import subprocess

import pytest

from conftest import run, last_line_id
from views_helpers import make_db, functions_json, require_tool


@pytest.fixture(scope="module")
def vdb(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("exports") / "e.db")
    return path, make_db(path)


def export(db, sid, fmt, path):
    run(["export", str(sid), "--format", fmt, "-o", str(path)], db=db)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not glob.glob(str(path) + ".tmp.*")
    return path


# ---- pstats -------------------------------------------------------------------

LOAD_PSTATS = r"""
import io, json, pstats, sys
s = pstats.Stats(sys.argv[1], stream=io.StringIO())
s.sort_stats("cumulative").print_stats(10)
s.print_callers(5)
rows = []
for (f, l, n), (cc, nc, tt, ct, callers) in s.stats.items():
    rows.append([f, l, n, cc, nc, tt, ct, [[c[0], c[1], c[2]] + list(v) for c, v in callers.items()]])
print(json.dumps({"rows": rows, "total_calls": s.total_calls, "total_tt": s.total_tt}))
"""


def load_pstats(python, path):
    r = subprocess.run([python, "-c", LOAD_PSTATS, str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "%s cannot load %s:\n%s" % (python, path, r.stderr)
    d = json.loads(r.stdout)
    return d, {(row[0], row[2]): row for row in d["rows"]}


def key(f):
    """cProfile's label: co_name for Python code, its C-function names."""
    q = f["qualname"]
    if f["file"] == "<builtin>":
        parts = q.split(".")
        if len(parts) >= 3:
            tp = ".".join(parts[1:-1]) if parts[0] == "builtins" else ".".join(parts[:-1])
            return ("~", "<method '%s' of '%s' objects>" % (parts[-1], tp))
        return ("~", "<built-in method %s>" % q)
    return (f["file"], q.rsplit(".", 1)[-1])


def test_pstats_loads_everywhere_and_counts_match(vdb, tmp_path, python):
    db, s = vdb
    for kind in ("wall", "cpu", "traced", "imported"):
        prof = export(db, s[kind], "pstats", tmp_path / ("%s.prof" % kind))
        d, rows = load_pstats(python, prof)
        fj = functions_json(db, s[kind])
        assert len(rows) == len(fj["functions"]), kind
        for f in fj["functions"]:
            row = rows[key(f)]
            if kind == "traced":
                assert row[3] == f["primitive_calls"] and row[4] == f["calls"]
                assert abs(row[5] - f["self_ns"] / 1e9) < 1e-9 and abs(row[6] - f["total_ns"] / 1e9) < 1e-9
            else:
                assert row[3] == f["total_samples"], (kind, f["qualname"])
                assert row[4] >= row[3]
                # self time over all self time is the self share
                assert abs(row[5] / d["total_tt"] - f["self_share"]) < 1e-9, (kind, f["qualname"])
    # traced callers come from the caller→callee edges
    d, rows = load_pstats(python, tmp_path / "traced.prof")
    fib = rows[("/srv/app/compute.py", "fib")]
    callers = {(c[0], c[2]): c[3:] for c in fib[7]}
    # caller entries are (calls, primitive calls, ...) as cProfile writes them
    assert callers[("/srv/app/compute.py", "compute")][:2] == [100, 100]
    assert callers[("/srv/app/compute.py", "fib")][:2] == [1700, 0]
    assert d["total_calls"] == 1 + 1 + 100 * 5 + 1800
    # sampled callers: fib is called by compute and by itself
    d, rows = load_pstats(python, tmp_path / "wall.prof")
    names = {c[2] for c in rows[("/srv/app/compute.py", "fib")][7]}
    assert names == {"compute", "fib"}


# ---- pprof --------------------------------------------------------------------

def pprof_top(go, path, tmp_path, sample_index=None):
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"), PPROF_TMPDIR=str(tmp_path),
               GOFLAGS="", GOTOOLCHAIN="local", GOPROXY="off")
    cmd = [go, "tool", "pprof", "-top", "-nodecount=100", "-symbolize=none"]
    if sample_index:
        cmd.append("-sample_index=" + sample_index)
    r = subprocess.run(cmd + [str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    rows, started = [], False
    for line in r.stdout.splitlines():
        if line.strip().startswith("flat"):
            started = True
            continue
        if started and line.strip():
            parts = line.split()
            rows.append((" ".join(parts[5:]), parts[0], float(parts[1].rstrip("%"))))
    return r.stdout, rows


def pprof_name(f):
    """pprof function names are module-qualified: "compute.fib", "time.sleep"."""
    if f["file"] == "<builtin>":
        return f["qualname"]
    return os.path.basename(f["file"])[:-3] + "." + f["qualname"]


def test_pprof_reads_in_go_tool_pprof(vdb, tmp_path):
    go = require_tool("go", "golang-go")
    db, s = vdb
    # wall clock: samples index gives the sample counts of the functions view
    pb = export(db, s["wall"], "pprof", tmp_path / "wall.pb.gz")
    with open(pb, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    out, rows = pprof_top(go, pb, tmp_path, "samples")
    fj = functions_json(db, s["wall"])["functions"]
    top = [f for f in fj if f["self_samples"] > 0][:5]
    assert [r[0] for r in rows[:5]] == [pprof_name(f) for f in top], out
    for r, f in zip(rows, top):
        assert int(r[1]) == f["self_samples"]
    out, _ = pprof_top(go, pb, tmp_path)
    assert "Type: samples" in out  # the default index is what replay shares by
    out, _ = pprof_top(go, pb, tmp_path, "wall")
    assert "Type: wall" in out
    # cpu clock: the default (last) value type is cpu nanoseconds; shares follow weight
    pb = export(db, s["cpu"], "pprof", tmp_path / "cpu.pb.gz")
    out, rows = pprof_top(go, pb, tmp_path)
    assert "Type: cpu" in out
    fj = functions_json(db, s["cpu"])["functions"]
    for r, f in zip(rows[:5], fj[:5]):
        assert r[0] == pprof_name(f) and abs(r[2] - 100 * f["self_share"]) < 0.011, (r, f["self_share"])
    # traced and imported sessions export too
    for kind in ("traced", "imported"):
        pb = export(db, s[kind], "pprof", tmp_path / ("%s.pb.gz" % kind))
        out, rows = pprof_top(go, pb, tmp_path)
        assert rows, out
    _, rows = pprof_top(go, tmp_path / "traced.pb.gz", tmp_path)
    assert rows[0][0] == "compute.fib" and abs(rows[0][2] - 50.0) < 0.01


# ---- speedscope ------------------------------------------------------------------

def test_speedscope_format(vdb, tmp_path):
    db, s = vdb
    for kind in ("wall", "cpu", "traced", "imported"):
        p = export(db, s[kind], "speedscope", tmp_path / ("%s.speedscope.json" % kind))
        d = json.load(open(p))
        assert d["$schema"] == "https://www.speedscope.app/file-format-schema.json"
        frames = d["shared"]["frames"]
        assert frames and all("name" in f for f in frames)
        assert len({(f["name"], f.get("file"), f.get("line")) for f in frames}) == len(frames)  # shared, no dupes
        for prof in d["profiles"]:
            if kind == "traced":  # focus-mode call records: evented, O/C balanced in time order
                assert prof["type"] == "evented"
                ats = [e["at"] for e in prof["events"]]
                assert ats == sorted(ats) and len(ats) % 2 == 0
                assert sum(1 for e in prof["events"] if e["type"] == "O") == len(ats) // 2
                continue
            assert prof["type"] == "sampled"
            assert len(prof["samples"]) == len(prof["weights"])
            assert all(0 <= i < len(frames) for st in prof["samples"] for i in st)
            assert abs(sum(prof["weights"]) - prof["endValue"]) < 1e-6 * max(1, prof["endValue"])
    d = json.load(open(tmp_path / "wall.speedscope.json"))
    assert [p["name"] for p in d["profiles"]] == ["MainThread (1000)", "worker-1 (1001)", "worker-2 (1002)"]
    assert all(p["unit"] == "nanoseconds" for p in d["profiles"])
    # weights: 30000 samples of 1 ms
    assert abs(sum(sum(p["weights"]) for p in d["profiles"]) - 30000 * 1e6) < 1


# ---- chrome ------------------------------------------------------------------------

def test_chrome_trace_events(vdb, tmp_path):
    db, s = vdb
    p = export(db, s["traced"], "chrome", tmp_path / "t.json")
    d = json.load(open(p))
    xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 400
    assert {e["name"] for e in xs} == {"Server.handle_request", "parse_request", "compute", "render_page"}
    names = [e for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert names and names[0]["args"]["name"] == "MainThread"
    first = sorted(xs, key=lambda e: (e["ts"], -e["dur"]))[:2]
    assert first[0]["name"] == "Server.handle_request" and first[1]["ts"] >= first[0]["ts"]
    assert first[1]["ts"] + first[1]["dur"] <= first[0]["ts"] + first[0]["dur"]  # nested in the focus call
    # imported samples carry no times: one clear line, no file left behind
    out = tmp_path / "none.json"
    r = run(["export", str(s["imported"]), "--format", "chrome", "-o", str(out)], db=db, check=False)
    assert r.returncode == 1 and "no times" in r.stderr
    assert not out.exists() and not glob.glob(str(out) + ".tmp.*")


# ---- collapsed ----------------------------------------------------------------------

def test_collapsed_round_trip(vdb, tmp_path):
    db, s = vdb
    for kind in ("wall", "cpu", "imported"):
        a = export(db, s[kind], "collapsed", tmp_path / ("%s.a.txt" % kind))
        sid = last_line_id(run(["import", str(a)], db=db))
        b = export(db, sid, "collapsed", tmp_path / ("%s.b.txt" % kind))
        assert sorted(open(a).read().splitlines()) == sorted(open(b).read().splitlines()), kind
        fa = {(f["qualname"], f["file"], f["firstlineno"]): f for f in functions_json(db, s[kind])["functions"]}
        fb = {(f["qualname"], f["file"], f["firstlineno"]): f for f in functions_json(db, sid)["functions"]}
        assert fa.keys() == fb.keys()
        for k in fa:
            assert abs(fa[k]["self_share"] - fb[k]["self_share"]) < 1e-12, k
            assert abs(fa[k]["total_share"] - fb[k]["total_share"]) < 1e-12, k


def test_export_filters(vdb, tmp_path):
    db, s = vdb
    out = tmp_path / "main.json"
    run(["export", str(s["wall"]), "--format", "speedscope", "--thread", "MainThread", "--since", "1",
         "--until", "3", "-o", str(out)], db=db)
    d = json.load(open(out))
    assert [p["name"] for p in d["profiles"]] == ["MainThread (1000)"]
    assert abs(sum(d["profiles"][0]["weights"]) - 2000 * 1e6) < 1  # 2 s of 1 ms samples
    r = run(["export", str(s["wall"]), "--format", "pstats", "--thread", "nope", "-o", str(out)], db=db, check=False)
    assert r.returncode == 1 and "no thread 'nope'" in r.stderr


def test_export_errors(vdb, tmp_path):
    db, s = vdb
    r = run(["export", str(s["wall"]), "--format", "nosuch", "-o", str(tmp_path / "x")], db=db, check=False)
    assert r.returncode == 2 and "known: collapsed, speedscope, pstats, pprof, chrome" in r.stderr
    r = run(["export", str(s["traced"]), "--format", "collapsed", "-o", str(tmp_path / "x")], db=db, check=False)
    assert r.returncode == 1 and "traced" in r.stderr and not (tmp_path / "x").exists()
    r = run(["export", "999", "--format", "pstats", "-o", str(tmp_path / "x")], db=db, check=False)
    assert r.returncode != 0 and not (tmp_path / "x").exists()
