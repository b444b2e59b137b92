"""Which directories came or went, from a ctypes inotify watch (cgroupfs supports it)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import weakref
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class DirectoryEvent:
    """A directory named ``name`` came or went in the directory watched as ``watch``."""

    watch: int
    name: str


_EVENT_HEADER = struct.Struct("iIII")          # wd, mask, cookie, len (inotify(7))
_IN_ISDIR, _IN_Q_OVERFLOW, _IN_UNMOUNT = 0x40000000, 0x4000, 0x2000


def parse_inotify_events(data: bytes) -> list[DirectoryEvent] | None:
    """The directory events of a buffer of ``struct inotify_event``; ``None`` when the queue
    overflowed or a watched file system was unmounted (anything may have changed).

    Events about files, and ``IN_IGNORED`` (a watch gone with its directory), are left out:
    the directory's removal is the event of its parent. ``ValueError`` on a cut record.
    """
    events, offset = [], 0
    while offset < len(data):
        if offset + _EVENT_HEADER.size > len(data):
            raise ValueError("cut inotify event header")
        wd, mask, _, length = _EVENT_HEADER.unpack_from(data, offset)
        offset += _EVENT_HEADER.size
        if offset + length > len(data):
            raise ValueError("cut inotify event name")
        name = data[offset:offset + length].rstrip(b"\0")
        offset += length
        if mask & (_IN_Q_OVERFLOW | _IN_UNMOUNT):
            return None
        if mask & _IN_ISDIR and name:
            events.append(DirectoryEvent(wd, os.fsdecode(name)))
    return events


class DirectoryChanges:
    """Which directories were created, removed or renamed in the watched directories since
    the last ``events()``, from inotify (which cgroupfs supports: mkdir and rmdir of a
    cgroup are VFS operations).

    Watch a directory before listing it, so nothing made in between goes unseen. Without
    inotify, past the kernel's watch limit, or when the kernel's queue overflowed,
    ``events()`` is ``None``: the caller looks at everything, as it would without this.
    """

    _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
    _IN_ONLYDIR = 0x01000000
    _MASK = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_ONLYDIR

    def __init__(self) -> None:
        self._fd: int | None = None
        # libc's inotify_add_watch and inotify_rm_watch; set whenever _fd is
        self._add_watch: Callable[..., int] | None = None
        self._rm_watch: Callable[..., int] | None = None
        self.unavailable: str | None = None        # why events() is always None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, self._add_watch = libc.inotify_init1, libc.inotify_add_watch
            self._rm_watch = libc.inotify_rm_watch
        except (OSError, AttributeError) as exc:
            self.unavailable = f"no inotify: {exc}"
            return
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            self.unavailable = f"inotify_init1: {os.strerror(ctypes.get_errno())}"
        else:
            self._fd = fd
            self._closer = weakref.finalize(self, os.close, fd)   # when collected, unclosed

    def watch(self, directory: str) -> int | None:
        """The watch's number (the same for a directory watched twice); ``None`` when the
        directory is gone or nothing is watched any more."""
        if self._fd is None or self._add_watch is None:
            return None
        wd = self._add_watch(self._fd, os.fsencode(directory), self._MASK)
        if wd < 0:
            error = ctypes.get_errno()
            if error in (errno.ENOENT, errno.ENOTDIR):
                return None                   # gone before it was watched: not listed either
            self.close()
            self.unavailable = f"inotify_add_watch {directory}: {os.strerror(error)}"
            return None
        return wd

    def unwatch(self, wd: int) -> None:
        """Stops a watch; one already gone with its directory is no error."""
        if self._fd is not None and self._rm_watch is not None:
            self._rm_watch(self._fd, wd)

    def events(self) -> list[DirectoryEvent] | None:
        """What happened since the last call (the queue is drained); ``None``: look at all."""
        if self._fd is None:
            return None
        data = []
        try:
            while chunk := os.read(self._fd, 65536):
                data.append(chunk)
        except BlockingIOError:
            pass
        try:
            return parse_inotify_events(b"".join(data))
        except ValueError:
            return None            # the kernel hands whole events; not worth trusting else

    def close(self) -> None:
        if self._fd is not None:
            self._closer()
            self._fd = None
            self.unavailable = "closed"
