"""Fleet: sessions as OTLP profiles (export -f otlp, push otlp+http://) and as
pprof to Pyroscope's /ingest (push pyroscope://). The OTLP bytes are decoded by
protoc against the official opentelemetry-proto 1.11.0 .proto files of the sid
root and every sample, location, function, string and attribute is checked
against the session (its database rows, its collapsed export) and against what
the workload itself knows (pid, thread ids and names, exact call counts).
The push tests run a loopback HTTP receiver that checks each request against
the published contract and misbehaves on purpose."""
import collections
import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import run  # noqa: E402

SID_ROOT = os.environ.get("BIFOCAL_SID_ROOT", "/var/lib/bifocal/sid-root")
PROTO_DIR = os.path.join(SID_ROOT, "usr/include")
SERVICE_PROTO = "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto"
REQUEST = "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest"

WORKLOAD = r'''
import os, platform, sys, threading, time, json
def leaf(n):
    s = 0
    for i in range(n):
        s += i
    return s
def mid():
    return leaf(3000)
def worker(out):
    out["worker_tid"] = threading.get_native_id()
    t = time.time()
    while time.time() - t < SECONDS:
        mid()
    for _ in range(MID_CALLS):
        mid()
SECONDS = float(sys.argv[2])
MID_CALLS = 300
out = {"pid": os.getpid(), "main_tid": threading.get_native_id(),
       "version": platform.python_version(), "leaf_line": leaf.__code__.co_firstlineno,
       "mid_line": mid.__code__.co_firstlineno, "file": os.path.abspath(__file__)}
th = threading.Thread(target=worker, args=(out,), name="w\u00f6rker-1")
th.start()
t = time.time()
while time.time() - t < SECONDS:
    leaf(500)
for _ in range(200):
    leaf(500)
th.join()
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
'''
# a traced run with SECONDS = 0 calls mid 300 times and leaf 300 + 200 times


def need_protoc():
    if not os.path.exists(os.path.join(PROTO_DIR, SERVICE_PROTO)):
        pytest.skip("opentelemetry-proto is not in the sid root (%s): run .ci/setup" % PROTO_DIR)
    try:
        subprocess.run(["protoc", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("protoc is missing: apt-get install protobuf-compiler (.ci/setup)")


# ---- protoc's text format, parsed -------------------------------------------

_TOK = re.compile(r'\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*(:)?\s*(\{)?|(\})|"((?:[^"\\]|\\.)*)"|([-+0-9.eE]+|true|false))')


def _unescape(s):
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        n = s[i + 1]
        if n in "01234567":
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8))
            i = j
            continue
        out += {"n": b"\n", "t": b"\t", "r": b"\r", '"': b'"', "'": b"'", "\\": b"\\"}.get(n, n.encode())
        i += 2
    return bytes(out)


def parse_text(text):
    """protoc --decode output → nested dicts of lists (every field repeated)."""
    stack = [collections.defaultdict(list)]
    pos = 0
    key = None
    while pos < len(text):
        m = _TOK.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise AssertionError("cannot parse protoc output at %r" % text[pos:pos + 60])
        pos = m.end()
        ident, colon, brace, close, string, num = m.groups()
        if ident and brace:
            d = collections.defaultdict(list)
            stack[-1][ident].append(d)
            stack.append(d)
        elif ident:
            key = ident
        elif close:
            stack.pop()
        elif string is not None:
            stack[-1][key].append(_unescape(string))
        elif num is not None:
            v = num == "true" if num in ("true", "false") else (float(num) if "." in num or "e" in num.lower() else int(num))
            stack[-1][key].append(v)
    return stack[0]


def one(d, k, default=0):
    v = d.get(k) or [default]
    assert len(v) == 1, (k, v)
    return v[0]


