"""asyncio tasks as the external sampler reads them (`record --async`), on
every interpreter present, against a workload that times itself
(asyncio_workload.py): tasks waiting on asyncio.sleep, a queue and a
socketpair for measured durations, CPU-bound steps of measured cost, a
spawner of thousands of short tasks, one event loop in the main thread and
one in another thread.

Checked, per interpreter, from one recording (cached for the module):
- task names shown (tasks view JSON);
- per-await-point shares of each task's samples within 2 points of the
  workload's own timing (alt: sleep vs queue; pipe: socket; burners: sleep
  and running share);
- the second loop's split running task code / waiting for I/O within 2
  points of its measured CPU steps and selector waits (that loop runs only
  the timed tasks, so its steps are the burner's measured cost);
- logical stacks outermost coroutine first (collapsed export of task:pipe,
  task:alt, and the running burner's step);
- thousands of short tasks: many seen, no invalid samples.
Tolerances: 2 points is about 4 sigma at the ~8,000 samples per task of a
4 s run at 2 kHz (binomial, p = 0.5; the sampler's jittered ticks do
better); the jitter keeps periodic awaits from aliasing. That holds when the
sampler's ticks are uniform in time. On a host whose load average exceeds
its CPU count a sampler at normal priority waits for a CPU after its timer
fires and then catches up back to back: its samples come in clumps, each
clump one moment of the target, and at load 10-15 the shares strayed up to
5 points from the truth (the truth is the workload's own timing, so it is
the sampling, not the reading, that strays). The shared recording therefore
runs the sampler real-time where allowed (`chrt -R -f 1`, the target keeps
the normal policy), as the docs advise on a busy host: at load 10-12 every
share then stayed within 1.6 points in 189 checks. Yet at load 5-7 3.13's
b-burner running share (and the b-loop's task code, read from the thread's
own stacks, so not the task reader) came out 3.2 points over the workload's
timing in one of three runs, not yet understood; so on an overloaded host
6 points is still used (2 when the load is at most the CPU count). The
assertion messages say which applied and whether the sampler ran real-time.
The awaits.lua test keeps its own normal-priority recording. Free-threaded
builds are skipped (no layout), saying why.
"""
import json
import os
import re
import subprocess

import pytest

import pythons
from conftest import ROOT, bifocal_bin, last_line_id, run
import asyncio_helpers
from asyncio_helpers import task

WORKLOAD = os.path.join(ROOT, "tests", "integration", "asyncio_workload.py")


def realtime_prefix():
    """`chrt -R -f 1` when this user may run a real-time sampler (its
    launched target resets to the normal policy), else []."""
    cmd = ["chrt", "-R", "-f", "1"]
    try:
        ok = subprocess.run(cmd + ["true"], capture_output=True).returncode == 0
    except OSError:
        ok = False
    return cmd if ok else []


RT = realtime_prefix()
QUIET = os.getloadavg()[0] <= (os.cpu_count() or 1)
TOL = 0.02 if QUIET else 0.06
WHY = ("" if QUIET else ", host overloaded") + (", real-time sampler" if RT else ", chrt refused")
_CACHE = {}


def record_rt(args, db, timeout=120):
    """`bifocal record ARGS` with the sampler real-time where allowed (see
    the module's note on tolerances). Returns the session id."""
    cmd = RT + [bifocal_bin(), "--db", db, "record"] + list(args)
    env = dict(os.environ)
    env.pop("BIFOCAL_DB", None)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, "%s failed (%d):\nstdout:%s\nstderr:%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                                          r.stderr)
    return last_line_id(r)


def tagged_lines():
    return asyncio_helpers.tagged_lines(WORKLOAD)


def info(python):
    return next(p for p in pythons.discover() if p["path"] == python)


