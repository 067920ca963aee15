"""Habits of py-spy, austin and Tachyon users (issue 28): their command lines,
typed as they are, either do what the peer does or fail with one line naming
the peer's meaning and bifocal's spelling. The SVG flame graph (py-spy's
`-o profile.svg`) is checked against the collapsed export and in Chromium;
views that write pages or have no JSON say so."""
import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, bifocal_bin, run, last_line_id
from views_helpers import make_db, require_tool

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import cdp  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
SVG_INNER_W = 1180.0  # 1200 px less 10 px padding each side

# Frames with bytes an SVG must not carry raw: ESC and BEL, markup, invalid UTF-8.
NASTY = (b"main;a<b>&c;\x1b[31mred\x07 30\n"
         b"main;bad\xff\xfeutf 20\n"
         b"main;a<b>&c 10\n"
         b"other 5\n")


@pytest.fixture(scope="module")
def hdb(tmp_path_factory):
    d = tmp_path_factory.mktemp("habits")
    path = str(d / "h.db")
    s = make_db(path)
    nasty = d / "nasty.txt"
    nasty.write_bytes(NASTY)
    s["nasty"] = last_line_id(run(["import", str(nasty)], db=path))
    return path, s


def collapsed_tree(db, sid):
    """{(path of functions): value} from the collapsed export, each frame's
    call line dropped (the SVG merges a function's lines like the flame page)."""
    out = subprocess.run([bifocal_bin(), "--db", db, "export", str(sid), "-f", "collapsed", "-o", "-"],
                         capture_output=True, check=True).stdout.decode("utf-8", "replace")
    tree = {(): 0.0}
    for line in out.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [re.sub(r"(:\d+):\d+\)$", r"\1)", f) for f in stack.split(";")]
        tree[()] += float(n)
        for i in range(1, len(frames) + 1):
            tree[tuple(frames[:i])] = tree.get(tuple(frames[:i]), 0.0) + float(n)
    return tree


