"""A small client of the Chrome DevTools Protocol for the browser tests: starts Debian's
headless Chromium on a page, with every network request blocked and recorded, collects
console errors, evaluates expressions, moves and clicks the mouse, takes screenshots."""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import websocket  # websocket-client


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """Headless Chromium showing one page; `requests` lists every request the page made
    after loading its own file, `errors` every console error and uncaught exception."""

    def __init__(self, width=1400, height=1000):
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="asa-chromium-")
        self.proc = subprocess.Popen(
            [chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.ws = websocket.create_connection(self._page_socket(), timeout=60)
        self.next_id = 0
        self.events = []
        self.requests, self.errors = [], []
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        # every request is intercepted: the page's own file goes on, anything else fails
        self.call("Fetch.enable", patterns=[{"urlPattern": "*"}])
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _page_socket(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json") as r:
                    pages = [p for p in json.load(r) if p["type"] == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("Chromium did not start")

    def call(self, method, **params):
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mine:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Fetch.requestPaused":
            url = params["request"]["url"]
            if url == self.allowed:
                self.call("Fetch.continueRequest", requestId=params["requestId"])
            else:
                self.requests.append(url)
                self.call("Fetch.failRequest", requestId=params["requestId"], errorReason="BlockedByClient")
        elif method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("text", "") + " " +
                               str(params["exceptionDetails"].get("exception", {}).get("description", "")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])

    def open(self, url):
        self.allowed = url
        self.call("Page.navigate", url=url)

    def pump(self, seconds):
        """Handles events for `seconds`."""
        deadline = time.time() + seconds
        self.ws.settimeout(0.05)
        try:
            while time.time() < deadline:
                try:
                    self._event(json.loads(self.ws.recv()))
                except websocket.WebSocketTimeoutException:
                    pass
        finally:
            self.ws.settimeout(60)

    def eval(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                value = self.eval(expression)
            except RuntimeError as e:  # the page is still loading
                value, last = None, e
            if value:
                return value
            self.pump(0.1)
        raise TimeoutError(f"{expression} (last error: {last})")

    def mouse(self, kind, x, y):
        params = dict(type=kind, x=x, y=y, button="left" if kind != "mouseMoved" else "none", clickCount=1)
        self.call("Input.dispatchMouseEvent", **params)

    def click(self, x, y):
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def screenshot(self, path, clip=None):
        params = {"format": "png"}
        if clip:
            params["clip"] = dict(clip, scale=1)
        data = self.call("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
