"""Injectable host roots and small read helpers that turn vanished files into ``None``;
files kept open between reads (``KeptFiles``) and directory-change watches
(``DirectoryChanges``, which say which directory changed) for what is read every few seconds.

sysfs, procfs and cgroupfs entries can disappear between listing and reading (a container
exits, a process ends); every reader here returns ``None`` for that instead of raising. The
trees are untrusted too: only regular files are read, non-blocking, up to a size cap and a
deadline (``read_regular``), so a FIFO or a huge sparse file cannot stall or bloat a tick.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import time
import weakref
from dataclasses import dataclass
from typing import Callable


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
MAX_FILE_BYTES = 4 * 1024 * 1024      # a cgroup or proc file is a few KB; more is not one
DEFAULT_DEADLINE_SECONDS = 1.0
INT_FILE_BYTES = 4096

# Why a bounded read gave up (the ``reason`` of UnsafeFile), as counted in collection errors.
NOT_REGULAR = "not_regular_file"
TOO_LARGE = "too_large"
DEADLINE = "deadline"


class UnsafeFile(Exception):
    """A file that must not be read as data: not a regular file, too large, or too slow."""

    def __init__(self, path: str, reason: str, detail: str):
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.reason = reason


def read_regular(path: str, *, max_bytes: int = MAX_FILE_BYTES,
                 deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> bytes:
    """The bytes of a regular file, read with every bound a hostile tree needs.

    Opened non-blocking (a FIFO does not wait for a writer) and checked with ``fstat`` to be a
    regular file before a byte is read (FIFOs, sockets, devices: ``UnsafeFile``); at most
    ``max_bytes`` are read (more: ``UnsafeFile``, whatever the file's real or sparse size); a
    read still going after ``deadline_seconds`` gives up (``UnsafeFile``). A missing or
    unreadable file raises the ``OSError``. Kernel files (sysfs, procfs, cgroupfs) are regular
    files whose size reads as 0 or 4096, so the size is never trusted.
    """
    fd = _open_regular(path)
    try:
        return _read_bounded(fd, path, max_bytes, deadline_seconds, clock, positional=False)
    finally:
        os.close(fd)


def _open_regular(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(path, NOT_REGULAR, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_bounded(fd: int, path: str, max_bytes: int, deadline_seconds: float,
                  clock: Callable[[], float], *, positional: bool) -> bytes:
    """The whole file from offset 0 (``positional``: with pread, whatever the fd's offset)."""
    deadline = clock() + deadline_seconds
    chunks, size = [], 0
    while True:
        wanted = min(_CHUNK, max_bytes + 1 - size)
        chunk = os.pread(fd, wanted, size) if positional else os.read(fd, wanted)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise UnsafeFile(path, TOO_LARGE, f"larger than {max_bytes} bytes")
        if len(chunk) < wanted:
            break         # a short read of a regular file is its end: no empty read after
        if clock() > deadline:
            raise UnsafeFile(path, DEADLINE, f"still reading after {deadline_seconds} s")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


Reporter = Callable[[UnsafeFile], None]


def _read_plain(path: str, report: Reporter | None, max_bytes: int) -> bytes | None:
    """``read_regular``'s bytes; ``None`` (reported when unsafe) where ``read_text`` gives it."""
    try:
        return read_regular(path, max_bytes=max_bytes)
    except UnsafeFile as exc:
        if report is not None:
            report(exc)
        return None
    except OSError:
        # Vanished, or ENODEV/ESRCH and friends from kernel files whose object went away.
        return None


def read_text(path: str | None, report: Reporter | None = None, *,
              max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """File contents, or ``None`` when it does not exist (any more) or cannot be read.

    Plain ``os.read`` rather than a text-mode ``open``: kernel files are small and read every
    tick, and the buffered text layer costs more than the read itself. A file that is not safe
    to read (see ``read_regular``) is ``None`` too, and handed to ``report`` when given. No
    path (a hierarchy that is not mounted) reads as ``None``.
    """
    if path is None:
        return None
    data = _read_plain(path, report, max_bytes)
    return data.decode("utf-8", "replace") if data is not None else None


def read_int(path: str | None, report: Reporter | None = None) -> int | None:
    """An integer file (``memory.current``, ``cpuacct.usage``); ``None`` if absent or not an int."""
    return _as_int(read_text(path, report, max_bytes=INT_FILE_BYTES))


def _as_int(text: str | bytes | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)            # surrounding whitespace (the newline) is allowed; bytes too
    except ValueError:
        return None


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
                whole = _CHUNK if max_bytes >= _CHUNK else max_bytes + 1
                data = os.pread(fd, whole, 0)
                if len(data) < whole:      # all of it in one read: the usual case
                    return data
            elif len(self._kept) < self.capacity:
                fd = _open_regular(path)
                self._kept[path] = (fd, group)
            else:
                return _read_plain(path, report, max_bytes)
            return _read_bounded(fd, path, max_bytes, DEFAULT_DEADLINE_SECONDS, time.monotonic,
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
        return _as_int(self.read_bytes(path, group, report, max_bytes=INT_FILE_BYTES))

    def keep_only(self, groups) -> None:
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
        self._add_watch = self._rm_watch = None
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
        if self._fd is None:
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
        if self._fd is not None:
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
