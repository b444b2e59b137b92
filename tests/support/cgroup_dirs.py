"""Making real cgroup directories in a test, each one made recorded for the clean-up."""

from __future__ import annotations

from pathlib import Path

from tests.support.waiting import poll


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


def remove_when_left(cgroup: Path, timeout: float = 5.0) -> bool:
    """Remove ``cgroup`` once the tasks killed in it have left it (shortly after their death);
    whether it is gone within ``timeout`` seconds."""
    def removed() -> bool:
        try:
            cgroup.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True
    return bool(poll(removed, timeout=timeout, interval=0.1))
