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

_TOK = re.compile(r'\s*(?:([A-Za-z0-9_]+)\s*(?=[:{])(:)?\s*(\{)?|(\})|"((?:[^"\\]|\\.)*)"|([-+0-9.eE]+|true|false))')


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


# ---- push: a loopback receiver (fleet_helpers.Receiver) ----------------------

import base64  # noqa: E402
import email.parser  # noqa: E402
import gzip  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402

from fleet_helpers import PASSWORD, SECRET, Receiver, free_port, receiver  # noqa: E402,F401


def push(db, args, env=None, timeout=60):
    e = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=%s,x-team=prof" % SECRET,
         "PYROSCOPE_BASIC_AUTH_USER": "fleet", "PYROSCOPE_BASIC_AUTH_PASSWORD": PASSWORD}
    e.update(env or {})
    t = time.monotonic()
    r = run(["push"] + list(args), db=db, check=False, env=e, timeout=timeout)
    return r, time.monotonic() - t


def assert_no_secret(db, *texts):
    for t in texts:
        assert SECRET not in t and PASSWORD not in t
        assert base64.b64encode(("fleet:" + PASSWORD).encode()).decode() not in t
    audit = run(["audit", "--json"], db=db).stdout
    assert SECRET not in audit and PASSWORD not in audit
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(db + suffix):
            data = open(db + suffix, "rb").read()
            assert SECRET.encode() not in data and PASSWORD.encode() not in data


def imported(db, tmp_path):
    src = tmp_path / "in.collapsed"
    src.write_text("main;parse;lex 70\nmain;parse 20\nmain;render 10\n")
    return run(["import", str(src), "--label", "fleet-import"], db=db).stdout.strip().splitlines()[-1]


