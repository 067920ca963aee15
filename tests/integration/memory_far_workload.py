"""Workload of test_memory_far.py and bench_memory_far.py: functions that grow
memory at known relative rates, free it, grow in one thread while another only
computes, leak through a generator and allocate through a C type (bytearray)
and, where it is installed, numpy.
It reports its own truth: each function's resident growth and shrink, read
from its own /proc/self/statm around each call (a concurrent phase from its
start and end), and tracemalloc's count of the bytes the keeper keeps per call
on a short run.

    python memory_far_workload.py OUT.json [SECONDS_PER_PHASE]
"""
import hashlib
import json
import os
import sys
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
FD = os.open("/proc/self/statm", os.O_RDONLY)
SPIN = 6000  # loop turns between two allocations: spreads a call's growth over its run
GROWTH, SHRINK, CALLS = {}, {}, {}
KEEP, CHURN, LEAK, CEXT, THREAD_KEEP, NP = [], [], [], [], [], []
try:
    import numpy
except ImportError:  # numpy where the interpreter has it (the sid root's 3.14/3.15)
    numpy = None


def rss():
    return int(os.pread(FD, 128, 0).split()[1]) * PAGE


def charge(name, d):
    GROWTH.setdefault(name, 0)
    SHRINK.setdefault(name, 0)
    if d > 0:
        GROWTH[name] += d
    else:
        SHRINK[name] -= d


def timed(fn, *a):
    r0 = rss()
    v = fn(*a)
    charge(fn.__name__, rss() - r0)
    CALLS[fn.__name__] = CALLS.get(fn.__name__, 0) + 1
    return v


def keep_big():  # twice keep_small's bytes in the same time
    for _ in range(40):
        KEEP.append(bytes(16384))
        KEEP.append(bytes(16384))
        for _ in range(SPIN):
            pass


def keep_small():
    for _ in range(40):
        KEEP.append(bytes(16384))
        for _ in range(SPIN // 2):
            pass
        KEEP.append(None)
        for _ in range(SPIN // 2):
            pass


def compute():  # allocates nothing
    s = 0
    for i in range(40 * SPIN):
        s += i
    return s


def idle():  # sleeps: a tick here finds no GIL holder (the thread may be
    time.sleep(0.003)  # runnable, waking), and the growth before it is keep_small's


def build():
    for _ in range(8):
        CHURN.append(bytearray(256 * 1024))
        for _ in range(SPIN * 5):
            pass


def release():  # only frees: a shrink, never growth
    while CHURN:
        CHURN.pop()
        for _ in range(SPIN * 2):
            pass


def leaky():  # a generator that keeps what it makes
    while True:
        for _ in range(30):
            LEAK.append(bytes(16384))
            for _ in range(SPIN):
                pass
        yield len(LEAK)


def grow_c():  # through a C type: bytearray zero-fills its buffer
    for _ in range(20):
        CEXT.append(bytearray(32768))
        for _ in range(SPIN * 2):
            pass


def grow_np():  # numpy's own allocator (np.ones writes its buffer)
    for _ in range(20):
        NP.append(numpy.ones(4096))
        for _ in range(SPIN * 2):
            pass


def grow_thread(stop):
    while not stop.is_set():
        THREAD_KEEP.append(bytes(16384))
        for _ in range(SPIN):
            pass


def hash_compute(buf):  # the C loop releases the GIL and allocates nothing
    return hashlib.sha256(buf).digest()


def phase(seconds, *steps):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for fn in steps:
            timed(fn)


def threads_phase(seconds):
    buf = bytes(8 << 20)
    stop = threading.Event()
    t = threading.Thread(target=grow_thread, args=(stop,), name="grower")
    r0 = rss()
    t.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hash_compute(buf)
    stop.set()
    t.join()
    charge("grow_thread", rss() - r0)
    charge("hash_compute", 0)


def kept_per_call():
    """tracemalloc's bytes kept by one keep_big call (the workload's own truth
    of what a call keeps)."""
    import tracemalloc
    tracemalloc.start()
    a = tracemalloc.get_traced_memory()[0]
    timed(keep_big)  # the sampler sees this call too: it is part of the truth
    b = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return b - a


def main():
    out = sys.argv[1]
    sec = float(sys.argv[2]) if len(sys.argv) > 2 else 0.6
    kept = kept_per_call()
    t0 = time.monotonic()
    phase(sec, keep_big, keep_small, idle, compute)
    phase(sec * 0.7, build, release)
    threads_phase(sec)
    gen = leaky()
    end = time.monotonic() + sec * 0.7
    while time.monotonic() < end:
        r0 = rss()
        next(gen)
        charge("leaky", rss() - r0)
        timed(compute)
    phase(sec * 0.7, grow_c, compute)
    if numpy is not None:
        phase(sec * 0.7, grow_np, compute)
    with open(out, "w") as f:
        json.dump({"growth": GROWTH, "shrink": SHRINK, "calls": CALLS, "kept_per_keep_big": kept,
                   "seconds": time.monotonic() - t0, "pid": os.getpid()}, f)


if __name__ == "__main__":
    main()
