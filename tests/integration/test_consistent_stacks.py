"""Consistent stacks: no stored sample shows a call chain that never happened
(issue 19), and a deep stack is kept whole or visibly cut (issue 12).

The workload below has a known set of possible stacks, derived from its own
source (never from a profiler): every frame of the workload file that has a
child must stand on a line holding a call, an await, a yield from or a for
loop (the AST says which lines), a function occurs at most as deep as the
workload recurses, and the main thread's stack is rooted at <module>.
Snapshots taken while the target is stopped (kill -STOP, bifocal dump,
kill -CONT) must all pass that check: it accepts every real stack.

Tolerance: at most MAX_IMPOSSIBLE (1%) of stored samples may fail the check,
on a quiet host and beside two CPU-bound processes, on every interpreter;
and at most MAX_INVALID of the sampled ticks may be given up as torn. Every
dump (of the stopped or the running target) shows a possible stack, or says
it could not read one.

Retrying and dropping torn reads must not skew shares: a second workload
times its own phases (a tight recursion, generators switching fast, a
steady loop) and the sampled shares of those phases must be within
TOL_POINTS (2) percentage points of the measured ones.

Time: two 1 s recordings, 12 dumps and one share recording (1 s of the
target's CPU) per interpreter, serial; the two short deep-stack recordings
(depth and cut, no figure) run in the parallel part.
"""
import ast
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run


MAX_IMPOSSIBLE = 0.01
MAX_INVALID = 0.05
RECORD_S = 1.0
MIN_SAMPLES = 300

# One target runs every pattern in turn, a few microseconds to a few hundred
# each: tight recursions (austin's sum_up_to 16 deep, py-spy's recurse(20)),
# deep-then-shallow swings (30 frames to 1), generators (for, yield from) and
# coroutines driven by hand switching fast, and a thread churning short
# calls beside the main thread.
WORK = '''\
import sys, threading, time
def sum_up_to(n):
    if n <= 1:
        return 1
    r = sum_up_to(n - 1) + n
    return r

def recurse(x):
    if x == 0:
        return
    recurse(x - 1)

def leaf(x):
    return x + 1

def deep(n):
    if n == 0:
        return leaf(n)
    return deep(n - 1) + 1

def shallow():
    t = 0
    for i in range(20):
        t += leaf(i)
    return t

def numbers(n):
    for i in range(n):
        yield i

def relay(n):
    yield from numbers(n)

async def inner(x):
    return x * 2

async def outer(n):
    t = 0
    for i in range(n):
        t += await inner(i)
    return t

def drive():
    c = outer(10)
    try:
        c.send(None)
    except StopIteration as e:
        return e.value

def tiny(x):
    return x + 1

def small(x):
    return tiny(x) + tiny(x)

def worker(stop):
    while not stop.is_set():
        for i in range(50):
            small(i)

stop = threading.Event()
th = threading.Thread(target=worker, args=(stop,))
th.start()
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for k in range(20):
        sum_up_to(16)
        recurse(20)
    for k in range(10):
        deep(30)
        shallow()
    for k in range(10):
        s = 0
        for v in relay(10):
            s += v
        drive()
stop.set()
th.join()
'''
# the deepest each function recurses
MAXDEPTH = {"sum_up_to": 16, "recurse": 21, "leaf": 1, "deep": 31, "shallow": 1,
            "numbers": 1, "relay": 1, "inner": 1, "outer": 1, "drive": 1, "tiny": 1,
            "small": 1, "worker": 1}

FRAME = re.compile(r"^(.*) \((.*):(\d+):(-?\d+)\)$")


def call_lines(src):
    """{qualname: set of lines where a frame of it can have a child}."""
    tree = ast.parse(src)
    out = collections.defaultdict(set)

    def lines_of(node):
        s = set()
        for n in ast.walk(node):
            if isinstance(n, (ast.Call, ast.Await, ast.YieldFrom, ast.Import, ast.ImportFrom)):
                s.update(range(n.lineno, getattr(n, "end_lineno", n.lineno) + 1))
            if isinstance(n, (ast.For, ast.comprehension)):
                s.add(n.iter.lineno)
                s.add(getattr(n, "lineno", n.iter.lineno))
        return s

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = lines_of(node)
    mod = ast.Module(body=[n for n in tree.body if not isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef))], type_ignores=[])
    out["<module>"] = lines_of(mod)
    return out


