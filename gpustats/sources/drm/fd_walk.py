"""The DRM files one process holds, found at a bounded cost: its fd links walked only when its
fd table may have changed, each client's fdinfo read once however many fds show it.

A walk reads ``<proc>/<pid>/fd/<fd>`` links (at most ``MAX_FDS_PER_PID`` of them) and, for
those naming ``/dev/dri/card<N>`` or ``/dev/dri/renderD<N>``, the ``fdinfo/<fd>`` (at most
``MAX_DRM_FILES_PER_PID``: a process does not need more, and each costs a read). What it found
is remembered, one fd per client (a dup'ed fd shows the same ``drm-client-id``), and the next
reads of the process read those fdinfo files only, until the kernel tells that its fd table
may have changed:

- where the kernel lists the device's clients (``debugfs.py``): the clients it lists under the
  process's tgid changed. The walk then stops as soon as it found as many clients on each node
  as are listed (a dup attack of 4,096 copies of one fd costs a few reads, not 8,192);
- else: the size ``stat`` gives ``<proc>/<pid>/fd``, the number of open files since Linux 6.2
  (fs/proc/fd.c ``proc_fd_getattr``), changed, or is not told (0); the same number of files
  may hide one closed and another opened, so the scan's periodic full rescans force walks;
- and whenever a remembered fd no longer shows its client, or a walk is forced.

A refusal (permission denied, the caller lacks ptrace access) raises ``Refused``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Callable

from gpustats.hostfs import UnsafeFile
from gpustats.sources.drm.fdinfo import DrmFdinfo, parse_fdinfo
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.proc_access import READ_FD, READ_FDINFO

log = logging.getLogger(__name__)

DRM_LINK = re.compile(r"/dev/dri/(?:card|renderD)(\d+)")
# The open files looked at per process: a GPU process opens /dev/dri early, and a server
# holding a million sockets costs a million link reads a walk otherwise.
MAX_FDS_PER_PID = 4096
MAX_DRM_FILES_PER_PID = 64
WALK_STEP = 256                          # links read between two looks at the budget
REFUSED_FD = READ_FD                     # listing <pid>/fd or reading one of its links
REFUSED_FDINFO = READ_FDINFO

Listed = tuple[tuple[int, "int | None"], ...]   # a tgid's (minor, client ID) as listed, sorted


class Deferred(Exception):
    """The budget ran out in the middle of the process's walk: it goes on next time."""


