"""Test sessions for the Lua/REPL/correlate tests, written by bf_mksession
(tests/tools) or imported from collapsed stacks."""
import os
import subprocess

from conftest import bifocal_bin, run

STORY = """\
session sampled clock=wall rate=1000 duration=2 label=base profiler_cpu_ms=20
stack 900 main@app.py:1;handle@app.py:10;parse@app.py:20
stack 600 main@app.py:1;handle@app.py:10;render@app.py:30
stack 300 main@app.py:1;handle@app.py:10
stack 200 main@app.py:1;handle@app.py:10;parse@app.py:20;tokenize@app.py:40
session traced label=repro
func main@app.py:1 calls=1 self_ms=10 total_ms=3000
func handle@app.py:10 calls=100 self_ms=400 total_ms=2990
func parse@app.py:20 calls=300 prim=300 self_ms=1300 total_ms=1600
func tokenize@app.py:40 calls=300 self_ms=300 total_ms=300
func render@app.py:30 calls=100 self_ms=950 total_ms=950
func tiny@app.py:50 calls=100000 self_ms=40 total_ms=40
edge - main@app.py:1 calls=1 self_ms=10 total_ms=3000
edge main@app.py:1 handle@app.py:10 calls=100 self_ms=400 total_ms=2990
edge handle@app.py:10 parse@app.py:20 calls=300 self_ms=1300 total_ms=1600
edge handle@app.py:10 render@app.py:30 calls=100 self_ms=950 total_ms=950
edge parse@app.py:20 tokenize@app.py:40 calls=300 self_ms=300 total_ms=300
edge handle@app.py:10 tiny@app.py:50 calls=100000 self_ms=40 total_ms=40
record parse@app.py:20 start_ms=0 dur_ms=15
record parse@app.py:20 start_ms=20 dur_ms=17
record render@app.py:30 start_ms=40 dur_ms=9
session sampled clock=wall rate=1000 duration=2 label=regressed profiler_cpu_ms=20
stack 1500 main@app.py:1;handle@app.py:10;parse@app.py:20
stack 300 main@app.py:1;handle@app.py:10;render@app.py:30
stack 200 main@app.py:1;handle@app.py:10
session sampled clock=wall rate=250 duration=2 label=slowrate profiler_cpu_ms=5
stack 225 main@app.py:1;handle@app.py:10;parse@app.py:20
stack 275 main@app.py:1;handle@app.py:10;render@app.py:30
session sampled clock=wall rate=1000 duration=2 label=costly profiler_cpu_ms=200
stack 900 main@app.py:1;handle@app.py:10;parse@app.py:20
stack 600 main@app.py:1;handle@app.py:10;render@app.py:30
stack 300 main@app.py:1;handle@app.py:10
stack 200 main@app.py:1;handle@app.py:10;parse@app.py:20;tokenize@app.py:40
"""
# ids in order: 1 base, 2 repro, 3 regressed, 4 slowrate, 5 costly


def mksession_bin():
    return os.path.join(os.path.dirname(bifocal_bin()), "tests", "tools", "bf_mksession")


def make_story(db):
    r = subprocess.run([mksession_bin(), db], input=STORY, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def collapsed(path, lines):
    with open(path, "w") as f:
        for stack, n in lines:
            f.write("%s %d\n" % (stack, n))
    return path


def import_pair(db, tmp_path, base_parse, cand_parse, other=1000):
    """Two imported sessions; parse has base_parse then cand_parse samples."""
    a = collapsed(str(tmp_path / "a.txt"), [("main;handle;parse", base_parse), ("main;handle;render", other)])
    b = collapsed(str(tmp_path / "b.txt"), [("main;handle;parse", cand_parse), ("main;handle;render", other)])
    ia = int(run(["import", a, "--label", "imp-base"], db=db).stdout.split()[-1])
    ib = int(run(["import", b, "--label", "imp-cand"], db=db).stdout.split()[-1])
    return ia, ib
