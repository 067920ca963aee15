"""README's main command: `bifocal demo` tells the whole story and ends well."""
import os
import sqlite3

from conftest import run


def test_demo(tmp_path):
    out = tmp_path / "demo"
    r = run(["demo", "--seconds", "2", "--dir", str(out)], timeout=300, env={"NO_COLOR": "1"})
    text = r.stdout
    assert "demo complete" in text and "did not behave" not in text
    for step in ("record --clock cpu", "record --clock wall", "trace --label demo-trace",
                 "run correlate.lua", "run gate.lua", "--view flame"):
        assert step in text, step
    assert "The gate passed the build against itself and failed the build" in text
    for f in ("flame.html", "heatmap.html", "diff.html", "demo.db"):
        p = out / f
        assert p.exists() and p.stat().st_size > 1000, f
        assert (p.stat().st_mode & 0o077) == 0, f
    db = sqlite3.connect(str(out / "demo.db"))
    kinds = sorted(k for (k,) in db.execute("select kind from sessions"))
    assert kinds == ["sampled", "sampled", "sampled", "traced"]
    assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
    db.close()


def test_demo_bad_args():
    r = run(["demo", "--seconds", "0"], check=False)
    assert r.returncode == 2 and "--seconds" in r.stderr