def recording(python, tmp_path_factory):
    if python in _CACHE:
        return _CACHE[python]
    p = info(python)
    if p["free_threaded"]:
        pytest.skip("%s is free-threaded: asyncio task layouts are vendored for default builds only" % p["tag"])
    d = tmp_path_factory.mktemp("asyncio")
    db, truth_path = str(d / "t.db"), str(d / "truth.json")
    sid = record_rt(["--async", "--rate", "2000", "--", python, WORKLOAD, truth_path, "4"], db)
    with open(truth_path) as f:
        truth = json.load(f)
    view = json.loads(run(["replay", str(sid), "--view", "tasks", "--json", "--limit", "100000"], db=db).stdout)
    sess = json.loads(run(["sessions", "--json"], db=db).stdout)[-1]
    _CACHE[python] = (db, sid, truth, view, sess)
    return _CACHE[python]


share_at = asyncio_helpers.share_at


def close(measured, truth, what, sess=None):
    extra = (sess or {}).get("extra") or {}
    assert abs(measured - truth) <= TOL, (
        "%s: sampled %.1f%%, measured by the workload %.1f%% (tolerance %.0f points%s; session: %s samples, "
        "%s invalid, %s late ticks, max %s ms late, %s torn re-reads)" % (
            what, 100 * measured, 100 * truth, 100 * TOL, WHY, (sess or {}).get("samples"),
            (sess or {}).get("invalid"), extra.get("late_ticks"), extra.get("max_late_ms"),
            extra.get("torn_retried")))


def test_task_names_and_await_shares(python, tmp_path_factory):
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    lines = tagged_lines()
    names = {t["name"] for t in view["tasks"]}
    for n in ("alt", "producer", "pipe", "writer", "burner", "spawner", "b-burner", "b-sleeper"):
        assert n in names, "task name %r not shown" % n
    alt, tr = task(view, "alt"), truth["tasks"]["alt"]
    close(share_at(alt, lines["A"]), tr["A"], "alt waiting on asyncio.sleep", sess)
    close(share_at(alt, lines["B"]), tr["B"], "alt waiting on a queue", sess)
    close(share_at(task(view, "pipe"), lines["C"]), truth["tasks"]["pipe"]["C"], "pipe waiting on a socket", sess)
    for n in ("burner", "b-burner"):
        t, tr = task(view, n), truth["tasks"][n]
        close(t["running"]["share"], tr["running"], n + " running its CPU steps (%s of the task's samples)"
              % t["running"].get("samples"), sess)
        close(share_at(t, lines["D"]), tr["D"], n + " waiting on asyncio.sleep", sess)


def test_loop_split(python, tmp_path_factory):
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    loops = {l["thread"]: l for l in view["loops"]}
    assert "b-loop" in loops and len(loops) == 2, "expected two event loops, got %s" % sorted(loops)
    b, tr = loops["b-loop"], truth["loops"]["b-loop"]
    close(b["running_task_code"]["share"], tr["task_code"], "second loop running task code")
    close(b["waiting_for_io"]["share"], tr["io"], "second loop waiting for I/O")
    main = [l for n, l in loops.items() if n != "b-loop"][0]
    # the main loop also runs thousands of short tasks whose steps the
    # workload does not time: its I/O wait is checked, the rest is bounded
    assert main["running_task_code"]["share"] >= truth["loops"]["main"]["task_code"] - TOL
    assert abs(main["waiting_for_io"]["share"] - truth["loops"]["main"]["io"]) <= 3 * TOL, (main, truth["loops"]["main"])


def collapsed(db, sid, thread, tmp_path):
    return asyncio_helpers.collapsed(run, db, sid, thread, tmp_path)


def test_logical_stacks_outermost_first(python, tmp_path_factory, tmp_path):
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    rows = collapsed(db, sid, "task:pipe", tmp_path)
    top = max(rows, key=lambda r: r[1])[0]
    assert top[:3] == ["pipe", "pipe_task", "recv_one"], top
    assert top[3].endswith("sock_recv"), top
    rows = collapsed(db, sid, "task:burner", tmp_path)
    stacks = [r[0] for r in rows]
    assert any(s[:3] == ["burner", "burner", "burn"] for s in stacks), stacks[:5]  # running: its step's frames
    assert any(s[:3] == ["burner", "burner", "sleep"] for s in stacks), stacks[:5]  # waiting: the await chain
    rows = collapsed(db, sid, "task:alt", tmp_path)
    assert any(r[0][:3] == ["alt", "alt", "sleep"] for r in rows)
    assert any(r[0][:2] == ["alt", "alt"] and len(r[0]) > 2 and r[0][2].endswith("get") for r in rows), rows[:5]