def svg_frames(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    out = []
    for g in root.iter(SVG + "g"):
        if g.get("class") != "f":
            continue
        rects = g.findall(SVG + "rect")
        assert len(rects) == 1, "one rect per frame"
        out.append((g.get("data-name"), float(rects[0].get("width")), float(rects[0].get("y")),
                    g.find(SVG + "title").text))
    return out


@pytest.mark.parametrize("how", ["replay", "export", "export-flamegraph"])
def test_svg_matches_collapsed(hdb, tmp_path, how):
    db, s = hdb
    sid = s["wall"]
    out = str(tmp_path / "profile.svg")
    if how == "replay":
        run(["replay", str(sid), "-o", out], db=db)
    elif how == "export":
        run(["export", str(sid), "-f", "svg", "-o", out], db=db)
    else:
        run(["export", str(sid), "-f", "flamegraph", "-o", out], db=db)
    frames = svg_frames(out)
    tree = collapsed_tree(db, sid)
    total = tree[()]
    want = sorted(round(v * SVG_INNER_W / total, 1) for v in tree.values() if v * SVG_INNER_W / total >= 0.1)
    got = sorted(round(w, 1) for _, w, _, _ in frames)
    assert len(got) == len(want)
    assert all(abs(a - b) <= 0.11 for a, b in zip(got, want)), (got[-10:], want[-10:])
    root = [f for f in frames if f[0] == "all"]
    assert len(root) == 1 and abs(root[0][1] - SVG_INNER_W) < 0.01
    # the title says samples, share and the 95% interval; the root is 100%
    assert re.search(r"\(\d+ samples, 100\.00%, 95% [\d.]+–100\.00%\)", root[0][3])
    # root at the bottom: every other frame above it
    assert all(y < root[0][2] for n, _, y, _ in frames if n != "all")


def test_svg_escapes_untrusted_names(hdb, tmp_path):
    db, s = hdb
    out = tmp_path / "n.svg"
    run(["replay", str(s["nasty"]), "-o", str(out)], db=db)
    raw = out.read_bytes()
    raw.decode("utf-8")  # valid UTF-8 throughout
    assert b"\x1b" not in raw and b"\x07" not in raw and b"a<b>" not in raw
    names = {n for n, _, _, _ in svg_frames(str(out))}
    assert "a<b>&c" in names and "\ufffd[31mred\ufffd" in names and "bad\ufffd\ufffdutf" in names
    widths = {n: w for n, w, _, _ in svg_frames(str(out))}
    assert abs(widths["a<b>&c"] - 40 / 65 * SVG_INNER_W) < 0.01


def test_record_svg(tmp_path, python):
    """py-spy's `record -o profile.svg -- python app.py` writes the SVG."""
    out = tmp_path / "profile.svg"
    db = str(tmp_path / "r.db")
    code = "import time\nt=time.time()\nwhile time.time()-t<0.6: sum(range(1000))\n"
    run(["record", "-o", str(out), "--", python, "-c", code], db=db)
    frames = svg_frames(str(out))
    assert frames and frames[0][0] == "all" and len(frames) >= 2


@pytest.fixture(scope="module")
def browser():
    require_tool(cdp.chromium_path() or "chromium", "chromium")
    with cdp.Browser(width=1400, height=900) as b:
        yield b


def test_svg_in_chromium(hdb, browser, tmp_path):
    db, s = hdb
    out = tmp_path / "c.svg"
    run(["replay", str(s["nasty"]), "-o", str(out)], db=db)
    page = browser.open("file://" + str(out))
    assert page.errors() == []
    assert page.requests() == ["file://" + str(out)], "the SVG fetched something"
    assert page.eval("document.querySelectorAll('g.f').length") == 6
    # search: the two a<b>&c frames are nested, so they match 40 of 65 samples once
    page.eval("search('a<b')")
    assert page.eval("document.getElementById('matched').textContent") == "Matched: %.1f%%" % (40 / 65 * 100)
    # click-to-zoom on a<b>&c: it fills the width, `other` is hidden
    page.eval("zoom(Array.from(document.querySelectorAll('g.f')).find(g => g.dataset.name === 'a<b>&c'))")
    w = page.eval("Array.from(document.querySelectorAll('g.f')).find(g => g.dataset.name === 'a<b>&c')"
                  ".querySelector('rect').getAttribute('width')")
    assert abs(float(w) - SVG_INNER_W) < 0.01
    assert page.eval("Array.from(document.querySelectorAll('g.f')).find(g => g.dataset.name === 'other')"
                     ".style.display") == "none"
    assert page.errors() == []
    png = tmp_path / "c.png"
    page.screenshot(str(png), full_page=False)
    assert png.stat().st_size > 1000


def test_svg_as_image(hdb, tmp_path):
    """`chromium --headless --screenshot` of the SVG (as an image, no JS needed)."""
    db, s = hdb
    chromium = cdp.chromium_path()
    if not chromium:
        pytest.skip("chromium not installed (.ci/setup installs it)")
    out = tmp_path / "i.svg"
    run(["replay", str(s["wall"]), "-o", str(out)], db=db)
    assert len(svg_frames(str(out))) > 5
    png = tmp_path / "i.png"
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--screenshot=" + str(png),
                        "--window-size=1200,600", "file://" + str(out)], capture_output=True, text=True,
                       timeout=120)
    assert png.exists() and png.stat().st_size > 1000, r.stderr[-2000:]