def check_stack(frames, path, calls, maxdepth):
    """frames: [(qualname, file, line)] outermost first. Returns None when
    the stack can have existed, else why not."""
    mine = [(q, ln) for q, f, ln in frames if f == path]
    if not mine:
        return None  # not the workload (e.g. interpreter shutdown)
    if frames[0][1] == path and frames[0][0] != "<module>":
        return "rooted at %s, not <module>" % frames[0][0]
    if frames[0][1] != path and "threading" not in frames[0][1]:
        return "rooted outside the workload: %s" % (frames[0],)
    count = collections.Counter(q for q, _ in mine)
    for q, n in count.items():
        if q in maxdepth and n > maxdepth[q]:
            return "%d frames of %s, deeper than it recurses (%d)" % (n, q, maxdepth[q])
    for k, (q, f, ln) in enumerate(frames[:-1]):
        if f == path and ln not in calls.get(q, ()):
            return "caller %s at line %d, not a call line" % (q, ln)
    return None


def parse_collapsed(text):
    # records end at "\n" only: a name read from a torn code object may hold
    # U+2028 or U+0085, which str.splitlines() would split at
    for line in text.split("\n"):
        if not line.strip():
            continue
        stack, _, w = line.rpartition(" ")
        frames = []
        for fr in stack.split(";"):
            m = FRAME.match(fr)
            if m:
                frames.append((m.group(1), m.group(2), int(m.group(4))))
        yield frames, int(w)


def parse_dump(text):
    """{tid: [(qualname, file, line)] outermost first}"""
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith("Thread "):
            cur = out.setdefault(line.split()[1], [])
        m = re.match(r'^  File "(.*)", line (-?\d+), in (.*)$', line)
        if m and cur is not None:
            cur.append((m.group(3), m.group(1), int(m.group(2))))
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    p = tmp_path_factory.mktemp("consistent") / "work.py"
    p.write_text(WORK)
    return str(p)