def test_thousands_of_short_tasks(python, tmp_path_factory):
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    assert truth["loops"]["main"]["short_tasks"] >= 2000
    assert view["task_count"] >= 100, view["task_count"]
    assert sess["invalid"] <= sess["samples"] // 1000, sess


CUSTOM = """
import asyncio
class MyTask(asyncio.Task):
    pass
async def w():
    await asyncio.sleep(0.6)
async def main():
    loop = asyncio.get_running_loop()
    loop.set_task_factory(lambda loop, coro, **kw: MyTask(coro, loop=loop, **kw))
    mine = loop.create_task(w(), name="mine")
    loop.set_task_factory(lambda loop, coro, **kw: asyncio.tasks._PyTask(coro, loop=loop, **kw))
    pure = loop.create_task(w(), name="pure")
    await asyncio.gather(mine, pure)
asyncio.run(main())
"""


def test_task_subclass_and_pure_python_task_read(tmp_path):
    """A Python subclass of the C Task keeps its layout: read, with its await
    chain. asyncio's pure-Python Task is read from its instance attributes
    (tasks_py.c; test_asyncio_pytasks.py checks it in depth). Oldest and
    newest interpreter."""
    ps = [p for p in pythons.discover() if not p["free_threaded"]]
    if not ps:
        pytest.skip("no supported interpreter")
    src = tmp_path / "custom.py"
    src.write_text(CUSTOM)
    for p in {ps[0]["path"]: ps[0], ps[-1]["path"]: ps[-1]}.values():
        db = str(tmp_path / ("c%s.db" % p["tag"]))
        sid = last_line_id(run(["record", "--async", "--rate", "200", "--", p["path"], str(src)], db=db))
        sess = json.loads(run(["sessions", "--json"], db=db).stdout)[-1]
        assert "not shown" not in sess["extra"].get("async_tasks", ""), (p["tag"], sess["extra"])
        view = json.loads(run(["replay", str(sid), "--view", "tasks", "--json"], db=db).stdout)
        names = {t["name"] for t in view["tasks"]}
        assert "pure" in names and "mine" in names, (p["tag"], names)
        for n in ("mine", "pure"):
            t = task(view, n)
            assert t["waiting"]["share"] > 0.9 and any(a["qualname"] == "w" for a in t["await_points"]), t


UVLOOP = """
import asyncio, json, sys, time, uvloop
pc = time.perf_counter
async def sleeper():
    while True:
        await asyncio.sleep(0.05)  # AWAIT-S
async def burner(out):
    t0, busy = pc(), 0.0
    while pc() - t0 < 1.5:
        t = pc()
        while pc() - t < 0.01:
            pass
        busy += pc() - t
        await asyncio.sleep(0.01)
    out["running"] = busy / (pc() - t0)
async def main():
    out = {}
    asyncio.create_task(sleeper(), name="uv-sleeper")
    await asyncio.create_task(burner(out), name="uv-burner")
    json.dump(out, open(sys.argv[1], "w"))
uvloop.install()
asyncio.run(main())
"""