class Refused(Exception):
    """The kernel refused to show one of the process's files (``kind``: REFUSED_*)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True)
class DrmFile:
    fd: str
    minor: int | None
    info: DrmFdinfo


@dataclass
class _Memo:
    fd_count: int                                  # the fd directory's size at the walk
    listed: Listed | None                          # what the kernel listed at the walk
    fds: list[tuple[str, int]] = field(default_factory=list)   # one (fd, minor) a client


@dataclass
class _Walk:
    """A walk in progress: the fds listed when it began, how far it got, what it found."""

    fds: list[str]
    listed: Listed | None
    fd_count: int
    wanted: dict[int, int] | None
    at: int = 0
    drm_reads: int = 0
    found: dict[tuple[object, ...], DrmFile] = field(default_factory=dict)


def client_key(info: DrmFdinfo, pid: int, fd: str) -> tuple[object, ...]:
    """The client's identity: its ID (with its device: IDs may be per device); a driver that
    prints none gets one client per (PID, fd)."""
    return (info.pdev, info.client_id) if info.client_id is not None else (info.pdev, pid, fd)


class FdWalker:
    """Finds each process's DRM files, remembering per PID what its last walk found."""

    def __init__(self, proc_root: str, fs: FsReads):
        self._proc = proc_root
        self._fs = fs
        self._memo: dict[int, _Memo] = {}
        self._partial: dict[int, _Walk] = {}       # walks the budget cut short, to go on with
        self.walks = 0
        self.crowded: set[int] = set()             # PIDs with more open files than are read

    @property
    def remembered(self) -> set[int]:
        """PIDs whose DRM files were found and are remembered (read cheaply next time)."""
        return {pid for pid, memo in self._memo.items() if memo.fds}

    def forget_except(self, alive: set[int]) -> None:
        for kept in (self._memo, self._partial):
            for pid in set(kept) - alive:
                del kept[pid]
        self.crowded &= alive

    def files(self, pid: int, listed: Listed | None, force: bool = False,
              go_on: Callable[[], bool] = lambda: True) -> list[DrmFile]:
        """The DRM files ``pid`` holds, one per client; ``listed``: what the kernel lists under
        its tgid (None: no list); ``force``: walk whatever is remembered. A walk asks
        ``go_on`` every ``WALK_STEP`` links: where it says no, ``Deferred`` is raised and the
        walk goes on from there at the next call."""
        memo = self._memo.get(pid)
        held = memo is not None and bool(memo.fds)
        fd_count = self._fd_count(pid) if listed is None and held else 0
        if memo is not None and not force and listed == memo.listed \
                and (listed is not None or (held and fd_count == memo.fd_count > 0)):
            kept = self._read_remembered(pid, memo)
            if kept is not None:
                self._partial.pop(pid, None)
                return kept
        return self._walk(pid, listed, fd_count, listed is not None and not force, go_on)

    def _fd_count(self, pid: int) -> int:
        try:
            return os.stat(os.path.join(self._proc, str(pid), "fd")).st_size
        except OSError:
            return 0

    def _read_remembered(self, pid: int, memo: _Memo) -> list[DrmFile] | None:
        """The remembered fds' clients; ``None`` where one no longer shows a DRM client."""
        out = []
        for fd, minor in memo.fds:
            info = self._fdinfo(pid, fd)
            if info is None:
                return None
            out.append(DrmFile(fd, minor, info))
        return out

    def _walk(self, pid: int, listed: Listed | None, fd_count: int, stop_early: bool,
              go_on: Callable[[], bool]) -> list[DrmFile]:
        walk = self._partial.pop(pid, None)
        if walk is None or walk.listed != listed:
            walk = self._start_walk(pid, listed, fd_count, stop_early)
            if walk is None:
                return []
        links = os.path.join(self._proc, str(pid), "fd", "")    # + the fd: no join a link
        fds, wanted, found = walk.fds, walk.wanted, walk.found
        for at in range(walk.at, len(fds)):
            if wanted is not None and not any(wanted.values()):
                break
            if at % WALK_STEP == 0 and at and not go_on():
                walk.at = at
                self._partial[pid] = walk
                raise Deferred()
            fd = fds[at]
            try:
                match = DRM_LINK.fullmatch(self._fs.link_or_raise(links + fd))
            except PermissionError as exc:
                raise Refused(REFUSED_FD) from exc
            except OSError:
                continue                   # closed meanwhile
            if match is None or walk.drm_reads >= MAX_DRM_FILES_PER_PID:
                continue
            minor = int(match.group(1))
            if wanted is not None and not wanted.get(minor):
                continue                   # a node whose listed clients were all found
            walk.drm_reads += 1
            info = self._fdinfo(pid, fd)
            if info is None:
                continue
            key = client_key(info, pid, fd)
            if key in found:
                continue                   # a dup of a client already found
            found[key] = DrmFile(fd, minor, info)
            if wanted is not None:
                _tick_off(wanted, minor, info.client_id, listed)
        self._remember(pid, walk)
        return list(found.values())

    def _remember(self, pid: int, walk: _Walk) -> None:
        """What the walk found, one fd a client; without the kernel's list, a process without
        DRM files is not remembered (it is walked again only at a rescan)."""
        if walk.listed is None and not walk.found:
            self._memo.pop(pid, None)
            return
        fd_count = walk.fd_count or (self._fd_count(pid) if walk.listed is None else 0)
        self._memo[pid] = _Memo(fd_count, walk.listed, [(f.fd, f.minor) for f in
                                                        walk.found.values()
                                                        if f.minor is not None])

    def _start_walk(self, pid: int, listed: Listed | None, fd_count: int,
                    stop_early: bool) -> _Walk | None:
        self.walks += 1
        fd_dir = os.path.join(self._proc, str(pid), "fd")
        try:
            fds = self._fs.names_or_raise(fd_dir, MAX_FDS_PER_PID)
        except PermissionError as exc:
            raise Refused(REFUSED_FD) from exc
        except OSError:
            self._memo.pop(pid, None)
            return None
        if len(fds) == MAX_FDS_PER_PID and pid not in self.crowded:
            self.crowded.add(pid)
            log.info("PID %d holds %d or more open files: its DRM clients are looked for among "
                     "the first %d only", pid, MAX_FDS_PER_PID, MAX_FDS_PER_PID)
        return _Walk(fds, listed, fd_count, _wanted(listed) if stop_early else None)

    def _fdinfo(self, pid: int, fd: str) -> DrmFdinfo | None:
        try:
            data = self._fs.data_or_raise(os.path.join(self._proc, str(pid), "fdinfo", fd))
        except PermissionError as exc:
            raise Refused(REFUSED_FDINFO) from exc
        except (OSError, UnsafeFile):
            return None
        return parse_fdinfo(data.decode("utf-8", "replace"))


def _wanted(listed: Listed | None) -> dict[int, int]:
    """Clients still to find per minor."""
    wanted: dict[int, int] = {}
    for minor, _ in listed or ():
        wanted[minor] = wanted.get(minor, 0) + 1
    return wanted


def _tick_off(wanted: dict[int, int], minor: int, client_id: int | None,
              listed: Listed | None) -> None:
    """A client found on ``minor`` counts against what is listed there: where the kernel
    prints IDs, only one of the IDs it lists under this tgid (an inherited client listed
    under another process does not stand for this one's own)."""
    ids = {i for m, i in listed or () if m == minor}
    if None in ids or client_id in ids:
        wanted[minor] = wanted.get(minor, 0) - 1
