"""Independent reference: per-function self/total shares a collapsed file implies."""
import collections
import re

PYSPY = re.compile(r"^(.*) \((.*?)(?::(\d+))?(?::(\d+))?\)$")


def shares(path):
    """{qualname: (self_share, total_share)} computed straight from the text."""
    selfw, totw = collections.Counter(), collections.Counter()
    total = 0
    dialect = None
    for raw in open(path):
        line = raw.strip()
        if not line or line.startswith("#"):
            if line.startswith("# austin:"):
                dialect = "austin"
            continue
        stack, _, metric = line.rpartition(" ")
        w = int(metric.split(",")[0])
        frames = stack.split(";")
        names = []
        for fr in frames:
            if dialect == "austin":
                if re.match(r"^P\d+$", fr) or fr.startswith("T"):
                    continue
                file, func, ln = fr.rsplit(":", 2)
                names.append(func)
            elif fr.startswith("thread (") or fr.startswith("process "):
                continue
            else:
                m = PYSPY.match(fr)
                names.append(m.group(1) if m else fr)
        total += w
        if names:
            selfw[names[-1]] += w
        for n in set(names):
            totw[n] += w
    return {n: (selfw[n] / total, totw[n] / total) for n in totw}
