"""Pure-Python asyncio Tasks as the external sampler reads them (`record
--async`), on every interpreter present, against a workload that times
itself (asyncio_pyworkload.py): every task is asyncio.tasks._PyTask, made by
loop.set_task_factory; a second run blocks the C accelerator, so asyncio.Task
and Future are pure Python themselves (oldest and newest interpreter). A
spawner of short tasks keeps the loop busy, as in asyncio_workload.py: with
an idle loop, on a loaded host the sampler's missed ticks fall more on the
burner's CPU steps than on its sleeps (4-8 points, C Tasks alike).

Checked, per interpreter, from one recording (cached for the module):
- task names shown (tasks view JSON), and no "not shown" in the session;
- per-await-point shares of each task's samples within the tolerance of
  test_asyncio_tasks.py of the workload's own timing (alt: sleep vs queue;
  burner: running share and its sleep; deep: its innermost sleep);
- logical stacks outermost coroutine first (collapsed export of task:deep,
  three coroutines deep, and of the running burner's step).
Tolerances as in test_asyncio_tasks.py: 2 points (~3 sigma at ~2,000
samples per task of a 2 s run at 2 kHz, binomial p = 0.5), 6 points when the
load average exceeds the CPU count (the sampler is then preempted for
milliseconds at a time); the messages say which applied. Sampled shares
match the truth only if ticks are taken evenly: on such a host the sampler
asks for 1 kHz (at 2 kHz it needs more CPU than a loaded host gives it, and
missed up to 45% of its ticks), and a recording that missed more than 10%
of its ticks is taken once more (the messages give the missed share). The
sampler runs real-time where allowed, as in test_asyncio_tasks.py (at load
15-20, 3.15's alt share once strayed 7 points with 33% of ticks missed at
normal priority).
On 3.14+ C Tasks are linked in the thread states, but pure-Python ones are
still registered in asyncio.tasks' sets (read with the thread-names
dict and instance layouts of that version). Free-threaded builds are
skipped, saying why.
"""
import json
import os

import pytest

import pythons
from conftest import ROOT, run
from test_asyncio_tasks import record_rt
import asyncio_helpers
from asyncio_helpers import task

WORKLOAD = os.path.join(ROOT, "tests", "integration", "asyncio_pyworkload.py")
QUIET = os.getloadavg()[0] <= (os.cpu_count() or 1)
TOL = 0.02 if QUIET else 0.06
RATE = "2000" if QUIET else "1000"
_CACHE = {}


def tagged_lines():
    return asyncio_helpers.tagged_lines(WORKLOAD)


def supported(p):
    if p["free_threaded"]:
        return "%s is free-threaded: asyncio task layouts are vendored for default builds only" % p["tag"]
    return None


def missed(sess):
    """Share of the session's ticks the sampler missed."""
    ticks = sess["rate_hz"] * sess["duration_s"]
    return sess["missed"] / ticks if ticks else 1.0


def recording(python, tmp_path_factory, mode="pytask", seconds="2.0", rate=None):
    key = (python, mode)
    if key in _CACHE:
        return _CACHE[key]
    p = next(p for p in pythons.discover() if p["path"] == python)
    why = supported(p)
    if why:
        pytest.skip(why)
    rate = rate or RATE
    d = tmp_path_factory.mktemp("pytasks")
    for attempt in (1, 2):  # again once if the sampler missed too many ticks
        db, truth_path = str(d / ("t%d.db" % attempt)), str(d / ("truth%d.json" % attempt))
        sid = record_rt(["--async", "--rate", rate, "--", python, WORKLOAD, truth_path, seconds, mode], db)
        sess = json.loads(run(["sessions", "--json"], db=db).stdout)[-1]
        if missed(sess) <= 0.10:
            break
    with open(truth_path) as f:
        truth = json.load(f)
    view = json.loads(run(["replay", str(sid), "--view", "tasks", "--json", "--limit", "100000"], db=db).stdout)
    _CACHE[key] = (db, sid, truth, view, sess)
    return _CACHE[key]


share_at = asyncio_helpers.share_at


