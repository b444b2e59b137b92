"""The real daemon in a subprocess on a loopback port, and plain HTTP GETs to it."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.paths import REPO_ROOT
from tests.support.waiting import poll

# The daemon's start-up line, which names the port it bound (the one asked for, or the kernel's
# pick for port 0).
SERVING = re.compile(r"serving on http://[^ ]*?:(\d+) ")
HEALTH = re.compile(r"health on http://[^ ]*?:(\d+)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, dict | str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as err:
        body = err.read().decode()
        status = err.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


class DaemonProcess:
    """``python -m gpustats`` in a subprocess. Without ``port`` it binds port 0 and the port the
    kernel gave it is read from the daemon's own "serving on" log line (no race with another
    process taking a port picked beforehand). ``wrapper``: a command the daemon runs under
    (``setpriv`` with some capabilities)."""

    _started = itertools.count(1)

    def __init__(self, args: list[str], tmp_path: Path, env: dict[str, str] | None = None,
                 port: int | None = None, wrapper: tuple[str, ...] = ()):
        self._port = port
        self.log_path = tmp_path / f"daemon-{next(self._started)}.log"
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(env or {})
        with open(self.log_path, "w") as log:     # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [*wrapper, sys.executable, "-m", "gpustats", "--listen", f"127.0.0.1:{port or 0}",
                 "--state-dir", str(tmp_path / "state"), *args],
                stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=str(tmp_path),
            )

    @property
    def port(self) -> int:
        """The data port: as given, or as the daemon says it bound it."""
        def said() -> int | None:
            found = SERVING.search(self.log())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:     # what a request to it would meet
                raise ConnectionRefusedError(
                    f"daemon exited {self.proc.returncode} before serving:\n{self.log()}")
            return None

        if self._port is None:
            self._port = poll(said, timeout=30, interval=0.05)
            if self._port is None:
                raise AssertionError(f"daemon never said its port:\n{self.log()}")
        return self._port

    @property
    def health_port(self) -> int:
        """The port of ``--health-listen`` as the daemon says it bound it (``:0`` works)."""
        _ = self.port                               # waits for the line that names both
        return int(HEALTH.search(self.log()).group(1))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, dict | str]:
        return http_get(self.base + path)

    def wait_ready(self, timeout: float = 20.0) -> dict:
        def ready() -> tuple[dict] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{self.log()}")
            try:
                status, body = self.get("/readyz")
            except OSError:
                return None
            return (body,) if status == 200 else None

        found = poll(ready, timeout=timeout, interval=0.1)
        if found is None:
            raise AssertionError(f"daemon not ready in {timeout}s:\n{self.log()}")
        return found[0]

    def sequence(self) -> int:
        """The sequence of the snapshot served now (``/readyz`` says it)."""
        status, body = self.get("/readyz")
        assert status == 200 and isinstance(body, dict), (status, body)
        return body["snapshotSequence"]

    def wait_ticks(self, ticks: int, timeout: float = 30.0) -> int:
        """Wait until ``ticks`` more snapshots were published (the daemon's own count, not a
        guess of how long ticks take); returns the sequence then served. A stale snapshot
        (``/readyz`` 503 while a tick is slow) is waited through like an old one."""
        def served() -> tuple[int] | None:
            status, body = self.get("/readyz")
            return (body["snapshotSequence"],) if status == 200 else None

        first = poll(served, timeout=timeout, interval=0.05)
        found = first and poll(lambda: (now := served()) and now[0] >= first[0] + ticks and now,
                               timeout=timeout, interval=0.05)
        if not found:
            raise AssertionError(f"{ticks} ticks not published in {timeout}s:\n{self.log()}")
        return found[0]

    def wait_for(self, predicate, timeout: float = 20.0, path: str = "/stats/summary"):
        """Poll ``path`` until ``predicate(body)`` is truthy; return that body. A connection
        error is retried like a false predicate (a daemon just resumed from SIGSTOP may reset
        one while it catches up) and named if the condition is never met."""
        last: list[object] = [None]

        def met() -> tuple[object] | None:
            try:
                status, last[0] = self.get(path)
            except OSError as exc:
                status, last[0] = 0, repr(exc)
            return (last[0],) if status == 200 and predicate(last[0]) else None

        found = poll(met, timeout=timeout, interval=0.1)
        if found is None:
            raise AssertionError(
                f"condition not met in {timeout}s; last body: {last[0]}\n{self.log()}")
        return found[0]

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def timed_get(port: int, path: str, timeout: float = 1.0) -> tuple[int, float]:
    """(status, seconds) of one request on a fresh connection; raises on timeout."""
    began = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - began
    finally:
        conn.close()
