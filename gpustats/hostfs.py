"""Injectable host roots and small read helpers that turn vanished files into ``None``.

sysfs, procfs and cgroupfs entries can disappear between listing and reading (a container
exits, a process ends); every reader here returns ``None`` for that instead of raising.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class HostRoots:
    sysfs: str = "/sys"
    proc: str = "/proc"
    cgroup: str = "/sys/fs/cgroup"

    def sys_path(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def proc_path(self, *parts: str) -> str:
        return os.path.join(self.proc, *(str(p) for p in parts))

    def cgroup_path(self, *parts: str) -> str:
        return os.path.join(self.cgroup, *(p.lstrip("/") for p in parts))


_CHUNK = 65536


def read_text(path: str) -> str | None:
    """File contents, or ``None`` when it does not exist (any more) or cannot be read.

    Plain ``os.read`` rather than a text-mode ``open``: kernel files are small and read every
    tick, and the buffered text layer costs more than the read itself.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < _CHUNK:
                break
    except OSError:
        # ENODEV/ESRCH and friends from kernel files whose object went away mid-read.
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def read_int(path: str) -> int | None:
    """An integer file (``memory.current``, ``cpuacct.usage``); ``None`` if absent or not an int."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def read_boot_id(roots: HostRoots) -> str | None:
    """This boot's random id (``/proc/sys/kernel/random/boot_id``); ``None`` when unknown."""
    text = read_text(roots.proc_path("sys", "kernel", "random", "boot_id"))
    return text.strip() or None if text is not None else None


def list_dir(path: str) -> list[str]:
    """Entry names, or ``[]`` when the directory vanished or cannot be listed."""
    try:
        return os.listdir(path)
    except OSError:
        return []
