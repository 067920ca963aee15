"""Governance of profiles (issue 8): audit trail, redacted copies, expiry and
gc, private files, encrypted sharing. Sessions come from `bifocal import` of
py-spy style collapsed stacks, so these tests need no Python target."""
import json
import os
import socket
import sqlite3
import stat

import pytest

from conftest import last_line_id, run, wait_expired

ALICE = """\
main (/home/alice/app/main.py:3);handle (/home/alice/app/x.py:12);parse (/home/alice/app/secret_parser.py:40) 30
main (/home/alice/app/main.py:3);handle (/home/alice/app/x.py:12);other (/home/alice/app/x.py:90) 7
main (/home/alice/app/main.py:3);handle (/home/alice/app/x.py:12);json.loads (<frozen json>:1) 10
main (/home/alice/app/main.py:3);sleep (/usr/lib/python3.11/time.py:5) 5
main (/home/alice/app/main.py:3);len (<builtin>:0) 2
"""

BOB = """\
serve (/srv/bob/billing/server.py:8);charge (/srv/bob/billing/card_vault.py:21) 11
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def imp(db, path, *extra):
    return last_line_id(run(["import", path] + list(extra), db=db))


def functions(db, sid):
    return json.loads(run(["replay", str(sid), "--view", "functions", "--json"], db=db).stdout)


def sessions(db):
    return json.loads(run(["sessions", "--json"], db=db).stdout)


def audit(db):
    return json.loads(run(["audit", "--json"], db=db).stdout)


def raw_bytes(path):
    """The database file and whatever journal files sit beside it."""
    data = b""
    for sfx in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(path + sfx):
            with open(path + sfx, "rb") as f:
                data += f.read()
    return data


def integrity(path):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def shares(view):
    """(qualname, firstlineno) -> (self share, total share, samples); files
    are left out because redaction replaces them."""
    return {(f["qualname"], f["firstlineno"]): (f["self_share"], f["total_share"], f["self_samples"],
                                                f["total_samples"]) for f in view["functions"]}


def one_error_line(r):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0
    assert len(lines) == 1, r.stderr
    return lines[0]


# ---- redaction --------------------------------------------------------------

def test_redact_hides_paths_host_command_keeps_shares(tmp_path, db):
    a = imp(db, write(tmp_path, "alice.txt", ALICE), "--label", "prod-noon")
    imp(db, write(tmp_path, "bob.txt", BOB))
    out = str(tmp_path / "shared.db")
    r = run(["redact", str(a), "-o", out, "--keep", "/usr/lib/python3"], db=db)
    assert "redacted" in r.stdout
    assert mode(out) == 0o600
    for sfx in ("-wal", "-shm", "-journal"):
        assert not os.path.exists(out + sfx), sfx
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]

    before = functions(db, a)
    after = functions(out, 1)
    assert shares(after) == shares(before)
    assert after["total_samples"] == before["total_samples"]

    files = {f["qualname"]: f["file"] for f in after["functions"]}
    assert files["handle"] == files["other"], "same path must give the same token"
    assert files["handle"] != files["parse"]
    assert files["parse"].startswith("<path:") and files["parse"].endswith(">")
    assert files["sleep"] == "/usr/lib/python3.11/time.py"  # --keep prefix
    assert files["json.loads"] == "<frozen json>"
    assert files["len"] == "<builtin>"

    meta = sessions(out)
    assert len(meta) == 1
    s = meta[0]
    assert s["redacted"] is True
    assert s["host"] is None and s["command"] is None
    assert s["label"] == "prod-noon"
    assert s["samples"] == sessions(db)[0]["samples"]

    # Reading the copy must not have created journal files either.
    blob = raw_bytes(out)
    needles = [b"/home/alice", b"alice", b"secret_parser", b"main.py", b"x.py", b"/srv/bob", b"card_vault",
               b"alice.txt", b"bob.txt", str(tmp_path).encode()]
    host = socket.gethostname().encode()
    if len(host) >= 4:  # shorter names turn up by chance in binary pages
        needles.append(host)
    for needle in needles:
        assert needle not in blob, needle
    assert integrity(out) == "ok"


def test_redact_refuses_existing_output_and_unknown_session(tmp_path, db):
    a = imp(db, write(tmp_path, "alice.txt", ALICE))
    out = str(tmp_path / "r.db")
    run(["redact", str(a), "-o", out], db=db)
    size = os.path.getsize(out)
    msg = one_error_line(run(["redact", str(a), "-o", out], db=db, check=False))
    assert "exists" in msg
    assert os.path.getsize(out) == size
    msg = one_error_line(run(["redact", "99", "-o", str(tmp_path / "n.db")], db=db, check=False))
    assert "99" in msg
    assert not os.path.exists(str(tmp_path / "n.db"))


def test_redacted_copy_is_redacted_again_unchanged(tmp_path, db):
    a = imp(db, write(tmp_path, "alice.txt", ALICE))
    r1, r2 = str(tmp_path / "r1.db"), str(tmp_path / "r2.db")
    run(["redact", str(a), "-o", r1], db=db)
    run(["redact", "1", "-o", r2], db=r1)
    f1 = {f["qualname"]: f["file"] for f in functions(r1, 1)["functions"]}
    f2 = {f["qualname"]: f["file"] for f in functions(r2, 1)["functions"]}
    assert f1 == f2  # tokens are bracketed names, kept as they are


# ---- expiry -----------------------------------------------------------------

def big_collapsed(n=3000):
    return "".join("main (/home/alice/app/main.py:3);h%d (/home/alice/app/mod%d.py:%d);leafsecret%d "
                   "(/home/alice/app/deep/l%d.py:7) %d\n" % (i, i % 50, i, i, i, 1 + i % 9) for i in range(n))


def test_gc_deletes_expired_sessions_and_shrinks_file(tmp_path, db):
    keep = imp(db, write(tmp_path, "alice.txt", ALICE), "--label", "keep")
    keep_view = functions(db, keep)
    gone = imp(db, write(tmp_path, "big.txt", big_collapsed()), "--ttl", "1s")
    assert {s["id"] for s in sessions(db)} == {keep, gone}
    assert [s for s in sessions(db) if s["id"] == gone][0]["expires_at_ns"] > 0
    size_before = os.path.getsize(db)
    wait_expired(db, gone)
    r = run(["gc"], db=db)
    assert "1 expired session" in r.stdout
    assert [s["id"] for s in sessions(db)] == [keep]
    assert os.path.getsize(db) < size_before / 2, (size_before, os.path.getsize(db))
    assert functions(db, keep)["functions"] == keep_view["functions"]
    blob = raw_bytes(db)
    assert b"leafsecret" not in blob and b"/deep/l" not in blob
    assert integrity(db) == "ok"
    # gc is audited and a second run finds nothing.
    assert "0 expired session" in run(["gc"], db=db).stdout
    assert [e["command"] for e in audit(db)].count("gc") == 2


def test_gc_keeps_unexpired_and_ttl_free_sessions(tmp_path, db):
    a = imp(db, write(tmp_path, "a.txt", ALICE), "--ttl", "7d")
    b = imp(db, write(tmp_path, "b.txt", BOB))
    run(["gc"], db=db)
    assert {s["id"] for s in sessions(db)} == {a, b}
    msg = one_error_line(run(["import", str(tmp_path / "a.txt"), "--ttl", "soon"], db=db, check=False))
    assert "--ttl" in msg


# ---- private by default -------------------------------------------------------

def test_files_are_private_and_open_warns_when_others_can_write(tmp_path, db):
    old = os.umask(0o022)
    try:
        a = imp(db, write(tmp_path, "alice.txt", ALICE))
        assert mode(db) == 0o600
        out = str(tmp_path / "x.collapsed")
        run(["export", str(a), "--format", "collapsed", "-o", out], db=db)
        assert mode(out) == 0o600
        view = str(tmp_path / "view.txt")
        run(["replay", str(a), "--view", "functions", "-o", view], db=db)
        assert mode(view) == 0o600
        r = run(["sessions"], db=db)
        assert "warning" not in r.stderr
        os.chmod(db, 0o666)
        r = run(["sessions"], db=db)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "writable by group/others" in lines[0], r.stderr
    finally:
        os.umask(old)


# ---- encrypted sharing ----------------------------------------------------------

@pytest.fixture
def keys(tmp_path):
    r = run(["keygen", "-o", str(tmp_path / "bob")])
    assert "fingerprint" in r.stdout
    run(["keygen", "-o", str(tmp_path / "eve")])
    return str(tmp_path / "bob")


def test_keygen_files(tmp_path, keys):
    assert mode(keys + ".key") == 0o600
    assert open(keys + ".pub").read().startswith("bifocal-pub-1 ")
    msg = one_error_line(run(["keygen", "-o", keys], check=False))
    assert "exists" in msg


def test_encrypted_export_round_trips(tmp_path, db, keys):
    a = imp(db, write(tmp_path, "alice.txt", ALICE), "--label", "prod")
    imp(db, write(tmp_path, "bob.txt", BOB))
    sealed = str(tmp_path / "a.bfs")
    run(["export", str(a), "--format", "bifocal", "--encrypt-to", keys + ".pub", "-o", sealed], db=db)
    assert mode(sealed) == 0o600
    blob = open(sealed, "rb").read()
    assert blob.startswith(b"BFSEAL1\n")
    assert b"alice" not in blob and b"SQLite" not in blob

    other = str(tmp_path / "recv.db")
    imp(other, write(tmp_path, "bob2.txt", BOB))  # the receiver has data of its own
    nid = last_line_id(run(["import", sealed, "--key", keys + ".key"], db=other))
    assert nid == 2
    assert functions(other, nid)["functions"] == functions(db, a)["functions"]
    got = [s for s in sessions(other) if s["id"] == nid][0]
    want = [s for s in sessions(db) if s["id"] == a][0]
    for k in ("label", "samples", "host", "command", "start_ns", "clock", "mode"):
        assert got[k] == want[k], k
    # the public key text works as well as the file
    pub_text = open(keys + ".pub").read().split()[1]
    run(["export", str(a), "--format", "bifocal", "--encrypt-to", pub_text, "-o", sealed + "2"], db=db)
    run(["import", sealed + "2", "--key", keys + ".key", "--label", "mine", "--ttl", "1d"], db=other)
    s3 = sessions(other)[-1]
    assert s3["label"] == "mine" and s3["expires_at_ns"] > 0
    assert integrity(other) == "ok"


def flip(path, offset, out):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x01
    with open(out, "wb") as f:
        f.write(data)


def test_tampered_or_wrong_key_is_refused_and_nothing_imported(tmp_path, db, keys):
    a = imp(db, write(tmp_path, "alice.txt", ALICE))
    sealed = str(tmp_path / "a.bfs")
    run(["export", str(a), "--format", "bifocal", "--encrypt-to", keys + ".pub", "-o", sealed], db=db)
    recv = str(tmp_path / "recv.db")
    imp(recv, write(tmp_path, "bob.txt", BOB))
    listing = sessions(recv)
    size = os.path.getsize(sealed)
    bad = str(tmp_path / "bad.bfs")
    for off in (16, 40, size // 2, size - 1):  # sealing key, MAC, body, last byte
        flip(sealed, off, bad)
        msg = one_error_line(run(["import", bad, "--key", keys + ".key"], db=recv, check=False))
        assert "nothing imported" in msg, msg
    flip(sealed, 9, bad)  # recipient fingerprint
    assert "nothing imported" in one_error_line(run(["import", bad, "--key", keys + ".key"], db=recv, check=False))
    with open(bad, "wb") as f:
        f.write(open(sealed, "rb").read()[: size // 2])
    assert "nothing imported" in one_error_line(run(["import", bad, "--key", keys + ".key"], db=recv, check=False))
    eve = str(tmp_path / "eve.key")
    msg = one_error_line(run(["import", sealed, "--key", eve], db=recv, check=False))
    assert "not to" in msg and "nothing imported" in msg
    msg = one_error_line(run(["import", sealed, "--key", keys + ".pub"], db=recv, check=False))
    assert "public key" in msg
    msg = one_error_line(run(["import", sealed], db=recv, check=False))
    assert "--key" in msg
    msg = one_error_line(run(["import", str(tmp_path / "bob.txt"), "--key", keys + ".key"], db=recv, check=False))
    assert "not a sealed" in msg
    assert sessions(recv) == listing
    assert integrity(recv) == "ok"


def test_export_bifocal_needs_a_public_key(tmp_path, db, keys):
    a = imp(db, write(tmp_path, "alice.txt", ALICE))
    out = str(tmp_path / "x.bfs")
    assert "--encrypt-to" in one_error_line(run(["export", str(a), "--format", "bifocal", "-o", out], db=db, check=False))
    msg = one_error_line(run(["export", str(a), "--format", "bifocal", "--encrypt-to", keys + ".key", "-o", out],
                             db=db, check=False))
    assert "secret key" in msg
    assert not os.path.exists(out)


# ---- audit ----------------------------------------------------------------------

def test_audit_rows_for_data_leaving_commands(tmp_path, db, keys):
    a = imp(db, write(tmp_path, "alice.txt", ALICE))
    assert audit(db) == []  # plain imports are not audited
    run(["redact", str(a), "-o", str(tmp_path / "r.db")], db=db)
    run(["export", str(a), "--format", "bifocal", "--encrypt-to", keys + ".pub", "-o", str(tmp_path / "s")], db=db)
    run(["redact", str(a), "-o", str(tmp_path / "r.db")], db=db, check=False)  # fails: exists
    rows = audit(db)
    assert [r["command"] for r in rows] == ["redact", "export", "redact"]
    for r in rows:
        assert r["uid"] == os.getuid()
        assert r["user"]
        assert r["time_ns"] > 0
        assert r["session_id"] == a
        assert "-o" in r["argv"]
    assert rows[0]["outcome"] == "ok" and rows[1]["outcome"] == "ok"
    assert "exists" in rows[2]["outcome"]
    human = run(["audit"], db=db).stdout
    assert "redact" in human and "export" in human


def test_audit_in_the_repl_records_the_line(tmp_path, db):
    imp(db, write(tmp_path, "alice.txt", ALICE))
    out = str(tmp_path / "r.db")
    run([], db=db, input="redact 1 -o %s\n" % out)
    assert os.path.exists(out)
    rows = audit(db)
    assert len(rows) == 1 and rows[0]["command"] == "redact"
    assert rows[0]["argv"].endswith("(repl) redact 1 -o %s" % out)
