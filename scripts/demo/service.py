"""bifocal's demo workload: a small request-handling service.

Worker threads take requests from a queue; each request is parsed (json),
validated, has its fields checksummed by a short hot function called many
times per request, is rendered, and waits on a fake database (sleep). An
asyncio part runs a heartbeat and a cache refresher beside them.

  python3 service.py [--seconds S | --requests N] [--workers W] [--slow-checksum]

--slow-checksum makes the hot path ~3x costlier: the regression the demo's
gate must catch.
"""
import argparse
import asyncio
import json
import queue
import random
import threading
import time

SLOW = False


def make_request(i):
    return json.dumps({"id": i, "user": "u%d" % (i % 97),
                       "items": [{"sku": "s%d" % k, "qty": k % 5 + 1, "price": 3.5 + k} for k in range(24)]})


def parse(raw):
    return json.loads(raw)


def checksum(item):
    # The short hot path: tiny, called many times per request.
    h = 0
    for ch in item["sku"]:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    if SLOW:
        for ch in item["sku"] * 3:
            h = (h * 33 + ord(ch)) & 0xFFFFFFFF
    return h ^ item["qty"]


def validate(req):
    total = 0
    for item in req["items"]:
        if item["qty"] <= 0:
            raise ValueError("bad qty")
        total += checksum(item)
    return total


def render(req, total):
    lines = ["order %s for %s" % (req["id"], req["user"])]
    for item in req["items"]:
        lines.append("%-6s x%d @ %.2f" % (item["sku"], item["qty"], item["price"]))
    lines.append("checksum %08x" % total)
    return "\n".join(lines)


def fake_db_wait():
    time.sleep(0.0005)


def handle(raw):
    req = parse(raw)
    total = 0
    for _ in range(4):
        total ^= validate(req)
    out = render(req, total)
    fake_db_wait()
    return len(out)


def worker(q, done):
    while True:
        raw = q.get()
        if raw is None:
            q.task_done()
            return
        handle(raw)
        done.append(1)
        q.task_done()


async def heartbeat(stop):
    beats = 0
    while not stop.is_set():
        await asyncio.sleep(0.01)
        beats += sum(i * i for i in range(200))
    return beats


async def refresh_cache(stop):
    cache = {}
    while not stop.is_set():
        await asyncio.sleep(0.02)
        for k in range(50):
            cache["k%d" % k] = json.dumps({"k": k, "t": time.time()})
    return len(cache)


def event_loop_thread(stop):
    async def main():
        await asyncio.gather(heartbeat(stop), refresh_cache(stop))
    asyncio.run(main())


def main():
    global SLOW
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--slow-checksum", action="store_true")
    a = ap.parse_args()
    SLOW = a.slow_checksum
    if not a.seconds and not a.requests:
        a.seconds = 4
    random.seed(1)
    stop = threading.Event()
    loop_t = threading.Thread(target=event_loop_thread, args=(stop,), name="asyncio-loop")
    loop_t.start()
    q = queue.Queue(maxsize=64)
    done = []
    ws = [threading.Thread(target=worker, args=(q, done), name="worker-%d" % i) for i in range(a.workers)]
    for w in ws:
        w.start()
    t0 = time.monotonic()
    i = 0
    while True:
        if a.requests and i >= a.requests:
            break
        if a.seconds and time.monotonic() - t0 >= a.seconds:
            break
        q.put(make_request(i))
        i += 1
    for _ in ws:
        q.put(None)
    for w in ws:
        w.join()
    stop.set()
    loop_t.join()
    el = time.monotonic() - t0
    print("served %d requests in %.2f s (%.0f req/s)" % (len(done), el, len(done) / el))


if __name__ == "__main__":
    main()
