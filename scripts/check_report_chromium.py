#!/usr/bin/env python3
"""Open an HTML report in headless Chromium; fail on any console error, uncaught exception,
request that leaves the file system or sideways overflow; write a screenshot.

    python scripts/check_report_chromium.py out/                 # out/report.html
    python scripts/check_report_chromium.py out/report.html --screenshot shot.png --full-page

Chromium (Debian's ``/usr/bin/chromium``, or ``--chromium PATH`` / ``$CHROMIUM``) runs headless
with a fresh profile and is driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: it reads commands on fd 3 and writes replies and events on fd 4,
each message one JSON object ended by a NUL byte), with the standard library only. The check
enables the Runtime, Log, Network and Page domains, loads the ``file://`` URL, waits for the
load event plus a short settle time, and collects

* ``Runtime.consoleAPICalled`` of type ``error`` or ``assert`` (``console.error(...)``),
* ``Runtime.exceptionThrown`` (uncaught exceptions, syntax errors),
* ``Log.entryAdded`` of level ``error`` (failed loads, security errors),
* ``Network.requestWillBeSent`` for any URL that is not ``file:``, ``data:``, ``about:`` or
  ``blob:`` (a self-contained report fetches nothing);
* layout (:data:`LAYOUT_JS`, run in the page): the page itself must not scroll sideways at
  the viewport width, and every element wider than its box (a wide table) must sit in a
  container that scrolls sideways (``overflow-x: auto`` or ``scroll``).

Exit status: 0 clean (screenshot written), 1 problems found (each listed on stderr),
2 the check could not run (no Chromium, no file, protocol timeout).
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe"]
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome:", "devtools:")


#: Layout problems of the loaded page, one string each (see the module docstring).
LAYOUT_JS = r"""(function () {
  var out = [], doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth + 1) {
    out.push("layout: the page scrolls sideways (" + doc.scrollWidth + " px content in a "
             + window.innerWidth + " px window)");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (t) {
    var box = t.parentElement, style = getComputedStyle(box);
    if (t.scrollWidth > box.clientWidth + 1 && !/(auto|scroll)/.test(style.overflowX)) {
      out.push("layout: a table " + t.scrollWidth + " px wide overflows its " + box.tagName
               + " (" + box.clientWidth + " px) with no sideways scroll");
    }
  });
  return out;
})()"""


class CheckError(Exception):
    """The check could not run (exit status 2)."""


def _high_fd(fd: int) -> int:
    """``fd`` moved to a descriptor number >= 10 (the original is closed)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    """A headless Chromium spoken to over ``--remote-debugging-pipe``."""

    def __init__(self, chromium: str, timeout: float) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="npulab-chromium-")
        self.stderr = tempfile.TemporaryFile()
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Chromium's ends get numbers >= 10 so that placing them on 3 and 4 clobbers nothing.
        to_child_r, from_child_w = (_high_fd(fd) for fd in (to_child_r, from_child_w))
        def place_fds() -> None:  # in the child, before exec: Chromium's pipe ends on 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        # Python opens descriptors non-inheritable, so only 0-2 and the two dup2 copies (which
        # are inheritable) survive the exec.
        self.proc = subprocess.Popen(
            [chromium, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=place_fds, close_fds=False, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.stderr)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send a command and wait for its reply (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply is None:
                raise CheckError(f"Chromium did not answer {method} within {self.timeout:g} s"
                                 f"{self._stderr_tail()}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CheckError(f"{method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, seconds: float) -> bool:
        """Collect events until ``method`` arrives (True) or ``seconds`` pass (False)."""
        deadline = time.monotonic() + seconds
        while True:
            message = self._read(deadline)
            if message is None:
                return False
            if "method" in message:
                self.events.append(message)
                if message["method"] == method:
                    return True

    def drain(self, seconds: float) -> None:
        """Collect events for ``seconds``."""
        self.wait_event("\0never", seconds)

    def _read(self, deadline: float) -> dict | None:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise CheckError(f"Chromium exited (status {self.proc.poll()})"
                                 f"{self._stderr_tail()}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        lines = self.stderr.read().decode("utf-8", "replace").strip().splitlines()[-5:]
        return ("; Chromium said: " + " | ".join(lines)) if lines else ""

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    close = {"id": 0, "method": "Browser.close"}
                    os.write(self._to_child, json.dumps(close).encode() + b"\0")
                    self.proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)


def _text(args: list) -> str:
    out = []
    for a in args:
        if "value" in a:
            out.append(str(a["value"]))
        else:
            out.append(a.get("description") or a.get("type", "?"))
    return " ".join(out)


def problems_of(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions, error log entries and non-local requests among
    DevTools events, one line each."""
    found = []
    for ev in events:
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            found.append(f"console.{p['type']}: {_text(p.get('args', []))}")
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            what = (d.get("exception") or {}).get("description") or d.get("text", "exception")
            found.append(f"uncaught exception at line {d.get('lineNumber', 0) + 1}: "
                         f"{what.splitlines()[0] if what else what}")
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            text = f"{e.get('text', '')} {e.get('url', '')}".rstrip()
            found.append(f"log error ({e.get('source', '?')}): {text}")
        elif method == "Network.requestWillBeSent":
            url = p.get("request", {}).get("url", "")
            if not url.startswith(LOCAL_SCHEMES):
                found.append(f"external request: {url}")
    return found


def check(html: Path, screenshot: Path | None, *, chromium: str = CHROMIUM, width: int = 1280,
          height: int = 1000, full_page: bool = False, timeout: float = 30.0,
          settle: float = 0.5) -> list[str]:
    """Load ``html`` in headless Chromium; returns the problems found (empty: clean) and writes
    a PNG screenshot to ``screenshot``. Raises :class:`CheckError` if it cannot run."""
    if not os.access(chromium, os.X_OK):
        raise CheckError(f"{chromium}: Chromium not found (apt-get install chromium, or pass "
                         f"--chromium PATH)")
    if not html.is_file():
        raise CheckError(f"{html}: no such file")
    browser = Browser(chromium, timeout)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                     session=session)
        browser.events.clear()
        result = browser.send("Page.navigate", {"url": html.resolve().as_uri()}, session=session)
        if result.get("errorText"):
            raise CheckError(f"{html}: navigation failed: {result['errorText']}")
        if not browser.wait_event("Page.loadEventFired", timeout):
            raise CheckError(f"{html}: no load event within {timeout:g} s")
        browser.drain(settle)
        layout = browser.send("Runtime.evaluate", {"expression": LAYOUT_JS, "returnByValue": True},
                              session=session)["result"].get("value") or []
        problems = problems_of(browser.events)
        if screenshot is not None:
            params = {"format": "png"}
            if full_page:
                size = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                params.update(captureBeyondViewport=True,
                              clip={"x": 0, "y": 0, "width": size["width"],
                                    "height": min(size["height"], 16000), "scale": 1})
            shot = browser.send("Page.captureScreenshot", params, session=session)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        # Events that arrived while the screenshot was taken count too.
        return problems_of(browser.events) + list(layout)
    finally:
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Open an HTML report in headless Chromium; exit 1 on console errors, "
                    "uncaught exceptions, external requests or a page that overflows sideways "
                    "(a wide table outside a scroll container); write a screenshot.")
    parser.add_argument("path", metavar="DIR_OR_HTML",
                        help="a report directory (its report.html) or an HTML file")
    parser.add_argument("--screenshot", metavar="PNG",
                        help="screenshot file (default: report.png next to the HTML)")
    parser.add_argument("--full-page", action="store_true", help="capture the whole page")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", CHROMIUM),
                        help=f"Chromium binary (default $CHROMIUM or {CHROMIUM})")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per step (default 30)")
    args = parser.parse_args(argv)
    path = Path(args.path)
    html = path / "report.html" if path.is_dir() else path
    shot = Path(args.screenshot) if args.screenshot else html.with_suffix(".png")
    try:
        problems = check(html, shot, chromium=args.chromium, full_page=args.full_page,
                         timeout=args.timeout)
    except CheckError as exc:
        print(f"check_report_chromium: error: {exc}", file=sys.stderr)
        return 2
    if problems:
        print(f"check_report_chromium: {html}: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"check_report_chromium: {html}: no console errors; screenshot {shot} "
          f"({shot.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
