"""`bifocal diff`: share changes with a two-proportion test, refusal of
incomparable sessions, differential flame graph."""
import json

import pytest

from conftest import run
from views_helpers import make_db


@pytest.fixture(scope="module")
def vdb(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("diff") / "d.db")
    return path, make_db(path)


def test_diff_finds_the_shift(vdb):
    db, s = vdb
    d = json.loads(run(["diff", str(s["wall"]), str(s["shifted"]), "--json"], db=db).stdout)
    assert d["comparable"] is True
    f = {r["qualname"]: r for r in d["functions"]}
    # generator: json.loads 22.5% → 10% of main-thread samples, fib 27.5% → 45%
    assert f["fib"]["self_delta_pp"] > 3 and f["fib"]["significant"] is True
    assert f["json.loads"]["self_delta_pp"] < -2 and f["json.loads"]["p_value"] < 0.001
    for r in d["functions"]:
        assert abs(r["self_delta_pp"]) >= 0.5 or abs(r["total_delta_pp"]) >= 0.5
    # a session against itself: no change, nothing significant
    d2 = json.loads(run(["diff", str(s["wall"]), str(s["wall"]), "--json", "--threshold", "0"], db=db).stdout)
    assert all(r["self_delta_pp"] == 0 and r["significant"] is False for r in d2["functions"])


def test_diff_threshold_and_terminal(vdb):
    db, s = vdb
    r = run(["diff", str(s["wall"]), str(s["shifted"]), "--threshold", "3"], db=db)
    assert "fib" in r.stdout and "***" in r.stdout and "render_page" not in r.stdout
    for line in r.stdout.splitlines():
        assert len(line) <= 80, line
    assert "\x1b[" not in r.stdout


@pytest.mark.parametrize("other,why", [("cpu", "clock differs (wall vs cpu)"),
                                       ("wall_500hz", "rate differs (1000 Hz vs 500 Hz)"),
                                       ("traced", "kind differs (sampled vs traced)")])
def test_diff_refuses_incomparable_sessions(vdb, other, why):
    db, s = vdb
    r = run(["diff", str(s["wall"]), str(s[other])], db=db, check=False)
    assert r.returncode == 1 and why in r.stderr and "--force" in r.stderr
    r = run(["diff", str(s["wall"]), str(s[other]), "--force"], db=db)
    assert why in r.stderr and r.stdout


def test_diff_flame(vdb, tmp_path):
    db, s = vdb
    out = tmp_path / "d.html"
    run(["diff", str(s["wall"]), str(s["shifted"]), "--view", "flame", "-o", str(out)], db=db)
    html = out.read_text()
    assert '"mode":"diff"' in html and "red = share grew" in html


def test_diff_labels_resolve(vdb):
    db, s = vdb
    d = json.loads(run(["diff", "before", "after", "--json"], db=db).stdout)
    assert d["a"]["id"] == s["wall"] and d["b"]["id"] == s["shifted"]
