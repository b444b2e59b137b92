"""What the benchmarks share: where the repository and the results are, a free port, waiting
for a daemon's HTTP, the daemon of a source tree in a child process, and a process's CPU time."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready in {timeout} s")



class DaemonProc:
    """The daemon of source tree ``tree`` (this one by default) in a child process."""

    def __init__(self, args: list[str], workdir: Path, tree: Path = REPO):
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(tree), os.environ.get("PYTHONPATH")) if p))
        with open(workdir / f"daemon-{self.port}.log", "w") as log:  # the child keeps its own fd
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpustats", "--listen", f"127.0.0.1:{self.port}",
                 "--state-dir", str(workdir / f"state-{self.port}"), *args],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tree))
        self.ps = psutil.Process(self.proc.pid)
        wait_http(f"http://127.0.0.1:{self.port}/readyz")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def cpu_seconds(process: psutil.Process) -> float:
    """CPU time of every thread of ``process``, to the nanosecond where the kernel keeps
    schedstat (``cpu_times`` counts in 10 ms ticks: one tick in a 20 s window reads as
    1.8 s an hour)."""
    total, found = 0, False
    for path in Path(f"/proc/{process.pid}/task").glob("*/schedstat"):
        try:
            total += int(path.read_text().split()[0])
            found = True
        except (OSError, ValueError, IndexError):
            continue            # a thread that ended between listing and reading
    if found:
        return total / 1e9
    times = process.cpu_times()
    return times.user + times.system
