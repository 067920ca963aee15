"""tracer_kinds.py — the six kinds of call the tracer benches measure, one
loop each, shared by bench_tracer.py (fresh processes and --warm) and
bench_tracer_instr.py (callgrind): Python function f(), builtin len(x), type
call str(i), class instantiation P() (Python __init__), method p.m(),
generator next(g). Each k_X(n, clock) makes n calls and returns clock()'s
difference around the loop alone (set-up outside it). Imported by the
benches' child processes (the bench folder put on sys.path), so it stays
plain Python 3.8+ with no imports.
"""


def f():
    return 1


class P:
    def __init__(self):
        self.a = 1

    def m(self):
        return 1


def gen():
    i = 0
    while True:
        yield i
        i += 1


def k_func(n, clock):
    t = clock()
    for i in range(n):
        f()
    return clock() - t


def k_builtin(n, clock):
    x = [1, 2, 3]
    t = clock()
    for i in range(n):
        len(x)
    return clock() - t


def k_type(n, clock):
    t = clock()
    for i in range(n):
        str(i)
    return clock() - t


def k_class(n, clock):
    t = clock()
    for i in range(n):
        P()
    return clock() - t


def k_method(n, clock):
    p = P()
    t = clock()
    for i in range(n):
        p.m()
    return clock() - t


def k_gen(n, clock):
    g = gen()
    t = clock()
    for i in range(n):
        next(g)
    return clock() - t


# (name, loop), in the order the benches print them
KINDS = [("func", k_func), ("builtin", k_builtin), ("type", k_type), ("class", k_class),
         ("method", k_method), ("gen", k_gen)]
