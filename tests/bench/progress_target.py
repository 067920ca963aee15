"""A target that reports its own progress, for benches that measure a
profiler's slowdown in windows inside one long-running process (adjacent
windows share the host's speed of the moment).

The target's source prints "MONOTONIC_NS CPU_NS ITERATIONS" lines as it goes.
    with ProgressTarget(py, source) as tg:
        span = tg.window(lambda: run_profiler(tg.pid), secs)   # or tg.window(None, secs): alone
    tg.rate(*span)   # (iterations per wall ns, per CPU ns), or None
"""
import os
import subprocess
import tempfile
import threading
import time


# The CPU-bound work of the sampler benches: a 19-deep recursion ending in a
# small loop (bench_sampler times it; both slowdown benches run CPU_PROGRESS).
CPU_WORK = r"""
import sys, time
def f(n):
    if n == 0:
        x = 0
        for i in range(200):
            x += i
        return x
    return f(n - 1)
"""

# One long-running copy of that work, reporting its progress (monotonic ns,
# its own CPU ns, iterations done) every 100 iterations.
CPU_PROGRESS = CPU_WORK + r"""k = 0
while True:
    for _ in range(100):
        f(18)
    k += 100
    sys.stdout.write("%d %d %d\n" % (time.monotonic_ns(), time.process_time_ns(), k))
    sys.stdout.flush()
"""

class ProgressTarget:
    def __init__(self, py, source, settle=0.5):
        self.py, self.source, self.settle = py, source, settle
        self.lines = []

    def __enter__(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        script = os.path.join(self.dir, "progress.py")
        with open(script, "w") as f:
            f.write(self.source)
        self._p = subprocess.Popen([self.py, script], stdout=subprocess.PIPE, text=True)
        self.pid = self._p.pid
        self._th = threading.Thread(target=self._read, daemon=True)
        self._th.start()
        time.sleep(self.settle)  # imports done, steady state
        return self

    def _read(self):
        for line in self._p.stdout:
            t, c, k = line.split()
            self.lines.append((int(t), int(c), int(k)))

    def window(self, run, secs):
        """One window: run() (a profiler attached to self.pid), or alone for
        secs when run is None. Returns its (t0, t1) in monotonic ns."""
        t0 = time.monotonic_ns()
        if run:
            run()
        else:
            time.sleep(secs)
        return t0, time.monotonic_ns()

    def rate(self, t0, t1):
        """Progress per wall ns and per CPU ns of the target in [t0, t1];
        None when the window holds too few reports to tell."""
        inside = [x for x in self.lines if t0 <= x[0] <= t1]
        if len(inside) < 2 or inside[-1][0] == inside[0][0] or inside[-1][1] == inside[0][1]:
            return None
        a, b = inside[0], inside[-1]
        return ((b[2] - a[2]) / (b[0] - a[0]), (b[2] - a[2]) / (b[1] - a[1]))

    def __exit__(self, *exc):
        self._p.kill()
        self._p.wait()
        self._th.join(timeout=5)
        self._tmp.cleanup()
        return False
