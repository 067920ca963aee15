"""The HTML views in headless Chromium (Debian's, driven over the DevTools
pipe by tests/tools/cdp.py): frames render, no script errors, no network,
a click zooms, search sums matches, the thread filter and icicle toggle work.
Set BIFOCAL_SCREENSHOTS=DIR to keep PNG screenshots (README pictures)."""
import json
import os
import sys

import pytest

from conftest import ROOT, run
from views_helpers import make_db, functions_json, require_tool

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import cdp  # noqa: E402


@pytest.fixture(scope="module")
def vdb(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("browser") / "b.db")
    return path, make_db(path)


@pytest.fixture(scope="module")
def browser():
    require_tool(cdp.chromium_path() or "chromium", "chromium")
    with cdp.Browser(width=1280, height=720) as b:
        yield b


def shots_dir(tmp_path):
    d = os.environ.get("BIFOCAL_SCREENSHOTS")
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    return str(tmp_path)


FRAME_BOX = """(() => {
  const e = Array.from(document.querySelectorAll('#chart .f')).find(e => e.dataset.name === %s);
  if (!e) return null;
  const r = e.getBoundingClientRect();
  return {x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width, top: r.top};
})()"""


def frame_box(page, name):
    return page.eval(FRAME_BOX % json.dumps(name))


def test_flame_renders_zooms_searches(vdb, browser, tmp_path):
    db, s = vdb
    html = tmp_path / "flame.html"
    run(["replay", str(s["wall"]), "--view", "flame", "-o", str(html)], db=db)
    page = browser.open("file://" + str(html))
    assert page.errors() == [] and page.eval("window.__bfErrors") == []
    assert page.requests() == ["file://" + str(html)], "the page fetched something"
    st = page.eval("window.bfFlame")
    assert st["rendered"] >= 10 and st["zoom"] == "all"
    chart_w = page.eval("document.getElementById('chart').clientWidth")
    # hover shows samples, share, interval and file:line
    box = frame_box(page, "fib")
    page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box["x"], "y": box["y"]})
    tip = page.eval("document.getElementById('tip').textContent")
    assert "samples" in tip and "95% CI" in tip and "/srv/app/compute.py:40" in tip
    page.screenshot(os.path.join(shots_dir(tmp_path), "flame.png"))
    # a real click on `compute` zooms: it then spans the chart
    box = frame_box(page, "compute")
    assert box["w"] < chart_w * 0.6
    page.click(box["x"], box["y"])
    assert page.eval("window.bfFlame.zoom") == "compute"
    assert abs(frame_box(page, "compute")["w"] - chart_w) < 2
    assert frame_box(page, "json.loads") is None  # outside the zoomed subtree
    page.click(*[frame_box(page, "all")[k] for k in ("x", "y")])
    assert page.eval("window.bfFlame.zoom") == "all"
    # search highlights and sums matches (not counting nested matches twice)
    page.eval("document.getElementById('search').focus()")
    page.type_text("^fib$")
    fib = [f for f in functions_json(db, s["wall"])["functions"] if f["qualname"] == "fib"][0]
    assert abs(page.eval("window.bfFlame.matchShare") - fib["total_share"]) < 1e-9
    assert page.eval("document.querySelectorAll('#chart .f.m').length") >= 3
    assert "matched" in page.eval("document.getElementById('match').textContent")
    # thread filter: only the main thread's frames remain
    page.eval("""(() => { const s = document.getElementById('thread'); s.value = '0';
                 s.dispatchEvent(new Event('change')); })()""")
    assert frame_box(page, "worker_loop") is None and frame_box(page, "Server.serve") is not None
    # icicle toggle puts the root on top
    root_top_flame = frame_box(page, "all")["top"]
    page.eval("document.getElementById('invert').click()")
    assert frame_box(page, "all")["top"] < root_top_flame
    assert page.errors() == [] and page.eval("window.__bfErrors") == []


def test_traced_and_diff_flame_and_heatmap_pages(vdb, browser, tmp_path):
    db, s = vdb
    pages = {
        "traced.html": ["replay", str(s["traced"]), "--view", "flame"],
        "diff-flame.html": ["diff", str(s["wall"]), str(s["shifted"]), "--view", "flame"],
        "heatmap.html": ["replay", str(s["wall"]), "--view", "heatmap", "--limit", "8"],
    }
    for name, args in pages.items():
        out = tmp_path / name
        run(args + ["-o", str(out)], db=db)
        page = browser.open("file://" + str(out))
        assert page.errors() == [], (name, page.errors())
        assert page.requests() == ["file://" + str(out)]
        if name == "heatmap.html":
            assert page.eval("document.querySelectorAll('td.c').length") == 8 * 60
        else:
            assert page.eval("window.__bfErrors") == [] and page.eval("window.bfFlame.rendered") >= 5
        page.screenshot(os.path.join(shots_dir(tmp_path), name.replace(".html", ".png")))
    # the differential graph colours fib (grew) red and json.loads (shrank) blue
    page = browser.open("file://" + str(tmp_path / "diff-flame.html"))
    colour = """(() => { const e = Array.from(document.querySelectorAll('#chart .f')).find(e => e.dataset.name === %s);
                 return getComputedStyle(e).backgroundColor; })()"""
    r, g, b = [int(x) for x in page.eval(colour % '"fib"')[4:-1].split(",")]
    assert r == 255 and g < 250
    r, g, b = [int(x) for x in page.eval(colour % '"json.loads"')[4:-1].split(",")]
    assert b == 255 and r < 250
