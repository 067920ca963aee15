"""Tracer: `bifocal trace` and the bifocal_trace Python API on every interpreter.

Exact counts checked through the store: calls per Python function equal an
independent sys.setprofile count on stdlib-heavy work; a generator resumed 1000
times is 1 call; 4 threads x 250 calls; recursion depth 30 x 10 = 310 calls,
10 primitive; exit paths (sys.exit, exception, KeyboardInterrupt, SIGTERM) all
write the session; focus mode keeps per-call records and only the subtree.
"""
import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, bifocal_bin, run, last_line_id, session_row

# the extensions built beside the binary under test (build/tracing)
TRACING_DIR = os.environ.get("BIFOCAL_TRACING_DIR") or os.path.join(
    os.path.dirname(os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")), "tracing")
GEN_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def pyver(python):
    out = subprocess.run([python, "-c", "import sys;print(*sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.split()
    return tuple(int(x) for x in out)


def write(tmp_path, name, src):
    d = tmp_path / "src"  # away from the database, whose files change the directory
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text(textwrap.dedent(src))
    return str(p)


def trace(python, script_args, db, opts=(), check=True, env=None, timeout=120):
    e = {"PYTHONHASHSEED": "0"}
    e.update(env or {})
    return run(["trace"] + list(opts) + ["--", python] + list(script_args), db=db, check=check,
               env=e, timeout=timeout)


def funcs(db, sid):
    """{(file, qualname, firstlineno): row dict} of a traced session, from SQLite."""
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    rows = con.execute(
        "SELECT sf.s AS file, sq.s AS qualname, f.firstlineno, t.* FROM trace_functions t "
        "JOIN functions f ON f.id = t.function_id JOIN strings sf ON sf.id = f.file_id "
        "JOIN strings sq ON sq.id = f.qualname_id WHERE t.session_id = ?", (sid,)).fetchall()
    out = {(r["file"], r["qualname"], r["firstlineno"]): dict(r) for r in rows}
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    return out


def by_qualname(fs, qualname):
    got = [v for k, v in fs.items() if k[1] == qualname]
    assert len(got) == 1, (qualname, got)
    return got[0]


def session(db, sid):
    return session_row(db, sid)


def edges(db, sid):
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT COALESCE(c.s, '<root>'), e.s, t.calls, t.primitive_calls FROM trace_edges t "
        "LEFT JOIN functions fc ON fc.id = t.caller_id LEFT JOIN strings c ON c.id = fc.qualname_id "
        "JOIN functions fe ON fe.id = t.callee_id JOIN strings e ON e.id = fe.qualname_id "
        "WHERE t.session_id = ?", (sid,)).fetchall()
    con.close()
    return rows


# ---- exact counts on stdlib-heavy work -------------------------------------

WORKLOAD = """
import json, textwrap, fractions, difflib, decimal, string, re
def work():
    doc = {"name": "bifocal", "values": [1, 2.5, None, True, "x" * 20], "nested": {"a": [1, 2, {"b": "c"}]}}
    for i in range(30):
        s = json.dumps(doc, sort_keys=True)
        json.loads(s)
        textwrap.fill("the quick brown fox jumps over the lazy dog " * 8, width=37)
        textwrap.dedent("    a\\n      b\\n    c\\n")
        f = fractions.Fraction(i + 1, 7) + fractions.Fraction(3, i + 2)
        f.limit_denominator(10)
        sm = difflib.SequenceMatcher(None, "abcdefghij" * 3, "abXdefgYij" * 3)
        sm.ratio(); sm.get_opcodes()
        decimal.Decimal(i) / decimal.Decimal(7)
        string.Template("$a and $b").substitute(a=i, b="x")
        re.sub(r"(\\w+)@(\\w+)", r"\\2 at \\1", "me@home you@work")
    return s
work()
"""

# Imports exactly what bifocal's runner has imported when the program starts
# (sys and os; not threading, which the collector no longer imports on 3.8-3.11),
# so both runs import (and count) the same modules.
REF_RUNNER = """
import sys, os
GEN = 0x20 | 0x80 | 0x200
counts = {}
gens = set()
def prof(frame, event, arg):
    if event == "call":
        co = frame.f_code
        key = (co.co_filename, co.co_firstlineno, co.co_name)
        counts[key] = counts.get(key, 0) + 1
        if co.co_flags & GEN:
            gens.add(key)
path, out = sys.argv[1], sys.argv[2]
code = compile(open(path).read(), os.path.abspath(path) if sys.version_info >= (3, 9) else path, "exec")
g = {"__name__": "__main__", "__builtins__": __builtins__}
sys.setprofile(prof)
exec(code, g)
sys.setprofile(None)
import json
json.dump([[list(k), v, k in gens] for k, v in counts.items()], open(out, "w"))
"""


def test_counts_equal_setprofile_on_stdlib_work(python, db, tmp_path):
    script = write(tmp_path, "work.py", WORKLOAD)
    ref_runner = write(tmp_path, "ref.py", REF_RUNNER)
    ref_out = str(tmp_path / "ref.json")
    subprocess.run([python, ref_runner, script, ref_out], check=True, timeout=120,
                   env=dict(os.environ, PYTHONHASHSEED="0"), cwd=str(tmp_path / "src"))
    ref = {}
    for (fn, line, name), n, is_gen in json.load(open(ref_out)):
        if not is_gen:
            ref[(fn, line, name)] = n
    sid = last_line_id(trace(python, [script], db))
    fs = funcs(db, sid)
    got = {}
    for (fn, qual, line), row in fs.items():
        if fn == "<builtin>":
            continue
        name = qual.rsplit(".", 1)[-1]
        got[(fn, line, name)] = row["calls"]
    # The import system's own work depends on finder caches (directory listings,
    # path hooks) that two processes need not share; everything else must match.
    common = {k: v for k, v in ref.items() if not k[0].startswith(("<frozen importlib", "<frozen zipimport"))}
    diff = {k: (v, got.get(k)) for k, v in common.items() if got.get(k) != v}
    assert not diff, "calls differ from sys.setprofile (ref, bifocal): %r" % diff
    # the comparison must cover real stdlib code, not a toy
    files = {k[0] for k in common}
    assert any(f.endswith(os.sep + "json" + os.sep + "decoder.py") for f in files)
    assert any(f.endswith("difflib.py") for f in files) and any(f.endswith("fractions.py") for f in files)
    assert sum(common.values()) > 2000
    s = session(db, sid)
    assert s["kind"] == "traced" and s["mode"] == "trace" and s["status"] == "complete"
    assert s["extra"]["mismatches"] == 0
    w = by_qualname(fs, "work")
    assert w["calls"] == 1 and w["total_ns"] >= w["self_ns"] > 0
    # builtins carry the shared identity
    assert ("<builtin>", "builtins.len", 0) in fs and fs[("<builtin>", "builtins.len", 0)]["calls"] > 0


# ---- exact counts against cProfile, as users run it ---------------------------

# No imports: cProfile's command line imports its own modules before the
# program, bifocal's runner does not, so module-level import work would differ.
CPROFILED = """
class C:
    def __init__(self, a): self.a = a
    def m(self): return self.a
def gen(n):
    for i in range(n):
        yield i
def rec(n): return 0 if n == 0 else 1 + rec(n - 1)
def boom(): raise ValueError
def work():
    out = []
    for i in range(200):
        out.append(C(i).m())
        len(out); sorted([3, 1, 2]); "a,b".split(","); max(i, 3); ",".join(["x", "y"])
        try:
            boom()
        except ValueError:
            pass
    sum(gen(50)); [rec(10) for _ in range(3)]
    f = lambda x: x
    list(map(f, range(20)))
    return out
work()
"""

PSTATS_JSON = """
import sys, json, pstats
st = pstats.Stats(sys.argv[1]).stats
print(json.dumps([[list(k), v[0], v[1]] for k, v in st.items()]))
"""


def cprofile_module(python):
    """3.15 moved cProfile to profiling.tracing (cProfile is a shim)."""
    return "profiling.tracing" if pyver(python) >= (3, 15) else "cProfile"


def test_counts_equal_cprofile(python, db, tmp_path):
    script = write(tmp_path, "cp.py", CPROFILED)
    reader = write(tmp_path, "pstats_json.py", PSTATS_JSON)
    prof = str(tmp_path / "cp.prof")
    subprocess.run([python, "-m", cprofile_module(python), "-o", prof, script], check=True,
                   timeout=120, capture_output=True)
    ref = {}
    for (fn, line, name), prim, total in json.loads(subprocess.run(
            [python, reader, prof], check=True, capture_output=True, text=True, timeout=60).stdout):
        if fn == "~":  # builtins: "<built-in method builtins.len>", "<method 'append' of 'list' objects>"
            if name.startswith("<built-in method "):
                name = name[len("<built-in method "):-1]
            elif name.startswith("<method '"):  # a type's tp_name: "list", "_lsprof.Profiler"
                meth, _, owner = name[len("<method '"):].partition("' of '")
                owner = owner.split("'")[0]
                name = ("" if "." in owner else "builtins.") + owner + "." + meth
            if name in ("builtins.exec", "_lsprof.Profiler.disable"):  # cProfile's runner
                continue
            ref[("<builtin>", name)] = (total, prim)
        else:
            ref[(fn, line, name)] = (total, prim)
    sid = last_line_id(trace(python, [script], db))
    got = {}
    for (fn, qual, line), row in funcs(db, sid).items():
        if fn == "<builtin>":
            got[(fn, qual)] = (row["calls"], row["primitive_calls"])
        else:  # cProfile counts every resume of a generator as a call
            got[(fn, line, qual.rsplit(".", 1)[-1])] = (row["calls"] + row["resumes"],
                                                        row["primitive_calls"] + row["resumes"])
    assert got == ref, "bifocal vs cProfile: %r" % {k: (got.get(k), ref.get(k))
                                                    for k in set(got) | set(ref)
                                                    if got.get(k) != ref.get(k)}
    assert ref[(script, 8, "rec")] == (33, 3) and ref[(script, 5, "gen")] == (51, 51)
    assert ref[("<builtin>", "builtins.list.append")] == (200, 200)
    assert ref[("<builtin>", "builtins.str.join")] == (200, 200)


# ---- generators, threads, recursion ------------------------------------------

SHAPES = """
import sys, threading
def gen():
    for i in range(1000):
        yield i
def consume():
    total = 0
    for x in gen():
        total += x
    return total
def leaf(i):
    return i + 1
def worker():
    for i in range(250):
        leaf(i)
def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)
consume()
ts = [threading.Thread(target=worker) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
for _ in range(10):
    rec(30)
"""


def test_generators_threads_recursion(python, db, tmp_path):
    script = write(tmp_path, "shapes.py", SHAPES)
    sid = last_line_id(trace(python, [script], db))
    fs = funcs(db, sid)
    g = by_qualname(fs, "gen")
    assert (g["calls"], g["primitive_calls"], g["resumes"]) == (1, 1, 1000)
    assert by_qualname(fs, "consume")["calls"] == 1
    leaf, worker = by_qualname(fs, "leaf"), by_qualname(fs, "worker")
    assert (leaf["calls"], leaf["primitive_calls"]) == (1000, 1000)
    assert worker["calls"] == 4
    r = by_qualname(fs, "rec")
    assert (r["calls"], r["primitive_calls"]) == (310, 10)
    assert r["total_ns"] >= r["self_ns"] > 0
    es = {(a, b): (c, p) for a, b, c, p in edges(db, sid)}
    assert es[("worker", "leaf")] == (1000, 1000)
    assert [k for k in es if k[1] == "leaf"] == [("worker", "leaf")]  # no cross-thread mixing
    assert es[("rec", "rec")][0] == 300 and es[("<module>", "rec")] == (10, 10)
    s = session(db, sid)
    assert s["extra"]["mismatches"] == 0 and s["extra"]["threads"] >= 5
    # the same exact figures through the CLI's machine-readable view
    doc = json.loads(run(["replay", str(sid), "--view", "functions", "--json", "--limit", "1000"],
                         db=db).stdout)
    rows = {f["qualname"]: f for f in doc["functions"] if f["file"] == script}
    assert (rows["rec"]["calls"], rows["rec"]["primitive_calls"]) == (310, 10)
    assert (rows["gen"]["calls"], rows["gen"]["resumes"]) == (1, 1000)
    assert rows["rec"]["self_ns"] == r["self_ns"] and rows["rec"]["total_ns"] == r["total_ns"]
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM threads WHERE session_id=?", (sid,)).fetchone()[0] >= 5
    con.close()


def test_cpu_clock_and_no_builtins(python, db, tmp_path):
    script = write(tmp_path, "clk.py", """
        import time
        def spin():
            t = time.process_time() + 0.05
            while time.process_time() < t:
                pass
        def nap():
            time.sleep(0.2)
        spin(); nap()
    """)
    sid = last_line_id(trace(python, [script], db, opts=["--clock", "cpu", "--no-builtins"]))
    fs = funcs(db, sid)
    assert session(db, sid)["clock"] == "cpu"
    assert not [k for k in fs if k[0] == "<builtin>"]
    spin, nap = by_qualname(fs, "spin"), by_qualname(fs, "nap")
    assert spin["total_ns"] > 30e6
    assert nap["total_ns"] < 0.1e9  # sleeping costs no CPU time


# ---- exit paths -------------------------------------------------------------

EXITS = """
import os, signal, sys, time
def work(n):
    return sum(i for i in range(n))
work(1000)
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("boom")
if how == "kbd":
    raise KeyboardInterrupt
if how == "term":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
print("normal end")
"""


@pytest.mark.parametrize("how,rc,status", [("normal", 0, "complete"), ("exit", 3, "complete"),
                                           ("raise", 1, "complete"), ("kbd", 130, "interrupted"),
                                           ("term", 143, "interrupted")])
def test_exit_paths_write_the_session(python, db, tmp_path, how, rc, status):
    script = write(tmp_path, "exits.py", EXITS)
    r = trace(python, [script, how], db, check=False)
    assert r.returncode == rc, r.stderr
    sid = last_line_id(r)
    s = session(db, sid)
    assert s["status"] == status
    fs = funcs(db, sid)
    assert by_qualname(fs, "work")["calls"] == 1
    # nothing of the runner (exception handling, thread joins) is counted
    assert not [k for k in fs if "bifocal" in k[0] or "bifocal" in k[1] or "Thread" in k[1]]
    # (the program's own `import signal` calls isinstance; the runner's calls would be roots)
    assert [e for e in edges(db, sid) if e[0] == "<root>"] == [("<root>", "<module>", 1, 1)]
    if how == "raise":
        assert "ValueError: boom" in r.stderr
    if how in ("raise", "kbd"):
        assert "bifocal_trace" not in r.stderr  # the runner's frame is not shown
    if how == "normal":
        assert r.stdout.splitlines()[0] == "normal end"


def test_module_and_command_modes(python, db, tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tool.py").write_text(textwrap.dedent("""
        import sys
        def main(args):
            print("args", args, __name__)
            return len(args)
        if __name__ == "__main__":
            sys.exit(main(sys.argv[1:]))
    """))
    e = dict(os.environ, PYTHONHASHSEED="0")
    cmd = [bifocal_bin(), "--db", db, "trace", "--", python, "-m", "mypkg.tool", "a", "b"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), env=e, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stdout.splitlines()[0] == "args ['a', 'b'] __main__"
    fs = funcs(db, last_line_id(r))
    assert by_qualname(fs, "main")["calls"] == 1
    assert not [k for k in fs if "runpy" in k[0] or "bifocal_trace" in k[0]]  # no bootstrap frames
    r = trace(python, ["-c", "def f(): return 1\nfor i in range(7): f()"], db)
    assert by_qualname(funcs(db, last_line_id(r)), "f")["calls"] == 7


def test_focus_mode(python, db, tmp_path):
    script = write(tmp_path, "focus.py", """
        def helper(x):
            return x * 2
        def target(n):
            return sum(helper(i) for i in range(n))
        def other():
            return [helper(i) for i in range(5)]
        for i in range(40):
            other()
            target(10)
    """)
    sid = last_line_id(trace(python, [script], db, opts=["--focus", "__main__:target", "--records", "25"]))
    fs = funcs(db, sid)
    s = session(db, sid)
    assert s["mode"] == "focus"
    t = by_qualname(fs, "target")
    assert t["calls"] == 40 and t["primitive_calls"] == 40
    assert t["records_kept"] == 25 and t["records_dropped"] == 15
    assert 0 < t["p50_ns"] <= t["p90_ns"] <= t["p99_ns"] <= t["max_ns"]
    assert by_qualname(fs, "helper")["calls"] == 400  # only the calls beneath target
    assert not [k for k in fs if k[1] == "other"]
    con = sqlite3.connect(db)
    n = con.execute("SELECT COUNT(*) FROM call_records WHERE session_id=?", (sid,)).fetchone()[0]
    con.close()
    assert n == 25


def test_python_api_context_manager(python, db, tmp_path):
    script = write(tmp_path, "api.py", """
        import sys
        sys.path.insert(0, sys.argv[1])
        import bifocal_trace
        def f(n):
            return n
        with bifocal_trace.Profile(db=sys.argv[2], label="api") as p:
            for i in range(5):
                f(i)
        print(p.session_id)
        q = bifocal_trace.Profile()
        q.enable()
        f(1)
        q.disable()
        st = q.stats()
        print([x["calls"] for x in st["functions"] if x["qualname"] == "f"][0])
    """)
    r = subprocess.run([python, script, TRACING_DIR, db], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    sid, fcalls = (int(x) for x in r.stdout.split())
    assert fcalls == 1
    fs = funcs(db, sid)
    assert by_qualname(fs, "f")["calls"] == 5
    assert not [k for k in fs if "Profile" in k[1] or "bifocal" in k[0]]
    assert session(db, sid)["label"] == "api"


def test_tool_id_taken_names_holder(python, db, tmp_path):
    if pyver(python) < (3, 12):
        pytest.skip("sys.monitoring tool ids exist on 3.12+")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.monitoring.use_tool_id(2, 'othertool')\n")
    script = write(tmp_path, "t.py", "def f(): pass\nf()\n")
    env = {"PYTHONPATH": str(site)}
    r = trace(python, [script], db, check=False, env=env)
    assert r.returncode != 0 and "othertool" in r.stderr and "--tool-id" in r.stderr
    assert r.stdout.strip() == "" and r.stderr.count("\n") == 1  # nothing half-written
    assert not os.path.exists(db)  # no session, nor the database this failed run made
    r = trace(python, [script], db, opts=["--tool-id", "3"], env=env)
    assert by_qualname(funcs(db, last_line_id(r)), "f")["calls"] == 1


def test_program_that_cannot_start_leaves_no_session(python, db, tmp_path):
    r = trace(python, [str(tmp_path / "missing.py")], db, check=False)
    assert r.returncode == 2 and "missing.py" in r.stderr and r.stdout.strip() == ""
    r = trace(python, ["-m", "no_such_module_here"], db, check=False)
    assert r.returncode == 1 and "no_such_module_here" in r.stderr and r.stdout.strip() == ""
    assert not os.path.exists(db)  # no session, nor the database this failed run made


def test_unbuilt_or_old_interpreter_is_refused(db, tmp_path):
    old = [p for p in sorted(os.popen("ls -d ~/.pyenv/versions/3.[0-7].*/bin/python3.[0-7] 2>/dev/null").read().split())]
    if old:
        r = run(["trace", "--", old[0], "-c", "pass"], db=db, check=False)
        assert r.returncode == 2 and "too old" in r.stderr
    r = run(["trace", "--", "/nonexistent/python3", "x.py"], db=db, check=False)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "cannot run" in r.stderr
    r = run(["trace", "--clock", "bogus", "--", sys.executable, "-c", "pass"], db=db, check=False)
    assert r.returncode == 2 and "--clock" in r.stderr
    # a bifocal binary with no extension beside it (and none installed) says so
    import shutil
    solo = tmp_path / "solo"
    solo.mkdir()
    shutil.copy(bifocal_bin(), str(solo / "bifocal"))
    e = dict(os.environ)
    e.pop("BIFOCAL_TRACING_DIR", None)
    r = subprocess.run([str(solo / "bifocal"), "--db", db, "trace", "--", sys.executable, "-c", "pass"],
                       capture_output=True, text=True, env=e, timeout=60)
    assert r.returncode == 2 and "no tracing extension was built for Python" in r.stderr
    assert r.stderr.count("\n") == 1


def test_launcher_and_unloadable_extension(python, db, tmp_path):
    """Words before the interpreter are a launcher (here env): traced as usual.
    An extension that is there but cannot be loaded (a library it links missing
    in the target's root; here a file that is not ELF) is one line naming it,
    with no session left."""
    r = trace("env", ["FROM_ENV=1", python, "-c",
                      "import os\ndef f(): return os.environ['FROM_ENV']\nfor _ in range(4): f()"], db)
    assert by_qualname(funcs(db, last_line_id(r)), "f")["calls"] == 4
    suffix = subprocess.run([python, "-c", "import _imp;print([e for e in _imp.extension_suffixes() "
                                           "if e.count('.') >= 2][0])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    bad = tmp_path / "bad-tracing"
    bad.mkdir()
    import shutil
    shutil.copy(os.path.join(TRACING_DIR, "bifocal_trace.py"), str(bad / "bifocal_trace.py"))
    (bad / ("_bifocal_trace" + suffix)).write_text("not an ELF file\n")
    os.unlink(db)
    r = run(["trace", "--", "env", python, "-c", "print('ran')"], db=db, check=False,
            env={"BIFOCAL_TRACING_DIR": str(bad)})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot load the tracing extension" in r.stderr and suffix in r.stderr, r.stderr
    assert r.stdout.strip() == ""
    assert not os.path.exists(db)  # no session, nor the database this failed run made


def test_focus_recursion_generators_threads_api(python, tmp_path):
    script = write(tmp_path, "focus2.py", """
        import sys, threading, json
        sys.path.insert(0, sys.argv[1])
        import bifocal_trace
        def leaf(): return 1
        def rec(n):
            leaf()
            return 0 if n == 0 else rec(n - 1)
        def g():
            for i in range(5):
                leaf()
                yield i
        def other(): return [leaf() for _ in range(3)]
        def worker():
            for i in range(20):
                rec(3); other()
        def counts(p):
            return {f["qualname"]: [f["calls"], f["primitive_calls"], f["resumes"], f["records_kept"]]
                    for f in p.stats()["functions"]}
        p = bifocal_trace.Profile(focus="*:rec")
        with p:
            for i in range(10):
                rec(4); other()
            ts = [threading.Thread(target=worker) for _ in range(3)]
            for t in ts: t.start()
            for t in ts: t.join()
        q = bifocal_trace.Profile(focus="__main__:g")
        with q:
            for _ in range(3):
                list(g())
            other()
        print(json.dumps([counts(p), counts(q), p.stats()["mismatches"], q.stats()["mismatches"]]))
    """)
    r = subprocess.run([python, script, TRACING_DIR], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    p, q, mp, mq = json.loads(r.stdout)
    assert p == {"rec": [290, 70, 0, 290], "leaf": [290, 290, 0, 0]}  # nested rec calls are recorded too
    assert q == {"g": [3, 3, 15, 3], "leaf": [15, 15, 0, 0]}
    assert mp == mq == 0


def test_threads_running_before_enable_are_traced(python, tmp_path):
    script = write(tmp_path, "pre.py", """
        import sys, threading, time
        sys.path.insert(0, sys.argv[1])
        import bifocal_trace
        go, done = threading.Event(), threading.Event()
        def leaf(): return 1
        def worker():
            go.wait()
            for i in range(100): leaf()
            done.set()
        t = threading.Thread(target=worker); t.start()
        time.sleep(0.05)
        p = bifocal_trace.Profile(); p.enable()
        go.set(); done.wait(); t.join()
        p.disable()
        st = p.stats()
        print([f["calls"] for f in st["functions"] if f["qualname"] == "leaf"][0], st["mismatches"])
    """)
    r = subprocess.run([python, script, TRACING_DIR], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["100", "0"]


def test_no_builtins_never_subscribes_call(python, db, tmp_path):
    if pyver(python) < (3, 12):
        pytest.skip("sys.monitoring events exist on 3.12+")
    script = write(tmp_path, "ev.py", """
        import sys
        m = sys.monitoring
        ev = m.get_events(m.PROFILER_ID)
        # C_RETURN / C_RAISE ride on CALL (get_events does not report them)
        print(m.get_tool(m.PROFILER_ID), bool(ev & m.events.CALL), bool(ev & m.events.PY_START))
    """)
    r = trace(python, [script], db, opts=["--no-builtins"])
    assert r.stdout.splitlines()[0] == "bifocal False True"
    r = trace(python, [script], db)
    assert r.stdout.splitlines()[0] == "bifocal True True"


def test_programs_own_import_of_threading_is_traced(python, db, tmp_path):
    """The tracer follows new threads without importing threading itself, so
    the program's `import threading` is traced, and a thread it starts after
    that import (tracing already on) is followed."""
    pre = subprocess.run([python, "-c", "import sys; print('threading' in sys.modules)"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    if pre != "False":
        pytest.skip("%s has threading imported at start-up (%s)" % (python, pre or "?"))
    script = write(tmp_path, "imp_threading.py", """
        import threading
        def leaf():
            return 1
        def worker():
            for _ in range(100):
                leaf()
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    """)
    sid = last_line_id(trace(python, [script], db))
    fs = funcs(db, sid)
    mods = [v for k, v in fs.items() if k[0].endswith(os.sep + "threading.py") and k[1] == "<module>"]
    assert len(mods) == 1 and mods[0]["calls"] == 1, sorted(k for k in fs if "threading" in k[0])[:5]
    assert by_qualname(fs, "worker")["calls"] == 1
    assert by_qualname(fs, "leaf")["calls"] == 100
    assert session(db, sid)["extra"]["mismatches"] == 0


# ---- a target whose root differs from bifocal's --------------------------------
#
# `chroot ROOT python3.X` sees none of the host's paths (no /proc either): the
# extension and the database are reached only through the directory handles
# bifocal passes (the extension loaded from a copy in the target's /tmp, removed
# once loaded). The sid root's interpreters (.ci/sid-root) are run so, inside a
# mount namespace of their own with a private tmpfs over ROOT/tmp, so nothing
# is written into the root (that tmpfs also holds a script that exists only
# inside the root).

def _sid_entries():
    import pythons
    ps = [p for p in pythons.discover() if p.get("container")]
    if not ps:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason="no sid root to chroot into: %s" % (pythons.sid_missing() or "none found")))]
    return [pytest.param(p, id=p["tag"] + ":chroot") for p in ps]


# sh -c PRIVATE_TMP sh ROOT LISTING [SCRIPT] -- CMD...: CMD with a fresh tmpfs
# over ROOT/tmp (SCRIPT copied there as app.py; $WITH_PROC: /proc mounted in the
# root too); what is left in it goes to LISTING
PRIVATE_TMP = ('R=$1 L=$2; shift 2; mount -t tmpfs tmpfs "$R/tmp" || exit 125; '
               'if [ -n "$WITH_PROC" ]; then mount -t proc proc "$R/proc" || exit 125; fi; '
               'if [ "$1" != -- ]; then cp "$1" "$R/tmp/app.py" && shift || exit 125; fi; shift; '
               '"$@"; rc=$?; ls -A "$R/tmp" > "$L"; exit $rc')


def _in_private_tmp(root, listing, cmd, script=None):
    return (["unshare", "-m", "--propagation", "private", "sh", "-c", PRIVATE_TMP, "sh", root,
             str(listing)] + ([script] if script else []) + ["--"] + cmd)


def _check_shapes(db, sid, script_file):
    fs = funcs(db, sid)
    g = by_qualname(fs, "gen")
    assert (g["calls"], g["primitive_calls"], g["resumes"]) == (1, 1, 1000)
    assert by_qualname(fs, "leaf")["calls"] == 1000 and by_qualname(fs, "worker")["calls"] == 4
    r = by_qualname(fs, "rec")
    assert (r["calls"], r["primitive_calls"]) == (310, 10)
    assert {k[0] for k in fs if k[0] != "<builtin>" and k[1] == "rec"} == {script_file}
    s = session(db, sid)
    assert s["status"] == "complete" and s["extra"]["mismatches"] == 0
    return s


@pytest.mark.parametrize("sid_py", _sid_entries())
def test_chroot_target_without_host_paths(sid_py, db, tmp_path):
    root, exe = sid_py["root"], "python%s" % sid_py["tag"]
    assert not os.path.exists(os.path.join(root, str(tmp_path).lstrip("/")))  # db dir unseen inside
    left = tmp_path / "left"
    # -c: the program needs no file inside the root
    r = run(["trace", "--"] + _in_private_tmp(root, left, ["chroot", root, exe, "-c",
                                                            textwrap.dedent(SHAPES)]),
            db=db, timeout=180)
    s = _check_shapes(db, last_line_id(r), "<string>")
    assert s["extra"]["python"]["version"].startswith(sid_py["tag"] + ".")
    assert s["extra"]["python"]["executable"] == "/usr/bin/" + exe  # as the target sees itself
    assert left.read_text() == ""  # the extension's copy was removed once loaded
    # a script file that exists only inside the target's root
    src = write(tmp_path, "shapes.py", SHAPES)
    r = run(["trace", "--"] + _in_private_tmp(root, left, ["chroot", root, exe, "/tmp/app.py"], src),
            db=db, timeout=180)
    _check_shapes(db, last_line_id(r), "/tmp/app.py")
    assert left.read_text().split() == ["app.py"]
    # with /proc in the root (as in most containers) the extension loads through
    # /proc/self/fd/N, with no copy
    r = run(["trace", "--"] + _in_private_tmp(root, left, ["chroot", root, exe, "/tmp/app.py"], src),
            db=db, timeout=180, env={"WITH_PROC": "1"})
    _check_shapes(db, last_line_id(r), "/tmp/app.py")
    assert left.read_text().split() == ["app.py"]
    # a database path that exists inside the root too, but is another directory
    other = "/tmp/bifocal-test-%d.db" % os.getpid()
    try:
        r = run(["trace", "--"] + _in_private_tmp(root, left, [
            "chroot", root, exe, "-c", "def f(): pass\nfor _ in range(9): f()"]), db=other, timeout=120)
        assert by_qualname(funcs(other, last_line_id(r)), "f")["calls"] == 9
        assert left.read_text() == ""
    finally:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(other + suffix):
                os.unlink(other + suffix)


LAUNCHER_CLOSING_FDS = """#!/bin/sh
# mount the tracing directory (only) at its host path inside ROOT, privately,
# then close every descriptor but stdio and chroot: the database is unreachable
set -e
root=$1 ext=$2; shift 2
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$root$ext"
mount --bind "$ext" "$root$ext"
exec /usr/bin/python3 -c '
import os, sys
os.closerange(3, 65536)
os.chroot(sys.argv[1]); os.chdir("/")
os.execv(sys.argv[2], sys.argv[2:])' "$root" "$@"
"""


@pytest.mark.parametrize("sid_py", _sid_entries())
def test_chroot_database_unreachable_is_one_line(sid_py, db, tmp_path):
    import shutil
    root, exe = sid_py["root"], "python%s" % sid_py["tag"]
    ext = tmp_path / "ext"  # under /tmp: reachable inside through the private tmpfs
    ext.mkdir()
    for name in os.listdir(TRACING_DIR):
        if name == "bifocal_trace.py" or (name.startswith("_bifocal_trace.") and name.endswith(".so")):
            shutil.copy(os.path.join(TRACING_DIR, name), str(ext / name))
    launcher = tmp_path / "closing-launcher"
    launcher.write_text(LAUNCHER_CLOSING_FDS)
    launcher.chmod(0o755)
    r = run(["trace", "--", "unshare", "-m", "--propagation", "private", str(launcher), root, str(ext),
             "/usr/bin/" + exe, "-c", "print('ran')"], db=db, check=False, timeout=120,
            env={"BIFOCAL_TRACING_DIR": str(ext)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "cannot reach the database" in r.stderr, r.stderr
    assert db in r.stderr and "launch it without closing inherited file descriptors" in r.stderr
    assert "ran" not in r.stdout and r.stdout.strip() == ""  # the program never started
    assert not os.path.exists(db)  # no session, nor the database this failed run made
