"""Starting the demo daemon in a test, and finding the temporary host it made."""

from __future__ import annotations

import re
from pathlib import Path


def start_demo(start_daemon, tmp_path: Path, *kind: str, port: int | None = None):
    """The demo daemon (``kind``: e.g. ``"bare-metal"``, none for Kubernetes), its temporary
    host made below ``tmp_path`` (the fixture's SIGKILL at teardown leaves it behind); on
    ``port`` where given."""
    (tmp_path / "tmp").mkdir()
    daemon = start_daemon("--demo", *kind, "--housekeeping-interval", "0.5",
                          env={"TMPDIR": str(tmp_path / "tmp")}, port=port)
    daemon.wait_ready()
    return daemon


def demo_root(daemon) -> Path:
    """The temporary host the demo says it removes at exit."""
    found = re.search(r"removes (/\S+?)\.\n", daemon.log())
    assert found, daemon.log()
    return Path(found.group(1))