def close(measured, truth, what, sess):
    assert abs(measured - truth) <= TOL, (
        "%s: sampled %.1f%%, measured by the workload %.1f%% (tolerance %.0f points%s; %.0f%% of ticks missed)" % (
            what, 100 * measured, 100 * truth, 100 * TOL, "" if QUIET else ", host overloaded", 100 * missed(sess)))


def collapsed(db, sid, thread, tmp_path):
    return asyncio_helpers.collapsed(run, db, sid, thread, tmp_path)


def test_pure_python_task_names_and_await_shares(python, tmp_path_factory):
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    assert truth["task_types"] == ["asyncio.tasks.Task"] and not truth["pure"], truth  # _PyTask, C Task present
    assert "not shown" not in sess["extra"].get("async_tasks", ""), sess["extra"]
    names = {t["name"] for t in view["tasks"]}
    for n in ("alt", "producer", "burner", "deep"):
        assert n in names, "pure-Python task %r not shown (have %s)" % (n, sorted(names))
    lines = tagged_lines()
    alt, tr = task(view, "alt"), truth["tasks"]["alt"]
    close(share_at(alt, lines["A"]), tr["A"], "alt waiting on asyncio.sleep", sess)
    close(share_at(alt, lines["B"]), tr["B"], "alt waiting on a queue", sess)
    b, tr = task(view, "burner"), truth["tasks"]["burner"]
    close(b["running"]["share"], tr["running"], "burner running its CPU steps", sess)
    close(share_at(b, lines["D"]), tr["D"], "burner waiting on asyncio.sleep", sess)
    close(share_at(task(view, "deep"), lines["E"]), truth["tasks"]["deep"]["E"], "deep waiting three coroutines down", sess)


def test_pure_python_logical_stacks_outermost_first(python, tmp_path_factory, tmp_path):
    db, sid, truth, view, sess = recording(python, tmp_path_factory)
    rows = collapsed(db, sid, "task:deep", tmp_path)
    top = max(rows, key=lambda r: r[1])[0]
    assert top[:5] == ["deep", "outer", "middle", "inner", "sleep"], top
    stacks = [r[0] for r in collapsed(db, sid, "task:burner", tmp_path)]
    assert any(s[:3] == ["burner", "burner", "burn"] for s in stacks), stacks[:5]  # running: its step's frames
    assert any(s[:3] == ["burner", "burner", "sleep"] for s in stacks), stacks[:5]  # waiting: the await chain
    rows = collapsed(db, sid, "task:alt", tmp_path)
    assert any(r[0][:2] == ["alt", "alt"] and len(r[0]) > 2 and r[0][2].endswith("get") for r in rows), rows[:5]


def test_without_c_accelerator(tmp_path_factory, tmp_path):
    """_asyncio blocked: asyncio.Task and Future are the pure-Python classes;
    tasks are registered in asyncio.tasks' own sets. Oldest and newest
    interpreter, a short run: names, the deep stack, the sleep share."""
    ps = [p for p in pythons.discover() if not supported(p)]
    if not ps:
        pytest.skip("no supported interpreter")
    lines = tagged_lines()
    for p in {ps[0]["path"]: ps[0], ps[-1]["path"]: ps[-1]}.values():
        db, sid, truth, view, sess = recording(p["path"], tmp_path_factory, "noaccel", "1.0", "1000")
        assert truth["pure"], (p["tag"], truth)
        names = {t["name"] for t in view["tasks"]}
        assert {"alt", "burner", "deep"} <= names, (p["tag"], sorted(names))
        rows = collapsed(db, sid, "task:deep", tmp_path)
        top = max(rows, key=lambda r: r[1])[0]
        assert top[:5] == ["deep", "outer", "middle", "inner", "sleep"], (p["tag"], top)
        # the pure-Python Future is awaited through its __await__ generator:
        # more samples sit there than anywhere else, never fewer than 90%
        deep = task(view, "deep")
        assert deep["waiting"]["share"] >= 0.9 and share_at(deep, lines["E"]) >= 0.9 - TOL, (p["tag"], deep)
