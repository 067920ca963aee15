"""Request-shaped asyncio workload for awaits.lua's end-to-end test: N
request tasks (handle), a few at a time; each awaits fetch() 3 times (a 40 ms
sleep, AWAIT-F) and then flush() once (a 20 ms sleep, AWAIT-G). Every await
is timed; the measured truth goes to argv[1] as JSON. argv[2]: requests.
Lines tagged '# AWAIT-X' are found by the test."""
import asyncio
import json
import sys
import time

pc = time.perf_counter
waits = {"F": [], "G": []}


async def fetch():
    t = pc()
    await asyncio.sleep(0.04)  # AWAIT-F
    waits["F"].append(pc() - t)


async def flush():
    t = pc()
    await asyncio.sleep(0.02)  # AWAIT-G
    waits["G"].append(pc() - t)


async def handle(i):
    for _ in range(3):
        await fetch()  # AWAIT-H
    await flush()


async def main(n):
    sem = asyncio.Semaphore(4)

    async def one(i):
        async with sem:
            await asyncio.create_task(handle(i), name="req-%d" % i)

    await asyncio.gather(*(one(i) for i in range(n)))


asyncio.run(main(int(sys.argv[2])))
with open(sys.argv[1], "w") as f:
    json.dump({"requests": int(sys.argv[2]), "F": sum(waits["F"]) / len(waits["F"]), "nF": len(waits["F"]),
               "G": sum(waits["G"]) / len(waits["G"]), "nG": len(waits["G"])}, f)
