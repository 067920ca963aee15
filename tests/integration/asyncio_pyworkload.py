"""Pure-Python-task oracle workload for test_asyncio_pytasks.py: every task,
the main one too, is asyncio's pure-Python Task (asyncio.tasks._PyTask,
through loop.set_task_factory); with argv[3] == "noaccel" the C accelerator
is blocked before asyncio is imported, so asyncio.Task and Future are the
pure-Python classes themselves. Tasks time their own awaits and CPU steps
(alt and producer are asyncio_common.py's, as in asyncio_workload.py); the
truth goes as JSON to argv[1]; runs about argv[2] seconds. Each await the
test checks is on a line tagged '# AWAIT-X'."""
import sys

if len(sys.argv) > 3 and sys.argv[3] == "noaccel":
    sys.modules["_asyncio"] = None  # import _asyncio now fails: no C Task/Future
import asyncio  # noqa: E402
import asyncio.tasks  # noqa: E402
import json  # noqa: E402

from asyncio_common import alt, burn, pc, producer  # noqa: E402

DUR = float(sys.argv[2])
truth = {"tasks": {}, "pure": asyncio.Task is asyncio.tasks._PyTask}


def record(name, **kw):
    truth["tasks"][name] = kw


async def burner(end):
    t_start, cpu, d = pc(), 0.0, 0.0
    while pc() < end:
        cpu += burn(0.004)
        t0 = pc()
        await asyncio.sleep(0.008)  # AWAIT-D
        d += pc() - t0
    life = pc() - t_start
    truth["tasks"]["burner"] = {"life": life, "running": cpu / life, "D": d / life}


async def inner(end):
    t_start, e = pc(), 0.0
    while pc() < end:
        t0 = pc()
        await asyncio.sleep(0.02)  # AWAIT-E
        e += pc() - t0
    return t_start, e


async def middle(end):
    return await inner(end)


async def outer(end):
    t_start, e = await middle(end)
    life = pc() - t_start
    truth["tasks"]["deep"] = {"life": life, "E": e / life}


async def short():
    burn(0.0004)


async def spawner(end):
    # keeps the loop busy between the timed tasks' steps with thousands of
    # short tasks (each born, run and finished: a finished pure-Python Task
    # adds _state and _result to its class's shared keys): the process then
    # wants a CPU all the time, whichever task runs, so on a loaded host the
    # sampler's missed ticks do not fall more on one task's steps than on
    # another's waits
    n = 0
    try:
        while pc() < end + 0.1:
            await asyncio.get_running_loop().create_task(short(), name="short-%d" % (n % 64))
            n += 1
    finally:
        truth["short_tasks"] = n


async def main():
    loop = asyncio.get_running_loop()
    end = pc() + DUR
    q, need = asyncio.Queue(), asyncio.Event()
    helpers = [loop.create_task(producer(q, need, end), name="producer"),
               loop.create_task(spawner(end), name="spawner")]
    ts = [loop.create_task(alt(q, need, end, record), name="alt"), loop.create_task(burner(end), name="burner"),
          loop.create_task(outer(end), name="deep")]
    truth["task_types"] = sorted({"%s.%s" % (type(t).__module__, type(t).__qualname__) for t in ts})
    await asyncio.gather(*ts)
    for h in helpers:
        h.cancel()
    await asyncio.gather(*helpers, return_exceptions=True)


loop = asyncio.new_event_loop()
loop.set_task_factory(lambda loop, coro, **kw: asyncio.tasks._PyTask(coro, loop=loop, **kw))
loop.run_until_complete(main())
loop.close()
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
