"""Views from the CLI on sampled, traced and imported sessions: functions,
flame, heatmap, gil, stack; terminal rules (80 columns, no colour off a TTY
or with NO_COLOR); JSON shapes; clear refusals where a kind has no data."""
import json
import os
import re
import stat

import pytest

from conftest import run
from views_helpers import make_db, functions_json

ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="module")
def vdb(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("views") / "v.db")
    return path, make_db(path)


TERMINAL_VIEWS = ["functions", "heatmap", "gil", "stack"]


@pytest.mark.parametrize("view", TERMINAL_VIEWS)
def test_terminal_views_fit_80_columns_without_colour(vdb, view):
    db, s = vdb
    for env in ({}, {"NO_COLOR": "1"}):
        r = run(["replay", str(s["wall"]), "--view", view], db=db, env=env)
        assert r.stdout.strip()
        assert not ANSI.search(r.stdout), "colour escape off a TTY"
        for line in r.stdout.splitlines():
            # the header repeats session metadata and may wrap; every table row fits
            if line.startswith("session ") and view == "functions":
                continue
            assert len(line) <= 80, "%s view line longer than 80 columns: %r" % (view, line)


def test_functions_on_every_kind(vdb):
    db, s = vdb
    for kind in ("wall", "cpu", "traced", "imported"):
        d = functions_json(db, s[kind])
        assert d["functions"], kind
    t = functions_json(db, s["traced"])
    fib = [f for f in t["functions"] if f["qualname"] == "fib"][0]
    assert fib["calls"] == 1800 and fib["primitive_calls"] == 100
    w = functions_json(db, s["wall"])
    assert w["total_samples"] == 30000
    for f in w["functions"]:
        assert f["self_ci"][0] - 1e-12 <= f["self_share"] <= f["self_ci"][1] + 1e-12


def test_flame_on_every_kind(vdb, tmp_path):
    db, s = vdb
    for kind in ("wall", "cpu", "traced", "imported"):
        out = tmp_path / ("%s.html" % kind)
        run(["replay", str(s[kind]), "--view", "flame", "-o", str(out)], db=db)
        html = out.read_text()
        assert html.startswith("<!doctype html>")
        assert "const BF_DATA = {" in html
        # self-contained: no external resource of any kind
        assert not re.search(r"(src|href)\s*=", html)
        assert "http://" not in html and "https://" not in html
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert "approximate" in (tmp_path / "traced.html").read_text()


def test_flame_thread_and_window_filters(vdb, tmp_path):
    db, s = vdb
    out = tmp_path / "t.html"
    run(["replay", str(s["wall"]), "--view", "flame", "--thread", "MainThread", "--since", "2", "--until", "4",
         "-o", str(out)], db=db)
    data = out.read_text()
    assert "worker_loop" not in data and "Server.serve" in data
    r = run(["replay", str(s["wall"]), "--view", "flame", "--thread", "nope", "-o", str(out)], db=db, check=False)
    assert r.returncode != 0 and "no thread 'nope'" in r.stderr


def test_heatmap_terminal_html_json(vdb, tmp_path):
    db, s = vdb
    r = run(["replay", str(s["wall"]), "--view", "heatmap"], db=db)
    assert "fib" in r.stdout and "json.loads" in r.stdout
    out = tmp_path / "h.html"
    run(["replay", str(s["wall"]), "--view", "heatmap", "-o", str(out)], db=db)
    assert "<table>" in out.read_text() and "fib" in out.read_text()
    d = json.loads(run(["replay", str(s["wall"]), "--view", "heatmap", "--json", "--buckets", "10"], db=db).stdout)
    assert len(d["bucket_samples"]) == 10 and sum(d["bucket_samples"]) == 30000
    # the generator moves load from json.loads to fib over time: the heatmap shows it
    loads = [f for f in d["functions"] if f["qualname"] == "json.loads"][0]["cells"]
    fib = [f for f in d["functions"] if f["qualname"] == "fib"][0]["cells"]
    assert loads[0] > loads[-1] * 1.5 and fib[-1] > fib[0] * 1.2


def test_gil_view(vdb):
    db, s = vdb
    d = json.loads(run(["replay", str(s["wall"]), "--view", "gil", "--json"], db=db).stdout)
    th = {t["name"]: t for t in d["threads"]}
    main = th["MainThread"]
    assert main["samples"] == 10000
    # generator: main thread idle 10-30%, workers idle ~55%
    assert 0.6 < main["gil"] < 0.85 and 0.45 < th["worker-1"]["idle"] < 0.65
    for t in d["threads"]:
        assert abs(t["gil"] + t["waiting"] + t["idle"] - 1) < 1e-9  # the three states partition samples
    assert d["gil_holders"][0]["qualname"] == "fib"
    r = run(["replay", str(s["wall"]), "--view", "gil"], db=db)
    assert "waiting = neither holding the GIL nor idle" in r.stdout


def test_stack_view(vdb):
    db, s = vdb
    d = json.loads(run(["replay", str(s["wall"]), "--view", "stack", "--json", "--limit", "2"], db=db).stdout)
    assert [t["samples"] for t in d["threads"]] == [10000, 10000, 10000]
    w1 = [t for t in d["threads"] if t["thread"].startswith("worker-1")][0]
    assert w1["top"][0]["frames"][0]["qualname"] == "_thread.lock.acquire"  # innermost first
    assert len(w1["top"]) == 2 and w1["last"]["frames"]
    assert abs(w1["last"]["ts_s"] - 9.999) < 1e-6
    r = run(["replay", str(s["imported"]), "--view", "stack"], db=db)
    assert "compute" in r.stdout


@pytest.mark.parametrize("view,kind,msg", [
    ("heatmap", "traced", "is traced"),
    ("heatmap", "imported", "no sample timestamps"),
    ("gil", "traced", "is traced"),
    ("gil", "imported", "no thread states"),
    ("stack", "traced", "is traced"),
])
def test_views_say_when_a_kind_has_no_data(vdb, view, kind, msg, tmp_path):
    db, s = vdb
    out = tmp_path / "x.out"
    r = run(["replay", str(s[kind]), "--view", view, "-o", str(out)], db=db, check=False)
    assert r.returncode == 1
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir()), "nothing written half-way"


def test_unknown_view_and_html_on_terminal(vdb):
    db, s = vdb
    r = run(["replay", str(s["wall"]), "--view", "nope"], db=db, check=False)
    assert r.returncode == 2 and "known: functions, flame, heatmap, gil, stack" in r.stderr