def hogs(n):
    """n CPU-bound processes (plain Python loops), to be killed by the caller."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def record_one(python, path, db, hog):
    ps = hogs(2) if hog else []
    try:
        r = run(["record", "--rate", "1000", "--", python, path, str(RECORD_S)], db=db,
                timeout=120)
    finally:
        for p in ps:
            p.kill()
            p.wait()
    sid = r.stdout.strip().splitlines()[-1]
    out = run(["export", sid, "--format", "collapsed", "-o", "-"], db=db).stdout
    info = json.loads(run(["sessions", "--json"], db=db).stdout)
    sess = [s for s in info if str(s["id"]) == sid][0]
    return out, sess


@pytest.mark.parametrize("hog", [False, True], ids=["quiet", "beside-2-hogs"])
def test_stored_stacks_possible(python, work, tmp_path, hog):
    """Recorded at 1 kHz: <= 1% of stored samples show an impossible stack."""
    calls = call_lines(WORK)
    out, sess = record_one(python, work, str(tmp_path / "t.db"), hog)
    total = bad = 0
    why = collections.Counter()
    for frames, w in parse_collapsed(out):
        if not any(f == work for _, f, _ in frames):
            continue
        total += w
        reason = check_stack(frames, work, calls, MAXDEPTH)
        if reason:
            bad += w
            why[reason] += w
    extra = sess.get("extra") or {}
    ticks = sess["samples"] + sess["invalid"]
    report = "%d samples, %d impossible, %d of %d ticks invalid, %s reads retried; %s" % (
        total, bad, sess["invalid"], ticks, extra.get("torn_retried"), why.most_common(3))
    print(report)
    assert total >= MIN_SAMPLES, report
    assert bad <= MAX_IMPOSSIBLE * total, report
    assert sess["invalid"] <= MAX_INVALID * ticks, report


def test_snapshots_pass_the_check(python, work):
    """The check accepts real stacks: dumps of the stopped target (kill -STOP,
    dump, kill -CONT) all pass; so do dumps of the running target, which read
    until two reads in a row agree, or say they could not get a stack."""
    calls = call_lines(WORK)
    p = subprocess.Popen([python, work, "30"])
    try:
        deadline = time.monotonic() + 20  # started: both threads run the workload
        while time.monotonic() < deadline:
            r = run(["dump", str(p.pid)], check=False)
            if sum(1 for fr in parse_dump(r.stdout).values()
                   if any(f == work for _, f, _ in fr)) == 2:
                break
            time.sleep(0.1)
        bad, refused = [], 0
        for i in range(12):
            stopped = i % 2 == 0
            if stopped:
                os.kill(p.pid, signal.SIGSTOP)
            try:
                r = run(["dump", str(p.pid)], check=False)
            finally:
                if stopped:
                    os.kill(p.pid, signal.SIGCONT)
            if r.returncode and not stopped:  # allowed: says it could not
                assert "could not read a consistent stack" in r.stderr, r.stderr
                refused += 1
                continue
            assert r.returncode == 0, r.stderr
            stacks = parse_dump(r.stdout)
            assert len(stacks) == 2, r.stdout
            for tid, frames in stacks.items():
                reason = check_stack(frames, work, calls, MAXDEPTH)
                if reason:
                    bad.append(("stopped" if stopped else "running", reason, frames))
        assert not bad, bad
        assert refused <= 3, "%d of 6 running dumps could not read a stack" % refused
    finally:
        p.kill()
        p.wait()


# Shares: each phase times itself (its thread's CPU time, what --clock cpu
# samples) and the workload writes the totals; phases run 0.3-4.5 ms each.
# A re-read lands a few microseconds later, so with much shorter phases
# (15-450 us) the torn reads still re-read move a few points of share out of
# the phase that tears (measured, sampler and target on separate CPUs: 3.9
# tight -3.6 to -4.5, 3.12/3.13 steady +2.6 to +3.2 points); see
# docs/sampling.md, Consistent stacks.
SHARES = '''\
import json, random, sys, time
def sum_up_to(n):
    if n <= 1:
        return 1
    return sum_up_to(n - 1) + n

def numbers(n):
    for i in range(n):
        yield i

def relay(n):
    yield from numbers(n)

def flat(n):
    x = 0
    for i in range(n):
        x += i
    return x

def tight(k):
    for _ in range(k):
        sum_up_to(16)

def gens(k):
    s = 0
    for _ in range(k // 2):
        for v in relay(10):
            s += v

def steady(k):
    flat(50 * k)

# phases of random lengths in random order: a periodic workload could lock
# onto the sampler's period (aliasing), which is not what this measures
PHASES = [tight, gens, steady]
spent = {f.__name__: 0 for f in PHASES}
now = time.thread_time_ns
cpu_s = float(sys.argv[1])  # run until this much CPU is used (at most 4x in wall + 2 s)
cpu0, wall_end = time.process_time(), time.monotonic() + 4 * cpu_s + 2
rnd = random.Random(7)
while time.process_time() - cpu0 < cpu_s and time.monotonic() < wall_end:
    f = rnd.choice(PHASES)
    k = rnd.randint(100, 1500)
    t = now()
    f(k)
    spent[f.__name__] += now() - t
with open(sys.argv[2], "w") as out:
    json.dump(spent, out)
'''
TOL_POINTS = 2.0
SHARES_CPU_S = 1.0
SHARES_RATE = 4000


def shares_once(python, path, tmp_path, k):
    db, truth_file = str(tmp_path / ("s%d.db" % k)), str(tmp_path / ("truth%d.json" % k))
    r = run(["record", "--clock", "cpu", "--rate", str(SHARES_RATE), "--", python, path,
             str(SHARES_CPU_S), truth_file], db=db, timeout=120)
    sid = r.stdout.strip().splitlines()[-1]
    out = run(["export", sid, "--format", "collapsed", "-o", "-"], db=db).stdout
    truth = json.load(open(truth_file))
    got = dict.fromkeys(truth, 0)
    for frames, w in parse_collapsed(out):
        for q, f, _ in frames:
            if f == path and q in got:
                got[q] += w
                break
    n, t = sum(got.values()), sum(truth.values())
    info = json.loads(run(["sessions", "--json"], db=db).stdout)[0]
    diffs = {q: 100.0 * got[q] / max(n, 1) - 100.0 * truth[q] / t for q in truth}
    extra = info.get("extra") or {}
    report = ("%d samples, %d invalid, %s re-read, %s cut, %s stalled, %s late (max %s ms); "
              "sampled - measured (points): %s" % (
                  info["samples"], info["invalid"], extra.get("torn_retried"), extra.get("torn_cut"),
                  extra.get("torn_stalled"), extra.get("late_ticks"), extra.get("max_late_ms"),
                  ", ".join("%s %+.2f" % kv for kv in sorted(diffs.items()))))
    return info["samples"], diffs, report


def test_dropping_torn_reads_keeps_shares(python, tmp_path):
    """Each phase's sampled share (a tight recursion and fast-switching
    generators, which tear most, beside a steady loop, which never does) is
    within TOL_POINTS of the share of CPU time the workload measured on
    itself (recorded with --clock cpu at 4 kHz until the target used 1 s of
    CPU: about 4000 samples, a standard error under 0.7 point). A capture
    over the tolerance is taken once more (noise on a shared 2-CPU host; two
    in a row would be a real bias)."""
    path = str(tmp_path / "shares.py")
    open(path, "w").write(SHARES)
    reports = []
    for k in range(2):
        n, diffs, report = shares_once(python, path, tmp_path, k)
        print(report)
        reports.append(report)
        assert n >= MIN_SAMPLES, report
        if max(abs(d) for d in diffs.values()) <= TOL_POINTS:
            return
    pytest.fail(" / ".join(reports))  # both captures: a bias repeats, noise does not


DEEP = '''\
import sys, time
sys.setrecursionlimit(int(sys.argv[2]) + 100)
def down(n, end):
    if n == 0:
        while time.monotonic() < end:
            pass
        return
    down(n - 1, end)

down(int(sys.argv[2]), time.monotonic() + float(sys.argv[1]))
'''


@pytest.mark.parallel  # the deepest stack's depth and its cut, no rate or share
@pytest.mark.parametrize("depth", [1000, 5000])
def test_deep_stack_kept_or_marked(python, tmp_path, depth):
    """A 1000-deep stack is stored whole (<module> at its root); a 5000-deep
    one keeps its innermost frames and ends in a visible <truncated> frame."""
    path = tmp_path / "deep.py"
    path.write_text(DEEP)
    db = str(tmp_path / "t.db")
    r = run(["record", "--rate", "200", "--", python, str(path), "0.6", str(depth)], db=db)
    sid = r.stdout.strip().splitlines()[-1]
    out = run(["export", sid, "--format", "collapsed", "-o", "-"], db=db).stdout
    deepest = max(((len(fr), fr) for fr, _ in parse_collapsed(out)), key=lambda x: x[0])[1]
    downs = sum(1 for q, f, _ in deepest if q == "down")
    if depth < 4000:
        assert deepest[0][0] == "<module>" and downs == depth + 1, (len(deepest), deepest[:2])
    else:
        assert deepest[0][0] == "<truncated>", deepest[:2]
        assert len(deepest) == 4096 and downs == 4095, len(deepest)
        info = json.loads(run(["sessions", "--json"], db=db).stdout)
        assert info[0]["extra"]["stacks_truncated"] > 0


@pytest.mark.parallel  # a table, no sampling
def test_opcode_table_matches_interpreter(python):
    """sampling/gen/opcodes.h (the check's opcode classes, vendored) is what
    gen_opcodes.py derives from this interpreter's own dis/opcode modules."""
    gen = os.path.join(ROOT, "sampling", "gen")
    out = subprocess.run([python, os.path.join(gen, "gen_opcodes.py")], capture_output=True,
                         text=True, timeout=60)
    minor = int(subprocess.run([python, "-c", "import sys; print(sys.version_info[1])"],
                               capture_output=True, text=True).stdout)
    if minor > 15:
        pytest.skip("no opcode table for 3.%d: callers are not checked there" % minor)
    assert out.returncode == 0, out.stderr
    body = lambda t: re.findall(r"0x[0-9a-f]{2}", t.split("{", 1)[1])  # noqa: E731
    header = open(os.path.join(gen, "opcodes.h")).read()
    m = re.search(r"static const uint8_t smp_op_3_%d\[256\] = \{[^\n]*\n(.*?)\};" % minor,
                  header, re.S)
    assert m, "no table for 3.%d in opcodes.h" % minor
    assert re.findall(r"0x[0-9a-f]{2}", m.group(1)) == body(out.stdout)


# A deep recursion that returns and re-enters all the time (the stack changes
# between and during reads): what a sampler most often reads torn.
FAST = '''\
import sys, time
def f(n):
    if n == 0:
        x = 0
        for i in range(50):
            x += i
        return x
    return f(n - 1)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    f(30)
'''
FAST_RATE = 20000
MAX_FAST_INVALID = 0.001
# Older layouts give up more of these ticks, on this build and on the one
# before this round alike (quiet host, 2026-12-01): 3.11 0.4-0.6%, 3.12
# 0.07-0.2%, 3.8-3.10 (frame objects, every call through C) 3-13%. They are
# held to what they do, so that a regression still shows; the 0.1% goal
# (the Tachyon comparison's) is for 3.13+.
MAX_FAST_INVALID_311 = 0.01
MAX_FAST_INVALID_OLD = 0.2


def fast_once(python, path, db):
    """One 1 s recording of FAST at FAST_RATE: (ticks, invalid, bad, total, report)."""
    r = run(["record", "--rate", str(FAST_RATE), "--", python, str(path), "1.0"], db=db, timeout=120)
    sid = r.stdout.strip().splitlines()[-1]
    info = [s for s in json.loads(run(["sessions", "--json"], db=db).stdout) if str(s["id"]) == sid][0]
    out = run(["export", sid, "--format", "collapsed", "-o", "-"], db=db).stdout
    calls = call_lines(FAST)
    total = bad = 0
    for frames, w in parse_collapsed(out):
        if not any(f == str(path) for _, f, _ in frames):
            continue
        total += w
        bad += w if check_stack(frames, str(path), calls, {"f": 31}) else 0
    ticks = info["samples"] + info["invalid"]
    extra = info.get("extra") or {}
    report = "%d ticks, %d invalid, %s re-read, %s cut, %s stalled; %d of %d samples impossible" % (
        ticks, info["invalid"], extra.get("torn_retried"), extra.get("torn_cut"),
        extra.get("torn_stalled"), bad, total)
    return ticks, info["invalid"], bad, total, report


def test_fast_recursion_few_given_up(python, tmp_path):
    """Sampled at 20 kHz for 1 s, a 31-deep recursion returning every few
    microseconds loses at most 0.1% of its ticks on 3.13+ (older layouts:
    see MAX_FAST_INVALID_311/_OLD; 2 when a loaded host let
    fewer than 2000 be taken) as given up (torn on every re-read): a frame read after it returned is cut off, not re-read (3.14+
    clears a returned frame's executable), and the kept stacks pass the
    check (rooted at <module>, f at most 31 deep, callers on call lines).
    A capture over the given-up limit is taken once more: on 3.8-3.10 that
    share is set by how much the target runs beside the sampler (the same
    build on the same host, minutes apart: 0.4% to 20.5%), a regression
    shows in both."""
    path = tmp_path / "fast.py"
    path.write_text(FAST)
    minor = int(subprocess.run([python, "-c", "import sys; print(sys.version_info[1])"],
                               capture_output=True, text=True).stdout)
    limit = MAX_FAST_INVALID if minor >= 13 else MAX_FAST_INVALID_311 if minor >= 11 else MAX_FAST_INVALID_OLD
    for k in range(2):
        ticks, invalid, bad, total, report = fast_once(python, path, str(tmp_path / ("f%d.db" % k)))
        print(report)
        assert total >= MIN_SAMPLES, report
        assert bad <= MAX_IMPOSSIBLE * total, report
        if invalid <= max(2, limit * ticks):
            return
    pytest.fail(report)
