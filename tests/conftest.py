"""Shared fixtures: a running daemon in a subprocess, fake sysfs trees, scenario files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


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
    """``python -m gpustats`` in a subprocess on a free loopback port."""

    def __init__(self, args: list[str], tmp_path: Path, env: dict[str, str] | None = None,
                 port: int | None = None):
        self.port = port or free_port()
        self.log_path = tmp_path / f"daemon-{self.port}.log"
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(env or {})
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpustats", "--listen", f"127.0.0.1:{self.port}",
             "--state-dir", str(tmp_path / "state"), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=full_env, cwd=str(tmp_path),
        )

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, dict | str]:
        return http_get(self.base + path)

    def wait_ready(self, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{self.log()}")
            try:
                status, body = self.get("/readyz")
                if status == 200:
                    return body
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"daemon not ready in {timeout}s:\n{self.log()}")

    def wait_for(self, predicate, timeout: float = 20.0, path: str = "/stats/summary"):
        """Poll ``path`` until ``predicate(body)`` is truthy; return that body."""
        deadline = time.monotonic() + timeout
        body = None
        while time.monotonic() < deadline:
            status, body = self.get(path)
            if status == 200 and predicate(body):
                return body
            time.sleep(0.1)
        raise AssertionError(f"condition not met in {timeout}s; last body: {body}\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def start_daemon(tmp_path):
    started: list[DaemonProcess] = []

    def _start(*args: str, env: dict[str, str] | None = None,
               port: int | None = None) -> DaemonProcess:
        daemon = DaemonProcess(list(args), tmp_path, env, port)
        started.append(daemon)
        return daemon

    yield _start
    for daemon in started:
        daemon.stop(signal.SIGKILL)


@pytest.fixture
def in_process_daemon(tmp_path):
    """Daemons built in this process from flags (state in ``tmp_path``, no kubelet or runtime
    socket unless given), for tests that drive ticks by hand; closed at teardown."""
    import psutil

    from gpustats.cli import Daemon
    from gpustats.config import build_arg_parser, resolve

    made = []
    proc_root = psutil.PROCFS_PATH       # a daemon points psutil at its --proc-root

    def _make(*args: str):
        argv = ["--state-dir", str(tmp_path / "state"),
                "--pod-resources-socket", "", "--runtime-socket", "", *args]
        daemon = Daemon(resolve(build_arg_parser().parse_args(argv), {}))
        made.append(daemon)
        return daemon

    yield _make
    for daemon in made:
        daemon.close()
    psutil.PROCFS_PATH = proc_root


def open_descriptors() -> set[str]:
    """This process's open file descriptors (their numbers)."""
    return set(os.listdir("/proc/self/fd"))


def make_pci_device(sysfs: Path, address: str, vendor: str = "0x10de",
                    pci_class: str = "0x030200", device: str = "0x2330") -> None:
    d = sysfs / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True, exist_ok=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(pci_class + "\n")
    (d / "device").write_text(device + "\n")


@pytest.fixture
def fake_sysfs(tmp_path) -> Path:
    """A sysfs tree with one NVIDIA 3D controller and one non-GPU device."""
    root = tmp_path / "sys"
    make_pci_device(root, "0000:3b:00.0")
    make_pci_device(root, "0000:00:1f.0", vendor="0x8086", pci_class="0x060100")
    return root


def find_tool(name: str) -> str | None:
    """A command from this interpreter's environment first (the test venv), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    import shutil
    return shutil.which(name)


@pytest.fixture(scope="session")
def built_image(tmp_path_factory):
    """The container image, built once per session for every test that needs it (skips where
    podman cannot build or run it here; tests/support/image_build.py)."""
    from tests.support.image_build import build_or_skip
    return build_or_skip(tmp_path_factory.mktemp("image"), REPO_ROOT)
