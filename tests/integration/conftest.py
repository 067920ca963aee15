"""Shared fixtures: the bifocal binary, the interpreters present, a scratch DB."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pythons  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def bifocal_bin():
    b = os.environ.get("BIFOCAL_BIN") or os.path.join(ROOT, "build", "bifocal")
    if not os.access(b, os.X_OK):
        pytest.exit("bifocal binary not found at %s (build first or set BIFOCAL_BIN)" % b, 2)
    return b


@pytest.fixture(scope="session")
def bifocal():
    return bifocal_bin()


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "t.db")


def run(args, db=None, check=True, timeout=120, input=None, env=None):
    """Run bifocal with args; returns CompletedProcess (text)."""
    cmd = [bifocal_bin()]
    if db:
        cmd += ["--db", db]
    cmd += list(args)
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    if env:
        e.update(env)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input, env=e)
    if check and r.returncode != 0:
        raise AssertionError("bifocal %s failed (%d):\nstdout:%s\nstderr:%s" %
                             (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def last_line_id(r):
    return int(r.stdout.strip().splitlines()[-1])


def pytest_generate_tests(metafunc):
    if "python" in metafunc.fixturenames:
        ps = pythons.discover()
        metafunc.parametrize("python", [p["path"] for p in ps], ids=[p["tag"] + ":" + os.path.basename(os.path.dirname(os.path.dirname(p["path"]))) for p in ps])
