"""Readers of the tasks view's JSON and of the workloads shared by the asyncio tests."""
import os
import re


def task(view, name):
    """The task named name in a tasks view (fails naming what the view has)."""
    ts = [t for t in view["tasks"] if t["name"] == name]
    assert ts, "task %r not in the tasks view (have %s)" % (name, sorted(t["name"] for t in view["tasks"])[:20])
    return ts[0]


COMMON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "asyncio_common.py")


def share_at(t, at):
    """Task t's wall share parked at at, a (file name, line) of tagged_lines."""
    name, line = at
    return sum(a["wall"]["share"] for a in t["await_points"]
               if a["line"] == line and a["file"].endswith(name))


def tagged_lines(workload):
    """{"X": (file name, line)} for each "# AWAIT-X" tag in the workload file
    and in asyncio_common.py, whose tasks the workloads share."""
    out = {}
    for path in (workload, COMMON):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = re.search(r"# AWAIT-([A-Z])", line)
                if m:
                    out[m.group(1)] = (os.path.basename(path), n)
    return out


def collapsed(run, db, sid, thread, tmp_path):
    """Session sid's collapsed export for one thread: [(frame names, count)]."""
    out = tmp_path / ("c-%s.txt" % thread.replace(":", "_"))
    run(["export", str(sid), "--format", "collapsed", "--thread", thread, "-o", str(out)], db=db)
    rows = []
    for line in out.read_text(encoding="utf-8").splitlines():
        stack, n = line.rsplit(" ", 1)
        rows.append(([f.split(" (")[0] for f in stack.split(";")], int(n)))
    return rows