# ---- the peers' command lines ------------------------------------------------
# (peer, what the user types after `bifocal`, outcome). The same table is in
# docs/commands.md. Outcome: ("same", bifocal's own spelling) — the session has
# the same clock, mode and rate, and the file the same format — or ("error",
# a pattern the one stderr line must match; no database is left behind).
# PY = a Python workload command; OUT = the output file.
PEER_LINES = [
    ("py-spy", "record -o OUT.svg -- PY", ("same", "record -f svg -o OUT.svg -- PY")),
    ("py-spy", "record -f flamegraph -o OUT.svg -- PY", ("same", "record -f svg -o OUT.svg -- PY")),
    ("py-spy", "record -r 200 -d 0.4 -o OUT.txt -- PY", ("same", "record --rate 200 -d 0.4 -o OUT.txt -- PY")),
    ("py-spy", "record -s -o OUT.txt -- PY", ("same", "record --subprocesses -o OUT.txt -- PY")),
    ("py-spy", "record --threads -o OUT.txt -- PY", ("error", r"py-spy's --threads")),
    ("py-spy", "record -t -o OUT.txt -- PY", ("error", r"py-spy's --threads")),
    ("py-spy", "record --nolineno -o OUT.txt -- PY", ("error", r"--nolineno: .*drop it")),
    ("py-spy", "record -F -o OUT.txt -- PY", ("error", r"py-spy's --function")),
    ("py-spy", "record --function -o OUT.txt -- PY", ("error", r"py-spy's --function")),
    ("austin", "record -i 1000 -o OUT.txt PY", ("error", r"austin's .*-i is the sampling interval .*-r 1000\)")),
    ("austin", "record -i 250 -- PY", ("error", r"interval \(250 µs\).*-r 4000")),
    ("austin", "record -s -o OUT.txt PY", ("error", r"austin's -s is sleepless .*--clock cpu")),
    ("austin", "record -s -C -- PY", ("error", r"austin's -s is sleepless")),
    ("austin", "record -C -- PY", ("error", r"austin's children flag is bifocal's -s/--subprocesses")),
    ("austin", "record -x 1 -- PY", ("error", r"austin's exposure time is bifocal's -d/--duration")),
    ("austin", "record -g -C -- PY", ("error", r"austin's -g is --gc")),
    ("austin", "record -s PY -s", ("error", r"austin's -s is sleepless")),
    ("austin", "record -m -o OUT.txt PY", ("same", "record --memory -o OUT.txt -- PY")),
    ("py-spy", "record -o OUT.txt PY -i 1000 -s", ("same", "record -o OUT.txt -- PY -i 1000 -s")),
    ("Tachyon", "record -a -r 10khz -d 0.4 -o OUT.txt -- PY", ("same", "record -r 10000 -d 0.4 -o OUT.txt -- PY")),
    ("Tachyon", "record --mode cpu -o OUT.txt -- PY", ("same", "record --clock cpu -o OUT.txt -- PY")),
    ("Tachyon", "record --mode wall -o OUT.txt -- PY", ("same", "record --clock wall -o OUT.txt -- PY")),
    ("Tachyon", "record --mode gil -o OUT.txt -- PY", ("same", "record --gil -o OUT.txt -- PY")),
    ("Tachyon", "record --mode exception -o OUT.txt -- PY", ("same", "record --exceptions -o OUT.txt -- PY")),
    ("Tachyon", "record --opcodes -o OUT.txt -- PY", ("same", "record --opcodes -o OUT.txt -- PY")),
    ("Tachyon", "record --collapsed -o OUT -- PY", ("same", "record -f collapsed -o OUT -- PY")),
    ("Tachyon", "record --pstats -o OUT -- PY", ("same", "record -f pstats -o OUT -- PY")),
    ("Tachyon", "record --flamegraph -o OUT.html -- PY", ("same", "record -f flame -o OUT.html -- PY")),
    ("Tachyon", "record --heatmap -o OUT.html -- PY", ("error", r"record writes no heatmap file")),
    ("Tachyon", "run app.py", ("error", r"'app.py' is Python: bifocal run runs Lua checks")),
    ("austin", "top -i 1000 -p 1", ("error", r"austin's .*-i is the sampling interval .*-r 1000\)")),
]

def test_peer_table_is_the_one_in_the_docs():
    """docs/commands.md shows the table this file types, row for row."""
    doc = open(os.path.join(ROOT, "docs", "commands.md"), encoding="utf-8").read()
    rows = set(re.findall(r"^\| (py-spy|austin|Tachyon) \| `([^`]+)` \|", doc, re.M))
    assert rows == {(p, l) for p, l, _ in PEER_LINES}


# the work runs inside an exception handler, so that the --mode exception
# lines have samples in both runs (outside one, whether a run kept any came
# down to an exception handled during start-up: an empty file in one run,
# collapsed lines in the other, seen in CI)
WORK = ("import time\nt=time.time()\nwhile time.time()-t<0.5:\n try: raise ValueError\n"
        " except ValueError: sum(range(2000))\n")


def typed(line, py, out):
    args = []
    for w in line.split():
        if w == "PY":
            args += py
        else:
            args.append(w.replace("OUT", out))
    return args


