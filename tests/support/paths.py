"""Where the repository and the test tools are."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def find_tool(name: str) -> str | None:
    """A command from this interpreter's environment first (the test venv), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)
