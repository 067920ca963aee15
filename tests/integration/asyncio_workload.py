"""asyncio oracle workload for test_asyncio_tasks.py: tasks that time their own
awaits and CPU steps, two event loops (main thread and one more), and a
spawner of thousands of short tasks (alt and producer are asyncio_common.py's,
shared with asyncio_pyworkload.py). Writes the measured truth as JSON to
argv[1]; runs about argv[2] seconds (with $BIFOCAL_WORKLOAD_PROGRESS set, each
burner also prints its CPU so far every ten steps). Each await the test checks is on a line
tagged '# AWAIT-X' (the test finds the line numbers from this file and
asyncio_common.py)."""
import asyncio
import json
import os
import selectors
import socket
import sys
import threading
import time

from asyncio_common import alt, burn, pc, producer

DUR = float(sys.argv[2])
PROGRESS = bool(os.environ.get("BIFOCAL_WORKLOAD_PROGRESS"))  # "P name monotonic cpu" lines on stdout
truth = {"tasks": {}, "loops": {}}
lock = threading.Lock()


class TimedSelector(selectors.DefaultSelector):
    """The loop's selector, timing its waits: the I/O-wait truth."""

    def __init__(self):
        super().__init__()
        self.wait = 0.0

    def select(self, timeout=None):
        t = pc()
        try:
            return super().select(timeout)
        finally:
            self.wait += pc() - t


def record(name, **kw):
    with lock:
        truth["tasks"][name] = kw


async def recv_one(loop, sock):
    return await loop.sock_recv(sock, 1)  # AWAIT-C


async def pipe_task(loop, sock, end):
    t_start, c = pc(), 0.0
    while pc() < end:
        t0 = pc()
        await recv_one(loop, sock)
        c += pc() - t0
    life = pc() - t_start
    record("pipe", life=life, C=c / life)


async def writer(sock, end):
    while pc() < end + 0.1:
        await asyncio.sleep(0.025)
        sock.send(b"x")


async def burner(name, cpu_s, sleep_s, end, stats):
    t_start, cpu, d, n = pc(), 0.0, 0.0, 0
    while pc() < end:
        cpu += burn(cpu_s)
        t0 = pc()
        await asyncio.sleep(sleep_s)  # AWAIT-D
        d += pc() - t0
        n += 1
        if PROGRESS and n % 10 == 0:  # for windows of a run (bench_asyncio_tachyon.py)
            print("P", name, time.monotonic(), cpu, flush=True)
    life = pc() - t_start
    stats["cpu"] += cpu
    record(name, life=life, running=cpu / life, D=d / life)


async def short():
    await asyncio.sleep(0)


async def spawner(end, stats):
    while pc() < end:
        await asyncio.gather(*[short() for _ in range(200)])
        stats["short"] += 200
        await asyncio.sleep(0.05)


def run_loop(label, main):
    sel = TimedSelector()
    loop = asyncio.SelectorEventLoop(sel)
    asyncio.set_event_loop(loop)
    stats = {"cpu": 0.0, "short": 0}
    t = pc()
    loop.run_until_complete(main(loop, stats))
    wall = pc() - t
    loop.close()
    with lock:
        truth["loops"][label] = {"wall": wall, "io": sel.wait / wall, "task_code": stats["cpu"] / wall,
                                 "short_tasks": stats["short"]}


async def main_a(loop, stats):
    end = pc() + DUR
    q, need = asyncio.Queue(), asyncio.Event()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    helpers = [loop.create_task(producer(q, need, end), name="producer"),
               loop.create_task(writer(b, end), name="writer")]
    ts = [loop.create_task(alt(q, need, end, record), name="alt"), loop.create_task(pipe_task(loop, a, end), name="pipe"),
          loop.create_task(burner("burner", 0.004, 0.008, end, stats), name="burner"),
          loop.create_task(spawner(end, stats), name="spawner")]
    await asyncio.gather(*ts)
    for h in helpers:
        h.cancel()
    await asyncio.gather(*helpers, return_exceptions=True)


async def main_b(loop, stats):
    end = pc() + DUR
    await asyncio.gather(loop.create_task(burner("b-burner", 0.002, 0.010, end, stats), name="b-burner"),
                         loop.create_task(asyncio.sleep(DUR), name="b-sleeper"))


other = threading.Thread(target=run_loop, args=("b-loop", main_b), name="b-loop")
other.start()
run_loop("main", main_a)
other.join()
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
