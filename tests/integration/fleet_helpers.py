"""What the fleet tests (test_fleet.py, test_fleet_continuous.py) and the
push soak (tests/bench/soak_push.py) share: BUSY, a workload that keeps the
sampler's stacks known (main -> mid -> leaf) for as long as it is told; the
loopback HTTP receiver that checks and records each request and misbehaves
on a script; the credentials that must never appear in any output."""
import http.server
import socket
import threading
import time
import urllib.parse

import pytest

# usage: python busy.py SECONDS (module level <- mid <- leaf, all the time)
BUSY = r'''
import sys, time
def leaf(n):
    s = 0
    for i in range(n):
        s += i
    return s
def mid():
    return leaf(2000)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    mid()
'''

SECRET = "s3cr3t-Tok3n-5f0c1a"
PASSWORD = "pa55-w0rd-9d2e"


class Receiver:
    """An HTTP server on 127.0.0.1 that records every request and answers
    each with the next behaviour of its script (the last one repeats):
    "ok", "500", "400", ("429", SECONDS), ("sleep", SECONDS), "huge", "cut",
    ("redirect", URL)."""

    def __init__(self, script, port=0):
        self.script = list(script)
        self.requests = []
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                u = urllib.parse.urlsplit(self.path)
                rec.requests.append({"path": u.path, "query": urllib.parse.parse_qs(u.query, keep_blank_values=True),
                                     "raw_query": u.query, "headers": dict(self.headers.items()),
                                     "body": body, "t": time.monotonic()})
                b = rec.script.pop(0) if len(rec.script) > 1 else rec.script[0]
                kind = b[0] if isinstance(b, tuple) else b
                if kind == "down_until":  # 503 until a moment, then accepted
                    kind = "ok" if time.monotonic() >= b[1] else "503"
                if kind == "503":
                    rec.requests[-1]["answer"] = kind
                    self.reply(503, b"unavailable", "text/plain")
                    return
                rec.requests[-1]["answer"] = kind
                if kind == "sleep":
                    time.sleep(b[1])
                    kind = "ok"
                if kind == "ok":
                    self.reply(200, b"", "application/x-protobuf")
                elif kind in ("500", "400", "503"):
                    self.reply(int(kind), b"backend says no", "text/plain")
                elif kind == "429":
                    self.reply(429, b"slow down", "text/plain", {"Retry-After": str(b[1])})
                elif kind == "huge":
                    self.reply(200, b"x" * (5 << 20), "application/x-protobuf")
                elif kind == "body":
                    self.reply(200, b[1], b[2])
                elif kind == "redirect":
                    self.reply(307, b"", "text/plain", {"Location": b[1]})
                elif kind == "cut":
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    self.wfile.write(b"0123456789")
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            def reply(self, code, body, ctype, extra=None):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

        self.handler = H
        self.port = port
        self.up()

    def up(self):
        """Listen (again) on self.port (any free port the first time when 0):
        a backend that comes back. Retries for 10 s while the port is still
        held (a listener just closed)."""
        for attempt in range(100):
            try:
                self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
                break
            except OSError:
                if attempt == 99:
                    raise
                time.sleep(0.1)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def down(self):
        """Stop listening (connections are refused until up())."""
        self.server.shutdown()
        self.server.server_close()

    close = down


@pytest.fixture
def receiver():
    made = []

    def make(*script, port=0):
        r = Receiver(script or ("ok",), port)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
