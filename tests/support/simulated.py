"""The real daemon on the simulator over a fake host tree: the start-up end-to-end tests share."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import DaemonProcess
from tests.support.fakehost import write_scenario


def start_simulated(start_daemon, tmp_path: Path, scenario: dict | None,
                    host: tuple[Path, Path], *args: str, ready: bool = True,
                    env: dict[str, str] | None = None,
                    port: int | None = None) -> tuple[DaemonProcess, Path]:
    """Write ``scenario`` to ``tmp_path/s.yaml`` (``None`` keeps the file there) and start the
    daemon (the ``start_daemon`` fixture) simulating it over ``host`` (cgroup root, proc root)
    with ``args``; wait for readiness unless ``ready`` is False. Returns the daemon and the
    scenario path, which tests rewrite to change the GPUs."""
    path = tmp_path / "s.yaml"
    if scenario is not None:
        write_scenario(path, scenario)
    cgroup, proc = host
    daemon = start_daemon("--simulate", str(path), "--cgroup-root", str(cgroup),
                          "--proc-root", str(proc), *args, env=env, port=port)
    if ready:
        daemon.wait_ready()
    return daemon, path
