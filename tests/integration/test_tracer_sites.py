"""Tracer: call sites the collector stops watching stay exact when names are rebound.

On 3.12+ the collector DISABLEs CALL at `name(args)` sites whose global or
builtin `name` is not a builtin function (a Python function, a class), and a
dict watcher re-arms them when such a name is bound again. This program rebinds
call-site names every way Python allows (STORE_GLOBAL, the globals dict,
builtins, a module attribute, shadowing and unshadowing a builtin, rebinding in
a hot loop past the restart limit, keyword and nested calls, one code object
under two globals); every Python and
builtin call count must equal an independent sys.setprofile count of the same
program. On 3.8-3.11 the same comparison checks the setprofile collector.
"""
import json
import sqlite3
import subprocess
import textwrap

from conftest import run, last_line_id
from test_tracer import funcs, session

PROGRAM = """
import builtins, types

def f(x):
    return x
def h(*a, **k):
    return 0
class C:
    def __init__(self, a=0):
        self.a = a

def loop(n):
    s = 0
    for i in range(n):
        s += f(i) + f(f(-i))
        h(i, i + 1)
        C(a=i)
        s += len(str(i)) + conv(i)
    return s

builtins.conv = lambda x: x          # builtins holds a Python function
loop(40)
f = abs                              # STORE_GLOBAL: f() now calls a builtin
loop(5)
globals()["h"] = max                 # through the globals dict
C = dict                             # a class again: still no C frame
loop(6)
builtins.conv = hash                 # builtins rebinds to a builtin
loop(3)
conv = abs                           # a global shadows the builtin
loop(4)
del conv                             # unshadowed
loop(2)
real_len = builtins.len
builtins.len = lambda o: 1           # len() sites call Python
loop(3)
builtins.len = real_len              # and the builtin again
loop(2)

m = types.ModuleType("m")
exec("def p():\\n    return 1\\ndef use(n):\\n    for _ in range(n):\\n        p()\\n", m.__dict__)
m.use(30)
m.p = globals                        # a module attribute rebinds to a builtin
m.use(4)

def caller():
    return helper(-1)
def helper(x):
    return x
for _ in range(5):
    caller()                         # helper() decided under these globals
caller2 = types.FunctionType(caller.__code__, {"helper": abs, "__builtins__": builtins})
for _ in range(3):
    caller2()                        # the same code under other globals calls abs
for _ in range(2):
    caller()

def g2():
    return f(1)
for j in range(150):                 # rebinding in a hot loop: past the restart limit
    f = abs if j % 2 else (lambda x: x)
    g2()
f = abs
loop(3)
del builtins.conv

"""

REF = """
import sys, os, builtins, json
path, out = sys.argv[1], sys.argv[2]
code = compile(open(path).read(), os.path.abspath(path), "exec")
py, c = {}, {}
def prof(frame, event, arg):
    if event == "call":
        co = frame.f_code
        if co.co_filename == code.co_filename or co.co_filename == "<string>":
            k = "%s:%s:%d" % (co.co_filename == "<string>", co.co_name, co.co_firstlineno)
            py[k] = py.get(k, 0) + 1
    elif (event == "c_call" and getattr(arg, "__self__", None) is builtins and
          frame.f_code.co_filename in (code.co_filename, "<string>")):
        k = "builtins." + arg.__name__  # called by the program's own code
        c[k] = c.get(k, 0) + 1
g = {"__name__": "__main__", "__builtins__": builtins}
sys.setprofile(prof)
exec(code, g)
sys.setprofile(None)
json.dump({"py": py, "c": c}, open(out, "w"))
"""


def test_rebound_call_sites_count_exactly(python, db, tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    script, ref = d / "rebind.py", d / "ref.py"
    script.write_text(textwrap.dedent(PROGRAM))
    ref.write_text(textwrap.dedent(REF))
    out = tmp_path / "ref.json"
    subprocess.run([python, str(ref), str(script), str(out)], check=True, timeout=120)
    want = json.loads(out.read_text())
    sid = last_line_id(run(["trace", "--", python, str(script)], db=db, timeout=120))
    fs = funcs(db, sid)
    got_py, got_c = {}, {}
    for (fn, qual, line), row in fs.items():
        if fn in (str(script), "<string>"):
            got_py["%s:%s:%d" % (fn == "<string>", qual.rsplit(".", 1)[-1], line)] = row["calls"]
    con = sqlite3.connect(db)
    for qual, n in con.execute(
            "SELECT e.s, SUM(t.calls) FROM trace_edges t JOIN functions fc ON fc.id = t.caller_id "
            "JOIN strings c ON c.id = fc.file_id JOIN functions fe ON fe.id = t.callee_id "
            "JOIN strings e ON e.id = fe.qualname_id JOIN strings ef ON ef.id = fe.file_id "
            "WHERE t.session_id = ? AND ef.s = '<builtin>' AND c.s IN (?, '<string>') "
            "GROUP BY e.s", (sid, str(script))):
        if qual.startswith("builtins."):
            got_c[qual] = n  # called by the program's own code
    con.close()
    assert got_py == want["py"], "Python calls differ (bifocal, setprofile)"
    # exec is how the reference runs the program; bifocal's runner does not call it
    want_c = {k: v for k, v in want["c"].items() if k != "builtins.exec"}
    assert {k: got_c.get(k) for k in want_c} == want_c, "builtin calls differ from setprofile"
    assert want_c["builtins.abs"] > 100 and want_c["builtins.globals"] >= 4
    assert session(db, sid)["extra"]["mismatches"] == 0
