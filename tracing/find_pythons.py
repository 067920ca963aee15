"""Configure-time discovery of the CPython interpreters to build the tracer for.

Prints one line per distinct extension suffix:
SUFFIX<TAB>INCLUDE_DIR<TAB>VERSION<TAB>PATH<TAB>EXTRA_INCLUDE_DIR (may be empty);
lines starting with '#' are notes for meson to show.
Looks at $BIFOCAL_PYTHONS (colon list), pyenv's versions and /usr/bin, /usr/local/bin
python3.X; keeps CPython >= 3.8 with Python.h installed, GIL builds only.
Also the Debian sid root's python3.X ($BIFOCAL_SID_ROOT, default
/var/lib/bifocal/sid-root, built by .ci/sid-root; BIFOCAL_SID=0 skips it): asked
through `chroot ROOT`, built against ROOT's headers. Debian's pyconfig.h includes
<MULTIARCH/python3.X/pyconfig.h>; with the first argument (a build directory),
that one directory is made visible there as a symlink (OUT/sid-include/...), so
nothing else of the root's /usr/include (its libc) is on the include path.
"""
import glob
import os
import subprocess
import sys

PROBE = ("import sys,sysconfig;"
         "print(sys.implementation.name);"
         "print('%d.%d.%d' % sys.version_info[:3]);"
         "print(sysconfig.get_config_var('EXT_SUFFIX') or '');"
         "print(sysconfig.get_paths()['include']);"
         "print(int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))));"
         "print(sysconfig.get_config_var('MULTIARCH') or '')")

SID_ROOT = os.environ.get("BIFOCAL_SID_ROOT", "/var/lib/bifocal/sid-root")
SID_BIN = os.environ.get("BIFOCAL_SID_BIN", os.path.join(os.path.dirname(SID_ROOT), "bin"))


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


def probe(argv):
    """The PROBE's lines from running argv, or None."""
    try:
        r = subprocess.run(argv + ["-c", PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = r.stdout.splitlines()
    if r.returncode != 0 or len(lines) < 6 or lines[0] != "cpython":
        return None
    return lines


def usable(lines, inc_dir):
    ver, suffix, ft = lines[1], lines[2], lines[4]
    major, minor = (int(x) for x in ver.split(".")[:2])
    return ((major, minor) >= (3, 8) and ft != "1" and suffix
            and os.path.exists(os.path.join(inc_dir, "Python.h")))


def sid_pythons(out_dir, seen_suffix):
    """Lines for the sid root's interpreters (see the module doc)."""
    if os.environ.get("BIFOCAL_SID", "1") == "0" or not os.path.isdir(SID_ROOT):
        return
    exes = sorted(glob.glob(os.path.join(SID_ROOT, "usr", "bin", "python3.*")))
    for exe in exes:
        base = os.path.basename(exe)
        if not base.replace("python3.", "").isdigit():
            continue
        inside = "/usr/bin/" + base
        lines = probe(["chroot", SID_ROOT, inside])
        wrapper = os.path.join(SID_BIN, base)
        if lines is None and os.access(wrapper, os.X_OK):
            lines = probe([wrapper])
        if lines is None:
            print("# tracer: cannot run %s in %s (chroot needs root): not built for it"
                  % (inside, SID_ROOT))
            continue
        ver, suffix, inc, multiarch = lines[1], lines[2], lines[3], lines[5]
        host_inc = os.path.join(SID_ROOT, inc.lstrip("/"))
        if not usable(lines, host_inc) or suffix in seen_suffix:
            continue
        extra = ""
        conf = os.path.join(SID_ROOT, "usr", "include", multiarch, os.path.basename(inc))
        if multiarch and os.path.isfile(os.path.join(conf, "pyconfig.h")):
            if not out_dir:
                print("# tracer: %s needs a build directory for its multiarch pyconfig.h" % inside)
                continue
            extra = os.path.join(os.path.abspath(out_dir), "sid-include")
            link = os.path.join(extra, multiarch, os.path.basename(inc))
            os.makedirs(os.path.dirname(link), exist_ok=True)
            if os.path.islink(link) and os.readlink(link) != conf:
                os.unlink(link)
            if not os.path.lexists(link):
                os.symlink(conf, link)
        seen_suffix.add(suffix)
        print("\t".join((suffix, host_inc, ver, wrapper if os.access(wrapper, os.X_OK) else exe, extra)))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else ""
    seen_real, seen_suffix = set(), set()
    for exe in candidates():
        rp = os.path.realpath(exe)
        if rp in seen_real:
            continue
        seen_real.add(rp)
        lines = probe([exe])
        if lines is None or not usable(lines, lines[3]) or lines[2] in seen_suffix:
            continue
        seen_suffix.add(lines[2])
        print("\t".join((lines[2], lines[3], lines[1], exe, "")))
    sid_pythons(out_dir, seen_suffix)


if __name__ == "__main__":
    main()
