"""Make a real capture in a third-party collapsed dialect, in pure Python.

Runs a small workload in threads while a sampler thread reads
sys._current_frames() every INTERVAL and writes what it saw as
  --dialect austin      austin 3 text: `# key: value` header/footer,
                        P<pid>;T<iid>:<tid>;file:func:line;... <µs>
  --dialect pyspy       py-spy raw: thread (0x..);func (file:line);... N
  --dialect flamegraph  plain FlameGraph: func;func;... N
Used by the import tests to get captures the way those tools shape them.
"""
import argparse
import collections
import json
import os
import sys
import threading
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def parse_text(k):
    out = []
    for i in range(k):
        out.append(json.loads(json.dumps({"i": i, "v": [i] * 5})))
    return out


def busy(stop):
    while not stop.is_set():
        fib(15)
        parse_text(200)


def idle(stop):
    while not stop.is_set():
        time.sleep(0.005)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dialect", choices=["austin", "pyspy", "flamegraph"], required=True)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("-o", required=True)
    a = ap.parse_args()
    stop = threading.Event()
    ths = [threading.Thread(target=busy, args=(stop,), name="busy"),
           threading.Thread(target=idle, args=(stop,), name="idle")]
    for t in ths:
        t.start()
    me = threading.get_ident()
    agg = collections.Counter()
    lines = []
    t0 = time.monotonic()
    last = t0
    while time.monotonic() - t0 < a.duration:
        time.sleep(a.interval_ms / 1000)
        now = time.monotonic()
        dt_us = int((now - last) * 1e6)
        last = now
        for tid, fr in sys._current_frames().items():
            if tid == me:
                continue
            stack = []
            while fr is not None:
                co = fr.f_code
                stack.append((co.co_filename, getattr(co, "co_qualname", co.co_name), fr.f_lineno))
                fr = fr.f_back
            stack.reverse()
            if a.dialect == "austin":
                frames = ";".join("%s:%s:%d" % s for s in stack)
                lines.append("P%d;T0:%x;%s %d" % (os.getpid(), tid, frames, dt_us))
            elif a.dialect == "pyspy":
                frames = ";".join("%s (%s:%d)" % (q, f, l) for f, q, l in stack)
                agg["thread (0x%X);%s" % (tid, frames)] += 1
            else:
                agg[";".join(q for f, q, l in stack)] += 1
    stop.set()
    for t in ths:
        t.join()
    with open(a.o, "w") as f:
        if a.dialect == "austin":
            f.write("# austin: 3.6.0\n# interval: %d\n# mode: wall\n# python: %d.%d.%d\n\n" %
                    (int(a.interval_ms * 1000), *sys.version_info[:3]))
            f.write("\n".join(lines) + "\n")
            f.write("\n# duration: %d\n" % int(a.duration * 1e6))
        else:
            for k, v in agg.items():
                f.write("%s %d\n" % (k, v))


if __name__ == "__main__":
    main()
