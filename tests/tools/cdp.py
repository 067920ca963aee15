"""Drive Debian's headless Chromium over the DevTools protocol on a pipe
(--remote-debugging-pipe: no port, no npm, no downloaded browser).

    with Browser() as b:
        page = b.open("file:///tmp/f.html")
        page.eval("document.title")
        page.click(x, y)
        page.screenshot("out.png")
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-sync", "--mute-audio", "--hide-scrollbars"]


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, width=1280, height=800, timeout=60):
        self.width, self.height, self.timeout = width, height, timeout
        self.proc = None
        self.next_id = 0
        self.buf = b""
        self.events = []

    def __enter__(self):
        exe = chromium_path()
        if not exe:
            raise CDPError("chromium not found (install Debian's chromium: .ci/setup does)")
        self.profile = tempfile.mkdtemp(prefix="bf-chromium-")
        to_chrome_r, self.to_chrome_w = os.pipe()
        self.from_chrome_r, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        def setup():
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # avoid clobbering when they are 3/4
            a, b = os.dup2(a, 100), os.dup2(b, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)
        self.proc = subprocess.Popen(
            [exe] + FLAGS + ["--user-data-dir=" + self.profile, "--remote-debugging-pipe",
                             "--window-size=%d,%d" % (self.width, self.height), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=setup, pass_fds=(3, 4, to_chrome_r, from_chrome_w))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        return self

    def __exit__(self, *exc):
        try:
            if self.proc and self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=5)
                except Exception:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self.to_chrome_w, self.from_chrome_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def _read_message(self, deadline):
        import select
        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise CDPError("timed out waiting for Chromium")
            r, _, _ = select.select([self.from_chrome_r], [], [], left)
            if not r:
                continue
            chunk = os.read(self.from_chrome_r, 1 << 20)
            if not chunk:
                raise CDPError("Chromium closed the pipe (exit %s)" % self.proc.poll())
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=None):
        self.next_id += 1
        mid = self.next_id
        m = {"id": mid, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        os.write(self.to_chrome_w, json.dumps(m).encode() + b"\0")
        deadline = time.time() + (timeout or self.timeout)
        while True:
            r = self._read_message(deadline)
            if r.get("id") == mid:
                if "error" in r:
                    raise CDPError("%s: %s" % (method, r["error"]))
                return r.get("result", {})
            self.events.append(r)

    def wait_event(self, method, session=None, timeout=None):
        deadline = time.time() + (timeout or self.timeout)
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == method and (session is None or e.get("sessionId") == session):
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    def open(self, url):
        t = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": t, "flatten": True})["sessionId"]
        page = Page(self, s)
        for d in ("Page", "Runtime", "Network", "Log"):
            page.send(d + ".enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        page.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", s)
        return page


class Page:
    def __init__(self, browser, session):
        self.b, self.s = browser, session

    def send(self, method, params=None):
        return self.b.send(method, params, session=self.s)

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise CDPError("evaluate %r: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def click(self, x, y):
        for t in ("mouseMoved", "mousePressed", "mouseReleased"):
            p = {"type": t, "x": x, "y": y}
            if t != "mouseMoved":
                p.update(button="left", clickCount=1)
            self.send("Input.dispatchMouseEvent", p)

    def type_text(self, text):
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path, full_page=True):
        p = {"format": "png"}
        if full_page:
            # crop to what is drawn (the lowest visible element), not the whole viewport
            w, h = self.eval("""[document.documentElement.scrollWidth, Math.ceil(Math.max(...Array.from(
                document.body.querySelectorAll('*')).filter(e => e.offsetParent !== null || e.id === 'tip')
                .filter(e => getComputedStyle(e).display !== 'none')
                .map(e => e.getBoundingClientRect().bottom)) + 12)]""")
            p["clip"] = {"x": 0, "y": 0, "width": min(w, 1600), "height": min(h, 1400), "scale": 1}
            p["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", p)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def errors(self):
        """Script exceptions and console errors seen so far on this page."""
        out = []
        for e in self.b.events:
            if e.get("sessionId") != self.s:
                continue
            m = e.get("method")
            if m == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"].get("text", "exception"))
            elif m == "Runtime.consoleAPICalled" and e["params"].get("type") == "error":
                out.append("console.error")
            elif m == "Log.entryAdded" and e["params"]["entry"].get("level") == "error":
                out.append("log: " + e["params"]["entry"].get("text", ""))
        return out

    def requests(self):
        return [e["params"]["request"]["url"] for e in self.b.events
                if e.get("sessionId") == self.s and e.get("method") == "Network.requestWillBeSent"]
