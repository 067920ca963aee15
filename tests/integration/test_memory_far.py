"""record --memory (the far lens's memory): resident growth charged to the
stack that ran, checked against the workload's own truth — its functions'
growth and shrink read from its own /proc/self/statm around each call, and
tracemalloc's bytes kept per call (memory_far_workload.py) — on every
interpreter; the views, exports, austin's -m and the schema migration."""
import gzip
import json
import os
import sqlite3
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "memory_far_workload.py")
# glibc's mmap threshold held fixed: a freed 256 KiB buffer goes back to the
# OS at once (its default raises the threshold after the first free, and the
# buffers then stay in the heap: resident, not a shrink)
ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
TOLERANCE_PP = 5.0


def record(python, db, out, rate=1000, seconds=0.6, extra=()):
    r = run(["record", "--memory", "-r", str(rate)] + list(extra) + ["--", python, WORKLOAD, out, str(seconds)],
            db=db, env=ENV, timeout=180)
    sid = int(r.stdout.strip().splitlines()[-1])
    with open(out) as f:
        return sid, json.load(f)


def memory_json(db, sid):
    return json.loads(run(["replay", str(sid), "--memory", "--json", "--limit", "1000"], db=db).stdout)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, request):
    """One recording per interpreter, shared by the checks below."""
    cache = {}

    def get(python):
        if python not in cache:
            d = tmp_path_factory.mktemp("mem")
            db = str(d / "m.db")
            sid, truth = record(python, db, str(d / "truth.json"))
            cache[python] = (db, sid, truth)
        return cache[python]
    return get


def self_growth(view):
    return {f["qualname"]: f["self"] for f in view["functions"]}


def growth_share_rows(python, recorded):
    """(view, [(function, truth %, sampled %)]): each measured function's
    share of the growth among the measured functions, by the workload's own
    statm and by the sampler."""
    db, sid, truth = recorded(python)
    view = memory_json(db, sid)
    got = self_growth(view)
    names = list(truth["growth"])
    if "/var/lib/bifocal/" in python:  # .ci/sid-root installs python3-numpy
        assert "grow_np" in names, names
    true_total = sum(truth["growth"].values())
    got_total = sum(got.get(n, {}).get("growth_bytes", 0) for n in names)
    assert true_total > 5e6 and got_total > 0.7 * true_total, (true_total, got_total)
    rows = []
    for n in names:
        t = 100.0 * truth["growth"][n] / true_total
        g = 100.0 * got.get(n, {}).get("growth_bytes", 0) / got_total
        rows.append((n, round(t, 1), round(g, 1)))
    return got, rows


# build() is followed at once by release(): a tick interval that holds the end
# of the one and the start of the other reads one statm change, the growth
# netted against the frees. The sampler tells the two apart by the process's
# page faults there (docs/memory.md, "Growth and shrink in one interval");
# the builder's share and release's part are checked on their own below.
CHURN = ("build",)


@pytest.mark.few_pythons  # statm deltas and the GIL holder: each GIL layout is among them
def test_growth_shares_match_truth(python, recorded):
    """Every measured function's share of the growth (among the measured
    functions) is within 5 points of its share by the workload's own statm:
    keepers at a 2:1 rate, a thread that grows while another only hashes, a
    leaking generator, bytearray through C, numpy where installed (the sid
    root's 3.14/3.15); compute, idle (asleep), hash_compute and release grow
    nothing. (The builder beside its release: test_builder_share_beside_frees.)"""
    got, rows = growth_share_rows(python, recorded)
    bad = [r for r in rows if abs(r[1] - r[2]) > TOLERANCE_PP and r[0] not in CHURN]
    assert not bad, "growth share (truth %%, sampled %%) off by > %g points: %s (all: %s)" % (TOLERANCE_PP, bad, rows)
    # the interval of a grower holds its truth more often than not: check it is sane
    kb = got["keep_big"]
    assert kb["growth_ci95"][0] <= kb["growth_share"] <= kb["growth_ci95"][1]


