"""The oracle tasks asyncio_workload.py and asyncio_pyworkload.py share: each
times its own awaits and CPU steps and hands the truth to report(name,
**shares). Each await the tests check is on a line tagged '# AWAIT-X'
(asyncio_helpers.tagged_lines reads the tags of this file too). Imported
after the workload has chosen its asyncio (asyncio_pyworkload.py may block
the C accelerator first)."""
import asyncio
import time

pc = time.perf_counter


def burn(s):
    t = pc()
    while pc() - t < s:
        pass
    return pc() - t


async def alt(q, need, end, report):
    t_start, a, b = pc(), 0.0, 0.0
    while pc() < end:
        t0 = pc()
        await asyncio.sleep(0.03)  # AWAIT-A
        t1 = pc()
        need.set()
        await q.get()  # AWAIT-B
        t2 = pc()
        a += t1 - t0
        b += t2 - t1
    life = pc() - t_start
    report("alt", life=life, A=a / life, B=b / life)


async def producer(q, need, end):
    while pc() < end + 0.1:
        await need.wait()
        need.clear()
        await asyncio.sleep(0.015)
        q.put_nowait(1)
