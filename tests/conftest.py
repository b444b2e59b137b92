"""Shared fixtures: a running daemon in a subprocess, fake sysfs trees, scenario files."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.fakehost import make_pci_device
from tests.support.paths import REPO_ROOT


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


@pytest.fixture
def fake_sysfs(tmp_path) -> Path:
    """A sysfs tree with one NVIDIA 3D controller and one non-GPU device."""
    root = tmp_path / "sys"
    make_pci_device(root, "0000:3b:00.0")
    make_pci_device(root, "0000:00:1f.0", vendor="0x8086", pci_class="0x060100")
    return root


@pytest.fixture(scope="session")
def built_image(tmp_path_factory):
    """The container image, built once per session for every test that needs it (skips where
    podman cannot build or run it here; tests/support/image_build.py)."""
    from tests.support.image_build import build_or_skip
    return build_or_skip(tmp_path_factory.mktemp("image"), REPO_ROOT)
