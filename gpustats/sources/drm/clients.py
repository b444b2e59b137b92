"""DRM clients found in ``/proc``, and the engine time each used since the last scan.

A DRM file is an fd whose ``<proc>/<pid>/fd/<fd>`` link names ``/dev/dri/card<N>`` or
``/dev/dri/renderD<N>``; its ``fdinfo/<fd>`` holds the client's counters (``fdinfo.py``).

Counting each client once: the spec (drm-usage-stats.rst) makes ``drm-client-id`` unique to
one open file (globally, or per device: so it is keyed with ``drm-pdev``); a dup'ed,
inherited or passed fd shows the same client, in the same or another PID. It is counted once
and attributed to the lowest PID holding it. A driver that prints no client ID gets one
client per (PID, fd).

Bounding the cost: PIDs known to hold a DRM fd are read every scan, a PID not seen before
once when it appears, and every PID again every ``rescan_every`` scans (a process may open
the GPU later); of a process's open files, the first ``MAX_FDS_PER_PID``. Reading another
user's fds needs CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (``proc_access``): a refused PID is
counted, logged once per kind of read (naming the capability the daemon lacks), retried at
the next full rescan, and while any is refused for want of a capability the scan is not
``complete``. A PID refused although the daemon holds both (a security module, another user
namespace) is ``unreadable``: it alone stays unknown, and the scan of the others is complete.

Engine time per client and tick (deltas of cumulative counters):
- A counter may dip briefly (spec): the larger previous value is kept until it catches up.
- A client found by the daemon's first scan is a baseline (0 this tick); one found by a later
  scan opened since the previous one (or was only now found by a rescan), so its whole
  cumulative value counts in this tick.
- i915 and amdgpu: Δ``drm-engine-<class>`` ns / 1e9. xe: Δ``drm-cycles-<class>`` /
  Δ``drm-total-cycles-<class>`` × the time since the client's previous read (for a client new
  since the last scan: its cycles over the GPU clock's rate seen from that device's other
  clients, else 0).
- These are *engine* seconds: a class with N engines can give up to N seconds per second.
  Nothing is divided by capacity here, so two clients whose ``drm-engine-gfx`` grow 3:1 get
  busy seconds 3:1 whatever the class; a utilization divides by capacity (``intel.py``).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from gpustats.hostfs import UnsafeFile
from gpustats.model.record import record
from gpustats.sources.drm.fdinfo import DrmFdinfo, parse_fdinfo
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.proc_access import READ_FD, READ_FDINFO, missing, read_effective, \
    refusal_words

log = logging.getLogger(__name__)

_DRM_LINK = re.compile(r"/dev/dri/(?:card|renderD)(\d+)")
LOCAL_REGIONS = ("vram", "local")        # amdgpu vram, xe vram<N>, i915 local<N>
REFUSED_FD = READ_FD                     # listing <pid>/fd or reading one of its links
REFUSED_FDINFO = READ_FDINFO
# The open files looked at per process: a GPU process opens /dev/dri early, and a server
# holding a million sockets costs a million link reads a scan otherwise.
MAX_FDS_PER_PID = 4096


@record
class ClientTick:
    """One DRM client in one scan."""

    pid: int                                  # the lowest PID holding it
    driver: str
    pdev: str | None                          # PCI address, from drm-pdev
    node_minor: int | None                    # from the /dev/dri node name in the fd's link
    engine_seconds: dict[str, float]          # engine class -> busy engine seconds this tick
    capacity: dict[str, int]
    local_memory_bytes: int | None            # resident in device memory; None: not told

    @property
    def busy_seconds(self) -> float:
        return sum(self.engine_seconds.values())


@record
class ClientScan:
    clients: tuple[ClientTick, ...]
    interval_seconds: float | None            # since the previous scan; None on the first
    complete: bool                            # no process's files were refused for want
                                              # of a capability
    unreadable: tuple[int, ...] = ()          # PIDs refused although the daemon holds them


@dataclass
class _Kept:
    """A client's counters as of its last scan (the larger value where one dipped)."""

    engine_ns: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    seen_at: float | None = None              # monotonic time of the scan that last found it
    unseen_scans: int = 0