def test_push_otlp(python, db, tmp_path, receiver):
    need_protoc()
    sid, truth = record_workload(python, db, tmp_path)
    rcv = receiver("ok")
    r, _ = push(db, [sid, "--to", "otlp+http://127.0.0.1:%d" % rcv.port, "--json"],
                env={"OTEL_SERVICE_NAME": "checkout", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging,team=prof%20ing"})
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)
    assert res["ok"] and res["status"] == 200 and res["attempts"] == 1 and res["session"] == int(sid)
    (req,) = rcv.requests
    assert req["path"] == "/v1development/profiles" and req["raw_query"] == ""
    h = req["headers"]
    assert h["Content-Type"] == "application/x-protobuf" and h["Content-Encoding"] == "gzip"
    assert h["x-api-key"] == SECRET and h["x-team"] == "prof"
    assert res["bytes"] == len(req["body"])
    o = Otlp(decode(gzip.decompress(req["body"]), tmp_path))
    rp = one(o.msg, "resource_profiles")
    ra = resource_attrs(rp)
    assert ra["service.name"] == "checkout"
    assert ra["deployment.environment"] == "staging" and ra["team"] == "prof ing"
    check_sampled(o, rp, db, sid, truth, tmp_path)
    assert_no_secret(db, r.stdout, r.stderr)


def go_pprof(d, *args):
    go = shutil.which("go")
    if not go:
        pytest.skip("go is missing: apt-get install golang-go (.ci/setup)")
    env = dict(os.environ, HOME=str(d), GOCACHE=str(d / "gocache"), PPROF_TMPDIR=str(d), GOFLAGS="",
               GOTOOLCHAIN="local", GOPROXY="off")
    r = subprocess.run([go, "tool", "pprof"] + list(args), capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def form_parts(req):
    ctype = req["headers"]["Content-Type"]
    assert ctype.startswith("multipart/form-data; boundary=")
    msg = email.parser.BytesParser().parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + req["body"])
    assert msg.is_multipart()
    return {p.get_param("name", header="content-disposition"): p.get_payload(decode=True) for p in msg.get_payload()}


def test_push_pyroscope(python, db, tmp_path, receiver):
    sid, truth = record_workload(python, db, tmp_path)
    info = session_json(db, sid)
    rcv = receiver("ok")
    r, _ = push(db, [sid, "--to", "pyroscope://127.0.0.1:%d" % rcv.port, "--service", "checkout"])
    assert r.returncode == 0, r.stderr
    (req,) = rcv.requests
    assert req["path"] == "/ingest"
    q = {k: v[0] for k, v in req["query"].items()}
    assert set(q) == {"name", "from", "until", "sampleRate", "spyName", "format"}
    assert q["format"] == "pprof" and q["spyName"] == "bifocal" and q["sampleRate"] == "200"
    assert int(q["from"]) == info["start_ns"] // 10**9
    assert int(q["until"]) >= (info["start_ns"] + info["duration_ns"]) / 1e9 and int(q["until"]) > int(q["from"])
    m = re.fullmatch(r"checkout\{(.*)\}", q["name"])
    assert m, q["name"]
    labels = dict(kv.split("=", 1) for kv in m.group(1).split(","))
    assert labels["bifocal_session"] == sid and labels["bifocal_clock"] == "wall"
    assert labels["commit"] == "c0ffee12" and labels["label"] == "fleet-noon"
    assert labels["python_version"] == truth["version"]
    assert req["headers"]["Authorization"] == "Basic " + base64.b64encode(("fleet:" + PASSWORD).encode()).decode()
    parts = form_parts(req)
    cfg = json.loads(parts["sample_type_config"])
    assert cfg == {"samples": {"units": "samples", "aggregation": "sum", "display-name": "wall", "sampled": True}}
    pb = tmp_path / "pushed.pb.gz"
    pb.write_bytes(parts["profile"])
    exported = tmp_path / "exported.pb.gz"
    run(["export", sid, "-f", "pprof", "-o", str(exported)], db=db)
    assert gzip.decompress(pb.read_bytes()) == gzip.decompress(exported.read_bytes())
    raw = go_pprof(tmp_path, "-raw", str(pb))
    body = raw.split("samples/count[dflt] wall/nanoseconds\n")[1].split("Locations")[0]
    counts = [int(l.split()[0]) for l in body.splitlines() if l.strip() and ":" in l and not l.strip().startswith(("thread", "task"))]
    assert sum(counts) == info["samples"]
    assert "w\u00f6rker-1 (%d)" % truth["worker_tid"] in raw
    assert_no_secret(db, r.stdout, r.stderr)


def otlp_to(rcv):
    return "otlp+http://127.0.0.1:%d" % rcv.port


def test_push_refused_is_bounded_and_reported(db, tmp_path):
    sid = imported(db, tmp_path)
    r, took = push(db, [sid, "--to", "otlp+http://127.0.0.1:%d" % free_port(), "--retries", "2", "--timeout", "2"])
    assert r.returncode == 1
    assert "session %s not pushed" % sid in r.stderr and "connect" in r.stderr.lower()
    assert "stays in the database" in r.stderr
    # backoff 0.5 s + 1 s between three refused attempts; nothing waits for a timeout
    assert 1.4 < took < 8, took
    assert_no_secret(db, r.stdout, r.stderr)
    assert session_json(db, sid)["samples"] == 100


def test_push_retries_5xx_then_delivers_the_same_bytes(db, tmp_path, receiver):
    sid = imported(db, tmp_path)
    rcv = receiver("500", "500", "ok")
    r, _ = push(db, [sid, "--to", otlp_to(rcv), "--json"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["attempts"] == 3
    assert len(rcv.requests) == 3 and len({q["body"] for q in rcv.requests}) == 1
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_429_honours_retry_after(db, tmp_path, receiver):
    sid = imported(db, tmp_path)
    rcv = receiver(("429", 2), "ok")
    r, _ = push(db, [sid, "--to", otlp_to(rcv)])
    assert r.returncode == 0, r.stderr
    assert len(rcv.requests) == 2
    gap = rcv.requests[1]["t"] - rcv.requests[0]["t"]
    assert 1.9 < gap < 6, gap
    # a wait beyond the bound is not taken: said at once, nothing hangs
    rcv2 = receiver(("429", 120))
    r, took = push(db, [sid, "--to", otlp_to(rcv2)])
    assert r.returncode == 1 and len(rcv2.requests) == 1 and took < 10
    assert "asks to wait 120 s" in r.stderr and "HTTP 429" in r.stderr
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_timeout_is_bounded(db, tmp_path, receiver):
    sid = imported(db, tmp_path)
    rcv = receiver(("sleep", 6))
    r, took = push(db, [sid, "--to", otlp_to(rcv), "--timeout", "1", "--retries", "1"])
    assert r.returncode == 1
    assert "timed out" in r.stderr.lower() or "timeout" in r.stderr.lower()
    # two attempts of 1 s and one 0.5 s backoff
    assert 2.0 < took < 6, took
    assert len(rcv.requests) == 2
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_huge_response_and_4xx_are_not_retried(db, tmp_path, receiver):
    sid = imported(db, tmp_path)
    rcv = receiver("huge")
    r, took = push(db, [sid, "--to", otlp_to(rcv)])
    assert r.returncode == 1 and len(rcv.requests) == 1 and took < 10
    assert "larger than 1048576 bytes" in r.stderr
    rcv = receiver("400")
    r, _ = push(db, [sid, "--to", otlp_to(rcv)])
    assert r.returncode == 1 and len(rcv.requests) == 1
    assert "HTTP 400: backend says no" in r.stderr
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_connection_cut_mid_body_is_retried(db, tmp_path, receiver):
    need_protoc()
    sid = imported(db, tmp_path)
    rcv = receiver("cut", "ok")
    r, took = push(db, [sid, "--to", otlp_to(rcv), "--json"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["attempts"] == 2 and took < 10
    # the receiver may hold both: the same bytes, the same profile ids (its dedup key)
    a, b = rcv.requests
    assert a["body"] == b["body"]
    o = Otlp(decode(gzip.decompress(b["body"]), tmp_path))
    (p,) = profiles(one(o.msg, "resource_profiles"))
    assert sum(one(s, "values") for s in p["samples"]) == 100
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_redirects_only_to_the_same_origin(db, tmp_path, receiver):
    sid = imported(db, tmp_path)
    other = receiver("ok")
    rcv = receiver(("redirect", "http://127.0.0.1:%d/v1development/profiles" % other.port))
    r, _ = push(db, [sid, "--to", otlp_to(rcv)])
    assert r.returncode == 1 and "another origin" in r.stderr
    assert other.requests == []  # the secret header never went there
    same = receiver(("redirect", "/moved"), "ok")
    same.script[0] = ("redirect", "http://127.0.0.1:%d/moved" % same.port)
    r, _ = push(db, [sid, "--to", otlp_to(same)])
    assert r.returncode == 0, r.stderr
    assert [q["path"] for q in same.requests] == ["/v1development/profiles", "/moved"]
    assert same.requests[1]["headers"]["x-api-key"] == SECRET
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_headers_file_must_be_private(db, tmp_path, receiver):
    sid = imported(db, tmp_path)
    hf = tmp_path / "headers"
    hf.write_text("# pyroscope behind a proxy\nAuthorization: Bearer %s\nX-Scope-OrgID: team-a\n" % SECRET)
    os.chmod(hf, 0o644)
    rcv = receiver("ok")
    env = {"PYROSCOPE_BASIC_AUTH_USER": "", "PYROSCOPE_BASIC_AUTH_PASSWORD": ""}
    r, _ = push(db, [sid, "--to", "pyroscope://127.0.0.1:%d" % rcv.port, "--headers-file", str(hf)], env=env)
    assert r.returncode == 2 and "chmod 600" in r.stderr and rcv.requests == []
    os.chmod(hf, 0o600)
    r, _ = push(db, [sid, "--to", "pyroscope://127.0.0.1:%d" % rcv.port, "--headers-file", str(hf)], env=env)
    assert r.returncode == 0, r.stderr
    h = rcv.requests[0]["headers"]
    assert h["Authorization"] == "Bearer " + SECRET and h["X-Scope-OrgID"] == "team-a"
    q = {k: v[0] for k, v in rcv.requests[0]["query"].items()}
    assert "sampleRate" not in q  # an import has no rate
    assert q["name"].startswith("bifocal{") and "label=fleet-import" in q["name"]
    assert_no_secret(db, r.stdout, r.stderr)


def test_push_tls_is_verified(db, tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl is missing (needed to make a test certificate)")
    import ssl
    sid = imported(db, tmp_path)
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    rcv = Receiver(("ok",))
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        rcv.server.socket = ctx.wrap_socket(rcv.server.socket, server_side=True)
        to = "otlp+https://127.0.0.1:%d" % rcv.port
        r, _ = push(db, [sid, "--to", to, "--retries", "0"])
        assert r.returncode == 1 and "certificate" in r.stderr.lower() and "--cacert" in r.stderr
        assert rcv.requests == []
        r, _ = push(db, [sid, "--to", to, "--cacert", str(crt)])
        assert r.returncode == 0, r.stderr
        assert len(rcv.requests) == 1 and rcv.requests[0]["headers"]["x-api-key"] == SECRET
    finally:
        rcv.close()


def test_push_usage_errors(db, tmp_path):
    sid = imported(db, tmp_path)
    r, _ = push(db, [sid, "--to", "ftp://user:%s@host/x" % SECRET])
    assert r.returncode == 2 and "not a push destination" in r.stderr and SECRET not in r.stderr
    r, _ = push(db, [sid], env={"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
    assert r.returncode == 2 and "--to URL" in r.stderr
    r, _ = push(db, ["999", "--to", "otlp+http://127.0.0.1:9"])
    assert r.returncode != 0 and "999" in r.stderr


# ---- import --from pyroscope ---------------------------------------------------

QUERIER = "/querier.v1.QuerierService/SelectMergeProfile"


def decode_raw(payload):
    r = subprocess.run(["protoc", "--decode_raw"], input=payload, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return parse_text(r.stdout.decode())


def functions_json(db, sid):
    rows = json.loads(run(["replay", str(sid), "--view", "functions", "--json", "--limit", "100000"], db=db).stdout)
    rows = rows.get("functions", rows) if isinstance(rows, dict) else rows
    return {(f["file"], f["qualname"], f.get("firstlineno", f.get("line"))): f["self_samples"] for f in rows}


def test_import_from_pyroscope(python, db, tmp_path, receiver):
    need_protoc()
    sid, truth = record_workload(python, db, tmp_path)
    pb = tmp_path / "merged.pb.gz"
    run(["export", sid, "-f", "pprof", "-o", str(pb)], db=db)
    # Pyroscope answers the merged profile as plain protobuf
    rcv = receiver(("body", gzip.decompress(pb.read_bytes()), "application/proto"))
    sel = '{service_name="checkout",env="prod"}'
    r = run(["import", "--from", "pyroscope", "pyroscope://127.0.0.1:%d" % rcv.port, "--query", sel,
             "--since", "1796000000", "--until", "2026-12-01T10:00:00Z", "--label", "fleet-merged"],
            db=db, env={"PYROSCOPE_AUTH_TOKEN": SECRET}, check=False)
    assert r.returncode == 0, r.stderr
    imp = r.stdout.strip().splitlines()[-1]
    (req,) = rcv.requests
    assert req["path"] == QUERIER
    h = req["headers"]
    assert h["Content-Type"] == "application/proto" and h["Connect-Protocol-Version"] == "1"
    assert h["Authorization"] == "Bearer " + SECRET
    until_ms = 1796119200000  # 2026-12-01T10:00:00Z
    body = decode_raw(req["body"])
    assert one(body, "1") == b"process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    assert one(body, "2") == sel.encode()
    assert one(body, "3") == 1796000000000 and one(body, "4") == until_ms
    info = session_json(db, imp)
    assert info["kind"] == "imported" and info["mode"] == "pyroscope" and info["label"] == "fleet-merged"
    assert info["start_ns"] == 1796000000 * 10**9 and info["duration_ns"] == (until_ms - 1796000000000) * 10**6
    q = info["extra"]["pyroscope"]
    assert q["query"] == sel and q["since_ms"] == 1796000000000 and q["until_ms"] == until_ms
    assert q["url"] == "http://127.0.0.1:%d%s" % (rcv.port, QUERIER)
    assert info["samples"] == session_json(db, sid)["samples"]
    # the same functions, by identity, with the same self samples as the session it came from
    assert functions_json(db, imp) == functions_json(db, sid)
    assert_no_secret(db, r.stdout, r.stderr, json.dumps(info))


def test_import_from_pyroscope_joins_a_trace(python, db, tmp_path, receiver):
    sid, truth = record_workload(python, db, tmp_path)
    tid, _ = traced_session(python, db, tmp_path)
    pb = tmp_path / "merged.pb.gz"
    run(["export", sid, "-f", "pprof", "-o", str(pb)], db=db)
    rcv = receiver(("body", pb.read_bytes(), "application/proto"))  # gzip-compressed is read too
    imp = run(["import", "--from", "pyroscope", "http://127.0.0.1:%d" % rcv.port, "--query", "{}"],
              db=db).stdout.strip().splitlines()[-1]
    rows = json.loads(run(["correlate", imp, tid, "--json"], db=db).stdout)
    rows = rows.get("functions", rows) if isinstance(rows, dict) else rows
    by = {r["qualname"]: r for r in rows if r.get("file") == truth["file"]}
    assert by["leaf"]["calls"] == 500 and by["mid"]["calls"] == 300
    assert by["leaf"]["self_samples"] > 0


def test_import_from_pyroscope_refuses_bad_answers(db, tmp_path, receiver):
    for behaviour, said in [(("body", b"\xff\xff\xff garbage", "application/proto"), "not a valid pprof"),
                            ("500", "HTTP 500"), (("body", b"", "application/proto"), "no samples"),
                            ("huge", "no samples")]:  # 5 MiB of 'x' is a valid message of unknown fields
        rcv = receiver(behaviour)
        r = run(["import", "--from", "pyroscope", "pyroscope://127.0.0.1:%d" % rcv.port, "--query", "{}"],
                db=db, check=False, env={"PYROSCOPE_AUTH_TOKEN": SECRET})
        assert r.returncode == 1 and said in r.stderr, (behaviour, r.stderr)
        assert_no_secret(db, r.stdout, r.stderr)
    assert not os.path.exists(db) or run(["sessions", "--json"], db=db).stdout.strip() in ("[]", "")
    r = run(["import", "--from", "parca", "http://x", "--query", "{}"], db=db, check=False)
    assert r.returncode == 2 and "pyroscope" in r.stderr


def test_push_windows(python, db, tmp_path, receiver):
    need_protoc()
    sid, truth = record_workload(python, db, tmp_path)
    info = session_json(db, sid)
    rcv = receiver("ok")
    half = round(info["duration_s"] / 2, 3)
    for w in (["--until", "%.3f" % half], ["--since", "%.3f" % half]):
        r, _ = push(db, [sid, "--to", otlp_to(rcv)] + w)
        assert r.returncode == 0, r.stderr
    ids, totals = [], []
    for req, w in zip(rcv.requests, (["--until", "%.3f" % half], ["--since", "%.3f" % half])):
        o = Otlp(decode(gzip.decompress(req["body"]), tmp_path))
        counts = profiles(one(o.msg, "resource_profiles"))[0]
        got = sum(one(s, "values") for s in counts["samples"])
        want = sum(read_collapsed(run(["export", sid, "-f", "collapsed", "-o", "-"] + w, db=db).stdout).values())
        assert got == want
        totals.append(got)
        ids.append(one(counts, "profile_id"))
        start = one(counts, "time_unix_nano")
        # the window's own start (to the ns the option's decimal parses to)
        assert abs(start - (info["start_ns"] + (0 if w[0] == "--until" else half * 1e9))) <= 1000
    assert ids[0] != ids[1]
    assert sum(totals) == info["samples"]


def test_push_otlp_endpoint_from_the_environment(db, tmp_path, receiver):
    need_protoc()
    sid = imported(db, tmp_path)
    rcv = receiver("ok")
    r, _ = push(db, [sid], env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:%d/" % rcv.port,
                                "OTEL_EXPORTER_OTLP_COMPRESSION": "none"})
    assert r.returncode == 0, r.stderr
    (req,) = rcv.requests
    assert req["path"] == "/v1development/profiles" and "Content-Encoding" not in req["headers"]
    o = Otlp(decode(req["body"], tmp_path))
    assert resource_attrs(one(o.msg, "resource_profiles"))["service.name"] == "unknown_service:bifocal"
    # the signal's own endpoint is used as it is
    r, _ = push(db, [sid], env={"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": "http://127.0.0.1:%d/custom/profiles" % rcv.port})
    assert r.returncode == 0, r.stderr
    assert rcv.requests[1]["path"] == "/custom/profiles"
    assert_no_secret(db, r.stdout, r.stderr)


@pytest.mark.few_pythons  # the pusher reads the database; record is every interpreter's elsewhere
def test_push_follow_delivers_every_window_once_in_order(python, db, tmp_path, receiver):
    """A recording pushed window by window while the backend refuses at first:
    every window arrives once, in order, and they add up to the session; the
    recorder is a separate process and never waits on the pusher."""
    need_protoc()
    from conftest import wait_session
    wl = tmp_path / "fleet_work.py"
    wl.write_text(WORKLOAD)
    truth = tmp_path / "truth.json"
    e = dict(os.environ)
    e.pop("BIFOCAL_DB", None)
    rec = subprocess.Popen([os.environ.get("BIFOCAL_BIN", "build/bifocal"), "--db", db, "record", "-r", "100",
                            "--label", "fleet-follow", "--", python, str(wl), str(truth), "6"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    try:
        wait_session(db, rec)
        # down for the first three requests whenever they come (a busy host may
        # start the pusher late): two attempts of window 0, a pause, one more
        rcv = receiver("503", "503", "503", "ok")
        env = dict(e, OTEL_EXPORTER_OTLP_HEADERS="x-api-key=" + SECRET)
        pusher = subprocess.Popen([os.environ.get("BIFOCAL_BIN", "build/bifocal"), "--db", db, "push", "fleet-follow",
                                   "--follow", "--every", "1s", "--to", otlp_to(rcv), "--timeout", "2", "--retries", "1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        out_r, err_r = rec.communicate(timeout=120)
        assert rec.returncode == 0, err_r
        out_p, err_p = pusher.communicate(timeout=90)
    finally:
        for p in (rec,):
            if p.poll() is None:
                p.kill()
    assert pusher.returncode == 0, err_p
    sid = out_r.strip().splitlines()[-1]
    info = session_json(db, sid)
    refused = [q for q in rcv.requests if q["answer"] == "503"]
    accepted = [q for q in rcv.requests if q["answer"] == "ok"]
    assert refused, "the backend was never down while windows were ready"
    assert "waits for the backend" in err_p
    starts, ids, total = [], [], 0
    for q in accepted:
        o = Otlp(decode(gzip.decompress(q["body"]), tmp_path))
        counts = profiles(one(o.msg, "resource_profiles"))[0]
        starts.append(one(counts, "time_unix_nano"))
        ids.append(one(counts, "profile_id"))
        total += sum(one(s, "values") for s in counts["samples"])
    # one window per second of the session, each once, in order, none missing
    n = len(accepted)
    assert starts == [info["start_ns"] + k * 10**9 for k in range(n)]
    assert len(set(ids)) == n
    assert n >= int(info["duration_s"])
    assert total == info["samples"]
    assert out_p.count("pushed to") == n
    assert [q["answer"] for q in rcv.requests[:4]] == ["503", "503", "503", "ok"]
    assert_no_secret(db, out_p, err_p, out_r, err_r)
