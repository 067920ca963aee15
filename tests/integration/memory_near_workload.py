"""A workload that allocates known amounts, for test_memory_near.py and
bench_memory_near.py. Run under `python -X tracemalloc`; at the end it writes
what tracemalloc saw grouped per function (the function whose lines the
trace's innermost frame is on) as JSON to argv[1], next to what each
function keeps by construction (sys.getsizeof of what it keeps).

The comparison is of totals. Known difference: a function's first call
makes one-time allocations for its code object (bifocal's co_extra slot; on
3.12+ sys.monitoring's instrumentation) before its frame is on bifocal's
shadow stack, so bifocal charges those few blocks to the caller where
tracemalloc charges the function (a handful of blocks, a few hundred bytes
per function, once).

usage: python -X tracemalloc memory_near_workload.py OUT.json [SCALE]
"""
import json
import sys
import threading
import tracemalloc

SCALE = int(sys.argv[2]) if len(sys.argv) > 2 else 1
KEPT = []          # keep_per_call's blocks
LEAKED = []        # the generator's
GROWN = []         # the growing thread's
BUF = bytearray()  # grown through bytearray's own realloc
TRUTH = {}


def keep_per_call(out):
    # keeps one 1,000-byte bytes object per call
    out.append(bytes(1000))


def alloc_and_free(n):
    total = 0
    for _ in range(n):
        b = bytes(50000)
        total += len(b)
        del b
    return total


def leaky_gen(n):
    for i in range(n):
        LEAKED.append(bytes(2000))
        yield i


def grow(n):
    for _ in range(n):
        GROWN.append(bytearray(3000))


def compute(n):
    x = 0
    for i in range(n):
        x = (x * 31 + i) & 0xFFFF
    return x


def extend_buf(n):
    for _ in range(n):
        BUF.extend(b"y" * 512)


def main():
    if not tracemalloc.is_tracing():
        sys.exit("run me with python -X tracemalloc")
    for _ in range(200 * SCALE):
        keep_per_call(KEPT)
    alloc_and_free(100 * SCALE)
    for _ in leaky_gen(150 * SCALE):
        pass
    t1 = threading.Thread(target=grow, args=(300 * SCALE,))
    t2 = threading.Thread(target=compute, args=(200000 * SCALE,))
    t1.start()
    t2.start()
    t1.join()
    t2.join()
    extend_buf(64 * SCALE)
    TRUTH.update(keep_per_call=sum(map(sys.getsizeof, KEPT)), leaky_gen=sum(map(sys.getsizeof, LEAKED)),
                 grow=sum(map(sys.getsizeof, GROWN)), calls_keep_per_call=len(KEPT),
                 alloc_and_free_bytes=100 * SCALE * sys.getsizeof(bytes(50000)))
    snap = tracemalloc.take_snapshot()
    report(snap, sys.argv[1])


def report(snap, path):
    import dis
    ranges = []
    for name, fn in list(globals().items()):
        co = getattr(fn, "__code__", None)
        if co is None or co.co_filename != __file__:
            continue
        lines = [ln for _, ln in dis.findlinestarts(co) if ln]
        ranges.append((co.co_firstlineno, max(lines), co.co_qualname if hasattr(co, "co_qualname") else name))
    per = {}
    for stat in snap.statistics("lineno"):
        fr = stat.traceback[0]
        if fr.filename != __file__:
            continue
        for lo, hi, name in ranges:
            if lo <= fr.lineno <= hi:
                p = per.setdefault(name, {"count": 0, "size": 0})
                p["count"] += stat.count
                p["size"] += stat.size
                break
    with open(path, "w") as f:
        json.dump({"tracemalloc": per, "truth": TRUTH}, f)


main()