@pytest.mark.few_pythons  # statm deltas and the GIL holder: each GIL layout is among them
def test_builder_share_beside_frees(python, recorded):
    """The builder's share within the goal's 5 points, and most of release()'s
    frees charged to it, though the one follows the other at once (the
    faults tell an interval's growth from its shrink)."""
    _, rows = growth_share_rows(python, recorded)
    bad = [r for r in rows if abs(r[1] - r[2]) > TOLERANCE_PP and r[0] in CHURN]
    assert not bad, "builder's growth share (truth %%, sampled %%) off by > %g points: %s (all: %s)" % (
        TOLERANCE_PP, bad, rows)
    db, sid, truth = recorded(python)
    rel = self_growth(memory_json(db, sid)).get("release", {"shrink_bytes": 0})
    # release's frees are charged to it, most of them (40-60% at load 8 on 3.14 while the net was charged)
    assert rel["shrink_bytes"] > 0.6 * truth["shrink"]["release"], (rel, truth["shrink"]["release"])


@pytest.mark.few_pythons  # statm deltas and the GIL holder: each GIL layout is among them
def test_shrink_is_never_growth(python, recorded):
    """release() only frees: its sampled shrink is most of what it freed by
    its own statm, and it is charged (almost) no growth; build() is charged
    growth, not the shrink."""
    db, sid, truth = recorded(python)
    view = memory_json(db, sid)
    got = self_growth(view)
    rel = got.get("release", {"growth_bytes": 0, "shrink_bytes": 0})
    assert truth["shrink"]["release"] > 4e6, truth["shrink"]
    assert rel["shrink_bytes"] > 0, rel  # how much of it: test_builder_share_beside_frees
    assert rel["growth_bytes"] < 0.05 * truth["growth"]["build"], (rel, truth["growth"]["build"])
    # release's last frees before build starts land on build when the sampler is
    # late (a busy host): attribution is the interval's, the sign is never lost
    assert got["build"]["shrink_bytes"] < 0.4 * truth["shrink"]["release"], got["build"]
    assert got["build"]["growth_bytes"] > 0.7 * truth["growth"]["build"], got["build"]
    m = view["memory"]
    assert m["growth_bytes"] - m["shrink_bytes"] == m["net_bytes"]
    assert all(f["self"]["growth_bytes"] >= 0 and f["self"]["shrink_bytes"] >= 0 for f in view["functions"])


@pytest.mark.few_pythons  # statm deltas and the GIL holder: each GIL layout is among them
def test_thread_growth_goes_to_the_growing_thread(python, recorded):
    """While one thread grows and another only hashes (in C, the GIL
    released), the growth is charged to the grower's function and thread."""
    db, sid, truth = recorded(python)
    got = self_growth(memory_json(db, sid))
    assert got["grow_thread"]["growth_bytes"] > 0.7 * truth["growth"]["grow_thread"], got["grow_thread"]
    assert got.get("hash_compute", {}).get("growth_bytes", 0) < 0.05 * truth["growth"]["grow_thread"]
    con = sqlite3.connect(db)
    leaf = ("JOIN stacks s ON s.id=m.stack_id JOIN frames fr ON fr.id=s.frame_id JOIN functions f ON"
            " f.id=fr.function_id JOIN strings q ON q.id=f.qualname_id WHERE q.s=?")
    grower = {r[0] for r in con.execute("SELECT DISTINCT m.thread_id FROM memory_samples m " + leaf +
                                        " AND m.rss_delta>0", ("grow_thread",))}
    main = {r[0] for r in con.execute("SELECT DISTINCT m.thread_id FROM memory_samples m " + leaf, ("build",))}
    con.close()
    assert len(grower) == 1 and not grower & main, (grower, main)


BURST = r"""
import json, sys, time, tracemalloc
KEEP = []
def burst():  # 4 x 64 KiB kept per call, written: ~100 us of work
    for _ in range(4):
        KEEP.append(b"x" * 65536)
def nap():  # asleep: the GIL released, the thread waking runnable
    time.sleep(0.002)
def loop(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        burst()
        nap()
kept = {"burst": 0, "nap": 0}  # tracemalloc's truth: what each keeps, 20 cycles
tracemalloc.start()
for _ in range(20):
    for fn in (burst, nap):
        a = tracemalloc.get_traced_memory()[0]
        fn()
        kept[fn.__name__] += tracemalloc.get_traced_memory()[0] - a
tracemalloc.stop()
loop(float(sys.argv[2]))
json.dump(kept, open(sys.argv[1], "w"))
"""