def decode(payload, tmp_path):
    need_protoc()
    r = subprocess.run(["protoc", "-I", PROTO_DIR, "--decode=" + REQUEST, SERVICE_PROTO], input=payload,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return parse_text(r.stdout.decode())


class Otlp:
    """An ExportProfilesServiceRequest with its dictionary resolved, the
    zero-value rules of profiles.proto checked."""

    def __init__(self, msg):
        self.msg = msg
        d = one(msg, "dictionary")
        self.strings = [s.decode("utf-8") for s in d["string_table"]]
        assert self.strings[0] == "", "string_table[0] must be empty"
        assert len(set(self.strings)) == len(self.strings), "a string is interned twice"
        for t in ("mapping_table", "location_table", "function_table", "attribute_table", "stack_table"):
            assert d[t] and not any(d[t][0].values()), "%s[0] must be the zero value" % t
        link0 = one(d, "link_table")
        assert one(link0, "trace_id") == b"\0" * 16 and one(link0, "span_id") == b"\0" * 8
        self.funcs = d["function_table"]
        self.locs = d["location_table"]
        self.stacks = d["stack_table"]
        self.attrs = d["attribute_table"]
        self.used = set([0])

    def s(self, i):
        assert 0 <= i < len(self.strings)
        self.used.add(i)
        return self.strings[i]

    def attr(self, i):
        assert 0 < i < len(self.attrs)
        a = self.attrs[i]
        v = one(a, "value")
        val = None
        for k in ("string_value", "int_value", "double_value", "bool_value"):
            if k in v:
                val = one(v, k)
                val = val.decode("utf-8") if isinstance(val, bytes) else val
        unit = self.s(one(a, "unit_strindex")) if "unit_strindex" in a else None
        return self.s(one(a, "key_strindex")), val, unit

    def attrs_of(self, m, field="attribute_indices"):
        out = {}
        for i in m.get(field, []):
            k, v, _ = self.attr(i)
            assert k not in out, "attribute key %s twice on one message" % k
            out[k] = v
        return out

    def frame(self, li):
        assert 0 < li < len(self.locs)
        loc = self.locs[li]
        assert one(loc, "mapping_index") == 0
        line = one(loc, "lines")
        fi = one(line, "function_index")
        assert 0 < fi < len(self.funcs)
        f = self.funcs[fi]
        return {"name": self.s(one(f, "name_strindex")), "system": self.s(one(f, "system_name_strindex")),
                "file": self.s(one(f, "filename_strindex")), "first": one(f, "start_line"),
                "line": one(line, "line")}

    def stack(self, si):
        """Frames of stack si, leaf first."""
        assert 0 < si < len(self.stacks)
        return [self.frame(li) for li in self.stacks[si].get("location_indices", [])]

    def resources(self):
        return self.msg["resource_profiles"]


def resource_attrs(rp):
    out = {}
    for kv in one(rp, "resource")["attributes"]:
        v = one(kv, "value")
        val = one(v, "string_value").decode() if "string_value" in v else one(v, "int_value")
        out[one(kv, "key").decode()] = val
    return out


def profiles(rp):
    sp = one(rp, "scope_profiles")
    assert one(one(sp, "scope"), "name") == b"bifocal"
    return sp["profiles"]


def collapsed_key(o, frames):
    return ";".join("%s (%s:%d:%d)" % (f["name"], f["file"], f["first"], f["line"]) for f in reversed(frames))


def read_collapsed(text):
    c = collections.Counter()
    for line in text.splitlines():
        if line.strip():
            stack, n = line.rsplit(" ", 1)
            c[stack] += int(n)
    return c


def record_workload(python, db, tmp_path, seconds="1.0"):
    wl = tmp_path / "fleet_work.py"
    wl.write_text(WORKLOAD)
    truth = tmp_path / "truth.json"
    r = run(["record", "-r", "200", "--label", "fleet-noon", "--commit", "c0ffee12", "--",
             python, str(wl), str(truth), seconds], db=db)
    return r.stdout.strip().splitlines()[-1], json.loads(truth.read_text())


def session_json(db, sid):
    for s in json.loads(run(["sessions", "--json"], db=db).stdout):
        if str(s["id"]) == str(sid):
            return s
    raise AssertionError("no session %s" % sid)


def export_otlp(db, sid, tmp_path):
    out = tmp_path / ("s%s.otlp.pb" % sid)
    run(["export", str(sid), "-f", "otlp", "-o", str(out)], db=db)
    return out.read_bytes()


def check_sampled(o, rp, db, sid, truth, tmp_path):
    info = session_json(db, sid)
    ra = resource_attrs(rp)
    assert ra["process.pid"] == truth["pid"]
    assert ra["process.runtime.name"] == "cpython"
    assert ra["process.runtime.version"] == truth["version"]
    assert ra["host.name"] == info["host"]
    assert ra["process.command_line"] == info["command"]
    profs = profiles(rp)
    assert len(profs) == 2
    counts, times = profs
    assert (o.s(one(one(counts, "sample_type"), "type_strindex")), o.s(one(one(counts, "sample_type"), "unit_strindex"))) == ("samples", "count")
    assert (o.s(one(one(times, "sample_type"), "type_strindex")), o.s(one(one(times, "sample_type"), "unit_strindex"))) == ("wall", "nanoseconds")
    for p in profs:
        pa = o.attrs_of(p)
        assert pa["bifocal.clock"] == "wall" and pa["bifocal.mode"] == "all"
        assert pa["bifocal.rate"] == 200.0 and pa["bifocal.label"] == "fleet-noon"
        assert pa["bifocal.commit"] == "c0ffee12" and pa["bifocal.python.build"] == "release"
        assert pa["bifocal.session.id"] == int(sid) and pa["bifocal.session.kind"] == "sampled"
        assert pa["bifocal.samples"] == info["samples"] and pa["bifocal.samples.missed"] == info["missed"]
        assert one(p, "period") == 5000000
        pt = one(p, "period_type")
        assert (o.s(one(pt, "type_strindex")), o.s(one(pt, "unit_strindex"))) == ("wall", "nanoseconds")
        assert one(p, "time_unix_nano") == info["start_ns"] and one(p, "duration_nano") == info["duration_ns"]
        assert len(one(p, "profile_id")) == 16
    # every sample against the collapsed export (another writer, same session)
    want = read_collapsed(run(["export", str(sid), "-f", "collapsed", "-o", "-"], db=db).stdout)
    got = collections.Counter()
    threads = collections.Counter()
    for smp in counts["samples"]:
        frames = o.stack(one(smp, "stack_index"))
        v = one(smp, "values")
        if frames and frames[0]["name"] == "[no Python frame]":
            got["[no Python frame]"] += v
        else:
            got[collapsed_key(o, frames)] += v
        sa = o.attrs_of(smp)
        threads[(sa["thread.id"], sa.get("thread.name"))] += v
    assert got == want
    assert sum(got.values()) == info["samples"]
    # thread ids and names as the workload saw them
    names = dict(threads)
    assert (truth["worker_tid"], "w\u00f6rker-1") in names
    assert any(tid == truth["main_tid"] for tid, _ in names)
    # the time profile: the same stacks; wall clock charges both threads' ~seconds
    assert [one(s, "stack_index") for s in times["samples"]] == [one(s, "stack_index") for s in counts["samples"]]
    total_s = sum(one(s, "values") for s in times["samples"]) / 1e9
    assert 0.6 * 2 * info["duration_s"] < total_s < 1.3 * 2 * info["duration_s"], total_s
    # functions against the database's own rows; the workload's first lines
    con = sqlite3.connect(db)
    rows = set(con.execute("SELECT f.s, q.s, fn.firstlineno FROM functions fn JOIN strings f ON f.id = fn.file_id "
                           "JOIN strings q ON q.id = fn.qualname_id"))
    con.close()
    seen = {}
    for fi in range(1, len(o.funcs)):
        f = o.funcs[fi]
        name, sysname = o.s(one(f, "name_strindex")), o.s(one(f, "system_name_strindex"))
        if name == "[no Python frame]":
            continue
        file, first = o.s(one(f, "filename_strindex")), one(f, "start_line")
        assert (file, name, first) in rows
        assert sysname == "%s:%d:%s" % (file, first, name)
        seen[name] = (file, first)
    assert seen["leaf"] == (truth["file"], truth["leaf_line"])
    assert seen["mid"] == (truth["file"], truth["mid_line"])
    return len(counts["samples"])


# ---- export -f otlp ----------------------------------------------------------

def test_otlp_export_sampled(python, db, tmp_path):
    need_protoc()
    sid, truth = record_workload(python, db, tmp_path)
    o = Otlp(decode(export_otlp(db, sid, tmp_path), tmp_path))
    assert len(o.resources()) == 1
    ra = resource_attrs(o.resources()[0])
    assert ra["service.name"] == "unknown_service:bifocal"
    check_sampled(o, o.resources()[0], db, sid, truth, tmp_path)
    # every string but "" is referenced by something walked above or by a value type
    for p in profiles(o.resources()[0]):
        for vt in [one(p, "sample_type"), one(p, "period_type")]:
            o.s(one(vt, "type_strindex")), o.s(one(vt, "unit_strindex"))
    for i in range(1, len(o.attrs)):
        o.attr(i)
    for fi in range(1, len(o.funcs)):
        o.s(one(o.funcs[fi], "filename_strindex"))
    assert o.used == set(range(len(o.strings))), [o.strings[i] for i in set(range(len(o.strings))) - o.used]


def traced_session(python, db, tmp_path):
    wl = tmp_path / "fleet_work.py"
    wl.write_text(WORKLOAD)
    truth = tmp_path / "truth.json"
    r = run(["trace", "--", python, str(wl), str(truth), "0"], db=db, check=False)
    if r.returncode != 0 and "no tracing extension" in r.stderr:
        pytest.skip("the tracer is not built for %s: %s" % (python, r.stderr.strip()))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1], json.loads(truth.read_text())


