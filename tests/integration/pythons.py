"""Discover every CPython interpreter on this machine (never hard-code one).

Looks at pyenv's versions, /usr/bin/python3.X, $BIFOCAL_PYTHONS (colon list) and the
Debian sid root's python3.14/python3.15 (.ci/sid-root: wrappers in
$BIFOCAL_SID_BIN, default /var/lib/bifocal/bin, that run them as a container would;
such an entry has "container": True and "root" set).
Interpreters older than 3.8 are skipped and reported once.
"""
import glob
import os
import subprocess
import sys

MIN = (3, 8)


def _candidates():
    seen = []
    extra = os.environ.get("BIFOCAL_PYTHONS", "")
    for p in extra.split(":"):
        if p:
            seen.append(p)
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    try:
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            root = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    for d in sorted(glob.glob(os.path.join(root, "versions", "*", "bin"))):
        for exe in sorted(glob.glob(os.path.join(d, "python3.*"))):
            if exe.endswith("-config") or not os.access(exe, os.X_OK):
                continue
            seen.append(exe)
    for exe in sorted(glob.glob("/usr/bin/python3.*")) + sorted(glob.glob("/usr/local/bin/python3.*")):
        if exe.endswith("-config") or not os.access(exe, os.X_OK):
            continue
        seen.append(exe)
    if os.environ.get("BIFOCAL_SID", "1") != "0":
        for exe in sorted(glob.glob(os.path.join(SID_BIN, "python3.*"))):
            if os.access(exe, os.X_OK):
                seen.append(exe)
    return seen


SID_ROOT = os.environ.get("BIFOCAL_SID_ROOT", "/var/lib/bifocal/sid-root")
SID_BIN = os.environ.get("BIFOCAL_SID_BIN", os.path.join(os.path.dirname(SID_ROOT), "bin"))


def sid_missing():
    """Why the sid root's 3.14/3.15 are not tested ('' when they are)."""
    if os.environ.get("BIFOCAL_SID", "1") == "0":
        return "BIFOCAL_SID=0"
    if not glob.glob(os.path.join(SID_BIN, "python3.*")):
        return "no sid root (run bash .ci/sid-root)"
    return ""


_CACHE = None


def discover():
    """List of dicts {path, version: (maj, min, micro), tag: '3.12', build} sorted by version.

    One entry per distinct real interpreter file."""
    global _CACHE
    if _CACHE is not None:
        return _CACHE
    found, skipped, real = [], [], set()
    for exe in _candidates():
        try:
            rp = os.path.realpath(exe)
        except OSError:
            continue
        if rp in real:
            continue
        real.add(rp)
        try:
            r = subprocess.run([exe, "-c",
                                "import sys,sysconfig;print(*sys.version_info[:3]);"
                                "print(int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))"],
                               capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode != 0:
            continue
        lines = r.stdout.split()
        ver = tuple(int(x) for x in lines[:3])
        if ver[:2] < MIN:
            skipped.append((exe, ver))
            continue
        container = os.path.dirname(os.path.abspath(exe)) == os.path.abspath(SID_BIN)
        found.append({"path": exe, "version": ver, "tag": "%d.%d" % ver[:2],
                      "free_threaded": lines[3] == "1", "container": container,
                      "root": SID_ROOT if container else "/"})
    found.sort(key=lambda d: (d["version"], d["path"]))
    if skipped:
        sys.stderr.write("pythons: skipped (older than 3.8): %s\n" %
                         ", ".join("%s (%d.%d.%d)" % (p, *v) for p, v in skipped))
    _CACHE = found
    return found


if __name__ == "__main__":
    for d in discover():
        print(d["tag"], d["path"], "free-threaded" if d["free_threaded"] else "",
              "(Debian sid root, run as a container)" if d["container"] else "")
    if sid_missing():
        print("3.14/3.15 not tested:", sid_missing())