def test_uvloop_tasks_read_and_said(tmp_path):
    """uvloop (a loop written in C) runs C _asyncio.Task objects: their names,
    states and await points are read; its loop has no Python frames, so the
    session and the tasks view say there is no loop split. Every interpreter
    that can import uvloop (Debian's python3-uvloop for /usr/bin/python3)."""
    ps = [p for p in pythons.discover() if not p["free_threaded"]]
    have = [p for p in ps if subprocess.run([p["path"], "-c", "import uvloop"], capture_output=True).returncode == 0]
    if not have:
        msg = "no interpreter here imports uvloop (apt-get install python3-uvloop)"
        if os.environ.get("CI") and os.path.exists("/usr/bin/python3.11"):
            pytest.fail(msg + ": .ci/setup installs it")
        pytest.skip(msg)
    src = tmp_path / "uv.py"
    src.write_text(UVLOOP)
    line = next(n for n, l in enumerate(UVLOOP.splitlines(), 1) if "AWAIT-S" in l)
    for p in have:
        db, truth = str(tmp_path / ("u%s.db" % p["tag"])), tmp_path / "truth.json"
        sid = record_rt(["--async", "--rate", "1000", "--", p["path"], str(src), str(truth)], db)  # its share is checked
        sess = json.loads(run(["sessions", "--json"], db=db).stdout)[-1]
        assert "uvloop is loaded" in sess["extra"]["async_tasks"], sess["extra"]
        assert "not C _asyncio.Task" not in sess["extra"]["async_tasks"], sess["extra"]
        view = json.loads(run(["replay", str(sid), "--view", "tasks", "--json", "--limit", "100"], db=db).stdout)
        assert view["loops"] == [], view["loops"]
        sl = task(view, "uv-sleeper")
        assert sl["waiting"]["share"] > 0.97, sl
        assert any(a["qualname"] == "sleeper" and a["line"] == line for a in sl["await_points"]), sl["await_points"]
        close(task(view, "uv-burner")["running"]["share"], json.loads(truth.read_text())["running"],
              "uv-burner running its CPU steps under uvloop")
        text = run(["replay", str(sid), "--view", "tasks"], db=db).stdout
        assert "such as uvloop" in text, text[-400:]


UVLOOP_LATE = """
import asyncio
async def idle():
    await asyncio.sleep(0.3)
asyncio.run(idle())  # asyncio.tasks and its registry exist before uvloop is imported
import uvloop
async def sleeper():
    for _ in range(20):
        await asyncio.sleep(0.05)
uvloop.install()
asyncio.run(sleeper())
"""


def test_uvloop_imported_after_asyncio_is_said(tmp_path):
    """A program that runs asyncio before it imports uvloop: the registry is
    found first, and uvloop must still be said within the program's 1.3 s
    (it was looked for again only every 2 s, so a short program's session
    never said it)."""
    ps = [p for p in pythons.discover() if not p["free_threaded"]]
    have = [p for p in ps if subprocess.run([p["path"], "-c", "import uvloop"], capture_output=True).returncode == 0]
    if not have:
        pytest.skip("no interpreter here imports uvloop (apt-get install python3-uvloop)")
    src = tmp_path / "uvlate.py"
    src.write_text(UVLOOP_LATE)
    for p in have:
        db = str(tmp_path / ("l%s.db" % p["tag"]))
        run(["record", "--async", "--rate", "200", "--", p["path"], str(src)], db=db)
        sess = json.loads(run(["sessions", "--json"], db=db).stdout)[-1]
        assert "uvloop is loaded" in sess["extra"].get("async_tasks", ""), (p["tag"], sess["extra"])


# ---- exact await hits (tracer) joined with sampled waits (scripts/awaits.lua) ----

AWAITS = os.path.join(ROOT, "tests", "integration", "asyncio_awaits.py")


def awaits_line(tag):
    with open(AWAITS, encoding="utf-8") as f:
        return next(n for n, l in enumerate(f, 1) if "# AWAIT-" + tag in l)


