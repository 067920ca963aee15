"""probe_asyncio_offsets.py — measure, inside one interpreter, the offsets
sampling/tasks/tasks.c vendors for it: where the C _asyncio Task keeps its loop,
state, waiter, coroutine and name; where a coroutine keeps its frame; where a
suspended frame keeps its value stack (the awaited object is on top). Found
by looking for known pointers in the objects' own memory (ctypes), so the
table can be checked against the running interpreter, not only the sources.
Prints one JSON object. Never run inside a profiled target."""
import asyncio, ctypes, json, sys

P = 8


def mem(addr, n):
    return ctypes.string_at(addr, n)


def ptrs(buf):
    return [int.from_bytes(buf[i:i + P], "little") for i in range(0, len(buf) - P + 1, P)]


def find(buf, val, last=False):
    hits = [i * P for i, v in enumerate(ptrs(buf)) if v == val]
    if not hits:
        return -1
    return hits[-1] if last else hits[0]


out = {"minor": sys.version_info[1]}


async def inner(fut):
    await fut


async def outer(fut):
    await inner(fut)


async def main():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    t = loop.create_task(outer(fut), name="probe-task") if sys.version_info >= (3, 8) else None
    await asyncio.sleep(0)
    tb = mem(id(t), type(t).__basicsize__)
    out["task_size"] = type(t).__basicsize__
    out["fut_loop"] = find(tb, id(loop))
    out["task_coro"] = find(tb, id(t.get_coro()))
    out["task_name"] = find(tb, id(t.get_name()))
    out["task_fut_waiter"] = find(tb, id(fut))
    f2 = loop.create_future()
    b1 = mem(id(f2), type(f2).__basicsize__)
    f2.set_result(None)
    b2 = mem(id(f2), type(f2).__basicsize__)
    out["fut_state"] = next(i for i in range(0, len(b1) - 3, 4)
                            if int.from_bytes(b1[i:i + 4], "little") == 0
                            and int.from_bytes(b2[i:i + 4], "little") == 2)
    c = t.get_coro()
    aw = c.cr_await  # the inner coroutine
    fi = aw.cr_await  # FutureIter
    out["futiter_future"] = find(mem(id(fi), type(fi).__basicsize__), id(fut))
    out["futiter_type"] = type(fi).__module__ + "." + type(fi).__name__ if hasattr(type(fi), "__module__") else ""
    cb = mem(id(c), type(c).__basicsize__ + 96)
    if sys.version_info < (3, 11):
        fr = c.cr_frame
        out["cr_frame"] = find(cb, id(fr))
        fsz = sys.getsizeof(fr)
        fb = mem(id(fr), 128)
        lo, hi = id(fr), id(fr) + fsz
        if sys.version_info < (3, 10):
            out["f_stacktop"] = next(o for o, v in zip(range(0, 128, 8), ptrs(fb))
                                     if lo < v <= hi and int.from_bytes(mem(v - 8, 8), "little") == id(aw))
        else:
            vs = next(o for o, v in zip(range(0, 128, 8), ptrs(fb))
                      if lo < v < hi and find(mem(v, hi - v), id(aw)) >= 0)
            base = ptrs(fb)[vs // 8]
            depth = find(mem(base, hi - base), id(aw)) // 8 + 1
            out["f_valuestack"] = vs
            out["f_stackdepth"] = next(o for o in range(0, 124, 4)
                                       if int.from_bytes(fb[o:o + 4], "little") == depth and o != vs and o != vs + 4)
    else:
        fr_code = {11: 32}.get(sys.version_info[1], 0)
        out["cr_iframe"] = find(cb, id(c.cr_code), last=True) - fr_code
        fb = mem(id(c) + out["cr_iframe"], 80)
        stacktop = int.from_bytes(fb[64:68], "little")
        top = int.from_bytes(mem(id(c) + out["cr_iframe"] + 72 + (stacktop - 1) * 8, 8), "little")
        out["stacktop_ok"] = top == id(aw)
        out["frame_state_byte"] = ctypes.c_int8.from_address(id(c) + out["cr_iframe"] - 5).value
        n = inner(fut)
        out["frame_state_created"] = ctypes.c_int8.from_address(id(n) + out["cr_iframe"] - 5).value
        n.close()
    fut.set_result(None)
    await t


asyncio.run(main())
print(json.dumps(out))
