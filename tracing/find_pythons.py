"""Configure-time discovery of the CPython interpreters to build the tracer for.

Prints one line per distinct extension suffix: SUFFIX<TAB>INCLUDE_DIR<TAB>VERSION<TAB>PATH.
Looks at $BIFOCAL_PYTHONS (colon list), pyenv's versions and /usr/bin, /usr/local/bin
python3.X; keeps CPython >= 3.8 with Python.h installed, GIL builds only.
"""
import glob
import os
import subprocess

PROBE = ("import sys,sysconfig;"
         "print(sys.implementation.name);"
         "print('%d.%d.%d' % sys.version_info[:3]);"
         "print(sysconfig.get_config_var('EXT_SUFFIX') or '');"
         "print(sysconfig.get_paths()['include']);"
         "print(int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))")


def candidates():
    out = [p for p in os.environ.get("BIFOCAL_PYTHONS", "").split(":") if p]
    roots = []
    if os.environ.get("PYENV_ROOT"):
        roots.append(os.environ["PYENV_ROOT"])
    try:
        r = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            roots.append(r.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    roots.append(os.path.expanduser("~/.pyenv"))
    for root in dict.fromkeys(roots):
        for exe in sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python3.*"))):
            out.append(exe)
    for d in ("/usr/bin", "/usr/local/bin"):
        out += sorted(glob.glob(os.path.join(d, "python3.*")))
    return [p for p in out if not p.endswith("-config") and os.access(p, os.X_OK)
            and os.path.basename(p).replace("python3.", "").replace("t", "").isdigit()]


def main():
    seen_real, seen_suffix = set(), set()
    for exe in candidates():
        rp = os.path.realpath(exe)
        if rp in seen_real:
            continue
        seen_real.add(rp)
        try:
            r = subprocess.run([exe, "-c", PROBE], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        lines = r.stdout.splitlines()
        if r.returncode != 0 or len(lines) < 5 or lines[0] != "cpython":
            continue
        impl, ver, suffix, inc, ft = lines[:5]
        major, minor = (int(x) for x in ver.split(".")[:2])
        if (major, minor) < (3, 8) or ft == "1" or not suffix:
            continue
        if not os.path.exists(os.path.join(inc, "Python.h")) or suffix in seen_suffix:
            continue
        seen_suffix.add(suffix)
        print("\t".join((suffix, inc, ver, exe)))


if __name__ == "__main__":
    main()