def test_burst_then_sleep(python, tmp_path):
    """A keeper whose growth comes in ~100 us bursts, each followed by a 2 ms
    sleep (the "grow" case of calibrate --memory): tracemalloc says burst()
    keeps all of it. A tick in the sleep finds no GIL holder (the thread may
    be runnable, waking): the growth goes to the last GIL holder a tick saw,
    not to the sleeper (before: burst 14-54% of the growth, nap 46-85%, on
    3.8-3.15 (3.12: 54/46); now burst 85-98% in most runs)."""
    if os.path.basename(python) not in ("python3.8", "python3.12", "python3.15"):
        pytest.skip("held on one interpreter per GIL layout (3.8-3.11 vendored, 3.12, 3.13+ debug offsets: "
                    "3.15) (suite time)")
    src = tmp_path / "burst.py"
    src.write_text(BURST)
    db, out = str(tmp_path / "b.db"), str(tmp_path / "kept.json")
    r = run(["record", "--memory", "-r", "1000", "--", python, str(src), out, "2.0"], db=db, env=ENV, timeout=120)
    sid = int(r.stdout.strip().splitlines()[-1])
    kept = json.load(open(out))
    assert kept["burst"] >= 20 * 4 * 65536 and kept["nap"] < 0.01 * kept["burst"], kept
    view = memory_json(db, sid)
    if view["memory"]["changes"] < 30:  # each row is one look at a GIL holder (stale changes join it)
        pytest.skip("the host let the sampler see the GIL holder %d times in 2 s (load %.0f): too few to "
                    "share the growth" % (view["memory"]["changes"], os.getloadavg()[0]))
    got = self_growth(view)
    total = sum(f["growth_bytes"] for f in got.values())
    share = {n: 100.0 * got.get(n, {}).get("growth_bytes", 0) / total for n in ("burst", "nap", "loop")}
    # not within 5 points: a tick in the sleep is charged to whoever held the
    # GIL last, and nap holds it around its sleep (longer when the host
    # preempts the holder): 85-98% in most runs, 47% in one of five on 3.15 at
    # load 25 (docs/memory.md, short bursts)
    assert share["burst"] >= 45 and share["nap"] <= 50, share


POOLS = r"""
import os, sys, time
keep = [bytes(100) for _ in range(300000)]  # 133-byte objects in pymalloc's 144-byte class
r, w = os.pipe()
err = os.dup(2)
os.dup2(w, 2)
sys._debugmallocstats()  # pymalloc's own account, from inside
os.dup2(err, 2)
os.close(w)
stats = os.read(r, 1 << 20).decode()
with open(sys.argv[1], "w") as f:
    f.write(stats)
time.sleep(0.5)  # the sampler's timeline points read this state
"""


def debug_stat(text, name):
    for line in text.splitlines():
        if line.split("=")[0].strip() == name:
            return int(line.split("=")[1].strip().replace(",", ""))
    raise AssertionError("%r not in sys._debugmallocstats(): %s" % (name, text[-2000:]))


