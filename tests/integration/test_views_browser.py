"""The HTML views in headless Chromium (Debian's, driven over the DevTools
pipe by tests/tools/cdp.py): frames render, no script errors, no network,
a click zooms, search sums matches, the thread filter and icicle toggle work.
Set BIFOCAL_SCREENSHOTS=DIR to keep PNG screenshots (README pictures)."""
import json
import os
import sys

import pytest

from conftest import ROOT, run, last_line_id
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


# ---- the first screen (issue #28): root in view at 1400×900, outlined diff frames

def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG, as
    Chromium writes it (no PIL here: zlib and the five row filters)."""
    import struct
    import zlib
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6) and body[12] == 0, "unexpected PNG layout"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def deep_collapsed(path, work, other):
    """Most samples in two shallow stacks; 0.3% in a 200-deep import chain
    that alone sets the chart's height (3,400 px at 17 px a row)."""
    chain = ";".join("_find_and_load (<frozen importlib._bootstrap>:%d)" % (1000 + i) for i in range(200))
    with open(path, "w") as f:
        f.write("main (app.py:1);work (app.py:5) %d\n" % work)
        f.write("main (app.py:1);stable (app.py:9) 500\n")
        f.write("main (app.py:1);other (app.py:7) %d\n" % other)
        f.write("<module> (app.py:1);%s 3\n" % chain)


ROOT_BOX = """(() => {
  const e = Array.from(document.querySelectorAll('#chart .f')).find(e => e.dataset.name === 'all');
  const r = e.getBoundingClientRect(), hd = document.querySelector('header').getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, x: r.x + r.width / 2, y: r.y + r.height / 2,
          header: hd.bottom, vh: window.innerHeight, chart: document.getElementById('chart').clientHeight};
})()"""


@pytest.fixture(scope="module")
def deep_pages(tmp_path_factory):
    d = tmp_path_factory.mktemp("deep")
    db = str(d / "deep.db")
    ids = []
    for name, work, other in (("a", 500, 0), ("b", 300, 200)):
        deep_collapsed(str(d / (name + ".txt")), work, other)
        ids.append(last_line_id(run(["import", str(d / (name + ".txt"))], db=db)))
    flame, diffp = str(d / "flame.html"), str(d / "diff.html")
    run(["replay", str(ids[0]), "--view", "flame", "-o", flame], db=db)
    run(["diff", str(ids[0]), str(ids[1]), "--view", "flame", "-o", diffp], db=db)
    return {"flame": flame, "diff": diffp}


@pytest.fixture(scope="module")
def wide_browser():
    require_tool(cdp.chromium_path() or "chromium", "chromium")
    with cdp.Browser(width=1400, height=900) as b:
        yield b


@pytest.mark.parametrize("which", ["flame", "diff"])
def test_root_on_the_first_screen(deep_pages, wide_browser, which, tmp_path):
    """At 1400×900 the root row is on the first screen, below the header,
    though a 0.3%-wide 200-deep stack makes the chart 3,400 px tall; the
    screenshot of the viewport shows the root's grey at its centre."""
    page = wide_browser.open("file://" + deep_pages[which])
    assert page.errors() == [] and page.eval("window.__bfErrors") == []
    box = page.eval(ROOT_BOX)
    assert box["chart"] > 3000, "the deep stack should set the chart's height"
    assert box["header"] <= box["top"] and box["bottom"] <= box["vh"], box
    shot = os.path.join(shots_dir(tmp_path), "first-screen-%s.png" % which)
    page.screenshot(shot, full_page=False)
    w, h, px = png_pixels(shot)
    assert (w, h) == (1400, 900)
    grey = 232 if which == "flame" else 235  # #e8e8e8; diff: unchanged rgb(235,235,235)
    r, g, b = px[int(box["y"])][int(box["x"])]
    assert abs(r - grey) <= 3 and abs(g - grey) <= 3 and abs(b - grey) <= 3, (r, g, b)
    # a wide frame just above the root (main) is there too
    main = frame_box(page, "main")
    assert main is not None and box["header"] <= main["top"] < box["vh"]


def test_diff_frames_keep_their_outline(deep_pages, wide_browser, tmp_path):
    """An unchanged frame of the differential graph (grey, near the page's
    white) has a visible edge: its border pixels are dark against the page."""
    page = wide_browser.open("file://" + deep_pages["diff"])
    e = page.eval("""(() => { const e = Array.from(document.querySelectorAll('#chart .f'))
        .find(e => e.dataset.name === 'stable'); e.scrollIntoView({block: 'center'});
        const r = e.getBoundingClientRect();
        return {x: r.x + r.width / 2, top: r.top, bg: getComputedStyle(e).backgroundColor}; })()""")
    assert e["bg"] == "rgb(235, 235, 235)", e  # unchanged: 500 of 1003 samples in both
    shot = str(tmp_path / "outline.png")
    page.screenshot(shot, full_page=False)
    _, _, px = png_pixels(shot)
    import math
    # its top border (the darkest of the first rows: it may straddle two);
    # above it, the page (it has no callee)
    edge = min((px[y][int(e["x"])] for y in range(math.floor(e["top"]), math.floor(e["top"]) + 3)), key=max)
    above = px[math.floor(e["top"]) - 2][int(e["x"])]
    assert above == (255, 255, 255), above
    assert max(edge) < 200, "the frame's top edge %r is lost against the white page" % (edge,)