def local_memory(info: DrmFdinfo) -> int | None:
    """Resident bytes in the device's own memory regions; ``None`` where it names none."""
    sizes = [info.resident_bytes(r) for r in info.regions() if r.startswith(LOCAL_REGIONS)]
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


class ClientScanner:
    """Scans ``<proc>`` for the DRM clients of some drivers, scan after scan."""

    def __init__(self, proc_root: str, fs: FsReads, drivers: Iterable[str], *,
                 rescan_every: int = 12, monotonic: Callable[[], float],
                 capabilities: Callable[[], int | None] = read_effective):
        self._proc = proc_root
        self._fs = fs
        self._drivers = frozenset(drivers)
        self._rescan_every = max(1, rescan_every)
        self._monotonic = monotonic
        self._scans = 0
        self._last_at: float | None = None
        self._seen: set[int] = set()              # PIDs listed at least once
        self._holders: set[int] = set()           # PIDs that held a DRM fd when last read
        self._refused: set[int] = set()           # for want of a capability
        self._unreadable: set[int] = set()        # whatever the daemon's capabilities
        self._capabilities = capabilities()       # the daemon's effective set, once
        self._logged: set[str] = set()            # kinds of refusal logged
        self._crowded: set[int] = set()           # PIDs with more open files than are read
        self._kept: dict[tuple, _Kept] = {}
        self._gpu_hz: dict[str | None, float] = {}   # xe: the GPU clock's rate per device
        self.refusals: dict[str, int] = {REFUSED_FD: 0, REFUSED_FDINFO: 0}

    def scan(self) -> ClientScan:
        now = self._monotonic()
        interval = now - self._last_at if self._last_at is not None else None
        found = self._find_clients(self._pids_to_read())
        first = self._scans == 0
        clients = tuple(self._tick(key, pid, minor, info, now, first)
                        for key, (pid, minor, info) in found.items())
        self._age_unseen(found)
        self._scans += 1
        self._last_at = now
        return ClientScan(clients, interval, not self._refused, tuple(sorted(self._unreadable)))

    def _pids_to_read(self) -> list[int]:
        pids = sorted(int(n) for n in self._fs.names(self._proc) if n.isascii() and n.isdigit())
        alive = set(pids)
        self._seen &= alive
        self._holders &= alive
        self._refused &= alive
        self._unreadable &= alive
        self._crowded &= alive
        if self._scans % self._rescan_every == 0:
            return pids
        return [p for p in pids if p in self._holders or p not in self._seen]

    def _find_clients(self, pids: list[int]) -> dict[tuple, tuple[int, int | None, DrmFdinfo]]:
        """Each client once, under its key, with the lowest PID holding it (``pids`` sorted)."""
        found: dict[tuple, tuple[int, int | None, DrmFdinfo]] = {}
        for pid in pids:
            self._seen.add(pid)
            files = self._drm_files(pid)
            if files is None:
                continue                              # refused: _refuse placed it
            self._refused.discard(pid)
            self._unreadable.discard(pid)
            if files:
                self._holders.add(pid)
            else:
                self._holders.discard(pid)
            for fd, minor, info in files:
                if info.driver not in self._drivers:
                    continue
                key = (info.pdev, info.client_id) if info.client_id is not None \
                    else (info.pdev, pid, fd)
                found.setdefault(key, (pid, minor, info))
        return found

    def _drm_files(self, pid: int) -> list[tuple[str, int | None, DrmFdinfo]] | None:
        """The DRM files a PID holds (fd, node minor, stats); ``None`` when refused. A process
        that ended meanwhile holds none."""
        fd_dir = os.path.join(self._proc, str(pid), "fd")
        try:
            fds = self._fs.names_or_raise(fd_dir, MAX_FDS_PER_PID)
        except PermissionError:
            self._refuse(REFUSED_FD, pid)
            return None
        except OSError:
            return []
        if len(fds) == MAX_FDS_PER_PID and pid not in self._crowded:
            self._crowded.add(pid)
            log.info("PID %d holds %d or more open files: its DRM clients are looked for among "
                     "the first %d only", pid, MAX_FDS_PER_PID, MAX_FDS_PER_PID)
        files: list[tuple[str, int | None, DrmFdinfo]] = []
        for fd in fds:
            try:
                target = self._fs.link_or_raise(os.path.join(fd_dir, fd))
            except PermissionError:
                self._refuse(REFUSED_FD, pid)
                return None
            except OSError:
                continue                              # closed meanwhile
            match = _DRM_LINK.fullmatch(target)
            if match is None:
                continue
            try:
                data = self._fs.data_or_raise(os.path.join(self._proc, str(pid), "fdinfo", fd))
            except PermissionError:
                self._refuse(REFUSED_FDINFO, pid)
                return None
            except (OSError, UnsafeFile):
                continue
            info = parse_fdinfo(data.decode("utf-8", "replace"))
            if info is not None:
                files.append((fd, int(match.group(1)), info))
        return files

    def _refuse(self, kind: str, pid: int) -> None:
        """A refused PID: for want of a capability (every GPU's processes unknown), or
        unreadable whatever the capabilities (that PID alone unknown)."""
        self.refusals[kind] += 1
        lacking = missing(kind, self._capabilities)
        if not lacking:
            if not self._unreadable:
                log.warning("PID %d: %s; its GPU use, if any, stays unattributed. Other such "
                            "PIDs are named in the source's reason, not logged", pid,
                            refusal_words(kind, lacking))
            self._unreadable.add(pid)
            self._refused.discard(pid)
            return
        self._refused.add(pid)
        self._unreadable.discard(pid)
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning("%s; GPU processes are not fully known. Refusals are counted, not "
                        "logged again", refusal_words(kind, lacking))

    def _tick(self, key: tuple, pid: int, minor: int | None, info: DrmFdinfo,
              now: float, first: bool) -> ClientTick:
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = _Kept()
            if first:                      # a baseline: what it did before the daemon came
                kept.engine_ns = dict(info.engine_ns)
                kept.cycles = dict(info.cycles)
                kept.total_cycles = dict(info.total_cycles)
        interval = now - kept.seen_at if kept.seen_at is not None else None
        kept.seen_at, kept.unseen_scans = now, 0
        seconds = {e: ns / 1e9 for e, ns in _grow(kept.engine_ns, info.engine_ns).items()}
        for engine, busy in self._cycle_seconds(kept, info, interval).items():
            seconds.setdefault(engine, busy)       # a class timed in ns too is not counted twice
        return ClientTick(pid=pid, driver=info.driver, pdev=info.pdev, node_minor=minor,
                          engine_seconds=seconds, capacity=dict(info.capacity),
                          local_memory_bytes=local_memory(info))

    def _cycle_seconds(self, kept: _Kept, info: DrmFdinfo,
                       interval: float | None) -> dict[str, float]:
        """xe's busy cycles as engine seconds over ``interval``, the time since this client was
        last found. ``drm-total-cycles`` is a GPU timestamp: where it goes back (the GPU was
        reset) the client's clock is taken afresh."""
        new = not kept.total_cycles
        busy = _grow(kept.cycles, info.cycles)
        out = {}
        for engine, cycles in busy.items():
            total = info.total_cycles.get(engine)
            before = kept.total_cycles.get(engine)
            if total is None:
                continue                       # drm-maxfreq-<class> instead: not read
            if before is not None and interval and total > before:
                out[engine] = cycles / (total - before) * interval
                self._gpu_hz[info.pdev] = (total - before) / interval
            elif before is None and new and self._gpu_hz.get(info.pdev):
                out[engine] = cycles / self._gpu_hz[info.pdev]
            else:
                out[engine] = 0.0
            kept.total_cycles[engine] = total
        return out

    def _age_unseen(self, found: dict) -> None:
        """A client not found for ``rescan_every`` scans is forgotten (closed; IDs are not
        reused). Kept that long, one whose holder could not be read for a while is not
        counted from zero again when it is read."""
        for key in [k for k in self._kept if k not in found]:
            kept = self._kept[key]
            kept.unseen_scans += 1
            if kept.unseen_scans > self._rescan_every:
                del self._kept[key]


def _grow(kept: dict[str, int], now: dict[str, int]) -> dict[str, int]:
    """Each counter's growth since ``kept`` (a missing one: from 0), and ``kept`` advanced;
    a counter below its kept value grew by 0 and keeps the kept value (spec: brief dips)."""
    grown = {}
    for name, value in now.items():
        before = kept.get(name, 0)
        grown[name] = max(0, value - before)
        kept[name] = max(before, value)
    return grown
