"""Real-GPU checks: skipped unless NVML loads and a GPU answers."""

from __future__ import annotations

import pytest


def _nvml_available() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - any failure means "no real GPU here"
        return f"NVML cannot load: {exc}"
    if count == 0:
        return "NVML loaded but reports no GPU"
    return None


_REASON = _nvml_available()


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    skip = pytest.mark.skip(reason=_REASON)
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture
def real_daemon(tmp_path):
    """An in-process daemon on the real NVML (no simulator), ticking on demand."""
    from gpustats.cli import Daemon
    from gpustats.config import build_arg_parser, resolve

    args = build_arg_parser().parse_args(["--state-dir", str(tmp_path / "state"),
                                          "--pod-resources-socket", "", "--runtime-socket", ""])
    daemon = Daemon(resolve(args, {}))
    yield daemon
    daemon.close()