def test_otlp_export_traced(python, db, tmp_path):
    need_protoc()
    sid, truth = traced_session(python, db, tmp_path)
    o = Otlp(decode(export_otlp(db, sid, tmp_path), tmp_path))
    rp = one(o.msg, "resource_profiles")
    assert resource_attrs(rp)["process.pid"] == truth["pid"]
    calls, times = profiles(rp)
    st = one(calls, "sample_type")
    assert (o.s(one(st, "type_strindex")), o.s(one(st, "unit_strindex"))) == ("calls", "count")
    assert "period" not in calls
    assert o.attrs_of(calls)["bifocal.session.kind"] == "traced"
    per_callee = collections.Counter()
    edges = {}
    for smp in calls["samples"]:
        fr = o.stack(one(smp, "stack_index"))
        assert 1 <= len(fr) <= 2 and "attribute_indices" not in smp
        callee = (fr[0]["file"], fr[0]["name"], fr[0]["first"])
        caller = (fr[1]["file"], fr[1]["name"], fr[1]["first"]) if len(fr) == 2 else None
        assert all(f["line"] == f["first"] for f in fr)
        assert (caller, callee) not in edges
        edges[(caller, callee)] = one(smp, "values")
        per_callee[callee] += one(smp, "values")
    # exact, as the workload counts its own calls
    f = truth["file"]
    leaf, mid = (f, "leaf", truth["leaf_line"]), (f, "mid", truth["mid_line"])
    assert per_callee[mid] == 300 and per_callee[leaf] == 500
    assert edges[(mid, leaf)] == 300
    # every edge as the database holds it
    con = sqlite3.connect(db)
    q = ("SELECT cf.s, cq.s, c.firstlineno, ef.s, eq.s, e.firstlineno, t.calls FROM trace_edges t "
         "LEFT JOIN functions c ON c.id = t.caller_id LEFT JOIN strings cf ON cf.id = c.file_id "
         "LEFT JOIN strings cq ON cq.id = c.qualname_id JOIN functions e ON e.id = t.callee_id "
         "JOIN strings ef ON ef.id = e.file_id JOIN strings eq ON eq.id = e.qualname_id "
         "WHERE t.session_id = ? AND t.calls > 0")
    want = {((r[0], r[1], r[2]) if r[0] is not None else None, (r[3], r[4], r[5])): r[6]
            for r in con.execute(q, (int(sid),))}
    con.close()
    assert edges == want
    tt = one(times, "sample_type")
    assert o.s(one(tt, "type_strindex")) == "wall" and o.s(one(tt, "unit_strindex")) == "nanoseconds"
    assert sum(one(s, "values") for s in times["samples"]) > 0


def test_otlp_export_imported(db, tmp_path):
    need_protoc()
    src = tmp_path / "in.collapsed"
    src.write_text("main;parse;lex 70\nmain;parse 20\nmain;render 10\n")
    sid = run(["import", str(src)], db=db).stdout.strip().splitlines()[-1]
    o = Otlp(decode(export_otlp(db, sid, tmp_path), tmp_path))
    (p,) = profiles(one(o.msg, "resource_profiles"))
    got = collections.Counter()
    for smp in p["samples"]:
        got[";".join(f["name"] for f in reversed(o.stack(one(smp, "stack_index"))))] += one(smp, "values")
    assert got == {"main;parse;lex": 70, "main;parse": 20, "main;render": 10}
    assert "period" not in p
    assert o.attrs_of(p)["bifocal.session.kind"] == "imported"
