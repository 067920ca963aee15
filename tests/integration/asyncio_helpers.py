"""Readers of the tasks view's JSON shared by the asyncio tests."""


def task(view, name):
    """The task named name in a tasks view (fails naming what the view has)."""
    ts = [t for t in view["tasks"] if t["name"] == name]
    assert ts, "task %r not in the tasks view (have %s)" % (name, sorted(t["name"] for t in view["tasks"])[:20])
    return ts[0]


def share_at(t, line, workload):
    """Task t's wall share parked at the given line of the workload file."""
    return sum(a["wall"]["share"] for a in t["await_points"]
               if a["line"] == line and a["file"].endswith(workload))
