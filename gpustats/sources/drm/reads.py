"""The file-system reads of a DRM sweep, counted (the sweeper's ``calls``).

Values go through ``hostfs``'s bounded reads: a file that vanished, or that the kernel refuses
(EPERM while the GPU resets or suspends, EOPNOTSUPP, ENODATA: amdgpu_pm.c), reads as ``None``.
The process scan needs to tell "permission denied" apart, so it has raising variants.
"""

from __future__ import annotations

import itertools
import os
from typing import Callable

from gpustats.hostfs import INT_FILE_BYTES, parse_int, read_regular, read_text

FDINFO_BYTES = 65536          # an fdinfo is well under 4 KiB; far more is not one


class FsReads:
    """Counted reads. ``listdir`` and ``readlink`` stand in for ``os``'s in tests (a test
    running as root cannot be refused a directory by its mode)."""

    def __init__(self, *, listdir: Callable[[str], list[str]] = os.listdir,
                 readlink: Callable[[str], str] = os.readlink):
        self.calls = 0
        self._listdir = listdir
        self._readlink = readlink

    def text(self, path: str, max_bytes: int = INT_FILE_BYTES) -> str | None:
        self.calls += 1
        return read_text(path, max_bytes=max_bytes)

    def integer(self, path: str) -> int | None:
        """An integer attribute (``gpu_busy_percent``, ``power1_average``); ``None`` if absent,
        refused or not an integer."""
        return parse_int(self.text(path))

    def names(self, path: str) -> list[str]:
        """A directory's entries; ``[]`` when it is gone or cannot be listed."""
        try:
            return self.names_or_raise(path)
        except OSError:
            return []

    def names_or_raise(self, path: str, limit: int | None = None) -> list[str]:
        """A directory's entries, at most ``limit`` of them (read no further: a process may
        hold a million open files)."""
        self.calls += 1
        if limit is None:
            return self._listdir(path)
        if self._listdir is not os.listdir:
            return self._listdir(path)[:limit]
        with os.scandir(path) as entries:
            return [e.name for e in itertools.islice(entries, limit)]

    def link_or_raise(self, path: str) -> str:
        self.calls += 1
        return self._readlink(path)

    def link_name(self, path: str) -> str | None:
        """The last component of a link's target (``driver`` → ``amdgpu``); ``None`` if none."""
        try:
            return os.path.basename(self.link_or_raise(path)) or None
        except OSError:
            return None

    def data_or_raise(self, path: str, max_bytes: int = FDINFO_BYTES) -> bytes:
        """A file's bytes; ``OSError`` (``PermissionError`` among them) or ``UnsafeFile``."""
        self.calls += 1
        return read_regular(path, max_bytes=max_bytes)

    def is_dir(self, path: str) -> bool:
        self.calls += 1
        return os.path.isdir(path)
