"""Small kernel files kept open between reads, for what is read every few seconds."""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Container

from gpustats.hostfs import (
    CHUNK_BYTES, DEFAULT_DEADLINE_SECONDS, INT_FILE_BYTES, MAX_FILE_BYTES, Reporter, UnsafeFile,
    open_regular, parse_int, read_bounded, read_bytes,
)


class KeptFiles:
    """Small kernel files re-read for as long as they exist (cgroup stat files).

    Each is opened once, with ``read_regular``'s checks, then re-read with ``pread`` from
    offset 0, which makes a kernel file produce its contents afresh: the open and close, most
    of a small read's cost, are paid once. When the kernel object goes away (a cgroup is
    removed) the kept descriptor answers ENODEV: it is closed and the file reads as gone. Each
    file belongs to a group (its cgroup directory): ``keep_only`` closes those of groups no
    longer seen. At most ``capacity`` descriptors are kept; past that, files are read the plain
    way.
    """

    def __init__(self, capacity: int):
        self.capacity = max(0, capacity)
        self._kept: dict[str, tuple[int, str]] = {}       # path -> (fd, group)
        weakref.finalize(self, _close_kept, self._kept)   # one never closed: when collected

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, path: str) -> bool:
        return path in self._kept

    def read_bytes(self, path: str | None, group: str, report: Reporter | None = None, *,
                   max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
        """As ``read_text``, through a kept descriptor, undecoded."""
        if path is None:
            return None
        kept = self._kept.get(path)
        try:
            if kept is not None:
                fd = kept[0]
                whole = CHUNK_BYTES if max_bytes >= CHUNK_BYTES else max_bytes + 1
                data = os.pread(fd, whole, 0)
                if len(data) < whole:      # all of it in one read: the usual case
                    return data
            elif len(self._kept) < self.capacity:
                fd = open_regular(path)
                self._kept[path] = (fd, group)
            else:
                return read_bytes(path, report, max_bytes)
            return read_bounded(fd, path, max_bytes, DEFAULT_DEADLINE_SECONDS, time.monotonic,
                                 positional=True)
        except UnsafeFile as exc:
            self._close(path)
            if report is not None:
                report(exc)
            return None
        except OSError:
            self._close(path)        # gone (ENODEV from a removed cgroup), or never there
            return None

    def read_text(self, path: str | None, group: str, report: Reporter | None = None, *,
                  max_bytes: int = MAX_FILE_BYTES) -> str | None:
        """As ``read_text``, through a kept descriptor."""
        data = self.read_bytes(path, group, report, max_bytes=max_bytes)
        return data.decode("utf-8", "replace") if data is not None else None

    def read_int(self, path: str | None, group: str,
                 report: Reporter | None = None) -> int | None:
        """As ``read_int``, through a kept descriptor."""
        return parse_int(self.read_bytes(path, group, report, max_bytes=INT_FILE_BYTES))

    def keep_only(self, groups: Container[object]) -> None:
        """Closes the files of every group not in ``groups``."""
        for path in [p for p, (_, group) in self._kept.items() if group not in groups]:
            self._close(path)

    def close(self) -> None:
        _close_kept(self._kept)

    def _close(self, path: str) -> None:
        kept = self._kept.pop(path, None)
        if kept is not None:
            os.close(kept[0])


def _close_kept(kept: dict[str, tuple[int, str]]) -> None:
    for fd, _ in kept.values():
        os.close(fd)
    kept.clear()
