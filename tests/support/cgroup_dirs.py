"""Making real cgroup directories in a test, each one made recorded for the clean-up."""

from __future__ import annotations

from pathlib import Path


def make_recorded(path: Path, created: list[Path]) -> Path:
    """``path`` and each missing parent made, and appended to ``created`` (outermost first,
    so removing in reverse length order removes only what the test made)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir()
        created.append(d)
    return path
