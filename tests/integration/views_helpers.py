"""Shared set-up of the views/exports tests: a database with one session of
each kind, made by tests/tools/gen_sessions (store API) and `bifocal import`."""
import json
import os
import shutil
import subprocess

from conftest import ROOT, run, last_line_id

GEN = os.path.join(ROOT, "build", "tests", "tools", "gen_sessions")

COLLAPSED = """\
main (app.py:1);handle (app.py:10);parse (parse.py:5) 30
main (app.py:1);handle (app.py:10);compute (compute.py:3) 50
main (app.py:1);handle (app.py:10);compute (compute.py:3);helper (compute.py:30) 7
main (app.py:1);idle (app.py:20) 20
"""


def gen(db, *args):
    if not os.access(GEN, os.X_OK):
        raise AssertionError("generator not built at %s (meson compile -C build)" % GEN)
    r = subprocess.run([GEN, db] + list(args), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def make_db(path):
    """Sessions: wall (3 threads), cpu, traced, imported, wall with load shifted."""
    s = {}
    s["wall"] = gen(path, "sampled", "--samples", "30000", "--label", "before")
    s["cpu"] = gen(path, "sampled", "--clock", "cpu", "--samples", "30000")
    s["traced"] = gen(path, "traced")
    coll = path + ".collapsed.txt"
    with open(coll, "w") as f:
        f.write(COLLAPSED)
    s["imported"] = last_line_id(run(["import", coll], db=path))
    s["shifted"] = gen(path, "sampled", "--samples", "30000", "--shift", "--seed", "7", "--label", "after")
    s["wall_500hz"] = gen(path, "sampled", "--samples", "3000", "--rate", "500")
    return s


def functions_json(db, sid):
    return json.loads(run(["replay", str(sid), "--view", "functions", "--json", "--limit", "1000"], db=db).stdout)


def require_tool(name, package):
    """Path of an external consumer; CI installs it (.ci/setup), so missing is a
    failure there and a skip on a developer machine."""
    import pytest
    p = shutil.which(name)
    if p:
        return p
    if os.environ.get("CI"):
        pytest.fail("%s not found: CI must install Debian's %s (.ci/setup PKGS)" % (name, package))
    pytest.skip("%s not installed (apt-get install %s)" % (name, package))
