"""Runs tests/bench/bench_views.py (1,000,000-sample sessions: functions view
≤ 1 s, flame HTML ≤ 3 s and ≤ 5 MB) and opens the largest flame graph in
headless Chromium: it must load without script errors."""
import os
import subprocess
import sys
import time

from conftest import ROOT, bifocal_bin
from views_helpers import require_tool

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import cdp  # noqa: E402


def test_views_benchmark(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "bench_views.py"),
                        "--bin", bifocal_bin(), "--keep", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    require_tool(cdp.chromium_path() or "chromium", "chromium")
    with cdp.Browser() as b:
        t = time.perf_counter()
        page = b.open("file://" + str(tmp_path / "distinct-flame.html"))
        dt = time.perf_counter() - t
        print("flame of 1,000,000 samples / 20,000 distinct stacks: loaded and drawn in %.2f s" % dt)
        assert page.errors() == [] and page.eval("window.__bfErrors") == []
        assert page.eval("window.bfFlame.rendered") > 1000
        assert dt < 20
