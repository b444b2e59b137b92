"""A real headless Chromium for tests: its path (or a skip naming why it cannot run here) and
the flags it runs with; and ``Browser``, a page driven over the DevTools protocol (through
``--remote-debugging-pipe``: no port, no extra package) for checks a DOM dump cannot make:
the layout at a given width, and the data the page's script drew its charts from."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

import pytest

from tests.support.waiting import poll

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--hide-scrollbars", "--mute-audio")


def chromium() -> str:
    """The browser's path, or a skip naming why it cannot run here."""
    binary = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if binary is None:
        pytest.skip("Chromium is not installed (Debian package 'chromium')")
    try:
        probe = subprocess.run([binary, *HEADLESS, "--dump-dom", "data:text/html,<p>ok</p>"],
                               capture_output=True, text=True, timeout=90)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"Chromium cannot run here: {exc}")
    if "<p>ok</p>" not in probe.stdout:
        pytest.skip(f"Chromium cannot run here: {probe.stderr.strip()[-300:]}")
    return binary


class Browser:
    """One headless Chromium page of ``width`` × ``height`` CSS pixels, driven over the
    DevTools protocol on a pipe (the browser reads commands on its fd 3, answers on fd 4).

    ``evaluate`` runs an expression in the page (DevTools is not bound by the page's Content
    Security Policy, so nothing is added to the page for it) and returns its JSON value."""

    def __init__(self, binary: str, width: int, height: int, timeout: float = 60.0) -> None:
        self.timeout = timeout
        for attempt in (1, 2):
            try:
                self._start(binary, width, height)
                return
            except RuntimeError:
                # Chromium gone before it answered (seen once on a loaded machine): once more.
                if attempt == 2 or self._process.poll() is None:
                    raise

    def _start(self, binary: str, width: int, height: int) -> None:
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def pipes_as_3_and_4() -> None:           # in the child, before it execs
            # Through fds above 4 first: a pipe end already at 3 or 4 is not overwritten,
            # and dup2 onto a different fd leaves the copy open across exec.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_read, answers_write)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        # A file, not a pipe (a full pipe would stall the browser); closed by close().
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            [binary, *HEADLESS, "--remote-debugging-pipe", f"--window-size={width},{height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            pass_fds=(3, 4), preexec_fn=pipes_as_3_and_4)
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        try:
            targets = self.send("Target.getTargets")["targetInfos"]
            page = next(t["targetId"] for t in targets if t["type"] == "page")
            self._session = self.send("Target.attachToTarget",
                                      {"targetId": page, "flatten": True})["sessionId"]
            # Headless windows are at least 500 px wide: the page's viewport is set instead.
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1,
                       "mobile": False})
        except BaseException:
            self.close()
            raise

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        try:
            os.write(self._commands, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"Chromium exited ({self._process.poll()}) before {method}: "
                               f"{self.log()}") from None
        return self._answer(self._next_id, method)

    def _answer(self, wanted: int, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if message.get("id") == wanted:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message["result"]
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._answers], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"Chromium did not answer {method} in {self.timeout} s")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe during {method}: {self.log()}")
            self._buffer += chunk

    def log(self) -> str:
        """The end of what the browser printed."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def open(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Evaluate ``expression`` until it is truthy; its value."""
        def value() -> Any:
            try:
                return self.evaluate(expression)
            except RuntimeError:             # the page still loading: no context to run in
                return None

        found = poll(value, timeout=timeout, interval=0.2)
        if not found:
            raise TimeoutError(f"still false after {timeout} s: {expression}")
        return found

    def screenshot(self) -> bytes:
        """The whole page as a PNG, at the viewport's width."""
        shot = self.send("Page.captureScreenshot", {"format": "png",
                                                    "captureBeyondViewport": True})
        return base64.b64decode(shot["data"])

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass                     # gone already: killed below if not
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()
        for fd in (self._commands, self._answers):
            try:
                os.close(fd)
            except OSError:
                pass                 # closed already

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
