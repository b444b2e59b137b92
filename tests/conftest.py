"""Shared fixtures: a running daemon in a subprocess, fake sysfs trees, scenario files; and
the suite's two tiers.

The fast tier (``python -m pytest``) runs the unit, property and in-process tests. The
end-to-end tier holds every test that starts a daemon in a subprocess (the ``start_daemon``
fixture), builds or runs the image, or makes real cgroups, and the modules of
``END_TO_END_MODULES`` (daemons, browsers, containers and systemd started their own way): they
run with ``--e2e`` (or ``GPUSTATS_E2E=1``), and ``-m e2e`` runs them alone.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support import kubelet_go
from tests.support.daemon import DaemonProcess
from tests.support.fakehost import make_pci_device
from tests.support.paths import REPO_ROOT

# The Go decoder of the kubelet's types (tests/support/kubelet_go.py), shared here so the modules
# that decode bodies ask for it by name rather than import it.
kubelet_decoder = kubelet_go.kubelet_decoder


@pytest.fixture
def start_daemon(tmp_path):
    started: list[DaemonProcess] = []

    def _start(*args: str, env: dict[str, str] | None = None,
               port: int | None = None, wrapper: tuple[str, ...] = ()) -> DaemonProcess:
        daemon = DaemonProcess(list(args), tmp_path, env, port, wrapper)
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
def installed_nvml(tmp_path):
    """Installs the fake NVML for a scenario (a dict, written to ``tmp_path``) and
    initialises pynvml: ``(simulator, scenario path)``; every one uninstalled at teardown."""
    import pynvml

    from gpustats.simulator import SimulatedNvml
    from tests.support.fakehost import write_scenario
    sims = []

    def _install(scenario: dict, **kw):
        path = tmp_path / f"s{len(sims)}.yaml"
        write_scenario(path, scenario)
        sim = SimulatedNvml(str(path), **kw)
        sim.install()
        sims.append(sim)
        pynvml.nvmlInit()
        return sim, path

    yield _install
    for sim in reversed(sims):
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        sim.uninstall()


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


END_TO_END_FIXTURES = frozenset({"start_daemon", "built_image"})
# Modules whose tests start daemons, browsers, containers or systemd without the fixtures.
END_TO_END_MODULES = frozenset({
    "test_chaos_short", "test_containerd_cri", "test_page_chromium", "test_registry_roundtrip",
    "test_container_image", "test_systemd_boot", "test_cli_startup",
    "test_cli_once", "test_packaging", "test_servicemonitor_prometheus", "test_prometheus_server",
    "test_deploy_artifacts", "test_nvml_load_retry", "test_sdnotify", "test_hostile_pipelining",
    "test_hostile_http", "test_stalls", "test_wall_clock_steps", "test_bench_real",
    "test_prometheus_dcgm_shared", "test_prometheus_dcgm_compat", "test_soak_short",
})


def pytest_addoption(parser):
    parser.addoption("--e2e", action="store_true",
                     help="also run the end-to-end tier (daemons in subprocesses, real cgroups, "
                          "containers, browsers, systemd, chaos); env GPUSTATS_E2E=1")


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: the end-to-end tier (run with --e2e)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())) \
                or module in END_TO_END_MODULES or item.get_closest_marker("cgroups"):
            item.add_marker(pytest.mark.e2e)
    if config.getoption("--e2e") or os.environ.get("GPUSTATS_E2E") \
            or "e2e" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="end-to-end tier: run with --e2e")
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker(skip)