@pytest.mark.parallel  # no timing figure: a state read from outside against the target's own account
def test_python_allocator_pools(python, tmp_path):
    """pymalloc's pools in use, read from outside (3.12+: the main
    interpreter's obmalloc state; 3.8-3.11: obmalloc.c's statics, by the
    symbol table of pyenv's unstripped builds), agree with
    sys._debugmallocstats() in the target: the pools hold its allocated
    blocks (within 10%: the pools' free blocks and headers), and the session
    says what it read; a stripped 3.8-3.11 (Debian's) says why it is not."""
    src = tmp_path / "pools.py"
    src.write_text(POOLS)
    db, out = str(tmp_path / "p.db"), str(tmp_path / "stats.txt")
    r = run(["record", "--memory", "-r", "200", "--", python, str(src), out], db=db, timeout=120)
    sid = int(r.stdout.strip().splitlines()[-1])
    c = sqlite3.connect(db)
    extra = json.loads(c.execute("SELECT extra_json FROM sessions WHERE id=?", (sid,)).fetchone()[0])["memory"]
    pts = [row[0] for row in c.execute("SELECT py_bytes FROM memory_timeline WHERE session_id=?", (sid,))]
    c.close()
    version = tuple(int(x) for x in json.loads(run(["sessions", "--json"], db=db).stdout)[-1]["python"].split(".")[:2])
    if version < (3, 12) and "/.pyenv/" not in python:  # Debian's python3.11 is stripped
        assert extra["python_allocator"].startswith("not read: 3.8-3.11 keep pymalloc's state in statics"), extra
        assert pts and all(p == -1 for p in pts), pts
        return
    assert extra["python_allocator"] == "pymalloc pools in use (main interpreter)", extra
    stats = open(out).read()
    blocks = debug_stat(stats, "# bytes in allocated blocks")
    assert blocks > 300000 * 133, blocks
    peak = max(pts)
    assert peak == extra["python_pool_bytes_peak"], (peak, extra)
    assert blocks <= peak < 1.1 * blocks, (peak, blocks, extra)
    assert extra["python_read_failed"] <= 1 and extra["python_reads"] >= 5, extra
    view = json.loads(run(["replay", str(sid), "--memory", "--view", "heatmap", "--json"], db=db).stdout)
    assert max(b["python_pool_bytes"] for b in view["memory_timeline"]["buckets"]) > blocks * 0.9, view


@pytest.mark.few_pythons  # statm deltas and the GIL holder: each GIL layout is among them
def test_kept_bytes_per_call(python, recorded):
    """keep_big keeps what tracemalloc says one call keeps; the sampled growth
    charged to it is that times its calls (resident pages: within 25%)."""
    db, sid, truth = recorded(python)
    got = self_growth(memory_json(db, sid))
    want = truth["kept_per_keep_big"] * truth["calls"]["keep_big"]
    assert 0.75 * want < truth["growth"]["keep_big"] < 1.25 * want, (truth["growth"]["keep_big"], want)
    assert 0.75 * want < got["keep_big"]["growth_bytes"] < 1.25 * want, (got["keep_big"], want)


@pytest.mark.parallel  # views and exports of one recording
def test_views_and_exports(recorded, tmp_path):
    import pythons
    python = pythons.discover()[-1]["path"]
    db, sid, truth = recorded(python)
    view = memory_json(db, sid)
    total = view["memory"]["growth_bytes"]
    # collapsed: the bytes of growth, every line; sums to the view's total
    col = run(["export", str(sid), "--memory", "-f", "collapsed", "-o", "-"], db=db).stdout
    vals = [int(line.rsplit(" ", 1)[1]) for line in col.splitlines()]
    assert abs(sum(vals) - total) <= len(vals), (sum(vals), total)
    framed = sum(int(line.rsplit(" ", 1)[1]) for line in col.splitlines() if not line.startswith("[no Python"))
    assert any("leaky" in line for line in col.splitlines())
    # speedscope: unit bytes, weights sum to the total
    sp = json.loads(run(["export", str(sid), "--memory", "-f", "speedscope", "-o", "-"], db=db).stdout)
    assert {p["unit"] for p in sp["profiles"]} == {"bytes"}
    assert abs(sum(sum(p["weights"]) for p in sp["profiles"]) - framed) <= len(vals)
    # pprof: alloc_space/bytes is a sample type and the default
    out = str(tmp_path / "m.pb.gz")
    run(["export", str(sid), "--memory", "-f", "pprof", "-o", out], db=db)
    raw = gzip.open(out).read()
    assert b"alloc_space" in raw and b"bytes" in raw
    # flame graph in bytes; timeline
    html = str(tmp_path / "f.html")
    run(["replay", str(sid), "--memory", "--view", "flame", "-o", html], db=db)
    assert '"unit":"bytes"' in open(html).read()
    tl = json.loads(run(["replay", str(sid), "--memory", "--view", "heatmap", "--json", "--buckets", "10"],
                        db=db).stdout)
    b = tl["memory_timeline"]["buckets"]
    assert len(b) == 10 and max(x["rss_bytes"] for x in b) > min(x["rss_bytes"] for x in b) + 10e6
    text = run(["replay", str(sid), "--memory"], db=db).stdout
    assert "keep_big" in text and "95% CI" in text
    page = str(tmp_path / "t.html")  # a text view as a page, like every other
    run(["replay", str(sid), "--memory", "-o", page], db=db)
    assert "<pre>" in open(page).read() and "keep_big" in open(page).read()


