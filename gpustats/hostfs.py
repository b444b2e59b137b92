"""Injectable host roots and small read helpers that turn vanished files into ``None``.

sysfs, procfs and cgroupfs entries can disappear between listing and reading (a container
exits, a process ends); every reader here returns ``None`` for that instead of raising. The
trees are untrusted too: only regular files are read, non-blocking, up to a size cap and a
deadline (``read_regular``), so a FIFO or a huge sparse file cannot stall or bloat a tick.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class HostRoots:
    sysfs: str = "/sys"
    proc: str = "/proc"
    cgroup: str = "/sys/fs/cgroup"
    host: str = "/"          # the host's root filesystem (``/etc/passwd``, runtimes' metadata)

    def sys_path(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def proc_path(self, *parts: str) -> str:
        return os.path.join(self.proc, *(str(p) for p in parts))

    def cgroup_path(self, *parts: str) -> str:
        return os.path.join(self.cgroup, *(p.lstrip("/") for p in parts))

    def host_path(self, *parts: str) -> str:
        return os.path.join(self.host, *(p.lstrip("/") for p in parts))

    def absent(self) -> tuple[str, ...]:
        """One line for each root that is no directory (a mistyped path): read as it is, it
        would show a host without GPUs, processes or tenants, and nothing would say why."""
        return tuple(f"{flag} {path} is not a directory: {what}"
                     for flag, path, what in (
                         ("--sysfs-root", self.sysfs, "no GPU on the PCI bus, nor any device "
                          "value, can be read below it"),
                         ("--proc-root", self.proc, "no GPU process, nor its tenant, can be "
                          "read below it"),
                         ("--cgroup-root", self.cgroup, "no tenant's CPU or memory can be read "
                          "below it"),
                         ("--host-root", self.host, "no user or container name can be read "
                          "below it"))
                     if not os.path.isdir(path))


CHUNK_BYTES = 65536
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
    fd = open_regular(path)
    try:
        return read_bounded(fd, path, max_bytes, deadline_seconds, clock, positional=False)
    finally:
        os.close(fd)


def require_regular(path: str, *, max_bytes: int = MAX_FILE_BYTES) -> None:
    """``UnsafeFile`` unless ``path`` is a regular file of at most ``max_bytes`` (by its size).

    For files a library opens itself (psutil, with a plain blocking ``open``): a FIFO must not
    be opened at all and a huge file not read. Kernel files report 0 or 4096 bytes, so the
    size only catches what is certainly too large. ``OSError`` when it cannot be looked at.
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFile(path, NOT_REGULAR, "not a regular file")
    if info.st_size > max_bytes:
        raise UnsafeFile(path, TOO_LARGE, f"larger than {max_bytes} bytes")


def open_regular(path: str) -> int:
    """A descriptor of ``path``, opened non-blocking; ``UnsafeFile`` if not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(path, NOT_REGULAR, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(fd: int, path: str, max_bytes: int, deadline_seconds: float,
                 clock: Callable[[], float], *, positional: bool) -> bytes:
    """The whole file from offset 0 (``positional``: with pread, whatever the fd's offset)."""
    deadline = clock() + deadline_seconds
    chunks, size = [], 0
    while True:
        wanted = min(CHUNK_BYTES, max_bytes + 1 - size)
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


def read_bytes(path: str, report: Reporter | None, max_bytes: int) -> bytes | None:
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
    data = read_bytes(path, report, max_bytes)
    return data.decode("utf-8", "replace") if data is not None else None


def read_int(path: str | None, report: Reporter | None = None) -> int | None:
    """An integer file (``memory.current``, ``cpuacct.usage``); ``None`` if absent or not an int."""
    return parse_int(read_text(path, report, max_bytes=INT_FILE_BYTES))


def parse_int(text: str | bytes | None) -> int | None:
    """An integer file's contents as an int; ``None`` if absent or not an int."""
    if text is None:
        return None
    try:
        return int(text)            # surrounding whitespace (the newline) is allowed; bytes too
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