def test_tracer_counts_await_hits_exactly(python, tmp_path):
    """`bifocal trace` counts every suspension per await site (PY_YIELD of a
    coroutine on 3.12+, a suspended coroutine's profile return before):
    requests x 3 at fetch's await, requests x 1 at flush's, exactly; the
    coroutines' resumes (task steps) are those hits too. Each task's wall
    time (first step to end) is at least the awaits the workload timed in it,
    and at most 15% more (+5 ms; 50% on an overloaded host)."""
    p = info(python)
    if p["free_threaded"]:
        pytest.skip("%s is free-threaded: the tracer refuses it" % p["tag"])
    db = str(tmp_path / "t.db")
    sid = last_line_id(run(["trace", "--", python, AWAITS, str(tmp_path / "truth.json"), "5"], db=db))
    sess = [s for s in json.loads(run(["sessions", "--json"], db=db).stdout) if s["id"] == sid][0]
    sites = {(s["qualname"], s["line"]): s["hits"] for s in sess["extra"]["asyncio"]["await_sites"]
             if s["file"] == AWAITS}
    assert sites.get(("fetch", awaits_line("F"))) == 15, sites
    assert sites.get(("flush", awaits_line("G"))) == 5, sites
    assert sites.get(("handle", awaits_line("H"))) == 15, sites  # each fetch() suspends handle too
    # per-task wall time, first step to end, per outermost coroutine: the
    # requests' tasks against the workload's own timing of their awaits
    lives = {t["qualname"]: t for t in sess["extra"]["asyncio"]["tasks"] if t["file"] == AWAITS}
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert lives["handle"]["tasks"] == 5 and lives["main"]["tasks"] == 1, lives
    mean = lives["handle"]["total_ns"] / 5 / 1e9
    timed = 3 * truth["F"] + truth["G"]
    assert timed <= mean <= timed * (1.15 if QUIET else 1.5) + 0.005, (mean, timed)
    funcs = {f["qualname"]: f for f in json.loads(run(["replay", str(sid), "--view", "functions", "--json",
                                                       "--limit", "100000"], db=db).stdout)["functions"]
             if f["file"] == AWAITS}
    assert funcs["fetch"]["calls"] == 15 and funcs["fetch"]["resumes"] == 15, funcs["fetch"]


def test_awaits_lua_joins_sampled_waits_with_exact_hits(tmp_path):
    """scripts/awaits.lua on a sampled (record --async) and a traced run of
    the same request-shaped workload: hits per request exactly 3 (fetch) and
    1 (flush); the wait per hit within 10% of the workload's own timing of
    those awaits (25% on an overloaded host: samples then come in clumps).
    Oldest and newest interpreter (setprofile and sys.monitoring tracers)."""
    ps = [p for p in pythons.discover() if not p["free_threaded"]]
    if not ps:
        pytest.skip("no supported interpreter")
    rel = 0.10 if QUIET else 0.25
    for p in {ps[0]["path"]: ps[0], ps[-1]["path"]: ps[-1]}.values():
        db, truth = str(tmp_path / ("a%s.db" % p["tag"])), tmp_path / ("truth%s.json" % p["tag"])
        s = last_line_id(run(["record", "--async", "--rate", "1000", "--", p["path"], AWAITS, str(truth), "16"], db=db))
        t = last_line_id(run(["trace", "--", p["path"], AWAITS, str(tmp_path / "t2.json"), "4"], db=db))
        out = run(["run", os.path.join(ROOT, "scripts", "awaits.lua"), str(s), str(t), "--per", "handle"], db=db).stdout
        tr = json.loads(truth.read_text())
        for q, tag, hits in (("fetch", "F", 3), ("flush", "G", 1)):
            m = re.search(r"^%s  .*asyncio_awaits\.py:%d  per handle: hits ([\d.]+) .* each ([\d.]+) (s|ms|us) · "
                          % (q, awaits_line(tag)), out, re.M)
            assert m, "%s: no row for %s in\n%s" % (p["tag"], q, out)
            assert float(m.group(1)) == hits, (p["tag"], q, m.group(0))
            each = float(m.group(2)) * {"s": 1, "ms": 1e-3, "us": 1e-6}[m.group(3)]
            why = "%s %s: %.1f ms per hit sampled, %.1f ms timed (%d%%%s)" % (
                p["tag"], q, each * 1e3, tr[tag] * 1e3, 100 * rel, "" if QUIET else ", host overloaded")
            assert abs(each - tr[tag]) <= rel * tr[tag], why


# ---- exports keep the logical task stacks, read by their own consumers ----------

NAMED = ("alt", "pipe", "burner", "b-burner", "b-sleeper")