@pytest.mark.parallel  # messages
def test_austin_m_and_errors(tmp_path):
    import pythons
    python = pythons.discover()[0]["path"]
    db = str(tmp_path / "a.db")
    # austin's spelling, austin's order (the command among the options)
    r = run(["record", "-m", "-r", "200", "-d", "0.5", python, "-c", "import time; time.sleep(1)"], db=db)
    sid = int(r.stdout.strip().splitlines()[-1])
    info = json.loads(run(["sessions", "--json"], db=db).stdout)[-1]
    assert info["extra"]["memory"]["source"] == "statm" and info["extra"]["memory"]["reads"] > 10, info["extra"]
    # a session without --memory: one line naming the option
    r2 = run(["record", "-r", "200", "-d", "0.3", "--", python, "-c", "import time; time.sleep(0.5)"], db=db)
    plain = int(r2.stdout.strip().splitlines()[-1])
    bad = run(["replay", str(plain), "--memory"], db=db, check=False)
    assert bad.returncode != 0 and "record --memory" in bad.stderr and len(bad.stderr.splitlines()) == 1
    bad = run(["replay", str(sid), "--memory", "--view", "gil"], db=db, check=False)
    assert bad.returncode != 0 and "--memory goes with" in bad.stderr
    bad = run(["export", str(sid), "--memory", "-f", "pstats", "-o", str(tmp_path / "x")], db=db, check=False)
    assert bad.returncode != 0 and "--memory exports" in bad.stderr


@pytest.mark.parallel  # the schema
@pytest.mark.parametrize("old", [1, 2])
def test_old_database_migrates(tmp_path, old):
    """A database of schema 1 (before push_spool and the memory tables) or 2
    (before the memory tables) opens for reading, is migrated in place, and
    keeps its sessions."""
    import pythons
    python = pythons.discover()[0]["path"]
    db = str(tmp_path / "v1.db")
    run(["record", "-r", "200", "-d", "0.3", "--", python, "-c", "import time; time.sleep(0.5)"], db=db)
    con = sqlite3.connect(db)
    con.executescript("DROP TABLE memory_samples; DROP TABLE memory_timeline;" +
                      (" DROP TABLE push_spool;" if old == 1 else "") + " PRAGMA user_version=%d;" % old)
    con.close()
    out = run(["sessions", "--json"], db=db).stdout
    assert len(json.loads(out)) == 1
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] >= 3
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"memory_samples", "memory_timeline", "push_spool"} <= names
    con.close()
    run(["record", "--memory", "-r", "200", "-d", "0.3", "--", python, "-c", "import time; time.sleep(0.5)"], db=db)
    assert len(json.loads(run(["sessions", "--json"], db=db).stdout)) == 2


@pytest.mark.parallel  # copies of one recording
def test_copies_keep_memory(recorded, tmp_path):
    """A redacted copy (bf_session_copy) keeps the memory rows and timeline;
    gc keeps the stacks they use."""
    import pythons
    python = pythons.discover()[-1]["path"]
    db, sid, truth = recorded(python)
    want = memory_json(db, sid)["memory"]
    out = str(tmp_path / "r.db")
    run(["redact", str(sid), "-o", out], db=db)
    con = sqlite3.connect(out)
    rid = con.execute("SELECT max(id) FROM sessions").fetchone()[0]
    con.close()
    got = memory_json(out, rid)["memory"]
    assert (got["growth_bytes"], got["shrink_bytes"], got["changes"]) == \
        (want["growth_bytes"], want["shrink_bytes"], want["changes"])
    tl = json.loads(run(["replay", str(rid), "--memory", "--view", "heatmap", "--json"], db=out).stdout)
    assert tl["memory_timeline"]["points"] > 10
    run(["gc", "--force"], db=out, check=False)
    assert memory_json(out, rid)["memory"]["growth_bytes"] == want["growth_bytes"]