def only_session(db):
    r = run(["sessions", "--json"], db=db)
    rows = json.loads(r.stdout)
    assert len(rows) == 1, rows
    return rows[0]


def file_kind(path):
    data = open(path, "rb").read()
    if data.startswith(b"<?xml"):
        return "svg"
    if data.lstrip().lower().startswith(b"<!doctype html"):
        return "html"
    if data[:1] in (b"{", b"\xfb") or b"marshal" in data[:0]:
        return "binary-or-json"
    if re.match(rb"^\S.* \d+\n", data):
        return "collapsed"
    return "other:%r" % data[:8]


@pytest.mark.parametrize("peer,line,outcome", PEER_LINES, ids=["%s: %s" % (p, l) for p, l, _ in PEER_LINES])
def test_peer_command_lines(tmp_path, peer, line, outcome):
    py = [sys.executable, "-c", WORK]
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def go(l, tag):
        db = str(tmp_path / (tag + ".db"))
        out = str(tmp_path / tag)
        e = dict(os.environ)
        e.pop("BIFOCAL_DB", None)
        r = subprocess.run([bifocal_bin(), "--db", db] + typed(l, py, out), capture_output=True, text=True,
                           timeout=120, cwd=str(cwd), env=e)
        return r, db, out

    kind, want = outcome
    if kind == "error":
        # typed without --db too: nothing may appear in the working directory
        e = dict(os.environ)
        e.pop("BIFOCAL_DB", None)
        r = subprocess.run([bifocal_bin()] + typed(line, py, str(tmp_path / "o")), capture_output=True,
                           text=True, timeout=120, cwd=str(cwd), env=e)
        assert r.returncode == 2, (r.returncode, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and re.search(want, lines[0]), r.stderr
        assert os.listdir(str(cwd)) == [], "left files behind: %s" % os.listdir(str(cwd))
        return
    r1, db1, out1 = go(line, "peer")
    assert r1.returncode == 0, r1.stderr
    r2, db2, out2 = go(want, "own")
    assert r2.returncode == 0, r2.stderr
    s1, s2 = only_session(db1), only_session(db2)
    for k in ("clock", "mode", "rate_hz", "kind"):
        assert s1[k] == s2[k], (k, s1[k], s2[k])
    files = [f for f in os.listdir(str(tmp_path)) if f.startswith(("peer", "own")) and not f.endswith(
        (".db", "-wal", "-shm"))]
    p1 = [f for f in files if f.startswith("peer")]
    p2 = [f for f in files if f.startswith("own")]
    assert len(p1) == 1 and len(p2) == 1, files
    assert file_kind(str(tmp_path / p1[0])) == file_kind(str(tmp_path / p2[0]))


def test_austin_interval_leaves_no_database(tmp_path):
    """austin's `-i 1000 -o FILE CMD`: on main it ran the command '1000' and left ./bifocal.db."""
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    r = subprocess.run([bifocal_bin(), "record", "-i", "1000", "-o", "x.txt", sys.executable, "-c", "pass"],
                       capture_output=True, text=True, cwd=str(tmp_path), env=e, timeout=60)
    assert r.returncode == 2 and "-r 1000" in r.stderr
    assert os.listdir(str(tmp_path)) == []


def test_tachyon_attach(tmp_path, python):
    """Tachyon's `attach [opts] PID` is record -p PID."""
    db = str(tmp_path / "a.db")
    p = subprocess.Popen([python, "-c", "import time\nt=time.time()\nwhile time.time()-t<8: sum(range(500))\n"])
    try:
        import time
        time.sleep(0.5)
        run(["attach", "-a", "-r", "500hz", "-d", "0.5", str(p.pid)], db=db)
        s = only_session(db)
        assert s["pid"] == p.pid and s["rate_hz"] == 500 and s["samples"] > 50
    finally:
        p.kill()
        p.wait()


# ---- Gecko (Firefox Profiler) ---------------------------------------------------
# The loader's rules for the Gecko format (firefox-devtools/profiler,
# src/types/gecko-profile.ts and src/profile-logic/process-profile.js): the
# fields it reads, the column schemas, and indices that stay in their tables.
GECKO_FRAME_SCHEMA = {"location": 0, "relevantForJS": 1, "innerWindowID": 2, "implementation": 3, "line": 4,
                      "column": 5, "category": 6, "subcategory": 7}


def check_gecko(p):
    meta = p["meta"]
    for k in ("version", "startTime", "interval", "categories", "markerSchema", "stackwalk", "debug",
              "processType"):
        assert k in meta, k
    assert isinstance(meta["version"], int) and 27 <= meta["version"] <= 31
    assert meta["interval"] > 0 and meta["startTime"] > 1.5e12  # ms since the epoch
    for c in meta["categories"]:
        assert isinstance(c["name"], str) and isinstance(c["color"], str) and c["subcategories"]
    for k in ("libs", "threads", "pausedRanges", "processes"):
        assert isinstance(p[k], list), k
    for t in p["threads"]:
        for k in ("name", "registerTime", "processType", "unregisterTime", "tid", "pid", "markers", "samples",
                  "frameTable", "stackTable", "stringTable"):
            assert k in t, k
        assert t["markers"]["schema"] == {"name": 0, "startTime": 1, "endTime": 2, "phase": 3, "category": 4,
                                          "data": 5}
        assert t["samples"]["schema"] == {"stack": 0, "time": 1, "eventDelay": 2}
        assert t["frameTable"]["schema"] == GECKO_FRAME_SCHEMA
        assert t["stackTable"]["schema"] == {"prefix": 0, "frame": 1}
        strings, frames, stacks = t["stringTable"], t["frameTable"]["data"], t["stackTable"]["data"]
        assert all(isinstance(x, str) for x in strings)
        for f in frames:
            assert len(f) == 8 and 0 <= f[0] < len(strings) and isinstance(f[1], bool)
            assert 0 <= f[6] < len(meta["categories"]) and 0 <= f[7] < len(meta["categories"][f[6]]["subcategories"])
        for i, (prefix, frame) in enumerate(stacks):
            assert prefix is None or 0 <= prefix < i  # a prefix comes before its stack
            assert 0 <= frame < len(frames)
        last = -1
        for stack, time_ms, _ in t["samples"]["data"]:
            assert stack is None or 0 <= stack < len(stacks)
            assert time_ms >= last
            last = time_ms


def gecko_self(t):
    """{function location: self samples} of one thread."""
    strings, frames, stacks = t["stringTable"], t["frameTable"]["data"], t["stackTable"]["data"]
    out = {}
    for stack, _, _ in t["samples"]["data"]:
        name = strings[frames[stacks[stack][1]][0]]
        out[name] = out.get(name, 0) + 1
    return out


def test_gecko_export(tmp_path, python):
    db = str(tmp_path / "g.db")
    code = ("import threading, time\n"
            "def spin(s):\n  t = time.time()\n  while time.time() - t < s: sum(range(300))\n"
            "def side():\n  spin(0.8)\n"
            "th = threading.Thread(target=side); th.start(); spin(0.8); th.join()\n")
    out = tmp_path / "p.json"
    # Tachyon's spelling on record; then export -f gecko of the same session
    run(["record", "--gecko", "-o", str(out), "--", python, "-c", code], db=db)
    p = json.load(open(out))
    check_gecko(p)
    sid = only_session(db)["id"]
    run(["export", str(sid), "-f", "gecko", "-o", str(tmp_path / "e.json")], db=db)
    assert json.load(open(tmp_path / "e.json")) == p
    # every sample kept, per thread, and the leaf functions as the functions view counts them
    fj = json.loads(run(["replay", str(sid), "--json", "--limit", "1000"], db=db).stdout)
    assert sum(len(t["samples"]["data"]) for t in p["threads"]) == fj["total_samples"]
    selfs = {}
    for t in p["threads"]:
        for k, v in gecko_self(t).items():
            selfs[k] = selfs.get(k, 0) + v
    spin = [f for f in fj["functions"] if f["qualname"] == "spin"][0]
    got = [v for k, v in selfs.items() if k.startswith("spin (")]
    assert got == [spin["self_samples"]]
    assert len(p["threads"]) >= 2


def test_gecko_refuses_traced(tmp_path):
    db = str(tmp_path / "t.db")
    run(["trace", "--", sys.executable, "-c", "sum(range(10))"], db=db)
    sid = only_session(db)["id"]
    r = run(["export", str(sid), "-f", "gecko", "-o", str(tmp_path / "x.json")], db=db, check=False)
    assert r.returncode == 1 and "needs a sampled session" in r.stderr


# ---- views ---------------------------------------------------------------------

@pytest.mark.parametrize("view", ["gil", "functions", "stack"])
def test_text_view_into_html_is_html(hdb, tmp_path, view):
    db, s = hdb
    out = tmp_path / (view + ".html")
    run(["replay", str(s["wall"]), "--view", view, "-o", str(out)], db=db)
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<pre>" in text and "\x1b" not in text
    plain = run(["replay", str(s["wall"]), "--view", view], db=db).stdout
    body = text.split("<pre>\n", 1)[1].rsplit("</pre>", 1)[0]
    import html as H
    assert H.unescape(body) == plain


def test_flame_json_refused(hdb):
    db, s = hdb
    r = run(["replay", str(s["wall"]), "--view", "flame", "--json"], db=db, check=False)
    assert r.returncode == 2 and r.stdout == "" and "no JSON form" in r.stderr


@pytest.mark.parametrize("cmd", ["replay", "diff"])
def test_page_view_on_a_terminal_asks_for_o(hdb, cmd):
    """On a terminal a page view says so and asks for -o; piped, the page is
    written (replay --view flame and diff --view flame alike)."""
    db, s = hdb
    args = (["replay", str(s["wall"])] if cmd == "replay" else ["diff", str(s["wall"]), str(s["shifted"])])
    args += ["--view", "flame"]
    master, slave = pty.openpty()
    p = subprocess.Popen([bifocal_bin(), "--db", db] + args, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    err = p.communicate(timeout=60)[1].decode()
    out = b""
    try:
        while True:
            chunk = os.read(master, 65536)
            if not chunk:
                break
            out += chunk
    except OSError:
        pass
    os.close(master)
    assert p.returncode == 2 and "give -o FILE.html" in err and len(out) < 200
    piped = run(args, db=db).stdout
    assert piped.lstrip().lower().startswith("<!doctype html")


def test_svg_only_for_flame(hdb, tmp_path):
    db, s = hdb
    r = run(["replay", str(s["wall"]), "--view", "gil", "-o", str(tmp_path / "g.svg")], db=db, check=False)
    assert r.returncode == 2 and "only the flame view is drawn as SVG" in r.stderr


# ---- pprof names ---------------------------------------------------------------

def pb_fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(wt)
        yield f, v


def varint(buf, i):
    r = s = 0
    while True:
        b = buf[i]
        i += 1
        r |= (b & 0x7F) << s
        s += 7
        if not b & 0x80:
            return r, i


def pprof_names(path):
    import gzip
    data = gzip.decompress(open(path, "rb").read())
    strings, funcs = [], []
    for f, v in pb_fields(data):
        if f == 6:
            strings.append(v.decode())
        elif f == 5:
            funcs.append(dict(pb_fields(v)))
    return {strings[fn[4]]: strings[fn[2]] for fn in funcs if 4 in fn}


def test_pprof_names_stable_by_path(tmp_path):
    db = str(tmp_path / "p.db")
    a = "main (/srv/app.py:1:2);work (/srv/b/util.py:3:4) 10\nmain (/srv/app.py:1:2);work (/srv/a/util.py:10:11) 5\n"
    b = "main (/srv/app.py:1:2);work (/srv/a/util.py:10:11) 5\nmain (/srv/app.py:1:2);work (/srv/b/util.py:3:4) 10\n"
    names = []
    for i, text in enumerate((a, b, b, a)):
        f = tmp_path / ("%d.txt" % i)
        f.write_text(text)
        sid = last_line_id(run(["import", str(f)], db=db))
        out = tmp_path / ("%d.pb.gz" % i)
        run(["export", str(sid), "-f", "pprof", "-o", str(out)], db=db)
        names.append(pprof_names(str(out)))
    for n in names:
        assert n["/srv/a/util.py"] == "util.work" and n["/srv/b/util.py"] == "util.work:3", n