def test_exports_keep_task_stacks(python, tmp_path_factory, tmp_path):
    """collapsed: the task is the root frame of its stacks (the whole
    session's lines rooted at task T total what `--thread task:T` gives);
    pprof, read by `go tool pprof`: a `task` label whose totals are the tasks
    view's sample counts, and -tagfocus task=T keeps only T's logical stacks;
    speedscope, validated by its own schema with ajv: one profile per task
    ("task T") whose samples all start at the task's root frame."""
    from test_exports_consumers import VALIDATE, go_pprof, speedscope_schema
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    counts = {t["name"]: t["samples"] for t in view["tasks"]}
    # collapsed
    out = tmp_path / "all.txt"
    run(["export", str(sid), "--format", "collapsed", "-o", str(out)], db=db)
    rooted = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        stack, n = line.rsplit(" ", 1)
        root = stack.split(";")[0]
        if root.endswith(" (<task>:0:0)"):
            name = root[: -len(" (<task>:0:0)")]
            assert name in counts, "collapsed root %r is no task of the tasks view" % root
            rooted[name] = rooted.get(name, 0) + int(n)
    for name in NAMED:
        alone = sum(n for _, n in collapsed(db, sid, "task:" + name, tmp_path))
        assert rooted.get(name) == alone, (name, rooted.get(name), alone)
    # pprof
    pb = tmp_path / "p.pb.gz"
    run(["export", str(sid), "--format", "pprof", "-o", str(pb)], db=db)
    tags = go_pprof(tmp_path, "-tags", "-sample_index=samples", str(pb))
    section = tags.split(" task:", 1)[1].split("\n\n")[0]
    got = {m.group(2): int(float(m.group(1))) for m in re.finditer(r"^\s+([\d.]+) \([ \d.]+%\): (.+)$", section, re.M)}
    for name in NAMED:
        assert got.get(name) == counts[name], (name, got.get(name), counts[name], section[:400])
    top = go_pprof(tmp_path, "-top", "-sample_index=samples", "-nodecount=1000", "-nodefraction=0",
                   "-edgefraction=0", "-tagfocus=task=^pipe$", str(pb))
    m = re.search(r"accounting for (\d+), [\d.]+% of \d+ total", top)
    assert m and int(m.group(1)) == counts["pipe"], top[:600]
    cum = {r.split()[-1]: int(r.split()[3]) for r in top.splitlines() if re.match(r"^\s+\d+\s+[\d.]+%\s+[\d.]+%\s+\d+", r)}
    assert cum.get("task.pipe") == counts["pipe"], cum  # the task's root frame holds all of it
    # (a task caught as it starts a step may have only its root frame)
    assert cum.get("asyncio_workload.pipe_task", 0) >= 0.995 * counts["pipe"], cum
    assert "asyncio_common.burn" not in cum, cum  # another task's code is not under pipe
    # speedscope
    node, mods, schema = speedscope_schema()
    sp = tmp_path / "s.json"
    run(["export", str(sid), "--format", "speedscope", "-o", str(sp)], db=db)
    js = tmp_path / "validate.js"
    js.write_text(VALIDATE)
    r = subprocess.run([node, str(js), schema, str(sp)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NODE_PATH=mods))
    assert r.returncode == 0 and "valid" in r.stdout, r.stdout + r.stderr
    doc = json.load(open(sp, encoding="utf-8"))
    frames = doc["shared"]["frames"]
    profs = {p["name"]: p for p in doc["profiles"]}
    for name in NAMED:
        p = profs.get("task " + name)
        assert p, "no speedscope profile for task %s (have %s)" % (name, sorted(profs)[:12])
        firsts = {(frames[s[0]]["name"], frames[s[0]]["file"]) for s in p["samples"]}
        assert firsts == {(name, "<task>")}, (name, firsts)
    pipe = profs["task pipe"]
    assert all(frames[s[1]]["name"] == "pipe_task" for s in pipe["samples"] if len(s) > 1), "outermost coroutine"
